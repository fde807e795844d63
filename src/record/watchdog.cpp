#include "cudatrace/record/watchdog.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <string>

#include "cudatrace/bpf_abi.h"
#include "cudatrace/record/ring_reader.h"

namespace cudatrace {
namespace {

bool continue_stopped(void*, const void* data, std::size_t size) {
  if (size < sizeof(ct_map_change)) return false;
  const auto* m = static_cast<const ct_map_change*>(data);
  if (m->type == CT_REC_MAP_CHANGE && m->stopped) kill(static_cast<pid_t>(m->pid), SIGCONT);
  return false;
}

[[noreturn]] void watch(pid_t parent, int parent_fd, int ring_fd) {
  // Keep only the ring buffer and cudatrace's pidfd: the parent's probes
  // must go when it does.
  const int keep = 3, keep_parent = 4;
  // Out of the way first: either may be the other's place.
  const int ring = fcntl(ring_fd, F_DUPFD, keep_parent + 1);
  const int moved = parent_fd >= 0 ? fcntl(parent_fd, F_DUPFD, keep_parent + 1) : -1;
  if (ring < 0 || dup2(ring, keep) != keep) _exit(1);
  if (parent_fd >= 0 && (moved < 0 || dup2(moved, keep_parent) != keep_parent)) _exit(1);
  const int pidfd = parent_fd >= 0 ? keep_parent : -1;
  syscall(SYS_close_range, keep_parent + 1, ~0u, 0);
  const int null_fd = open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3; ++fd) dup2(null_fd, fd);
  if (null_fd > 2) close(null_fd);
  // Ctrl-C reaches the whole process group; the watchdog outlives it.
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  // Wait until cudatrace has wholly exited, not only the thread that forked
  // this one (which is when a parent-death signal comes): its probes stay
  // until its last thread has closed its last link, seconds after a SIGKILL.
  // A pidfd becomes readable when the whole thread group has exited, after
  // every descriptor was closed.
  if (pidfd >= 0) {
    pollfd gone{pidfd, POLLIN, 0};
    while (poll(&gone, 1, -1) < 0 && errno == EINTR) {
    }
  } else {  // no pidfd (seccomp): the parent thread's death, the best left
    sigset_t death;
    sigemptyset(&death);
    sigaddset(&death, SIGUSR1);
    sigprocmask(SIG_BLOCK, &death, nullptr);
    prctl(PR_SET_PDEATHSIG, SIGUSR1);
    if (getppid() == parent) sigwaitinfo(&death, nullptr);
  }
  // The parent is gone and its descriptors with it: its links are
  // detached, and detaching waited for programs in flight, so every loader
  // record is complete (each one published after its SIGSTOP was queued;
  // one made while cudatrace was dying undid its own stop, see
  // ct_map_change) and nothing is stopped any more; continue what was.
  std::string error;
  if (auto ring = RingReader::open(keep, continue_stopped, nullptr, error)) ring->drain();
  _exit(0);
}

}  // namespace

pid_t start_watchdog(int ring_fd) {
  const pid_t parent = getpid();
  // Opened here, while cudatrace surely lives: the watchdog cannot mistake
  // another process that got the same pid for it.
  const int parent_fd = static_cast<int>(syscall(SYS_pidfd_open, parent, 0));
  // Neither cudatrace's child nor in its session or process group: a kill of
  // cudatrace and its children (kill -9 $C $(pgrep -P $C)) or of its group
  // (a terminal's, a service manager's) leaves it to continue what they
  // left stopped. Without a pidfd it must stay the child, to hear of the
  // parent's death (PR_SET_PDEATHSIG).
  int report[2];
  if (parent_fd < 0 || pipe2(report, O_CLOEXEC) != 0) {
    if (parent_fd >= 0) close(parent_fd);
    const pid_t pid = fork();
    if (pid == 0) watch(parent, -1, ring_fd);
    return pid;
  }
  const pid_t middle = fork();
  if (middle == 0) {
    close(report[0]);
    setsid();
    const pid_t pid = fork();
    if (pid == 0) {
      close(report[1]);
      watch(parent, parent_fd, ring_fd);
    }
    (void)!write(report[1], &pid, sizeof pid);
    _exit(pid > 0 ? 0 : 1);
  }
  close(report[1]);
  close(parent_fd);
  pid_t pid = -1;
  if (middle < 0 || read(report[0], &pid, sizeof pid) != static_cast<ssize_t>(sizeof pid)) pid = -1;
  close(report[0]);
  if (middle > 0) waitpid(middle, nullptr, 0);
  return pid;
}

}  // namespace cudatrace
