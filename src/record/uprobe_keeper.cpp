#include "cudatrace/record/uprobe_keeper.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "cudatrace/clock.h"

namespace cudatrace {
namespace {

// Root-only: another user must not be able to hand cudatrace events or hold
// its probes. The protocol's version is in the socket's name.
// CUDATRACE_RUN_DIR moves them (a test's deaf keeper must not take the
// machine's place); the directory must still be root's alone.
std::string run_dir() {
  const char* dir = std::getenv("CUDATRACE_RUN_DIR");
  return dir && *dir ? dir : "/run/cudatrace";
}
const std::string kDir = run_dir();
const std::string kSocket = kDir + "/uprobes-1.sock";
const std::string kLock = kDir + "/uprobes.lock";

enum Op : std::uint8_t { kTake = 'T', kGive = 'G', kRelease = 'R', kWindowOpen = 'A', kWindowClose = 'a' };

struct Request {
  std::uint8_t op = 0;
  std::uint8_t retprobe = 0;
  std::uint8_t pad[6] = {};
  std::uint64_t dev = 0, ino = 0, offset = 0;
};

Request request(Op op, const UprobeKey& key = {}) {
  Request r;
  r.op = op;
  r.retprobe = key.retprobe;
  r.dev = key.dev;
  r.ino = key.ino;
  r.offset = key.offset;
  return r;
}

UprobeKey key_of(const Request& r) {
  UprobeKey k;
  k.dev = r.dev;
  k.ino = r.ino;
  k.offset = r.offset;
  k.retprobe = r.retprobe != 0;
  return k;
}

// One message, with a descriptor when `fd` >= 0.
bool send_message(int sock, const void* data, std::size_t size, int fd) {
  iovec iov{const_cast<void*>(data), size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  ssize_t n;
  do n = sendmsg(sock, &msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(size);
}

// One message; `fd` gets the descriptor it carried, or -1. Returns the
// size read, 0 at the peer's end, -1 on error.
ssize_t receive_message(int sock, void* data, std::size_t size, int& fd) {
  iovec iov{data, size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  fd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return n;
}

std::int64_t now_ms() { return static_cast<std::int64_t>(monotonic_ns() / 1000000); }

class Keeper {
 public:
  Keeper(int listener, int idle_ms) : listener_(listener), idle_ms_(idle_ms) {}
  void add_client(int fd) { clients_[fd] = 0; }
  void run();

 private:
  struct Event {
    UprobeKey key;
    int fd;
    int owner;  // the client using it, or -1 when idle
    std::int64_t idle_since_ms;
  };
  void serve(int client);
  void drop_client(int client);
  void accept_clients();
  // The next event to destroy now, or events_.end(); `wait_ms` gets how long
  // until one is due (-1: none).
  std::vector<Event>::iterator due(int& wait_ms);
  bool may_exit();

  int listener_, idle_ms_;
  std::map<int, int> clients_;  // descriptor -> attach windows it has open
  std::vector<Event> events_;
};

void Keeper::accept_clients() {
  while (true) {
    const int fd = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    ucred peer{};
    socklen_t len = sizeof peer;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 || peer.uid != geteuid()) {
      close(fd);
      continue;
    }
    fcntl(fd, F_SETFL, 0);  // blocking again: replies are small
    add_client(fd);
  }
}

void Keeper::drop_client(int client) {
  for (Event& e : events_)
    if (e.owner == client) {
      e.owner = -1;
      e.idle_since_ms = now_ms();
    }
  clients_.erase(client);
  close(client);
}

void Keeper::serve(int client) {
  Request r;
  int fd = -1;
  const ssize_t n = receive_message(client, &r, sizeof r, fd);
  if (n != static_cast<ssize_t>(sizeof r)) {
    if (fd >= 0) close(fd);
    drop_client(client);  // gone (or speaking another protocol)
    return;
  }
  switch (r.op) {
    case kGive:
      if (fd >= 0) events_.push_back({key_of(r), fd, client, 0});
      return;
    case kTake: {
      const UprobeKey key = key_of(r);
      auto it = std::find_if(events_.begin(), events_.end(),
                             [&](const Event& e) { return e.owner < 0 && e.key == key; });
      const char answer = it == events_.end() ? 'n' : 'y';
      if (it != events_.end()) it->owner = client;
      if (!send_message(client, &answer, 1, it == events_.end() ? -1 : it->fd)) drop_client(client);
      return;
    }
    case kRelease: {
      const UprobeKey key = key_of(r);
      for (Event& e : events_)
        if (e.owner == client && e.key == key) {
          e.owner = -1;
          e.idle_since_ms = now_ms();
          break;
        }
      return;
    }
    case kWindowOpen:
      ++clients_[client];
      return;
    case kWindowClose:
      if (clients_[client] > 0) --clients_[client];
      return;
  }
  if (fd >= 0) close(fd);
}

std::vector<Keeper::Event>::iterator Keeper::due(int& wait_ms) {
  wait_ms = -1;
  for (const auto& [fd, windows] : clients_)
    if (windows > 0) return events_.end();  // someone is attaching: it goes first
  const std::int64_t now = now_ms();
  auto next = events_.end();
  for (auto it = events_.begin(); it != events_.end(); ++it) {
    if (it->owner >= 0) continue;
    const std::int64_t left = it->idle_since_ms + idle_ms_ - now;
    if (left <= 0) return it;
    if (wait_ms < 0 || left < wait_ms) wait_ms = static_cast<int>(left);
  }
  return next;
}

// With nobody and nothing left: under the start lock (clients connect only
// while holding it), and only if no connection is waiting, the socket goes.
bool Keeper::may_exit() {
  if (!clients_.empty() || !events_.empty()) return false;
  if (listener_ < 0) return true;
  const int lock = open(kLock.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (lock >= 0) flock(lock, LOCK_EX);
  accept_clients();
  const bool exit = clients_.empty();
  if (exit) unlink(kSocket.c_str());
  if (lock >= 0) close(lock);
  return exit;
}

void Keeper::run() {
  std::vector<pollfd> fds;
  while (!may_exit()) {
    int wait_ms = -1;
    auto victim = due(wait_ms);
    if (victim != events_.end()) {
      // Destroying takes the kernel's grace periods: one at a time, looking
      // for new requests (an attach window) in between.
      close(victim->fd);
      events_.erase(victim);
      wait_ms = 0;
    }
    fds.clear();
    if (listener_ >= 0) fds.push_back({listener_, POLLIN, 0});
    for (const auto& [fd, windows] : clients_) fds.push_back({fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), wait_ms) <= 0) continue;
    for (const pollfd& p : fds) {
      if (!p.revents) continue;
      if (p.fd == listener_)
        accept_clients();
      else if (clients_.count(p.fd))
        serve(p.fd);
    }
  }
}

// In the new keeper process: keeps only its sockets, then serves.
[[noreturn]] void become_keeper(int listener, int client, int idle_ms) {
  // Move the two sockets to 3 and 4 and close everything else: cudatrace's
  // output, its command's start pipe and its own links must not stay open
  // here (a test's pipes would never see EOF).
  const int first = 3;
  int fds[2] = {listener, client};
  int moved[2] = {-1, -1};
  for (int i = 0; i < 2; ++i)
    if (fds[i] >= 0) moved[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 16);
  syscall(SYS_close_range, first, 15u, 0);
  for (int i = 0; i < 2; ++i)
    if (moved[i] >= 0) {
      const int target = first + i;
      if (dup3(moved[i], target, O_CLOEXEC) != target) _exit(1);
      moved[i] = target;
    }
  syscall(SYS_close_range, first + 2, ~0u, 0);
  const int null_fd = open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3; ++fd) dup2(null_fd, fd);
  if (null_fd > 2) close(null_fd);
  prctl(PR_SET_NAME, "ct-uprobes");  // what ps shows
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  run_uprobe_keeper(moved[0], moved[1] >= 0 ? std::vector<int>{moved[1]} : std::vector<int>{}, idle_ms);
  _exit(0);
}

// Starts the keeper as a grandchild in its own session: not cudatrace's
// child (nothing to reap, no signal from its terminal).
bool start_keeper(int listener, int client, int idle_ms) {
  const pid_t child = fork();
  if (child < 0) return false;
  if (child == 0) {
    setsid();
    if (fork() == 0) become_keeper(listener, client, idle_ms);
    _exit(0);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return true;
}

int connect_to(const sockaddr_un& addr) {
  const int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (sock < 0) return -1;
  if (connect(sock, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) return sock;
  close(sock);
  return -1;
}

// The machine's keeper, started if there is none; -1 where /run/cudatrace is
// not ours (not root) or anything fails.
int connect_shared() {
  if (geteuid() != 0) return -1;
  if (mkdir(kDir.c_str(), 0700) != 0 && errno != EEXIST) return -1;
  struct stat st {};
  if (lstat(kDir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 077)) return -1;
  const int lock = open(kLock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (lock < 0) return -1;
  flock(lock, LOCK_EX);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, kSocket.c_str(), sizeof addr.sun_path - 1);
  int sock = connect_to(addr);
  if (sock < 0) {
    unlink(kSocket.c_str());  // a keeper that died
    const int listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (listener >= 0 && bind(listener, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0 &&
        listen(listener, 64) == 0 && start_keeper(listener, -1, UprobeKeeper::kIdleMs))
      sock = connect_to(addr);
    if (listener >= 0) close(listener);
  }
  close(lock);
  return sock;
}

// Set once the machine's keeper left this process's first question
// unanswered: every later connection goes to a private keeper at once.
bool shared_keeper_silent = false;

}  // namespace

void run_uprobe_keeper(int listener, const std::vector<int>& clients, int idle_ms) {
  if (listener >= 0) fcntl(listener, F_SETFL, O_NONBLOCK);  // accept only who is waiting
  Keeper keeper(listener, idle_ms);
  for (int client : clients) keeper.add_client(client);
  keeper.run();
  if (listener >= 0) close(listener);
}

std::unique_ptr<UprobeKeeper> UprobeKeeper::over(int sock) {
  const timeval limit{UprobeKeeper::kAnswerMs / 1000, UprobeKeeper::kAnswerMs % 1000 * 1000};
  setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  return std::unique_ptr<UprobeKeeper>(new UprobeKeeper(sock));
}

std::unique_ptr<UprobeKeeper> UprobeKeeper::connect(std::string& error, std::string& notice) {
  if (const int sock = shared_keeper_silent ? -1 : connect_shared(); sock >= 0) {
    auto shared = over(sock);
    // Asking for the event of no file: any keeper that serves answers no.
    if (shared->take(UprobeKey{}) < 0 && shared->answering()) return shared;
    shared_keeper_silent = true;
    notice = "the machine's perf-event uprobe keeper (ct-uprobes, " + kSocket + ") did not answer in " +
             std::to_string(kAnswerMs / 1000) + " s; this run starts its own";
  }
  // A private keeper: nobody else to reuse the events, so none is kept idle.
  int socks[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, socks) != 0 || !start_keeper(-1, socks[1], 0)) {
    error = std::strerror(errno);
    return nullptr;
  }
  close(socks[1]);
  return over(socks[0]);
}

int UprobeKeeper::take(const UprobeKey& key) {
  if (!answering_) return -1;
  const Request r = request(kTake, key);
  char answer = 0;
  int fd = -1;
  const bool answered = send_message(sock_, &r, sizeof r, -1) && receive_message(sock_, &answer, 1, fd) == 1;
  // A late answer would be read as the next question's: never ask again.
  if (!answered) answering_ = false;
  if (!answered || answer != 'y') {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

bool UprobeKeeper::give(const UprobeKey& key, int fd) {
  const Request r = request(kGive, key);
  return send_message(sock_, &r, sizeof r, fd);
}

void UprobeKeeper::release(const UprobeKey& key) {
  const Request r = request(kRelease, key);
  send_message(sock_, &r, sizeof r, -1);
}

void UprobeKeeper::attaching(bool open) {
  const Request r = request(open ? kWindowOpen : kWindowClose);
  send_message(sock_, &r, sizeof r, -1);
}

UprobeKeeper::~UprobeKeeper() { close(sock_); }

}  // namespace cudatrace
