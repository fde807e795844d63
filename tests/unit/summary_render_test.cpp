// Golden files of the summary's two renderers: one snapshot of a small run,
// as text and as JSON, against tests/data/golden/. After a deliberate
// change of the output, regenerate them (and review the diff):
//   CUDATRACE_UPDATE_GOLDEN=1 build/tests/unit_tests --gtest_filter='SummaryGolden.*'
#include "golden.h"
#include "cudatrace/render/json_format.h"
#include "cudatrace/render/text.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "analysis_calls.h"
#include "cudatrace/analysis/py_sites.h"
#include "cudatrace/analysis/summary_report.h"

namespace {

using namespace cudatrace;
using cudatrace_test::expect_golden;
using cudatrace_test::Arg;
using cudatrace_test::CallSpec;
using cudatrace_test::dim3_arg;
using cudatrace_test::with_call;

constexpr std::uint64_t kStart = 1000000000;


void add_calls(std::vector<ct_api_stats>& run, std::string_view api, std::uint64_t n, std::uint64_t ns,
               std::uint64_t errors = 0) {
  for (std::uint64_t i = 0; i < n; ++i) add_call(run[api_by_symbol(api)->id], ns, i < errors);
}

class SummaryGolden : public ::testing::Test {
 protected:
  SummaryGolden() {
    options_.display = display();
    options_.tables = true;
    options_.hist = true;
    options_.start_ns = kStart;
    names_.set_symbolizer([](std::uint32_t, std::uint64_t addr) {
      return addr == 0x1000 ? std::string("_Z6addOnePfi") : std::string("_ZN2ns6reduceIfEEvPKT_i");
    });
  }

  static Selection display() {
    Selection s;
    for (int g = 0; g < kGroupCount; ++g) s.group[g] = static_cast<Group>(g) != Group::Module;
    return s;
  }

  void feed(std::string_view api, std::vector<Arg> args, CallSpec spec) {
    with_call(
        api, args, spec,
        [&](const Call& c) {
          Call call = c;
          pipeline_.on_call(call);
        },
        &names_);
    add_calls(run_, api, 1, spec.dur_ns, spec.ret != 0);
  }

  // Pinned and device memory, copies both ways (one from pageable memory),
  // launches of two kernels in two shapes, a free; one allocation leaks.
  void first_half() {
    CallSpec s;
    s.ts_ns = kStart + 100000000;
    s.outs = {0x4000000000};
    feed("cudaMallocHost", {{"size", 1 << 20}}, s);
    s.outs = {0xd000100000};
    s.caller = 0x401000;
    s.ts_ns += 1000000;
    feed("cudaMalloc", {{"size", 1 << 20}}, s);
    s.outs = {0xd000200000};
    s.ts_ns += 1000000;
    feed("cudaMalloc", {{"size", 4096}}, s);
    s.outs = {};
    s.dur_ns = 2000;
    s.ts_ns += 1000000;
    feed("cudaMemcpy", {{"dst", 0xd000100000}, {"src", 0x4000000000}, {"count", 1 << 20}, {"kind", 1}}, s);
    s.ts_ns += 1000000;
    feed("cudaMemcpyAsync", {{"dst", 0x7f00}, {"src", 0xd000200000}, {"count", 100}, {"kind", 2}, {"stream", 0}}, s);
    for (std::uint32_t i = 0; i < 3; ++i) {
      s.ts_ns += 1000000;
      s.dur_ns = 1500;
      feed("cudaLaunchKernel", {{"func", 0x1000}, dim3_arg("grid", 4 << (i & 1), 2, 1), dim3_arg("block", 128, 1, 1)},
           s);
    }
  }

  void second_half() {
    CallSpec s;
    s.ts_ns = kStart + 600000000;
    s.dur_ns = 1200;
    feed("cudaLaunchKernel", {{"func", 0x2000}, dim3_arg("grid", 1, 1, 1), dim3_arg("block", 32, 1, 1)}, s);
    s.ts_ns += 1000000;
    s.ret = 2;  // cudaErrorMemoryAllocation: not counted in the tables, counted as an error
    feed("cudaMalloc", {{"size", 1ull << 40}}, s);
    s.ret = 0;
    s.ts_ns += 1000000;
    feed("cudaFree", {{"devPtr", 0xd000200000}}, s);
  }

  std::string text(const SummarySnapshot& s) {
    fmt::memory_buffer out;
    append_summary_text(out, s, false);
    return fmt::to_string(out);
  }
  std::string json(const SummarySnapshot& s) {
    fmt::memory_buffer out;
    append_summary_json(out, s);
    return fmt::to_string(out);
  }

  ReportOptions options_;
  Pipeline pipeline_{PipelineOptions{display(), false, false, true}};
  KernelNames names_;
  std::vector<ct_api_stats> run_ = std::vector<ct_api_stats>(apis().size());
};

TEST_F(SummaryGolden, FinalReport) {
  SummaryReport report(options_, pipeline_, {});
  first_half();
  second_half();
  const SummarySnapshot s = report.snapshot(run_, kStart + 2000000000, true, std::nullopt, nullptr);
  expect_golden("summary_final.txt", text(s));
  expect_golden("summary_final.json", json(s));
}

// Issue 47: with call records lost, the tables built from them say so, and
// no allocation is listed as never freed (a lost record may be its free).
TEST_F(SummaryGolden, LostRecordsMarkTheTablesBuiltFromRecords) {
  SummaryReport report(options_, pipeline_, {});
  first_half();
  second_half();
  const SummarySnapshot exact = report.snapshot(run_, kStart + 2000000000, true, std::nullopt, nullptr);
  ASSERT_FALSE(exact.leaks.empty()) << "the run leaks an allocation";
  const SummarySnapshot s = report.snapshot(run_, kStart + 2000000000, true, std::nullopt, nullptr, 1234);
  EXPECT_TRUE(s.leaks.empty());
  const std::string t = text(s);
  const std::string note = "\n1,234 call records lost: this table is incomplete\n";
  for (const char* table : {"\nCUDA kernel launches:\n", "\nCUDA transfers:\n", "\nDevice memory:\n"}) {
    const auto at = t.find(table);
    ASSERT_NE(at, std::string::npos) << table;
    const auto next_table = t.find(":\n\n", at + std::string(table).size());
    EXPECT_LT(t.find(note, at), next_table) << table << " has no note under it: " << t;
  }
  EXPECT_NE(t.find("\nAllocations never freed: not listed: 1,234 call records were lost, perhaps frees of allocations "
                   "that would be listed\n"),
            std::string::npos) << t;
  EXPECT_EQ(text(exact).find("records lost"), std::string::npos);
  const std::string j = json(s);
  EXPECT_NE(j.find(",\"records_lost\":1234,\"incomplete\":[\"kernels\",\"transfers\",\"memory\",\"leaks\",\"insights\"]"),
            std::string::npos) << j;
  EXPECT_EQ(j.find("\"leaks\":"), std::string::npos) << j;
  EXPECT_EQ(json(exact).find("records_lost"), std::string::npos);

  // --py-stack's allocations by Python line: what was never freed is not known.
  SummarySnapshot py = s;
  auto sites = std::make_shared<PySitesPart>();
  PySiteStats& site = sites->sites.emplace_back();
  site.file = "train.py", site.func = "step", site.line = 12;
  site.allocs = 40000, site.alloc_bytes = 40000 * 256;
  py.parts = {sites};
  const std::string py_text = text(py);
  EXPECT_TRUE(std::regex_search(py_text, std::regex(" 40,000 +10,240,000 +\\? +\\? +train\\.py:12 step\n"))) << py_text;
  const std::string py_json = json(py);
  EXPECT_EQ(py_json.find("never_freed"), std::string::npos) << py_json;
  EXPECT_NE(py_json.find("\"py_sites\",\"insights\"]"), std::string::npos) << py_json;

  // Launches and copies counted in BPF stay exact.
  options_.activity_counted = true;
  SummaryReport counted(options_, pipeline_, {});
  const std::string counted_text = text(counted.snapshot(run_, kStart + 2000000000, true, std::nullopt, nullptr, 1234));
  EXPECT_EQ(counted_text.find(note), counted_text.rfind(note)) << "one note, under Device memory: " << counted_text;
}

TEST_F(SummaryGolden, IntervalReportsCoverTheirWindow) {
  SummaryReport report(options_, pipeline_, {});
  first_half();
  const SummarySnapshot first = report.snapshot(run_, kStart + 500000000, false, std::nullopt, nullptr);
  EXPECT_EQ(first.kernels.size(), 1u) << "the launches of the first window";
  second_half();
  const SummarySnapshot second = report.snapshot(run_, kStart + 1000000000, false, std::nullopt, nullptr);
  ASSERT_EQ(second.kernels.size(), 1u) << "only the launch since the first report";
  EXPECT_EQ(second.kernels[0].name, "void ns::reduce<float>(float const*, int)");
  expect_golden("summary_interval.txt", text(first) + text(second));
  expect_golden("summary_interval.json", json(first) + json(second));
}

}  // namespace
