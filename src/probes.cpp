#include "cudatrace/probes.h"

#include <bpf/libbpf.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <unordered_set>

#include "cudatrace/elf_file.h"

namespace cudatrace {
namespace {

std::string basename_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Libraries whose every table row is expected to be exported; a missing
// row there means a CUDA version we do not cover, worth a warning.
bool is_cuda_library(const std::string& path, Layer layer) {
  const std::string base = basename_of(path);
  return base.rfind(layer == Layer::Runtime ? "libcudart.so" : "libcuda.so", 0) == 0;
}

}  // namespace

void Probes::LinkDeleter::operator()(bpf_link* l) const { bpf_link__destroy(l); }

Probes::Probes(bpf_program* enter, bpf_program* exit, bpf_program* map_change, Selection selection, Warn warn)
    : enter_(enter), exit_(exit), map_change_(map_change), selection_(selection), warn_(std::move(warn)) {}

Probes::~Probes() = default;

const Probes::FileSymbols* Probes::symbols_of(const std::string& path, std::string& error,
                                              std::tuple<dev_t, ino_t>& key) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    error = path + ": " + std::strerror(errno);
    return nullptr;
  }
  key = {st.st_dev, st.st_ino};
  if (auto it = symbols_.find(key); it != symbols_.end()) return &it->second;
  auto elf = ElfFile::open(path, error);
  if (!elf) return nullptr;
  static const auto kWanted = [] {
    std::unordered_set<std::string_view> names;
    for (const Api& a : apis()) names.insert(a.symbol);
    return names;
  }();
  FileSymbols syms;
  for (const auto& [name, vaddr] : elf->find_functions(kWanted)) {
    std::uint64_t offset = 0;
    if (elf->vaddr_to_offset(vaddr, offset)) syms.offsets.emplace_back(api_by_symbol(name), offset);
  }
  return &symbols_.emplace(key, std::move(syms)).first->second;
}

bool Probes::attach_one(bpf_program* prog, const std::string& path, pid_t pid, std::uint64_t offset,
                        std::uint64_t cookie, bool retprobe, std::string& error) {
  LIBBPF_OPTS(bpf_uprobe_opts, opts, .bpf_cookie = cookie, .retprobe = retprobe);
  bpf_link* link = bpf_program__attach_uprobe_opts(prog, pid, path.c_str(), offset, &opts);
  if (!link) {
    error = path + ": attaching a uprobe at offset " + std::to_string(offset) + ": " + std::strerror(errno);
    return false;
  }
  links_.emplace_back(link);
  return true;
}

bool Probes::attach_file(const std::string& path, pid_t pid, FileResult& result, std::string& error) {
  std::tuple<dev_t, ino_t> file;
  const FileSymbols* syms = symbols_of(path, error, file);
  if (!syms) return false;
  const auto key = std::tuple_cat(file, std::make_tuple(pid));
  if (auto it = attached_.find(key); it != attached_.end()) {
    result = it->second;
    return true;
  }
  FileResult r;
  bool present[2] = {false, false};
  std::unordered_set<const Api*> found;
  for (const auto& [api, offset] : syms->offsets) {
    present[static_cast<int>(api->layer())] = true;
    found.insert(api);
    if (!selection_.wants(*api)) continue;
    // The return probe first: a call entered between the two attaches then
    // has neither half, rather than an entry whose return never comes.
    if (!attach_one(exit_, path, pid, offset, api->cookie, true, error) ||
        !attach_one(enter_, path, pid, offset, api->cookie, false, error))
      return false;
    ++r.apis;
    (api->layer() == Layer::Runtime ? r.runtime : r.driver) = true;
  }
  for (Layer layer : {Layer::Runtime, Layer::Driver}) {
    if (!present[static_cast<int>(layer)] || !is_cuda_library(path, layer)) continue;
    std::string missing;
    int n = 0;
    for (const Api& a : apis()) {
      if (a.variant || a.layer() != layer || !selection_.wants(a) || found.count(&a)) continue;
      if (n++ < 5) missing += (missing.empty() ? "" : ", ") + a.symbol;
    }
    if (n) warn_(basename_of(path) + " does not export " + std::to_string(n) + " traced API(s) (" + missing +
                 (n > 5 ? ", ..." : "") + "); tracing the rest");
  }
  attached_.emplace(key, r);
  result = r;
  return true;
}

bool Probes::attach_loader(const std::string& path, pid_t pid, std::string& error) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    error = path + ": " + std::strerror(errno);
    return false;
  }
  const auto key = std::make_tuple(st.st_dev, st.st_ino, pid);
  if (loaders_.count(key)) return true;
  auto elf = ElfFile::open(path, error);
  if (!elf) return false;
  const auto found = elf->find_functions({"_dl_debug_state"});
  std::uint64_t offset = 0;
  if (found.empty() || !elf->vaddr_to_offset(found.begin()->second, offset)) {
    error = path + ": no _dl_debug_state symbol; libraries loaded later will not be traced";
    return false;
  }
  if (!attach_one(map_change_, path, pid, offset, 0, false, error)) return false;
  loaders_.insert(key);
  return true;
}

}  // namespace cudatrace
