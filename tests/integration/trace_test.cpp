// End-to-end tests: the real cudatrace binary, real eBPF, as root, against
// (a) the fake CUDA libraries of tests/fixtures, (b) the toolkit's real
// libcudart through nvcc-built programs (shared and static runtime), and
// (c) -p attach to a running process. Skipped (not passed) without root.
// Over 400 lines: one fixture (Trace) for every end-to-end tracing check, so
// that each runs the same harness and the perf-event pass (integration_perf)
// repeats all of them.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

namespace {

using namespace cudatrace_test;

// A sanitized cudatrace (build-san) reads the ring several times slower:
// whether it keeps up with a loop is for the real build to show.
#ifdef CUDATRACE_SANITIZED
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

class Trace : public NeedsRoot {};

TEST_F(Trace, FakeRuntimeBasicSequenceExactly) {
  const Result r = run(tracer() + " --json --layer runtime -- " FAKE_APP " basic");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<json> c = calls(r);
  const std::vector<std::string> expected = {
      "cudaGetDeviceCount", "cudaSetDevice",   "cudaMalloc",       "cudaMemcpy",           "cudaStreamCreate",
      "cudaLaunchKernel",   "cudaMemcpyAsync", "cudaStreamSynchronize", "cudaEventCreate", "cudaEventCreate",
      "cudaEventRecord",    "cudaEventRecord", "cudaEventElapsedTime",  "cudaFree",        "cudaSetDevice",
      "cudaMalloc",         "cudaMemcpy"};
  ASSERT_EQ(c.size(), expected.size()) << r.out;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(c[i]["api"], expected[i]) << i;
    EXPECT_EQ(c[i]["layer"], "runtime");
    EXPECT_EQ(c[i]["comm"], "fake_app");
    EXPECT_EQ(c[i]["pid"], c[i]["tid"]);
  }
  EXPECT_EQ(c[0]["args"]["count"], 4);
  EXPECT_EQ(c[2]["args"], json({{"devPtr", "0xd000100000"}, {"size", 1048576}}));
  EXPECT_EQ(c[3]["args"]["kind"], "cudaMemcpyHostToDevice");
  EXPECT_EQ(c[3]["args"]["count"], 4096);
  EXPECT_EQ(c[4]["args"]["pStream"], "0x5010");
  const json& launch = c[5];
  EXPECT_EQ(launch["args"]["grid"], json({4, 2, 1}));
  EXPECT_EQ(launch["args"]["block"], json({128, 1, 1}));
  EXPECT_EQ(launch["args"]["sharedMem"], 64);
  EXPECT_EQ(launch["args"]["stream"], "0x5010");
  EXPECT_EQ(launch["kernel"], "kernel_stub");  // from the app's ELF symbols
  EXPECT_EQ(c[6]["args"]["kind"], "cudaMemcpyDeviceToHost");
  // The asynchronous operations are whole calls: latency and status.
  for (const int i : {5, 6, 10, 11}) {
    EXPECT_FALSE(c[i].contains("entry_only")) << c[i];
    EXPECT_EQ(c[i]["ret"], 0) << c[i];
    EXPECT_EQ(c[i]["ret_name"], "cudaSuccess") << c[i];
    EXPECT_GT(c[i]["dur_ns"].get<long>(), 0) << c[i];
  }
  EXPECT_GE(c[7]["dur_ns"].get<long>(), 2000000);  // the fake sleeps 2 ms
  EXPECT_EQ(c[8]["args"]["event"], "0xe010");
  EXPECT_EQ(c[9]["args"]["event"], "0xe020");
  EXPECT_DOUBLE_EQ(c[12]["args"]["ms"].get<double>(), 1.5);
  EXPECT_EQ(c[14]["ret"], 101);
  EXPECT_EQ(c[14]["ret_name"], "cudaErrorInvalidDevice");
  EXPECT_EQ(c[15]["ret_name"], "cudaErrorMemoryAllocation");
  EXPECT_TRUE(c[15]["args"]["devPtr"].is_null());  // not written on failure
  EXPECT_EQ(c[16]["ret"], 21);
  EXPECT_EQ(c[16]["args"]["kind"], 9);
  const json& end = end_of(r.lines);
  EXPECT_EQ(end["calls"], expected.size());
  EXPECT_EQ(end["lost"], 0);
  EXPECT_EQ(end["unfinished"], 0);
}

// fake_app nested: cudaMalloc makes cuMemAlloc_v2, cudaLaunchKernel makes
// cuLaunchKernel. The driver allocation is recorded (its out-param is read);
// the driver launch is part of the runtime launch's record unless
// --every-layer (bpf_abi.h, bit 60).
void expect_allocation_nested(const Result& r) {
  ASSERT_EQ(r.status, 0) << r.err;
  const auto alloc = calls(r, "cuMemAlloc_v2");
  ASSERT_EQ(alloc.size(), 1u);
  EXPECT_EQ(alloc[0]["layer"], "driver");
  EXPECT_EQ(alloc[0]["depth"], 1);
  EXPECT_EQ(alloc[0]["parent_api"], "cudaMalloc");
  EXPECT_EQ(alloc[0]["args"]["dptr"], "0xd000001000");
  const auto malloc_calls = calls(r, "cudaMalloc");
  ASSERT_EQ(malloc_calls.size(), 1u);
  EXPECT_EQ(malloc_calls[0]["depth"], 0);
  EXPECT_FALSE(malloc_calls[0].contains("parent_api"));
  // The runtime call includes its child's time.
  EXPECT_GE(malloc_calls[0]["dur_ns"].get<long>(), alloc[0]["dur_ns"].get<long>());
  const auto runtime = calls(r, "cudaLaunchKernel");
  ASSERT_EQ(runtime.size(), 1u);
  EXPECT_EQ(runtime[0]["depth"], 0);
  EXPECT_EQ(runtime[0]["ret_name"], "cudaSuccess");
  EXPECT_GT(runtime[0]["dur_ns"].get<long>(), 0);
  EXPECT_EQ(runtime[0]["args"]["sharedMem"], 64);
  EXPECT_EQ(runtime[0]["kernel"], "kernel_stub");
  for (const json& c : calls(r)) EXPECT_FALSE(c.contains("entry_only")) << c;
}

void expect_driver_launch(const json& launch) {
  EXPECT_EQ(launch["args"]["grid"], json({4, 2, 1}));
  EXPECT_EQ(launch["args"]["block"], json({128, 1, 1}));
  EXPECT_EQ(launch["args"]["sharedMemBytes"], 64);  // 5 stack arguments decoded
  EXPECT_EQ(launch["kernel"], "kernel_stub");
}

TEST_F(Trace, DriverCallsNestUnderRuntimeCalls) {
  // The same records with uprobe sessions (the nested launch's return
  // unprobed) and with entry/return pairs (as before Linux 6.13).
  for (const char* env : {"", "CUDATRACE_NO_UPROBE_SESSIONS=1 "}) {
    SCOPED_TRACE(env);
    const Result r = run(env + tracer() + " --json -- " FAKE_APP " nested");
    expect_allocation_nested(r);
    EXPECT_EQ(calls(r).size(), 3u) << r.out;
    EXPECT_TRUE(calls(r, "cuLaunchKernel").empty()) << r.out;

    // --every-layer: the driver launch too, nested in the runtime's, whole.
    const Result every = run(env + tracer() + " --json --every-layer -- " FAKE_APP " nested");
    expect_allocation_nested(every);
    EXPECT_EQ(calls(every).size(), 4u) << every.out;
    const auto nested = calls(every, "cuLaunchKernel");
    ASSERT_EQ(nested.size(), 1u);
    EXPECT_EQ(nested[0]["depth"], 1);
    EXPECT_EQ(nested[0]["parent_api"], "cudaLaunchKernel");
    EXPECT_EQ(nested[0]["ret_name"], "CUDA_SUCCESS");
    EXPECT_GT(nested[0]["dur_ns"].get<long>(), 0);
    expect_driver_launch(nested[0]);
  }
}

// Local functions named like CUDA APIs that forward to the library (XLA's
// plugin, forwarding_stubs.c) are probed too; each operation must still give
// exactly one record, with the library's status and out-params, the depth and
// parent of its nested calls as if the stubs did not exist.
void expect_one_record_per_forwarded_call(const Result& r, int n, bool every_layer) {
  ASSERT_EQ(r.status, 0) << r.err;
  std::map<std::string, int> count;
  for (const json& c : calls(r)) ++count[c["api"]];
  std::map<std::string, int> expected = {{"cudaMalloc", n + 1},           {"cuMemAlloc_v2", n + 1},
                                         {"cudaLaunchKernel_ptsz", n},    {"cuLaunchKernel", n},
                                         {"cudaSetDevice", n + 1}};
  // The driver launch the runtime's launch makes: part of its record, or nested in it.
  if (every_layer) expected["cuLaunchKernel_ptsz"] = n;
  EXPECT_EQ(count, expected) << r.out;
  for (const json& c : calls(r)) {
    const std::string api = c["api"];
    const bool nested = api == "cuMemAlloc_v2" || api == "cuLaunchKernel_ptsz";
    EXPECT_EQ(c["depth"], nested ? 1 : 0) << c;
    EXPECT_FALSE(c.contains("entry_only")) << c;
    EXPECT_GE(c["dur_ns"].get<long>(), 0) << c;
    if (api == "cuMemAlloc_v2") EXPECT_EQ(c["parent_api"], "cudaMalloc") << c;
    if (api == "cuLaunchKernel_ptsz") {
      // Made by the runtime's cudaLaunchKernel_ptsz, which the stubs forward to.
      EXPECT_EQ(c["args"]["grid"], json({4, 2, 1}));
      EXPECT_EQ(c["args"]["sharedMemBytes"], 64);
      EXPECT_EQ(c["handle_ids"]["hStream"], "per-thread");
      EXPECT_EQ(c["parent_api"], "cudaLaunchKernel_ptsz") << c;
      EXPECT_EQ(c["ret"], 0) << c;
    }
    if (api == "cuLaunchKernel") {  // the driver stub's sibling call: the library's status
      EXPECT_EQ(c["args"]["grid"], json({8, 1, 1}));
      EXPECT_EQ(c["args"]["block"], json({32, 1, 1}));  // stack arguments through a sibling call
      EXPECT_EQ(c["ret"], 0) << c;
    }
  }
  const auto alloc = calls(r, "cudaMalloc");
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(alloc[i]["ret"], 0);
    EXPECT_EQ(alloc[i]["args"]["devPtr"], "0xd000001000");
  }
  EXPECT_EQ(alloc[n]["ret_name"], "cudaErrorInvalidValue");
  EXPECT_EQ(calls(r, "cuMemAlloc_v2")[n]["ret_name"], "CUDA_ERROR_INVALID_VALUE");
  const auto set_device = calls(r, "cudaSetDevice");
  EXPECT_EQ(set_device[0]["ret"], 0);
  // The stub reports 999; the record carries the library's code.
  EXPECT_EQ(set_device[n]["ret_name"], "cudaErrorInvalidDevice");
  // The library's variant (per-thread default stream), the caller's arguments.
  const auto launches = calls(r, "cudaLaunchKernel_ptsz");
  ASSERT_EQ(launches.size(), std::size_t(n));
  EXPECT_EQ(launches[0]["handle_ids"]["stream"], "per-thread");
  EXPECT_EQ(launches[0]["args"]["sharedMem"], 64);
  EXPECT_EQ(launches[0]["ret"], 0);
  EXPECT_EQ(end_of(r.lines)["unmatched"], 0);
}

TEST_F(Trace, ForwardingStubsGiveOneRecordPerCall) {
  expect_one_record_per_forwarded_call(run(tracer() + " --json -- " FORWARD_APP " 20"), 20, false);
  expect_one_record_per_forwarded_call(run(tracer() + " --json --every-layer -- " FORWARD_APP " 20"), 20, true);
  // Entry and return programs, as on kernels without uprobe sessions.
  for (const char* every : {"", " --every-layer"})
    expect_one_record_per_forwarded_call(
        run("CUDATRACE_NO_UPROBE_SESSIONS=1 " + tracer() + " --json" + every + " -- " FORWARD_APP " 5"), 5, *every);
}

// The record keeps the stub's call site: the code that called the API.
TEST_F(Trace, ForwardedCallsKeepTheCallersCallSite) {
  const std::map<std::string, std::string> site = {{"cudaMalloc", "forward_alloc"},
                                                   {"cudaLaunchKernel_ptsz", "forward_launch_runtime"},
                                                   {"cudaSetDevice", "forward_set_device"},
                                                   {"cuLaunchKernel", "forward_launch_driver"}};
  for (const char* every : {"", " --every-layer"}) {
    const Result r = run(tracer() + " --json --stack" + every + " -- " FORWARD_APP " 2");
    expect_one_record_per_forwarded_call(r, 2, *every);
    for (const json& c : calls(r)) {
      if (c["depth"] != 0) continue;
      ASSERT_TRUE(c.contains("stack")) << c;
      EXPECT_EQ(c["stack"][0]["function"], site.at(c["api"])) << c;
    }
  }
}

TEST_F(Trace, LayerAndGroupFiltersAttachOnlyWhatIsAsked) {
  Result r = run(tracer() + " --json --layer driver -- " FAKE_APP " basic");
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> apis;
  for (const json& c : calls(r)) {
    EXPECT_EQ(c["layer"], "driver") << c;
    apis.push_back(c["api"]);
  }
  // The driver calls the fake runtime makes (fake_cudart.c).
  EXPECT_EQ(apis, (std::vector<std::string>{"cuMemAlloc_v2", "cuMemcpy", "cuLaunchKernel", "cuMemcpyDtoHAsync_v2",
                                            "cuEventRecord", "cuEventRecord"}));

  // The runtime's event record is the record, whatever the layers selected
  // beside it: its driver call is part of it.
  for (const std::string layer : {"", " --layer runtime"}) {
    const std::string record = "cudaEventRecord";
    r = run(tracer() + " --json -f event" + layer + " -- " FAKE_APP " basic");
    ASSERT_EQ(r.status, 0) << r.err;
    std::map<std::string, int> n;
    for (const json& c : calls(r)) ++n[c["api"]];
    EXPECT_EQ(n, (std::map<std::string, int>{{"cudaEventCreate", 2}, {record, 2}, {"cudaEventElapsedTime", 1}}))
        << layer;
  }
}

// The APIs a CUDA library of another version lacks are nothing a user can
// act on: said with -v only (the fake libraries lack many).
TEST_F(Trace, MissingExportsAreANoteForVerboseOnly) {
  Result r = run(tracer() + " -- " FAKE_APP " basic");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err.find("does not export"), std::string::npos) << r.err;
  r = run(tracer() + " -v -- " FAKE_APP " basic");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("cudatrace: libcudart.so.13 does not export "), std::string::npos) << r.err;
}

// An empty trace says why (issue 41): here, the selection matched nothing.
TEST_F(Trace, AnEmptyTraceSaysWhy) {
  const Result r = run(tracer() + " -f graph -- " FAKE_APP " basic");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("cudatrace: 0 calls traced, 0 lost, 0 unfinished: this selection (-f graph) matched no call "
                       "the program made\n"),
            std::string::npos)
      << r.err;
}

TEST_F(Trace, ErrorsAndMinDurationFilters) {
  Result r = run(tracer() + " --json --errors -- " FAKE_APP " basic");
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<int> rets;
  for (const json& c : calls(r)) rets.push_back(c["ret"]);
  EXPECT_EQ(rets, (std::vector<int>{101, 2, 21}));

  r = run(tracer() + " --json --min-us 1500 -- " FAKE_APP " basic");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto slow = calls(r);
  ASSERT_EQ(slow.size(), 1u) << r.out;
  EXPECT_EQ(slow[0]["api"], "cudaStreamSynchronize");

  // cudaErrorNotReady is a status, not a failure.
  r = run(tracer() + " --json --errors -- " FAKE_APP " query-notready");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(calls(r).empty()) << r.out;
}

TEST_F(Trace, LibraryLoadedWithDlopenLaterIsTracedFromItsFirstCall) {
  const Result r = run(tracer() + " --json --layer runtime -- " FAKE_APP_DLOPEN " dlopen-basic");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto c = calls(r);
  ASSERT_EQ(c.size(), 17u) << r.out;
  EXPECT_EQ(c.front()["api"], "cudaGetDeviceCount");
  EXPECT_EQ(c.back()["api"], "cudaMemcpy");
}

TEST_F(Trace, ThreadsArePairedPerThread) {
  const Result r = run(tracer() + kWithQuery + " --json --layer runtime -- " FAKE_APP " threads 8 200");
  ASSERT_EQ(r.status, 0) << r.err;
  std::map<long, std::map<std::string, int>> per_tid;
  for (const json& c : calls(r)) {
    ++per_tid[c["tid"].get<long>()][c["api"]];
    if (c["api"] == "cudaMalloc") {
      EXPECT_EQ(c["ret"], 0);
      // devPtr is 0xD000000000 + size: the out-param of this very call.
      const long size = c["args"]["size"];
      char expect[32];
      std::snprintf(expect, sizeof expect, "0x%lx", 0xD000000000L + size);
      EXPECT_EQ(c["args"]["devPtr"], expect);
    }
  }
  ASSERT_EQ(per_tid.size(), 8u);
  for (const auto& [tid, n] : per_tid) {
    EXPECT_EQ(n.at("cudaGetDevice"), 200);
    EXPECT_EQ(n.at("cudaMalloc"), 200);
    EXPECT_EQ(n.at("cudaFree"), 200);
  }
  EXPECT_EQ(end_of(r.lines)["lost"], 0);
}

TEST_F(Trace, ForkedChildrenAreFollowedAndExitStatusIsTheCommands) {
  Result r = run(tracer() + kWithQuery + " --json --layer runtime -- " FAKE_APP " fork");
  ASSERT_EQ(r.status, 0) << r.err;
  std::map<long, int> per_pid;
  for (const json& c : calls(r)) ++per_pid[c["pid"].get<long>()];
  ASSERT_EQ(per_pid.size(), 2u);
  std::vector<int> counts;
  for (auto& [pid, n] : per_pid) counts.push_back(n);
  std::sort(counts.begin(), counts.end());
  EXPECT_EQ(counts, (std::vector<int>{5, 17}));

  r = run(tracer() + kWithQuery + " --json -- " FAKE_APP " exit-code 7");
  EXPECT_EQ(r.status, 7);
  EXPECT_EQ(calls(r).size(), 3u);
}

TEST_F(Trace, AttachToRunningProcessWithPid) {
  int go_pipe[2];
  ASSERT_EQ(pipe(go_pipe), 0);
  const pid_t app = fork();
  if (app == 0) {
    dup2(go_pipe[0], STDIN_FILENO);
    close(go_pipe[1]);
    freopen("/dev/null", "w", stdout);
    execl(FAKE_APP, FAKE_APP, "wait-then-basic", nullptr);
    _exit(127);
  }
  close(go_pipe[0]);
  // An unrelated process using the same library must not show up.
  const pid_t other = fork();
  if (other == 0) {
    freopen("/dev/null", "w", stdout);
    execl(FAKE_APP, FAKE_APP, "threads", "1", "20000", nullptr);
    _exit(127);
  }
  std::thread go([&] {
    // Once attached (run() puts cudatrace's stderr there).
    wait_until([] { return read_file(temp_path("err")).find("tracing process") != std::string::npos; });
    ASSERT_EQ(write(go_pipe[1], "go\n", 3), 3);
    close(go_pipe[1]);
  });
  const Result r = run(tracer() + " --json -p " + std::to_string(app));
  go.join();
  int status = 0;
  waitpid(app, &status, 0);
  waitpid(other, &status, 0);
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> apis;
  for (const json& j : calls(r)) {
    apis.push_back(j["api"]);
    EXPECT_EQ(j["pid"], app);
  }
  // fake_app basic by default: each call whole, under the runtime's name;
  // the driver calls with out-params nested in them.
  EXPECT_EQ(apis, (std::vector<std::string>{
                      "cudaGetDeviceCount", "cudaSetDevice", "cuMemAlloc_v2", "cudaMalloc", "cudaMemcpy",
                      "cudaStreamCreate", "cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize",
                      "cudaEventCreate", "cudaEventCreate", "cudaEventRecord", "cudaEventRecord", "cudaEventElapsedTime",
                      "cudaFree", "cudaSetDevice", "cudaMalloc", "cudaMemcpy"}))
      << r.out;
  EXPECT_EQ(calls(r, "cudaLaunchKernel").at(0)["depth"], 0);
  EXPECT_EQ(calls(r, "cudaLaunchKernel").at(0)["ret_name"], "cudaSuccess");
  EXPECT_EQ(calls(r, "cudaLaunchKernel").at(0)["kernel"], "kernel_stub");
  EXPECT_NE(r.err.find("tracing process " + std::to_string(app)), std::string::npos) << r.err;
}

// Attaching probes file after file and closing their links take a while,
// and the ring is not read meanwhile: calls that begin then are not traced
// (-v counts them), or they could fill the ring at both ends. The program
// and cudatrace run on CPUs of their own, cudatrace before other work there
// (nice -10), as the reader must keep up in that case.
TEST_F(Trace, CallsMadeWhileProbesAttachOrDetachAreOutsideTheTrace) {
  cpu_set_t ours;
  ASSERT_EQ(sched_getaffinity(0, sizeof ours, &ours), 0);
  if (!CPU_ISSET(0, &ours) || !CPU_ISSET(1, &ours)) GTEST_SKIP() << "needs CPUs 0 and 1";
  const pid_t app = fork();
  if (app == 0) {
    freopen("/dev/null", "w", stdout);
    execlp("taskset", "taskset", "-c", "1", FAKE_APP, "launch-loop", "1000000000", nullptr);
    _exit(127);
  }
  // The loop runs for ever: it ends with the test, however the test ends.
  const struct EndsWithTheTest {
    pid_t pid;
    ~EndsWithTheTest() {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } loop{app};
  ASSERT_TRUE(wait_until([&] { return read_file("/proc/" + std::to_string(app) + "/comm") == "fake_app\n"; }));
  long long outside = 0;
  const std::string err_path = temp_path("attach-err");
  for (int round = 0; round < 3; ++round) {
    // Half a second of tracing, however long attaching took (a busy
    // machine, perf-event probes: about a second).
    std::vector<std::string> argv = {"nice", "-n", "-10", "taskset", "-c", "0"};
    for (const std::string& a : tracer_argv()) argv.push_back(a);
    argv.insert(argv.end(), {"-v", "-f", "all", "-o", "/dev/null", "-p", std::to_string(app)});
    std::remove(err_path.c_str());  // the round before's "tracing" line is not this one's
    const pid_t t = fork();
    if (t == 0) {
      const int fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(fd, STDERR_FILENO);
      std::vector<char*> ptrs;
      for (std::string& a : argv) ptrs.push_back(a.data());
      ptrs.push_back(nullptr);
      execvp(ptrs[0], ptrs.data());
      _exit(127);
    }
    int status = -1;
    bool reaped = false;
    const auto ended = [&] { return reaped || (reaped = waitpid(t, &status, WNOHANG) == t); };
    EXPECT_TRUE(wait_until([&] { return read_file(err_path).find("tracing process") != std::string::npos || ended(); },
                           60s));
    std::this_thread::sleep_for(500ms);
    if (!ended()) kill(t, SIGINT);
    if (!wait_until(ended, 60s)) {
      kill(t, SIGKILL);
      waitpid(t, &status, 0);
    }
    const std::string err = read_file(err_path);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << ": " << err;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(err, m, std::regex("([0-9]+) calls traced, ([0-9]+) lost"))) << "round " << round << ": " << err;
    EXPECT_GT(std::stoll(m[1]), 10000) << err;
    if (!kSanitized) EXPECT_EQ(m[2], "0") << "round " << round << ": " << err;
    if (std::regex_search(err, m, std::regex("([0-9]+) calls began while probes were being attached or detached")))
      outside += std::stoll(m[1]);
  }
  std::remove(err_path.c_str());
  // A loop of a million calls a second calls in those stretches, at least once in three runs.
  EXPECT_GT(outside, 0);
}

// A process that loads a library while another runs flat out: probing the
// new file takes long with perf-event uprobes (an event each, milliseconds
// apiece), and the running one's calls are read meanwhile. Map changes come
// on a ring of their own; on the calls' ring, as before, the calls behind
// the one being handled waited, and the loop lost about 180,000 of a
// million with the default ring.
TEST_F(Trace, ARunningProcessLosesNothingWhileAnotherLoadsALibrary) {
  if (perf_attach()) GTEST_SKIP() << "names its own --attach: once is enough";
  if (kSanitized) GTEST_SKIP() << "records lost to a sanitized reader say nothing";
  cpu_set_t ours;
  ASSERT_EQ(sched_getaffinity(0, sizeof ours, &ours), 0);
  if (!CPU_ISSET(0, &ours) || !CPU_ISSET(1, &ours)) GTEST_SKIP() << "needs CPUs 0 and 1";
  // A copy of the runtime, a file never probed before, that finds the fake driver beside it.
  const std::string dir = temp_path("late-load"), copy = dir + "/lib/libcudart.so.13";
  std::filesystem::create_directories(dir + "/lib");
  std::filesystem::create_directory_symlink(
      std::filesystem::path(FAKE_CUDART_LIB).parent_path().parent_path() / "fakecuda", dir + "/fakecuda");
  std::filesystem::copy_file(FAKE_CUDART_LIB, copy);
  const std::string command = std::string("taskset -c 1 sh -c '") + FAKE_APP +
                              " launch-loop 1000000000 >/dev/null 2>&1 & loop=$!; sleep 1; " + DLOPEN_APP +
                              " paced 10 1000 " + copy + " >/dev/null; kill $loop'";
  const Result r = run("nice -n -10 taskset -c 0 " + std::string(CUDATRACE_BIN) + " --attach perf -v -o /dev/null -- " +
                       command);
  std::filesystem::remove_all(dir);
  if (r.err.find("has no uprobe PMU") != std::string::npos) GTEST_SKIP() << "no perf-event uprobes here";
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find(copy + ": "), std::string::npos) << "the late library was not probed: " << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex("([0-9]+) calls traced, ([0-9]+) lost"))) << r.err;
  EXPECT_GT(std::stoll(m[1]), 100000) << r.err;
  EXPECT_EQ(m[2], "0") << r.err;
}

TEST_F(Trace, CallThatNeverReturnsIsReportedUnfinished) {
  const std::string out = temp_path("block.jsonl"), ready = temp_path("ready");
  const pid_t t = fork();
  if (t == 0) {
    const int fd = open(ready.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, STDOUT_FILENO);
    exec_tracer({"--json", "-o", out, "--", FAKE_APP, "block"});
  }
  // The app prints "ready" (to the stdout it shares with cudatrace) just
  // before the call that blocks.
  ASSERT_TRUE(wait_until([&] { return read_file(ready).find("ready") != std::string::npos; }));
  std::remove(ready.c_str());
  std::this_thread::sleep_for(200ms);  // into the blocking call
  const pid_t app = first_child(t);
  ASSERT_NE(app, 0);
  ASSERT_EQ(kill(app, SIGKILL), 0);
  int status = 0;
  waitpid(t, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGKILL);
  const std::vector<json> lines = parse_lines(read_file(out));
  std::remove(out.c_str());
  ASSERT_FALSE(lines.empty());
  int unfinished = 0;
  for (const json& j : lines)
    if (j["type"] == "unfinished") {
      ++unfinished;
      EXPECT_EQ(j["api"], "cudaStreamSynchronize");
      EXPECT_EQ(j["args"]["stream"], "0xb10c");
    }
  EXPECT_EQ(unfinished, 1);
  EXPECT_EQ(lines.back()["type"], "end");
  EXPECT_EQ(lines.back()["unfinished"], 1);
}

TEST_F(Trace, HostileCommNamesKeepOutputValid) {
  // comm is the first 15 bytes of the program's name: make them hostile.
  const std::string dir = temp_path("hostile");
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  const std::string link = dir + "/q\"b\\n\t\x01\xff";
  ASSERT_EQ(symlink(FAKE_APP, link.c_str()), 0);
  setenv("HOSTILE", link.c_str(), 1);
  Result r = run(tracer() + " --json -f device,query -- \"$HOSTILE\" loop 2");
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_EQ(calls(r).size(), 2u);
  const std::string comm = calls(r)[0]["comm"];
  EXPECT_NE(comm.find('"'), std::string::npos);
  EXPECT_NE(comm.find('\\'), std::string::npos);
  r = run(tracer() + " -f device,query -- \"$HOSTILE\" loop 2");
  std::remove(link.c_str());
  rmdir(dir.c_str());
  ASSERT_EQ(r.status, 0) << r.err;
  int lines = 0;
  for (char ch : r.out) lines += ch == '\n';
  EXPECT_EQ(lines, 3) << r.out;  // header + one line per call
}

#ifdef REAL_APP_SHARED
// The toolkit's real libcudart. No driver here: every call fails with
// cudaErrorInsufficientDriver, but they are real calls into the real library.
// Each is seen with its status, the launches, async copies and event records
// too, though they never reach a driver (issue 35).
void check_real_basic(const Result& r) {
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> apis;
  for (const json& c : calls(r)) {
    apis.push_back(c["api"]);
    EXPECT_EQ(c["ret"], 35) << c;
    EXPECT_EQ(c["ret_name"], "cudaErrorInsufficientDriver");
    EXPECT_TRUE(c.contains("dur_ns")) << c;
  }
  EXPECT_EQ(apis, (std::vector<std::string>{"cudaGetDeviceCount", "cudaMalloc", "cudaMemcpy", "cudaLaunchKernel",
                                            "cudaLaunchKernel", "cudaStreamCreate", "cudaMemcpyAsync",
                                            "cudaStreamSynchronize", "cudaEventCreate", "cudaEventRecord",
                                            "cudaEventSynchronize", "cudaFree", "cudaGetDevice",
                                            "cudaDeviceSynchronize"}));
  const auto launches = calls(r, "cudaLaunchKernel");
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[0]["kernel"], "addOne(float*, int)");
  EXPECT_EQ(launches[0]["kernel_mangled"], "_Z6addOnePfi");
  EXPECT_EQ(launches[0]["args"]["grid"], json({4, 2, 1}));
  EXPECT_EQ(launches[0]["args"]["block"], json({128, 1, 1}));
  EXPECT_EQ(launches[0]["args"]["sharedMem"], 64);
  EXPECT_EQ(launches[1]["kernel"], "void ns::scale<float>(float*, float)");
  EXPECT_EQ(launches[1]["args"]["block"], json({32, 1, 1}));
  EXPECT_EQ(calls(r, "cudaMemcpy")[0]["args"]["count"], 4096);
  EXPECT_EQ(end_of(r.lines)["calls"], 14);
}

TEST_F(Trace, RealLibcudartShared) {
  const Result r = run(tracer() + kWithQuery + " --json -- " REAL_APP_SHARED " basic");
  check_real_basic(r);
  // The first failed launch is told once, with the kernel and the cause; a JSON line too.
  std::size_t told = 0;
  for (const std::string& line : lines_of(r.err))
    told += line.find("warning: cudaLaunchKernel") != std::string::npos;
  EXPECT_EQ(told, 1u) << r.err;
  EXPECT_NE(r.err.find("cudatrace: warning: cudaLaunchKernel of addOne failed with cudaErrorInsufficientDriver at "
                       "real_app_shared+0x"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(": no CUDA driver, or one older than this runtime needs\n"), std::string::npos) << r.err;
  const auto warnings = records(r.lines, "warning");
  ASSERT_EQ(warnings.size(), 1u) << r.out;
  EXPECT_EQ(warnings[0]["kind"], "failed_launch");
  EXPECT_EQ(warnings[0]["api"], "cudaLaunchKernel");
  EXPECT_FALSE(warnings[0].contains("host_ptr"));
  check_real_basic(run(tracer() + kWithQuery + " --json --every-layer -- " REAL_APP_SHARED " basic"));
  // --errors shows every failed call, the launches among them.
  check_real_basic(run(tracer() + kWithQuery + " --json --errors -- " REAL_APP_SHARED " basic"));
  // -f all: those calls among the rest (registration, lookups), each with its status.
  const Result all = run(tracer() + " --json -f all -- " REAL_APP_SHARED " basic");
  ASSERT_EQ(all.status, 0) << all.err;
  std::vector<std::string> outermost;
  for (const json& c : calls(all)) {
    if (c["depth"] == 0) outermost.push_back(c["api"]);
    EXPECT_TRUE(c.contains("dur_ns")) << c;
    // nvcc's helpers (__cuda*) return nothing or a plain value; every API returns its status.
    if (c["api"].get<std::string>().rfind("__cuda", 0) != 0) EXPECT_TRUE(c.contains("ret")) << c;
  }
  std::vector<std::string> basic = {"cudaGetDeviceCount", "cudaMalloc", "cudaMemcpy", "cudaLaunchKernel",
                                    "cudaLaunchKernel", "cudaStreamCreate", "cudaMemcpyAsync", "cudaStreamSynchronize",
                                    "cudaEventCreate", "cudaEventRecord", "cudaEventSynchronize", "cudaFree",
                                    "cudaGetDevice", "cudaDeviceSynchronize"};
  auto next = basic.begin();
  for (const std::string& api : outermost)
    if (next != basic.end() && api == *next) ++next;
  EXPECT_EQ(next, basic.end()) << "missing from -f all: " << (next != basic.end() ? *next : "") << "\n" << all.out;
}

// Calls that only the rows generated from the toolkit's headers trace (issue 28), into
// the real libcudart, with their enum arguments by name.
TEST_F(Trace, RealLibcudartCallsOfTheWholeHeader) {
  const Result r = run(tracer() + " --json -f all --layer runtime -- " REAL_APP_SHARED " headers");
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> apis;
  for (const json& c : calls(r))
    if (c["depth"] == 0) apis.push_back(c["api"]);
  for (const char* api : {"cudaRuntimeGetVersion", "cudaFuncSetAttribute", "cudaDeviceGetLimit", "cudaMemGetInfo",
                          "cudaLaunchHostFunc", "cudaGetErrorString"})
    EXPECT_NE(std::find(apis.begin(), apis.end(), api), apis.end()) << api << "\n" << r.out;
  EXPECT_EQ(calls(r, "cudaFuncSetAttribute")[0]["args"]["attr"], "cudaFuncAttributeMaxDynamicSharedMemorySize");
  EXPECT_EQ(calls(r, "cudaFuncSetAttribute")[0]["args"]["value"], 1024);
  EXPECT_EQ(calls(r, "cudaDeviceGetLimit")[0]["args"]["limit"], "cudaLimitStackSize");
  EXPECT_EQ(calls(r, "cudaGetErrorString")[0]["args"]["error"], "cudaErrorInsufficientDriver");
  EXPECT_EQ(calls(r, "cudaGetErrorString")[0].count("ret"), 0u) << "a string, not a status";
  EXPECT_EQ(calls(r, "cudaMemGetInfo")[0]["ret_name"], "cudaErrorInsufficientDriver");
  // The default traces the memory and launch rows, not the getters.
  const Result d = run(tracer() + " --json --layer runtime -- " REAL_APP_SHARED " headers");
  ASSERT_EQ(d.status, 0) << d.err;
  EXPECT_EQ(calls(d, "cudaMemGetInfo").size(), 1u) << d.out;
  EXPECT_EQ(calls(d, "cudaLaunchHostFunc").size(), 1u) << d.out;
  for (const char* off : {"cudaRuntimeGetVersion", "cudaFuncSetAttribute", "cudaDeviceGetLimit", "cudaGetErrorString"})
    EXPECT_TRUE(calls(d, off).empty()) << off;
}

// The same calls made by a runtime linked in statically and stripped, found by
// its fingerprints (docs/static-runtime.md): every runtime API is
// fingerprinted, not only those an analysis reads, so each call is traced as
// often as through libcudart.so.
TEST_F(Trace, StrippedStaticRuntimeCallsOfTheWholeHeader) {
  const auto counts = [&](const char* program) {
    const Result r = run(tracer() + " --json -f all --layer runtime -- " + program + " headers");
    EXPECT_EQ(r.status, 0) << r.err;
    std::map<std::string, int> n;
    for (const json& c : calls(r))
      if (c["depth"] == 0) ++n[c["api"].get<std::string>()];
    return n;
  };
  auto shared = counts(REAL_APP_SHARED);
  const auto stripped = counts(REAL_APP_STRIPPED);
  for (const char* api : {"cudaRuntimeGetVersion", "cudaFuncSetAttribute", "cudaDeviceGetLimit", "cudaMemGetInfo",
                          "cudaLaunchHostFunc", "cudaGetErrorString"})
    EXPECT_EQ(shared.count(api) ? shared.at(api) : 0, 1) << api;
  // What no fingerprint finds (docs/static-runtime.md): registration helpers too short or too alike.
  for (const char* unfindable : {"__cudaGetProcAddress", "__cudaRegisterFatBinary", "__cudaRegisterFatBinaryEnd",
                                 "__cudaRegisterVar", "__cudaRegisterManagedVar"})
    shared.erase(unfindable);
  EXPECT_EQ(stripped, shared);
}

TEST_F(Trace, RealLibcudartStaticallyLinked) {
  check_real_basic(run(tracer() + kWithQuery + " --json -- " REAL_APP_STATIC " basic"));
  check_real_basic(run(tracer() + kWithQuery + " --json --errors -- " REAL_APP_STATIC " basic"));
}

// The runtime's own launches, each with its status.
TEST_F(Trace, RealLibcudartLaunchLoopCountsExactly) {
  const Result r = run(tracer() + " --json -f launch -- " REAL_APP_STATIC " launch-loop 5000");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto launches = calls(r, "cudaLaunchKernel");
  EXPECT_EQ(launches.size(), 5000u);
  for (const json& l : launches) EXPECT_EQ(l["ret_name"], "cudaErrorInsufficientDriver") << l;
  EXPECT_EQ(end_of(r.lines)["lost"], 0);
}

// The same program stripped: no symbol names its runtime, which is found by
// the fingerprints of libcudart_static.a (docs/static-runtime.md), kernel
// names included (__cudaRegisterFunction is one of them).
TEST_F(Trace, RealLibcudartStaticallyLinkedAndStripped) {
  check_real_basic(run(tracer() + kWithQuery + " --json -- " REAL_APP_STRIPPED " basic"));
}
#endif

#ifdef CUBLAS_APP
// cuBLAS's own runtime (linked in statically, stripped) is traced at the
// runtime layer: cublasCreate's cudaFree(NULL), the only call it makes
// without a driver.
TEST_F(Trace, RuntimeInsideCublasIsTraced) {
  const Result r = run(tracer() + " --json -- " CUBLAS_APP);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto all = calls(r);
  ASSERT_EQ(all.size(), 1u) << r.out;
  EXPECT_EQ(all[0]["api"], "cudaFree");
  EXPECT_EQ(all[0]["layer"], "runtime");
  EXPECT_EQ(all[0]["depth"], 0);
  EXPECT_EQ(all[0]["args"]["devPtr"], "0x0");
  EXPECT_EQ(all[0]["ret_name"], "cudaErrorInsufficientDriver");
}
#endif

TEST_F(Trace, BadInputGetsOneLineAndNonZeroExit) {
  struct Case {
    std::string args;
    int status;
    std::string says;
  };
  const std::string not_elf = temp_path("notelf");
  std::ofstream(not_elf) << "hello\n";
  const std::vector<Case> cases = {
      {"-p 99999999999", 2, "invalid PID"},
      {"-p 4194000", 3, "no such process"},
      {"--bogus", 2, "bogus"},
      {"-f memory -- true", 2, "unknown group 'memory'"},
      {"--layer gpu -- true", 2, "--layer must be"},
      {"--ring-mb 3 -- true", 2, "power of two"},
      {"", 2, "nothing to trace"},
      {"-- /no/such/program", 3, "command not found"},
      {"--lib " + not_elf + " -p 1", 3, "not an ELF file"},
      {"-o /no/such/dir/out -- true", 6, "cannot write /no/such/dir/out"},
  };
  for (const Case& c : cases) {
    const Result r = run(tracer() + " " + c.args);
    EXPECT_EQ(r.status, c.status) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << c.args << ": " << r.out;
  }
  std::remove(not_elf.c_str());
}

TEST_F(Trace, FullDiskIsAnError) {
  const Result r = run(tracer() + " --json -o /dev/full -- " FAKE_APP " loop 10");
  EXPECT_EQ(r.status, 6) << r.err;
  EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
}

TEST_F(Trace, HighFrequencyQueriesAreTracedOnlyWhenAsked) {
  for (const auto& [groups, traced] : std::vector<std::pair<std::string, std::size_t>>{
           {"", 0}, {" -f query", 5}, {" -f all", 5}, {" -f device", 0}, {kWithQuery, 5}}) {
    const Result r = run(tracer() + groups + " --json --layer runtime -- " FAKE_APP " loop 5");
    ASSERT_EQ(r.status, 0) << groups << ": " << r.err;
    EXPECT_EQ(calls(r, "cudaGetDevice").size(), traced) << groups;
    // Not probed at all: no probe hit is counted.
    if (!traced) EXPECT_TRUE(end_of(r.lines).at("overhead").at("processes").empty()) << groups << ": " << r.out;
  }
}

TEST_F(Trace, ProbeHitsAndTheCostTheyAddedArePerProcess) {
  const Result r = run(tracer() + " --json --layer runtime -f device,query -- " FAKE_APP " loop 20000");
  ASSERT_EQ(r.status, 0) << r.err;
  const json& cost = end_of(r.lines)["overhead"];
  ASSERT_EQ(cost["processes"].size(), 1u) << cost;
  const json& p = cost["processes"][0];
  // One entry and one return hit per call: 20000 cudaGetDevice and whatever else the fixture calls first.
  EXPECT_EQ(p["entry_hits"], calls(r).size());
  EXPECT_EQ(p["return_hits"], calls(r).size());
  EXPECT_GE(calls(r).size(), 20000u);
  EXPECT_EQ(p["pid"], calls(r)[0]["pid"]);
  EXPECT_EQ(p["comm"], "fake_app");
  // Plausible: a hit costs more than nothing and less than 100 us, and as
  // the loop is mostly probe hits, the estimate is most of the CPU time the
  // process used (an estimate: a hit's cost varies by tens of percent).
  EXPECT_GT(cost["entry_ns"].get<double>() + cost["return_ns"].get<double>(), 0) << cost;
  const double per_call = p["added_ns"].get<double>() / double(calls(r).size());
  EXPECT_GT(per_call, 0) << cost;
  EXPECT_LT(per_call, 100000) << cost;
  ASSERT_TRUE(p["added_pct"].is_number()) << cost;
  EXPECT_GT(p["added_pct"].get<double>(), 20) << cost;
  EXPECT_LT(p["added_pct"].get<double>(), 150) << cost;

  // Text mode says it on stderr.
  const Result text = run(tracer() + " --layer runtime -f device,query -o /dev/null -- " FAKE_APP " loop 20000");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_TRUE(std::regex_search(text.err, std::regex("cudatrace: added \xe2\x89\x88 [0-9.]+ ms of CPU time to "
                                                     "fake_app \\(PID [0-9]+\\), [0-9.]+ % of its CPU time "
                                                     "while traced \\(40,0[0-9][0-9] probe hits\\)\n")))
      << text.err;
}

// A program confined to the CPU cudatrace runs on waits while cudatrace
// reads and writes its records: the end line says how long, from cudatrace's
// CPU time there and the program's own run-queue wait (cost.h). Where the
// program may run on every CPU of several, it says nothing of a wait.
TEST_F(Trace, AProgramSharingItsCpuWithTheTracerIsToldHowLongItWaited) {
  const Result r = run("taskset -c 0 " + tracer() + " --json --layer runtime -f device,query -- " FAKE_APP " loop 50000");
  ASSERT_EQ(r.status, 0) << r.err;
  const json& p = end_of(r.lines).at("overhead").at("processes").at(0);
  ASSERT_TRUE(p.contains("waited_ns")) << p;
  EXPECT_GT(p["waited_ns"].get<double>(), 0) << p;
  ASSERT_TRUE(p["waited_pct"].is_number()) << p;
  EXPECT_NEAR(p["waited_pct"].get<double>(), 100 * p["waited_ns"].get<double>() / p["cpu_ns"].get<double>(), 0.01) << p;

  const Result text = run("taskset -c 0 " + tracer() + " --layer runtime -f device,query -o /dev/null -- " FAKE_APP
                          " loop 50000");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_TRUE(std::regex_search(text.err, std::regex("cudatrace: fake_app \\(PID [0-9]+\\) also waited \xe2\x89\x88 "
                                                     "[0-9.]+ ms for the CPUs it shares with cudatrace, [0-9.]+ % of "
                                                     "its CPU time\n")))
      << text.err;

  cpu_set_t ours;
  ASSERT_EQ(sched_getaffinity(0, sizeof ours, &ours), 0);
  if (CPU_COUNT(&ours) < sysconf(_SC_NPROCESSORS_ONLN) || sysconf(_SC_NPROCESSORS_ONLN) == 1)
    GTEST_SKIP() << "this host has one CPU, or this test runs confined to some";
  const Result free = run(tracer() + " --json --layer runtime -f device,query -- " FAKE_APP " loop 50000");
  ASSERT_EQ(free.status, 0) << free.err;
  EXPECT_FALSE(end_of(free.lines).at("overhead").at("processes").at(0).contains("waited_ns")) << free.out;
}

// The BPF programs are verified anew for each set of options (they are
// read-only globals the verifier prunes by), so every mode must load: on
// Linux 6.1 (scripts/qemu-6.1, docs/kernels.md) as on the newest kernel.
// Without uprobe sessions (the variable) only ct_session is not loaded.
TEST_F(Trace, LoadsInEveryMode) {
  const std::string timeline = temp_path("modes.perfetto");
  struct Mode {
    std::string env, options, expected;
  };
  for (const Mode& m : std::vector<Mode>{{"", "--json", "\"cudaMalloc\""},
                                         {"CUDATRACE_NO_UPROBE_SESSIONS=1 ", "--json", "\"cudaMalloc\""},
                                         {"", "--summary", "cudaMalloc"},
                                         {"", "--summary --perfetto " + timeline, "cudaMalloc"},
                                         {"", "--summary --by-range", "cudaMalloc"},
                                         {"", "--stack", "cudaMalloc"},
                                         // The verifier checks only the branches of the modes asked for.
                                         {"", "--py-stack --no-otel --json", "\"cudaMalloc\""},
                                         {"", "--stack --py-stack", "cudaMalloc"},
                                         {"", "--errors", "cudaErrorMemoryAllocation"},
                                         {"", "--min-us 1000", "cudaStreamSynchronize"},
                                         {"", "--every-layer", "cuMemAlloc_v2"},
                                         {"", "-f all", "cuMemAlloc_v2"},
                                         {"", "--max-overhead 50", "cudaMalloc"},
                                         // --otlp's in-kernel counts beside a trace (nothing listens at port 9).
                                         {"", "--otlp http://127.0.0.1:9 --json", "\"cudaMalloc\""}}) {
    const Result r = run(m.env + tracer() + " " + m.options + " -- " FAKE_APP " basic");
    // --max-overhead duty-cycles uprobe_multi links: refused without them
    // (exit 5 on a kernel before 6.6, 2 with --attach perf).
    if (m.options.rfind("--max-overhead", 0) == 0 && (r.status == 5 || r.status == 2) &&
        r.err.find("--max-overhead needs uprobe_multi links") != std::string::npos)
      continue;
    ASSERT_EQ(r.status, 0) << m.env << m.options << ": " << r.err;
    EXPECT_NE(r.out.find(m.expected), std::string::npos) << m.env << m.options << ": " << r.out;
  }
  std::remove(timeline.c_str());

  // Whole-node mode, counting for the exporter (no records; with --otlp,
  // records of the calls under a span) and not.
  for (const std::string options : {"--all-processes --prometheus 127.0.0.1:0",
                                    "--all-processes --prometheus 127.0.0.1:0 --otlp http://127.0.0.1:9",
                                    "--all-processes -o /dev/null"}) {
    const std::string err = temp_path("modes.err");
    const pid_t tracer_pid = fork();
    if (tracer_pid == 0) {
      const int fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(fd, STDERR_FILENO);
      execl("/bin/sh", "sh", "-c", ("exec " + tracer() + " " + options).c_str(), nullptr);
      _exit(127);
    }
    int status = -1;
    bool reaped = false;
    const auto tracing = [&] { return read_file(err).find("cudatrace: tracing every process") != std::string::npos; };
    const auto exited = [&] { return reaped || (reaped = waitpid(tracer_pid, &status, WNOHANG) == tracer_pid); };
    const bool up = wait_until([&] { return tracing() || exited(); }, 60s) && tracing();
    if (up) EXPECT_EQ(run(FAKE_APP " basic").status, 0);
    if (!reaped) kill(tracer_pid, up ? SIGINT : SIGKILL);
    if (!wait_until(exited, 20s)) {
      kill(tracer_pid, SIGKILL);
      waitpid(tracer_pid, &status, 0);
    }
    EXPECT_TRUE(up) << options << ": " << read_file(err);
    EXPECT_EQ(status, 0) << options << ": " << read_file(err);
    std::remove(err.c_str());
  }
}

TEST_F(Trace, ListApisMatchesTheDocs) {
  const Result r = run(tracer() + " -f all --nvtx --list-apis");
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(r.out, read_file(SOURCE_DIR "/docs/apis.md").substr(read_file(SOURCE_DIR "/docs/apis.md").find("| API |")))
      << "regenerate docs/apis.md with scripts/gen-docs.sh";
  // The guide's table of groups, between its markers.
  const auto table = r.out.find("\n| group |") + 1;
  const std::string groups = r.out.substr(table, r.out.find("\n\n", table) + 1 - table);
  const std::string guide = read_file(SOURCE_DIR "/docs/guide.md");
  const std::string start = "<!-- api-groups: scripts/gen-docs.sh writes this table from the API table -->\n";
  const auto at = guide.find(start);
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(guide.substr(at + start.size(), groups.size()), groups) << "regenerate docs/guide.md with scripts/gen-docs.sh";
  EXPECT_EQ(guide.substr(at + start.size() + groups.size(), 21), "<!-- /api-groups -->\n");
}

}  // namespace
