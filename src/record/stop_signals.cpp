#include "cudatrace/record/stop_signals.h"

#include <unistd.h>

namespace cudatrace {
namespace {

volatile sig_atomic_t g_stop = 0;  // the signal that asked us to stop
// ExitAtStop: whether a stop signal ends cudatrace at once, and with what.
volatile sig_atomic_t g_exit_at_stop = 0;
volatile sig_atomic_t g_exit_status_int = 0, g_exit_status_term = 0;

void on_signal(int sig) {
  g_stop = sig;
  if (g_exit_at_stop) _exit(sig == SIGINT ? g_exit_status_int : g_exit_status_term);
}

struct sigaction g_inherited_int {}, g_inherited_term {};

}  // namespace

void catch_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, &g_inherited_int);
  sigaction(SIGTERM, &sa, &g_inherited_term);
}

int stop_signal() { return g_stop; }

std::vector<std::pair<int, struct sigaction>> inherited_stop_signals() {
  return {{SIGINT, g_inherited_int}, {SIGTERM, g_inherited_term}};
}

ExitAtStop::ExitAtStop(const std::function<int(int signal)>& status) {
  g_exit_status_int = status(SIGINT);
  g_exit_status_term = status(SIGTERM);
  g_exit_at_stop = 1;
}

ExitAtStop::~ExitAtStop() { g_exit_at_stop = 0; }

}  // namespace cudatrace
