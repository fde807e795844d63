#include "cudatrace/render/output_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <deque>
#include <optional>

namespace cudatrace {
namespace {

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
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

// Where `path` leads, found one component at a time from "/" or ".", so
// that every symbolic link on the way is seen, not only the last one (the
// kernel checks none when fs.protected_symlinks is 0): an open directory
// (O_PATH) and the name in it to open, or `error` set.
struct Resolved {
  int dir = -1;
  std::string name;
  std::string dir_path;  // for messages
  bool shared = false;   // anyone may write the directory (/tmp)
};

std::string joined(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : dir == "/" ? "/" + name : dir + "/" + name;
}

bool resolve(const std::string& path, bool follow_symlinks, Resolved& out, std::string& error) {
  std::deque<std::string> todo;
  const auto push_components = [&todo](const std::string& p) {
    std::deque<std::string> parts;
    std::size_t at = 0;
    for (std::size_t slash; at <= p.size(); at = slash + 1) {
      slash = std::min(p.find('/', at), p.size());
      if (slash > at && p.compare(at, slash - at, ".") != 0) parts.push_back(p.substr(at, slash - at));
    }
    todo.insert(todo.begin(), parts.begin(), parts.end());
  };
  push_components(path);
  std::string dir_path = path[0] == '/' ? "/" : "";
  int dir = ::open(dir_path.empty() ? "." : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  const auto fail = [&](const std::string& why) {
    error = why;
    if (dir >= 0) close(dir);
    return false;
  };
  if (dir < 0 || todo.empty()) return fail("cannot write " + path + ": " + std::strerror(dir < 0 ? errno : EISDIR));
  for (int links = 0;;) {
    const std::string name = todo.front();
    todo.pop_front();
    struct stat st {}, dir_st {};
    if (fstat(dir, &dir_st) != 0) return fail("cannot write " + path + ": " + std::strerror(errno));
    const bool shared = dir_st.st_mode & S_IWOTH;
    const std::string shown_dir = dir_path.empty() ? "." : dir_path;
    if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT || !todo.empty()) return fail("cannot write " + path + ": " + std::strerror(errno));
      st.st_mode = 0;  // created by the open
    }
    if (S_ISLNK(st.st_mode)) {
      if (shared && !follow_symlinks && todo.empty())
        return fail("refusing to write " + path + ": it is a symbolic link in the world-writable directory " +
                    shown_dir + " (--output-follow-symlinks allows it)");
      // A directory on the way: the kernel's own rule (protected_symlinks),
      // a sticky directory whose link is ours or its owner's.
      if (shared && !follow_symlinks &&
          (!(dir_st.st_mode & S_ISVTX) || (st.st_uid != geteuid() && st.st_uid != dir_st.st_uid)))
        return fail(fmt::format("refusing to write {}: {} is a symbolic link of user {} in the world-writable "
                                "directory {} (--output-follow-symlinks allows it)",
                                path, joined(dir_path, name), st.st_uid, shown_dir));
      char target[PATH_MAX];
      const ssize_t n = readlinkat(dir, name.c_str(), target, sizeof target);
      if (n <= 0 || n == sizeof target || ++links > 40)
        return fail("cannot write " + path + ": " + std::strerror(n <= 0 ? errno : ELOOP));
      const std::string to(target, static_cast<std::size_t>(n));
      if (to[0] == '/') {
        close(dir);
        dir_path = "/";
        if ((dir = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
          return fail("cannot write " + path + ": " + std::strerror(errno));
      }
      push_components(to);
      if (todo.empty()) return fail("cannot write " + path + ": " + std::strerror(EISDIR));  // a link to "/"
      continue;
    }
    if (todo.empty()) {
      out = Resolved{dir, name, shown_dir, shared};
      return true;
    }
    const int next = openat(dir, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) return fail("cannot write " + path + ": " + std::strerror(errno));
    close(dir);
    dir = next;
    dir_path = joined(dir_path, name);
  }
}

}  // namespace

int open_output_file(const std::string& path, const OutputFileOptions& options, std::string& error) {
  Resolved where;
  if (!resolve(path, options.follow_symlinks, where, error)) return -1;
  const bool private_trace = options.private_trace;
  // A FIFO: opened without blocking, so that a FIFO nobody reads yet is
  // waited for here, said on stderr, before anything is traced.
  struct stat fifo {};
  const bool is_fifo = fstatat(where.dir, where.name.c_str(), &fifo, AT_SYMLINK_NOFOLLOW) == 0 && S_ISFIFO(fifo.st_mode);
  // No link is left to follow: one that appears now was put there since.
  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | (is_fifo ? O_NONBLOCK : 0);
  int fd = openat(where.dir, where.name.c_str(), flags, private_trace ? 0600 : 0644);
  if (fd < 0 && is_fifo && errno == ENXIO) {
    fmt::print(stderr, "cudatrace: waiting for a reader of {:?} (a FIFO); nothing is traced until one opens it\n",
               path);
    constexpr useconds_t kRetryUs = 50000;
    while ((fd = openat(where.dir, where.name.c_str(), flags, 0)) < 0 && errno == ENXIO) {
      if (options.stop_waiting && options.stop_waiting()) {
        close(where.dir);
        error.clear();
        return -1;
      }
      usleep(kRetryUs);  // a stop signal cuts it short
    }
  }
  const int open_errno = errno;
  close(where.dir);
  if (fd >= 0 && is_fifo) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // the writer thread may wait
  if (fd < 0) {
    if (open_errno == ELOOP && where.shared && !options.follow_symlinks)
      error = "refusing to write " + path + ": it is a symbolic link in the world-writable directory " +
              where.dir_path + " (--output-follow-symlinks allows it)";
    else
      error = "cannot write " + path + ": " + std::strerror(open_errno);
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
