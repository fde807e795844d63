// Where whole-node mode looks for CUDA libraries to probe ahead: the names
// it takes, the loader's cache and configuration, and a made-up host tree.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "cudatrace/target/library_locations.h"

namespace cudatrace {
namespace {

namespace fs = std::filesystem;

TEST(LibraryLocations, NamesOfLibrariesWithTracedApis) {
  for (const char* name : {"libcudart.so.13", "libcudart.so", "libcuda.so.1", "libnccl.so.2", "libcublas.so.13",
                           "libcublasLt.so.13", "libcudnn_ops.so.9", "libcudnn.so.9", "libcusparse.so.12",
                           "libcusolverMg.so.12", "libcurand.so.10", "libnvblas.so.13", "libcudart-d0da41ae.so.11.0",
                           "libcudart.so.13.0.88"})
    EXPECT_TRUE(is_cuda_library_name(name)) << name;
  for (const char* name : {"libcufft.so.12", "libcupti.so.13", "libnvrtc.so.13", "libcudart_static.a",
                           "libcudadevrt.a", "libcudadebugger.so.1", "libcudart", "libc.so.6", "libcudart.txt",
                           "xlibcudart.so.13"})
    EXPECT_FALSE(is_cuda_library_name(name)) << name;
}

// Which library a file is, whatever a wheel renamed it to: the runtime's own
// file is told apart from a library that carries a runtime inside it.
TEST(LibraryLocations, LibraryOfAStem) {
  for (const char* name : {"libcudart.so.13", "libcudart.faf08d9a.so.13", "libcudart-d0da41ae.so.11.0"})
    EXPECT_TRUE(is_library_of(name, "libcudart")) << name;
  for (const char* name : {"libcuda.so.1", "libcuda.so.580.159.04", "libcuda.so"})
    EXPECT_TRUE(is_library_of(name, "libcuda")) << name;
  for (const char* name : {"libcudart.so.13", "libcudadebugger.so.1", "libcuda", "libcublas.so.13"})
    EXPECT_FALSE(is_library_of(name, "libcuda")) << name;
  for (const char* name : {"libcudart_static.a", "libcublasLt.so.13", "libcudart"})
    EXPECT_FALSE(is_library_of(name, "libcudart")) << name;
}

// A cache in glibc's format (elf/cache.c): a header, 24-byte entries and the
// strings, which the entries name by offset from the header's start.
std::string make_cache(const std::vector<std::pair<std::int32_t, std::string>>& libs, bool with_old_format = false) {
  std::string strings;
  std::vector<std::uint32_t> offsets;
  const std::size_t header = 48, entry = 24, strings_at = header + libs.size() * entry;
  for (const auto& [flags, path] : libs) {
    offsets.push_back(static_cast<std::uint32_t>(strings_at + strings.size()));
    strings += path.substr(path.rfind('/') + 1) + '\0';  // the key: the soname
    offsets.push_back(static_cast<std::uint32_t>(strings_at + strings.size()));
    strings += path + '\0';
  }
  std::string out = "glibc-ld.so.cache1.1";
  auto put32 = [&out](std::uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
  put32(static_cast<std::uint32_t>(libs.size()));
  put32(static_cast<std::uint32_t>(strings.size()));
  out.resize(header, '\0');  // flags, padding, extension offset, unused
  for (std::size_t i = 0; i < libs.size(); ++i) {
    put32(static_cast<std::uint32_t>(libs[i].first));
    put32(offsets[2 * i]);
    put32(offsets[2 * i + 1]);
    out.append(12, '\0');  // osversion, hwcap
  }
  out += strings;
  if (!with_old_format) return out;
  std::string old = "ld.so-1.7.0";
  const std::uint32_t none = 0;
  old.append(reinterpret_cast<const char*>(&none), 4);
  old.resize((old.size() + 7) & ~std::size_t(7), '\0');
  return old + out;
}

constexpr std::int32_t kX8664Libc6 = 0x0303, kI386Libc6 = 0x0003;

TEST(LibraryLocations, LoaderCacheGivesTheX8664Paths) {
  const std::string cache = make_cache({{kX8664Libc6, "/usr/local/cuda-13.0/lib/libcudart.so.13"},
                                        {kI386Libc6, "/usr/lib32/libc.so.6"},
                                        {kX8664Libc6, "/lib/x86_64-linux-gnu/libc.so.6"}});
  const std::vector<std::string> want = {"/usr/local/cuda-13.0/lib/libcudart.so.13", "/lib/x86_64-linux-gnu/libc.so.6"};
  EXPECT_EQ(ld_cache_paths(cache), want);
  EXPECT_EQ(ld_cache_paths(make_cache({{kX8664Libc6, "/usr/local/cuda-13.0/lib/libcudart.so.13"},
                                       {kX8664Libc6, "/lib/x86_64-linux-gnu/libc.so.6"}},
                                      true)),
            want);
}

TEST(LibraryLocations, BadLoaderCachesGiveNothing) {
  const std::string cache = make_cache({{kX8664Libc6, "/usr/lib/libcudart.so.12"}});
  EXPECT_TRUE(ld_cache_paths("").empty());
  EXPECT_TRUE(ld_cache_paths("not a cache at all, just some text").empty());
  for (std::size_t cut = 0; cut < cache.size(); ++cut) ld_cache_paths(cache.substr(0, cut));  // no crash
  std::string huge = cache;
  const std::uint32_t many = 0xffffffff;
  std::memcpy(&huge[20], &many, 4);
  EXPECT_TRUE(ld_cache_paths(huge).empty());
  std::string unterminated = cache.substr(0, cache.size() - 1);
  EXPECT_TRUE(ld_cache_paths(unterminated).empty());
}

// The real cache says what `ldconfig -p` says.
TEST(LibraryLocations, ThisHostsCacheMatchesLdconfig) {
  std::ifstream in("/etc/ld.so.cache", std::ios::binary);
  FILE* ldconfig = popen("/sbin/ldconfig -p 2>/dev/null", "r");
  if (!in || !ldconfig) {
    if (ldconfig) pclose(ldconfig);
    GTEST_SKIP() << "no /etc/ld.so.cache or ldconfig";
  }
  std::set<std::string> listed;
  char line[4096];
  while (std::fgets(line, sizeof line, ldconfig)) {
    const std::string l = line;
    const auto arrow = l.find(" => ");
    if (arrow != std::string::npos && l.find("x86-64") < arrow) listed.insert(l.substr(arrow + 4, l.size() - arrow - 5));
  }
  pclose(ldconfig);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<std::string> parsed = ld_cache_paths(bytes);
  EXPECT_FALSE(parsed.empty());
  EXPECT_EQ(std::set<std::string>(parsed.begin(), parsed.end()), listed);
}

class HostTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("cudatrace-libloc-" + std::to_string(getpid()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  // A file under the root, with its directories.
  void file(const std::string& path, const std::string& text = "x") {
    fs::create_directories((root_ / path.substr(1)).parent_path());
    std::ofstream(root_ / path.substr(1)) << text;
  }
  std::string root() const { return root_.string(); }
  fs::path root_;
};

TEST_F(HostTree, ConfIncludesAreFollowed) {
  file("/etc/ld.so.conf", "# comment\ninclude /etc/ld.so.conf.d/*.conf\n/opt/first   # after\n");
  file("/etc/ld.so.conf.d/b.conf", "/opt/b\ninclude more/*.conf\n");
  file("/etc/ld.so.conf.d/a.conf", "\n  /opt/a\t\nhwcap 0 nosegneg\n/opt/typed=libc6\n");
  file("/etc/ld.so.conf.d/more/c.conf", "/opt/c\ninclude /etc/ld.so.conf\n");  // a loop: bounded
  const std::vector<std::string> dirs = ld_conf_dirs("/etc/ld.so.conf", root());
  ASSERT_GE(dirs.size(), 5u);
  EXPECT_EQ(std::vector<std::string>(dirs.begin(), dirs.begin() + 5),
            (std::vector<std::string>{"/opt/a", "/opt/typed", "/opt/b", "/opt/c", "/opt/a"}));
  EXPECT_EQ(dirs.back(), "/opt/first");
  EXPECT_LT(dirs.size(), 100u);
  EXPECT_TRUE(ld_conf_dirs("/etc/none.conf", root()).empty());
}

// From another mount namespace the host's files are read through a
// /proc/PID/root (process 1's, in a container): the same files are found.
TEST(LibraryLocations, ThroughAnotherProcesssRootTheSameFiles) {
  if (geteuid() != 0 || access("/usr/bin/unshare", X_OK) != 0) GTEST_SKIP() << "needs root and unshare";
  FILE* other = popen("exec /usr/bin/unshare --mount --propagation private sh -c 'echo $$; exec sleep 30'", "r");
  ASSERT_TRUE(other);
  int pid = 0;
  ASSERT_EQ(std::fscanf(other, "%d", &pid), 1);
  const std::string root = "/proc/" + std::to_string(pid) + "/root";
  const auto inodes = [](const std::vector<std::string>& paths) {
    std::set<std::pair<dev_t, ino_t>> out;
    for (const std::string& p : paths) {
      struct stat st {};
      if (stat(p.c_str(), &st) == 0) out.emplace(st.st_dev, st.st_ino);
    }
    return out;
  };
  const std::vector<std::string> direct = find_cuda_libraries(), through = find_cuda_libraries(root);
  for (const std::string& p : through) EXPECT_EQ(p.rfind(root + "/", 0), 0u) << p;
  EXPECT_EQ(inodes(through), inodes(direct));  // while the process (its root) lives
  EXPECT_EQ(through.size(), direct.size());
  kill(pid, SIGKILL);
  pclose(other);
}

TEST_F(HostTree, FindsEachLibraryOnceWhereHostsKeepThem) {
  {
    fs::create_directories(root_ / "etc");
    std::ofstream(root_ / "etc/ld.so.cache", std::ios::binary)
        << make_cache({{kX8664Libc6, "/opt/driver/libcuda.so.1"}, {kX8664Libc6, "/opt/driver/libnvidia-ml.so.1"}});
  }
  // The driver as Debian installs it: alternatives, absolute links, which
  // are followed inside the root (the host's, from a container).
  file("/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.535.104");
  fs::create_directories(root_ / "etc/alternatives");
  fs::create_symlink("/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.535.104",
                     root_ / "etc/alternatives/libcuda.so.1");
  fs::create_directories(root_ / "opt/driver");
  fs::create_symlink("/etc/alternatives/libcuda.so.1", root_ / "opt/driver/libcuda.so.1");
  file("/opt/driver/libnvidia-ml.so.1");
  file("/etc/ld.so.conf", "/opt/conf\n");
  file("/opt/conf/libnccl.so.2");
  file("/opt/conf/libcuda.so.1");  // another file of the same name: taken too
  file("/usr/lib/x86_64-linux-gnu/libcudart.so.12");
  file("/usr/lib/x86_64-linux-gnu/libc.so.6");
  file("/usr/local/cuda-12.4/lib64/libcublas.so.12");
  file("/usr/local/cuda-12.4/lib64/libcufft.so.11");
  fs::create_symlink("libcublas.so.12", root_ / "usr/local/cuda-12.4/lib64/libcublas.so");  // the same file
  fs::create_directory_symlink("cuda-12.4", root_ / "usr/local/cuda");
  file("/usr/local/cuda-12.4/lib64/stubs/libcuda.so");  // a stub, never loaded by a program
  file("/usr/local/cuda-12.4/targets/x86_64-linux/lib/libcurand.so.10");
  file("/usr/lib/python3/dist-packages/nvidia/cudnn/lib/libcudnn_ops.so.9");
  file("/usr/local/lib/python3.11/dist-packages/nvidia/cu13/lib/libcudart.so.13");
  file("/opt/conda/lib/libcudart.so.11.0");
  file("/opt/conda/envs/torch/lib/python3.10/site-packages/nvidia/nccl/lib/libnccl.so.2");
  file("/opt/app/venv/lib/python3.12/site-packages/torch/lib/libcudart-d0da41ae.so.11.0");
  file("/home/ann/.venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublasLt.so.12");
  file("/home/ann/.local/lib/python3.12/site-packages/nvidia/cusparse/lib/libcusparse.so.12");
  file("/root/.local/lib/python3.11/site-packages/nvidia/curand/lib/libcurand.so.10");
  file("/home/ann/src/notes.txt");
  fs::create_directories(root_ / "opt/conf/libcudart.so.99");  // a directory of that name
  std::vector<std::string> found = find_cuda_libraries(root());
  for (std::string& f : found) f = f.substr(root().size());
  const std::vector<std::string> want = {
      "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.535.104",
      "/opt/conf/libcuda.so.1",
      "/opt/conf/libnccl.so.2",
      "/usr/lib/x86_64-linux-gnu/libcudart.so.12",
      "/usr/local/cuda-12.4/lib64/libcublas.so.12",
      "/usr/local/cuda-12.4/targets/x86_64-linux/lib/libcurand.so.10",
      "/opt/conda/envs/torch/lib/python3.10/site-packages/nvidia/nccl/lib/libnccl.so.2",
      "/opt/conda/lib/libcudart.so.11.0",
      "/opt/app/venv/lib/python3.12/site-packages/torch/lib/libcudart-d0da41ae.so.11.0",
      "/root/.local/lib/python3.11/site-packages/nvidia/curand/lib/libcurand.so.10",
      "/home/ann/.local/lib/python3.12/site-packages/nvidia/cusparse/lib/libcusparse.so.12",
      "/home/ann/.venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublasLt.so.12",
      "/usr/lib/python3/dist-packages/nvidia/cudnn/lib/libcudnn_ops.so.9",
      "/usr/local/lib/python3.11/dist-packages/nvidia/cu13/lib/libcudart.so.13",
  };
  EXPECT_EQ(std::set<std::string>(found.begin(), found.end()), std::set<std::string>(want.begin(), want.end()));
  // The loader's files first, then its directories (each sorted by name), then the
  // toolkits; links resolved inside the root.
  ASSERT_EQ(found.size(), want.size());
  EXPECT_EQ(std::vector<std::string>(found.begin(), found.begin() + 6), std::vector<std::string>(want.begin(), want.begin() + 6));
}

}  // namespace
}  // namespace cudatrace
