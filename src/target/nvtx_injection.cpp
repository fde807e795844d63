#include "cudatrace/target/nvtx_injection.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace cudatrace {

// The bytes of libcudatrace_nvtx.so, generated at build time (cmake/embed.cmake).
extern const unsigned char kNvtxInjectionLibrary[];
extern const std::size_t kNvtxInjectionLibrarySize;

std::unique_ptr<NvtxInjection> NvtxInjection::create(std::string& error) {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/cudatrace-nvtx-XXXXXX";
  if (!mkdtemp(dir.data())) {
    error = "cannot create a directory for the NVTX injection library: " + dir + ": " + std::strerror(errno);
    return nullptr;
  }
  // Readable by a command that changes its user; writable by root only.
  chmod(dir.c_str(), 0755);
  std::string path = dir + "/libcudatrace_nvtx.so";
  if (!write_nvtx_library(path, error)) {
    rmdir(dir.c_str());
    return nullptr;
  }
  return std::unique_ptr<NvtxInjection>(new NvtxInjection(std::move(dir), std::move(path)));
}

NvtxInjection::~NvtxInjection() {
  unlink(path_.c_str());
  rmdir(dir_.c_str());
}

bool write_nvtx_library(const std::string& path, std::string& error) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0755);
  if (fd < 0) {
    error = "cannot write " + path + ": " + std::strerror(errno);
    return false;
  }
  const unsigned char* p = kNvtxInjectionLibrary;
  std::size_t left = kNvtxInjectionLibrarySize;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = "writing " + path + ": " + std::strerror(errno);
      close(fd);
      unlink(path.c_str());
      return false;
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  fchmod(fd, 0755);  // whatever the umask
  close(fd);
  return true;
}

}  // namespace cudatrace
