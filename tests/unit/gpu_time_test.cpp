// --gpu-time (analysis/gpu_time.h) against a simulated GPU whose true
// execution times are known: the bounds must always hold the truth, and the
// estimator must find per-kernel times within the uncertainty it states.
#include "cudatrace/analysis/gpu_time.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cudatrace/render/gpu_time.h"
#include "json_checker.h"
#include "stream_feed.h"

namespace {

using cudatrace::GpuWindow;
using cudatrace_test::CallSpec;
using cudatrace_test::StreamFeed;

constexpr std::uint64_t kUs = 1000;
constexpr std::int64_t kNotReady = 600;

struct KernelType {
  std::uint64_t handle;  // the fake symbolizer's k1..k3
  std::uint32_t grid;
  double mean_ns;
};

// A host program and the GPU it drives: every call is fed to a pipeline
// with --gpu-time; the GPU runs each stream's work in order, each piece as
// soon as it has arrived and the previous one is done (streams in parallel).
class SimulatedRun {
 public:
  explicit SimulatedRun(std::uint64_t seed) : rng_(seed) {
    cudatrace::PipelineOptions o = StreamFeed::all_apis();
    o.gpu_time = true;
    pipeline_ = std::make_unique<cudatrace::Pipeline>(o);
  }

  struct Stream {
    std::uint64_t handle = 0;  // 0: the legacy default stream
    std::string id;
    std::uint64_t gpu_free_ns = 0;   // when its last queued work ends
    std::vector<double> pending;     // true GPU times of work not yet closed, in order
    std::vector<std::uint64_t> ends;  // and when each ends
  };

  Stream& stream(std::size_t i) {
    while (streams_.size() <= i) {
      Stream s;
      s.handle = streams_.empty() ? 0 : 0x50 + streams_.size();
      s.id = streams_.empty() ? "default" : "s" + std::to_string(streams_.size());
      if (s.handle) call("cudaStreamCreate", {{"pStream", s.handle}}, 4 * kUs);
      streams_.push_back(s);
    }
    return streams_[i];
  }

  std::uint64_t uniform(std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng_);
  }
  void host_work(std::uint64_t ns) { now_ += ns; }

  // A call made now that lasts `dur`.
  const std::vector<GpuWindow>& call(const std::string& symbol, std::vector<std::pair<std::string, std::uint64_t>> args,
                                     std::uint64_t dur, std::int64_t ret = 0) {
    CallSpec s;
    s.symbol = symbol;
    s.args = std::move(args);
    s.ts_ns = now_;
    s.dur_ns = dur;
    s.ret = ret;
    now_ += dur;
    const cudatrace::CallAnalysis& a = pipeline_->on_call(feed_.decode(s));
    return *a.gpu_windows;
  }

  void launch(std::size_t on, const KernelType& k, double jitter = 0.03) {
    Stream& s = stream(on);
    const std::uint64_t entry = now_, cost = uniform(3, 8) * kUs;
    const double truth = k.mean_ns * std::uniform_real_distribution<double>(1 - jitter, 1 + jitter)(rng_);
    const std::uint64_t start = std::max(entry + cost + uniform(1, 10) * kUs, s.gpu_free_ns);
    s.gpu_free_ns = start + static_cast<std::uint64_t>(truth);
    s.pending.push_back(truth);
    s.ends.push_back(s.gpu_free_ns);
    const auto& closed = call("cudaLaunchKernel",
                              {{"func", k.handle}, {"grid", k.grid | std::uint64_t(1) << 32}, {"stream", s.handle}},
                              cost);
    EXPECT_TRUE(closed.empty());
  }

  void copy_async(std::size_t on, std::uint64_t bytes) {
    Stream& s = stream(on);
    const std::uint64_t entry = now_, cost = uniform(4, 9) * kUs;
    const double truth = 5000.0 + double(bytes) / 10.0;  // 10 bytes per ns
    const std::uint64_t start = std::max(entry + cost + uniform(1, 10) * kUs, s.gpu_free_ns);
    s.gpu_free_ns = start + static_cast<std::uint64_t>(truth);
    s.pending.push_back(truth);
    s.ends.push_back(s.gpu_free_ns);
    call("cudaMemcpyAsync", {{"dst", 0x7000}, {"src", 0x9000}, {"count", bytes}, {"kind", 1}, {"stream", s.handle}},
         cost);
  }

  // A synchronisation of the host that returns once `until` has passed (or at once).
  std::uint64_t sync_duration(std::uint64_t until) {
    const std::uint64_t cost = uniform(2, 8) * kUs;  // below the 20 us of "returned at once"
    if (until <= now_) return cost;
    return std::max(cost, until - now_ + uniform(1, 40) * kUs);  // woken a little after the work ends
  }

  // Checks a closed window of stream `s` holding its first `n` pending pieces against the truth.
  void check(const std::vector<GpuWindow>& closed, Stream& s, std::size_t n) {
    double truth = 0;
    for (std::size_t i = 0; i < n; ++i) truth += s.pending[i];
    auto w = std::find_if(closed.begin(), closed.end(), [&](const GpuWindow& x) { return x.stream == s.id; });
    if (!n) {
      EXPECT_EQ(w, closed.end()) << s.id;
      return;
    }
    ASSERT_NE(w, closed.end()) << s.id << " window not closed";
    ++windows;
    EXPECT_LE(double(w->lower_ns), truth + 1) << s.id << " lower bound above the truth";
    EXPECT_GE(double(w->upper_ns), truth - 1) << s.id << " upper bound below the truth";
    if (w->lower_ns > 0) ++windows_with_lower;
    s.pending.erase(s.pending.begin(), s.pending.begin() + static_cast<std::ptrdiff_t>(n));
    s.ends.erase(s.ends.begin(), s.ends.begin() + static_cast<std::ptrdiff_t>(n));
  }

  void stream_sync(std::size_t on) {
    Stream& s = stream(on);
    const auto& closed = call("cudaStreamSynchronize", {{"stream", s.handle}}, sync_duration(s.gpu_free_ns));
    check(closed, s, s.pending.size());
  }

  void device_sync() {
    std::uint64_t until = 0;
    for (const Stream& s : streams_) until = std::max(until, s.gpu_free_ns);
    const auto& closed = call("cudaDeviceSynchronize", {}, sync_duration(until));
    for (Stream& s : streams_) check(closed, s, s.pending.size());
  }

  // Records an event on `on` now, queues more work, then waits for the event.
  void event_sync(std::size_t on, const KernelType& more) {
    Stream& s = stream(on);
    const std::uint64_t event = 0xe0 + on;
    if (!created_events_.count(event)) call("cudaEventCreate", {{"event", event}}, 3 * kUs);
    created_events_.insert(event);
    call("cudaEventRecord", {{"event", event}, {"stream", s.handle}}, 3 * kUs);
    const std::size_t captured = s.pending.size();
    const std::uint64_t until = captured ? s.ends[captured - 1] : 0;
    launch(on, more);
    Stream& again = stream(on);
    const auto& closed = call("cudaEventSynchronize", {{"event", event}}, sync_duration(until));
    check(closed, again, captured);
  }

  void stream_query(std::size_t on) {
    Stream& s = stream(on);
    const std::uint64_t cost = uniform(1, 4) * kUs;
    const bool done = s.gpu_free_ns <= now_;
    const auto& closed = call("cudaStreamQuery", {{"stream", s.handle}}, cost, done ? 0 : kNotReady);
    if (done)
      check(closed, s, s.pending.size());
    else
      EXPECT_TRUE(closed.empty());
  }

  cudatrace::GpuTimeReport report() const { return pipeline_->gpu_time()->report(); }

  int windows = 0, windows_with_lower = 0;

 private:
  std::mt19937_64 rng_;
  StreamFeed feed_;
  std::unique_ptr<cudatrace::Pipeline> pipeline_;
  std::vector<Stream> streams_;
  std::set<std::uint64_t> created_events_;
  std::uint64_t now_ = 1'000'000'000;
};

const KernelType kKernels[] = {{0xa1, 64, 120e3}, {0xa2, 128, 300e3}, {0xa3, 8, 45e3}, {0xa1, 256, 20e3}};

TEST(GpuTime, BoundsHoldTheTruthOverRandomRuns) {
  int windows = 0, with_lower = 0;
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    SimulatedRun run(seed);
    const std::size_t streams = run.uniform(1, 3);
    for (int step = 0; step < 40; ++step) {
      const std::size_t on = run.uniform(0, streams - 1);
      switch (run.uniform(0, 9)) {
        case 0: case 1: case 2: case 3:
          for (std::uint64_t n = run.uniform(1, 6); n; --n) {
            run.launch(on, kKernels[run.uniform(0, 3)]);
            if (run.uniform(0, 2) == 0) run.host_work(run.uniform(0, 200) * kUs);
          }
          break;
        case 4: run.copy_async(on, run.uniform(1, 1 << 22)); break;
        case 5: run.host_work(run.uniform(0, 2000) * kUs); break;
        case 6: run.stream_sync(on); break;
        case 7: run.device_sync(); break;
        case 8: run.event_sync(on, kKernels[run.uniform(0, 3)]); break;
        case 9: run.stream_query(on); break;
      }
      if (::testing::Test::HasFailure()) FAIL() << "seed " << seed << " step " << step;
    }
    run.device_sync();
    windows += run.windows;
    with_lower += run.windows_with_lower;
  }
  EXPECT_GT(windows, 2000);
  EXPECT_GT(with_lower, 50) << "the lower bound should say something where the data allows";
}

TEST(GpuTime, EstimatorRecoversKernelTimesWithinItsUncertainty) {
  SimulatedRun run(7);
  const KernelType kinds[] = {kKernels[0], kKernels[1], kKernels[2]};
  for (int window = 0; window < 300; ++window) {
    for (const KernelType& k : kinds)
      for (std::uint64_t n = run.uniform(0, 3); n; --n) run.launch(0, k);
    run.launch(0, kinds[run.uniform(0, 2)]);
    run.stream_sync(0);
    run.host_work(run.uniform(0, 50) * kUs);
  }
  const cudatrace::GpuTimeReport r = run.report();
  EXPECT_EQ(r.fitted_windows, 300u);
  EXPECT_EQ(r.gpu_bound_windows, 300u);
  ASSERT_EQ(r.estimates.size(), 3u);
  for (const KernelType& k : kinds) {
    auto e = std::find_if(r.estimates.begin(), r.estimates.end(),
                          [&](const cudatrace::GpuTimeEstimate& x) { return x.dims[0] == k.grid; });
    ASSERT_NE(e, r.estimates.end());
    EXPECT_TRUE(e->separable) << e->column;
    EXPECT_GT(e->stderr_ns, 0) << e->column;
    EXPECT_LE(e->stderr_ns, 0.05 * k.mean_ns) << e->column << ": uncertainty too wide to be useful";
    EXPECT_NEAR(e->estimate_ns, k.mean_ns, 4 * e->stderr_ns) << e->column;
  }
  EXPECT_TRUE(r.overhead_fitted);
  EXPECT_LE(r.lower_ns, r.upper_ns);
  const auto insights = cudatrace::gpu_time_insights(r);
  ASSERT_EQ(insights.size(), 1u);
  EXPECT_EQ(insights[0].rule, "gpu-bound");
}

TEST(GpuTime, IdenticalWindowsDoNotSeparateTheirKernels) {
  SimulatedRun run(11);
  for (int window = 0; window < 50; ++window) {
    run.launch(0, kKernels[0]);
    run.launch(0, kKernels[1]);
    run.stream_sync(0);
  }
  const cudatrace::GpuTimeReport r = run.report();
  ASSERT_EQ(r.estimates.size(), 2u);
  for (const auto& e : r.estimates) EXPECT_FALSE(e.separable) << e.column;
  fmt::memory_buffer text;
  cudatrace::append_gpu_time_text(text, r);
  EXPECT_NE(fmt::to_string(text).find("not separable"), std::string::npos) << fmt::to_string(text);
}

TEST(GpuTime, HostBoundLoopIsSaidHostBound) {
  SimulatedRun run(3);
  for (int window = 0; window < 100; ++window) {
    run.launch(0, kKernels[2]);
    run.host_work(2000 * kUs);  // the host works far longer than the kernel runs
    run.stream_sync(0);
  }
  const cudatrace::GpuTimeReport r = run.report();
  EXPECT_EQ(r.host_bound_windows, 100u);
  EXPECT_EQ(r.gpu_bound_windows, 0u);
  EXPECT_EQ(r.fitted_windows, 0u);
  const auto insights = cudatrace::gpu_time_insights(r);
  ASSERT_EQ(insights.size(), 1u);
  EXPECT_EQ(insights[0].rule, "host-bound");
}

TEST(GpuTime, SynchronousCopiesCloseWhatTheyWaitFor) {
  SimulatedRun run(5);
  run.launch(0, kKernels[0]);
  // Device to host: returns once the copy and the work before it are done.
  auto closed = run.call("cudaMemcpy", {{"dst", 0x9000}, {"src", 0x7000}, {"count", 4096}, {"kind", 2}}, 200 * kUs);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].kernels, 1u);
  EXPECT_EQ(closed[0].transfers, 1u);
  // Host to device: the work before it, not the copy (a pageable source is only staged).
  run.launch(0, kKernels[0]);
  closed = run.call("cudaMemcpy", {{"dst", 0x7000}, {"src", 0x9000}, {"count", 4096}, {"kind", 1}}, 200 * kUs);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].kernels, 1u);
  EXPECT_EQ(closed[0].transfers, 0u);
  // Device to device: no wait at all.
  closed = run.call("cudaMemcpy", {{"dst", 0x7000}, {"src", 0x8000}, {"count", 4096}, {"kind", 3}}, 10 * kUs);
  EXPECT_TRUE(closed.empty());
  const cudatrace::GpuTimeReport r = run.report();
  EXPECT_GT(r.transfer_wait_ns, 0u);
}

TEST(GpuTime, DeviceSynchronisationClosesNothingOnceDevicesSwitch) {
  SimulatedRun run(9);
  run.call("cudaSetDevice", {{"device", 0}}, 2 * kUs);
  run.launch(0, kKernels[0]);
  run.call("cudaSetDevice", {{"device", 1}}, 2 * kUs);
  const auto& closed = run.call("cudaDeviceSynchronize", {}, 300 * kUs);
  EXPECT_TRUE(closed.empty()) << "it covered device 1 only: the work on device 0 is not known done";
}

TEST(GpuTime, JsonSummaryMemberIsValid) {
  SimulatedRun run(13);
  for (int window = 0; window < 20; ++window) {
    run.launch(0, kKernels[window % 2]);
    run.launch(0, kKernels[2]);
    run.stream_sync(0);
  }
  fmt::memory_buffer json;
  json.push_back('{');
  json.append(std::string_view("\"x\":1"));
  cudatrace::append_gpu_time_json(json, run.report());
  json.push_back('}');
  const std::string text = fmt::to_string(json);
  EXPECT_NE(text.find("\"gpu_time\":{\"estimated\":true"), std::string::npos) << text;
  EXPECT_NE(text.find("\"estimate_ns\":"), std::string::npos) << text;
  EXPECT_TRUE(cudatrace_test::JsonParser::valid(text)) << text;
}

}  // namespace
