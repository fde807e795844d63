#include "cudatrace/analysis/memory.h"

#include <gtest/gtest.h>

#include "analysis_calls.h"

namespace {

using namespace cudatrace;
using cudatrace_test::Arg;
using cudatrace_test::CallSpec;
using cudatrace_test::with_call;

void feed(MemoryTracker& m, std::string_view api, const std::vector<Arg>& args, const CallSpec& spec = {}) {
  with_call(api, args, spec, [&](const Call& c) { m.on_call(c); });
}

CallSpec at(std::uint64_t ts_ns, std::vector<std::uint64_t> outs = {}) {
  CallSpec s;
  s.ts_ns = ts_ns;
  s.outs = std::move(outs);
  return s;
}

const DeviceMemory& device(const MemoryTracker& m, std::uint32_t pid, int dev) {
  static const DeviceMemory kNone;
  auto it = m.devices().find({pid, dev});
  return it == m.devices().end() ? kNone : it->second;
}

TEST(Memory, NestedRuntimeAndDriverAllocationCountsOnce) {
  MemoryTracker m;
  // The driver call returns (and is recorded) first, inside cudaMalloc.
  CallSpec driver = at(1100, {0xd000100000});
  driver.depth = 1;
  driver.parent = "cudaMalloc";
  feed(m, "cuMemAlloc_v2", {{"dptr", 0x7ff0}, {"bytesize", 1 << 20}}, driver);
  feed(m, "cudaMalloc", {{"devPtr", 0x7ff0}, {"size", 1 << 20}}, at(1000, {0xd000100000}));
  EXPECT_EQ(device(m, 1234, 0).live_bytes, 1u << 20);
  EXPECT_EQ(device(m, 1234, 0).allocs, 1u);
  CallSpec driver_free = at(5100);
  driver_free.depth = 1;
  driver_free.parent = "cudaFree";
  feed(m, "cuMemFree_v2", {{"dptr", 0xd000100000}}, driver_free);
  EXPECT_EQ(device(m, 1234, 0).live_bytes, 1u << 20) << "the nested free must not count";
  feed(m, "cudaFree", {{"devPtr", 0xd000100000}}, at(5000));
  EXPECT_EQ(device(m, 1234, 0).live_bytes, 0u);
  EXPECT_EQ(device(m, 1234, 0).peak_bytes, 1u << 20);
  EXPECT_EQ(device(m, 1234, 0).peak_ts_ns, 1000u);
  EXPECT_TRUE(m.outstanding().empty());
}

TEST(Memory, DriverOnlyTracingCountsTheDriverCall) {
  MemoryTracker m;
  feed(m, "cuMemAlloc_v2", {{"bytesize", 4096}}, at(1000, {0xd000001000}));
  EXPECT_EQ(device(m, 1234, 0).live_bytes, 4096u);
  ASSERT_EQ(m.outstanding().size(), 1u);
  EXPECT_EQ(m.outstanding()[0]->api->symbol, "cuMemAlloc_v2");
}

TEST(Memory, CurrentDeviceIsPerThreadAndDefaultsToZero) {
  MemoryTracker m;
  CallSpec t1 = at(100);
  t1.tid = 11;
  feed(m, "cudaSetDevice", {{"device", 2}}, t1);
  CallSpec bad = at(150);
  bad.tid = 11;
  bad.ret = 101;  // cudaErrorInvalidDevice: the device stays 2
  feed(m, "cudaSetDevice", {{"device", 3}}, bad);
  CallSpec alloc1 = at(200, {0xd000000100});
  alloc1.tid = 11;
  feed(m, "cudaMalloc", {{"size", 256}}, alloc1);
  CallSpec alloc2 = at(300, {0xd000000200});
  alloc2.tid = 12;
  feed(m, "cudaMalloc", {{"size", 512}}, alloc2);
  EXPECT_EQ(device(m, 1234, 2).live_bytes, 256u);
  EXPECT_EQ(device(m, 1234, 0).live_bytes, 512u);
  EXPECT_EQ(device(m, 1234, 3).allocs, 0u);
  // Freed from another thread: charged back to the device it was allocated on.
  feed(m, "cudaFree", {{"devPtr", 0xd000000100}}, at(400));
  EXPECT_EQ(device(m, 1234, 2).live_bytes, 0u);
  EXPECT_EQ(device(m, 1234, 0).live_bytes, 512u);
}

TEST(Memory, PeakIsTheHighestLiveTotalAndWhenItWasReached) {
  MemoryTracker m;
  feed(m, "cudaMalloc", {{"size", 1000}}, at(10, {0xa000}));
  feed(m, "cudaMalloc", {{"size", 3000}}, at(20, {0xb000}));
  feed(m, "cudaFree", {{"devPtr", 0xa000}}, at(30));
  feed(m, "cudaMalloc", {{"size", 500}}, at(40, {0xc000}));
  const DeviceMemory& d = device(m, 1234, 0);
  EXPECT_EQ(d.live_bytes, 3500u);
  EXPECT_EQ(d.peak_bytes, 4000u);
  EXPECT_EQ(d.peak_ts_ns, 20u);
  EXPECT_EQ(d.allocs, 3u);
  EXPECT_EQ(d.frees, 1u);
}

TEST(Memory, PitchedAllocationIsPitchTimesHeight) {
  MemoryTracker m;
  // cudaMallocPitch(&p, &pitch, 1000, 30): pitch 1024 -> 30720 bytes.
  feed(m, "cudaMallocPitch", {{"width", 1000}, {"height", 30}}, at(10, {0xd100000000, 1024}));
  EXPECT_EQ(device(m, 1234, 0).live_bytes, 30720u);
  feed(m, "cuMemAllocPitch_v2", {{"WidthInBytes", 100}, {"Height", 7}, {"ElementSizeBytes", 4}},
       at(20, {0xd200000000, 512}));
  EXPECT_EQ(device(m, 1234, 0).live_bytes, 30720u + 3584u);
}

TEST(Memory, ManagedMemoryIsCountedApartAndFlagged) {
  MemoryTracker m;
  feed(m, "cudaMallocManaged", {{"size", 8192}, {"flags", 1}}, at(10, {0xe000}));
  feed(m, "cudaMalloc", {{"size", 100}}, at(20, {0xf000}));
  const DeviceMemory& d = device(m, 1234, 0);
  EXPECT_EQ(d.live_bytes, 100u);
  EXPECT_EQ(d.managed_live_bytes, 8192u);
  EXPECT_EQ(d.managed_peak_bytes, 8192u);
  const auto leaks = m.outstanding();
  ASSERT_EQ(leaks.size(), 2u);
  EXPECT_TRUE(leaks[0]->managed);  // largest first
  EXPECT_FALSE(leaks[1]->managed);
  feed(m, "cudaFree", {{"devPtr", 0xe000}}, at(30));
  EXPECT_EQ(device(m, 1234, 0).managed_live_bytes, 0u);
  EXPECT_EQ(device(m, 1234, 0).live_bytes, 100u);
}

TEST(Memory, FailedAllocationsAndUnknownFreesChangeNothing) {
  MemoryTracker m;
  CallSpec failed = at(10, {0xd000});
  failed.ret = 2;
  feed(m, "cudaMalloc", {{"size", 1 << 30}}, failed);
  feed(m, "cudaFree", {{"devPtr", 0x1234}}, at(20));  // allocated before tracing
  feed(m, "cudaFree", {{"devPtr", 0}}, at(30));
  EXPECT_TRUE(m.devices().empty());
  EXPECT_TRUE(m.outstanding().empty());
}

TEST(Memory, ProcessesAreKeptApart) {
  MemoryTracker m;
  CallSpec a = at(10, {0xd000});
  a.pid = 1;
  CallSpec b = at(20, {0xd000});
  b.pid = 2;
  feed(m, "cudaMalloc", {{"size", 10}}, a);
  feed(m, "cudaMalloc", {{"size", 20}}, b);
  CallSpec free_a = at(30);
  free_a.pid = 1;
  feed(m, "cudaFree", {{"devPtr", 0xd000}}, free_a);
  EXPECT_EQ(device(m, 1, 0).live_bytes, 0u);
  EXPECT_EQ(device(m, 2, 0).live_bytes, 20u);
}

TEST(Memory, OutstandingAllocationKeepsSizeTimeCallerAndStack) {
  MemoryTracker m;
  CallSpec s = at(777, {0xd000});
  s.caller = 0x401234;
  s.dur_ns = 99;
  s.stack = {0x401234, 0x402000};
  feed(m, "cudaMalloc", {{"size", 4096}}, s);
  ASSERT_EQ(m.outstanding().size(), 1u);
  const Allocation& a = *m.outstanding()[0];
  EXPECT_EQ(a.bytes, 4096u);
  EXPECT_EQ(a.ptr, 0xd000u);
  EXPECT_EQ(a.ts_ns, 777u);
  EXPECT_EQ(a.call_ns, 99u);
  EXPECT_EQ(a.caller, 0x401234u);
  EXPECT_EQ(a.stack, (std::vector<std::uint64_t>{0x401234, 0x402000}));
}

TEST(Memory, PinnedRangesFromHostAllocationAndRegistration) {
  MemoryTracker m;
  feed(m, "cudaMallocHost", {{"size", 4096}}, at(10, {0x4000001000}));
  feed(m, "cudaHostRegister", {{"ptr", 0x7000}, {"size", 0x1000}, {"flags", 0}}, at(20));
  EXPECT_TRUE(m.pinned(1234, 0x4000001000, 4096));
  EXPECT_TRUE(m.pinned(1234, 0x4000001800, 16));
  EXPECT_FALSE(m.pinned(1234, 0x4000001800, 4096)) << "runs past the end";
  EXPECT_TRUE(m.pinned(1234, 0x7800, 0x800));
  EXPECT_FALSE(m.pinned(1234, 0x6fff, 2));
  EXPECT_FALSE(m.pinned(99, 0x7800, 1)) << "another process";
  feed(m, "cudaHostUnregister", {{"ptr", 0x7000}}, at(30));
  feed(m, "cudaFreeHost", {{"ptr", 0x4000001000}}, at(40));
  EXPECT_FALSE(m.pinned(1234, 0x7800, 1));
  EXPECT_FALSE(m.pinned(1234, 0x4000001000, 1));
  EXPECT_TRUE(m.devices().empty()) << "host memory is not device memory";
}

TEST(Memory, ChurnCountsFreedAllocationsPerSiteAndSize) {
  MemoryTracker m;
  for (int i = 0; i < 5; ++i) {
    CallSpec s = at(1000 * i, {0xd000});
    s.caller = 0x401000;
    s.dur_ns = 10;
    feed(m, "cudaMalloc", {{"size", 256}}, s);
    CallSpec f = at(1000 * i + 300);
    f.dur_ns = 5;
    feed(m, "cudaFree", {{"devPtr", 0xd000}}, f);
  }
  ASSERT_EQ(m.churn().size(), 1u);
  const auto& [key, site] = *m.churn().begin();
  EXPECT_EQ(key, MemoryTracker::ChurnKey(1234, 0x401000, 256));
  EXPECT_EQ(site.pairs, 5u);
  EXPECT_EQ(site.lifetime_ns, 5u * 300);
  EXPECT_EQ(site.calls_ns, 5u * 15);
  EXPECT_EQ(site.api->symbol, "cudaMalloc");
}

TEST(Memory, LiveAllocationsBeyondTheCapDropTheOldestAndCountIt) {
  MemoryTracker m;
  const std::size_t n = MemoryTracker::kMaxLive + 5;
  for (std::size_t i = 0; i < n; ++i)
    feed(m, "cudaMalloc", {{"size", 256}}, at(1000 + i, {0xd000000000 + 256 * i}));
  EXPECT_EQ(m.untracked().allocations, 5u);
  EXPECT_EQ(m.untracked().bytes, 5u * 256);
  EXPECT_EQ(m.outstanding().size(), MemoryTracker::kMaxLive);
  EXPECT_EQ(device(m, 1234, 0).live_bytes, n * 256) << "dropped allocations still count as live";
  feed(m, "cudaFree", {{"devPtr", 0xd000000000}}, at(900000));  // the oldest: dropped, not matched
  EXPECT_EQ(device(m, 1234, 0).frees, 0u);
  feed(m, "cudaFree", {{"devPtr", 0xd000000000 + 256 * (n - 1)}}, at(900001));
  EXPECT_EQ(device(m, 1234, 0).frees, 1u);
  EXPECT_EQ(m.outstanding().size(), MemoryTracker::kMaxLive - 1);
}

TEST(Memory, ChurnSitesBeyondTheCapAreCounted) {
  MemoryTracker m;
  for (std::uint64_t i = 0; i < MemoryTracker::kMaxChurnSites + 2; ++i) {
    feed(m, "cudaMalloc", {{"size", 256 + i}}, at(1000 + 2 * i, {0xd000000000}));
    feed(m, "cudaFree", {{"devPtr", 0xd000000000}}, at(1001 + 2 * i));
  }
  EXPECT_EQ(m.churn().size(), MemoryTracker::kMaxChurnSites);
  EXPECT_EQ(m.untracked().churn_pairs, 2u);
}

}  // namespace
