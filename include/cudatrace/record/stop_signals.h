// SIGINT, SIGTERM and SIGHUP ask cudatrace to stop. Caught from the first
// moment (before the outputs are opened: a FIFO's reader is waited for),
// they are looked at by each step of the start-up and by the drain loop;
// while nothing started needs undoing (ExitAtStop), one ends cudatrace at
// once instead.
#pragma once

#include <signal.h>

#include <functional>
#include <utility>
#include <vector>

namespace cudatrace {

// Catches SIGINT, SIGTERM and SIGHUP, also where SIGINT or SIGTERM was left
// ignored (a background job of a script); a SIGHUP left ignored (nohup) stays
// so. Called again, it changes nothing.
void catch_stop_signals();

// The signal that asked cudatrace to stop; 0 while none has come.
int stop_signal();

// How the stop signals were set before catch_stop_signals: a command
// cudatrace starts gets them so.
std::vector<std::pair<int, struct sigaction>> inherited_stop_signals();

// While one lives, a stop signal ends cudatrace at once, with the exit
// status `status(signal)` gives (asked here for each signal, not in the
// handler). For steps that leave nothing to undo and would only start over
// after the signal: loading the BPF object, which the kernel frees at exit,
// where the verifier alone takes seconds on a busy node and libbpf would
// start it over after the signal interrupted it.
class ExitAtStop {
 public:
  explicit ExitAtStop(const std::function<int(int signal)>& status);
  ~ExitAtStop();
  ExitAtStop(const ExitAtStop&) = delete;
  ExitAtStop& operator=(const ExitAtStop&) = delete;
};

}  // namespace cudatrace
