// --py-stack: CPython's layouts (3.10 to 3.13) and frame naming
// (docs/python.md). The per-version offsets were checked with offsetof
// against each version's own headers (Include/internal/pycore_*.h, built
// with Py_BUILD_CORE: 3.10.13, 3.11.2 and 3.11.7, 3.12.1, 3.13.0); 3.13
// publishes its own in _Py_DebugOffsets at the start of _PyRuntime, read
// from there.
#include "cudatrace/target/python.h"

#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <regex>

#include "cudatrace/target/elf_file.h"
#include "cudatrace/target/process.h"

namespace cudatrace {
namespace {

// A code object's bytes read to check it: up to the end of its identity.
constexpr std::uint32_t kCodeHeadMax = 256;

bool read_mem(pid_t pid, std::uint64_t addr, void* out, std::size_t n) {
  if (!addr) return false;
  iovec local{out, n};
  iovec remote{reinterpret_cast<void*>(addr), n};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(n);
}

template <typename T>
bool read_val(pid_t pid, std::uint64_t addr, T& out) {
  return read_mem(pid, addr, &out, sizeof out);
}

void put_utf8(std::string& s, std::uint32_t c) {
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xc0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xe0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    s += static_cast<char>(0xf0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (c & 0x3f));
  }
}

// A str object: compact strings only (what code objects' names are).
bool read_unicode(pid_t pid, const PyCodeLayout& l, std::uint64_t obj, std::string& out) {
  std::int64_t length = 0;
  std::uint32_t state = 0;
  if (!read_val(pid, obj + 16, length) || !read_val(pid, obj + 32, state)) return false;
  if (length < 0 || length > 4096) return false;
  const unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
  if (!compact) return false;
  const std::uint64_t data = obj + (ascii ? l.ascii_size : l.compact_size);
  if (kind != 1 && kind != 2 && kind != 4) return false;
  std::string raw(static_cast<std::size_t>(length) * kind, '\0');
  if (length && !read_mem(pid, data, raw.data(), raw.size())) return false;
  out.clear();
  if (ascii) {
    out = std::move(raw);
    return true;
  }
  for (std::int64_t i = 0; i < length; ++i) {
    std::uint32_t c = 0;
    std::memcpy(&c, raw.data() + i * kind, kind);
    put_utf8(out, c);
  }
  return true;
}

bool read_bytes(pid_t pid, std::uint64_t obj, std::string& out) {
  std::int64_t size = 0;
  if (!read_val(pid, obj + 16, size) || size < 0 || size > (1 << 20)) return false;
  out.assign(static_cast<std::size_t>(size), '\0');
  return !size || read_mem(pid, obj + 32, out.data(), out.size());
}

struct Table {
  ct_py_layout bpf;
  PyCodeLayout code;
};

// Checked with offsetof against the versions' headers (see the top).
std::optional<Table> table_for(int minor) {
  Table t{};
  ct_py_layout& b = t.bpf;
  PyCodeLayout& c = t.code;
  c.minor = minor;
  b.cframe_frame = CT_PY_NONE;
  b.frame_owner = CT_PY_NONE;
  b.cstack_owner = 0xff;
  b.tstate_next = 8;
  b.tstate_datastack = CT_PY_NONE;
  switch (minor) {
    case 10:
      b.interp_head = 32, b.interp_threads = 8, b.tstate_thread_id = 176, b.tstate_frame = 24;
      b.frame_code = 32, b.frame_previous = 24, b.frame_instr = 96, b.instr_is_lasti = 1;
      c.filename = 104, c.name = 112, c.firstlineno = 40, c.linetable = 120;
      c.ascii_size = 48, c.compact_size = 72;
      return t;
    case 11:
      b.interp_head = 40, b.interp_threads = 16, b.tstate_thread_id = 152, b.tstate_frame = 56;
      b.tstate_datastack = 296;
      b.cframe_frame = 8, b.frame_code = 32, b.frame_previous = 48, b.frame_instr = 56;
      c.filename = 112, c.name = 120, c.qualname = 128, c.firstlineno = 72, c.linetable = 136;
      c.code_adaptive = 184, c.ascii_size = 48, c.compact_size = 72;
      return t;
    case 12:
      b.interp_head = 40, b.interp_threads = 72, b.tstate_thread_id = 136, b.tstate_frame = 56;
      b.tstate_datastack = 232;
      b.cframe_frame = 0, b.frame_code = 0, b.frame_previous = 8, b.frame_instr = 56;
      b.frame_owner = 70, b.cstack_owner = 3;
      c.filename = 112, c.name = 120, c.qualname = 128, c.firstlineno = 68, c.linetable = 136;
      c.code_adaptive = 192, c.ascii_size = 40, c.compact_size = 56, c.version = 92;
      return t;
    case 13:  // as 3.13.0's _Py_DebugOffsets says; used when that cannot be read (frames one by one)
      b.interp_head = 632, b.interp_threads = 7344, b.tstate_thread_id = 152, b.tstate_frame = 72;
      b.frame_code = 0, b.frame_previous = 8, b.frame_instr = 56, b.frame_owner = 70, b.cstack_owner = 3;
      c.filename = 112, c.name = 120, c.qualname = 128, c.firstlineno = 68, c.linetable = 136;
      c.code_adaptive = 200, c.ascii_size = 40, c.compact_size = 56, c.version = 92;
      return t;
  }
  return std::nullopt;
}

// 3.13's _Py_DebugOffsets (Include/internal/pycore_runtime.h), u64 fields
// at these offsets from the start of _PyRuntime.
bool from_debug_offsets(std::string_view d, Table& t) {
  const auto at = [&](std::size_t off) {
    std::uint64_t v = 0;
    std::memcpy(&v, d.data() + off, 8);
    return v;
  };
  if (d.size() < 568 || d.substr(0, 8) != std::string_view("xdebugpy", 8)) return false;
  if (at(16) != 0) return false;  // free-threaded
  const auto u32 = [&](std::size_t off, std::uint32_t& out) {
    const std::uint64_t v = at(off);
    if (v > 0xffff) return false;
    out = static_cast<std::uint32_t>(v);
    return true;
  };
  ct_py_layout& b = t.bpf;
  PyCodeLayout& c = t.code;
  std::uint32_t ob_sval = 0, localsplusnames = 0;
  const bool ok = u32(40, b.interp_head) && u32(72, b.interp_threads) && u32(168, b.tstate_next) &&
                  u32(184, b.tstate_frame) && u32(192, b.tstate_thread_id) && u32(208, b.tstate_datastack) &&
                  u32(232, b.frame_previous) &&
                  u32(240, b.frame_code) && u32(248, b.frame_instr) && u32(264, b.frame_owner) &&
                  u32(280, c.filename) && u32(288, c.name) && u32(296, c.qualname) && u32(304, c.linetable) &&
                  u32(312, c.firstlineno) && u32(328, localsplusnames) && u32(344, c.code_adaptive) &&
                  u32(560, c.ascii_size) && u32(528, ob_sval);
  c.version = localsplusnames - 4;  // co_version, not published, is the field before (3.13.0's code.h)
  if (localsplusnames < 24) return false;
  // What this reader assumes and 3.13 keeps: bytes at 32, the type's name at 24.
  return ok && ob_sval == 32 && at(376) == 24 && at(360) == 8;
}

std::int64_t read_varint(const std::string& t, std::size_t& i) {
  if (i >= t.size()) return 0;
  unsigned char b = static_cast<unsigned char>(t[i++]);
  std::int64_t v = b & 63;
  int shift = 0;
  while ((b & 64) && i < t.size()) {
    b = static_cast<unsigned char>(t[i++]);
    shift += 6;
    v |= std::int64_t(b & 63) << shift;
  }
  return v;
}

std::int64_t read_svarint(const std::string& t, std::size_t& i) {
  const std::int64_t u = read_varint(t, i);
  return u & 1 ? -(u >> 1) : u >> 1;
}

// Where a code object's identity is (fields that do not change while it
// lives) and how much of it is read; false when that is more than is read.
bool with_identity(PyCodeLayout& c) {
  c.ident_at = c.version ? c.version & ~7u : std::min({c.filename, c.name, c.linetable});
  c.ident_len = c.version ? 8 : std::max({c.filename, c.name, c.qualname, c.linetable}) + 8 - c.ident_at;
  c.head_len = std::max({c.ident_at + c.ident_len, c.filename + 8, c.name + 8, c.qualname + 8, c.linetable + 8,
                         c.firstlineno + 4, c.version + 4});
  return c.ident_len <= CT_PY_IDENT_SPAN && c.ident_at >= 16 && c.head_len <= kCodeHeadMax;
}

}  // namespace

std::optional<PyCodeLayout> py_code_layout(int minor) {
  std::optional<Table> t = table_for(minor);
  if (!t || !with_identity(t->code)) return std::nullopt;
  return t->code;
}

int py_line(int minor, const std::string& t, int firstlineno, std::int64_t offset) {
  if (offset < 0) return firstlineno;
  std::int64_t start = 0;
  int line = firstlineno;
  if (minor == 10) {  // (bytecode bytes, signed line delta) pairs; -128: no line
    for (std::size_t i = 0; i + 1 < t.size(); i += 2) {
      const std::int64_t end = start + static_cast<unsigned char>(t[i]);
      const int delta = static_cast<signed char>(t[i + 1]);
      int here = -1;
      if (delta != -128) here = line += delta;
      if (offset < end && offset >= start) return here > 0 ? here : 0;
      start = end;
    }
    return 0;
  }
  std::size_t i = 0;
  while (i < t.size()) {
    const auto b = static_cast<unsigned char>(t[i++]);
    if (!(b & 0x80)) return 0;  // out of step
    const int code = (b >> 3) & 15;
    const std::int64_t end = start + ((b & 7) + 1) * 2;
    int here = -1;
    if (code == 15) {
    } else if (code == 14) {
      here = line += static_cast<int>(read_svarint(t, i));
      read_varint(t, i), read_varint(t, i), read_varint(t, i);
    } else if (code == 13) {
      here = line += static_cast<int>(read_svarint(t, i));
    } else if (code >= 10) {
      here = line += code - 10;
      i += 2;
    } else {
      here = line;
      i += 1;
    }
    if (offset < end && offset >= start) return here > 0 ? here : 0;
    start = end;
  }
  return 0;
}

namespace {

// The file offset of PyCode_Type's tp_dealloc (a static function of the
// same file), 0 if it cannot be found. The file holds the pointer's value
// where the static linker applied its relocation in place (GNU ld does);
// else the process's memory does, once the loader relocated the file.
std::uint64_t code_deallocator(const ElfFile& elf, pid_t pid, std::uint64_t bias) {
  const std::uint64_t type = elf.exported_object("PyCode_Type");
  if (!type) return 0;
  constexpr std::uint64_t kTpDealloc = 48;  // PyTypeObject: PyObject_VAR_HEAD, tp_name, tp_basicsize, tp_itemsize
  const std::optional<ElfFile::Section> text = elf.section(".text");
  if (!text) return 0;
  const auto in_text = [&](std::uint64_t vaddr) { return vaddr >= text->address && vaddr < text->address + text->size; };
  std::uint64_t vaddr = 0, offset = 0;
  const std::string_view b = elf.bytes_at(type + kTpDealloc);
  if (b.size() >= 8) std::memcpy(&vaddr, b.data(), 8);
  if (!in_text(vaddr)) {
    std::uint64_t addr = 0;
    if (!read_val(pid, bias + type + kTpDealloc, addr) || addr < bias || !in_text(addr - bias)) return 0;
    vaddr = addr - bias;
  }
  return elf.vaddr_to_offset(vaddr, offset) ? offset : 0;
}

}  // namespace

std::optional<PyInterpreter> find_python(pid_t pid, const ElfFile& elf, const Mapping& m, std::string& why) {
  const std::uint64_t runtime = elf.exported_object("_PyRuntime");
  if (!runtime) return std::nullopt;
  std::uint64_t map_vaddr = 0;
  if (!elf.offset_to_vaddr(m.offset, map_vaddr)) {
    why = "cannot place its _PyRuntime in memory";
    return std::nullopt;
  }
  const std::uint64_t bias = m.start - map_vaddr;
  // The version: Py_Version (3.11+), else the file's name (libpython3.10.so, python3.10).
  int minor = -1;
  if (const std::uint64_t v = elf.exported_object("Py_Version")) {
    const std::string_view b = elf.bytes_at(v);
    if (b.size() >= 4) {
      std::uint32_t hex = 0;
      std::memcpy(&hex, b.data(), 4);
      if ((hex >> 24) == 3) minor = static_cast<int>((hex >> 16) & 0xff);
    }
  }
  if (minor < 0) {
    std::smatch match;
    const std::string name = m.path.substr(m.path.rfind('/') + 1);
    static const std::regex version_re("python3\\.([0-9]+)");
    if (std::regex_search(name, match, version_re)) minor = std::stoi(match[1]);
  }
  if (minor < 0) {
    why = "its Python version cannot be told (no Py_Version, no version in the file's name)";
    return std::nullopt;
  }
  PyInterpreter out;
  out.version = "3." + std::to_string(minor);
  std::optional<Table> t = table_for(minor);
  if (!t) {
    why = "Python " + out.version + " is not one whose frames cudatrace can read (3.10 to 3.13)";
    return std::nullopt;
  }
  if (minor >= 13) {
    const std::string_view d = elf.bytes_at(runtime);
    Table published = *t;
    if (d.size() >= 8 && d.substr(0, 8) == std::string_view("xdebugpy", 8) && !from_debug_offsets(d, published)) {
      why = "Python " + out.version + "'s _Py_DebugOffsets are not the layout cudatrace reads (a free-threaded build?)";
      return std::nullopt;
    }
    t = published;
  }
  out.bpf = t->bpf;
  out.bpf.runtime = bias + runtime;
  // The frame's fields are read in one go: the bytes up to the last of them.
  const ct_py_layout& b = out.bpf;
  std::uint32_t span = std::max({b.frame_code + 8, b.frame_previous + 8, b.frame_instr + (b.instr_is_lasti ? 4u : 8u)});
  if (b.frame_owner != CT_PY_NONE) span = std::max(span, b.frame_owner + 1);
  if (span > CT_PY_FRAME_SPAN) {
    why = "Python " + out.version + "'s frames are larger than cudatrace reads";
    return std::nullopt;
  }
  out.bpf.frame_span = static_cast<std::uint16_t>(span);
  // So are the thread state's.
  std::uint32_t tstate_span = std::max(b.tstate_thread_id, b.tstate_frame) + 8;
  if (b.tstate_datastack != CT_PY_NONE) tstate_span = std::max(tstate_span, b.tstate_datastack + 16);
  if (tstate_span > CT_PY_TSTATE_SPAN) {
    why = "Python " + out.version + "'s thread states are larger than cudatrace reads";
    return std::nullopt;
  }
  out.bpf.tstate_span = tstate_span;
  out.code = t->code;
  if (!with_identity(out.code)) {
    why = "Python " + out.version + "'s code objects are not the layout cudatrace reads";
    return std::nullopt;
  }
  out.bpf.code_ident_at = static_cast<std::uint16_t>(out.code.ident_at);
  out.bpf.code_ident_len = static_cast<std::uint16_t>(out.code.ident_len);
  out.code_dealloc_offset = code_deallocator(elf, pid, bias);
  out.file = host_path(pid, m);
  return out;
}

void PyNames::forget(pid_t pid) {
  layouts_.erase(pid);
  codes_.erase(codes_.lower_bound({pid, 0}), codes_.lower_bound({pid + 1, 0}));
  code_types_.erase(code_types_.lower_bound({pid, 0}), code_types_.lower_bound({pid + 1, 0}));
}

bool PyNames::is_code_type(pid_t pid, std::uint64_t type) {
  const auto [it, fresh] = code_types_.try_emplace({pid, type}, false);
  if (!fresh) return it->second;
  std::uint64_t name_ptr = 0;
  char name[5] = {};
  it->second = read_val(pid, type + 24, name_ptr) && read_mem(pid, name_ptr, name, 5) && std::memcmp(name, "code", 5) == 0;
  return it->second;
}

// Reads the head of the code object at `addr` (l.head_len bytes) into `head`: true when it is a live code object whose
// identity is `ident`. A freed one fails: pymalloc puts its free list's
// link where the reference count was, malloc its own over the type.
bool PyNames::read_head(pid_t pid, const PyCodeLayout& l, std::uint64_t addr, std::uint64_t ident, std::uint8_t* head) {
  std::uint64_t refcnt = 0, type = 0;
  if (!read_mem(pid, addr, head, l.head_len)) return false;
  std::memcpy(&refcnt, head, 8);
  std::memcpy(&type, head + 8, 8);
  std::uint32_t version = 1;  // 0 on 3.12+: the numbers ran out, it no longer tells code objects apart
  if (l.version) std::memcpy(&version, head + l.version, 4);
  return refcnt >= 1 && refcnt < (std::uint64_t(1) << 32) && version && is_code_type(pid, type) &&
         ct_py_ident(head + l.ident_at, l.ident_len) == ident;
}

PyNames::Code* PyNames::code(pid_t pid, const PyCodeLayout& l, std::uint64_t addr, std::uint64_t ident) {
  if (!ident) return nullptr;  // not read at the call
  const auto it = codes_.find({pid, addr});
  if (it != codes_.end() && it->second.ident == ident) return &it->second;
  std::uint8_t head[kCodeHeadMax];
  if (!read_head(pid, l, addr, ident, head)) return nullptr;
  const auto field = [&](std::uint32_t off) {
    std::uint64_t v = 0;
    std::memcpy(&v, head + off, 8);
    return v;
  };
  Code c;
  c.ident = ident;
  std::int32_t first = 0;
  std::memcpy(&first, head + l.firstlineno, 4);
  c.firstlineno = first;
  // The code object holds its name, file and line table: while it lives
  // (it still does after they were read) they are its own.
  if (!read_unicode(pid, l, field(l.filename), c.file) ||
      !read_unicode(pid, l, field(l.qualname ? l.qualname : l.name), c.func) ||
      !read_bytes(pid, field(l.linetable), c.linetable) || !read_head(pid, l, addr, ident, head))
    return nullptr;
  return &codes_.insert_or_assign(std::make_pair(pid, addr), std::move(c)).first->second;  // over one gone
}

void PyNames::name(pid_t pid, const ct_py_frame* frames, std::size_t n, std::vector<PyFrame>& out) {
  const auto layout = layouts_.find(pid);
  if (layout == layouts_.end()) {
    out.clear();
    return;
  }
  const PyCodeLayout& l = layout->second;
  out.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    PyFrame& f = out[i];
    Code* c = code(pid, l, frames[i].code, frames[i].ident);
    if (!c) {
      ++unnamed_;
      f.func.clear(), f.file.clear(), f.line = 0;  // never a name the call may not have had
      continue;
    }
    // The instruction's byte offset in the bytecode.
    const std::int64_t offset = l.minor == 10
                                    ? static_cast<std::int64_t>(frames[i].instr) * 2
                                    : static_cast<std::int64_t>(frames[i].instr - (frames[i].code + l.code_adaptive));
    const auto [line, fresh] = c->lines.try_emplace(offset, 0);
    if (fresh) line->second = py_line(l.minor, c->linetable, c->firstlineno, offset);
    f.func.assign(c->func), f.file.assign(c->file), f.line = line->second;
  }
}

}  // namespace cudatrace
