// End to end (root, real eBPF): the probe plan. Every call is recorded whole,
// with its latency and status (issue 35): an asynchronous operation (launch,
// async copy and memset, event record, stream wait) under the runtime name the
// program called, the driver call it makes part of its record; --every-layer
// records that driver call too, nested. Where the kernel has uprobe sessions
// such a driver call's return is not probed. Probes are placed past each kind
// of prologue (tests/fixtures/prologues.S) and still decode exactly; -p names
// kernels looked up before it attached by their runtime launch's host stub.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

namespace {

using namespace cudatrace_test;

class ProbePlan : public NeedsRoot {};

// The calls of one run by API, in order.
std::map<std::string, std::vector<json>> by_api(const Result& r) {
  std::map<std::string, std::vector<json>> out;
  for (const json& c : calls(r)) out[c["api"]].push_back(c);
  return out;
}

std::map<std::string, std::size_t> counts(const Result& r) {
  std::map<std::string, std::size_t> out;
  for (const json& c : calls(r)) ++out[c["api"]];
  return out;
}

// fake_app async (tests/fixtures/fake_app.c): the driver call that makes each
// runtime operation, in the order the program makes them.
const std::vector<std::pair<std::string, std::string>> kAsyncOps = {
    {"cudaLaunchKernel", "cuLaunchKernel"},
    {"cudaLaunchKernel_ptsz", "cuLaunchKernel_ptsz"},
    {"cudaLaunchKernelExC", "cuLaunchKernelEx"},
    {"cudaLaunchCooperativeKernel", "cuLaunchCooperativeKernel"},
    {"cudaGraphLaunch", "cuGraphLaunch"},
    {"cudaMemcpyAsync", "cuMemcpyHtoDAsync_v2"},
    {"cudaMemcpyAsync", "cuMemcpyDtoHAsync_v2"},
    {"cudaMemcpyAsync", "cuMemcpyDtoDAsync_v2"},
    {"cudaMemcpyAsync", "cuMemcpyAsync"},
    {"cudaMemcpyAsync_ptsz", "cuMemcpyHtoDAsync_v2_ptsz"},
    {"cudaMemsetAsync", "cuMemsetD8Async"},
    {"cudaEventRecord", "cuEventRecord"},
    {"cudaEventRecordWithFlags", "cuEventRecordWithFlags"},
    {"cudaStreamWaitEvent", "cuStreamWaitEvent"},
};
// Its other calls: cudaMalloc nests cuMemAlloc_v2 (twice, recorded: its
// out-param is read); the 2D and peer copies make no driver call the table has.
const std::map<std::string, std::size_t> kAsyncOthers = {
    {"cudaStreamCreate", 1}, {"cudaEventCreate", 1},     {"cudaMalloc", 2},          {"cuMemAlloc_v2", 2},
    {"cudaMemcpy2DAsync", 1}, {"cudaMemcpyPeerAsync", 1}, {"cudaStreamSynchronize", 1}};

// The runtime records of fake_app async: the program's arguments.
void expect_async_runtime_args(const std::map<std::string, std::vector<json>>& c) {
  const json& launch = c.at("cudaLaunchKernel")[0];
  EXPECT_EQ(launch["kernel"], "kernel_stub") << launch;
  EXPECT_EQ(launch["args"]["grid"], json({4, 2, 1}));
  EXPECT_EQ(launch["args"]["block"], json({128, 1, 1}));
  EXPECT_EQ(launch["args"]["sharedMem"], 64);  // stack arguments at the runtime's entry
  EXPECT_EQ(launch["args"]["stream"], "0x5010");
  const json& ptsz = c.at("cudaLaunchKernel_ptsz")[0];
  EXPECT_EQ(ptsz["kernel"], "kernel_stub");
  EXPECT_EQ(ptsz["args"]["grid"], json({2, 1, 1}));
  EXPECT_EQ(ptsz["handle_ids"]["stream"], "per-thread");
  const json& ex = c.at("cudaLaunchKernelExC")[0];
  EXPECT_EQ(ex["kernel"], "kernel_stub") << ex;
  EXPECT_EQ(ex["args"]["grid"], json({8, 1, 1})) << ex;  // from the launch configuration
  EXPECT_EQ(ex["args"]["block"], json({256, 1, 1})) << ex;
  EXPECT_EQ(ex["args"]["sharedMem"], 128) << ex;
  EXPECT_EQ(ex["args"]["stream"], "0x5010") << ex;
  EXPECT_EQ(c.at("cudaLaunchCooperativeKernel")[0]["args"]["grid"], json({16, 1, 1}));
  EXPECT_EQ(c.at("cudaGraphLaunch")[0]["args"]["graphExec"], "0x6a00");
  const auto& copies = c.at("cudaMemcpyAsync");
  ASSERT_EQ(copies.size(), 4u);
  EXPECT_EQ(copies[0]["args"]["kind"], "cudaMemcpyHostToDevice");
  EXPECT_EQ(copies[0]["args"]["count"], 4096);
  EXPECT_EQ(copies[1]["args"]["kind"], "cudaMemcpyDeviceToHost");
  EXPECT_EQ(copies[2]["args"]["kind"], "cudaMemcpyDeviceToDevice");
  EXPECT_EQ(copies[3]["args"]["kind"], "cudaMemcpyDefault");
  EXPECT_EQ(c.at("cudaMemcpyAsync_ptsz")[0]["args"]["count"], 256);
  EXPECT_EQ(c.at("cudaMemcpyAsync_ptsz")[0]["handle_ids"]["stream"], "per-thread");
  EXPECT_EQ(c.at("cudaMemsetAsync")[0]["args"]["value"], 0xab);
  EXPECT_EQ(c.at("cudaEventRecord")[0]["args"], json({{"event", "0xe010"}, {"stream", "0x5010"}}));
  EXPECT_EQ(c.at("cudaEventRecordWithFlags")[0]["args"]["flags"], "0x1");
  EXPECT_EQ(c.at("cudaStreamWaitEvent")[0]["args"]["event"], "0xe010");
}

// The driver records of fake_app async (--every-layer) carry the runtime call's arguments.
void expect_async_driver_args(const std::map<std::string, std::vector<json>>& c) {
  const json& launch = c.at("cuLaunchKernel")[0];
  EXPECT_EQ(launch["kernel"], "kernel_stub") << launch;
  EXPECT_EQ(launch["args"]["grid"], json({4, 2, 1}));
  EXPECT_EQ(launch["args"]["block"], json({128, 1, 1}));
  EXPECT_EQ(launch["args"]["sharedMemBytes"], 64);  // stack arguments at the driver's entry
  EXPECT_EQ(launch["args"]["hStream"], "0x5010");
  const json& ptsz = c.at("cuLaunchKernel_ptsz")[0];
  EXPECT_EQ(ptsz["kernel"], "kernel_stub");
  EXPECT_EQ(ptsz["args"]["grid"], json({2, 1, 1}));
  EXPECT_EQ(ptsz["handle_ids"]["hStream"], "per-thread");
  const json& ex = c.at("cuLaunchKernelEx")[0];
  EXPECT_EQ(ex["kernel"], "kernel_stub") << ex;
  EXPECT_EQ(ex["args"]["grid"], json({8, 1, 1})) << ex;  // from the launch configuration
  EXPECT_EQ(ex["args"]["block"], json({256, 1, 1})) << ex;
  EXPECT_EQ(ex["args"]["sharedMemBytes"], 128) << ex;
  EXPECT_EQ(ex["args"]["hStream"], "0x5010") << ex;
  const json& coop = c.at("cuLaunchCooperativeKernel")[0];
  EXPECT_EQ(coop["kernel"], "kernel_stub");
  EXPECT_EQ(coop["args"]["grid"], json({16, 1, 1}));
  EXPECT_EQ(c.at("cuGraphLaunch")[0]["args"]["hGraphExec"], "0x6a00");
  const json& htod = c.at("cuMemcpyHtoDAsync_v2")[0]["args"];
  EXPECT_EQ(htod["dstDevice"], "0xd000001000");
  EXPECT_EQ(htod["ByteCount"], 4096);
  EXPECT_EQ(htod["hStream"], "0x5010");
  EXPECT_EQ(c.at("cuMemcpyDtoHAsync_v2")[0]["args"]["ByteCount"], 2048);
  EXPECT_EQ(c.at("cuMemcpyDtoHAsync_v2")[0]["args"]["srcDevice"], "0xd000001000");
  EXPECT_EQ(c.at("cuMemcpyDtoDAsync_v2")[0]["args"]["dstDevice"], "0xd000002000");
  EXPECT_EQ(c.at("cuMemcpyDtoDAsync_v2")[0]["args"]["ByteCount"], 1024);
  EXPECT_EQ(c.at("cuMemcpyAsync")[0]["args"]["ByteCount"], 512);
  EXPECT_EQ(c.at("cuMemcpyHtoDAsync_v2_ptsz")[0]["args"]["ByteCount"], 256);
  EXPECT_EQ(c.at("cuMemcpyHtoDAsync_v2_ptsz")[0]["handle_ids"]["hStream"], "per-thread");
  const json& memset = c.at("cuMemsetD8Async")[0]["args"];
  EXPECT_EQ(memset["dstDevice"], "0xd000001000");
  EXPECT_EQ(memset["uc"], 0xab);
  EXPECT_EQ(memset["N"], 4096);
  EXPECT_EQ(c.at("cuEventRecord")[0]["args"], json({{"hEvent", "0xe010"}, {"hStream", "0x5010"}}));
  EXPECT_EQ(c.at("cuEventRecordWithFlags")[0]["args"]["flags"], "0x1");
  EXPECT_EQ(c.at("cuStreamWaitEvent")[0]["args"]["hEvent"], "0xe010");
  EXPECT_EQ(c.at("cuStreamWaitEvent")[0]["args"]["hStream"], "0x5010");
}

bool is_async(const std::string& api) {
  for (const auto& [runtime, driver] : kAsyncOps)
    if (api == runtime || api == driver) return true;
  return api == "cudaMemcpy2DAsync" || api == "cudaMemcpyPeerAsync";
}

// Every record whole: its latency and its status.
void expect_whole(const json& c) {
  EXPECT_FALSE(c.contains("entry_only")) << c;
  EXPECT_TRUE(c.contains("dur_ns")) << c;
  EXPECT_EQ(c["ret"], 0) << c;
}

// ---- The default: each operation whole, under the name the program called ----------

TEST_F(ProbePlan, EachAsyncOperationIsRecordedWholeUnderItsRuntimeName) {
  for (const char* env : {"", "CUDATRACE_NO_UPROBE_SESSIONS=1 "}) {
    SCOPED_TRACE(env);
    const Result r = run(env + tracer() + " -v --json -- " FAKE_APP " async");
    ASSERT_EQ(r.status, 0) << r.err;
    std::map<std::string, std::size_t> expected = kAsyncOthers;
    for (const auto& [runtime, driver] : kAsyncOps) ++expected[runtime];
    EXPECT_EQ(counts(r), expected) << r.out;  // the driver calls are part of the runtime's records
    for (const json& c : calls(r)) {
      expect_whole(c);
      if (is_async(c["api"])) {
        EXPECT_EQ(c["layer"], "runtime") << c;
        EXPECT_EQ(c["depth"], 0) << c;
      }
    }
    expect_async_runtime_args(by_api(r));
    const json& end = end_of(r.lines);
    EXPECT_EQ(end["calls"], calls(r).size());
    EXPECT_EQ(end["lost"], 0);
    // Two traps a call: no code but the runtime calls the driver's
    // launches, copies, event records and stream waits, which are then not
    // probed (Probes::defer_driver); with perf-event uprobes they are, and
    // each traps at its entry and its return.
    ASSERT_EQ(end["overhead"]["processes"].size(), 1u) << end;
    const json& hits = end["overhead"]["processes"][0];
    const std::size_t nested = perf_attach() ? kAsyncOps.size() : 0;
    EXPECT_EQ(hits["entry_hits"], calls(r).size() + nested) << hits;
    EXPECT_EQ(hits["return_hits"], calls(r).size() + nested) << hits;
  }

  // Text: a latency and a status on every line.
  const Result text = run(tracer() + " -- " FAKE_APP " async");
  ASSERT_EQ(text.status, 0) << text.err;
  std::size_t ops = 0;
  for (const std::string& line : lines_of(text.out)) {
    std::smatch m;
    if (!std::regex_search(line, m, std::regex(R"( (cu[A-Za-z0-9_]+) +(\S+) (\S+) )"))) continue;
    if (!is_async(m[1])) continue;
    ++ops;
    EXPECT_TRUE(std::regex_match(std::string(m[2]), std::regex(R"([0-9]+\.[0-9]{3})"))) << line;
    EXPECT_EQ(m[3], "0") << line;
  }
  EXPECT_EQ(ops, kAsyncOps.size() + 2) << text.out;
}

// Two traps a call (issue 46): a runtime launch whose driver function no
// other code calls costs its entry and its return, nothing more. Once the
// program looks the driver's cuLaunchKernel up (dlsym, as Triton and XLA do),
// that function is probed before the program can call it: each direct call
// is recorded at depth 0 with its kernel, and the runtime's calls of it trap
// at its entry from then on.
TEST_F(ProbePlan, ARuntimeCallTrapsTwiceUntilTheProgramLooksItsDriverFunctionUp) {
  constexpr std::size_t kN = 300;
  for (const char* env : {"", "CUDATRACE_NO_UPROBE_SESSIONS=1 "}) {
    SCOPED_TRACE(env);
    const Result loop = run(env + tracer() + " --json -- " FAKE_APP " launch-loop " + std::to_string(kN));
    ASSERT_EQ(loop.status, 0) << loop.err;
    EXPECT_EQ(counts(loop), (std::map<std::string, std::size_t>{{"cudaLaunchKernel", kN}})) << loop.err;
    // With perf-event uprobes the driver's cuLaunchKernel is probed from the
    // start: four hits a launch (entry and return of both).
    const std::size_t per_launch = perf_attach() ? 2 : 1;
    const json& hits = end_of(loop.lines)["overhead"]["processes"][0];
    EXPECT_EQ(hits["entry_hits"], per_launch * kN) << hits;
    EXPECT_EQ(hits["return_hits"], per_launch * kN) << hits;

    const Result r = run(env + tracer() + " -v --json -- " FAKE_APP " direct-driver " + std::to_string(kN));
    ASSERT_EQ(r.status, 0) << r.err;
    const bool sessions = r.err.find("(uprobe sessions)") != std::string::npos;
    EXPECT_EQ(counts(r), (std::map<std::string, std::size_t>{{"cudaLaunchKernel", 2 * kN}, {"cuLaunchKernel", kN}}))
        << r.err;
    for (const json& c : calls(r)) {
      expect_whole(c);
      EXPECT_EQ(c["depth"], 0) << c;
      EXPECT_EQ(c["kernel"], "kernel_stub") << c;
      if (c["api"] == "cuLaunchKernel") EXPECT_EQ(c["args"]["grid"], json({3, 1, 1})) << c;
    }
    EXPECT_EQ(r.err.find("cuLaunchKernel probed (looked up at fake_app+0x") != std::string::npos, !perf_attach())
        << r.err;
    const json& end = end_of(r.lines);
    EXPECT_EQ(end["lost"], 0);
    // The last kN runtime launches trap at the driver's entry too (and its
    // return without uprobe sessions); with perf-event uprobes every runtime
    // launch does.
    const std::size_t nested_launches = perf_attach() ? 2 * kN : kN;
    const json& direct = end["overhead"]["processes"][0];
    EXPECT_EQ(direct["entry_hits"], 3 * kN + nested_launches) << direct;
    EXPECT_EQ(direct["return_hits"], 3 * kN + (sessions ? 0 : nested_launches)) << direct;
  }
}

// Programs that call the driver directly are seen whole, kernel names too.
TEST_F(ProbePlan, DirectDriverCallsAreSeenWithTheirKernelNames) {
  const Result r = run(tracer() + " --json -- " DRIVER_APP);
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> apis;
  for (const json& c : calls(r)) apis.push_back(c["api"]);
  EXPECT_EQ(apis, (std::vector<std::string>{"cuInit", "cuMemAlloc_v2", "cuStreamCreate", "cuEventCreate",
                                            "cuMemcpyHtoDAsync_v2", "cuLaunchKernel", "cuLaunchKernelEx",
                                            "cuMemsetD8Async", "cuEventRecord", "cuStreamWaitEvent",
                                            "cuMemcpyDtoHAsync_v2", "cuStreamSynchronize"}))
      << r.out;
  for (const json& c : calls(r)) {
    EXPECT_EQ(c["depth"], 0) << c;
    expect_whole(c);
  }
  const auto c = by_api(r);
  for (const char* launch : {"cuLaunchKernel", "cuLaunchKernelEx"}) {
    EXPECT_EQ(c.at(launch)[0]["kernel"], "reduce(float*, float*, int)") << c.at(launch)[0];
    EXPECT_EQ(c.at(launch)[0]["kernel_mangled"], "_Z6reducePfS_i");
  }
  EXPECT_EQ(c.at("cuLaunchKernel")[0]["args"]["f"], "0xf010");
  EXPECT_EQ(c.at("cuLaunchKernel")[0]["args"]["block"], json({256, 1, 1}));
  EXPECT_EQ(c.at("cuStreamSynchronize")[0]["ret"], 0);
  EXPECT_GE(c.at("cuStreamSynchronize")[0]["dur_ns"].get<long>(), 2000000);  // blocking: timed
  EXPECT_EQ(end_of(r.lines)["lost"], 0);
}

// A program of the driver API that loads a module, unloads it and loads another in its
// place, whose kernel gets the first one's handle (issue 28): a launch names the kernel
// of the module its handle belongs to now, and none between the unload and the lookup.
TEST_F(ProbePlan, KernelNamesFollowModulesThatComeAndGo) {
  const Result r = run(tracer() + " --json -f all -- " DRIVER_APP " modules");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto c = by_api(r);
  const auto& launches = c.at("cuLaunchKernel");
  ASSERT_EQ(launches.size(), 3u) << r.out;
  EXPECT_EQ(launches[0]["kernel_mangled"], "_Z8kernel_av");
  EXPECT_EQ(launches[1]["kernel_mangled"], "?");
  EXPECT_EQ(launches[2]["kernel_mangled"], "_Z8kernel_bv");
  for (const json& l : launches) EXPECT_EQ(l["args"]["f"], "0xa01000");
  EXPECT_EQ(c.at("cuModuleLoadData")[0]["args"]["module"], "0xa010");
  EXPECT_EQ(c.at("cuModuleUnload").size(), 2u);
  const json& info = c.at("cuMemGetInfo_v2")[0];
  EXPECT_EQ(info["args"]["free"], 3ull << 30);
  EXPECT_EQ(info["args"]["total"], 8ull << 30);
  expect_whole(c.at("cuLaunchHostFunc")[0]);
  const Result text = run(tracer() + " -- " DRIVER_APP " modules");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("waited: default: 1 launch (kernel_a), 1 host function"), std::string::npos) << text.out;
}

// ---- --every-layer: both layers, nested, each with its return --------------------------

TEST_F(ProbePlan, EveryLayerRecordsBothLayersNestedWithTheirReturns) {
  for (const char* env : {"", "CUDATRACE_NO_UPROBE_SESSIONS=1 "}) {
    SCOPED_TRACE(env);
    const Result r = run(env + tracer() + " --json --every-layer -- " FAKE_APP " async");
    ASSERT_EQ(r.status, 0) << r.err;
    std::map<std::string, std::size_t> expected = kAsyncOthers;
    for (const auto& [runtime, driver] : kAsyncOps) ++expected[runtime], ++expected[driver];
    EXPECT_EQ(counts(r), expected) << r.out;
    std::vector<std::string> parents;
    for (const json& c : calls(r)) {
      expect_whole(c);
      if (!is_async(c["api"])) continue;
      if (c["layer"] == "runtime") {  // the program's call: outermost
        EXPECT_EQ(c["depth"], 0) << c;
        continue;
      }
      // The driver call made inside it, nested, with its own return.
      EXPECT_EQ(c["depth"], 1) << c;
      parents.push_back(c["parent_api"]);
    }
    std::vector<std::string> runtime_ops;
    for (const auto& [runtime, driver] : kAsyncOps) runtime_ops.push_back(runtime);
    EXPECT_EQ(parents, runtime_ops);
    const auto c = by_api(r);
    expect_async_runtime_args(c);
    expect_async_driver_args(c);
    EXPECT_EQ(end_of(r.lines)["unmatched"], 0);
  }
}

// ---- Failures and the filters that read returns -----------------------------------

TEST_F(ProbePlan, AFailedLaunchIsShownWithItsStatusInEveryMode) {
  // fake_app bad-launch: the driver refuses a grid of 0; the runtime returns its status.
  const Result plain = run(tracer() + " --json -- " FAKE_APP " bad-launch");
  ASSERT_EQ(plain.status, 0) << plain.err;
  const auto launches = calls(plain, "cudaLaunchKernel");
  ASSERT_EQ(launches.size(), 2u) << plain.out;
  EXPECT_EQ(launches[0]["ret_name"], "cudaErrorInvalidValue") << launches[0];
  EXPECT_EQ(launches[0]["args"]["grid"], json({0, 1, 1}));
  EXPECT_EQ(launches[1]["ret"], 0) << launches[1];

  const Result r = run(tracer() + " --json --errors -- " FAKE_APP " bad-launch");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto failed = calls(r);
  ASSERT_EQ(failed.size(), 1u) << r.out;
  EXPECT_EQ(failed[0]["api"], "cudaLaunchKernel");
  EXPECT_EQ(failed[0]["depth"], 0);
  EXPECT_EQ(failed[0]["ret_name"], "cudaErrorInvalidValue");
  EXPECT_GE(failed[0]["dur_ns"].get<long>(), 0);
  EXPECT_EQ(failed[0]["args"]["grid"], json({0, 1, 1}));
  // With --every-layer, the driver's refusal too, nested.
  const Result every = run(tracer() + " --json --errors --every-layer -- " FAKE_APP " bad-launch");
  ASSERT_EQ(every.status, 0) << every.err;
  const auto both = calls(every);
  ASSERT_EQ(both.size(), 2u) << every.out;
  EXPECT_EQ(both[0]["api"], "cuLaunchKernel");
  EXPECT_EQ(both[0]["ret_name"], "CUDA_ERROR_INVALID_VALUE");
  EXPECT_EQ(both[0]["depth"], 1);
  EXPECT_EQ(both[1]["api"], "cudaLaunchKernel");

  // The summary counts it as an error of its API; the next synchronisation
  // waits for the launch that ran, not the one that failed.
  const Result summary = run(tracer() + " --summary -f launch,stream -- " FAKE_APP " bad-launch");
  ASSERT_EQ(summary.status, 0) << summary.err;
  // Time (%), Total Time, Num Calls, Avg, Med, Min, Max, StdDev, P99, Errors, API.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(summary.out, m, std::regex(R"(\n *[0-9.]+ +[0-9,]+ +2 .* 1 +cudaLaunchKernel\n)")))
      << summary.out;
}

TEST_F(ProbePlan, MinDurationFilterTimesAsyncOperations) {
  // Each launch sleeps 3 ms in the fake driver (a full launch queue).
  const Result r = run("FAKE_CUDA_LAUNCH_US=3000 " + tracer() + " --json --min-us 1500 -- " FAKE_APP " async");
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> slow;
  for (const json& c : calls(r)) {
    slow.push_back(c["api"]);
    expect_whole(c);
    EXPECT_GE(c["dur_ns"].get<long>(), 1500000) << c;
  }
  EXPECT_EQ(slow, (std::vector<std::string>{"cudaLaunchKernel", "cudaLaunchKernel_ptsz", "cudaLaunchKernelExC",
                                            "cudaLaunchCooperativeKernel", "cudaStreamSynchronize"}))
      << r.out;
}

TEST_F(ProbePlan, StacksAreTakenAtTheReturnOfAsyncOperations) {
  const Result r = run(tracer() + " --json --stack -f launch,xfer,event,stream -- " FAKE_APP " async");
  ASSERT_EQ(r.status, 0) << r.err;
  std::map<std::string, std::size_t> expected;
  for (const auto& [runtime, driver] : kAsyncOps) ++expected[runtime];
  for (const char* api : {"cudaMemcpy2DAsync", "cudaMemcpyPeerAsync", "cudaStreamCreate", "cudaEventCreate",
                          "cudaStreamSynchronize"})
    expected[api] = 1;
  EXPECT_EQ(counts(r), expected) << r.out;
  for (const json& c : calls(r)) {
    expect_whole(c);
    EXPECT_EQ(c["depth"], 0) << c;
    ASSERT_TRUE(c.contains("stack")) << c;
    // The program made the call: its frame is the call site.
    EXPECT_EQ(c["stack"][0]["module"], FAKE_APP) << c;
  }
}

// ---- Probe placement: every kind of prologue decodes exactly ---------------------------

std::vector<std::string> prologue_kinds() {
  std::vector<std::string> out;
  std::stringstream ss(PROLOGUE_KINDS);
  for (std::string kind; std::getline(ss, kind, ',');) out.push_back(kind);
  return out;
}

std::string prologue_lib(const std::string& kind) { return PROLOGUE_LIB_DIR "/lib_" + kind + ".so"; }

// The probed instruction of each kind (tests/fixtures/prologues.S), as --list-apis describes it.
const std::map<std::string, std::string> kPlaced = {
    {"push", "+0 push %rbp"},
    {"endbr_push", "+4 push %rbp (after endbr64)"},
    {"endbr_push_r15", "+4 push %r15 (after endbr64)"},
    {"endbr_sub", "+0 endbr64: single-stepped"},
    {"sub", "+0 sub $imm,%rsp: single-stepped"},
    {"mov", "+3 push %rbp (after mov %rdi,%r10)"},
    {"nop5", "+5 push %rbp (after nop)"},
};

// One library's calls of prologue_app: c[0..] are its records, in order.
void expect_prologue_calls_decoded(const std::vector<json>& c) {
  std::vector<std::string> apis;
  for (const json& call : c) apis.push_back(call["api"]);
  ASSERT_EQ(apis, (std::vector<std::string>{"cudaGetDevice", "cudaMalloc", "cudaSetDevice", "cudaSetDevice",
                                            "cudaLaunchKernel", "cuLaunchKernel"}));
  EXPECT_EQ(c[0]["args"]["device"], 7);
  EXPECT_EQ(c[0]["ret"], 0);
  EXPECT_EQ(c[1]["args"], json({{"devPtr", "0xd000001000"}, {"size", 4096}}));
  EXPECT_EQ(c[1]["ret"], 0);
  EXPECT_EQ(c[2]["args"]["device"], 0);
  EXPECT_EQ(c[2]["ret"], 0);
  EXPECT_EQ(c[3]["args"]["device"], 3);
  EXPECT_EQ(c[3]["ret"], 101);
  EXPECT_EQ(c[3]["ret_name"], "cudaErrorInvalidDevice");
  const json& launch = c[4];
  EXPECT_EQ(launch["args"]["grid"], json({4, 2, 1}));
  EXPECT_EQ(launch["args"]["block"], json({128, 1, 1}));
  EXPECT_EQ(launch["args"]["sharedMem"], 64);     // on the stack
  EXPECT_EQ(launch["args"]["stream"], "0x5010");  // on the stack
  EXPECT_EQ(launch["kernel"], "prologue_kernel");
  EXPECT_EQ(launch["ret"], 0);
  // The program's own driver call, outermost.
  const json& cu = c.back();
  EXPECT_EQ(cu["args"]["grid"], json({8, 4, 2}));
  EXPECT_EQ(cu["args"]["block"], json({32, 16, 1}));  // blockDimZ: the first stack argument
  EXPECT_EQ(cu["args"]["sharedMemBytes"], 48);
  EXPECT_EQ(cu["args"]["hStream"], "0x5020");
  EXPECT_EQ(cu["args"]["extra"], "0x0");
  EXPECT_EQ(cu["kernel"], "prologue_kernel");
  EXPECT_EQ(cu["ret"], 0);
  for (const json& call : c) EXPECT_EQ(call["depth"], 0) << call;
}

// One run through every kind's library in turn (prologue_app LIB...).
TEST_F(ProbePlan, ArgumentsOutParamsAndReturnsDecodeExactlyAfterEveryPrologue) {
  std::string app = " -- " PROLOGUE_APP;
  for (const std::string& kind : prologue_kinds()) app += " " + prologue_lib(kind);
  const Result r = run(tracer() + " -f all --json" + app);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<json> all = calls(r);
  constexpr std::size_t kPerLib = 6;
  ASSERT_EQ(all.size(), kPerLib * prologue_kinds().size()) << r.out;
  for (std::size_t i = 0; i < prologue_kinds().size(); ++i) {
    SCOPED_TRACE(prologue_kinds()[i]);
    expect_prologue_calls_decoded(std::vector<json>(all.begin() + i * kPerLib, all.begin() + (i + 1) * kPerLib));
  }
  EXPECT_EQ(end_of(r.lines)["lost"], 0);
}

// The symbol values of a library (nm): a function's file offset in these.
std::map<std::string, std::uint64_t> symbols(const std::string& lib) {
  std::map<std::string, std::uint64_t> out;
  std::stringstream ss(run("nm -D --defined-only " + lib).out);
  std::string value, type, name;
  while (ss >> value >> type >> name) out[name] = std::stoull(value, nullptr, 16);
  return out;
}

TEST_F(ProbePlan, ListApisSaysWhereEachProbeIsAndWhichAreSingleStepped) {
  ASSERT_EQ(prologue_kinds().size(), kPlaced.size());
  for (const std::string& kind : prologue_kinds()) {
    SCOPED_TRACE(kind);
    const std::string lib = prologue_lib(kind);
    const Result r = run(tracer() + " --list-apis -f all --lib " + lib);
    ASSERT_EQ(r.status, 0) << r.err;
    const bool stepped = kPlaced.at(kind).find("single-stepped") != std::string::npos;
    const std::string summary = "lib_" + kind + ".so: 5 probes, " + (stepped ? "0" : "5") +
                                " on instructions the kernel emulates, " + (stepped ? "5" : "0") + " single-stepped";
    EXPECT_EQ(r.out.rfind(summary, 0), 0u) << r.out;
    const std::uint64_t offset = std::stoull(kPlaced.at(kind).substr(1));
    const auto syms = symbols(lib);
    for (const char* fn : {"cudaGetDevice", "cudaMalloc", "cudaSetDevice", "cudaLaunchKernel", "cuLaunchKernel"}) {
      const std::string how = std::string(fn) == "cuLaunchKernel" ? "entry and return; inside a runtime call, by it"
                                                                   : "entry and return";
      char row[256];
      std::snprintf(row, sizeof row, "| `%s` | %#llx | %s | %s |", fn,
                    static_cast<unsigned long long>(syms.at(fn) + offset), kPlaced.at(kind).c_str(), how.c_str());
      EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
    }
  }
}

// ---- -p: kernels looked up before cudatrace attached are named ---------------------

// A process started with a pipe on its stdin and one on its stdout.
struct Child {
  pid_t pid = -1;
  int in = -1;
  FILE* out = nullptr;
  explicit Child(const std::vector<std::string>& argv) {
    int in_pipe[2], out_pipe[2];
    if (pipe(in_pipe) != 0 || pipe(out_pipe) != 0) return;
    pid = fork();
    if (pid == 0) {
      dup2(in_pipe[0], STDIN_FILENO);
      dup2(out_pipe[1], STDOUT_FILENO);
      close(in_pipe[1]);
      close(out_pipe[0]);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    close(in_pipe[0]);
    close(out_pipe[1]);
    in = in_pipe[1];
    out = fdopen(out_pipe[0], "r");
  }
  std::string read_line() const {
    char buf[256] = {};
    return out && std::fgets(buf, sizeof buf, out) ? std::string(buf) : std::string();
  }
  void go() const { (void)!write(in, "go\n", 3); }
  // The exit status, or -1 after `limit` (then it is killed).
  int wait(std::chrono::milliseconds limit = 20s) {
    int status = 0;
    if (!wait_until([&] { return waitpid(pid, &status, WNOHANG) == pid; }, limit)) return -1;
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  ~Child() {
    if (pid > 0) kill(pid, SIGKILL), waitpid(pid, nullptr, 0);
    if (in >= 0) close(in);
    if (out) fclose(out);
  }
};

constexpr const char* kSaxpy = "saxpy(int, float, float*, float*)";

// fake_app registered N: the runtime looks the kernel up (cuLibraryGetKernel)
// at its first launch; the driver launches get that handle, not the stub.
TEST_F(ProbePlan, CommandModeNamesRegisteredKernelsByTheirStubAndDriverHandle) {
  const Result r = run(tracer() + " --json -f launch -- " FAKE_APP " registered 3 </dev/null");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(counts(r), (std::map<std::string, std::size_t>{{"cudaLaunchKernel", 7}})) << r.out;
  for (const json& c : calls(r)) EXPECT_EQ(c["kernel"], kSaxpy) << c;
  const Result every = run(tracer() + " --json -f launch --every-layer -- " FAKE_APP " registered 3 </dev/null");
  ASSERT_EQ(every.status, 0) << every.err;
  const auto driver = calls(every, "cuLaunchKernel");
  ASSERT_EQ(driver.size(), 7u) << every.out;
  for (const json& c : driver) {
    EXPECT_EQ(c["kernel"], kSaxpy) << c;
    EXPECT_EQ(c["args"]["f"], "0xc010") << c;
  }
}

// `cudatrace -v --json -f launch OPTIONS -p PID` in the background, its
// stdout and stderr in files, for the tests that attach to a process whose
// kernels were looked up before.
struct LaunchTracer {
  std::string out = temp_path("naming.jsonl"), err = temp_path("naming.err");
  pid_t pid = -1;
  LaunchTracer(pid_t target, const std::vector<std::string>& options) {
    std::vector<std::string> args = {"-v", "--json", "-f", "launch"};
    args.insert(args.end(), options.begin(), options.end());
    args.insert(args.end(), {"-p", std::to_string(target)});
    pid = fork();
    if (pid == 0) {
      const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(o, STDOUT_FILENO);
      dup2(e, STDERR_FILENO);
      exec_tracer(args);
    }
  }
  bool attached() const {
    return wait_until([&] { return read_file(err).find("cudatrace: tracing process") != std::string::npos; });
  }
  // Once the target has exited: cudatrace ends with status 0; its lines.
  std::vector<json> lines() {
    int status = 0;
    EXPECT_TRUE(wait_until([&] { return waitpid(pid, &status, WNOHANG) == pid; }));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_file(err);
    return parse_lines(read_file(out));
  }
  ~LaunchTracer() {
    std::remove(out.c_str());
    std::remove(err.c_str());
  }
};

// Attached after the lookup: cudatrace never saw handle 0xc010 named, but
// the runtime launch's host stub names the kernel.
void attach_after_the_lookup(const std::vector<std::string>& options, const std::string& api,
                             const std::string& kernel) {
  Child app({FAKE_APP, "registered", "3"});
  ASSERT_EQ(app.read_line().rfind("ready", 0), 0u);
  LaunchTracer tracer(app.pid, options);
  ASSERT_TRUE(tracer.attached()) << read_file(tracer.err);
  app.go();
  app.go();
  EXPECT_EQ(app.wait(), 0);
  const std::vector<json> lines = tracer.lines();
  std::size_t launches = 0;
  for (const json& c : records(lines, "call")) {
    EXPECT_EQ(c["api"], api) << c;
    EXPECT_EQ(c["depth"], 0) << c;
    EXPECT_FALSE(c.contains("parent_api")) << c;
    EXPECT_EQ(c["ret"], 0) << c;
    EXPECT_EQ(c["kernel"], kernel) << c;
    ++launches;
  }
  EXPECT_EQ(launches, 6u);
  EXPECT_EQ(end_of(lines)["lost"], 0);
}

TEST_F(ProbePlan, AttachedAfterTheKernelLookupRuntimeLaunchesAreNamedByTheirStub) {
  attach_after_the_lookup({}, "cudaLaunchKernel", kSaxpy);
}

// The driver layer alone sees only the handle, which it never saw named.
TEST_F(ProbePlan, AttachedAfterTheKernelLookupDriverLaunchesAreUnnamed) {
  attach_after_the_lookup({"--layer", "driver"}, "cuLaunchKernel", "?");
}

// The CPU time a process spent while traced counts every thread, also when
// the leader exits first and another thread last (a CUDA program's helper
// threads after main's exit_group): the leader's time is still its own then.
TEST_F(ProbePlan, CpuTimeWhileTracedCountsTheLeaderThatExitedFirst) {
  const Result r = run(tracer() + " --json -f all -- " FAKE_APP " main-exits-first 300");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(calls(r).size(), 6u) << r.out;
  const json& processes = end_of(r.lines)["overhead"]["processes"];
  ASSERT_EQ(processes.size(), 1u) << processes;
  EXPECT_GE(processes[0]["cpu_ns"].get<double>(), 300e6) << processes;
}

// driver_app MODE traced with -p once it is ready (its handles made before
// attach): the kernel names of its `launches` launches, read while it lives.
std::vector<std::string> names_of_launches_after_attach(const std::string& mode, std::size_t launches) {
  Child app({DRIVER_APP, mode});
  EXPECT_EQ(app.read_line().rfind("ready", 0), 0u);
  LaunchTracer tracer(app.pid, {});
  EXPECT_TRUE(tracer.attached()) << read_file(tracer.err);
  app.go();
  EXPECT_EQ(app.read_line(), "launched\n");
  // Named while the process lives: its memory holds the driver's objects.
  constexpr std::string_view kCallLine = "{\"type\":\"call\",";
  const auto written_calls = [&] {  // whole lines only: the writer may be mid-line
    const std::string text = read_file(tracer.out);
    std::size_t calls = 0;
    for (std::size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1)
      calls += text.compare(at, kCallLine.size(), kCallLine) == 0;
    return calls;
  };
  EXPECT_TRUE(wait_until([&] { return written_calls() >= launches; })) << read_file(tracer.out);
  app.go();
  EXPECT_EQ(app.wait(), 0);
  const std::vector<json> lines = tracer.lines();
  std::vector<std::string> names;
  for (const json& c : records(lines, "call")) names.push_back(c["kernel_mangled"]);
  return names;
}

// Handles made before attach that point to driver objects (driver_app
// before-attach, fake_cuda_driver.c: the name's pointer at byte 24 of the
// object). Until three traced lookups have shown where names are kept, they
// stay unnamed; then each is named from the driver's object, as a trace
// from the start names it, and a handle that is no such object stays unnamed.
TEST_F(ProbePlan, AttachedHandlesAreNamedFromTheDriverObjectsOnceTheirLayoutIsLearnt) {
  const std::vector<std::string> expected = {"?", "?", "_Z5late1v", "_Z5late2v", "_Z5late3v",
                                             "_Z9gemm_tilePKfPfi", "triton_poi_fused_add_0", "_Z9gemm_tilePKfPfi",
                                             "?"};
  EXPECT_EQ(names_of_launches_after_attach("before-attach", 9), expected);

  // From the start, the lookups name every handle alike.
  const Result start = run(tracer() + " --json -f launch -- " DRIVER_APP " before-attach </dev/null");
  ASSERT_EQ(start.status, 0) << start.err;
  std::vector<std::string> names;
  for (const json& c : calls(start)) names.push_back(c["kernel_mangled"]);
  EXPECT_EQ(names, (std::vector<std::string>{"_Z9gemm_tilePKfPfi", "triton_poi_fused_add_0", "_Z5late1v", "_Z5late2v",
                                             "_Z5late3v", "_Z9gemm_tilePKfPfi", "triton_poi_fused_add_0",
                                             "_Z9gemm_tilePKfPfi", "?"}))
      << start.out;
}

// Every handle made before attach, none looked up after (a Triton or XLA
// service): the unknown handles teach the layout, from the third on.
TEST_F(ProbePlan, HandlesAllMadeBeforeAttachTeachTheLayoutThemselves) {
  EXPECT_EQ(names_of_launches_after_attach("all-before-attach", 7),
            (std::vector<std::string>{"?", "?", "loop_add_fusion.1", "_ZN3xla6reduceEPf", "_Z9gemm_tilePKfPfi",
                                      "_Z9gemm_tilePKfPfi", "?"}));
}

}  // namespace
