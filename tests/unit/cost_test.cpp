#include "cudatrace/record/cost.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "json_checker.h"
#include "probe_costs.h"

namespace {

using namespace cudatrace;

const auto cost = cudatrace_test::probe_cost;

TEST(ProbeCost, HitsOfThreadsAndExitedProcessesArePricedPerProcess) {
  const ProbeCost per_hit = cost(500, 300, 500);
  // Process 10: two live threads and its exited ones; process 20 exited;
  // process 30 was attached with -p after 1 s of CPU time; 40 made no call.
  const std::vector<HitCount> counts = {
      {10, "python3", 100, 100, {}}, {10, "python3", 50, 40, {}},       {10, "python3", 1000, 1000, {}},
      {20, "worker", 10, 10, 2000000}, {30, "app", 1000, 0, {}},        {40, "idle", 0, 0, {}}};
  const std::map<std::uint32_t, std::uint64_t> cpu_at_start = {{30, 1000000000}};
  const auto cpu_now = [](std::uint32_t pid) -> std::optional<std::uint64_t> {
    if (pid == 10) return 100000000;   // 100 ms
    if (pid == 30) return 1001000000;  // 1 ms while traced
    return std::nullopt;
  };
  const CostReport r = price_hits(counts, per_hit, cpu_at_start, cpu_now);
  ASSERT_EQ(r.processes.size(), 3u);
  const ProcessCost& python = r.processes[0];  // most time added first
  EXPECT_EQ(python.pid, 10u);
  EXPECT_EQ(python.entry_hits, 1150u);
  EXPECT_EQ(python.return_hits, 1140u);
  EXPECT_DOUBLE_EQ(python.added_ns, kWorkloadFactor * (1150 * 500.0 + 1140 * 300.0));
  EXPECT_EQ(python.cpu_ns, 100000000u);
  EXPECT_EQ(r.processes[1].pid, 30u);
  EXPECT_EQ(r.processes[1].cpu_ns, 1000000u) << "only the CPU time while traced";
  EXPECT_EQ(r.processes[2].pid, 20u);
  EXPECT_EQ(r.processes[2].cpu_ns, 2000000u) << "from the kernel at its exit";
  EXPECT_DOUBLE_EQ(r.processes[2].added_ns, kWorkloadFactor * 8000.0);
}

TEST(ProbeCost, SingleSteppedHitsArePricedAsSuch) {
  // 100 entry hits, 30 of them on single-stepped probes, and 60 returns.
  std::vector<HitCount> counts = {{7, "app", 100, 60, {}}};
  counts[0].stepped_hits = 30;
  const CostReport r = price_hits(counts, cost(500, 300, 12000), {}, [](std::uint32_t) { return std::nullopt; });
  ASSERT_EQ(r.processes.size(), 1u);
  EXPECT_EQ(r.processes[0].stepped_hits, 30u);
  EXPECT_DOUBLE_EQ(r.processes[0].added_ns, kWorkloadFactor * (70 * 500.0 + 30 * 12000.0 + 60 * 300.0));
  // More single-stepped hits than entry hits (a race between two reads) count as all entry hits.
  EXPECT_DOUBLE_EQ(added_ns(cost(500, 300, 12000), 10, 20, 0), kWorkloadFactor * 10 * 12000.0);
}

TEST(ProbeCost, NeverMoreThanTheProcessSpent) {
  // 40,000 hits priced at 1.5 x 1.2 us each is 72 ms, but the process used
  // 48 ms of CPU in all: the traps ran on its threads, so at most that.
  const std::vector<HitCount> counts = {{5, "loop", 20000, 20000, 48000000}};
  const CostReport r = price_hits(counts, cost(1200, 1200, 1200), {}, [](std::uint32_t) { return std::nullopt; });
  ASSERT_EQ(r.processes.size(), 1u);
  EXPECT_DOUBLE_EQ(r.processes[0].added_ns, 48000000.0);
}

TEST(ProbeCost, CpuTimeOfALiveProcessAndNoneOfAMissingOne) {
  // Burn a little CPU so the tick-based counters move.
  volatile unsigned long x = 0;
  for (unsigned long i = 0; i < 50000000ul; ++i) x += i;
  const auto self = process_cpu_ns(getpid());
  ASSERT_TRUE(self.has_value());
  EXPECT_GT(*self, 0u);
  EXPECT_FALSE(process_cpu_ns(0x7ffffff0).has_value());
}

}  // namespace
