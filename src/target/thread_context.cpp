// Finding a process's OpenTelemetry context (target/thread_context.h).
#include "cudatrace/target/thread_context.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "cudatrace/target/elf_file.h"

namespace cudatrace {
namespace {

std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

bool is_glibc_loader(const std::string& path) { return base_name(path).rfind("ld-linux", 0) == 0; }

bool is_libc(const std::string& path) {
  const std::string b = base_name(path);
  return b == "libc.so.6" || (b.rfind("libc-", 0) == 0 && b.find(".so") != std::string::npos);
}

// "dev:inode" of a file, to look at each file once.
std::string file_identity(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return {};
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

// The difference between where `file` is mapped in the process and its
// link-time addresses, from the first of its mappings.
bool load_bias(const ElfFile& file, const std::vector<Mapping>& maps, const std::string& path, std::uint64_t& bias) {
  for (const Mapping& m : maps) {
    if (m.path != path) continue;
    std::uint64_t vaddr;
    if (!file.offset_to_vaddr(m.offset, vaddr)) continue;
    bias = m.start - vaddr;
    return true;
  }
  return false;
}

// A 3-u32 descriptor of glibc's libthread_db interface (nptl_db/db-symbols):
// size in bits, count, offset.
bool db_descriptor(const ElfFile& libc, const char* name, std::uint32_t desc[3]) {
  const std::uint64_t at = libc.exported_object(name);
  if (!at) return false;
  const std::string_view bytes = libc.bytes_at(at);
  if (bytes.size() < 12) return false;
  std::memcpy(desc, bytes.data(), 12);
  return true;
}

bool read_u64(pid_t pid, std::uint64_t addr, std::uint64_t& v) { return read_process_memory(pid, addr, &v, 8); }

bool read_c_string(pid_t pid, std::uint64_t addr, std::string& out) {
  out.clear();
  char chunk[256];
  for (int i = 0; i < 16; ++i) {
    // A short read at the end of a page: read up to the page's end first.
    const std::size_t to_page = 4096 - (addr & 4095);
    const std::size_t n = std::min(sizeof chunk, to_page);
    if (!read_process_memory(pid, addr, chunk, n)) return false;
    const void* nul = std::memchr(chunk, 0, n);
    if (nul) {
      out.append(chunk, static_cast<const char*>(nul) - chunk);
      return true;
    }
    out.append(chunk, n);
    addr += n;
  }
  return false;
}

}  // namespace

bool read_process_memory(pid_t pid, std::uint64_t addr, void* out, std::size_t len) {
  const std::string path = "/proc/" + std::to_string(pid) + "/mem";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = pread(fd, out, len, static_cast<off_t>(addr));
  close(fd);
  return n == static_cast<ssize_t>(len);
}

bool ThreadContextFinder::find(pid_t pid, const std::vector<Mapping>& maps, ct_tls_target& out, std::string& why) {
  const Mapping* loader = nullptr;
  const Mapping* libc = nullptr;
  for (const Mapping& m : maps) {
    if (!loader && is_glibc_loader(m.path)) loader = &m;
    if (!libc && is_libc(m.path)) libc = &m;
  }
  if (!loader || !libc) {
    why = "no glibc dynamic loader and libc mapped";
    return false;
  }
  // glibc's layout: where struct link_map keeps the TLS offset and module
  // id, where the thread keeps its dtv and how a dtv slot is laid out.
  const std::string libc_path = host_path(pid, *libc);
  const std::string libc_id = file_identity(libc_path);
  Layout& layout = layouts_[libc_id];
  if (!layout.ok) {
    std::string error;
    auto file = ElfFile::open(libc_path, error);
    std::uint32_t off[3], modid[3], dtvp[3], val[3], dtv[3];
    if (!file || !db_descriptor(*file, "_thread_db_link_map_l_tls_offset", off) ||
        !db_descriptor(*file, "_thread_db_link_map_l_tls_modid", modid) ||
        !db_descriptor(*file, "_thread_db_pthread_dtvp", dtvp) ||
        !db_descriptor(*file, "_thread_db_dtv_t_pointer_val", val) ||
        !db_descriptor(*file, "_thread_db_dtv_dtv", dtv) || off[0] != 64 || modid[0] != 64 || dtvp[0] != 64 ||
        val[0] != 64 || dtv[0] == 0 || dtv[0] % 64) {
      why = "libc has no usable _thread_db_* descriptors";
      layouts_.erase(libc_id);
      return false;
    }
    layout = {true, off[2], modid[2], dtvp[2], dtv[0] / 8, val[2]};
  }
  // The link map, from the loader's _r_debug.
  const std::string loader_path = host_path(pid, *loader);
  std::string error;
  auto ld = ElfFile::open(loader_path, error);
  std::uint64_t bias = 0;
  const std::uint64_t r_debug = ld ? ld->exported_object("_r_debug") : 0;
  if (!r_debug || !load_bias(*ld, maps, loader->path, bias)) {
    why = "the loader's _r_debug not found";
    return false;
  }
  std::uint64_t lm = 0;
  if (!read_u64(pid, bias + r_debug + 8, lm)) {
    why = "cannot read _r_debug";
    return false;
  }
  for (int n = 0; lm && n < 4096; ++n) {
    std::uint64_t head[4];  // l_addr, l_name, l_ld, l_next
    std::string name;
    if (!read_process_memory(pid, lm, head, sizeof head) || !read_c_string(pid, head[1], name)) break;
    std::string path;
    if (n == 0 && name.empty()) {
      path = "/proc/" + std::to_string(pid) + "/exe";
    } else if (!name.empty()) {
      // As dlopen() was given it: absolute, or relative to the directory
      // the process was in (its mapping's path ends with it).
      std::string tail = name;
      while (tail.rfind("./", 0) == 0) tail.erase(0, 2);
      if (name[0] == '/') path = "/proc/" + std::to_string(pid) + "/root" + name;
      for (const Mapping& m : maps)
        if (m.path == name || (name[0] != '/' && m.path.size() > tail.size() &&
                               m.path.compare(m.path.size() - tail.size(), tail.size(), tail) == 0 &&
                               m.path[m.path.size() - tail.size() - 1] == '/')) {
          path = host_path(pid, m);
          break;
        }
    }
    if (!path.empty()) {
      const std::string id = file_identity(path);
      auto it = symbol_cache_.find(id);
      if (it == symbol_cache_.end()) {
        std::optional<std::uint64_t> value;
        if (auto file = ElfFile::open(path, error)) value = file->tls_symbol(kThreadContextSymbol);
        it = symbol_cache_.emplace(id, value).first;
      }
      if (it->second) {
        out = {};
        out.st_value = *it->second;
        out.link_map = lm;
        out.lm_tls_offset = layout.lm_tls_offset;
        out.lm_tls_modid = layout.lm_tls_modid;
        out.dtv_in_tcb = layout.dtv_in_tcb;
        out.dtv_slot_size = layout.dtv_slot_size;
        out.dtv_val = layout.dtv_val;
        return true;
      }
    }
    lm = head[3];
  }
  why = std::string("no module defines ") + kThreadContextSymbol;
  return false;
}

// OTEP 4719's process context: an anonymous mapping or memfd named OTEL_CTX.
static bool holds_process_context(const Mapping& m) {
  return m.name == "[anon:OTEL_CTX]" || m.name == "[anon_shmem:OTEL_CTX]" || m.path.rfind("/memfd:OTEL_CTX", 0) == 0;
}

bool read_process_context(pid_t pid, const std::vector<Mapping>& maps, ProcessContext& out,
                          ProcessContextHeaderCopy* header_copy) {
  for (const Mapping& m : maps) {
    if (!holds_process_context(m)) continue;
    char header[kProcessContextHeader];
    ProcessContextHeader h;
    if (!read_process_memory(pid, m.start, header, sizeof header) ||
        !parse_process_context_header(std::string_view(header, sizeof header), h))
      continue;
    std::string payload(h.payload_size, '\0');
    if (!read_process_memory(pid, h.payload, payload.data(), payload.size())) continue;
    // Published again while read: try again later.
    char again[kProcessContextHeader];
    if (!read_process_memory(pid, m.start, again, sizeof again) || std::memcmp(header, again, sizeof header) != 0)
      continue;
    ProcessContext ctx;
    if (!decode_process_context(payload, ctx)) continue;
    out = std::move(ctx);
    if (header_copy) {
      header_copy->address = m.start;
      std::memcpy(header_copy->bytes.data(), header, sizeof header);
    }
    return true;
  }
  return false;
}

void read_service_labels(pid_t pid, ProcessLabel& label) {
  std::vector<Mapping> maps;
  ProcessContext ctx;
  if (!read_maps(pid, maps) || !read_process_context(pid, maps, ctx)) return;
  label.service_name = ctx.attribute("service.name");
  label.service_namespace = ctx.attribute("service.namespace");
  label.deployment_environment = ctx.attribute("deployment.environment.name");
  if (label.deployment_environment.empty()) label.deployment_environment = ctx.attribute("deployment.environment");
}

}  // namespace cudatrace
