#include "cudatrace/analysis/summary_report.h"

#include <gtest/gtest.h>

#include "cudatrace/render/format.h"
#include "cudatrace/render/json_format.h"
#include "cudatrace/render/text.h"

#include "analysis_calls.h"
#include "json_checker.h"

namespace {

using namespace cudatrace;
using cudatrace_test::Arg;
using cudatrace_test::CallSpec;
using cudatrace_test::dim3_arg;
using cudatrace_test::JsonParser;
using cudatrace_test::JsonValue;
using cudatrace_test::with_call;

void add_calls(std::vector<ct_api_stats>& run, std::string_view api, std::uint64_t n, std::uint64_t ns,
               std::uint64_t errors = 0) {
  ct_api_stats s{};
  unsigned b = 0;
  while (b + 1 < CT_HIST_BUCKETS && ct_hist_bucket_low(b + 1) <= ns) ++b;
  s.calls = n;
  s.errors = errors;
  s.total_ns = n * ns;
  s.min_ns = s.max_ns = ns;
  s.sum_sq_lo = n * ns * ns;
  s.hist[b] = n;
  add_stats(run[api_by_symbol(api)->id], s);
}

Selection all_groups() {
  Selection s;
  for (int g = 0; g < kGroupCount; ++g) s.group[g] = static_cast<Group>(g) != Group::Module;
  return s;
}

// A reporter and the pipeline it reports on.
struct ReportedRun {
  ReportedRun(const ReportOptions& o) : pipeline(PipelineOptions{o.display, false, false, o.tables}), reporter(o, pipeline, {}) {}
  void on_call(Call& c) { pipeline.on_call(c); }
  // The report in the format the options ask for, as the trace writer writes it.
  void report(fmt::memory_buffer& out, const std::vector<ct_api_stats>& run, std::uint64_t now_ns, bool final) {
    const SummarySnapshot s = reporter.snapshot(run, now_ns, final, std::nullopt, nullptr);
    if (reporter.options().json)
      append_summary_json(out, s);
    else
      append_summary_text(out, s, reporter.options().full_names);
  }
  std::uint64_t calls(const std::vector<ct_api_stats>& run) const { return reporter.calls(run); }
  Pipeline pipeline;
  SummaryReport reporter;
};

// A small run: two mallocs (one leaked), a copy, two launches of one kernel.
std::unique_ptr<ReportedRun> small_run(bool json, bool hist = false, bool full_names = false) {
  ReportOptions o;
  o.full_names = full_names;
  o.display = all_groups();
  o.tables = true;
  o.hist = hist;
  o.json = json;
  o.start_ns = 1000000000;
  auto r = std::make_unique<ReportedRun>(o);
  KernelNames names;
  names.set_symbolizer([](std::uint32_t, std::uint64_t) { return std::string("_Z6addOnePfi"); });
  auto feed = [&](std::string_view api, std::vector<Arg> args, CallSpec s) {
    with_call(api, args, s, [&](const Call& c) { Call copy = c; r->on_call(copy); }, &names);
  };
  CallSpec malloc1;
  malloc1.ts_ns = 1100000000;
  malloc1.outs = {0xd000100000};
  malloc1.caller = 0x401000;
  feed("cudaMalloc", {{"size", 1 << 20}}, malloc1);
  CallSpec malloc2 = malloc1;
  malloc2.ts_ns = 1200000000;
  malloc2.outs = {0xd000200000};
  feed("cudaMalloc", {{"size", 4096}}, malloc2);
  CallSpec copy;
  copy.ts_ns = 1300000000;
  copy.dur_ns = 2000;
  feed("cudaMemcpy", {{"dst", 0xd000100000}, {"src", 0x7f00}, {"count", 4096}, {"kind", 1}}, copy);
  for (std::uint64_t ts : {1400000000ull, 1500000000ull}) {
    CallSpec launch;
    launch.ts_ns = ts;
    feed("cudaLaunchKernel", {{"func", 0x1000}, dim3_arg("grid", 4, 2, 1), dim3_arg("block", 128, 1, 1)}, launch);
  }
  CallSpec free1;
  free1.ts_ns = 1600000000;
  feed("cudaFree", {{"devPtr", 0xd000200000}}, free1);
  return r;
}

std::vector<ct_api_stats> small_stats() {
  std::vector<ct_api_stats> run(apis().size());
  add_calls(run, "cudaMalloc", 2, 3000);
  add_calls(run, "cudaMemcpy", 1, 2000);
  add_calls(run, "cudaLaunchKernel", 2, 1500, 1);
  add_calls(run, "cudaFree", 1, 1000);
  return run;
}

TEST(Report, GroupDigits) {
  EXPECT_EQ(group_digits(std::uint64_t(0)), "0");
  EXPECT_EQ(group_digits(std::uint64_t(999)), "999");
  EXPECT_EQ(group_digits(std::uint64_t(1000)), "1,000");
  EXPECT_EQ(group_digits(std::uint64_t(1234567)), "1,234,567");
  EXPECT_EQ(group_tenths(1234.56), "1,234.6");
  EXPECT_EQ(group_tenths(0.04), "0.0");
}

TEST(Report, FullNamesInTheKernelTable) {
  auto r = small_run(false, false, true);
  fmt::memory_buffer out;
  r->report(out, small_stats(), 2000000000, true);
  EXPECT_NE(fmt::to_string(out).find("(4,2,1)x(128,1,1) (2)    addOne(float*, int)\n"), std::string::npos)
      << fmt::to_string(out);
}

TEST(Report, FinalTextTables) {
  auto r = small_run(false);
  fmt::memory_buffer out;
  r->report(out, small_stats(), 2000000000, true);
  EXPECT_EQ(fmt::to_string(out), R"(cudatrace summary: 1.000 s traced

CUDA API summary:

 Time (%)  Total Time (ns)  Num Calls  Avg (ns)  Med (ns)  Min (ns)  Max (ns)  StdDev (ns)  P99 (ns)  Errors  Name
 --------  ---------------  ---------  --------  --------  --------  --------  -----------  --------  ------  ----------------
     50.0            6,000          2   3,000.0   3,000.0     3,000     3,000          0.0   3,000.0       0  cudaMalloc
     25.0            3,000          2   1,500.0   1,500.0     1,500     1,500          0.0   1,500.0       1  cudaLaunchKernel
     16.7            2,000          1   2,000.0   2,000.0     2,000     2,000          0.0   2,000.0       0  cudaMemcpy
      8.3            1,000          1   1,000.0   1,000.0     1,000     1,000          0.0   1,000.0       0  cudaFree

CUDA kernel launches:

 Launches  Shapes  Grid x Block (launches)  Name
 --------  ------  -----------------------  ------
        2       1  (4,2,1)x(128,1,1) (2)    addOne

CUDA transfers:

 Direction  Count  Total (B)  Avg (B)  Sync  Sync Time (ns)  Sync GB/s  Pageable  Tiny
 ---------  -----  ---------  -------  ----  --------------  ---------  --------  ----
 HtoD           1      4,096  4,096.0     1           2,000      2.048         1     1

Device memory:

  PID  Device   Live (B)   Peak (B)  Peak At (s)  Allocs  Frees  Managed Live (B)  Managed Peak (B)
 ----  ------  ---------  ---------  -----------  ------  -----  ----------------  ----------------
 1234       0  1,048,576  1,052,672     0.200000       2      1                 0                 0

Allocations never freed: 1 (1,048,576 bytes)

  PID  Device       Address   Size (B)  Age (s)  Kind    API         Call Site
 ----  ------  ------------  ---------  -------  ------  ----------  ---------
 1234       0  0xd000100000  1,048,576    0.900  device  cudaMalloc  0x401000

Insights:

 none
)");
  EXPECT_EQ(r->calls(small_stats()), 6u);
}

TEST(Report, FinalJsonIsOneValidLineWithEveryTable) {
  auto r = small_run(true, true);
  fmt::memory_buffer out;
  r->report(out, small_stats(), 2000000000, true);
  const std::string line = fmt::to_string(out);
  ASSERT_EQ(line.back(), '\n');
  ASSERT_EQ(line.find('\n'), line.size() - 1);
  JsonValue v;
  std::string error;
  ASSERT_TRUE(JsonParser::parse(line, v, error)) << error << "\n" << line;
  EXPECT_EQ(v.get("type")->text, "summary");
  EXPECT_EQ(v.get("final")->kind, JsonValue::Bool);
  const JsonValue* apis = v.get("apis");
  ASSERT_NE(apis, nullptr);
  ASSERT_EQ(apis->items.size(), 4u);
  EXPECT_EQ(apis->items[0].get("name")->text, "cudaMalloc");
  EXPECT_EQ(apis->items[0].get("calls")->text, "2");
  EXPECT_EQ(apis->items[1].get("errors")->text, "1");
  const JsonValue* kernels = v.get("kernels");
  ASSERT_EQ(kernels->items.size(), 1u);
  EXPECT_EQ(kernels->items[0].get("name")->text, "addOne(float*, int)");
  EXPECT_EQ(kernels->items[0].get("short_name")->text, "addOne");
  EXPECT_EQ(kernels->items[0].get("launches")->text, "2");
  EXPECT_EQ(kernels->items[0].get("shapes")->items.size(), 1u);
  const JsonValue* transfers = v.get("transfers");
  ASSERT_EQ(transfers->items.size(), 1u);
  EXPECT_EQ(transfers->items[0].get("direction")->text, "HtoD");
  EXPECT_EQ(transfers->items[0].get("pageable")->text, "1");
  const JsonValue* leaks = v.get("leaks");
  ASSERT_EQ(leaks->items.size(), 1u);
  EXPECT_EQ(leaks->items[0].get("bytes")->text, "1048576");
  EXPECT_EQ(leaks->items[0].get("age_ns")->text, "900000000");
  EXPECT_EQ(v.get("memory")->items[0].get("peak_bytes")->text, "1052672");
  ASSERT_NE(v.get("insights"), nullptr);
  EXPECT_EQ(v.get("histograms")->items.size(), 4u);
}

TEST(Report, IntervalCoversOnlyTheCallsSinceThePreviousReport) {
  auto r = small_run(true);
  std::vector<ct_api_stats> run = small_stats();
  fmt::memory_buffer first;
  r->report(first, run, 1500000000, false);
  add_calls(run, "cudaMalloc", 3, 3000);
  fmt::memory_buffer second;
  r->report(second, run, 2000000000, false);
  JsonValue v;
  std::string error;
  ASSERT_TRUE(JsonParser::parse(fmt::to_string(second), v, error)) << error;
  EXPECT_EQ(v.get("covered_ns")->text, "500000000");
  ASSERT_EQ(v.get("apis")->items.size(), 1u);
  EXPECT_EQ(v.get("apis")->items[0].get("calls")->text, "3");
  EXPECT_TRUE(v.get("kernels")->items.empty()) << "no launches since the first report";
  EXPECT_FALSE(v.has("leaks")) << "only at exit";
  fmt::memory_buffer last;
  r->report(last, run, 2500000000, true);
  JsonValue whole;
  ASSERT_TRUE(JsonParser::parse(fmt::to_string(last), whole, error)) << error;
  EXPECT_EQ(whole.get("apis")->items[0].get("calls")->text, "5") << "the final report covers the whole run";
}

TEST(Report, HistogramInBccStyle) {
  ReportOptions o;
  o.display = all_groups();
  o.hist = true;
  ReportedRun r(o);
  std::vector<ct_api_stats> run(apis().size());
  add_calls(run, "cudaStreamSynchronize", 3, 1500);
  add_calls(run, "cudaStreamSynchronize", 1, 5000);
  fmt::memory_buffer out;
  r.report(out, run, 1000, true);
  EXPECT_EQ(fmt::to_string(out), R"(cudatrace summary: 0.000 s traced

Latency histograms:

API = cudaStreamSynchronize
     nsecs               : count     distribution
         0 -> 1          : 0        |                                        |
         2 -> 3          : 0        |                                        |
         4 -> 7          : 0        |                                        |
         8 -> 15         : 0        |                                        |
        16 -> 31         : 0        |                                        |
        32 -> 63         : 0        |                                        |
        64 -> 127        : 0        |                                        |
       128 -> 255        : 0        |                                        |
       256 -> 511        : 0        |                                        |
       512 -> 1023       : 0        |                                        |
      1024 -> 2047       : 3        |****************************************|
      2048 -> 4095       : 0        |                                        |
      4096 -> 8191       : 1        |*************                           |
)");
}

TEST(Report, OnlyInsights) {
  ReportOptions o;
  o.display = all_groups();
  o.insights = true;
  ReportedRun r(o);
  fmt::memory_buffer out;
  r.report(out, std::vector<ct_api_stats>(apis().size()), 2000000000, true);
  EXPECT_EQ(fmt::to_string(out), "cudatrace summary: 2.000 s traced\n\nInsights:\n\n none\n");
}

}  // namespace
