#include "cudatrace/target/command.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace cudatrace {

bool fork_held_command(const CommandSetup& setup, HeldCommand& cmd, std::string& error) {
  int pipefd[2], exec_pipe[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) {
    error = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  // The child writes why its exec failed here; a successful exec closes it.
  if (pipe2(exec_pipe, O_CLOEXEC) != 0) {
    error = std::string("pipe: ") + std::strerror(errno);
    close(pipefd[0]);
    close(pipefd[1]);
    return false;
  }
  // Everything the child needs is prepared before fork.
  std::vector<char*> argv;
  for (const std::string& a : setup.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  cmd.pid = fork();
  if (cmd.pid < 0) {
    error = std::string("fork: ") + std::strerror(errno);
    for (int fd : {pipefd[0], pipefd[1], exec_pipe[0], exec_pipe[1]}) close(fd);
    return false;
  }
  if (cmd.pid == 0) {
    close(pipefd[1]);
    close(exec_pipe[0]);
    // A trace on standard output stays the trace alone (a JSON stream for
    // jq, say): the command's own standard output goes to cudatrace's
    // standard error, as strace and ltrace keep theirs apart.
    if (setup.stdout_to_stderr && dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
      const int null_fd = open("/dev/null", O_WRONLY);
      if (null_fd >= 0) dup2(null_fd, STDOUT_FILENO);
    }
    char go = 0;
    // EOF instead of a byte, or the tracer dying: it gave up; do not run untraced.
    pollfd held[2] = {{pipefd[0], POLLIN, 0}, {setup.tracer_exit_fd, POLLIN, 0}};
    while (poll(held, 2, -1) < 0 && errno == EINTR) {
    }
    if (held[1].revents || read(pipefd[0], &go, 1) != 1) _exit(127);
    for (const auto& [sig, action] : setup.signals) sigaction(sig, &action, nullptr);
    // --nvtx: the command's NVTX loads our injection library; nothing else in its environment changes.
    if (!setup.nvtx_injection.empty()) setenv("NVTX_INJECTION64_PATH", setup.nvtx_injection.c_str(), 1);
    execv(setup.exe.c_str(), argv.data());
    const int why = errno;
    (void)!write(exec_pipe[1], &why, sizeof why);
    _exit(127);
  }
  close(pipefd[0]);
  close(exec_pipe[1]);
  cmd.release_fd = pipefd[1];
  cmd.exec_error_fd = exec_pipe[0];
  cmd.exe = setup.exe;
  return true;
}

bool release_command(HeldCommand& cmd, std::string& error) {
  if (cmd.release_fd < 0) return true;
  const char go = 1;
  if (write(cmd.release_fd, &go, 1) != 1) {
    error = std::string("cannot start the command: ") + std::strerror(errno);
    return false;
  }
  // End of file once the exec succeeded; its errno if it failed.
  int why = 0;
  ssize_t n;
  do n = read(cmd.exec_error_fd, &why, sizeof why);
  while (n < 0 && errno == EINTR);
  abandon_command(cmd);
  if (n == sizeof why) {
    error = "cannot run " + cmd.exe + ": " + std::strerror(why);
    return false;
  }
  return true;
}

void abandon_command(HeldCommand& cmd) {
  for (int* fd : {&cmd.release_fd, &cmd.exec_error_fd}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

}  // namespace cudatrace
