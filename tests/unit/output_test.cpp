#include "cudatrace/render/writer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "cudatrace/decode/kernel_names.h"
#include "cudatrace/render/format.h"
#include "cudatrace/render/output_file.h"
#include "cudatrace/render/output_writer.h"
#include "json_checker.h"
#include "record_builder.h"
#include "stream_feed.h"

namespace {

using namespace cudatrace;
using cudatrace_test::float_bits;
using cudatrace_test::init_rec;
using cudatrace_test::JsonParser;
using cudatrace_test::JsonValue;
using cudatrace_test::RecBuf;
using cudatrace_test::set_string_payload;

std::string str(const fmt::memory_buffer& b) { return std::string(b.data(), b.size()); }

// Renders one call (or unfinished call) through `out` and returns the buffer.
std::string render(Writer& out, const RecBuf& b, KernelNames* names = nullptr) {
  Call c;
  EXPECT_TRUE(decode_call(b.rec, names, c));
  out.buffer()->clear();
  out.call(c, CallAnalysis{});
  return str(*out.buffer());
}

std::string json_line(const RecBuf& b, KernelNames* names = nullptr) {
  auto out = make_json_writer();
  return render(*out, b, names);
}

constexpr std::uint64_t kStart = 1'000'000'000;

std::string text_line(const RecBuf& b, KernelNames* names = nullptr, bool full_names = false) {
  auto out = make_text_writer(kStart, full_names);
  return render(*out, b, names);
}

// Asserts that `line` is exactly one newline-terminated JSON object and returns it parsed.
JsonValue parse_line(const std::string& line) {
  JsonValue v;
  EXPECT_FALSE(line.empty());
  if (line.empty()) return v;
  EXPECT_EQ(line.back(), '\n') << line;
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "more than one line: " << line;
  std::string err;
  EXPECT_TRUE(JsonParser::parse(std::string_view(line).substr(0, line.size() - 1), v, err)) << err << "\n" << line;
  EXPECT_EQ(v.kind, JsonValue::Object);
  return v;
}

// The fixed-width text prefix for a top-level call at ts 3.25 s after kStart.
const std::string kTextPrefix = "2.250000     app                 1234    1235 ";

void malloc_rec(RecBuf& b) {
  init_rec(b, "cudaMalloc");
  b.rec.ts_ns = kStart + 2'250'000'000;
  b.rec.args[0] = 0x7ffc12340000;
  b.rec.args[1] = 4096;
  b.rec.outs[0] = 0x7f0000200000;
}

// ---- JSON ------------------------------------------------------------------

TEST(JsonOutput, HeaderWritesNothing) {
  auto out = make_json_writer();
  out->header();
  EXPECT_EQ(out->buffer()->size(), 0u);
}

TEST(JsonOutput, SuccessfulCallLine) {
  RecBuf b;
  malloc_rec(b);
  b.rec.ts_ns = 1000;
  const std::string line = json_line(b);
  EXPECT_EQ(line,
            R"({"type":"call","ts_ns":1000,"pid":1234,"tid":1235,"comm":"app","layer":"runtime","api":"cudaMalloc",)"
            R"("dur_ns":2500,"ret":0,"ret_name":"cudaSuccess","depth":0,"args":{"devPtr":"0x7f0000200000","size":4096}})"
            "\n");
  const JsonValue v = parse_line(line);
  ASSERT_NE(v.get("args"), nullptr);
  EXPECT_EQ(v.get("args")->get("devPtr")->text, "0x7f0000200000");
  EXPECT_FALSE(v.has("parent_api"));
  EXPECT_FALSE(v.has("kernel"));
}

TEST(JsonOutput, FailedCallLineHasNullOutParam) {
  RecBuf b;
  malloc_rec(b);
  b.rec.ts_ns = 1000;
  b.rec.ret = 2;
  const std::string line = json_line(b);
  EXPECT_EQ(line,
            R"({"type":"call","ts_ns":1000,"pid":1234,"tid":1235,"comm":"app","layer":"runtime","api":"cudaMalloc",)"
            R"("dur_ns":2500,"ret":2,"ret_name":"cudaErrorMemoryAllocation","depth":0,"args":{"devPtr":null,"size":4096}})"
            "\n");
  parse_line(line);
}

TEST(JsonOutput, UnknownReturnCodeHasNullName) {
  RecBuf b;
  init_rec(b, "cuCtxSynchronize");
  b.rec.ret = 12345;
  const std::string line = json_line(b);
  EXPECT_EQ(line,
            R"({"type":"call","ts_ns":1000,"pid":1234,"tid":1235,"comm":"app","layer":"driver","api":"cuCtxSynchronize",)"
            R"("dur_ns":2500,"ret":12345,"ret_name":null,"depth":0,"args":{}})"
            "\n");
  parse_line(line);
}

TEST(JsonOutput, UnfinishedLineHasNoDurationOrReturn) {
  RecBuf b;
  malloc_rec(b);
  b.rec.ts_ns = 1000;
  b.rec.type = CT_REC_UNFINISHED;
  b.rec.dur_ns = 0;
  const std::string line = json_line(b);
  EXPECT_EQ(line,
            R"({"type":"unfinished","ts_ns":1000,"pid":1234,"tid":1235,"comm":"app","layer":"runtime",)"
            R"("api":"cudaMalloc","depth":0,"args":{"devPtr":null,"size":4096}})"
            "\n");
  const JsonValue v = parse_line(line);
  EXPECT_FALSE(v.has("ret"));
  EXPECT_FALSE(v.has("dur_ns"));
}

TEST(JsonOutput, EndLine) {
  auto out = make_json_writer();
  EndStats s;
  s.calls = 10;
  s.unfinished = 1;
  s.kernel.ring_buffer = 2;
  s.kernel.thread_table = 3;
  s.kernel.depth_overflow = 4;
  s.kernel.unmatched = 5;
  s.kernel.control = 6;
  s.lost_output = 7;
  fmt::memory_buffer summary;
  out->end(s, summary);
  const std::string line = str(*out->buffer());
  EXPECT_EQ(line,
            R"({"type":"end","calls":10,"lost":16,"unfinished":1,)"
            R"("lost_detail":{"ring_buffer":2,"thread_table":3,"depth_overflow":4,"output":7,"control":6},)"
            R"("unmatched":5})"
            "\n");
  EXPECT_EQ(summary.size(), 0u);  // JSON mode: the end record is in the trace
  const JsonValue v = parse_line(line);
  EXPECT_EQ(v.get("lost")->text, "16");
  EXPECT_EQ(v.get("lost_detail")->get("control")->text, "6");
  EXPECT_EQ(v.get("lost_detail")->get("output")->text, "7");
}

TEST(JsonOutput, EndLineAllZero) {
  auto out = make_json_writer();
  fmt::memory_buffer summary;
  out->end(EndStats{}, summary);
  EXPECT_EQ(str(*out->buffer()),
            R"({"type":"end","calls":0,"lost":0,"unfinished":0,)"
            R"("lost_detail":{"ring_buffer":0,"thread_table":0,"depth_overflow":0,"output":0,"control":0},)"
            R"("unmatched":0})"
            "\n");
}

TEST(JsonOutput, HostileCommStaysValidOneLine) {
  RecBuf b;
  init_rec(b, "cudaFree");
  const char comm[] = {'a', '"', '\\', '\n', '\xff', 'b', '\0'};
  std::memcpy(b.rec.comm, comm, sizeof comm);
  b.rec.args[0] = 0x10;
  const std::string line = json_line(b);
  EXPECT_NE(line.find(R"("comm":"a\"\\\n\ufffdb",)"), std::string::npos) << line;
  const JsonValue v = parse_line(line);
  EXPECT_EQ(v.get("comm")->text, "a\"\\\n\xef\xbf\xbd" "b");
}

TEST(JsonOutput, CommOfSixteenBytesWithControlCharacters) {
  RecBuf b;
  init_rec(b, "cudaFree");
  std::memcpy(b.rec.comm, "\t\x7f\x01\r\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80zz\xe4", CT_COMM_LEN);  // unterminated
  const std::string line = json_line(b);
  const JsonValue v = parse_line(line);
  EXPECT_NE(line.find(R"("comm":"\t\u007f\u0001\r)" "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80" R"(zz\ufffd",)"),
            std::string::npos)
      << line;
}

TEST(JsonOutput, NestedCallHasDepthAndParent) {
  RecBuf b;
  init_rec(b, "cuMemAlloc_v2");
  b.rec.depth = 1;
  b.rec.parent_api = cudatrace_test::api_id("cudaMalloc");
  b.rec.args[1] = 4096;
  b.rec.outs[0] = 0x7f0000200000;
  const std::string line = json_line(b);
  EXPECT_EQ(line,
            R"({"type":"call","ts_ns":1000,"pid":1234,"tid":1235,"comm":"app","layer":"driver","api":"cuMemAlloc_v2",)"
            R"("dur_ns":2500,"ret":0,"ret_name":"CUDA_SUCCESS","depth":1,"parent_api":"cudaMalloc",)"
            R"("args":{"dptr":"0x7f0000200000","bytesize":4096}})"
            "\n");
  const JsonValue v = parse_line(line);
  EXPECT_EQ(v.get("depth")->text, "1");
  EXPECT_EQ(v.get("parent_api")->text, "cudaMalloc");
}

void launch_rec(RecBuf& b) {
  init_rec(b, "cudaLaunchKernel");
  b.rec.ts_ns = kStart + 2'250'000'000;
  b.rec.args[0] = 0x401136;
  b.rec.args[1] = 64 | (std::uint64_t(2) << 32);
  b.rec.args[2] = 3;
  b.rec.args[3] = 256 | (std::uint64_t(1) << 32);
  b.rec.args[4] = 1;
  b.rec.args[5] = 0x7ffd00001000;
  b.rec.args[6] = 0;
  b.rec.args[7] = 0;
}

void learn_add_one(KernelNames& names, RecBuf& reg) {
  init_rec(reg, "__cudaRegisterFunction");
  reg.rec.args[1] = 0x401136;
  set_string_payload(reg, "_Z6addOnePfi");
  Call c;
  ASSERT_TRUE(decode_call(reg.rec, &names, c));
  names.learn(c);
}

TEST(JsonOutput, LaunchHasKernelFields) {
  KernelNames names;
  RecBuf reg, b;
  learn_add_one(names, reg);
  launch_rec(b);
  b.rec.ts_ns = 1000;
  const std::string line = json_line(b, &names);
  EXPECT_EQ(line,
            R"({"type":"call","ts_ns":1000,"pid":1234,"tid":1235,"comm":"app","layer":"runtime",)"
            R"("api":"cudaLaunchKernel","dur_ns":2500,"ret":0,"ret_name":"cudaSuccess","depth":0,)"
            R"("args":{"func":"0x401136","grid":[64,2,3],"block":[256,1,1],"args":"0x7ffd00001000","sharedMem":0,)"
            R"J("stream":"default"},"kernel":"addOne(float*, int)","kernel_mangled":"_Z6addOnePfi","kernel_short":"addOne"})J"
            "\n");
  const JsonValue v = parse_line(line);
  ASSERT_EQ(v.get("args")->get("grid")->kind, JsonValue::Array);
  EXPECT_EQ(v.get("args")->get("grid")->items.size(), 3u);
}

TEST(JsonOutput, LaunchOfUnknownKernelSaysQuestionMark) {
  RecBuf b;
  launch_rec(b);
  const std::string line = json_line(b);
  EXPECT_NE(line.find(R"(},"kernel":"?","kernel_mangled":"?","kernel_short":"?"})"), std::string::npos) << line;
  parse_line(line);
}

TEST(JsonOutput, VoidReturnHasNoRet) {
  RecBuf b;
  init_rec(b, "__cudaRegisterFunction");
  b.rec.args[0] = 0x5555000e0000;
  b.rec.args[1] = 0x401136;
  b.rec.ret = 77;  // garbage rax
  set_string_payload(b, "_Z6addOnePfi");
  const std::string line = json_line(b);
  EXPECT_EQ(line,
            R"({"type":"call","ts_ns":1000,"pid":1234,"tid":1235,"comm":"app","layer":"runtime",)"
            R"("api":"__cudaRegisterFunction","dur_ns":2500,"depth":0,)"
            R"("args":{"fatCubinHandle":"0x5555000e0000","hostFun":"0x401136","deviceFun":"_Z6addOnePfi"}})"
            "\n");
  const JsonValue v = parse_line(line);
  EXPECT_FALSE(v.has("ret"));
  EXPECT_FALSE(v.has("ret_name"));
}

TEST(JsonOutput, HostileStringPayloadIsEscaped) {
  RecBuf b;
  init_rec(b, "cuModuleGetFunction");
  b.rec.outs[0] = 0x5555cc000000;
  set_string_payload(b, "k\"\n\xff");
  const std::string line = json_line(b);
  EXPECT_NE(line.find(R"("name":"k\"\n\ufffd")"), std::string::npos) << line;
  parse_line(line);
}

TEST(JsonOutput, EnumsStreamsFloatsAndUnavailableValues) {
  RecBuf b;
  init_rec(b, "cudaMemcpyAsync");
  b.rec.args[0] = 0x1000;
  b.rec.args[1] = 0x2000;
  b.rec.args[2] = 64;
  b.rec.args[3] = 1;
  b.rec.args[4] = 2;
  std::string line = json_line(b);
  EXPECT_NE(line.find(R"("args":{"dst":"0x1000","src":"0x2000","count":64,"kind":"cudaMemcpyHostToDevice",)"
                      R"("stream":"cudaStreamPerThread"})"),
            std::string::npos)
      << line;
  parse_line(line);

  b.rec.args[3] = 9;  // unknown kind: the raw number
  line = json_line(b);
  EXPECT_NE(line.find(R"("kind":9,)"), std::string::npos) << line;
  parse_line(line);

  init_rec(b, "cudaEventElapsedTime");
  b.rec.outs[0] = float_bits(1.5f);
  b.rec.args[1] = 0xa;
  b.rec.args[2] = 0xb;
  line = json_line(b);
  EXPECT_NE(line.find(R"("args":{"ms":1.5,"start":"0xa","end":"0xb"})"), std::string::npos) << line;
  parse_line(line);

  init_rec(b, "cudaSetDevice");
  b.rec.args[0] = 0xffffffff;
  line = json_line(b);
  EXPECT_NE(line.find(R"("args":{"device":-1})"), std::string::npos) << line;
  parse_line(line);
}

TEST(JsonOutput, NonFiniteFloatOutStillGivesValidJson) {
  // Regression: doubles were formatted with "{}", which prints nan / inf (not
  // JSON). An elapsed-time out-param is read from process memory, so any bit
  // pattern can reach the encoder; non-finite values are written as null.
  RecBuf b;
  init_rec(b, "cudaEventElapsedTime");
  for (std::uint32_t bits : {0x7fc00000u, 0xffc00001u, 0x7f800000u, 0xff800000u}) {
    b.rec.outs[0] = bits;
    const std::string line = json_line(b);
    JsonValue v;
    std::string err;
    EXPECT_TRUE(JsonParser::parse(std::string_view(line).substr(0, line.size() - 1), v, err))
        << "float bits " << std::hex << bits << ": " << err << "\n" << line;
    EXPECT_NE(line.find(R"("args":{"ms":null,"start":"0x0","end":"0x0"})"), std::string::npos) << line;
  }
  // Finite extremes stay numbers.
  b.rec.outs[0] = 0x7f7fffff;  // FLT_MAX
  std::string line = json_line(b);
  EXPECT_NE(line.find(R"("ms":3.4028234663852886e+38,)"), std::string::npos) << line;
  parse_line(line);
  b.rec.outs[0] = 0x00000001;  // smallest subnormal
  line = json_line(b);
  EXPECT_NE(line.find(R"("ms":1.401298464324817e-45,)"), std::string::npos) << line;
  parse_line(line);
  b.rec.outs[0] = 0x80000000;  // -0.0
  line = json_line(b);
  EXPECT_NE(line.find(R"("ms":-0,)"), std::string::npos) << line;
  parse_line(line);
}

TEST(JsonOutput, CallsAppendToTheBuffer) {
  auto out = make_json_writer();
  RecBuf a, b;
  malloc_rec(a);
  init_rec(b, "cudaDeviceSynchronize");
  Call ca, cb;
  ASSERT_TRUE(decode_call(a.rec, nullptr, ca));
  ASSERT_TRUE(decode_call(b.rec, nullptr, cb));
  out->call(ca, CallAnalysis{});
  out->call(cb, CallAnalysis{});
  const std::string all = str(*out->buffer());
  const std::size_t nl = all.find('\n');
  ASSERT_NE(nl, std::string::npos);
  parse_line(all.substr(0, nl + 1));
  parse_line(all.substr(nl + 1));
  EXPECT_NE(all.find(R"("api":"cudaDeviceSynchronize")"), std::string::npos);
}

// ---- Text ------------------------------------------------------------------

TEST(TextOutput, Header) {
  auto out = make_text_writer(kStart, false);
  out->header();
  EXPECT_EQ(str(*out->buffer()),
            "TIME(s)      COMM                 PID     TID API                             LAT(us) RET ARGS\n");
}

TEST(TextOutput, SuccessfulCallLine) {
  RecBuf b;
  malloc_rec(b);
  EXPECT_EQ(text_line(b), kTextPrefix + "cudaMalloc                        2.500 0 devPtr=0x7f0000200000 size=4096\n");
}

// A launch the runtime refused: latency and status like any call.
void rejected_launch(RecBuf& b) {
  init_rec(b, "cudaLaunchKernel");
  b.rec.ret = 209;  // cudaErrorNoKernelImageForDevice
}

TEST(TextOutput, FailedLaunchHasLatencyAndStatus) {
  RecBuf b;
  rejected_launch(b);
  const std::string line = text_line(b);
  EXPECT_NE(line.find("cudaLaunchKernel                  2.500 cudaErrorNoKernelImageForDevice func="), std::string::npos)
      << line;
}

TEST(JsonOutput, FailedLaunchHasDurationAndReturn) {
  RecBuf b;
  rejected_launch(b);
  Call c;
  ASSERT_TRUE(decode_call(b.rec, nullptr, c));
  EXPECT_TRUE(c.failed());
  EXPECT_FALSE(c.counted());
  const JsonValue v = parse_line(json_line(b));
  EXPECT_FALSE(v.has("entry_only"));
  EXPECT_EQ(v.get("dur_ns")->text, "2500");
  EXPECT_EQ(v.get("ret")->text, "209");
  EXPECT_EQ(v.get("ret_name")->text, "cudaErrorNoKernelImageForDevice");
}

TEST(TextOutput, FailedCallShowsErrorName) {
  RecBuf b;
  malloc_rec(b);
  b.rec.ret = 2;
  EXPECT_EQ(text_line(b),
            kTextPrefix + "cudaMalloc                        2.500 cudaErrorMemoryAllocation devPtr=? size=4096\n");
  b.rec.ret = 12345;
  EXPECT_EQ(text_line(b), kTextPrefix + "cudaMalloc                        2.500 12345 devPtr=? size=4096\n");
}

TEST(TextOutput, UnfinishedLine) {
  RecBuf b;
  malloc_rec(b);
  b.rec.type = CT_REC_UNFINISHED;
  b.rec.dur_ns = 0;
  EXPECT_EQ(text_line(b), kTextPrefix + "cudaMalloc                            - unfinished devPtr=? size=4096\n");
}

TEST(TextOutput, TimestampBeforeStartShowsZero) {
  RecBuf b;
  malloc_rec(b);
  b.rec.ts_ns = kStart - 1;
  const std::string line = text_line(b);
  EXPECT_EQ(line.substr(0, 13), "0.000000     ");
}

TEST(TextOutput, NestedCallIsIndentedTwoSpacesPerLevel) {
  RecBuf b;
  init_rec(b, "cuMemAlloc_v2");
  b.rec.ts_ns = kStart + 2'250'000'000;
  b.rec.depth = 1;
  b.rec.parent_api = cudatrace_test::api_id("cudaMalloc");
  b.rec.args[1] = 4096;
  b.rec.outs[0] = 0x7f0000200000;
  EXPECT_EQ(text_line(b),
            kTextPrefix + "  cuMemAlloc_v2                   2.500 0 dptr=0x7f0000200000 bytesize=4096\n");
  b.rec.depth = 2;
  EXPECT_EQ(text_line(b).substr(kTextPrefix.size(), 20), "    cuMemAlloc_v2   ");
}

TEST(TextOutput, LaunchShowsQuotedKernelName) {
  KernelNames names;
  RecBuf reg, b;
  learn_add_one(names, reg);
  launch_rec(b);
  EXPECT_EQ(text_line(b, &names),
            kTextPrefix +
                "cudaLaunchKernel                  2.500 0 grid=(64,2,3) block=(256,1,1) "
                "args=0x7ffd00001000 sharedMem=0 stream=default kernel=\"addOne\"\n");
  EXPECT_EQ(text_line(b, &names, true),
            kTextPrefix +
                "cudaLaunchKernel                  2.500 0 func=0x401136 grid=(64,2,3) block=(256,1,1) "
                "args=0x7ffd00001000 sharedMem=0 stream=default kernel=\"addOne(float*, int)\"\n");
  EXPECT_EQ(text_line(b),
            kTextPrefix +
                "cudaLaunchKernel                  2.500 0 func=0x401136 grid=(64,2,3) block=(256,1,1) "
                "args=0x7ffd00001000 sharedMem=0 stream=default kernel=?\n");
}

// Issue 17: a PyTorch launch (a kernel of the H200 run in docs/gpu-check-output.txt
// whose demangled name is 5,000 characters) still fits a wide terminal.
TEST(TextOutput, PyTorchLaunchFitsAWideTerminal) {
  KernelNames names;
  RecBuf reg, b;
  init_rec(reg, "__cudaRegisterFunction", 2589, "python3");
  reg.rec.args[1] = 0x7f3a2c0a1b20;
  set_string_payload(reg, "_ZN2at6native54_GLOBAL__N__d8ceb000_21_DistributionNormal_cu_0c5b6e8543distribution_elementwise_grid_stride_kernelIfLi4EZNS0_9templates4cuda20normal_and_transformIffPNS_17CUDAGeneratorImplEZZZNS4_13normal_kernelIS7_EEvRKNS_10TensorBaseEddT_ENKUlvE_clEvENKUlvE0_clEvEUlfE_EEvRNS_18TensorIteratorBaseET1_T2_EUlP24curandStatePhilox4_32_10E0_ZNS1_27distribution_nullary_kernelIff6float4S7_SM_SF_EEvSH_SJ_RKT3_T4_EUlifE_EEvlNS_15PhiloxCudaStateESI_SJ_");
  Call c;
  ASSERT_TRUE(decode_call(reg.rec, &names, c));
  names.learn(c);
  init_rec(b, "cudaLaunchKernel", 2589, "python3");
  b.rec.tid = 2589;
  b.rec.ts_ns = kStart + 12'345'678'901;
  b.rec.dur_ns = 5'432;
  b.rec.args[0] = 0x7f3a2c0a1b20;
  b.rec.args[1] = 1056 | (std::uint64_t(1) << 32);
  b.rec.args[2] = 1;
  b.rec.args[3] = 256 | (std::uint64_t(1) << 32);
  b.rec.args[4] = 1;
  b.rec.args[5] = 0x7ffd4a3b2c10;
  const std::string line = text_line(b, &names);
  EXPECT_NE(line.find(" kernel=\"distribution_elementwise_grid_stride_kernel\"\n"), std::string::npos) << line;
  EXPECT_LE(line.size(), 220u) << line;
  EXPECT_GT(text_line(b, &names, true).size(), 5000u);
}

TEST(TextOutput, VoidReturnShowsDash) {
  RecBuf b;
  init_rec(b, "__cudaRegisterFunction");
  b.rec.ts_ns = kStart + 2'250'000'000;
  b.rec.args[0] = 0x5555000e0000;
  b.rec.args[1] = 0x401136;
  b.rec.ret = 77;
  set_string_payload(b, "_Z6addOnePfi");
  EXPECT_EQ(text_line(b), kTextPrefix +
                              "__cudaRegisterFunction            2.500 - fatCubinHandle=0x5555000e0000 "
                              "hostFun=0x401136 deviceFun=\"_Z6addOnePfi\"\n");
}

TEST(TextOutput, EnumsAndFloats) {
  RecBuf b;
  init_rec(b, "cudaMemcpy");
  b.rec.args[3] = 3;
  std::string line = text_line(b);
  EXPECT_NE(line.find(" kind=cudaMemcpyDeviceToDevice\n"), std::string::npos) << line;
  b.rec.args[3] = 9;
  line = text_line(b);
  EXPECT_NE(line.find(" kind=9\n"), std::string::npos) << line;

  init_rec(b, "cudaEventElapsedTime");
  b.rec.outs[0] = float_bits(1.5f);
  line = text_line(b);
  EXPECT_NE(line.find(" ms=1.5 start=0x0 end=0x0\n"), std::string::npos) << line;
}

TEST(TextOutput, HostileCommStaysOneLine) {
  RecBuf b;
  init_rec(b, "cudaFree");
  b.rec.ts_ns = kStart + 2'250'000'000;
  const char comm[] = {'a', '"', '\\', '\n', '\xff', 'b', '\0'};
  std::memcpy(b.rec.comm, comm, sizeof comm);
  b.rec.args[0] = 0x10;
  const std::string line = text_line(b);
  EXPECT_EQ(line.find('\n'), line.size() - 1) << line;
  // The backslash is escaped too: "\x0a" can only be the newline byte.
  EXPECT_EQ(line, std::string("2.250000     ") + R"(a"\x5c\x0a\xffb )" +
                      "    1234    1235 cudaFree                          2.500 0 devPtr=0x10\n");
}

TEST(TextOutput, EveryControlByteInCommIsEscaped) {
  RecBuf b;
  init_rec(b, "cudaFree");
  for (int c = 0; c < 256; ++c) {
    if (c == 0) continue;
    b.rec.comm[0] = static_cast<char>(c);
    b.rec.comm[1] = '\0';
    const std::string line = text_line(b);
    EXPECT_EQ(line.find('\n'), line.size() - 1) << "byte " << c;
    EXPECT_EQ(line.find('\r'), std::string::npos) << "byte " << c;
    for (char ch : line) {
      const auto u = static_cast<unsigned char>(ch);
      EXPECT_TRUE(ch == '\n' || (u >= 0x20 && u < 0x7f)) << "raw byte " << int(u) << " for comm byte " << c;
    }
  }
}

TEST(TextOutput, HostileStringPayloadStaysOneLine) {
  RecBuf b;
  init_rec(b, "cuModuleGetFunction");
  b.rec.outs[0] = 0x5555cc000000;
  set_string_payload(b, "evil\nname\r\x1b[2J");
  const std::string line = text_line(b);
  EXPECT_EQ(line.find('\n'), line.size() - 1) << line;
  EXPECT_NE(line.find(R"( name="evil\nname\r\u001b[2J")"), std::string::npos) << line;
}

TEST(TextOutput, EndSummaryGoesToSummaryBuffer) {
  auto out = make_text_writer(kStart, false);
  EndStats s;
  s.calls = 10;
  s.unfinished = 1;
  s.kernel.ring_buffer = 2;
  s.kernel.thread_table = 3;
  s.kernel.depth_overflow = 4;
  s.kernel.unmatched = 5;
  s.kernel.control = 6;
  fmt::memory_buffer summary;
  out->end(s, summary);
  EXPECT_EQ(out->buffer()->size(), 0u);
  EXPECT_EQ(str(summary),
            "cudatrace: 10 calls traced, 9 lost, 1 unfinished\n"
            "cudatrace: lost 9 records (ring buffer full: 2, thread table full: 3, nesting deeper than 8: 4); "
            "try a larger --ring-mb or fewer groups with -f\n"
            "cudatrace: lost 6 loader or thread-exit notifications (ring buffer full)\n");
}

TEST(TextOutput, EndSummarySaysWhatTheOutputsConsumerDidNotRead) {
  auto out = make_text_writer(kStart, false);
  EndStats s;
  s.calls = 10;
  s.kernel.ring_buffer = 1;
  s.lost_output = 20;
  fmt::memory_buffer summary;
  out->end(s, summary);
  EXPECT_EQ(str(summary),
            "cudatrace: 10 calls traced, 21 lost, 0 unfinished\n"
            "cudatrace: lost 1 records (ring buffer full: 1, thread table full: 0, nesting deeper than 8: 0); "
            "try a larger --ring-mb or fewer groups with -f\n"
            "cudatrace: lost 20 records the output's consumer did not read in time (output buffer full); "
            "try a larger --buffer-mb, or -o FILE\n");
  fmt::memory_buffer same;
  append_end_text(same, s);  // what JSON mode prints when its end line cannot be written
  EXPECT_EQ(str(same), str(summary));
}

// The output failed (a full disk): the records were lost to that, not to a slow consumer.
TEST(TextOutput, EndSummaryOfAFailedOutputDoesNotBlameTheConsumer) {
  auto out = make_text_writer(kStart, false);
  EndStats s;
  s.calls = 10;
  s.lost_output = 20;
  s.output_failure = "writing /mnt/full/t: No space left on device";
  fmt::memory_buffer summary;
  out->end(s, summary);
  EXPECT_EQ(str(summary),
            "cudatrace: 10 calls traced, 20 lost, 0 unfinished\n"
            "cudatrace: lost 20 records that could not be written (writing /mnt/full/t: No space left on device)\n");
}

// What reaches a terminal from the traced system: no control byte, no
// invalid UTF-8, nothing but printable ASCII.
TEST(TerminalSafe, EscapesEveryByteThatIsNotPrintableAscii) {
  EXPECT_EQ(terminal_safe("python3 ./train.py"), "python3 ./train.py");
  EXPECT_EQ(terminal_safe(std::string("\x1b[2J\a\r\b\n\x9b\x7f\xc3(\0z", 14)),
            "\\x1b[2J\\x07\\x0d\\x08\\x0a\\x9b\\x7f\\xc3(\\x00z");
  EXPECT_EQ(terminal_safe("a\\x0a"), "a\\x5cx0a");  // a backslash too: "\x0a" is always a newline byte
  EXPECT_EQ(terminal_safe("\xe2\x89\x88"), "\\xe2\\x89\\x88");  // as the trace's comm column writes it
}

TEST(TextOutput, EndSummaryWithNothingLost) {
  auto out = make_text_writer(kStart, false);
  EndStats s;
  s.calls = 3;
  s.kernel.unmatched = 2;  // not a loss
  fmt::memory_buffer summary;
  out->end(s, summary);
  EXPECT_EQ(str(summary), "cudatrace: 3 calls traced, 0 lost, 0 unfinished\n");
}

TEST(EndStats, LostIsTheSumOfDroppedCalls) {
  EndStats s;
  s.kernel.ring_buffer = 1;
  s.kernel.thread_table = 10;
  s.kernel.depth_overflow = 100;
  s.kernel.unmatched = 1000;
  s.kernel.control = 10000;
  s.lost_output = 100000;
  EXPECT_EQ(s.lost(), 100111u);
}

// ---- Output files --------------------------------------------------------------

// -o and --perfetto on one file are found by the file, whatever its names.
TEST(OutputFile, SameFileIsFoundByTheFileNotTheName) {
  const std::string dir = "/tmp/cudatrace-same-" + std::to_string(getpid());
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  const std::string f = dir + "/trace", link = dir + "/link", hard = dir + "/hard", dangling = dir + "/dangling";
  EXPECT_TRUE(same_output_file(f, f));                        // neither exists yet
  EXPECT_TRUE(same_output_file(f, dir + "/../" + dir.substr(5) + "/./trace"));
  EXPECT_FALSE(same_output_file(f, dir + "/other"));
  ASSERT_EQ(symlink("trace2", dangling.c_str()), 0);          // creates trace2 when written
  EXPECT_TRUE(same_output_file(dangling, dir + "/trace2"));
  std::FILE* file = std::fopen(f.c_str(), "w");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(symlink(f.c_str(), link.c_str()), 0);
  ASSERT_EQ(::link(f.c_str(), hard.c_str()), 0);
  EXPECT_TRUE(same_output_file(link, f));
  EXPECT_TRUE(same_output_file(hard, link));
  EXPECT_TRUE(same_output_file(hard, fileno(file)));  // standard output redirected there, say
  EXPECT_FALSE(same_output_file("/dev/null", "/dev/null"));  // a device is no file to spoil
  std::fclose(file);
  for (const std::string& p : {f, link, hard, dangling}) unlink(p.c_str());
  rmdir(dir.c_str());
}

// A directory link that another user planted in a sticky world-writable
// directory is not written through, wherever it is on the path (issue 47:
// only the last component was checked, and the kernel checks none when
// fs.protected_symlinks is 0). Ours, and the directory owner's, are followed.
TEST(OutputFile, DirectoryLinkOfAnotherUserInAStickyDirectoryIsRefused) {
  const std::string sticky = "/tmp/cudatrace-sticky-" + std::to_string(getpid());
  const std::string victim = "/tmp/cudatrace-victim-" + std::to_string(getpid());
  ASSERT_EQ(mkdir(sticky.c_str(), 0755), 0);
  ASSERT_EQ(chmod(sticky.c_str(), 01777), 0);
  ASSERT_EQ(mkdir(victim.c_str(), 0700), 0);
  const std::string planted = sticky + "/planted", ours = sticky + "/ours";
  ASSERT_EQ(symlink(victim.c_str(), planted.c_str()), 0);
  ASSERT_EQ(lchown(planted.c_str(), 65534, 65534), 0);  // nobody's
  ASSERT_EQ(symlink(victim.c_str(), ours.c_str()), 0);
  const auto opened = [](const std::string& path, std::string& error, bool follow = false) {
    error.clear();
    const int fd = open_output_file(path, OutputFileOptions{follow, false}, error);
    if (fd >= 0) close(fd);
    return fd >= 0;
  };
  std::string error;
  const std::string refused = "refusing to write " + planted + "/trace: " + planted +
                              " is a symbolic link of user 65534 in the world-writable directory " + sticky +
                              " (--output-follow-symlinks allows it)";
  EXPECT_FALSE(opened(planted + "/trace", error));
  EXPECT_EQ(error, refused);
  EXPECT_FALSE(opened("/tmp/../tmp/" + sticky.substr(5) + "/./planted//trace", error));  // however it is spelled
  EXPECT_NE(error.find(" is a symbolic link of user 65534 "), std::string::npos) << error;
  EXPECT_EQ(access((victim + "/trace").c_str(), F_OK), -1) << "written through the planted link";
  // Reached through a link of ours elsewhere, it is refused all the same.
  const std::string via = victim + "/via";
  ASSERT_EQ(symlink(planted.c_str(), via.c_str()), 0);
  EXPECT_FALSE(opened(via + "/trace", error));
  EXPECT_NE(error.find(" is a symbolic link of user 65534 "), std::string::npos) << error;
  // Not sticky: anyone could replace even our own link.
  ASSERT_EQ(chmod(sticky.c_str(), 0777), 0);
  EXPECT_FALSE(opened(ours + "/trace", error));
  ASSERT_EQ(chmod(sticky.c_str(), 01777), 0);
  EXPECT_TRUE(opened(ours + "/trace", error)) << error;
  EXPECT_TRUE(opened(planted + "/trace2", error, true)) << error;  // --output-follow-symlinks
  EXPECT_EQ(access((victim + "/trace").c_str(), F_OK), 0);
  // The last component keeps its rule: no link in a world-writable directory.
  EXPECT_FALSE(opened(ours, error));
  EXPECT_EQ(error, "refusing to write " + ours + ": it is a symbolic link in the world-writable directory " + sticky +
                       " (--output-follow-symlinks allows it)");
  for (const std::string& p : {victim + "/trace", victim + "/trace2", via, planted, ours}) unlink(p.c_str());
  rmdir(victim.c_str());
  rmdir(sticky.c_str());
}

// ---- OutputWriter ------------------------------------------------------------

// A chunk of `records` lines "record N\n" (each an unfinished call when `unfinished`).
Chunk lines_chunk(int first, int records, bool unfinished = false) {
  Chunk c;
  for (int i = first; i < first + records; ++i) {
    fmt::format_to(std::back_inserter(c.bytes), "record {}\n", i);
    c.record_ends.push_back(Chunk::record_end(c.bytes.size(), unfinished));
  }
  return c;
}

std::string read_all(int fd) {
  std::string got;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) got.append(buf, n);
  return got;
}

TEST(OutputWriter, WritesChunksInOrderAndHandsBackEmptyStorage) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::string got;
  std::thread reader([&] { got = read_all(fds[0]); });
  std::string expected;
  {
    OutputWriter writer(fds[1], 64 << 20);
    for (int i = 0; i < 100; ++i) {
      Chunk c = lines_chunk(i * 1000, 1000);
      expected.append(c.bytes.data(), c.bytes.size());
      ASSERT_TRUE(writer.push(c));
      EXPECT_EQ(c.bytes.size(), 0u);
      EXPECT_TRUE(c.record_ends.empty());
      EXPECT_GE(c.bytes.capacity(), OutputWriter::kChunkCapacity);  // ready for the next chunk
    }
    const OutputWriter::Drained d = writer.drain(std::chrono::seconds(10));
    EXPECT_TRUE(d.complete);
    EXPECT_EQ(d.unwritten.total(), 0u);
    EXPECT_EQ(writer.error(), 0);
  }
  close(fds[1]);
  reader.join();
  close(fds[0]);
  EXPECT_TRUE(got == expected) << got.size() << " bytes of " << expected.size();
}

TEST(OutputWriter, FullQueueRefusesTheChunkAndLeavesItToBeCounted) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);  // nobody reads: 64 KiB fit in the pipe, then writes wait
  OutputWriter writer(fds[1], 1 << 20);
  std::uint64_t queued = 0, dropped = 0;
  for (int i = 0; i < 200; ++i) {
    Chunk c = lines_chunk(i * 2000, 2000);  // ~28 KB each
    if (writer.push(c)) {
      queued += 2000;
    } else {
      EXPECT_EQ(c.record_ends.size(), 2000u);  // left as it was
      EXPECT_EQ(records_after(c, 0).calls, 2000u);
      dropped += 2000;
    }
  }
  EXPECT_GT(dropped, 0u);
  EXPECT_LT(queued * 14, std::uint64_t(1 << 20) + (64 << 10) + 28 * 2000) << "more queued than the cap holds";
  // The consumer never reads: drain gives up after the stall time, interrupting the blocked write.
  const auto start = std::chrono::steady_clock::now();
  const OutputWriter::Drained d = writer.drain(std::chrono::milliseconds(300));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_FALSE(d.complete);
  // What is in the pipe plus what was not written is everything queued, record for record.
  close(fds[1]);
  const std::string in_pipe = read_all(fds[0]);
  close(fds[0]);
  const auto whole_lines = static_cast<std::uint64_t>(std::count(in_pipe.begin(), in_pipe.end(), '\n'));
  EXPECT_EQ(whole_lines + d.unwritten.calls, queued);
  // Stopped: nothing more is taken.
  Chunk late = lines_chunk(0, 1);
  EXPECT_FALSE(writer.push(late));
  EXPECT_EQ(writer.drain(std::chrono::milliseconds(10)).unwritten.total(), 0u);  // counted once
}

TEST(OutputWriter, ClosedPipeIsEpipeAndCountsWhatWasNotWritten) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  close(fds[0]);
  signal(SIGPIPE, SIG_IGN);
  OutputWriter writer(fds[1], 64 << 20);
  Chunk a = lines_chunk(0, 10), b = lines_chunk(10, 5, /*unfinished=*/true);
  EXPECT_TRUE(writer.push(a));
  writer.wait_written(std::chrono::seconds(10));
  EXPECT_EQ(writer.error(), EPIPE);
  EXPECT_FALSE(writer.push(b));
  const OutputWriter::Drained d = writer.drain(std::chrono::seconds(10));
  EXPECT_FALSE(d.complete);
  EXPECT_EQ(d.unwritten.calls, 10u);
  EXPECT_EQ(records_after(b, 0).unfinished, 5u);
  close(fds[1]);
}

TEST(OutputWriter, DevFullFailsWithNoSpace) {
  const int fd = open("/dev/full", O_WRONLY | O_CLOEXEC);
  if (fd < 0) GTEST_SKIP() << "/dev/full not available";
  OutputWriter writer(fd, 1 << 20);
  Chunk c = lines_chunk(0, 3);
  EXPECT_TRUE(writer.push(c));
  writer.wait_written(std::chrono::seconds(10));
  EXPECT_EQ(writer.error(), ENOSPC);
  EXPECT_EQ(writer.drain(std::chrono::seconds(1)).unwritten.calls, 3u);
  close(fd);
}

TEST(OutputWriter, RecordsAfterCountsRecordsNotWrittenWhole) {
  Chunk c = lines_chunk(0, 3);                      // "record 0\n" is 9 bytes: ends 9, 18, 27
  c.record_ends.back() |= Chunk::kUnfinished;
  EXPECT_EQ(records_after(c, 0).total(), 3u);
  EXPECT_EQ(records_after(c, 9).total(), 2u);       // the first is whole
  EXPECT_EQ(records_after(c, 17).calls, 1u);        // the second is cut
  EXPECT_EQ(records_after(c, 17).unfinished, 1u);
  EXPECT_EQ(records_after(c, 27).total(), 0u);
}

}  // namespace

// ---- Stream model annotations (streams.h) ----------------------------------

namespace {

using cudatrace_test::CallSpec;
using cudatrace_test::StreamFeed;

std::string render_fed(Writer& out, StreamFeed& f) {
  out.buffer()->clear();
  out.call(f.call(), f.analysis());
  return str(*out.buffer());
}

// Two streams, an event edge and a stream synchronisation, as the driver
// feeds them: the stream model first, then the output.
class AnnotatedOutput : public ::testing::Test {
 protected:
  void SetUp() override {
    f.feed("cudaStreamCreate", {{"pStream", 0x5010}});
    f.feed("cudaStreamCreate", {{"pStream", 0x5020}});
    f.feed("cudaEventCreate", {{"event", 0xe010}});
    f.feed("cudaLaunchKernel", {{"func", 0xa1}, {"stream", 0x5010}});
    f.feed("cudaEventRecord", {{"event", 0xe010}, {"stream", 0x5010}});
  }
  StreamFeed f;
};

}  // namespace

TEST_F(AnnotatedOutput, TextShowsShortIdsInsteadOfHandles) {
  auto out = make_text_writer(0, false);
  EXPECT_NE(render_fed(*out, f).find(" event=e1 stream=s1\n"), std::string::npos) << str(*out->buffer());
  f.feed("cudaMemsetAsync", {{"devPtr", 0xd000}, {"value", 0}, {"count", 64}, {"stream", 0}});
  EXPECT_NE(render_fed(*out, f).find(" devPtr=0xd000 value=0 count=64 stream=default\n"), std::string::npos)
      << str(*out->buffer());
}

TEST_F(AnnotatedOutput, TextStreamWaitEventShowsTheEdge) {
  f.feed("cudaStreamWaitEvent", {{"stream", 0x5020}, {"event", 0xe010}, {"flags", 0}});
  auto out = make_text_writer(0, false);
  const std::string line = render_fed(*out, f);
  EXPECT_NE(line.find(" stream=s2 event=e1 flags=0x0 waits: e1 (recorded on s1) for s1: 1 launch (k1)\n"),
            std::string::npos)
      << line;
  EXPECT_EQ(line.find('\n'), line.size() - 1);
}

TEST_F(AnnotatedOutput, TextSyncLineEndsWithWhatItWaitedFor) {
  f.feed("cudaLaunchKernel", {{"func", 0xa2}, {"stream", 0x5020}});
  f.feed("cudaDeviceSynchronize", {});
  auto out = make_text_writer(0, false);
  const std::string line = render_fed(*out, f);
  const std::string tail = " 0 waited: s1: 1 launch (k1); s2: 1 launch (k2)\n";
  ASSERT_GE(line.size(), tail.size());
  EXPECT_EQ(line.substr(line.size() - tail.size()), tail) << line;
}

TEST_F(AnnotatedOutput, JsonKeepsHandlesAndAddsIdsAndWaitedFor) {
  f.feed("cudaStreamSynchronize", {{"stream", 0x5010}});
  auto out = make_json_writer();
  const std::string line = render_fed(*out, f);
  const JsonValue v = parse_line(line);
  EXPECT_EQ(v.get("args")->get("stream")->text, "0x5010") << "the raw handle stays";
  ASSERT_TRUE(v.has("handle_ids"));
  EXPECT_EQ(v.get("handle_ids")->get("stream")->text, "s1");
  EXPECT_EQ(v.get("handle_ids")->members.size(), 1u);
  const JsonValue* w = v.get("waited_for");
  ASSERT_NE(w, nullptr) << line;
  EXPECT_EQ(w->get("kind")->text, "stream");
  EXPECT_EQ(w->get("stream")->text, "s1");
  ASSERT_EQ(w->get("work")->items.size(), 1u);
  const JsonValue& work = w->get("work")->items[0];
  EXPECT_EQ(work.get("stream")->text, "s1");
  EXPECT_EQ(work.get("launches")->text, "1");
  EXPECT_EQ(work.get("kernels")->items[0].get("kernel")->text, "k1");
}

TEST_F(AnnotatedOutput, JsonWithoutIdsHasNoHandleIdsMember) {
  f.feed("cudaGetDeviceCount", {{"count", 4}});
  auto out = make_json_writer();
  const JsonValue v = parse_line(render_fed(*out, f));
  EXPECT_FALSE(v.has("handle_ids"));
  EXPECT_FALSE(v.has("waited_for"));
}

TEST_F(AnnotatedOutput, JsonEventSyncNamesTheEventAndItsStream) {
  f.feed("cudaEventSynchronize", {{"event", 0xe010}});
  auto out = make_json_writer();
  const JsonValue v = parse_line(render_fed(*out, f));
  EXPECT_EQ(v.get("handle_ids")->get("event")->text, "e1");
  EXPECT_EQ(v.get("waited_for")->get("kind")->text, "event");
  EXPECT_EQ(v.get("waited_for")->get("event")->text, "e1");
  EXPECT_EQ(v.get("waited_for")->get("recorded_on")->text, "s1");
}

TEST(WarningOutput, JsonWritesAWarningLineTextWritesNothing) {
  StreamFeed f;
  CallSpec s;
  s.symbol = "cudaMemcpyAsync";
  s.args = {{"dst", 0xd000}, {"src", 0x7000}, {"count", 64}, {"kind", 1}, {"stream", 0}};
  s.caller = 0x401234;
  f.feed(s);
  const Warning w{"pageable_async_copy", 0x7000, "app+0x1234 (main+0x10)", "the message"};
  auto json = make_json_writer();
  json->warning(f.call(), w);
  const JsonValue v = parse_line(str(*json->buffer()));
  EXPECT_EQ(v.get("type")->text, "warning");
  EXPECT_EQ(v.get("kind")->text, "pageable_async_copy");
  EXPECT_EQ(v.get("api")->text, "cudaMemcpyAsync");
  EXPECT_EQ(v.get("host_ptr")->text, "0x7000");
  EXPECT_EQ(v.get("caller")->text, "0x401234");
  EXPECT_EQ(v.get("location")->text, "app+0x1234 (main+0x10)");
  EXPECT_EQ(v.get("message")->text, "the message");
  EXPECT_EQ(v.get("pid")->text, "100");
  auto text = make_text_writer(0, false);
  text->warning(f.call(), w);
  EXPECT_EQ(text->buffer()->size(), 0u) << "text mode warns on stderr only";
}
