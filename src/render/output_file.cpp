#include "cudatrace/render/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cudatrace {
namespace {

// The directory holding `path` when anyone may write there (/tmp): another
// user could have planted a symbolic link under the name. Empty otherwise.
std::string world_writable_dir(const std::string& path) {
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  struct stat st {};
  return stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & S_IWOTH) ? dir : std::string();
}

}  // namespace

int open_output_file(const std::string& path, bool follow_symlinks, bool private_trace, std::string& error) {
  const std::string shared_dir = follow_symlinks ? std::string() : world_writable_dir(path);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (shared_dir.empty() ? 0 : O_NOFOLLOW),
                        private_trace ? 0600 : 0644);
  if (fd < 0) {
    if (errno == ELOOP && !shared_dir.empty())
      error = "refusing to write " + path + ": it is a symbolic link in the world-writable directory " + shared_dir +
              " (--output-follow-symlinks allows it)";
    else
      error = "cannot write " + path + ": " + std::strerror(errno);
    return -1;
  }
  // An existing file keeps its mode when truncated: make it private too.
  struct stat st {};
  if (private_trace && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) fchmod(fd, 0600);
  return fd;
}

}  // namespace cudatrace
