// The budget's controller at work while tracing (budget.h: BudgetControl):
// reading hit counts, switching probes, scaling counts.
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cudatrace/clock.h"
#include "cudatrace/record/budget.h"
#include "cudatrace/record/probes.h"

namespace cudatrace {
namespace {

__u64 scaled(__u64 v, double ratio) {
  return static_cast<__u64>(std::llround(double(v) / ratio));
}

}  // namespace

BudgetControl::BudgetControl(BudgetConfig config, Probes& probes, const ProbeCost* per_hit, int process_cost_fd,
                             int threads_fd, std::uint64_t now_ns, std::function<void(std::uint64_t)> detached)
    : config_(config),
      probes_(probes),
      detached_(std::move(detached)),
      // A hit costs the traced thread its CPU time, or more where a trap's
      // exit to a hypervisor is not seen by the guest's accounting.
      entry_ns_(kCostSafetyFactor * (per_hit ? std::max(per_hit->entry_ns, per_hit->entry_wall_ns) : kFallbackEntryNs)),
      return_ns_(kCostSafetyFactor *
                 (per_hit ? std::max(per_hit->return_ns, per_hit->return_wall_ns) : kFallbackReturnNs)),
      stepped_ns_(per_hit ? kCostSafetyFactor * std::max(per_hit->stepped_ns, per_hit->stepped_wall_ns) : entry_ns_),
      process_cost_fd_(process_cost_fd),
      threads_fd_(threads_fd),
      cycle_(config, now_ns),
      last_ns_(now_ns),
      start_ns_(now_ns) {
  // The first look, the hot probes attached (not a switch of the cycle).
  const std::uint64_t start = monotonic_ns();
  switch_cost_ns_ = probes_.set_hot_attached(true);
  attach_delay_ns_ = monotonic_ns() - start;
  last_ = snapshot();
  // CUDATRACE_BUDGET_LOG=FILE: one line per window (docs/fleet.md), to see
  // what the controller measured and decided.
  if (const char* path = std::getenv("CUDATRACE_BUDGET_LOG"); path && *path) {
    log_.reset(std::fopen(path, "w"));
    if (log_)
      std::fprintf(log_.get(),
                   "# start_monotonic_ns %llu\n# t_s window_attached length_ms cost_pct switch_cpu_ms attach_ms "
                   "next_attached next_ms cost_so_far_pct attached_pct\n",
                   static_cast<unsigned long long>(start_ns_));
    else
      std::fprintf(stderr, "cudatrace: warning: CUDATRACE_BUDGET_LOG=%s: %s; the budget is kept without a log\n", path,
                   std::strerror(errno));
  }
}

void BudgetControl::log_window(std::uint64_t now_ns, bool was_attached, std::uint64_t length_ns, double cost) {
  if (!log_) return;
  std::fprintf(log_.get(), "%.3f %d %.1f %.3f %.3f %.3f %d %.1f %.3f %.2f\n", double(now_ns - start_ns_) / 1e9,
               was_attached, double(length_ns) / 1e6, 100 * cost, double(switch_cost_ns_) / 1e6,
               double(attach_delay_ns_) / 1e6, cycle_.attached(),
               double(cycle_.deadline_ns() - std::min(cycle_.deadline_ns(), now_ns)) / 1e6, 100 * cycle_.cost_so_far(),
               cycle_.elapsed_ns() ? 100.0 * double(cycle_.attached_ns()) / double(cycle_.elapsed_ns()) : 100.0);
  std::fflush(log_.get());
}

HitSnapshots BudgetControl::snapshot() const {
  std::vector<HitCount> counts;
  read_hit_counts(process_cost_fd_, threads_fd_, counts);
  HitSnapshots by_pid = hit_snapshots(counts);
  for (auto& [pid, s] : by_pid) {
    if (const auto cpu = process_cpu_ns(static_cast<pid_t>(pid))) {
      s.cpu_ns = *cpu;
      s.has_cpu = true;
    }
  }
  return by_pid;
}

int BudgetControl::timeout_ms(std::uint64_t now_ns, int max_ms) const {
  if (stopped_) return max_ms;
  const std::uint64_t due = cycle_.deadline_ns();
  if (due <= now_ns) return 0;
  return static_cast<int>(std::min<std::uint64_t>(max_ms, (due - now_ns + 999999) / 1000000));
}

void BudgetControl::tick(std::uint64_t now_ns) {
  if (stopped_ || now_ns < cycle_.deadline_ns()) return;
  end_window(now_ns);
  switch_hot();
  update_sampling(now_ns);
}

void BudgetControl::end_window(std::uint64_t now_ns) {
  HitSnapshots now = snapshot();
  const bool was_attached = cycle_.attached();
  const std::uint64_t length_ns = now_ns - last_ns_;
  const double cost = window_cost(last_, now, length_ns, entry_ns_, return_ns_, stepped_ns_);
  const CpuSpent spent = cpu_spent(last_, now, entry_ns_, return_ns_, stepped_ns_, kCostSafetyFactor);
  own_total_ns_ += spent.own_ns;
  if (was_attached) own_attached_ns_ += spent.own_ns;
  cycle_.end_window(now_ns, cost, switch_cost_ns_, attach_delay_ns_);
  log_window(now_ns, was_attached, length_ns, cost);
  last_ = std::move(now);
  last_ns_ = now_ns;
  switch_cost_ns_ = attach_delay_ns_ = 0;
}

void BudgetControl::switch_hot() {
  if (cycle_.attached() != probes_.hot_attached()) {
    const std::uint64_t start = monotonic_ns();
    const std::uint64_t kernel_cpu_ns = probes_.set_hot_attached(cycle_.attached());
    const std::uint64_t wall_ns = monotonic_ns() - start;
    // A traced process waits for a switch only while the kernel holds its
    // memory map locked to write or remove a breakpoint, a part of the
    // kernel's CPU time for the switch; that time is charged to every
    // process (an upper bound). Detaching also waits for RCU grace periods,
    // which no traced process waits for. The probes count as attached only
    // once attaching has ended.
    switch_cost_ns_ = kernel_cpu_ns;
    if (cycle_.attached()) {
      attach_delay_ns_ = wall_ns;
      attach_max_ns_ = std::max(attach_max_ns_, double(wall_ns));
    } else {
      detach_max_ns_ = std::max(detach_max_ns_, double(wall_ns));
      detached_(monotonic_ns());
    }
    ++switches_;
  }
}

void BudgetControl::stop(std::uint64_t now_ns) {
  if (stopped_) return;
  end_window(now_ns);
  stopped_ = true;
  update_sampling(now_ns);
}

// Every call is seen until the hot probes are first detached. Then a
// sampled API's calls were seen in the share of the processes' own CPU
// time (cpu_spent) that the attached windows had: a process slowed by the
// probes spends more wall-clock time per call while they are attached, but
// not more of its own CPU time. Without CPU times (a process gone between
// two looks), the share of wall-clock time, corrected by the cost as
// measured (docs/fleet.md).
void BudgetControl::update_sampling(std::uint64_t now_ns) {
  std::map<std::uint16_t, double> sampled;
  const double slowdown = cycle_.attached_cost() / kCostSafetyFactor;
  const double own_share = own_total_ns_ > 0 ? own_attached_ns_ / own_total_ns_ : 0;
  if (cycle_.ever_detached())
    for (const auto& [api, share] : probes_.hot_shares(now_ns))
      sampled[api] = own_share > 0 ? std::min(1.0, own_share) : seen_ratio(share, slowdown);
  sampling_.set(sampled);
}

BudgetReport BudgetControl::report() const {
  BudgetReport r;
  r.max_pct = config_.max_fraction * 100;
  r.safety_factor = kCostSafetyFactor;
  if (cycle_.elapsed_ns()) r.attached_pct = 100.0 * double(cycle_.attached_ns()) / double(cycle_.elapsed_ns());
  r.estimated_cost_pct = 100 * cycle_.cost_so_far();
  r.seen_ratio = sampling_.mean_ratio();
  r.switches = switches_;
  r.attach_ms_max = attach_max_ns_ / 1e6;
  r.detach_ms_max = detach_max_ns_ / 1e6;
  r.unreachable = cycle_.budget_unreachable();
  for (const auto& [api, ratio] : sampling_.sampled()) r.sampled_apis.push_back(apis()[api].symbol);
  std::sort(r.sampled_apis.begin(), r.sampled_apis.end());
  return r;
}

void BudgetControl::extrapolate(std::vector<ct_api_stats>& run) {
  reported_.resize(run.size());
  for (std::size_t id = 0; id < run.size(); ++id) {
    const double ratio = sampling_.ratio(static_cast<std::uint16_t>(id));
    if (ratio >= 1.0) continue;
    ct_api_stats& s = run[id];
    const ct_api_stats& before = reported_[id];
    s.calls = std::max(before.calls, scaled(s.calls, ratio));
    s.errors = std::max(before.errors, scaled(s.errors, ratio));
    s.total_ns = std::max(before.total_ns, scaled(s.total_ns, ratio));
    for (int b = 0; b < CT_HIST_BUCKETS; ++b) s.hist[b] = std::max(before.hist[b], scaled(s.hist[b], ratio));
    // The 128-bit sum of squares, scaled in floating point (it feeds StdDev only).
    const long double sum_sq = (static_cast<long double>(s.sum_sq_hi) * 18446744073709551616.0L + s.sum_sq_lo) / ratio;
    const long double high = std::floor(sum_sq / 18446744073709551616.0L);
    const auto hi = static_cast<std::uint64_t>(high);
    const auto lo = static_cast<std::uint64_t>(sum_sq - high * 18446744073709551616.0L);
    if (hi > before.sum_sq_hi || (hi == before.sum_sq_hi && lo >= before.sum_sq_lo)) {
      s.sum_sq_hi = hi;
      s.sum_sq_lo = lo;
    } else {
      s.sum_sq_hi = before.sum_sq_hi;
      s.sum_sq_lo = before.sum_sq_lo;
    }
  }
  reported_ = run;
}

bool BudgetControl::KeyLess::operator()(const ct_activity_key& a, const ct_activity_key& b) const {
  return std::memcmp(&a, &b, sizeof a) < 0;
}

ct_activity BudgetControl::extrapolate(const ct_activity_key& key, const ct_activity& counted) {
  if (key.api >= apis().size() || !is_hot_api(apis()[key.api])) return counted;
  Scaled& s = activity_[key];
  s.calls += counted.calls;
  s.total_ns += counted.total_ns;
  s.first_ts_ns = s.first_ts_ns ? s.first_ts_ns : counted.first_ts_ns;
  s.last_ts_ns = std::max<std::uint64_t>(s.last_ts_ns, counted.last_ts_ns);
  return ct_activity{0, 0, counted.first_ts_ns, counted.last_ts_ns};
}

void BudgetControl::pass_activity(const std::function<void(const ct_activity_key&, const ct_activity&)>& sink) {
  for (auto& [key, s] : activity_) {
    const double ratio = sampling_.ratio(key.api);
    const std::uint64_t calls = std::max(s.calls_out, std::uint64_t(scaled(s.calls, ratio)));
    const std::uint64_t total_ns = std::max(s.total_ns_out, std::uint64_t(scaled(s.total_ns, ratio)));
    if (calls == s.calls_out) continue;
    sink(key, ct_activity{calls - s.calls_out, total_ns - s.total_ns_out, s.first_ts_ns, s.last_ts_ns});
    s.calls_out = calls;
    s.total_ns_out = total_ns;
  }
}

}  // namespace cudatrace
