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
  const std::map<std::uint32_t, ProcessTimes> cpu_at_start = {{30, ProcessTimes{1000000000, 0, {}}}};
  const auto cpu_now = [](std::uint32_t pid) -> std::optional<ProcessTimes> {
    if (pid == 10) return ProcessTimes{100000000, 0, {}};   // 100 ms
    if (pid == 30) return ProcessTimes{1001000000, 0, {}};  // 1 ms while traced
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
  for (const ProcessCost& p : r.processes) EXPECT_FALSE(p.waited_ns) << "no tracer's CPU was given";
}

TEST(ProbeCost, PythonFramesAndSpansAreAddedAsTimed) {
  // 200 µs of BPF time reading Python frames, by a live thread and the exited ones.
  std::vector<HitCount> counts = {{7, "python3", 100, 100, {}}, {7, "python3", 0, 0, 9000000}};
  counts[0].capture_ns = 150000;
  counts[1].capture_ns = 50000;
  const CostReport r = price_hits(counts, cost(500, 300, 500), {}, [](std::uint32_t) { return std::nullopt; });
  ASSERT_EQ(r.processes.size(), 1u);
  EXPECT_DOUBLE_EQ(r.processes[0].added_ns, kWorkloadFactor * (100 * 500.0 + 100 * 300.0) + 200000.0);
}

cpu_set_t cpus(std::initializer_list<int> list) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : list) CPU_SET(c, &set);
  return set;
}

// cudatrace's CPU time `cpu_ms` on `list`, on a host of 16 CPUs.
TracerCpu tracer_on(std::initializer_list<int> list, std::uint64_t cpu_ms) {
  TracerCpu t;
  t.cpu_ns = cpu_ms * 1000000;
  t.cpus = cpus(list);
  t.online_cpus = 16;
  return t;
}

TEST(ProbeCost, AProcessWaitsForTheTracerOnlyOnCpusTheyShare) {
  constexpr std::uint64_t ms = 1000000;
  // Both pinned to CPU 3: cudatrace's 40 ms there, bounded by the process's own wait.
  EXPECT_DOUBLE_EQ(*waited_for_tracer(tracer_on({3}, 40), cpus({3}), 90 * ms), 40.0 * ms);
  EXPECT_DOUBLE_EQ(*waited_for_tracer(tracer_on({3}, 40), cpus({3}), 25 * ms), 25.0 * ms);
  // cudatrace on CPUs 2-3, the program on 3: half of cudatrace's time is there.
  EXPECT_DOUBLE_EQ(*waited_for_tracer(tracer_on({2, 3}, 40), cpus({3}), 90 * ms), 20.0 * ms);
  // Apart: no wait is cudatrace's.
  EXPECT_FALSE(waited_for_tracer(tracer_on({8, 9}, 40), cpus({2, 3, 4, 5}), 90 * ms));
  // The program may run on every CPU: the scheduler can give cudatrace an idle one.
  cpu_set_t every;
  CPU_ZERO(&every);
  for (int c = 0; c < 16; ++c) CPU_SET(c, &every);
  EXPECT_FALSE(waited_for_tracer(tracer_on({0, 1}, 40), every, 90 * ms));
  // A host of one CPU: nowhere else to go.
  TracerCpu alone = tracer_on({0}, 40);
  alone.online_cpus = 1;
  EXPECT_DOUBLE_EQ(*waited_for_tracer(alone, cpus({0}), 90 * ms), 40.0 * ms);
}

TEST(ProbeCost, TheWaitIsCountedWhileTracedFromLiveAndExitedThreads) {
  // -p: 5 ms of wait before tracing; at the end its live threads have waited
  // 12 ms in all and its exited ones 6 ms: 13 ms while traced, of which
  // cudatrace (30 ms on the CPU they share) accounts for all.
  std::vector<HitCount> counts = {{30, "app", 1000, 1000, {}}, {30, "app", 0, 0, {}}};
  counts[1].exit_run_delay_ns = 6000000;
  const std::map<std::uint32_t, ProcessTimes> at_start = {{30, ProcessTimes{1000000000, 5000000, cpus({3})}}};
  const auto now = [](std::uint32_t) -> std::optional<ProcessTimes> {
    return ProcessTimes{1070000000, 12000000, cpus({3})};
  };
  const CostReport r = price_hits(counts, cost(500, 300, 500), at_start, now, tracer_on({3}, 30));
  ASSERT_EQ(r.processes.size(), 1u);
  ASSERT_TRUE(r.processes[0].waited_ns);
  EXPECT_DOUBLE_EQ(*r.processes[0].waited_ns, 13000000.0);
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
  const auto times = process_times(getpid());
  ASSERT_TRUE(times.has_value());
  ASSERT_TRUE(times->cpus.has_value());
  EXPECT_GT(CPU_COUNT(&*times->cpus), 0);
  EXPECT_FALSE(process_times(0x7ffffff0).has_value());
}

}  // namespace
