// End to end (root, real eBPF): the probe plan of issue 24. By default each
// asynchronous operation (launch, async copy and memset, event record,
// stream wait) traps once: it is recorded at the entry of the driver call
// that makes it, the runtime function that called it left unprobed;
// --every-layer brings back both layers with their returns; a filter that
// reads returns (--errors, --min-us, --stack) probes them. Probes are placed
// past each kind of prologue (tests/fixtures/prologues.S) and still decode
// exactly; -p names kernels looked up before it attached (the naming window).
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
// Its other calls: cudaMalloc nests cuMemAlloc_v2 (twice); the 2D and peer
// copies make no driver call the table has, so they stay at the runtime.
const std::map<std::string, std::size_t> kAsyncOthers = {
    {"cudaStreamCreate", 1}, {"cudaEventCreate", 1},     {"cudaMalloc", 2},          {"cuMemAlloc_v2", 2},
    {"cudaMemcpy2DAsync", 1}, {"cudaMemcpyPeerAsync", 1}, {"cudaStreamSynchronize", 1}};

// The driver records of fake_app async carry the runtime call's arguments.
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

// ---- The default: one trap per operation -------------------------------------------

TEST_F(ProbePlan, EachAsyncOperationIsRecordedOnceAtTheDriverAtEntry) {
  const Result r = run(tracer() + " --json -- " FAKE_APP " async");
  ASSERT_EQ(r.status, 0) << r.err;
  std::map<std::string, std::size_t> expected = kAsyncOthers;
  for (const auto& [runtime, driver] : kAsyncOps) ++expected[driver];
  EXPECT_EQ(counts(r), expected) << r.out;  // no runtime form of an operation made through the driver
  std::vector<std::string> driver_ops;
  std::size_t entry_only = 0;
  for (const json& c : calls(r)) {
    const std::string api = c["api"];
    if (!is_async(api)) {
      EXPECT_FALSE(c.contains("entry_only")) << c;
      EXPECT_EQ(c["ret"], 0) << c;
      continue;
    }
    ++entry_only;
    if (c["layer"] == "driver") driver_ops.push_back(api);
    // At entry: no latency, no status; outermost, as the program's own call was.
    EXPECT_EQ(c["entry_only"], true) << c;
    EXPECT_FALSE(c.contains("dur_ns")) << c;
    EXPECT_FALSE(c.contains("ret")) << c;
    EXPECT_EQ(c["depth"], 0) << c;
    EXPECT_FALSE(c.contains("parent_api")) << c;
  }
  std::vector<std::string> made;
  for (const auto& [runtime, driver] : kAsyncOps) made.push_back(driver);
  EXPECT_EQ(driver_ops, made);
  expect_async_driver_args(by_api(r));
  const json& end = end_of(r.lines);
  EXPECT_EQ(end["calls"], calls(r).size());
  EXPECT_EQ(end["lost"], 0);
  // One trap per asynchronous operation: its entry. The others: entry and return.
  ASSERT_EQ(end["overhead"]["processes"].size(), 1u) << end;
  const json& hits = end["overhead"]["processes"][0];
  EXPECT_EQ(hits["entry_hits"], calls(r).size()) << hits;
  EXPECT_EQ(hits["return_hits"], calls(r).size() - entry_only) << hits;

  // Text: "-" for the latency and status it does not have.
  const Result text = run(tracer() + " -- " FAKE_APP " async");
  ASSERT_EQ(text.status, 0) << text.err;
  std::size_t untimed = 0;
  for (const std::string& line : lines_of(text.out)) {
    std::smatch m;
    if (!std::regex_search(line, m, std::regex(R"( (cu[A-Za-z0-9_]+) +(\S+) (\S+) )"))) continue;
    if (!is_async(m[1])) continue;
    ++untimed;
    EXPECT_EQ(m[2], "-") << line;
    EXPECT_EQ(m[3], "-") << line;
  }
  EXPECT_EQ(untimed, entry_only) << text.out;
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
    EXPECT_EQ(c.value("entry_only", false), is_async(c["api"])) << c;
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
  EXPECT_EQ(c.at("cuLaunchHostFunc")[0].value("entry_only", false), true);
  const Result text = run(tracer() + " -- " DRIVER_APP " modules");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("waited: default: 1 launch (kernel_a), 1 host function"), std::string::npos) << text.out;
}

// ---- --every-layer: both layers, nested, each with its return --------------------------

TEST_F(ProbePlan, EveryLayerRecordsBothLayersNestedWithTheirReturns) {
  const Result r = run(tracer() + " -v --json --every-layer -- " FAKE_APP " async");
  ASSERT_EQ(r.status, 0) << r.err;
  const bool sessions = r.err.find("(uprobe sessions)") != std::string::npos;
  std::map<std::string, std::size_t> expected = kAsyncOthers;
  for (const auto& [runtime, driver] : kAsyncOps) ++expected[runtime], ++expected[driver];
  EXPECT_EQ(counts(r), expected) << r.out;
  std::vector<std::string> parents;
  for (const json& c : calls(r)) {
    if (!is_async(c["api"])) continue;
    if (c["layer"] == "runtime") {
      // The program's call: outermost, timed, with its status.
      EXPECT_EQ(c["depth"], 0) << c;
      EXPECT_FALSE(c.contains("entry_only")) << c;
      EXPECT_GE(c["dur_ns"].get<long>(), 0) << c;
      EXPECT_EQ(c["ret"], 0) << c;
      continue;
    }
    // The driver call made inside it, as before issue 24: nested, its
    // return unprobed where sessions can skip it (the parent's status covers it).
    EXPECT_EQ(c["depth"], 1) << c;
    parents.push_back(c["parent_api"]);
    EXPECT_EQ(c.value("entry_only", false), sessions) << c;
  }
  std::vector<std::string> runtime_ops;
  for (const auto& [runtime, driver] : kAsyncOps) runtime_ops.push_back(runtime);
  EXPECT_EQ(parents, runtime_ops);
  const auto c = by_api(r);
  expect_async_driver_args(c);
  const json& launch = c.at("cudaLaunchKernel")[0];
  EXPECT_EQ(launch["kernel"], "kernel_stub");
  EXPECT_EQ(launch["args"]["sharedMem"], 64);
  EXPECT_EQ(launch["args"]["stream"], "0x5010");
  EXPECT_EQ(c.at("cudaMemsetAsync")[0]["args"]["value"], 0xab);
  EXPECT_EQ(c.at("cudaLaunchKernel_ptsz")[0]["handle_ids"]["stream"], "per-thread");
  EXPECT_EQ(end_of(r.lines)["unmatched"], 0);
}

// ---- Filters that read a return probe it ----------------------------------------------

TEST_F(ProbePlan, ErrorsFilterSeesAFailedLaunchsStatus) {
  // By default the failed launch is recorded like the good one: at entry, no status.
  const Result plain = run(tracer() + " --json -- " FAKE_APP " bad-launch");
  ASSERT_EQ(plain.status, 0) << plain.err;
  const auto launches = calls(plain, "cuLaunchKernel");
  ASSERT_EQ(launches.size(), 2u) << plain.out;
  for (const json& l : launches) EXPECT_EQ(l["entry_only"], true) << l;
  EXPECT_EQ(launches[0]["args"]["grid"], json({0, 1, 1}));

  const Result r = run(tracer() + " --json --errors -- " FAKE_APP " bad-launch");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto failed = calls(r);
  ASSERT_EQ(failed.size(), 1u) << r.out;
  EXPECT_EQ(failed[0]["api"], "cuLaunchKernel");
  EXPECT_EQ(failed[0]["depth"], 0);
  EXPECT_EQ(failed[0]["ret"], 1);
  EXPECT_EQ(failed[0]["ret_name"], "CUDA_ERROR_INVALID_VALUE");
  EXPECT_GE(failed[0]["dur_ns"].get<long>(), 0);
  EXPECT_FALSE(failed[0].contains("entry_only"));
  EXPECT_EQ(failed[0]["args"]["grid"], json({0, 1, 1}));
}

TEST_F(ProbePlan, MinDurationFilterTimesAsyncOperations) {
  // Each launch sleeps 3 ms in the fake driver (a full launch queue).
  const Result r = run("FAKE_CUDA_LAUNCH_US=3000 " + tracer() + " --json --min-us 1500 -- " FAKE_APP " async");
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> slow;
  for (const json& c : calls(r)) {
    slow.push_back(c["api"]);
    EXPECT_FALSE(c.contains("entry_only")) << c;
    EXPECT_GE(c["dur_ns"].get<long>(), 1500000) << c;
    EXPECT_EQ(c["ret"], 0) << c;
  }
  EXPECT_EQ(slow, (std::vector<std::string>{"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx",
                                            "cuLaunchCooperativeKernel", "cudaStreamSynchronize"}))
      << r.out;
}

TEST_F(ProbePlan, StacksAreTakenAtTheReturnOfAsyncOperations) {
  const Result r = run(tracer() + " --json --stack -f launch,xfer,event,stream -- " FAKE_APP " async");
  ASSERT_EQ(r.status, 0) << r.err;
  std::map<std::string, std::size_t> expected;
  for (const auto& [runtime, driver] : kAsyncOps) ++expected[driver];
  for (const char* api : {"cudaMemcpy2DAsync", "cudaMemcpyPeerAsync", "cudaStreamCreate", "cudaEventCreate",
                          "cudaStreamSynchronize"})
    expected[api] = 1;
  EXPECT_EQ(counts(r), expected) << r.out;
  for (const json& c : calls(r)) {
    EXPECT_FALSE(c.contains("entry_only")) << c;
    EXPECT_EQ(c["ret"], 0) << c;
    EXPECT_EQ(c["depth"], 0) << c;
    ASSERT_TRUE(c.contains("stack")) << c;
    // Above the runtime's frames (for a driver call), the program's.
    bool from_the_program = false;
    for (const json& frame : c["stack"]) from_the_program |= frame["module"] == FAKE_APP;
    EXPECT_TRUE(from_the_program) << c;
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
void expect_prologue_calls_decoded(const std::vector<json>& c, bool every_layer) {
  std::vector<std::string> apis;
  for (const json& call : c) apis.push_back(call["api"]);
  std::vector<std::string> expected = {"cudaGetDevice", "cudaMalloc", "cudaSetDevice", "cudaSetDevice"};
  if (every_layer) expected.push_back("cudaLaunchKernel");  // else recorded at the driver: not probed
  expected.push_back("cuLaunchKernel");
  ASSERT_EQ(apis, expected);
  EXPECT_EQ(c[0]["args"]["device"], 7);
  EXPECT_EQ(c[0]["ret"], 0);
  EXPECT_EQ(c[1]["args"], json({{"devPtr", "0xd000001000"}, {"size", 4096}}));
  EXPECT_EQ(c[1]["ret"], 0);
  EXPECT_EQ(c[2]["args"]["device"], 0);
  EXPECT_EQ(c[2]["ret"], 0);
  EXPECT_EQ(c[3]["args"]["device"], 3);
  EXPECT_EQ(c[3]["ret"], 101);
  EXPECT_EQ(c[3]["ret_name"], "cudaErrorInvalidDevice");
  if (every_layer) {
    const json& launch = c[4];
    EXPECT_EQ(launch["args"]["grid"], json({4, 2, 1}));
    EXPECT_EQ(launch["args"]["block"], json({128, 1, 1}));
    EXPECT_EQ(launch["args"]["sharedMem"], 64);     // on the stack
    EXPECT_EQ(launch["args"]["stream"], "0x5010");  // on the stack
    EXPECT_EQ(launch["kernel"], "prologue_kernel");
    EXPECT_EQ(launch["ret"], 0);
  }
  // Not the driver's own file: a forward as far as cudatrace knows, probed with its return.
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
  for (const bool every_layer : {false, true}) {
    SCOPED_TRACE(every_layer ? "--every-layer" : "default");
    const Result r = run(tracer() + " -f all --json" + (every_layer ? " --every-layer" : "") + app);
    ASSERT_EQ(r.status, 0) << r.err;
    const std::vector<json> all = calls(r);
    const std::size_t per_lib = every_layer ? 6 : 5;
    ASSERT_EQ(all.size(), per_lib * prologue_kinds().size()) << r.out;
    for (std::size_t i = 0; i < prologue_kinds().size(); ++i) {
      SCOPED_TRACE(prologue_kinds()[i]);
      expect_prologue_calls_decoded(std::vector<json>(all.begin() + i * per_lib, all.begin() + (i + 1) * per_lib),
                                    every_layer);
    }
    EXPECT_EQ(end_of(r.lines)["lost"], 0);
  }
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
    // cudaLaunchKernel is recorded at the driver: 4 probes of 5 functions.
    const std::string summary = "lib_" + kind + ".so: 4 probes, " + (stepped ? "0" : "4") +
                                " on instructions the kernel emulates, " + (stepped ? "4" : "0") + " single-stepped";
    EXPECT_EQ(r.out.rfind(summary, 0), 0u) << r.out;
    const std::uint64_t offset = std::stoull(kPlaced.at(kind).substr(1));
    const auto syms = symbols(lib);
    for (const char* fn : {"cudaGetDevice", "cudaMalloc", "cudaSetDevice", "cudaLaunchKernel", "cuLaunchKernel"}) {
      const std::string how = std::string(fn) == "cudaLaunchKernel" ? "no: recorded at the driver" : "entry and return";
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
TEST_F(ProbePlan, CommandModeNamesRegisteredKernelsByTheirDriverHandle) {
  const Result r = run(tracer() + " --json -- " FAKE_APP " registered 3 </dev/null");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(counts(r), (std::map<std::string, std::size_t>{{"cuLaunchKernel", 7}})) << r.out;
  for (const json& c : calls(r)) {
    EXPECT_EQ(c["kernel"], kSaxpy) << c;
    EXPECT_EQ(c["args"]["f"], "0xc010") << c;
  }
}

// Attached after the lookup: cudatrace never saw handle 0xc010 named. The
// runtime launches are probed for a while (the naming window) so that each
// driver launch made inside one names its handle by the runtime's host stub.
void attach_after_the_lookup(const std::vector<std::string>& options, const std::string& kernel) {
  Child app({FAKE_APP, "registered", "3"});
  ASSERT_EQ(app.read_line().rfind("ready", 0), 0u);
  const std::string out = temp_path("naming.jsonl"), err = temp_path("naming.err");
  const pid_t tracer_pid = fork();
  if (tracer_pid == 0) {
    const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(o, STDOUT_FILENO);
    dup2(e, STDERR_FILENO);
    std::vector<std::string> args = {"-v", "--json"};
    args.insert(args.end(), options.begin(), options.end());
    args.insert(args.end(), {"-p", std::to_string(app.pid)});
    exec_tracer(args);
  }
  ASSERT_TRUE(wait_until([&] { return read_file(err).find("cudatrace: tracing process") != std::string::npos; }))
      << read_file(err);
  app.go();  // 3 launches inside the window
  const bool windowed = kernel != "?";
  if (windowed)
    EXPECT_TRUE(wait_until([&] { return read_file(err).find("kernel naming window closed") != std::string::npos; }))
        << read_file(err);
  app.go();  // 3 more after it: the handle keeps its name
  EXPECT_EQ(app.wait(), 0);
  int status = 0;
  EXPECT_TRUE(wait_until([&] { return waitpid(tracer_pid, &status, WNOHANG) == tracer_pid; }));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_file(err);
  const std::vector<json> lines = parse_lines(read_file(out));
  std::remove(out.c_str());
  std::remove(err.c_str());
  std::size_t launches = 0;
  for (const json& c : records(lines, "call")) {
    EXPECT_EQ(c["api"], "cuLaunchKernel") << c;  // the window's runtime records are dropped
    EXPECT_EQ(c["depth"], 0) << c;
    EXPECT_FALSE(c.contains("parent_api")) << c;
    EXPECT_EQ(c["args"]["f"], "0xc010") << c;
    EXPECT_EQ(c["kernel"], kernel) << c;
    ++launches;
  }
  EXPECT_EQ(launches, 6u);
  EXPECT_EQ(end_of(lines)["lost"], 0);
}

TEST_F(ProbePlan, AttachedAfterTheKernelLookupLaunchesAreNamedByTheNamingWindow) {
  attach_after_the_lookup({}, kSaxpy);
}

// Without the runtime layer there is no window, and nothing names the handle.
TEST_F(ProbePlan, WithoutTheNamingWindowSuchLaunchesAreUnnamed) { attach_after_the_lookup({"--layer", "driver"}, "?"); }

}  // namespace
