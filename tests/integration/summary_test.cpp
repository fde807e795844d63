// End to end: --summary, --hist, --insights and --stack with real eBPF, as
// root, against the fake CUDA runtime (tests/fixtures: fake_app, insights_app).
#include <algorithm>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "harness.h"

namespace {

using namespace cudatrace_test;

json final_summary(const Result& r) {
  for (const json& j : records(r.lines, "summary"))
    if (j["final"] == true) return j;
  ADD_FAILURE() << "no final summary in:\n" << r.out << r.err;
  return json::object();
}

std::map<std::string, std::pair<long, long>> api_counts(const json& summary) {
  std::map<std::string, std::pair<long, long>> out;  // calls, errors
  for (const json& a : summary["apis"]) out[a["name"]] = {a["calls"], a["errors"]};
  return out;
}

std::vector<std::string> rules(const json& summary) {
  std::vector<std::string> out;
  for (const json& i : summary["insights"]) out.push_back(i["rule"]);
  return out;
}

bool fired(const json& summary, const std::string& rule) {
  const auto r = rules(summary);
  return std::find(r.begin(), r.end(), rule) != r.end();
}

std::string insights_app(const std::string& args, const std::string& env = "") {
  return (env.empty() ? "" : "env " + env + " ") + tracer() + " --summary --json -- " INSIGHTS_APP " " + args;
}

class Summary : public NeedsRoot {};

TEST_F(Summary, CountsAreTheProgramsCalls) {
  const Result r = run(tracer() + " --summary --json --layer runtime -- " FAKE_APP " basic");
  ASSERT_EQ(r.status, 0) << r.err;
  const json s = final_summary(r);
  // fake_app basic, as documented in tests/fixtures/fake_app.c.
  const std::map<std::string, std::pair<long, long>> expected = {
      {"cudaGetDeviceCount", {1, 0}}, {"cudaSetDevice", {2, 1}},    {"cudaMalloc", {2, 1}},
      {"cudaMemcpy", {2, 1}},         {"cudaStreamCreate", {1, 0}}, {"cudaLaunchKernel", {1, 0}},
      {"cudaMemcpyAsync", {1, 0}},    {"cudaStreamSynchronize", {1, 0}}, {"cudaEventCreate", {2, 0}},
      {"cudaEventRecord", {2, 0}},    {"cudaEventElapsedTime", {1, 0}},  {"cudaFree", {1, 0}}};
  EXPECT_EQ(api_counts(s), expected);
  for (const json& a : s["apis"]) {
    EXPECT_LE(a["min_ns"].get<double>(), a["med_ns"].get<double>()) << a;
    EXPECT_LE(a["med_ns"].get<double>(), a["max_ns"].get<double>()) << a;
  }
  ASSERT_EQ(s["kernels"].size(), 1u);
  EXPECT_EQ(s["kernels"][0]["name"], "kernel_stub");
  EXPECT_EQ(s["kernels"][0]["shapes"][0]["grid"], json({4, 2, 1}));
  EXPECT_TRUE(s["leaks"].empty()) << s["leaks"];
  EXPECT_EQ(s["memory"][0]["peak_bytes"], 1048576);
  EXPECT_EQ(calls(r).size(), 0u) << "no per-call records in summary mode";
  EXPECT_EQ(records(r.lines, "end")[0]["calls"], 17);
}

// Threads, every asynchronous operation, and a failed launch: each counted
// with its status, failures as errors.
TEST_F(Summary, PerApiCountsEqualAFullTraceOfTheSameProgram) {
  for (const std::string app :
       {" -- " FAKE_APP " threads 4 50", " -- " FAKE_APP " async", " -- " FAKE_APP " bad-launch"}) {
    SCOPED_TRACE(app);
    const Result trace = run(tracer() + " --json" + app);
    const Result summary = run(tracer() + " --summary --json" + app);
    ASSERT_EQ(trace.status, 0) << trace.err;
    ASSERT_EQ(summary.status, 0) << summary.err;
    std::map<std::string, std::pair<long, long>> traced;
    for (const json& c : calls(trace)) {
      auto& n = traced[c["api"]];
      ++n.first;
      n.second += c.contains("ret") && c["ret"] != 0 && c["ret"] != 600;
    }
    EXPECT_EQ(api_counts(final_summary(summary)), traced);
  }
  const Result threads = run(tracer() + " --summary --json -- " FAKE_APP " threads 4 50");
  EXPECT_EQ(api_counts(final_summary(threads)).at("cuMemAlloc_v2").first, 200);
  const Result async = run(tracer() + " --summary --json -- " FAKE_APP " async");
  EXPECT_EQ(api_counts(final_summary(async)).at("cudaLaunchKernel").first, 1);
  EXPECT_EQ(api_counts(final_summary(async)).at("cudaMemsetAsync").first, 1);
  EXPECT_EQ(api_counts(final_summary(async)).count("cuLaunchKernel"), 0u);  // part of the runtime's launch
  const Result bad = run(tracer() + " --summary --json -- " FAKE_APP " bad-launch");
  EXPECT_EQ(api_counts(final_summary(bad)).at("cudaLaunchKernel"), std::make_pair(2L, 1L));
}

// What two runs of a deterministic program have in common in a final
// summary: everything but times, process ids and code addresses.
json comparable(json s) {
  for (json& a : s["apis"])
    for (const char* timing : {"total_ns", "time_pct", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns", "p99_ns"})
      a.erase(timing);
  // Largest total time first: an order that varies.
  std::sort(s["apis"].begin(), s["apis"].end(), [](const json& a, const json& b) { return a["name"] < b["name"]; });
  for (json& t : s["transfers"]) t.erase("sync_ns"), t.erase("sync_gbps");
  for (json& m : s["memory"]) m.erase("pid"), m.erase("peak_ts_ns");
  for (json& l : s["leaks"]) l.erase("pid"), l.erase("ts_ns"), l.erase("age_ns"), l.erase("caller");
  for (const char* varies : {"ts_ns", "covered_ns", "insights"}) s.erase(varies);
  return s;
}

// A text report's section ("CUDA kernel launches:") up to the next blank line after its table.
std::string section(const std::string& text, const std::string& title) {
  const auto at = text.find("\n" + title + "\n\n");
  if (at == std::string::npos) return "<no " + title + ">";
  return text.substr(at, text.find("\n\n", at + title.size() + 3) - at);
}

// Record once with --json, report later: the tables of a live --summary of the same program.
TEST_F(Summary, OfflineReportOfAJsonTraceGivesTheLiveTables) {
  const std::string trace = temp_path("offline.jsonl");
  // Single-threaded programs: the peak of memory live at once is the same in every run.
  // "mixed": launches and copies counted in BPF, each unlike the call before.
  for (const std::string app : {FAKE_APP " basic", STREAMS_APP " edges", INSIGHTS_APP " leak",
                                INSIGHTS_APP " copies pageable 20 4096", INSIGHTS_APP " mixed 50"}) {
    SCOPED_TRACE(app);
    const Result recorded = run(tracer() + " --json -o " + trace + " -- " + app);
    ASSERT_EQ(recorded.status, 0) << recorded.err;
    const Result live = run(tracer() + " --summary --json -- " + app);
    const Result offline = run(tracer() + " report --summary --json " + trace);
    ASSERT_EQ(live.status, 0) << live.err;
    ASSERT_EQ(offline.status, 0) << offline.err;
    const json live_summary = final_summary(live), offline_summary = final_summary(offline);
    ASSERT_FALSE(live_summary["apis"].empty());
    EXPECT_EQ(comparable(offline_summary), comparable(live_summary));
    EXPECT_EQ(records(offline.lines, "end")[0]["calls"], records(live.lines, "end")[0]["calls"]);

    // The text tables without times: the kernel launches, the leaks' count.
    const Result live_text = run(tracer() + " --summary -- " + app);
    const Result offline_text = run(tracer() + " report --summary " + trace);
    ASSERT_EQ(offline_text.status, 0) << offline_text.err;
    EXPECT_EQ(section(live_text.out, "CUDA kernel launches:").find("<no "), std::string::npos) << live_text.out;
    EXPECT_EQ(section(offline_text.out, "CUDA kernel launches:"), section(live_text.out, "CUDA kernel launches:"));
    const auto leak_line = [](const std::string& text) {
      for (const std::string& line : lines_of(text))
        if (line.rfind("Allocations never freed: ", 0) == 0) return line;
      return std::string("<none>");
    };
    EXPECT_NE(leak_line(live_text.out), "<none>") << live_text.out;
    EXPECT_EQ(leak_line(offline_text.out), leak_line(live_text.out));
  }
  std::remove(trace.c_str());
}

TEST_F(Summary, LeakListedWithSizeAgeAndAllocatingStack) {
  const Result r = run(tracer() + " --summary --stack --json -- " INSIGHTS_APP " leak");
  ASSERT_EQ(r.status, 0) << r.err;
  const json s = final_summary(r);
  ASSERT_EQ(s["leaks"].size(), 1u) << s["leaks"];
  const json& leak = s["leaks"][0];
  EXPECT_EQ(leak["bytes"], 12345);
  EXPECT_EQ(leak["api"], "cudaMalloc");
  EXPECT_EQ(leak["managed"], false);
  EXPECT_GT(leak["age_ns"].get<long>(), 0);
  ASSERT_TRUE(leak.contains("stack")) << leak;
  std::vector<std::string> functions;
  for (const json& f : leak["stack"])
    if (f["function"].is_string()) functions.push_back(f["function"]);
  ASSERT_GE(functions.size(), 2u) << leak["stack"];
  EXPECT_EQ(functions[0], "leaky_allocation");
  EXPECT_EQ(functions[1], "main");
  EXPECT_EQ(s["memory"][0]["live_bytes"], 12345);
  EXPECT_EQ(s["memory"][0]["peak_bytes"], 1048576);

  const Result text = run(tracer() + " --summary --stack -- " INSIGHTS_APP " leak");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("Allocations never freed: 1 (12,345 bytes)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("#0  "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("leaky_allocation+0x"), std::string::npos) << text.out;
}

TEST_F(Summary, StackInTraceMode) {
  const Result r = run(tracer() + " --stack --json -f mem -- " INSIGHTS_APP " leak");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto calls = records(r.lines, "call");
  ASSERT_FALSE(calls.empty());
  for (const json& c : calls) {
    ASSERT_TRUE(c.contains("stack")) << c;
    if (c["depth"] == 0) EXPECT_EQ(c["stack"][0]["function"], "leaky_allocation") << c;
  }
  const Result text = run(tracer() + " --stack -f mem -- " INSIGHTS_APP " leak");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("cudaMalloc"), std::string::npos);
  EXPECT_NE(text.out.find("    #1  "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("main+0x"), std::string::npos) << text.out;
}

TEST_F(Summary, LaunchBound) {
  const Result pos = run(insights_app("launch-loop 20000 100", "FAKE_CUDA_SYNC_US=0"));
  const Result neg = run(insights_app("launch-loop 20000 100", "FAKE_CUDA_SYNC_US=2000"));
  ASSERT_EQ(pos.status, 0) << pos.err;
  ASSERT_EQ(neg.status, 0) << neg.err;
  EXPECT_TRUE(fired(final_summary(pos), "launch-bound")) << final_summary(pos)["insights"];
  EXPECT_FALSE(fired(final_summary(neg), "launch-bound")) << final_summary(neg)["insights"];
  // Counted under the runtime's name, the call the program made.
  EXPECT_EQ(api_counts(final_summary(pos))["cudaLaunchKernel"].first, 20000);
  EXPECT_EQ(api_counts(final_summary(pos)).count("cuLaunchKernel"), 0u);
  EXPECT_EQ(api_counts(final_summary(pos))["cudaStreamSynchronize"].first, 200);
}

TEST_F(Summary, SyncStorm) {
  const Result pos = run(insights_app("launch-loop 3000 1", "FAKE_CUDA_SYNC_US=0"));
  const Result neg = run(insights_app("launch-loop 3000 100", "FAKE_CUDA_SYNC_US=0"));
  ASSERT_EQ(pos.status, 0) << pos.err;
  ASSERT_EQ(neg.status, 0) << neg.err;
  EXPECT_TRUE(fired(final_summary(pos), "sync-storm")) << final_summary(pos)["insights"];
  EXPECT_FALSE(fired(final_summary(neg), "sync-storm")) << final_summary(neg)["insights"];
}

TEST_F(Summary, AllocationChurn) {
  const Result pos = run(insights_app("churn 200"));
  const Result neg = run(insights_app("steady 200"));
  ASSERT_EQ(pos.status, 0) << pos.err;
  ASSERT_EQ(neg.status, 0) << neg.err;
  const json s = final_summary(pos);
  EXPECT_TRUE(fired(s, "allocation-churn")) << s["insights"];
  EXPECT_FALSE(fired(final_summary(neg), "allocation-churn")) << final_summary(neg)["insights"];
  for (const json& i : s["insights"])
    if (i["rule"] == "allocation-churn") EXPECT_NE(i["message"].get<std::string>().find("churn+0x"), std::string::npos) << i;
}

TEST_F(Summary, PageableCopies) {
  const Result pos = run(insights_app("copies pageable 20 1048576"));
  const Result neg = run(insights_app("copies pinned 20 1048576"));
  ASSERT_EQ(pos.status, 0) << pos.err;
  ASSERT_EQ(neg.status, 0) << neg.err;
  EXPECT_TRUE(fired(final_summary(pos), "pageable-copies")) << final_summary(pos)["insights"];
  EXPECT_FALSE(fired(final_summary(neg), "pageable-copies")) << final_summary(neg)["insights"];
  const json s = final_summary(pos);
  const json& t = s["transfers"][0];
  EXPECT_EQ(t["direction"], "HtoD");
  EXPECT_EQ(t["count"], 20);
  EXPECT_EQ(t["bytes"], 20 * 1048576);
  EXPECT_EQ(t["pageable"], 20);
}

TEST_F(Summary, TinyTransfers) {
  const Result pos = run(insights_app("copies pinned 200 64"));
  const Result neg = run(insights_app("copies pinned 200 1048576"));
  ASSERT_EQ(pos.status, 0) << pos.err;
  ASSERT_EQ(neg.status, 0) << neg.err;
  EXPECT_TRUE(fired(final_summary(pos), "tiny-transfers")) << final_summary(pos)["insights"];
  EXPECT_FALSE(fired(final_summary(neg), "tiny-transfers")) << final_summary(neg)["insights"];
}

TEST_F(Summary, LaunchesAndCopiesAreCountedInBpfWithoutRecords) {
  for (const std::string& args : {std::string("launch-loop 1000 1"), std::string("copies pageable 500 1024")}) {
    const Result r = run(tracer() + " --summary --json -v -- " INSIGHTS_APP " " + args);
    ASSERT_EQ(r.status, 0) << r.err;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.err, m, std::regex("cudatrace: read ([0-9]+) call records"))) << r.err;
    // Kernel registration, stream creation, allocations: not one record per launch or copy.
    EXPECT_LT(std::stol(m[1]), 50) << args << ": " << r.err;
    const json s = final_summary(r);
    long launches = 0, copies = 0;
    for (const json& k : s["kernels"]) launches += k["launches"].get<long>();
    for (const json& t : s["transfers"]) copies += t["count"].get<long>();
    EXPECT_EQ(launches + copies, 1000 * (args[0] == 'l') + 500 * (args[0] == 'c')) << s;
  }
}

// More keys than the activity map holds (16,384): the launches it has no
// room for come as records, and every launch is counted once.
TEST_F(Summary, LaunchesBeyondAFullActivityMapAreCountedFromTheirRecords) {
  const long launches = 20000;
  const Result r = run(tracer() + " --summary --json -v -- " INSIGHTS_APP " shapes " + std::to_string(launches));
  ASSERT_EQ(r.status, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.err, m, std::regex("cudatrace: ([0-9]+) launches and copies were sent as records: the BPF activity table "
                           "\\(([0-9]+) entries\\) was full")))
      << r.err;
  // One thread: the first launches fill the map, one key each, and the rest come as records.
  EXPECT_EQ(std::stol(m[1]), launches - std::stol(m[2])) << r.err;
  const json s = final_summary(r);
  long counted = 0;
  for (const json& k : s["kernels"]) counted += k["launches"].get<long>();
  EXPECT_EQ(counted, launches);
}

TEST_F(Summary, IntervalReportsThenStopAfterCount) {
  // About 2 s: 1000 synchronisations of 2 ms.
  const Result r = run(tracer() + " --summary --json -i 1 -- " INSIGHTS_APP " launch-loop 1000 1");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto reports = records(r.lines, "summary");
  ASSERT_GE(reports.size(), 2u) << r.out;
  long interval_launches = 0, interval_kernel_launches = 0;
  auto kernel_launches = [](const json& s) {
    long n = 0;
    for (const json& k : s["kernels"]) n += k["launches"].get<long>();
    return n;
  };
  for (const json& s : reports) {
    if (s["final"] == true) continue;
    interval_launches += api_counts(s)["cudaLaunchKernel"].first;
    interval_kernel_launches += kernel_launches(s);
    // What tracing has cost so far.
    ASSERT_EQ(s["overhead"]["processes"].size(), 1u) << s;
    EXPECT_GT(s["overhead"]["processes"][0]["entry_hits"].get<long>(), 0) << s;
  }
  EXPECT_LE(interval_launches, 1000);
  EXPECT_LE(interval_kernel_launches, 1000);
  EXPECT_EQ(api_counts(reports.back())["cudaLaunchKernel"].first, 1000);
  // Counted in BPF, read at every report, all there at the end.
  EXPECT_EQ(kernel_launches(reports.back()), 1000);

  const Result counted = run(tracer() + " --summary --json -i 1 -c 1 -- " INSIGHTS_APP " launch-loop 3000 1");
  ASSERT_EQ(counted.status, 0) << counted.err;
  const auto two = records(counted.lines, "summary");
  ASSERT_EQ(two.size(), 2u) << counted.out;
  EXPECT_EQ(two[0]["final"], false);
  EXPECT_EQ(two[1]["final"], true);
}

TEST_F(Summary, HistogramsAndTextTables) {
  const Result r = run(tracer() + " --summary --hist -- " FAKE_APP " basic");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* want : {"CUDA API summary:", "Time (%)  Total Time (ns)  Num Calls", "CUDA kernel launches:",
                           "kernel_stub", "CUDA transfers:", "Device memory:", "Allocations never freed: 0",
                           "Insights:", "API = cudaStreamSynchronize", "nsecs", " : 1        |****"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  EXPECT_EQ(r.out.find("TIME(s)"), std::string::npos) << "no trace header in summary mode";
}

// cudaMemGetInfo's free and total (issue 28): the memory report shows what the program last asked.
TEST_F(Summary, FreeAndTotalMemoryTheProgramAskedForReachTheMemoryReport) {
  const Result text = run(tracer() + " --summary -- " STREAMS_APP " meminfo");
  ASSERT_EQ(text.status, 0) << text.err;
  const auto at = text.out.find("Free device memory, as the program last asked (cudaMemGetInfo):");
  ASSERT_NE(at, std::string::npos) << text.out;
  EXPECT_NE(text.out.find("3,221,225,472", at), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("8,589,934,592", at), std::string::npos) << text.out;
  const Result r = run(tracer() + " --summary --json -- " STREAMS_APP " meminfo");
  ASSERT_EQ(r.status, 0) << r.err;
  const json summary = final_summary(r);
  ASSERT_EQ(summary["memory"].size(), 1u) << summary;
  EXPECT_EQ(summary["memory"][0]["reported_free_bytes"], 3ull << 30);
  EXPECT_EQ(summary["memory"][0]["reported_total_bytes"], 8ull << 30);
  EXPECT_EQ(summary["memory"][0]["allocs"], 1);
  // A program that never asks gets no such table.
  const Result basic = run(tracer() + " --summary -- " FAKE_APP " basic");
  EXPECT_EQ(basic.out.find("Free device memory"), std::string::npos) << basic.out;
}

TEST_F(Summary, OptionErrors) {
  for (const std::string& args : {"-i 1 -- true", "--summary -c 2 -- true", "--summary --errors -- true"}) {
    const Result r = run(tracer() + " " + args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
  }
}

}  // namespace
