#include "cudatrace/analysis/insights.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace {

using namespace cudatrace;

// `n` calls of `ns` each, as the BPF side counts them.
ct_api_stats calls_of(std::uint64_t n, std::uint64_t ns) {
  ct_api_stats s{};
  unsigned b = 0;
  while (b + 1 < CT_HIST_BUCKETS && ct_hist_bucket_low(b + 1) <= ns) ++b;
  s.calls = n;
  s.total_ns = n * ns;
  s.min_ns = s.max_ns = ns;
  const unsigned __int128 sq = (unsigned __int128)n * ns * ns;
  s.sum_sq_lo = static_cast<std::uint64_t>(sq);
  s.sum_sq_hi = static_cast<std::uint64_t>(sq >> 64);
  s.hist[b] = n;
  return s;
}

std::vector<std::string> rules(const InsightInput& in) {
  std::vector<std::string> out;
  for (const Insight& i : find_insights(in)) out.push_back(i.rule);
  return out;
}

bool fires(const InsightInput& in, const std::string& rule) {
  const auto r = rules(in);
  return std::find(r.begin(), r.end(), rule) != r.end();
}

const Insight* find(const std::vector<Insight>& v, const std::string& rule) {
  for (const Insight& i : v)
    if (i.rule == rule) return &i;
  return nullptr;
}

InsightInput launch_loop(std::uint64_t syncs, std::uint64_t sync_ns) {
  InsightInput in;
  in.traced_s = 1;
  in.launches = 20000;
  in.launch_span_ns = 500000000;  // 40,000 launches/s
  in.syncs = calls_of(syncs, sync_ns);
  return in;
}

TEST(Insights, NothingFiresOnAQuietProgram) {
  InsightInput in;
  in.traced_s = 1;
  EXPECT_TRUE(find_insights(in).empty());
}

TEST(Insights, LaunchBoundWhenSyncsReturnAtOnceWhileLaunchingFast) {
  const auto found = find_insights(launch_loop(200, 5000));
  const Insight* i = find(found, "launch-bound");
  ASSERT_NE(i, nullptr);
  EXPECT_NE(i->message.find("20000 launches at 40000/s"), std::string::npos) << i->message;
  EXPECT_EQ(i->numbers[1].first, "launches_per_s");
  EXPECT_DOUBLE_EQ(i->numbers[1].second, 40000.0);
}

TEST(Insights, NotLaunchBoundWhenSyncsWaitForTheGpu) {
  EXPECT_FALSE(fires(launch_loop(200, 2000000), "launch-bound"));
}

TEST(Insights, NotLaunchBoundWhenLaunchingSlowlyOrWithoutSyncs) {
  InsightInput slow = launch_loop(200, 5000);
  slow.launch_span_ns = 20000000000ull;  // 1,000 launches/s
  EXPECT_FALSE(fires(slow, "launch-bound"));
  EXPECT_FALSE(fires(launch_loop(0, 0), "launch-bound"));
}

TEST(Insights, SyncStormOnManyShortSyncs) {
  InsightInput in = launch_loop(5000, 5000);
  const auto found = find_insights(in);
  const Insight* i = find(found, "sync-storm");
  ASSERT_NE(i, nullptr);
  EXPECT_NE(i->message.find("5000 of 5000 synchronisations took under 50 us"), std::string::npos) << i->message;
}

TEST(Insights, NoSyncStormWithFewOrLongSyncs) {
  EXPECT_FALSE(fires(launch_loop(50, 5000), "sync-storm"));
  EXPECT_FALSE(fires(launch_loop(5000, 2000000), "sync-storm"));
  InsightInput spread = launch_loop(5000, 5000);
  spread.traced_s = 3600;  // 1.4 per second
  EXPECT_FALSE(fires(spread, "sync-storm"));
}

TEST(Insights, AllocationChurnOnRepeatedShortLivedPairs) {
  InsightInput in;
  in.traced_s = 1;
  ChurnSite site;
  site.api = api_by_symbol("cudaMalloc");
  site.pairs = 200;
  site.lifetime_ns = 200 * 30000;
  site.calls_ns = 200 * 4000;
  in.churn.push_back({"train_step+0x2a (app)", 1 << 20, site});
  const auto found = find_insights(in);
  const Insight* i = find(found, "allocation-churn");
  ASSERT_NE(i, nullptr);
  EXPECT_NE(i->message.find("cudaMalloc at train_step+0x2a (app) allocated and freed 1048576 bytes 200 times"),
            std::string::npos)
      << i->message;
}

TEST(Insights, NoChurnForFewPairsOrLongLivedBlocks) {
  InsightInput in;
  in.traced_s = 1;
  ChurnSite few;
  few.pairs = 1;
  few.lifetime_ns = 1000;
  ChurnSite long_lived;
  long_lived.pairs = 200;
  long_lived.lifetime_ns = 200 * 5000000000ull;
  in.churn = {{"a", 4096, few}, {"b", 4096, long_lived}};
  EXPECT_FALSE(fires(in, "allocation-churn"));
}

TEST(Insights, PageableCopies) {
  InsightInput in;
  in.traced_s = 1;
  TransferStats& h2d = in.transfers[static_cast<int>(Direction::HtoD)];
  h2d.count = 20;
  h2d.pageable = 20;
  h2d.pageable_bytes = 20 << 20;
  h2d.pageable_async = 5;
  const auto found = find_insights(in);
  const Insight* i = find(found, "pageable-copies");
  ASSERT_NE(i, nullptr);
  EXPECT_NE(i->message.find("20 of 20 host<->device copies (20971520 bytes)"), std::string::npos) << i->message;
  h2d.pageable = 0;  // the same copies from pinned memory
  EXPECT_FALSE(fires(in, "pageable-copies"));
}

TEST(Insights, TinyTransfers) {
  InsightInput in;
  in.traced_s = 1;
  TransferStats& d2h = in.transfers[static_cast<int>(Direction::DtoH)];
  d2h.count = 300;
  d2h.tiny = 300;
  d2h.tiny_bytes = 300 * 64;
  const auto found = find_insights(in);
  const Insight* i = find(found, "tiny-transfers");
  ASSERT_NE(i, nullptr);
  EXPECT_NE(i->message.find("300 of 300 host<->device copies (100%)"), std::string::npos) << i->message;
  d2h.count = 1000;  // tiny ones are a minority
  EXPECT_FALSE(fires(in, "tiny-transfers"));
  d2h.count = d2h.tiny = 50;  // too few to matter
  EXPECT_FALSE(fires(in, "tiny-transfers"));
}

}  // namespace
