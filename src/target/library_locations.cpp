#include "cudatrace/target/library_locations.h"

#include <dirent.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

namespace cudatrace {
namespace {

// The libraries with traced APIs: the runtime, the driver, NCCL, and those
// found to link the runtime in statically (docs/static-runtime.md; cuFFT,
// CUPTI, NVRTC and nvJitLink have none).
constexpr std::string_view kLibraryStems[] = {"libcudart",   "libcuda",     "libnccl",   "libcublas",
                                              "libcublasLt", "libcudnn",    "libcusparse", "libcusparseLt",
                                              "libcusolver", "libcusolverMg", "libcurand", "libnvblas"};

// Where ldconfig looks without being told (x86-64, Debian's multiarch first).
constexpr const char* kSystemDirs[] = {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
                                       "/lib", "/usr/lib"};

// Toolkits, and the library directories of Python environments (system,
// pip's /usr/local, conda or venvs in /opt and in home directories): their
// NVIDIA wheels (nvidia/cuda_runtime/lib, nvidia/cublas/lib, nvidia/cu13/lib,
// ...), PyTorch's own copies, and a conda environment's lib/.
constexpr const char* kToolkitDirs = "/usr/local/cuda*/{lib64,lib,targets/*/lib}";
constexpr const char* kEnvironmentsAndLibs =
    "{/usr/,/usr/local/,/opt/*/,/opt/*/envs/*/,/opt/*/*/,/root/.local/,/root/*/,/root/.venv/,/home/*/.local/,"
    "/home/*/*/,/home/*/.venv/,/home/*/*/envs/*/}"
    "{lib,lib/python3*/{site,dist}-packages/{nvidia/*/lib,torch/lib}}";

constexpr int kMaxIncludeDepth = 8;  // include loops end here
constexpr int kMaxLinks = 40;        // as the kernel's own limit on a path

// `path` (absolute, as `root` sees it) under `root`, its symbolic links
// followed as `root` sees them: through /proc/1/root the kernel would take
// an absolute link's target (/etc/alternatives/...) from cudatrace's own root.
std::string under_root(const std::string& root, const std::string& path) {
  if (root.empty()) return path;
  std::vector<std::string> todo;  // components still to walk, the next last
  const auto push = [&todo](const std::string& p) {
    std::vector<std::string> parts;
    std::size_t at = 0;
    while (at <= p.size()) {
      const std::size_t slash = std::min(p.find('/', at), p.size());
      parts.push_back(p.substr(at, slash - at));
      at = slash + 1;
    }
    todo.insert(todo.end(), parts.rbegin(), parts.rend());
  };
  push(path);
  std::string done;
  int links = 0;
  while (!todo.empty()) {
    const std::string part = todo.back();
    todo.pop_back();
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      done = done.substr(0, done.rfind('/') == std::string::npos ? 0 : done.rfind('/'));
      continue;
    }
    const std::string next = done + "/" + part;
    char target[4096];
    const ssize_t n = readlink((root + next).c_str(), target, sizeof target);
    if (n <= 0 || n == static_cast<ssize_t>(sizeof target) || ++links > kMaxLinks) {
      done = next;  // not a link (or one that cannot be followed: stat says what it is)
      continue;
    }
    const std::string link(target, static_cast<std::size_t>(n));
    if (link[0] == '/') done.clear();
    push(link);
  }
  return root + (done.empty() ? "/" : done);
}

std::uint32_t read_u32(std::string_view s, std::size_t at) {
  std::uint32_t v;
  std::memcpy(&v, s.data() + at, sizeof v);
  return v;
}

std::vector<std::string> glob_dirs(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (glob(pattern.c_str(), GLOB_BRACE | GLOB_ONLYDIR, nullptr, &g) == 0)
    for (std::size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  return out;
}

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

void read_conf(const std::string& path, const std::string& root, int depth, std::vector<std::string>& dirs) {
  if (depth > kMaxIncludeDepth) return;
  std::ifstream in(under_root(root, path));
  const std::string here = path.substr(0, path.rfind('/') + 1);
  std::string line;
  while (std::getline(in, line)) {
    line = trim(line.substr(0, line.find('#')));
    if (line.empty() || line.rfind("hwcap ", 0) == 0) continue;
    if (line.rfind("include", 0) == 0 && line.size() > 7 && (line[7] == ' ' || line[7] == '\t')) {
      std::istringstream patterns(line.substr(8));
      std::string pattern;
      while (patterns >> pattern) {
        if (pattern[0] != '/') pattern = here + pattern;
        glob_t g{};
        if (glob((root + pattern).c_str(), 0, nullptr, &g) == 0)
          for (std::size_t i = 0; i < g.gl_pathc; ++i) read_conf(g.gl_pathv[i] + root.size(), root, depth + 1, dirs);
        globfree(&g);
      }
      continue;
    }
    dirs.push_back(line.substr(0, line.find('=')));  // "DIR=TYPE": the old library-type suffix
  }
}

// Collects the CUDA library files under a root, each once. Takes paths as
// the root sees them; gives them with the root in front.
class Finder {
 public:
  explicit Finder(std::string root) : root_(std::move(root)) {}
  void file(const std::string& host_path) {
    const std::string path = under_root(root_, host_path);
    struct stat st {};
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
    if (seen_files_.emplace(st.st_dev, st.st_ino).second) files_.push_back(path);
  }
  void dir(const std::string& host_path) {
    const std::string path = under_root(root_, host_path);
    struct stat st {};
    if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || !seen_dirs_.emplace(st.st_dev, st.st_ino).second)
      return;
    DIR* d = opendir(path.c_str());
    if (!d) return;
    std::vector<std::string> names;
    while (dirent* e = readdir(d))
      if (is_cuda_library_name(e->d_name)) names.emplace_back(e->d_name);
    closedir(d);
    std::sort(names.begin(), names.end());  // the same order on every run
    for (const std::string& name : names) file(path.substr(root_.size()) + "/" + name);
  }
  std::vector<std::string> take() { return std::move(files_); }

 private:
  std::string root_;
  std::set<std::pair<dev_t, ino_t>> seen_files_, seen_dirs_;
  std::vector<std::string> files_;
};

}  // namespace

bool is_library_of(std::string_view name, std::string_view stem) {
  if (name.find(".so") == std::string_view::npos) return false;
  if (name.size() <= stem.size() || name.substr(0, stem.size()) != stem) return false;
  const char next = name[stem.size()];
  return next == '.' || next == '-' || next == '_';
}

bool is_cuda_library_name(std::string_view name) {
  return std::any_of(std::begin(kLibraryStems), std::end(kLibraryStems),
                     [name](std::string_view stem) { return is_library_of(name, stem); });
}

std::vector<std::string> ld_cache_paths(std::string_view cache) {
  static constexpr std::string_view kOldMagic = "ld.so-1.7.0", kNewMagic = "glibc-ld.so.cache1.1";
  constexpr std::size_t kOldEntry = 12, kNewHeader = 48, kNewEntry = 24;
  constexpr std::int32_t kTypeMask = 0x00ff, kElfLibc6 = 0x0003, kArchMask = 0xff00, kX8664 = 0x0300;
  std::size_t start = 0;
  if (cache.substr(0, kOldMagic.size()) == kOldMagic) {  // the old format first: skip its entries
    if (cache.size() < kOldMagic.size() + 4) return {};
    const std::uint64_t entries = read_u32(cache, kOldMagic.size());
    start = (kOldMagic.size() + 4 + entries * kOldEntry + 7) & ~std::size_t(7);
  }
  if (start > cache.size() || cache.substr(start, kNewMagic.size()) != kNewMagic ||
      cache.size() - start < kNewHeader)
    return {};
  const std::string_view data = cache.substr(start);  // string offsets count from here
  const std::uint64_t entries = read_u32(data, 20);
  if (entries > (data.size() - kNewHeader) / kNewEntry) return {};
  std::vector<std::string> out;
  for (std::uint64_t i = 0; i < entries; ++i) {
    const std::size_t at = kNewHeader + i * kNewEntry;
    const auto flags = static_cast<std::int32_t>(read_u32(data, at));
    const std::uint32_t value = read_u32(data, at + 8);
    if ((flags & kTypeMask) != kElfLibc6 || (flags & kArchMask) != kX8664 || value >= data.size()) continue;
    const std::size_t end = data.find('\0', value);
    if (end == std::string_view::npos) continue;
    out.emplace_back(data.substr(value, end - value));
  }
  return out;
}

std::vector<std::string> ld_conf_dirs(const std::string& conf_path, const std::string& root) {
  std::vector<std::string> dirs;
  read_conf(conf_path, root, 0, dirs);
  return dirs;
}

std::vector<std::string> find_cuda_libraries(const std::string& root) {
  Finder found(root);
  {
    std::ifstream in(under_root(root, "/etc/ld.so.cache"), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    for (const std::string& path : ld_cache_paths(bytes.str()))
      if (is_cuda_library_name(path.substr(path.rfind('/') + 1))) found.file(path);
  }
  std::vector<std::string> dirs = ld_conf_dirs("/etc/ld.so.conf", root);
  dirs.insert(dirs.end(), std::begin(kSystemDirs), std::end(kSystemDirs));
  for (const std::string& d : dirs) found.dir(d);
  // glob(3) walks the root's directories itself; its links to directories
  // are few and relative (cuda -> cuda-13.0) where it matters.
  for (const char* pattern : {kToolkitDirs, kEnvironmentsAndLibs})
    for (const std::string& d : glob_dirs(root + pattern)) found.dir(d.substr(root.size()));
  return found.take();
}

std::string host_root() {
  char ours[64] = {}, init[64] = {};
  const ssize_t a = readlink("/proc/self/ns/mnt", ours, sizeof ours - 1);
  const ssize_t b = readlink("/proc/1/ns/mnt", init, sizeof init - 1);
  if (a <= 0 || b <= 0 || std::strcmp(ours, init) == 0) return "";
  return "/proc/1/root";
}

}  // namespace cudatrace
