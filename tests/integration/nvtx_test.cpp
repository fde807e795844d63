// End to end (root, real eBPF): --nvtx against tests/fixtures/nvtx_app.c,
// whose ranges around each call are known (see its header comment).
// Skipped without root.
#include <map>
#include <thread>
#include <set>
#include <string>
#include <vector>

#include "harness.h"

namespace {

using namespace cudatrace_test;
using Stack = std::vector<std::string>;

class Nvtx : public NeedsRoot {};

Stack stack_of(const json& j, const char* key = "nvtx") {
  Stack s;
  if (j.contains(key))
    for (const json& m : j[key]) s.push_back(m);
  return s;
}

// cudaMalloc size -> the range stacks of that call.
std::map<std::uint64_t, std::pair<Stack, Stack>> malloc_stacks(const Result& r) {
  std::map<std::uint64_t, std::pair<Stack, Stack>> out;
  for (const json& j : calls(r, "cudaMalloc")) {
    const std::uint64_t size = j["args"]["size"];
    if (size <= 10) out[size] = {stack_of(j), stack_of(j, "nvtx_process")};
  }
  return out;
}

const std::map<std::uint64_t, std::pair<Stack, Stack>> kExpected = {
    {1, {{}, {}}},
    {2, {{"step 1"}, {}}},
    {3, {{"step 1", "forward"}, {}}},
    {4, {{"step 1", "forward"}, {}}},
    {5, {{"step 1", "registered op", "inner default"}, {}}},
    {6, {{"step 1", "inner default"}, {}}},
    {7, {{"step 1"}, {"load data"}}},
    {8, {{}, {"load data"}}},
    {9, {{"worker"}, {"load data"}}},
    {10, {{}, {}}},
};

TEST_F(Nvtx, EveryCallCarriesTheRangesOpenOnItsThread) {
  const Result r = run(tracer() + " --nvtx --json -- " NVTX_APP);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(malloc_stacks(r), kExpected) << r.out;
  // The nested driver calls carry their thread's ranges too.
  std::map<std::uint64_t, Stack> by_size;  // each cudaMalloc's size is its own
  for (const json& j : calls(r, "cudaMalloc")) by_size[j["args"]["size"]] = stack_of(j);
  const auto allocs = calls(r, "cuMemAlloc_v2");
  ASSERT_EQ(allocs.size(), by_size.size());
  for (const json& j : allocs) EXPECT_EQ(stack_of(j), by_size.at(j["args"]["bytesize"])) << j;
  // The launches too, each whole.
  const auto launches = calls(r, "cudaLaunchKernel");
  ASSERT_EQ(launches.size(), 2u);
  for (const json& j : launches) {
    EXPECT_EQ(j["ret"], 0) << j;
    EXPECT_EQ(stack_of(j), (Stack{"step 1", "forward", "aten::linear"}));
  }
  EXPECT_TRUE(calls(r, "cuLaunchKernel").empty());
  // The range calls themselves are records of the nvtx layer; the mark is one.
  const auto marks = calls(r, "nvtxMark");
  ASSERT_EQ(marks.size(), 1u);
  EXPECT_EQ(marks[0]["layer"], "nvtx");
  EXPECT_EQ(marks[0]["args"]["message"], "checkpoint");
  EXPECT_EQ(calls(r, "nvtxRangePush").size(), 6u);
  EXPECT_EQ(calls(r, "nvtxRangePop").size(), 6u);
  EXPECT_EQ(calls(r, "nvtxRangeStart").size(), 1u);
  EXPECT_EQ(calls(r, "nvtxRangeEnd").size(), 1u);
  EXPECT_EQ(end_of(r.lines)["lost"], 0) << r.out;
}

TEST_F(Nvtx, FiltersKeepTheRangeStacks) {
  // -f mem prints only allocations, still with their ranges.
  const Result r = run(tracer() + " --nvtx --json -f mem -- " NVTX_APP);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(malloc_stacks(r), kExpected);
  EXPECT_TRUE(calls(r, "nvtxRangePush").empty());
  // --min-us drops the fast calls in BPF, never the NVTX ones the stacks are
  // built from; the NVTX records themselves are not printed.
  const Result slow = run(tracer() + " --nvtx --json --min-us 1 -- " NVTX_APP);
  ASSERT_EQ(slow.status, 0) << slow.err;
  const auto stacks = malloc_stacks(slow);
  EXPECT_FALSE(stacks.empty()) << slow.out;
  for (const auto& [size, ranges] : stacks) EXPECT_EQ(ranges, kExpected.at(size)) << size;
  for (const json& j : slow.lines) EXPECT_NE(j.value("layer", ""), "nvtx") << j;
}

TEST_F(Nvtx, TextShowsTheInnermostRangeAndTheDepth) {
  const Result r = run(tracer() + " --nvtx -f mem -- " NVTX_APP);
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> suffixes;
  for (const std::string& line : lines_of(r.out)) {
    if (line.find(" cudaMalloc ") == std::string::npos) continue;
    const auto at = line.find(" nvtx[");
    suffixes.push_back(at == std::string::npos ? "-" : line.substr(at + 1));
  }
  const std::vector<std::string> expected = {"-",
                                             "nvtx[1]=\"step 1\"",
                                             "nvtx[2]=\"forward\"",  // the 1 MiB buffer
                                             "nvtx[2]=\"forward\"",
                                             "nvtx[2]=\"forward\"",
                                             "nvtx[3]=\"inner default\"",
                                             "nvtx[2]=\"inner default\"",
                                             "nvtx[1]=\"step 1\"",
                                             "-",
                                             "nvtx[1]=\"worker\"",
                                             "-"};
  EXPECT_EQ(suffixes, expected) << r.out;
}

TEST_F(Nvtx, WithoutTheFlagNothingChanges) {
  const Result r = run(tracer() + " --json -- " NVTX_APP);
  ASSERT_EQ(r.status, 0) << r.err;
  for (const json& j : r.lines) {
    EXPECT_FALSE(j.contains("nvtx")) << j;
    EXPECT_NE(j.value("layer", ""), "nvtx") << j;
  }
  EXPECT_EQ(calls(r, "cudaMalloc").size(), 11u);
}

TEST_F(Nvtx, TheCommandKeepsItsEnvironment) {
  // Only NVTX_INJECTION64_PATH is added; it names a file that is gone afterwards.
  const std::string env = temp_path("env");
  const Result r = run("NCCL_NVLS_ENABLE=0 " + tracer() + " --nvtx -- /bin/sh -c 'env > " + env + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string out = read_file(env);
  std::remove(env.c_str());
  std::string injection;
  for (const std::string& line : lines_of(out))
    if (line.rfind("NVTX_INJECTION64_PATH=", 0) == 0) injection = line.substr(22);
  EXPECT_NE(("\n" + out).find("\nNCCL_NVLS_ENABLE=0\n"), std::string::npos) << out;
  ASSERT_FALSE(injection.empty()) << out;
  EXPECT_EQ(injection.substr(injection.rfind('/')), "/libcudatrace_nvtx.so");
  EXPECT_NE(access(injection.c_str(), F_OK), 0) << injection << " was left behind";
}

// -p: only a process started with the injection library has ranges, and only
// those opened after the attach are known.
TEST_F(Nvtx, AttachSeesRangesOnlyWithTheInjectionFromTheStart) {
  const std::string lib = temp_path("libcudatrace_nvtx.so");
  std::remove(lib.c_str());
  ASSERT_EQ(run(tracer() + " --write-nvtx-library " + lib).status, 0);
  for (const bool injected : {true, false}) {
    SCOPED_TRACE(injected ? "started with NVTX_INJECTION64_PATH" : "started without");
    int go_pipe[2];
    ASSERT_EQ(pipe(go_pipe), 0);
    const pid_t app = fork();
    if (app == 0) {
      dup2(go_pipe[0], STDIN_FILENO);
      close(go_pipe[1]);
      if (injected) setenv("NVTX_INJECTION64_PATH", lib.c_str(), 1);
      execl(NVTX_APP, NVTX_APP, "wait", nullptr);
      _exit(127);
    }
    close(go_pipe[0]);
    std::thread go([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      EXPECT_EQ(write(go_pipe[1], "go\n", 3), 3);
      close(go_pipe[1]);
    });
    const Result r = run(tracer() + " --nvtx --json -p " + std::to_string(app));
    go.join();
    int status = 0;
    waitpid(app, &status, 0);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(status, 0);
    std::map<std::uint64_t, Stack> stacks;
    for (const json& j : calls(r, "cudaMalloc")) stacks[j["args"]["size"]] = stack_of(j);
    const Stack request = injected ? Stack{"request"} : Stack{};
    EXPECT_EQ(stacks, (std::map<std::uint64_t, Stack>{{11, {}}, {12, request}})) << r.out;
    const bool warned = r.err.find("started without NVTX_INJECTION64_PATH") != std::string::npos;
    EXPECT_EQ(warned, !injected) << r.err;
  }
  std::remove(lib.c_str());
}

TEST_F(Nvtx, SummaryByRange) {
  const Result r = run(tracer() + " --summary --by-range --json -- " NVTX_APP);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto tables = records(r.lines, "nvtx_ranges");
  ASSERT_EQ(tables.size(), 1u) << r.out;
  std::map<std::string, json> by_name;
  for (const json& row : tables[0]["ranges"]) by_name[row["name"]] = row;
  // Outermost calls only: cudaMalloc's nested cuMemAlloc is part of it.
  EXPECT_EQ(by_name["aten::linear"]["launches"], 2);
  EXPECT_EQ(by_name["aten::linear"]["calls"], 2);
  EXPECT_EQ(by_name["forward"]["calls"], 4);  // cudaMalloc x3, cudaMemcpy
  EXPECT_EQ(by_name["forward"]["bytes"], 1024 * 1024);
  EXPECT_EQ(by_name["forward"]["launches"], 0);
  EXPECT_EQ(by_name["forward"]["total_launches"], 2);
  EXPECT_EQ(by_name["step 1"]["calls"], 2);        // sizes 2 and 7
  EXPECT_EQ(by_name["step 1"]["total_calls"], 10);  // and everything inside
  EXPECT_EQ(by_name["inner default"]["calls"], 2);
  EXPECT_EQ(by_name["registered op"]["total_calls"], 1);
  EXPECT_EQ(by_name["worker"]["calls"], 1);
  EXPECT_EQ(tables[0]["outside"]["calls"], 3);  // sizes 1, 8, 10
  for (const auto& [name, row] : by_name) EXPECT_GE(row["total_api_ns"], row["api_ns"]) << name;
  // The text table.
  const Result text = run(tracer() + " --summary --by-range -- " NVTX_APP);
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("CUDA work per NVTX range"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("aten::linear"), std::string::npos) << text.out;
}

TEST_F(Nvtx, TimelineHasTheRangesAsSlices) {
  const std::string trace = temp_path("nvtx.json");
  const Result r = run(tracer() + " --nvtx --perfetto " + trace + " -- " NVTX_APP);
  ASSERT_EQ(r.status, 0) << r.err;
  const json doc = json::parse(read_file(trace));
  std::remove(trace.c_str());
  std::map<std::string, json> slices;
  std::set<std::string> async;
  for (const json& e : doc["traceEvents"]) {
    if (e.value("cat", "") != "nvtx") continue;
    if (e["ph"] == "X") slices[e["name"]] = e;
    if (e["ph"] == "b" || e["ph"] == "e") async.insert(e["name"].get<std::string>() + ":" + e["ph"].get<std::string>());
  }
  for (const char* name : {"step 1", "forward", "aten::linear", "registered op", "inner default", "worker"})
    EXPECT_TRUE(slices.count(name)) << name;
  EXPECT_EQ(async, (std::set<std::string>{"load data:b", "load data:e"}));
  // Nested ranges lie inside their parents.
  const json& step = slices["step 1"];
  const json& fwd = slices["forward"];
  EXPECT_GE(fwd["ts"].get<double>(), step["ts"].get<double>());
  EXPECT_LE(fwd["ts"].get<double>() + fwd["dur"].get<double>(), step["ts"].get<double>() + step["dur"].get<double>());
  EXPECT_NE(slices["worker"]["tid"], step["tid"]);
}

}  // namespace
