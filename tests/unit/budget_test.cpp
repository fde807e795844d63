#include "cudatrace/record/budget.h"

#include <gtest/gtest.h>

#include <string>

#include "json_checker.h"

namespace {

using namespace cudatrace;

constexpr std::uint64_t kMs = 1000000;

// Drives a DutyCycle through `run_ns` of simulated time: windows end at their
// deadlines, cost `on` while attached and `off` while detached, each switch
// costing `switch_ns` (and delaying the attached time by as much).
struct Simulation {
  DutyCycle cycle;
  std::uint64_t now = 0;
  std::uint64_t switches = 0, shortest_on = ~0ull, longest_off = 0;

  Simulation(BudgetConfig config) : cycle(config, 0) {}

  void run(std::uint64_t run_ns, double on, double off, std::uint64_t switch_ns = 0) {
    const std::uint64_t end = now + run_ns;
    bool switched = false;
    while (now < end) {
      const bool was_attached = cycle.attached();
      const std::uint64_t start = now;
      now = cycle.deadline_ns();
      cycle.end_window(now, was_attached ? on : off, switched ? switch_ns : 0,
                       switched && was_attached ? switch_ns : 0);
      if (switched && was_attached) shortest_on = std::min(shortest_on, now - start);
      if (!was_attached) longest_off = std::max(longest_off, now - start);
      switched = cycle.attached() != was_attached;
      switches += switched;
    }
  }
};

// The default controller with this budget (a fraction of each process's time).
BudgetConfig with_budget(double fraction) {
  BudgetConfig config;
  config.max_fraction = fraction;
  return config;
}

TEST(DutyCycle, UnderTheBudgetEverythingStaysAttached) {
  const BudgetConfig config = with_budget(0.01);
  Simulation sim(config);
  sim.run(60000 * kMs, 0.004, 0.004);
  EXPECT_TRUE(sim.cycle.attached());
  EXPECT_FALSE(sim.cycle.ever_detached());
  EXPECT_EQ(sim.switches, 0u);
  EXPECT_EQ(sim.cycle.attached_ns(), sim.cycle.elapsed_ns());
  EXPECT_NEAR(sim.cycle.cost_so_far(), 0.004, 1e-9);
}

TEST(DutyCycle, OverTheBudgetTheLongRunCostMeetsIt) {
  // The launch-bound inference case: 20 % while attached (safety factor
  // included), low-rate probes 0.1 %, 1 % allowed.
  const BudgetConfig config = with_budget(0.01);
  Simulation sim(config);
  sim.run(600000 * kMs, 0.20, 0.001);
  EXPECT_TRUE(sim.cycle.ever_detached());
  EXPECT_FALSE(sim.cycle.budget_unreachable());
  // Within the budget over whole periods; the run may stop right after a
  // sampled window, before the rest of its period.
  EXPECT_LE(sim.cycle.cost_so_far(), 0.01 * 1.005);
  EXPECT_GE(sim.cycle.cost_so_far(), 0.01 * 0.9) << "the budget is used, not wasted";
  // Attached share: (0.01 - 0.001) / (0.20 - 0.001) = 4.5 %.
  const double share = double(sim.cycle.attached_ns()) / double(sim.cycle.elapsed_ns());
  EXPECT_NEAR(share, 0.045, 0.005);
  EXPECT_GE(sim.shortest_on, config.min_on_ns) << "sampled windows are long enough to count in";
  EXPECT_LE(sim.longest_off, config.max_period_ns);
  EXPECT_NEAR(sim.cycle.attached_cost(), 0.20, 1e-9);
}

TEST(DutyCycle, SlowSwitchesLengthenThePeriodAndAreCharged) {
  const BudgetConfig config = with_budget(0.01);
  Simulation fast(config), slow(config);
  fast.run(600000 * kMs, 0.20, 0.0);
  slow.run(600000 * kMs, 0.20, 0.0, 5 * kMs);
  EXPECT_LE(slow.cycle.cost_so_far(), 0.01 * 1.005) << "switches included";
  EXPECT_LT(slow.switches, fast.switches / 2) << "fewer, longer cycles when a switch costs 5 ms";
  // The attach delay is not attached time, so less of the time is sampled.
  EXPECT_LT(slow.cycle.attached_ns(), fast.cycle.attached_ns());
}

TEST(DutyCycle, TheFirstLookIsPaidBackWithoutStoppingSampling) {
  const BudgetConfig config = with_budget(0.01);
  Simulation sim(config);
  sim.run(20000 * kMs, 0.40, 0.0);  // 20 ms at 40 %: 0.8 s of budget
  EXPECT_LE(sim.longest_off, config.max_period_ns);
  EXPECT_GE(sim.switches, 4u) << "sampling goes on while the debt is paid back";
  EXPECT_LE(sim.cycle.cost_so_far(), 0.01 * 1.005) << "and it is paid back within 20 s";
}

TEST(DutyCycle, AProcessThatStartsLaunchingIsSampledWithinACheck) {
  // An idle node (nothing hot runs: every probe stays attached), then a
  // launch-bound process starts: it pays full price for one check at most.
  const BudgetConfig config = with_budget(0.01);
  Simulation sim(config);
  sim.run(60000 * kMs, 0.0, 0.0);
  EXPECT_FALSE(sim.cycle.ever_detached());
  const std::uint64_t start = sim.now;
  sim.run(1, 0.20, 0.001);
  EXPECT_TRUE(sim.cycle.ever_detached());
  EXPECT_LE(sim.now - start, config.check_ns);
  sim.run(60000 * kMs, 0.20, 0.001);
  EXPECT_LE(sim.cycle.cost_so_far(), 0.01 * 1.005);
}

TEST(DutyCycle, AnIdleSpellBuysNoBurst) {
  // A minute with nothing hot running leaves the whole budget unused; the
  // launch-bound process that comes next still gets the budget, not more.
  const BudgetConfig config = with_budget(0.01);
  Simulation sim(config);
  sim.run(60000 * kMs, 0.0, 0.0);
  const double added_before = sim.cycle.cost_so_far() * double(sim.cycle.elapsed_ns());
  const std::uint64_t start = sim.now;
  sim.run(30000 * kMs, 0.20, 0.001);
  const double added = sim.cycle.cost_so_far() * double(sim.cycle.elapsed_ns()) - added_before;
  // The budget, and the one check at full cost (100 ms at 20 %) that found the rise.
  EXPECT_LE(added / double(sim.now - start), 0.01 + 0.02 / 30 + 0.0005);
}

TEST(DutyCycle, LowRateProbesOverTheBudgetAreReported) {
  const BudgetConfig config = with_budget(0.01);
  Simulation sim(config);
  sim.run(60000 * kMs, 0.30, 0.02);
  EXPECT_TRUE(sim.cycle.budget_unreachable());
  const double share = double(sim.cycle.attached_ns()) / double(sim.cycle.elapsed_ns());
  EXPECT_LE(share, 0.02) << "the hot probes sample as little as they may";
}

TEST(DutyCycle, ARiseInTheCostShortensTheSampledWindows) {
  const BudgetConfig config = with_budget(0.05);
  Simulation sim(config);
  sim.run(60000 * kMs, 0.02, 0.0);
  EXPECT_FALSE(sim.cycle.ever_detached());
  sim.run(600000 * kMs, 0.50, 0.0);
  EXPECT_TRUE(sim.cycle.ever_detached());
  EXPECT_LE(sim.cycle.cost_so_far(), 0.05 * 1.005);
}

// One thread's hits in a snapshot: (pid, tid, entry hits, return hits).
HitCount thread_hits(std::uint32_t pid, std::uint32_t tid, std::uint64_t entry, std::uint64_t ret) {
  HitCount h;
  h.pid = pid;
  h.tid = tid;
  h.entry_hits = entry;
  h.return_hits = ret;
  return h;
}

HitSnapshots with_cpu(HitSnapshots s, std::uint32_t pid, std::uint64_t cpu_ns) {
  s[pid].cpu_ns = cpu_ns;
  s[pid].has_cpu = true;
  return s;
}

TEST(WindowCost, TheLaunchingThreadDecidesWhileOthersSpin) {
  // 1 ms of wall-clock time; thread 11 took 1000 entry and return hits at
  // 250 ns each (0.5 ms), thread 12 only spun: the process used 2 ms of CPU.
  const HitSnapshots before = with_cpu(hit_snapshots({thread_hits(10, 11, 0, 0), thread_hits(10, 12, 0, 0)}), 10, 0);
  const HitSnapshots now =
      with_cpu(hit_snapshots({thread_hits(10, 11, 1000, 1000), thread_hits(10, 12, 0, 0)}), 10, 2 * kMs);
  // The launching thread lost half its time, not a quarter of the process's CPU time.
  EXPECT_DOUBLE_EQ(window_cost(before, now, kMs, 250, 250), 0.5);
}

TEST(WindowCost, ThreadsTakingTurnsCountTogether) {
  // Two threads, 500 hit pairs each, one after the other (CPU time = wall-clock time).
  const HitSnapshots before = with_cpu(hit_snapshots({}), 10, 0);
  const HitSnapshots now = with_cpu(hit_snapshots({thread_hits(10, 11, 500, 500), thread_hits(10, 12, 500, 500)}), 10, kMs);
  EXPECT_DOUBLE_EQ(window_cost(before, now, kMs, 250, 250), 0.5);
}

TEST(WindowCost, ThreadsInParallelShareTheCost) {
  const HitSnapshots before = with_cpu(hit_snapshots({}), 10, 0);
  const HitSnapshots now =
      with_cpu(hit_snapshots({thread_hits(10, 11, 500, 500), thread_hits(10, 12, 500, 500)}), 10, 2 * kMs);
  EXPECT_DOUBLE_EQ(window_cost(before, now, kMs, 250, 250), 0.25);
}

TEST(WindowCost, TheMostAffectedProcessDecides) {
  const HitSnapshots before = hit_snapshots({thread_hits(10, 10, 100, 100), thread_hits(20, 20, 0, 0)});
  const HitSnapshots now = hit_snapshots({thread_hits(10, 10, 300, 300), thread_hits(20, 20, 1000, 0)});
  // Process 10: 200 pairs x 500 ns; process 20: 1000 entries x 250 ns.
  EXPECT_DOUBLE_EQ(window_cost(before, now, kMs, 250, 250), 0.25);
}

TEST(WindowCost, ExitedAndReusedThreadsAreNotCountedTwice) {
  // Thread 11 (400 pairs) exits: its hits move to the process's sum of
  // exited threads (tid 0); a new thread 11 then makes 100 pairs.
  const HitSnapshots before = hit_snapshots({thread_hits(10, 11, 400, 400)});
  const HitSnapshots now = hit_snapshots({thread_hits(10, 0, 400, 400), thread_hits(10, 11, 100, 100)});
  // 100 new pairs in all and on thread 11: 50 us of 1 ms.
  EXPECT_DOUBLE_EQ(window_cost(before, now, kMs, 250, 250), 0.05);
}

TEST(WindowCost, AThreadExitingBetweenTheReadsIsNoSpike) {
  // Thread 12 (1,000,000 pairs) exited after the thread table was read and
  // before its sum reached the exited threads' (tid 0): the total shrinks.
  const HitSnapshots before = hit_snapshots({thread_hits(10, 11, 100, 100), thread_hits(10, 12, 1000000, 1000000)});
  const HitSnapshots now = hit_snapshots({thread_hits(10, 11, 200, 200)});
  // Only thread 11's 100 new pairs: 50 us of 1 ms.
  EXPECT_DOUBLE_EQ(window_cost(before, now, kMs, 250, 250), 0.05);
}

TEST(Sampling, RatiosAndEstimates) {
  EXPECT_DOUBLE_EQ(seen_ratio(1.0, 0.3), 1.0);
  EXPECT_DOUBLE_EQ(seen_ratio(0.1, 0.2), 0.1 * 0.8);
  EXPECT_DOUBLE_EQ(seen_ratio(0.1, 5.0), 0.1 * 0.1) << "a cost estimate over 90 % is capped";

  const Api* launch = api_by_symbol("cudaLaunchKernel");
  const Api* malloc_api = api_by_symbol("cudaMalloc");
  ASSERT_TRUE(launch && malloc_api);
  EXPECT_TRUE(is_hot_api(*launch));
  EXPECT_TRUE(is_hot_api(*api_by_symbol("cudaGetDevice")));  // query
  EXPECT_TRUE(is_hot_api(*api_by_symbol("cudaMemsetAsync")));
  EXPECT_TRUE(is_hot_api(*api_by_symbol("cuKernelGetFunction")));  // at the launches' rate
  EXPECT_TRUE(is_hot_api(*api_by_symbol("cuMemsetD32Async_ptsz")));
  EXPECT_TRUE(is_hot_api(*api_by_symbol("cuDevicePrimaryCtxGetState")));  // info
  EXPECT_TRUE(is_hot_api(*api_by_symbol("cuGetErrorString")));            // error
  EXPECT_FALSE(is_hot_api(*api_by_symbol("cudaMemset"))) << "synchronous: not launch-rate";
  EXPECT_FALSE(is_hot_api(*api_by_symbol("cudaMemcpyAsync")));
  EXPECT_FALSE(is_hot_api(*malloc_api));
  EXPECT_FALSE(is_hot_api(*api_by_symbol("cudaStreamSynchronize")));

  Sampling s;
  EXPECT_FALSE(s.any_estimated());
  EXPECT_DOUBLE_EQ(s.mean_ratio(), 1.0);
  s.set({{launch->id, 0.02}, {malloc_api->id, 1.0}});
  EXPECT_TRUE(s.any_estimated());
  EXPECT_TRUE(s.estimated(launch->id));
  EXPECT_FALSE(s.estimated(malloc_api->id)) << "a ratio of 1 is exact";
  EXPECT_DOUBLE_EQ(s.ratio(launch->id), 0.02);
  EXPECT_DOUBLE_EQ(s.ratio(malloc_api->id), 1.0);
  EXPECT_DOUBLE_EQ(s.mean_ratio(), 0.02);
  EXPECT_DOUBLE_EQ(s.ratio(kNoApi), 1.0);
}

}  // namespace
