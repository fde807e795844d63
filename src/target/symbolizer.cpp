#include "cudatrace/target/symbolizer.h"

#include "cudatrace/clock.h"
#include "cudatrace/target/gpu_code.h"

#include <sys/uio.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace cudatrace {

const ElfFile* Symbolizer::hold_file(pid_t pid, const Mapping& m, std::vector<FileKey>& keys) {
  if (m.path.empty()) return nullptr;
  FileKey key{m.inode, m.path};
  auto it = files_.find(key);
  if (it == files_.end()) {
    std::string error;
    File f;
    f.elf = ElfFile::open(host_path(pid, m), error);
    it = files_.emplace(key, std::move(f)).first;
  }
  if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
    ++it->second.users;
    keys.push_back(std::move(key));
  }
  return it->second.elf.get();
}

void Symbolizer::capture(pid_t pid, std::vector<Mapping> maps) {
  std::vector<const ElfFile*> files;
  std::vector<FileKey> keys;
  for (const Mapping& m : maps) files.push_back(hold_file(pid, m, keys));
  release(pid);  // after the new references: files still mapped stay open
  read_for_a_miss_.erase(pid);
  maps_[pid] = std::move(maps);
  files_of_[pid] = std::move(files);
  keys_of_[pid] = std::move(keys);
}

void Symbolizer::release(pid_t pid) {
  auto keys = keys_of_.find(pid);
  if (keys == keys_of_.end()) return;
  for (const FileKey& key : keys->second) {
    auto it = files_.find(key);
    if (it != files_.end() && --it->second.users == 0) files_.erase(it);
  }
  keys_of_.erase(keys);
}

void Symbolizer::forget(pid_t pid) {
  release(pid);
  kernel_handles_.erase(pid);
  handle_names_.forget(pid);
  python_.forget(pid);
  maps_.erase(pid);
  files_of_.erase(pid);
  read_for_a_miss_.erase(pid);
}

std::vector<pid_t> Symbolizer::processes() const {
  std::vector<pid_t> out;
  for (const auto& [pid, maps] : maps_) out.push_back(pid);
  return out;
}

const Mapping* Symbolizer::mapping_at(pid_t pid, std::uint64_t addr) {
  if (!maps_.count(pid)) {
    std::vector<Mapping> maps;
    if (!read_maps(pid, maps)) return nullptr;
    capture(pid, std::move(maps));
  }
  std::vector<Mapping>& maps = maps_[pid];
  for (const Mapping& m : maps)
    if (addr >= m.start && addr < m.end) return &m;
  // A mapping no loader notification announced (the kernel makes the
  // [uprobes] page at a process's first probe hit): the one holding `addr`
  // is added, and only it, as a process that is exiting shows a part of
  // its mappings.
  if (!read_for_a_miss_.insert(pid).second) return nullptr;
  std::vector<Mapping> now;
  if (!read_maps(pid, now)) return nullptr;
  for (Mapping& m : now) {
    if (addr < m.start || addr >= m.end) continue;
    files_of_[pid].push_back(hold_file(pid, m, keys_of_[pid]));
    maps.push_back(std::move(m));
    return &maps.back();
  }
  return nullptr;
}

std::string Symbolizer::function_at(pid_t pid, std::uint64_t addr) {
  const Mapping* m = mapping_at(pid, addr);
  if (!m || !m->exec) return kernel_handle_name(pid, addr);
  const ElfFile* f = files_of_[pid][m - maps_[pid].data()];
  std::uint64_t vaddr = 0;
  FunctionSymbol sym;
  if (!f || !f->offset_to_vaddr(addr - m->start + m->offset, vaddr)) return {};
  if (f->function_at(vaddr, sym)) return std::string(sym.name);
  // A kernel's host stub without a symbol: the name it was registered by.
  std::string_view registered;
  return f->registered_kernel(vaddr, registered) ? std::string(registered) : std::string();
}

std::string Symbolizer::gpu_code(pid_t pid, std::uint64_t addr) {
  const Mapping* m = mapping_at(pid, addr);
  if (!m || m->path.empty() || m->uprobes_area) return {};
  const ElfFile* f = files_of_[pid][m - maps_[pid].data()];
  const auto section = f ? f->section(".nv_fatbin") : std::nullopt;
  const std::string name = m->path.substr(m->path.rfind('/') + 1);
  if (!section) return name + " holds no GPU code";
  const std::string_view fatbins = f->contents().substr(section->offset, section->size);
  std::string said = name + " holds " + describe(gpu_code_of_fatbins(fatbins));
  f->release(fatbins);  // a page of headers every few MiB, over up to a GiB (libtorch_cuda)
  return said;
}

std::string Symbolizer::kernel_handle_name(pid_t pid, std::uint64_t handle) {
  KernelHandles& known = kernel_handles_[pid];
  if (const auto it = known.names.find(handle); it != known.names.end()) return it->second;
  constexpr std::uint64_t kRereadNs = 1000000000;
  const std::uint64_t now = monotonic_ns();
  if (!known.read_ns || now - known.read_ns >= kRereadNs) {
    known.read_ns = now;
    read_kernel_handles(pid, known);
    if (const auto it = known.names.find(handle); it != known.names.end()) return it->second;
  }
  std::string name = handle_names_.name_of(pid, handle);
  // Unnamed: the handle may teach the layout itself (handles all made before attach).
  if (name.empty() && handle_names_.observe(pid, handle)) {
    ++layouts_learnt_;
    name = handle_names_.name_of(pid, handle);
  }
  return name;
}

void Symbolizer::read_kernel_handles(pid_t pid, KernelHandles& known) {
  const std::vector<Mapping>& maps = maps_[pid];
  std::unordered_set<const ElfFile*> read;
  for (std::size_t i = 0; i < maps.size(); ++i) {
    const ElfFile* f = files_of_[pid][i];
    std::uint64_t vaddr = 0;
    if (!maps[i].exec || !f || !read.insert(f).second || !f->offset_to_vaddr(maps[i].offset, vaddr)) continue;
    const std::uint64_t bias = maps[i].start - vaddr;  // one load bias for all of a file's segments
    const std::vector<ElfFile::KernelHandleSlot>& slots = f->kernel_handle_slots();
    std::vector<std::uint64_t> variables;
    variables.reserve(slots.size());
    for (const ElfFile::KernelHandleSlot& slot : slots) variables.push_back(bias + slot.variable);
    const std::vector<std::uint64_t> handles = read_process_words(pid, variables);
    for (std::size_t k = 0; k < slots.size(); ++k) {
      if (!handles[k]) continue;
      auto [at, added] = known.names.try_emplace(handles[k], slots[k].name);
      // Each handle a stub's variable names is a known pair for the layout.
      if (added) learn_handle(pid, handles[k], at->second);
    }
  }
}

bool Symbolizer::learn_handle(pid_t pid, std::uint64_t handle, std::string_view mangled) {
  if (!handle_names_.learn(pid, handle, mangled)) return false;
  ++layouts_learnt_;
  return true;
}

Symbolizer::Location Symbolizer::locate(pid_t pid, std::uint64_t addr) {
  Location loc;
  const Mapping* m = mapping_at(pid, addr);
  if (m && m->uprobes_area) {
    loc.module = kUprobesArea;
    loc.module_offset = addr - m->start;
    return loc;
  }
  if (!m || m->path.empty()) return loc;
  loc.module = m->path;
  loc.module_offset = addr - m->start + m->offset;
  loc.code = m->exec;
  const ElfFile* f = files_of_[pid][m - maps_[pid].data()];
  std::uint64_t vaddr = 0;
  FunctionSymbol sym;
  if (!m->exec || !f || !f->offset_to_vaddr(loc.module_offset, vaddr) || !f->function_containing(vaddr, sym)) return loc;
  loc.function = std::string(sym.name);
  loc.function_offset = vaddr - sym.address;
  return loc;
}

bool Symbolizer::string_at(pid_t pid, std::uint64_t addr, std::size_t max, std::string& out) {
  if (read_process_string(pid, addr, max, out)) return true;
  const Mapping* m = mapping_at(pid, addr);
  if (!m) return false;
  const ElfFile* f = files_of_[pid][m - maps_[pid].data()];
  if (!f) return false;
  const std::string_view bytes = f->contents();
  const std::uint64_t offset = addr - m->start + m->offset;
  if (offset >= bytes.size()) return false;
  const std::string_view rest = bytes.substr(offset, max);
  const auto nul = rest.find('\0');
  if (nul == std::string_view::npos) return false;
  out.assign(rest.substr(0, nul));
  return true;
}

std::vector<std::uint64_t> read_process_words(pid_t pid, const std::vector<std::uint64_t>& addrs) {
  constexpr std::size_t kWord = sizeof(std::uint64_t), kBatch = 1024;  // IOV_MAX
  std::vector<std::uint64_t> values(addrs.size(), 0);
  std::vector<iovec> local(kBatch), remote(kBatch);
  for (std::size_t next = 0; next < addrs.size();) {
    const std::size_t n = std::min(kBatch, addrs.size() - next);
    for (std::size_t i = 0; i < n; ++i) {
      local[i] = {&values[next + i], kWord};
      remote[i] = {reinterpret_cast<void*>(addrs[next + i]), kWord};
    }
    // A read stops at the first word it cannot read: that one stays 0, the rest is tried again.
    const ssize_t got = process_vm_readv(pid, local.data(), n, remote.data(), n, 0);
    next += got > 0 ? static_cast<std::size_t>(got) / kWord : 0;
    if (got < static_cast<ssize_t>(n * kWord)) values[next++] = 0;
  }
  return values;
}

bool read_process_string(pid_t pid, std::uint64_t addr, std::size_t max, std::string& out) {
  out.clear();
  char chunk[256];
  while (out.size() < max) {
    // Stay within one page per read: the next page may be unmapped.
    const std::size_t to_page_end = 4096 - (addr & 4095);
    const std::size_t want = std::min({sizeof chunk, to_page_end, max - out.size()});
    iovec local{chunk, want};
    iovec remote{reinterpret_cast<void*>(addr), want};
    const ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n <= 0) return false;
    const void* nul = std::memchr(chunk, '\0', static_cast<std::size_t>(n));
    if (nul) {
      out.append(chunk, static_cast<const char*>(nul) - chunk);
      return true;
    }
    out.append(chunk, static_cast<std::size_t>(n));
    addr += static_cast<std::uint64_t>(n);
  }
  return false;
}

std::optional<PyInterpreter> Symbolizer::find_python(pid_t pid, std::string& why) {
  const auto maps = maps_.find(pid);
  const auto files = files_of_.find(pid);
  if (maps == maps_.end() || files == files_of_.end()) return std::nullopt;
  for (std::size_t i = 0; i < maps->second.size() && i < files->second.size(); ++i) {
    const Mapping& m = maps->second[i];
    const ElfFile* f = files->second[i];
    if (!m.exec || !f || not_python_.count({m.inode, m.path})) continue;
    if (auto found = cudatrace::find_python(pid, *f, m, why)) return found;
    if (!why.empty()) return std::nullopt;
    not_python_.emplace(m.inode, m.path);
  }
  return std::nullopt;
}

}  // namespace cudatrace
