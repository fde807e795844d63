// Golden files of the call lines: one call of every argument type and every
// annotation, through the analyses, as the text and the JSON Lines writers
// write them (tests/data/golden/calls.txt, calls.jsonl), with a warning and
// the end. After a deliberate change of the output, regenerate them (and
// review the diff):
//   CUDATRACE_UPDATE_GOLDEN=1 build/tests/unit_tests --gtest_filter='CallGolden.*'
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "golden.h"
#include "cudatrace/analysis/pipeline.h"
#include "cudatrace/render/writer.h"
#include "json_checker.h"
#include "stream_feed.h"

namespace {

using namespace cudatrace;
using cudatrace_test::expect_golden;
using cudatrace_test::CallSpec;
using cudatrace_test::StreamFeed;

constexpr std::uint64_t kStart = 1'000'000;
constexpr std::uint64_t kStream = 0x5010, kEvent = 0xe010, kComm = 0xc0c0;


CallSpec spec(std::string symbol, std::vector<std::pair<std::string, std::uint64_t>> args) {
  CallSpec s;
  s.symbol = std::move(symbol);
  s.args = std::move(args);
  return s;
}

std::vector<std::uint8_t> bytes_of(std::string_view s) {
  std::vector<std::uint8_t> b(s.begin(), s.end());
  b.push_back(0);
  return b;
}

// A CUlaunchConfig: grid, block, shared memory, stream, no attributes.
std::vector<std::uint8_t> launch_config(std::uint64_t stream) {
  std::vector<std::uint8_t> b(CT_LAUNCH_CONFIG_SIZE, 0);
  const std::uint32_t dims[7] = {8, 4, 1, 256, 1, 1, 1024};
  std::memcpy(b.data(), dims, sizeof dims);
  std::memcpy(b.data() + 32, &stream, sizeof stream);
  return b;
}

// The calls, in order: each a case of the value model the writers render.
std::vector<CallSpec> calls() {
  std::vector<CallSpec> c;
  c.push_back(spec("cudaStreamCreate", {{"pStream", kStream}}));                           // OutStream, an id
  c.push_back(spec("cudaEventCreateWithFlags", {{"event", kEvent}, {"flags", 2}}));         // OutEvent, Flags
  c.push_back(spec("cudaMalloc", {{"devPtr", 0xd000}, {"size", 4096}}));                   // OutPtr, Size
  CallSpec failed = spec("cudaMalloc", {{"devPtr", 0}, {"size", 1ull << 40}});              // a failure
  failed.ret = 2;
  c.push_back(failed);
  c.push_back(spec("cudaMallocPitch", {{"devPtr", 0xd100}, {"pitch", 512}, {"width", 500}, {"height", 3}}));  // OutSize
  c.push_back(spec("cudaGetDevice", {{"device", 1}}));                                       // OutInt
  c.push_back(spec("cudaSetDevice", {{"device", 0xffffffff}}));                              // Int
  CallSpec memcpy = spec("cudaMemcpyAsync",                                                  // Ptr, MemcpyKind, Stream
                         {{"dst", 0xd000}, {"src", 0x7000}, {"count", 64}, {"kind", 1}, {"stream", kStream}});
  memcpy.caller = 0x401000;  // pageable: a warning first
  c.push_back(memcpy);
  c.push_back(spec("cudaLaunchKernel", {{"func", 0xa7}, {"stream", kStream}}));             // Func, Dim3, a kernel name
  CallSpec driver = spec("cuLaunchKernel", {{"f", 0xa1}, {"hStream", kStream}});             // Dim3Split, UInt, nested
  driver.parent = "cudaLaunchKernel";
  c.push_back(driver);
  CallSpec rejected = spec("cudaLaunchKernel", {{"func", 0xa2}, {"stream", 0}});           // a failed launch
  rejected.ret = 209;  // cudaErrorNoKernelImageForDevice: failed in the runtime
  c.push_back(rejected);
  CallSpec config = spec("cudaLaunchKernelExC", {{"func", 0xa3}, {"args", 0x7ff0}});         // LaunchConfig
  config.payload = launch_config(kStream);
  c.push_back(config);
  c.push_back(spec("cudaEventRecord", {{"event", kEvent}, {"stream", kStream}}));           // Event
  c.push_back(spec("cudaStreamWaitEvent", {{"stream", 0}, {"event", kEvent}, {"flags", 0}}));  // waits:
  c.push_back(spec("cudaEventElapsedTime", {{"ms", 0x3fc00000}, {"start", kEvent}, {"end", kEvent}}));  // OutFloat
  c.push_back(spec("cudaStreamSynchronize", {{"stream", kStream}}));                          // waited:
  c.push_back(spec("cuCtxGetCurrent", {{"pctx", 0xcc00}}));                                   // OutHandle
  c.push_back(spec("cuCtxSetCurrent", {{"ctx", 0xcc00}}));                                    // Handle
  CallSpec lookup = spec("cuModuleGetFunction", {{"hfunc", 0xf00}, {"hmod", 0xb00}});        // OutFunc, String
  lookup.payload = bytes_of("evil\nname\x1b[2J");
  c.push_back(lookup);
  CallSpec registered = spec("__cudaRegisterFunction", {{"fatCubinHandle", 0x1}, {"hostFun", 0xa4}});  // void
  registered.payload = bytes_of("_Z2k4v");
  c.push_back(registered);
  CallSpec push = spec("nvtxRangePush", {{"domain", 0}});                               // an NVTX range opens
  push.payload = bytes_of("step");
  c.push_back(push);
  c.push_back(spec("cudaDeviceSynchronize", {}));                                             // inside it: nvtx
  c.push_back(spec("nvtxRangePop", {{"domain", 0}}));
  CallSpec id = spec("ncclGetUniqueId", {{"uniqueId", 0x7100}});                              // NcclUniqueIdPtr
  id.payload.assign(kNcclUniqueIdBytes, 7);
  c.push_back(id);
  CallSpec init = spec("ncclCommInitRank", {{"comm", kComm}, {"nranks", 2}, {"rank", 1}});  // NcclUniqueId
  init.payload.assign(kNcclUniqueIdBytes, 7);
  c.push_back(init);
  c.push_back(spec("ncclAllReduce", {{"sendbuff", 0xd000}, {"recvbuff", 0xd100}, {"count", 256}, {"datatype", 7},
                                     {"op", 0}, {"comm", kComm}, {"stream", kStream}}));  // NcclDataType, RedOp, nccl
  c.push_back(spec("ncclReduce", {{"sendbuff", 0xd000}, {"recvbuff", 0xd100}, {"count", 4}, {"datatype", 99},
                                  {"op", 9}, {"root", 0}, {"comm", kComm}, {"stream", kStream}}));  // unknown enums
  CallSpec all = spec("ncclCommInitAll", {{"comm", 0x7200}, {"ndev", 1}, {"devlist", 0}});   // NcclCommArray
  const std::uint64_t first = 0xc1c1;
  all.payload.assign(reinterpret_cast<const std::uint8_t*>(&first), reinterpret_cast<const std::uint8_t*>(&first) + 8);
  c.push_back(all);
  CallSpec open = spec("cudaStreamSynchronize", {{"stream", kStream}});                      // never returned
  open.unfinished = true;
  c.push_back(open);
  return c;
}

// Every call through the analyses and both writers, as the driver routes
// them; a call gets a user stack of two frames when it is a device synchronisation.
TEST(CallGolden, EveryArgumentTypeAndAnnotation) {
  StreamFeed decoder;
  PipelineOptions options = StreamFeed::all_apis();
  options.nvtx = true;
  Pipeline pipeline(options);
  auto text = make_text_writer(kStart, false);
  auto full = make_text_writer(kStart, true);
  auto json = make_json_writer();
  std::uint64_t ts = kStart;
  for (CallSpec s : calls()) {
    s.ts_ns = ts += 1500;
    Call& c = decoder.decode(s);
    const CallAnalysis& a = pipeline.on_call(c);
    if (a.streams && a.streams->pageable_host_ptr) {
      const Warning w{"pageable_async_copy", *a.streams->pageable_host_ptr, "app+0x1000 (main+0x10)",
                      "cudaMemcpyAsync from pageable host memory 0x7000 at app+0x1000 (main+0x10): the copy is "
                      "synchronous"};
      json->warning(c, w);
    }
    if (s.symbol == "cudaDeviceSynchronize")
      user_stack(c).frames = {{0x401234, "main", 0x24, "/opt/app/bin/app", 0x1234}, {0x7f0000001000, "", 0, "", 0}};
    for (Writer* w : {text.get(), full.get(), json.get()}) w->call(c, a);
    user_stack(c).frames.clear();  // the decoder's call is reused
  }
  EndStats end;
  end.calls = 28;
  end.unfinished = 1;
  end.kernel.ring_buffer = 2;
  end.kernel.unmatched = 1;
  CostReport cost;
  cost.per_hit.entry_ns = cost.per_hit.entry_wall_ns = 600;
  cost.per_hit.return_ns = cost.per_hit.return_wall_ns = 400;
  cost.workload_factor = 1.5;
  ProcessCost p;
  p.pid = 100;
  p.comm = "app";
  p.entry_hits = 40;
  p.return_hits = 30;
  p.added_ns = 60000;
  p.cpu_ns = 3000000;
  cost.processes.push_back(p);
  end.cost = cost;
  fmt::memory_buffer text_end, json_messages;
  text->end(end, text_end);
  json->end(end, json_messages);
  EXPECT_EQ(json_messages.size(), 0u) << "JSON's end is a line of the trace";
  const std::string json_text = fmt::to_string(*json->buffer());
  for (std::size_t start = 0; start < json_text.size();) {
    const std::size_t nl = json_text.find('\n', start);
    cudatrace_test::JsonValue v;
    std::string error;
    EXPECT_TRUE(cudatrace_test::JsonParser::parse(json_text.substr(start, nl - start), v, error))
        << error << "\n" << json_text.substr(start, nl - start);
    start = nl + 1;
  }
  expect_golden("calls.txt", fmt::to_string(*text->buffer()) + "--- --full-names\n" +
                                 fmt::to_string(*full->buffer()) + "--- stderr\n" + fmt::to_string(text_end));
  expect_golden("calls.jsonl", json_text);
}

}  // namespace
