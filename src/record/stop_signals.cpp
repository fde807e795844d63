#include "cudatrace/record/stop_signals.h"

#include <unistd.h>

#include <iterator>

namespace cudatrace {
namespace {

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

volatile sig_atomic_t g_stop = 0;  // the signal that asked us to stop
// ExitAtStop: whether a stop signal ends cudatrace at once, and with what
// (by the signal's place in kStopSignals).
volatile sig_atomic_t g_exit_at_stop = 0;
volatile sig_atomic_t g_exit_status[std::size(kStopSignals)] = {};

void on_signal(int sig) {
  g_stop = sig;
  if (!g_exit_at_stop) return;
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i)
    if (kStopSignals[i] == sig) _exit(g_exit_status[i]);
}

bool g_caught = false;
struct sigaction g_inherited[std::size(kStopSignals)] = {};

}  // namespace

void catch_stop_signals() {
  if (g_caught) return;  // the inherited dispositions are kept from the first call
  g_caught = true;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i) {
    sigaction(kStopSignals[i], nullptr, &g_inherited[i]);
    // An ignored SIGHUP is nohup's: cudatrace outlives the terminal as asked.
    if (kStopSignals[i] == SIGHUP && g_inherited[i].sa_handler == SIG_IGN) continue;
    sigaction(kStopSignals[i], &sa, nullptr);
  }
}

int stop_signal() { return g_stop; }

std::vector<std::pair<int, struct sigaction>> inherited_stop_signals() {
  std::vector<std::pair<int, struct sigaction>> inherited;
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i) inherited.emplace_back(kStopSignals[i], g_inherited[i]);
  return inherited;
}

ExitAtStop::ExitAtStop(const std::function<int(int signal)>& status) {
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i) g_exit_status[i] = status(kStopSignals[i]);
  g_exit_at_stop = 1;
  if (g_stop) on_signal(g_stop);  // one that came just before
}

ExitAtStop::~ExitAtStop() { g_exit_at_stop = 0; }

}  // namespace cudatrace
