// The command cudatrace runs (`cudatrace -- CMD`): forked at once, but held
// before exec until released, so that probes are attached before its first
// instruction runs.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace cudatrace {

struct HeldCommand {
  pid_t pid = -1;
  int release_fd = -1;     // the command waits for a byte on this pipe before exec
  int exec_error_fd = -1;  // why its exec failed, or end of file when it succeeded
  std::string exe;
};

struct CommandSetup {
  std::string exe;                    // resolved path to execute
  std::vector<std::string> argv;
  bool stdout_to_stderr = false;      // keep a trace on standard output the trace alone
  std::string nvtx_injection;         // NVTX_INJECTION64_PATH for the command; empty: unchanged
  // Set in the command before its exec: the dispositions cudatrace was
  // started with, for the signals it catches itself.
  std::vector<std::pair<int, struct sigaction>> signals;
  // Readable once cudatrace is dying (BpfObject::tracer_exit_fd): the held
  // command then ends at once, as at the release pipe's end, which comes
  // only once the kernel has closed every link of cudatrace (seconds).
  int tracer_exit_fd = -1;
};

// Forks the command, which waits on a pipe. False with `error` set
// ("pipe: ..." / "fork: ...") when it cannot.
bool fork_held_command(const CommandSetup& setup, HeldCommand& cmd, std::string& error);

// Lets the command exec, and waits until it has. False with `error` set
// when the byte cannot be sent or the exec failed ("cannot run EXE: ...").
bool release_command(HeldCommand& cmd, std::string& error);

// Closes the release pipe unreleased: the command ends without running
// (EOF instead of a byte means the tracer gave up).
void abandon_command(HeldCommand& cmd);

}  // namespace cudatrace
