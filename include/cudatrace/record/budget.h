// --max-overhead PCT: an always-on budget for what tracing costs the traced
// processes (docs/fleet.md, "The budget").
//
// The hot probes (is_hot_api: launches, async memsets, queries) are attached through
// links of their own (probes.h: Probes::split_hot). When their estimated cost
// passes the budget they are duty-cycled: attached for a short sampled
// window, detached for the rest of a period. The low-rate APIs (allocations,
// copies, synchronisation...) stay attached and exact. What the sampled
// windows counted is extrapolated, and marked estimated through Sampling.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cudatrace/decode/api_table.h"
#include "cudatrace/bpf_abi.h"
#include "cudatrace/record/cost.h"

namespace cudatrace {

// The probe-cost estimate came out ~2x below the slowdown measured on the
// H200 for launch-bound inference (8.5-10 % estimated, 15-19 % measured;
// docs/benchmarks.md): the budget prices every hit (each kind at its own
// start-up price, cost.h) at this many times the start-up measurement,
// a margin above the exit line's kWorkloadFactor so that it holds for the
// real cost. docs/fleet.md says where the number comes from.
inline constexpr double kCostSafetyFactor = 2.0;

// Probe hit costs to fall back on when the start-up measurement failed: an
// H200 host's (docs/benchmarks.md), in ns.
inline constexpr double kFallbackEntryNs = 500, kFallbackReturnNs = 500;

struct BudgetConfig {
  double max_fraction = 0.01;        // --max-overhead / 100
  std::uint64_t first_window_ns = 20000000;   // the first look at the cost, probes attached
  // While the cost is within the budget with every probe attached, how often
  // it is looked at again: a process that starts launching pays full price
  // for at most this long before sampling starts.
  std::uint64_t check_ns = 100000000;
  std::uint64_t period_ns = 1000000000;       // one attached + detached cycle
  std::uint64_t min_on_ns = 50000000;         // shortest sampled window
  std::uint64_t max_period_ns = 10000000000;  // longest cycle (when a switch is slow or the cost high)
};

// The controller, without I/O: fed the cost of each window that ends,
// it says whether the hot probes are attached in the next one and until when.
class DutyCycle {
 public:
  DutyCycle(BudgetConfig config, std::uint64_t start_ns);

  // Ends the window that started at the previous switch. `cost` is the
  // estimated cost (safety factor included) of the most affected process
  // during it, as a fraction of its time. `switch_cost_ns`: what switching
  // the hot probes at the start of that window cost, charged to every
  // process; `attach_delay_ns`: how long into an attached window the probes
  // were still being attached (not counted as attached time).
  void end_window(std::uint64_t now_ns, double cost, std::uint64_t switch_cost_ns = 0,
                  std::uint64_t attach_delay_ns = 0);

  bool attached() const { return attached_; }
  std::uint64_t deadline_ns() const { return deadline_ns_; }
  // Time so far with the hot probes attached, and in all.
  std::uint64_t attached_ns() const { return attached_ns_; }
  std::uint64_t elapsed_ns() const { return elapsed_ns_; }
  // Estimated cost so far as a fraction of the time traced (switches included).
  double cost_so_far() const { return elapsed_ns_ ? added_ns_ / double(elapsed_ns_) : 0; }
  // Cost while attached, averaged over attached time (the slowdown of the
  // sampled windows; it corrects the extrapolation).
  double attached_cost() const { return attached_ns_ ? attached_added_ns_ / double(attached_ns_) : 0; }
  bool ever_detached() const { return ever_detached_; }
  // The low-rate probes alone cost more than the budget (nothing left to detach).
  bool budget_unreachable() const { return unreachable_; }

 private:
  BudgetConfig config_;
  bool attached_ = true, ever_detached_ = false, unreachable_ = false;
  std::uint64_t window_start_ns_, deadline_ns_;
  std::uint64_t attached_ns_ = 0, elapsed_ns_ = 0;
  double added_ns_ = 0, attached_added_ns_ = 0;
  double cost_on_ = 0, cost_off_ = 0;  // last measured, attached and detached
  double switch_ns_ = 0;               // largest switch cost seen
};

// The seen fraction of a hot API's calls: its probes' share of the time,
// less the slowdown they caused while attached (a slowed process makes
// fewer calls per second; `attached_cost` is that cost as a fraction).
double seen_ratio(double attached_share, double attached_cost);



// A process's probe hits so far, in all and by thread (tid; 0: the threads
// that exited), and its CPU time: what the budget compares from one window
// to the next.
struct HitSnapshot {
  struct Hits {
    std::uint64_t entry = 0, ret = 0;
    std::uint64_t stepped = 0;  // of entry, on single-stepped probes
  };
  Hits total;
  std::map<std::uint32_t, Hits> threads;
  std::uint64_t cpu_ns = 0;
  bool has_cpu = false;
};
using HitSnapshots = std::map<std::uint32_t, HitSnapshot>;  // by pid
HitSnapshots hit_snapshots(const std::vector<HitCount>& counts);

// The CPU time the traced processes spent between two snapshots, and the
// part of it that was theirs (not the probes': their hits priced at the
// given costs, divided by `factor`, kCostSafetyFactor's share of the price
// that is an allowance, not the cost a C loop measures). Processes whose
// CPU time is unknown in either snapshot are left out.
struct CpuSpent {
  double cpu_ns = 0, own_ns = 0;
};
CpuSpent cpu_spent(const HitSnapshots& before, const HitSnapshots& now, double entry_ns, double return_ns,
                   double stepped_ns, double factor);

// What the probe hits between two snapshots `length_ns` apart cost the most
// affected process, as a fraction of its time (hits priced at `entry_ns` and
// `return_ns`). The larger of two lower bounds: the process's added time over
// its time (wall-clock, or its CPU time when larger: threads running in
// parallel share the cost), and its most affected thread's added time over
// wall-clock time (a launching thread is slowed by its own hits, however
// busy the process's other threads are).
// A single-stepped hit (HitSnapshot::Hits::stepped) costs `stepped_ns`
// (negative: `entry_ns`).
double window_cost(const HitSnapshots& before, const HitSnapshots& now, std::uint64_t length_ns, double entry_ns,
                   double return_ns, double stepped_ns = -1);

}  // namespace cudatrace

namespace cudatrace {

class Probes;

// The controller at work while tracing: every window it reads the probe hits
// of each process (cost.h), prices them, and attaches or detaches the hot
// probes through `probes`. Also scales what BPF counted by the sampling.
class BudgetControl {
 public:
  // `detached` is called with the time each detach of the hot probes was
  // complete (the BPF side then drops their frames entered before it).
  BudgetControl(BudgetConfig config, Probes& probes, const ProbeCost* per_hit, int process_cost_fd, int threads_fd,
                std::uint64_t now_ns, std::function<void(std::uint64_t)> detached);

  // Milliseconds until the next switch (at most `max_ms`): the poll timeout.
  int timeout_ms(std::uint64_t now_ns, int max_ms) const;
  // Ends the windows that are due and switches the hot probes.
  void tick(std::uint64_t now_ns);
  // Tracing ends: the window in progress ends and the ratios stay as they
  // are. The probes may go after this, not before.
  void stop(std::uint64_t now_ns);
  const Sampling& sampling() const { return sampling_; }
  BudgetReport report() const;

  // Scales what was counted of sampled APIs to estimates of all calls.
  // Cumulative statistics stay monotonic from one call to the next (interval
  // reports subtract the previous ones).
  void extrapolate(std::vector<ct_api_stats>& run);
  // Launches BPF counted (summary.h: Activity) under `key` since the
  // previous read. Those of hot APIs are kept and 0 calls returned; the
  // others come back as they are. pass_activity hands the kept ones on,
  // scaled: what all calls passed on add up to is what was counted, scaled
  // by the ratio as it is then (a report's own).
  ct_activity extrapolate(const ct_activity_key& key, const ct_activity& counted);
  void pass_activity(const std::function<void(const ct_activity_key&, const ct_activity&)>& sink);

 private:
  HitSnapshots snapshot() const;
  // Ends the window in progress: prices its hits, hands the cost to the
  // cycle, logs it; the next window starts at `now_ns`.
  void end_window(std::uint64_t now_ns);
  void update_sampling(std::uint64_t now_ns);
  // The processes' own CPU time (cpu_spent) in windows with the hot probes
  // attached, and in all: a sampled API's calls scale by the ratio, which
  // the probes' slowdown of the attached windows cannot bias.
  double own_attached_ns_ = 0, own_total_ns_ = 0;
  // Attaches or detaches the hot probes as the cycle says, timing the switch.
  void switch_hot();
  // A CUDATRACE_BUDGET_LOG line for the window that just ended (before the
  // switch it decided on).
  void log_window(std::uint64_t now_ns, bool was_attached, std::uint64_t length_ns, double cost);

  BudgetConfig config_;
  Probes& probes_;
  std::function<void(std::uint64_t)> detached_;
  double entry_ns_, return_ns_, stepped_ns_;  // per hit, safety factor included
  int process_cost_fd_, threads_fd_;
  DutyCycle cycle_;
  HitSnapshots last_;
  std::uint64_t last_ns_, start_ns_;
  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, FileCloser> log_;  // CUDATRACE_BUDGET_LOG
  std::uint64_t switch_cost_ns_ = 0, attach_delay_ns_ = 0;  // the switch at the start of the current window
  std::uint64_t switches_ = 0;
  double attach_max_ns_ = 0, detach_max_ns_ = 0;
  bool stopped_ = false;
  Sampling sampling_;
  std::vector<ct_api_stats> reported_;  // the last extrapolated statistics
  struct KeyLess {
    bool operator()(const ct_activity_key& a, const ct_activity_key& b) const;
  };
  struct Scaled {
    std::uint64_t calls = 0, total_ns = 0;  // counted, and passed on
    std::uint64_t calls_out = 0, total_ns_out = 0;
    std::uint64_t first_ts_ns = 0, last_ts_ns = 0;
  };
  std::map<ct_activity_key, Scaled, KeyLess> activity_;
};

}  // namespace cudatrace
