#include "cudatrace/decode/py_stack.h"
#include "cudatrace/analysis/summary.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>

#include "analysis_calls.h"
#include "cudatrace/decode/kernel_names.h"
#include "cudatrace/analysis/memory.h"
#include "cudatrace/analysis/py_sites.h"
#include "cudatrace/record/bpf_maps.h"
#include "cudatrace/record/node_stats.h"

namespace {

using namespace cudatrace;
using cudatrace_test::Arg;
using cudatrace_test::CallSpec;
using cudatrace_test::dim3_arg;
using cudatrace_test::with_call;

// The bucket formula of bpf_abi.h, as bpf/cudatrace.bpf.c computes it.
unsigned bpf_bucket(std::uint64_t d) {
  if (d < CT_HIST_SUB) return static_cast<unsigned>(d);
  const unsigned p = 63 - __builtin_clzll(d);
  if (p > CT_HIST_MAX_POW) return CT_HIST_BUCKETS - 1;
  return (p - 1) * CT_HIST_SUB + ((d >> (p - 2)) & (CT_HIST_SUB - 1));
}

// What the BPF side adds for one call.
void add_sample(ct_api_stats& s, std::uint64_t d, bool failed = false) {
  ct_api_stats one{};
  one.calls = 1;
  one.errors = failed;
  one.total_ns = d;
  one.min_ns = one.max_ns = d;
  const unsigned __int128 sq = (unsigned __int128)d * d;
  one.sum_sq_lo = static_cast<std::uint64_t>(sq);
  one.sum_sq_hi = static_cast<std::uint64_t>(sq >> 64);
  one.hist[bpf_bucket(d)] = 1;
  add_stats(s, one);
}

TEST(Histogram, BucketLowInvertsTheBucketFormula) {
  for (std::uint64_t d = 0; d < 100000; ++d) {
    const unsigned b = bpf_bucket(d);
    ASSERT_LE(ct_hist_bucket_low(b), d) << d;
    ASSERT_LT(d, ct_hist_bucket_low(b + 1)) << d;
  }
  for (unsigned p = 2; p <= CT_HIST_MAX_POW; ++p)
    for (std::uint64_t d : {std::uint64_t(1) << p, (std::uint64_t(3) << (p - 1)) + 1, (std::uint64_t(2) << p) - 1}) {
      const unsigned b = bpf_bucket(d);
      EXPECT_LE(ct_hist_bucket_low(b), d) << d;
      EXPECT_LT(d, ct_hist_bucket_low(b + 1)) << d;
      // The precision documented in docs/summary.md: a bucket is a quarter of its power of two.
      EXPECT_EQ(ct_hist_bucket_low(b + 1) - ct_hist_bucket_low(b), std::uint64_t(1) << (p - 2)) << d;
    }
  EXPECT_EQ(bpf_bucket(~std::uint64_t(0)), CT_HIST_BUCKETS - 1u);
  EXPECT_EQ(ct_hist_bucket_low(CT_HIST_BUCKETS), std::uint64_t(1) << (CT_HIST_MAX_POW + 1));
}

TEST(Histogram, AddCallCountsLikeTheBpfSide) {
  ct_api_stats user{}, bpf{};
  std::mt19937_64 rng(17);
  for (int i = 0; i < 5000; ++i) {
    const std::uint64_t d = i % 7 == 0 ? rng() : rng() % (std::uint64_t(1) << (i % 40));
    const bool failed = i % 5 == 0;
    add_call(user, d, failed);
    add_sample(bpf, d, failed);
    ASSERT_EQ(ct_hist_bucket(d), bpf_bucket(d)) << d;
  }
  EXPECT_EQ(user.calls, bpf.calls);
  EXPECT_EQ(user.errors, bpf.errors);
  EXPECT_EQ(user.total_ns, bpf.total_ns);
  EXPECT_EQ(user.min_ns, bpf.min_ns);
  EXPECT_EQ(user.max_ns, bpf.max_ns);
  EXPECT_EQ(user.sum_sq_lo, bpf.sum_sq_lo);
  EXPECT_EQ(user.sum_sq_hi, bpf.sum_sq_hi);
  EXPECT_TRUE(std::equal(std::begin(user.hist), std::end(user.hist), std::begin(bpf.hist)));
}

TEST(Stats, PercentilesOfKnownDataAreWithinTheirBucket) {
  std::mt19937_64 rng(42);
  std::lognormal_distribution<double> dist(std::log(20000.0), 1.0);
  std::vector<std::uint64_t> data;
  ct_api_stats s{};
  for (int i = 0; i < 10000; ++i) {
    data.push_back(static_cast<std::uint64_t>(dist(rng)) + 1);
    add_sample(s, data.back());
  }
  std::sort(data.begin(), data.end());
  for (double q : {0.5, 0.9, 0.99}) {
    const double exact = double(data[static_cast<std::size_t>(q * data.size()) - 1]);
    const double est = percentile_ns(s, q);
    // Within a quarter of the power of two holding the exact value.
    EXPECT_NEAR(est, exact, exact / 4) << q;
  }
  EXPECT_EQ(percentile_ns(s, 0), double(data.front()));
  EXPECT_EQ(percentile_ns(s, 1), double(data.back()));
}

TEST(Stats, PercentilesAreExactForSmallValuesAndClampedToMinMax) {
  ct_api_stats s{};
  for (std::uint64_t d : {1, 2, 2, 3, 3, 3}) add_sample(s, d);
  EXPECT_GE(percentile_ns(s, 0.5), 2.0);
  EXPECT_LE(percentile_ns(s, 0.5), 3.0);
  ct_api_stats one{};
  add_sample(one, 1000003);
  EXPECT_EQ(percentile_ns(one, 0.5), 1000003.0);
  EXPECT_EQ(percentile_ns(one, 0.99), 1000003.0);
  EXPECT_EQ(percentile_ns(ct_api_stats{}, 0.5), 0.0);
}

TEST(Stats, StdDevFromTheSumOfSquares) {
  ct_api_stats s{};
  for (std::uint64_t d : {2, 4, 4, 4, 5, 5, 7, 9}) add_sample(s, d);
  // Sample standard deviation of this classic set: sqrt(32 / 7).
  EXPECT_NEAR(stddev_ns(s), std::sqrt(32.0 / 7.0), 1e-12);
  ct_api_stats big{};
  // Large, nearly equal values: no cancellation in the 128-bit path.
  for (std::uint64_t d : {4000000000001ull, 4000000000003ull}) add_sample(big, d);
  EXPECT_NEAR(stddev_ns(big), std::sqrt(2.0), 1e-9);
  ct_api_stats huge{};
  // Sums of squares beyond 64 bits.
  for (std::uint64_t d : {1ull << 40, 3ull << 40}) add_sample(huge, d);
  EXPECT_NEAR(stddev_ns(huge), std::sqrt(2.0) * double(1ull << 40), 1.0);
  ct_api_stats single{};
  add_sample(single, 5);
  EXPECT_EQ(stddev_ns(single), 0.0);
}

TEST(Stats, AddStatsSumsCpusAndKeepsExtremes) {
  ct_api_stats cpu0{}, cpu1{}, total{};
  add_sample(cpu0, 100);
  add_sample(cpu0, 300, true);
  add_sample(cpu1, 50);
  add_stats(total, cpu0);
  add_stats(total, ct_api_stats{});  // an idle CPU: min stays
  add_stats(total, cpu1);
  EXPECT_EQ(total.calls, 3u);
  EXPECT_EQ(total.errors, 1u);
  EXPECT_EQ(total.total_ns, 450u);
  EXPECT_EQ(total.min_ns, 50u);
  EXPECT_EQ(total.max_ns, 300u);
  EXPECT_EQ(total.sum_sq_lo, 100u * 100 + 300 * 300 + 50 * 50);
}

TEST(Stats, StatsSinceGivesTheIntervalsCalls) {
  ct_api_stats before{};
  for (std::uint64_t d : {1000, 2000, 3000}) add_sample(before, d);
  ct_api_stats now = before;
  add_sample(now, 2500);
  add_sample(now, 2600, true);
  const ct_api_stats d = stats_since(now, before);
  EXPECT_EQ(d.calls, 2u);
  EXPECT_EQ(d.errors, 1u);
  EXPECT_EQ(d.total_ns, 5100u);
  // Not new extremes of the run: bucket bounds around the true 2500 and 2600.
  EXPECT_LE(d.min_ns, 2500u);
  EXPECT_GE(d.min_ns, 2048u);
  EXPECT_GE(d.max_ns, 2600u);
  EXPECT_LT(d.max_ns, 3072u);
  add_sample(now, 10);
  const ct_api_stats d2 = stats_since(now, before);
  EXPECT_EQ(d2.min_ns, 10u) << "a new minimum of the run is exact";
  EXPECT_NEAR(stddev_ns(d), std::sqrt(5000.0), 1e-9);
  EXPECT_EQ(stats_since(before, before).calls, 0u);
}

TEST(Stats, CountBelow) {
  ct_api_stats s{};
  for (int i = 0; i < 10; ++i) add_sample(s, 1000);
  for (int i = 0; i < 5; ++i) add_sample(s, 1000000);
  EXPECT_NEAR(count_below(s, 50000), 10.0, 1e-9);
  EXPECT_NEAR(count_below(s, 5000000), 15.0, 1e-9);
  EXPECT_NEAR(count_below(s, 10), 0.0, 1e-9);
}

TEST(ApiRows, SortedByTotalWithShareAndOnlyDisplayedApis) {
  std::vector<ct_api_stats> by_id(apis().size());
  add_sample(by_id[api_by_symbol("cudaMalloc")->id], 3000);
  add_sample(by_id[api_by_symbol("cudaFree")->id], 1000);
  add_sample(by_id[api_by_symbol("cudaLaunchKernel")->id], 6000);
  Selection mem;
  mem.group[static_cast<int>(Group::Mem)] = true;
  const auto rows = api_rows(by_id, mem);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].api->symbol, "cudaMalloc");
  EXPECT_EQ(rows[1].api->symbol, "cudaFree");
  EXPECT_DOUBLE_EQ(rows[0].time_pct, 75.0);
  EXPECT_DOUBLE_EQ(rows[1].avg_ns, 1000.0);
}

TEST(Transfers, DirectionFromKindElseName) {
  auto dir = [](std::string_view api, std::vector<Arg> args) {
    Direction d = Direction::HtoH;
    with_call(api, args, {}, [&](const Call& c) { d = copy_direction(c); });
    return d;
  };
  EXPECT_EQ(dir("cudaMemcpy", {{"kind", 1}}), Direction::HtoD);
  EXPECT_EQ(dir("cudaMemcpyAsync", {{"kind", 2}}), Direction::DtoH);
  EXPECT_EQ(dir("cudaMemcpy", {{"kind", 4}}), Direction::Default);
  EXPECT_EQ(dir("cuMemcpyHtoD_v2", {}), Direction::HtoD);
  EXPECT_EQ(dir("cuMemcpyDtoHAsync_v2", {}), Direction::DtoH);
  EXPECT_EQ(dir("cuMemcpyDtoD_v2", {}), Direction::DtoD);
  EXPECT_EQ(dir("cudaMemcpyPeer", {}), Direction::Peer);
  EXPECT_EQ(dir("cuMemcpy", {}), Direction::Default);
  EXPECT_EQ(dir("cudaMemsetAsync", {}), Direction::Memset);
}

TEST(Transfers, BytesMoved) {
  auto bytes = [](std::string_view api, std::vector<Arg> args) {
    std::uint64_t n = 0;
    with_call(api, args, {}, [&](const Call& c) { n = role_bytes(c); });
    return n;
  };
  EXPECT_EQ(bytes("cudaMemcpy", {{"count", 4096}}), 4096u);
  EXPECT_EQ(bytes("cudaMemcpy2D", {{"dpitch", 512}, {"spitch", 1024}, {"width", 100}, {"height", 3}}), 300u);
  EXPECT_EQ(bytes("cudaMemcpyPeer", {{"count", 77}}), 77u);
  EXPECT_EQ(bytes("cuMemsetD32_v2", {{"N", 10}}), 40u);
  EXPECT_EQ(bytes("cuMemsetD8_v2", {{"N", 10}}), 10u);
  EXPECT_EQ(bytes("cudaMemset", {{"count", 9}}), 9u);
}

// One rule gives a copy's bytes: the exporter's BPF side (aggregate.bpf.h)
// multiplies the arguments that role_bytes multiplies, for every copy row.
TEST(Transfers, TheExporterMultipliesTheArgumentsOfRoleBytes) {
  int copies = 0;
  for (const Api& api : apis()) {
    if (api.effect() != Effect::Copy) continue;
    ++copies;
    auto b = std::make_unique<cudatrace_test::RecBuf>();
    cudatrace_test::init_rec(*b, api.symbol);
    for (int i = 0; i < CT_MAX_ARGS; ++i) b->rec.args[i] = 1000 + 7 * i;  // a different value in each slot
    Call c;
    ASSERT_TRUE(decode_call(b->rec, nullptr, c)) << api.symbol;
    const ct_export_api e = export_api(api);
    // arg_in_slot: slot + 1, 0 for none; no rows multiply by 1.
    const std::uint64_t bytes = e.bytes_slot ? b->rec.args[e.bytes_slot - 1] : 0;
    const std::uint64_t rows = e.rows_slot ? b->rec.args[e.rows_slot - 1] : 1;
    EXPECT_EQ(role_bytes(c), bytes * rows) << api.symbol;
    EXPECT_NE(role_bytes(c), 0u) << api.symbol << " has no byte count";
  }
  EXPECT_GT(copies, 20);
}

// A Python line's allocations count the bytes the memory table counts: a
// pitched allocation's pitch x height, not its width.
TEST(Transfers, PythonSitesCountAPitchedAllocationsBytes) {
  MemoryTracker memory;
  PySites sites;
  CallSpec spec;
  spec.outs = {0xd100000000, 1024};  // the pointer, the pitch cudaMallocPitch chose
  with_call("cudaMallocPitch", {{"width", 1000}, {"height", 30}}, spec, [&](const Call& c) {
    Call with_stack = c;
    py_stack(with_stack) = {PyFrame{"step", "train.py", 12}};
    sites.on_displayed_call(with_stack, memory);
  });
  ASSERT_EQ(sites.sites().size(), 1u);
  EXPECT_EQ(sites.sites().begin()->second.alloc_bytes, 1024u * 30);
}

TEST(Activity, CopiesCountedOnceWithSyncBandwidthPageableAndTiny) {
  MemoryTracker memory;
  Activity a;
  auto feed = [&](std::string_view api, std::vector<Arg> args, CallSpec spec) {
    with_call(api, args, spec, [&](const Call& c) {
      memory.on_call(c);
      a.on_call(c, memory);
    });
  };
  CallSpec pinned;
  pinned.outs = {0x4000000000};
  feed("cudaMallocHost", {{"size", 1 << 20}}, pinned);
  CallSpec sync;
  sync.dur_ns = 1000;
  // Pinned source, 1 MiB in 1 us: 1048.576 GB/s as the host sees it.
  feed("cudaMemcpy", {{"dst", 0xd000}, {"src", 0x4000000000}, {"count", 1 << 20}, {"kind", 1}}, sync);
  CallSpec nested = sync;
  nested.depth = 1;
  nested.parent = "cudaMemcpy";
  feed("cuMemcpy", {{"dst", 0xd000}, {"src", 0x4000000000}, {"ByteCount", 1 << 20}}, nested);
  // Pageable and tiny, async: no bandwidth.
  feed("cudaMemcpyAsync", {{"dst", 0xd000}, {"src", 0x7f0000}, {"count", 100}, {"kind", 1}, {"stream", 0x5010}}, {});
  CallSpec failed;
  failed.ret = 21;
  feed("cudaMemcpy", {{"dst", 0xd000}, {"src", 0x7f0000}, {"count", 16}, {"kind", 1}}, failed);
  const TransferStats& h2d = a.transfers[static_cast<int>(Direction::HtoD)];
  EXPECT_EQ(h2d.count, 2u);
  EXPECT_EQ(h2d.bytes, (1u << 20) + 100);
  EXPECT_EQ(h2d.sync_count, 1u);
  EXPECT_EQ(h2d.sync_bytes, 1u << 20);
  EXPECT_EQ(h2d.sync_ns, 1000u);
  EXPECT_EQ(h2d.pageable, 1u);
  EXPECT_EQ(h2d.pageable_bytes, 100u);
  EXPECT_EQ(h2d.pageable_async, 1u);
  EXPECT_EQ(h2d.tiny, 1u);
  EXPECT_EQ(a.transfers[static_cast<int>(Direction::Default)].count, 0u) << "the nested cuMemcpy";
}

TEST(Activity, KernelsWithDistinctShapes) {
  KernelNames names;
  names.set_symbolizer([](std::uint32_t, std::uint64_t addr) {
    return addr == 0x1000 ? std::string("_Z6addOnePfi") : std::string();
  });
  MemoryTracker memory;
  Activity a;
  auto launch = [&](std::uint64_t func, std::uint32_t gx, std::uint32_t bx, std::uint64_t ts) {
    CallSpec s;
    s.ts_ns = ts;
    with_call("cudaLaunchKernel", {{"func", func}, dim3_arg("grid", gx, 1, 1), dim3_arg("block", bx, 1, 1)}, s,
              [&](const Call& c) { a.on_call(c, memory); }, &names);
  };
  launch(0x1000, 4, 128, 100);
  launch(0x1000, 4, 128, 200);
  launch(0x1000, 8, 256, 300);
  launch(0x2000, 1, 32, 400);
  EXPECT_EQ(a.launches, 4u);
  EXPECT_EQ(a.first_launch_ns, 100u);
  EXPECT_EQ(a.last_launch_ns, 400u);
  ASSERT_EQ(a.kernels.size(), 2u);
  const KernelStats& k = a.kernels.at("addOne(float*, int)");
  EXPECT_EQ(k.launches, 3u);
  ASSERT_EQ(k.shapes.size(), 2u);
  EXPECT_EQ(k.shapes.at({4, 1, 1, 128, 1, 1}), 2u);
  EXPECT_EQ(a.kernels.at("? 0x2000").launches, 1u);
}

// ---- Launches and copies counted in BPF ------------------------------------

// The key bpf/cudatrace.bpf.c (count_activity) builds for a call's record.
ct_activity_key bpf_key(const ct_call& r) {
  const ct_activity_api a = activity_api(*api_by_id(r.api));
  ct_activity_key k{};
  k.tgid = r.pid;
  k.api = r.api;
  std::uint64_t dir = a.copy_kind;
  for (int i = 0; i < CT_MAX_ARGS; ++i)
    if (i + 1 == a.copy_kind_slot) dir = r.args[i];
  const unsigned host_slot = dir == 1 ? a.src_slot : dir == 2 ? a.dst_slot : 0;
  for (unsigned i = 0; i < CT_MAX_ARGS; ++i)
    k.args[i] = (a.key_args >> i & 1) || i + 1 == host_slot ? r.args[i] : 0;
  if (a.config_slot) std::memcpy(k.dims, reinterpret_cast<const unsigned char*>(&r) + sizeof(ct_call), sizeof k.dims);
  return k;
}

std::string key_bytes(const ct_activity_key& k) { return std::string(reinterpret_cast<const char*>(&k), sizeof k); }

void expect_same_activity(const Activity& a, const Activity& b) {
  EXPECT_EQ(a.launches, b.launches);
  EXPECT_EQ(a.first_launch_ns, b.first_launch_ns);
  EXPECT_EQ(a.last_launch_ns, b.last_launch_ns);
  ASSERT_EQ(a.kernels.size(), b.kernels.size());
  for (const auto& [name, k] : a.kernels) {
    ASSERT_TRUE(b.kernels.count(name)) << name;
    EXPECT_EQ(k.launches, b.kernels.at(name).launches) << name;
    EXPECT_EQ(k.shapes, b.kernels.at(name).shapes) << name;
  }
  for (int d = 0; d < kDirections; ++d) {
    const TransferStats &x = a.transfers[d], &y = b.transfers[d];
    const auto fields = [](const TransferStats& t) {
      return std::vector<std::uint64_t>{t.count,          t.bytes,    t.sync_count,     t.sync_bytes, t.sync_ns,
                                        t.pageable,       t.pageable_bytes, t.pageable_async, t.tiny, t.tiny_bytes};
    };
    EXPECT_EQ(fields(x), fields(y)) << direction_name(static_cast<Direction>(d));
  }
}

TEST(ActivityInBpf, WhatIsCountedAndByWhichArguments) {
  const auto meta = [](std::string_view symbol) { return activity_api(*api_by_symbol(symbol)); };
  const ct_activity_api copy = meta("cudaMemcpyAsync");  // dst, src, count, kind, stream
  EXPECT_EQ(copy.kind, CT_ACT_COPY);
  EXPECT_EQ(copy.key_args, 0b1100) << "count and kind; a pointer only for the host side";
  EXPECT_EQ(copy.copy_kind_slot, 4);
  EXPECT_EQ(copy.dst_slot, 1);
  EXPECT_EQ(copy.src_slot, 2);
  EXPECT_EQ(meta("cuMemcpyDtoH_v2").copy_kind, 2);
  EXPECT_EQ(meta("cuMemcpyDtoH_v2").copy_kind_slot, 0);
  const ct_activity_api launch = meta("cudaLaunchKernel");  // func, grid (2 slots), block (2), args, shared, stream
  EXPECT_EQ(launch.kind, CT_ACT_COUNT);
  EXPECT_EQ(launch.key_args, 0b11111);
  EXPECT_EQ(meta("cuLaunchKernel").key_args, 0b1111111);
  EXPECT_EQ(meta("cudaLaunchKernelExC").config_slot, 1);
  EXPECT_EQ(meta("cudaLaunchKernelExC").key_args, 0b10);
  EXPECT_EQ(meta("cudaMemsetAsync").key_args, 0b100) << "only the size";
  EXPECT_EQ(meta("cudaMallocHost").kind, CT_ACT_PAGE_LOCK);
  EXPECT_EQ(meta("cudaFree").kind, CT_ACT_PAGE_LOCK) << "it may free managed memory";
  EXPECT_EQ(meta("cudaMalloc").kind, CT_ACT_NONE);
  EXPECT_EQ(meta("cudaGetDevice").kind, CT_ACT_NONE);
}

// Counting by key in BPF and rebuilding one call per key gives the tables
// that one record per call gives.
TEST(ActivityInBpf, CountedCallsGiveTheTablesOfRecords) {
  KernelNames names;
  names.set_symbolizer([](std::uint32_t, std::uint64_t addr) {
    return addr == 0x1000 ? std::string("_Z6addOnePfi") : addr == 0x3000 ? std::string("_Z4tailv") : std::string();
  });
  MemoryTracker memory;
  Activity per_record;
  std::map<std::string, std::pair<ct_activity_key, ct_activity>> counted;
  auto feed = [&](std::string_view api, std::vector<Arg> args, CallSpec spec,
                  const std::vector<std::uint8_t>& payload = {}) {
    with_record_call(
        api, args, spec,
        [&](const ct_call& rec, const Call& c) {
          memory.on_call(c);
          per_record.on_call(c, memory);
          if (c.failed() || c.depth || activity_api(*c.api).kind == CT_ACT_PAGE_LOCK ||
              activity_api(*c.api).kind == CT_ACT_NONE)
            return;
          const ct_activity_key k = bpf_key(rec);
          auto [it, fresh] = counted.try_emplace(key_bytes(k), k, ct_activity{0, 0, c.ts_ns, c.ts_ns});
          ct_activity& v = it->second.second;
          ++v.calls;
          v.total_ns += c.dur_ns;
          v.first_ts_ns = std::min<std::uint64_t>(v.first_ts_ns, c.ts_ns);
          v.last_ts_ns = std::max<std::uint64_t>(v.last_ts_ns, c.ts_ns);
        },
        &names, payload);
  };
  CallSpec pinned;
  pinned.outs = {0x4000000000};
  feed("cudaMallocHost", {{"size", 1 << 20}}, pinned);
  for (std::uint64_t i = 0; i < 5; ++i) {
    CallSpec s;
    s.ts_ns = 100 + i;
    s.dur_ns = 1000 + i;
    feed("cudaLaunchKernel", {{"func", 0x1000}, dim3_arg("grid", 4, 1, 1), dim3_arg("block", 128 + 128 * (i % 2), 1, 1),
                              {"args", 0x7000 + i}, {"stream", 0x5010}},
         s);
    feed("cuLaunchKernel", {{"f", 0x2000}, {"grid", 2, 3, 4}, {"block", 64, 1, 1}, {"hStream", i}}, s);
    feed("cudaMemcpy", {{"dst", 0xd000 + i}, {"src", 0x4000000000}, {"count", 1 << 20}, {"kind", 1}}, s);
    feed("cudaMemcpy", {{"dst", 0xd000}, {"src", 0x7f0000 + i % 2}, {"count", 100}, {"kind", 1}}, s);
    feed("cudaMemcpyAsync", {{"dst", 0x7f1000}, {"src", 0xd000 + i}, {"count", 4096}, {"kind", 2}, {"stream", 1}}, s);
    feed("cudaMemcpyAsync", {{"dst", 0xe000 + i}, {"src", 0xd000 + i}, {"count", 8}, {"kind", 3}, {"stream", 1}}, s);
    feed("cuMemcpyHtoD_v2", {{"dstDevice", 0xd000 + i}, {"srcHost", 0x4000000000}, {"ByteCount", 64}}, s);
    feed("cudaMemcpy2D", {{"dst", 0xd000}, {"dpitch", 512}, {"src", 0x7f0000}, {"spitch", 512}, {"width", 256},
                          {"height", 4 + i}, {"kind", 1}},
         s);
    feed("cudaMemsetAsync", {{"devPtr", 0xd000 + i}, {"value", 0}, {"count", 256}, {"stream", 1}}, s);
    // A launch config: grid (8,1,1), block (32,2,1).
    const std::uint32_t dims[6] = {8, 1, 1, 32, 2, 1};
    std::vector<std::uint8_t> config(CT_LAUNCH_CONFIG_SIZE, 0);
    std::memcpy(config.data(), dims, sizeof dims);
    feed("cudaLaunchKernelExC", {{"config", 0x9000 + i}, {"func", 0x3000}, {"args", 0x7000}}, s, config);
  }
  CallSpec failed;
  failed.ret = 98;
  feed("cudaLaunchKernel", {{"func", 0x1000}, dim3_arg("grid", 1, 1, 1), dim3_arg("block", 1, 1, 1)}, failed);
  CallSpec nested;
  nested.depth = 1;
  feed("cuMemcpy", {{"dst", 0xd000}, {"src", 0x4000000000}, {"ByteCount", 64}}, nested);

  Activity from_bpf;
  for (const auto& [bytes, entry] : counted) {
    ActivityRecord rec;
    activity_record(entry.first, entry.second, rec);
    Call c;
    ASSERT_TRUE(decode_call(rec.call(), &names, c));
    from_bpf.on_calls(c, memory, entry.second);
  }
  // Launches of two shapes, copies whose device pointers vary: fewer keys than calls.
  EXPECT_LT(counted.size(), 30u);
  EXPECT_EQ(per_record.launches, 15u);
  EXPECT_GT(per_record.transfers[static_cast<int>(Direction::HtoD)].pageable, 0u);
  EXPECT_GT(per_record.transfers[static_cast<int>(Direction::DtoH)].pageable, 0u);
  expect_same_activity(per_record, from_bpf);
}

}  // namespace
