#include "cudatrace/record/watchdog.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
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

bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  int n;
  while ((n = poll(&p, 1, timeout_ms)) < 0 && errno == EINTR) {
  }
  return n > 0;
}

// Waits until either descriptor is readable.
void wait_for_either(int a, int b) {
  pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
  while (poll(p, 2, -1) < 0 && errno == EINTR) {
  }
}

[[noreturn]] void watch(pid_t parent, int parent_fd, int ring_fd, int exit_fd) {
  // Keep only the ring buffers and cudatrace's pidfd: the parent's probes
  // must go when it does.
  const int ring = 3, exit_ring = 4, parent_pidfd = 5;
  // Out of the way first: any may be another's place.
  const int moved_ring = fcntl(ring_fd, F_DUPFD, parent_pidfd + 1);
  const int moved_exit = exit_fd >= 0 ? fcntl(exit_fd, F_DUPFD, parent_pidfd + 1) : -1;
  const int moved_parent = parent_fd >= 0 ? fcntl(parent_fd, F_DUPFD, parent_pidfd + 1) : -1;
  if (moved_ring < 0 || dup2(moved_ring, ring) != ring) _exit(1);
  const bool have_exit = moved_exit >= 0 && dup2(moved_exit, exit_ring) == exit_ring;
  if (parent_fd >= 0 && (moved_parent < 0 || dup2(moved_parent, parent_pidfd) != parent_pidfd)) _exit(1);
  syscall(SYS_close_range, parent_pidfd + 1, ~0u, 0);
  const int null_fd = open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3; ++fd) dup2(null_fd, fd);
  if (null_fd > 2) close(null_fd);
  // Ctrl-C reaches the whole process group; the watchdog outlives it.
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  // `gone`: readable once cudatrace has wholly exited, after every
  // descriptor of it was closed (a pidfd). Without one (seccomp) the parent
  // thread's death, the best left: this is then cudatrace's child.
  int gone = parent_fd >= 0 ? parent_pidfd : -1;
  if (gone < 0) {
    sigset_t death;
    sigemptyset(&death);
    sigaddset(&death, SIGUSR1);
    sigprocmask(SIG_BLOCK, &death, nullptr);
    gone = signalfd(-1, &death, SFD_CLOEXEC);
    prctl(PR_SET_PDEATHSIG, SIGUSR1);
    if (getppid() != parent) raise(SIGUSR1);  // already gone
  }
  if (gone < 0 && !have_exit) _exit(1);  // nothing to wait on
  // The stops are undone as soon as every thread of cudatrace has begun to
  // exit (the tracer_exit ring): none of it reads the ring any more, and
  // waiting for it to have wholly exited would leave them stopped while the
  // kernel closes its links, seconds with --attach perf or on a busy host
  // (one grace period each). A normal exit tells nothing there (its
  // tracepoints are detached first): cudatrace continued everything itself.
  wait_for_either(have_exit ? exit_ring : -1, gone);
  std::string error;
  auto reader = RingReader::open(ring, continue_stopped, nullptr, error);
  if (!reader) _exit(1);
  // Until the probes are gone, a loader record reserved before cudatrace
  // began to die may still come (one made after it undid its own stop, see
  // ct_map_change): read on until cudatrace has wholly exited, then once
  // more. Its links are then detached, and detaching waited for programs
  // in flight: every loader record is complete and nothing is stopped any
  // more.
  if (gone >= 0) {
    reader->wake_on(gone);
    while (!readable(gone, 0)) reader->poll(-1);
  }
  reader->drain();
  _exit(0);
}

}  // namespace

pid_t start_watchdog(int ring_fd, int tracer_exit_fd) {
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
    if (pid == 0) watch(parent, -1, ring_fd, tracer_exit_fd);
    return pid;
  }
  const pid_t middle = fork();
  if (middle == 0) {
    close(report[0]);
    setsid();
    const pid_t pid = fork();
    if (pid == 0) {
      close(report[1]);
      watch(parent, parent_fd, ring_fd, tracer_exit_fd);
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
