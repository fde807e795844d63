#include "cudatrace/record/budget.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string_view>


namespace cudatrace {

DutyCycle::DutyCycle(BudgetConfig config, std::uint64_t start_ns)
    : config_(config), window_start_ns_(start_ns), deadline_ns_(start_ns + config.first_window_ns) {}

void DutyCycle::end_window(std::uint64_t now_ns, double cost, std::uint64_t switch_cost_ns,
                           std::uint64_t attach_delay_ns) {
  const std::uint64_t length = now_ns - std::min(now_ns, window_start_ns_);
  window_start_ns_ = now_ns;
  elapsed_ns_ += length;
  added_ns_ += cost * double(length) + double(switch_cost_ns);
  switch_ns_ = std::max(switch_ns_, double(switch_cost_ns));
  if (attached_) {
    const std::uint64_t attached = length - std::min(length, attach_delay_ns);
    attached_ns_ += attached;
    attached_added_ns_ += cost * double(length);
    cost_on_ = cost;
  } else {
    cost_off_ = cost;
  }

  // Plan the next period so that the cost so far plus its own stays within
  // the budget: d * P * cost_on + (1 - d) * P * cost_off + two switches
  // <= budget * P + credit. Budget left unused earlier is not spent later
  // (an idle spell buys no burst: the budget holds over every period, not
  // only on average); a debt (the first look, a rise in the call rate) is
  // paid back at most a quarter of a budget per period, so sampling never
  // stops for long.
  const double budget = config_.max_fraction;
  const double cycle_switch_ns = 2 * switch_ns_;
  double period = double(config_.period_ns);
  const double max_period = double(config_.max_period_ns), min_on = double(config_.min_on_ns);
  if (cycle_switch_ns > budget / 4 * period) period = std::min(max_period, cycle_switch_ns * 4 / budget);
  const double credit = std::clamp(budget * double(elapsed_ns_) - added_ns_, -budget / 4 * period, 0.0);
  double duty = 1;
  unreachable_ = false;
  if (cost_on_ > budget || credit < 0) {
    const double room = budget * period + credit - cost_off_ * period - cycle_switch_ns;
    const double extra = (cost_on_ - cost_off_) * period;  // what attaching adds over a whole period
    duty = extra > 0 ? room / extra : 1;
    unreachable_ = cost_off_ > budget;
  }
  const double min_duty = min_on / max_period;
  duty = std::clamp(duty, min_duty, 1.0);
  if (duty < 1 && duty * period < min_on) {
    period = std::min(max_period, min_on / duty);
    duty = std::max(duty, min_on / period);
  }
  if (duty >= 1) {
    attached_ = true;
    deadline_ns_ = now_ns + config_.check_ns;
    return;
  }
  attached_ = !attached_;
  ever_detached_ = true;
  deadline_ns_ = now_ns + static_cast<std::uint64_t>((attached_ ? duty : 1 - duty) * period);
}

HitSnapshots hit_snapshots(const std::vector<HitCount>& counts) {
  HitSnapshots by_pid;
  for (const HitCount& h : counts) {
    HitSnapshot& s = by_pid[h.pid];
    s.total.entry += h.entry_hits;
    s.total.ret += h.return_hits;
    s.total.stepped += h.stepped_hits;
    HitSnapshot::Hits& t = s.threads[h.tid];
    t.entry += h.entry_hits;
    t.ret += h.return_hits;
    t.stepped += h.stepped_hits;
  }
  return by_pid;
}

double window_cost(const HitSnapshots& before, const HitSnapshots& now, std::uint64_t length_ns, double entry_ns,
                   double return_ns, double stepped_ns) {
  const double wall = double(std::max<std::uint64_t>(length_ns, 1));
  if (stepped_ns < 0) stepped_ns = entry_ns;
  const auto priced = [&](std::uint64_t entry, std::uint64_t ret, std::uint64_t stepped) {
    stepped = std::min(stepped, entry);
    return double(entry - stepped) * entry_ns + double(stepped) * stepped_ns + double(ret) * return_ns;
  };
  // A process's total can shrink for a moment (a thread that exits between
  // the reads of the thread table and the exited threads' sums): nothing
  // added then, rather than the whole total. A thread's own counter only
  // grows; a smaller one is a new thread under a reused id.
  const auto added_total = [&](const HitSnapshot::Hits& was, const HitSnapshot::Hits& is) {
    return priced(is.entry - std::min(is.entry, was.entry), is.ret - std::min(is.ret, was.ret),
                  is.stepped - std::min(is.stepped, was.stepped));
  };
  const auto added_thread = [&](const HitSnapshot::Hits& was, const HitSnapshot::Hits& is) {
    return is.entry < was.entry || is.ret < was.ret
               ? priced(is.entry, is.ret, is.stepped)
               : priced(is.entry - was.entry, is.ret - was.ret, is.stepped - std::min(is.stepped, was.stepped));
  };
  double worst = 0;
  for (const auto& [pid, s] : now) {
    const auto old = before.find(pid);
    const HitSnapshot none;
    const HitSnapshot& was = old != before.end() ? old->second : none;
    double time = wall;
    if (s.has_cpu && was.has_cpu && s.cpu_ns > was.cpu_ns) time = std::max(time, double(s.cpu_ns - was.cpu_ns));
    worst = std::max(worst, added_total(was.total, s.total) / time);
    for (const auto& [tid, hits] : s.threads) {
      if (tid == 0) continue;  // exited threads: in the process's total only
      const auto t = was.threads.find(tid);
      worst = std::max(worst, added_thread(t != was.threads.end() ? t->second : HitSnapshot::Hits{}, hits) / wall);
    }
  }
  return worst;
}

CpuSpent cpu_spent(const HitSnapshots& before, const HitSnapshots& now, double entry_ns, double return_ns,
                   double stepped_ns, double factor) {
  CpuSpent spent;
  for (const auto& [pid, s] : now) {
    const auto old = before.find(pid);
    if (old == before.end() || !s.has_cpu || !old->second.has_cpu || s.cpu_ns < old->second.cpu_ns) continue;
    const HitSnapshot::Hits& was = old->second.total;
    const std::uint64_t entry = s.total.entry - std::min(s.total.entry, was.entry);
    const std::uint64_t stepped = std::min(entry, s.total.stepped - std::min(s.total.stepped, was.stepped));
    const std::uint64_t ret = s.total.ret - std::min(s.total.ret, was.ret);
    const double added =
        (double(entry - stepped) * entry_ns + double(stepped) * stepped_ns + double(ret) * return_ns) / factor;
    const double cpu = double(s.cpu_ns - old->second.cpu_ns);
    spent.cpu_ns += cpu;
    spent.own_ns += std::max(0.0, cpu - added);
  }
  return spent;
}

double seen_ratio(double attached_share, double attached_cost) {
  if (attached_share >= 1.0) return 1.0;
  // A process that spent `attached_cost` of its time in probes made that
  // much fewer calls while attached. Capped: a cost estimate of 100 % or
  // more says nothing about the rate.
  const double slowed = 1 - std::min(attached_cost, 0.9);
  return std::max(1e-9, attached_share * slowed);
}

}  // namespace cudatrace
