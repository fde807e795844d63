#include "cudatrace/render/output_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

namespace cudatrace {
namespace {

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// The directory holding `path` when anyone may write there (/tmp): another
// user could have planted a symbolic link under the name. Empty otherwise.
std::string world_writable_dir(const std::string& path) {
  const std::string dir = directory_of(path);
  struct stat st {};
  return stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & S_IWOTH) ? dir : std::string();
}

// What writing `path` would write: an existing file (its device and inode),
// or a name in a directory (the directory's device and inode, and the name).
struct Destination {
  dev_t dev = 0;
  ino_t ino = 0;
  std::string name;  // empty: an existing file
  bool regular = true;
};

std::optional<Destination> destination_of(std::string path) {
  struct stat st {};
  // A dangling symbolic link creates its target: follow it by hand, as open() would.
  for (int hops = 0; hops < 40 && lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode); ++hops) {
    char target[PATH_MAX];
    const ssize_t n = readlink(path.c_str(), target, sizeof target - 1);
    if (n <= 0) break;
    const std::string to(target, static_cast<std::size_t>(n));
    path = to[0] == '/' ? to : directory_of(path) + "/" + to;
  }
  if (stat(path.c_str(), &st) == 0) return Destination{st.st_dev, st.st_ino, {}, S_ISREG(st.st_mode)};
  if (errno != ENOENT || stat(directory_of(path).c_str(), &st) != 0) return std::nullopt;
  return Destination{st.st_dev, st.st_ino, path.substr(path.rfind('/') + 1), true};
}

bool same(const std::optional<Destination>& a, const std::optional<Destination>& b) {
  return a && b && a->regular && b->regular && a->dev == b->dev && a->ino == b->ino && a->name == b->name;
}

}  // namespace

int open_output_file(const std::string& path, const OutputFileOptions& options, std::string& error) {
  const bool private_trace = options.private_trace;
  const std::string shared_dir = options.follow_symlinks ? std::string() : world_writable_dir(path);
  // A FIFO: opened without blocking, so that a FIFO nobody reads yet is
  // waited for here, said on stderr, before anything is traced.
  struct stat fifo {};
  const bool is_fifo = stat(path.c_str(), &fifo) == 0 && S_ISFIFO(fifo.st_mode);
  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (shared_dir.empty() ? 0 : O_NOFOLLOW) |
                    (is_fifo ? O_NONBLOCK : 0);
  int fd = ::open(path.c_str(), flags, private_trace ? 0600 : 0644);
  if (fd < 0 && is_fifo && errno == ENXIO) {
    fmt::print(stderr, "cudatrace: waiting for a reader of {:?} (a FIFO); nothing is traced until one opens it\n",
               path);
    constexpr useconds_t kRetryUs = 50000;
    while ((fd = ::open(path.c_str(), flags, 0)) < 0 && errno == ENXIO) {
      if (options.stop_waiting && options.stop_waiting()) {
        error.clear();
        return -1;
      }
      usleep(kRetryUs);  // a stop signal cuts it short
    }
  }
  if (fd >= 0 && is_fifo) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // the writer thread may wait
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

bool same_output_file(const std::string& a, const std::string& b) { return same(destination_of(a), destination_of(b)); }

bool output_file_exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

bool same_output_file(const std::string& path, int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return false;
  return same(destination_of(path), Destination{st.st_dev, st.st_ino, {}, S_ISREG(st.st_mode)});
}

}  // namespace cudatrace
