// Probes' hot groups (--max-overhead, budget.h): a file's launch-rate probes
// on links of their own, detached and attached again by the duty cycle.
#include "cudatrace/record/probes.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "cudatrace/clock.h"

namespace cudatrace {

bool Probes::attach_hot(HotGroup& g, std::string& error) {
  // Entry and return links even where the kernel has sessions: a session
  // link attached again at the same offsets was seen (Linux 6.18) to lose
  // the return of every outermost call from then on.
  const std::tuple<dev_t, ino_t> file{std::get<0>(g.key), std::get<1>(g.key)};
  if (attach_pairs(enter_, exit_, "/proc/self/fd/" + std::to_string(g.file_fd), file, std::get<2>(g.key), g.offsets,
                   g.cookies, g.links, error)) {
    g.attached_at_ns = monotonic_ns();
    return true;
  }
  detach_hot(g);  // a return link without its entry link
  error = g.name + error.substr(error.find(':'));
  return false;
}

void Probes::detach_hot(HotGroup& g) {
  if (g.attached_at_ns) {
    g.attached_ns += monotonic_ns() - g.attached_at_ns;
    g.attached_at_ns = 0;
  }
  // Entry link first (see ~Probes). A return link traps at the function's
  // entry too (to take over its return address), so it goes soon after:
  // closing a link removes its breakpoints at once, then waits for RCU grace
  // periods (tens of ms), and the calls entered before the entry link went
  // (launches: microseconds) have returned 5 ms later. The waits overlap.
  if (!g.links.entry.empty() && !g.links.ret.empty()) {
    std::thread entry([&g] { close_all(g.links.entry); });
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    close_all(g.links.ret);
    entry.join();
  } else {  // detached already, or a failed attach's return link: nothing in flight
    close_all(g.links.entry);
    close_all(g.links.ret);
  }
  probes_ -= g.links.probes;
  g.links = {};
}

std::uint64_t Probes::set_hot_attached(bool attached) {
  if (attached == hot_attached_) return 0;
  hot_attached_ = attached;
  // One thread per file: detaching a link waits for RCU grace periods (tens
  // of milliseconds each); in parallel the waits overlap, and every file's
  // probes come and go at about the same time. The runtimes' files come
  // first and go last: a driver launch that a runtime launch makes is then
  // not seen without it, as a launch of its own. Attaching takes
  // milliseconds, so the driver's wait for the runtimes'; a detach removes
  // its breakpoints at once and then waits for grace periods, so the
  // runtimes' go a moment after the driver's start to, not after they end
  // (their probes would stay well into the detached window).
  constexpr auto kBreakpointsGone = std::chrono::milliseconds(5);
  std::vector<std::string> errors(hot_.size());
  std::vector<std::uint64_t> cpu_ns(hot_.size());
  const auto has_runtime = [](const HotGroup& g) {
    return std::any_of(g.apis.begin(), g.apis.end(), [](const Api* a) { return a->layer() == Layer::Runtime; });
  };
  std::vector<std::thread> threads;
  for (const bool runtime_files : {attached, !attached}) {
    for (std::size_t i = 0; i < hot_.size(); ++i) {
      if (has_runtime(hot_[i]) != runtime_files) continue;
      threads.emplace_back([this, i, attached, &errors, &cpu_ns] {
        timespec start{}, end{};
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
        if (attached)
          attach_hot(hot_[i], errors[i]);
        else
          detach_hot(hot_[i]);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &end);
        cpu_ns[i] = std::uint64_t(end.tv_sec - start.tv_sec) * 1000000000ull + end.tv_nsec - start.tv_nsec;
      });
    }
    if (attached) {
      for (std::thread& t : threads) t.join();
      threads.clear();
    } else {
      std::this_thread::sleep_for(kBreakpointsGone);
    }
  }
  for (std::thread& t : threads) t.join();
  std::uint64_t total_cpu_ns = 0;
  for (std::uint64_t ns : cpu_ns) total_cpu_ns += ns;
  for (std::size_t i = hot_.size(); i-- > 0;) {
    if (errors[i].empty()) continue;
    warn_(errors[i] + "; its launches are no longer traced");
    close(hot_[i].file_fd);
    hot_.erase(hot_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return total_cpu_ns;
}

std::map<std::uint16_t, double> Probes::hot_shares(std::uint64_t now_ns) const {
  std::map<std::uint16_t, std::pair<double, int>> sums;
  for (const HotGroup& g : hot_) {
    if (now_ns <= g.since_ns) continue;
    const std::uint64_t in = g.attached_ns + (g.attached_at_ns ? now_ns - std::min(now_ns, g.attached_at_ns) : 0);
    const double share = std::min(1.0, double(in) / double(now_ns - g.since_ns));
    for (const Api* a : g.apis) {
      auto& [sum, n] = sums[a->id];
      sum += share;
      ++n;
    }
  }
  std::map<std::uint16_t, double> shares;
  for (const auto& [id, sum_n] : sums) shares[id] = sum_n.first / sum_n.second;
  return shares;
}

}  // namespace cudatrace
