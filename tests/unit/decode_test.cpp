#include "cudatrace/decode/decode.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cudatrace/decode/kernel_names.h"
#include "record_builder.h"

namespace {

using namespace cudatrace;
using cudatrace_test::arg_names;
using cudatrace_test::arg_str;
using cudatrace_test::describe;
using cudatrace_test::float_bits;
using cudatrace_test::init_rec;
using cudatrace_test::RecBuf;
using cudatrace_test::set_payload;
using cudatrace_test::set_string_payload;

Call decode(const RecBuf& b, KernelNames* names = nullptr) {
  Call c;
  EXPECT_TRUE(decode_call(b.rec, names, c));
  return c;
}

void put_u32(std::uint8_t* p, std::uint32_t v) { std::memcpy(p, &v, sizeof v); }
void put_u64(std::uint8_t* p, std::uint64_t v) { std::memcpy(p, &v, sizeof v); }

// One CUlaunchAttribute / cudaLaunchAttribute: {u32 id; pad; 64-byte value}.
void put_attr(std::uint8_t* a, std::uint32_t id, std::uint32_t v0, std::uint32_t v1, std::uint32_t v2) {
  std::memset(a, 0, CT_LAUNCH_ATTR_SIZE);
  put_u32(a, id);
  put_u32(a + 4, 0xcccccccc);  // padding: must be ignored
  put_u32(a + 8, v0);
  put_u32(a + 12, v1);
  put_u32(a + 16, v2);
}

constexpr std::uint32_t kClusterDimensionAttr = 4;
constexpr std::uint32_t kCooperativeAttr = 2;

// ---- Helpers -------------------------------------------------------------

TEST(DecodeHelpers, MemcpyKindNames) {
  EXPECT_STREQ(memcpy_kind_name(0), "cudaMemcpyHostToHost");
  EXPECT_STREQ(memcpy_kind_name(1), "cudaMemcpyHostToDevice");
  EXPECT_STREQ(memcpy_kind_name(2), "cudaMemcpyDeviceToHost");
  EXPECT_STREQ(memcpy_kind_name(3), "cudaMemcpyDeviceToDevice");
  EXPECT_STREQ(memcpy_kind_name(4), "cudaMemcpyDefault");
  EXPECT_EQ(memcpy_kind_name(5), nullptr);
  EXPECT_EQ(memcpy_kind_name(~0ull), nullptr);
}

TEST(DecodeHelpers, SpecialStreamNames) {
  EXPECT_STREQ(special_stream_name(0), "default");
  EXPECT_STREQ(special_stream_name(1), "cudaStreamLegacy");
  EXPECT_STREQ(special_stream_name(2), "cudaStreamPerThread");
  EXPECT_EQ(special_stream_name(3), nullptr);
  EXPECT_EQ(special_stream_name(0x55550000a000), nullptr);
}

// ---- Memory and out-params -------------------------------------------------

TEST(DecodeCall, CudaMallocSuccessReadsDevPtrFromOut0) {
  RecBuf b;
  init_rec(b, "cudaMalloc");
  b.rec.args[0] = 0x7ffc12340000;  // the void** itself
  b.rec.args[1] = 4096;
  b.rec.outs[0] = 0x7f0000200000;
  b.rec.ts_ns = 123456789;
  b.rec.dur_ns = 4321;
  b.rec.caller = 0x401234;
  const Call c = decode(b);
  // The record's fields are the call's: nothing downstream reads the record.
  EXPECT_EQ(c.pid, b.rec.pid);
  EXPECT_EQ(c.tid, b.rec.tid);
  EXPECT_EQ(c.ts_ns, 123456789u);
  EXPECT_EQ(c.dur_ns, 4321u);
  EXPECT_EQ(c.end_ns(), 123456789u + 4321u);
  EXPECT_EQ(c.caller, 0x401234u);
  EXPECT_EQ(c.depth, 0u);
  EXPECT_EQ(c.comm(), std::string_view(b.rec.comm));
  EXPECT_EQ(c.api, api_by_symbol("cudaMalloc"));
  EXPECT_EQ(c.parent, nullptr);
  EXPECT_FALSE(c.unfinished);
  EXPECT_EQ(arg_names(c), "devPtr,size");
  EXPECT_EQ(arg_str(c, "devPtr"), "hex:0x7f0000200000");
  EXPECT_EQ(arg_str(c, "size"), "u64:4096");
  EXPECT_FALSE(c.failed());
  EXPECT_STREQ(c.ret_name(), "cudaSuccess");
  EXPECT_EQ(c.comm(), "app");
  EXPECT_TRUE(c.kernel.empty());
  EXPECT_TRUE(c.kernel_mangled.empty());
}

TEST(DecodeCall, CudaMallocFailureHidesDevPtr) {
  RecBuf b;
  init_rec(b, "cudaMalloc");
  b.rec.args[1] = std::uint64_t(1) << 40;
  b.rec.outs[0] = 0xdeadbeef;  // whatever was there: not written by CUDA
  b.rec.ret = 2;
  const Call c = decode(b);
  EXPECT_EQ(arg_str(c, "devPtr"), "unavailable");
  EXPECT_EQ(arg_str(c, "size"), "u64:1099511627776");
  EXPECT_TRUE(c.failed());
  EXPECT_STREQ(c.ret_name(), "cudaErrorMemoryAllocation");
}

TEST(DecodeCall, Out0FaultGivesUnavailable) {
  RecBuf b;
  init_rec(b, "cudaMalloc");
  b.rec.outs[0] = 0x7f0000200000;
  b.rec.flags = CT_FLAG_OUT0_FAULT;
  const Call c = decode(b);
  EXPECT_EQ(arg_str(c, "devPtr"), "unavailable");
  EXPECT_FALSE(c.failed());
}

TEST(DecodeCall, MallocPitchDecodesBothOutParamsIndependently) {
  RecBuf b;
  init_rec(b, "cudaMallocPitch");
  b.rec.args[2] = 100;  // width
  b.rec.args[3] = 7;    // height
  b.rec.outs[0] = 0x7f0000400000;
  b.rec.outs[1] = 512;
  Call c = decode(b);
  EXPECT_EQ(arg_names(c), "devPtr,pitch,width,height");
  EXPECT_EQ(arg_str(c, "devPtr"), "hex:0x7f0000400000");
  EXPECT_EQ(arg_str(c, "pitch"), "u64:512");
  EXPECT_EQ(arg_str(c, "width"), "u64:100");
  EXPECT_EQ(arg_str(c, "height"), "u64:7");

  b.rec.flags = CT_FLAG_OUT1_FAULT;
  c = decode(b);
  EXPECT_EQ(arg_str(c, "devPtr"), "hex:0x7f0000400000");
  EXPECT_EQ(arg_str(c, "pitch"), "unavailable");
}

TEST(DecodeCall, GetDeviceIntOutIsSignExtendedLow32Bits) {
  RecBuf b;
  init_rec(b, "cudaGetDevice");
  b.rec.outs[0] = 3;
  EXPECT_EQ(arg_str(decode(b), "device"), "i64:3");
  b.rec.outs[0] = 0xdeadbeef00000002;  // only 4 bytes belong to the int
  EXPECT_EQ(arg_str(decode(b), "device"), "i64:2");
  b.rec.outs[0] = 0xffffffff;
  EXPECT_EQ(arg_str(decode(b), "device"), "i64:-1");
}

TEST(DecodeCall, EventElapsedTimeFloatOut) {
  RecBuf b;
  init_rec(b, "cudaEventElapsedTime");
  b.rec.args[1] = 0x5555000a0000;
  b.rec.args[2] = 0x5555000b0000;
  b.rec.outs[0] = float_bits(1.5f);
  const Call c = decode(b);
  EXPECT_EQ(arg_names(c), "ms,start,end");
  const auto* ms = std::get_if<double>(&c.args[0].value);
  ASSERT_NE(ms, nullptr) << describe(c.args[0].value);
  EXPECT_EQ(*ms, 1.5);
  EXPECT_EQ(arg_str(c, "start"), "hex:0x5555000a0000");
  EXPECT_EQ(arg_str(c, "end"), "hex:0x5555000b0000");

  b.rec.outs[0] = (std::uint64_t(0x12345678) << 32) | float_bits(-0.25f);  // upper half ignored
  EXPECT_EQ(std::get<double>(decode(b).args[0].value), -0.25);
}

TEST(DecodeCall, ScalarArgumentTypes) {
  RecBuf b;
  init_rec(b, "cudaHostAlloc");
  b.rec.args[1] = 64;
  b.rec.args[2] = 0xffffffff00000003;  // unsigned int flags: low 32 bits, hex
  b.rec.outs[0] = 0x7f00aa000000;
  Call c = decode(b);
  EXPECT_EQ(arg_str(c, "pHost"), "hex:0x7f00aa000000");
  EXPECT_EQ(arg_str(c, "flags"), "hex:0x3");

  init_rec(b, "cudaSetDevice");
  b.rec.args[0] = 0xffffffff;  // int -1
  c = decode(b);
  EXPECT_EQ(arg_str(c, "device"), "i64:-1");

  init_rec(b, "cudaMemset");
  b.rec.args[0] = 0x7f0000001000;
  b.rec.args[1] = 0x1ffffff80;  // int value, low 32 bits: -128
  b.rec.args[2] = 10;
  c = decode(b);
  EXPECT_EQ(arg_str(c, "devPtr"), "hex:0x7f0000001000");
  EXPECT_EQ(arg_str(c, "value"), "i64:-128");
  EXPECT_EQ(arg_str(c, "count"), "u64:10");

  init_rec(b, "cuMemsetD8_v2");
  b.rec.args[1] = 0xabcdef00000000ff;  // unsigned char passed as unsigned int
  c = decode(b);
  EXPECT_EQ(arg_str(c, "uc"), "u64:255");
}

// ---- Transfers -------------------------------------------------------------

TEST(DecodeCall, MemcpyKindsHaveExactNames) {
  const char* const expected[] = {"cudaMemcpyHostToHost", "cudaMemcpyHostToDevice", "cudaMemcpyDeviceToHost",
                                  "cudaMemcpyDeviceToDevice", "cudaMemcpyDefault"};
  RecBuf b;
  for (int kind = 0; kind < 5; ++kind) {
    init_rec(b, "cudaMemcpy");
    b.rec.args[0] = 0x1000;
    b.rec.args[1] = 0x2000;
    b.rec.args[2] = 256;
    b.rec.args[3] = kind;
    const Call c = decode(b);
    EXPECT_EQ(arg_names(c), "dst,src,count,kind");
    const auto* n = std::get_if<Named>(&c.args[3].value);
    ASSERT_NE(n, nullptr);
    ASSERT_NE(n->name, nullptr);
    EXPECT_STREQ(n->name, expected[kind]);
    EXPECT_EQ(n->raw, kind);
  }
}

TEST(DecodeCall, UnknownMemcpyKindIsNamedNullWithRawValue) {
  RecBuf b;
  init_rec(b, "cudaMemcpy");
  b.rec.args[3] = 9;
  const Call c = decode(b);
  const auto* n = std::get_if<Named>(&c.args[3].value);
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->name, nullptr);
  EXPECT_EQ(n->raw, 9);
  // The enum is 32 bits wide: garbage above it is not part of the value.
  b.rec.args[3] = 0xffffffff00000001;
  EXPECT_EQ(arg_str(decode(b), "kind"), "named:cudaMemcpyHostToDevice(1)");
}

TEST(DecodeCall, SpecialStreamsAreNamedOthersHex) {
  RecBuf b;
  init_rec(b, "cudaStreamSynchronize");
  b.rec.args[0] = 0;
  EXPECT_EQ(arg_str(decode(b), "stream"), "named:default(0)");
  b.rec.args[0] = 1;
  EXPECT_EQ(arg_str(decode(b), "stream"), "named:cudaStreamLegacy(1)");
  b.rec.args[0] = 2;
  EXPECT_EQ(arg_str(decode(b), "stream"), "named:cudaStreamPerThread(2)");
  b.rec.args[0] = 3;
  EXPECT_EQ(arg_str(decode(b), "stream"), "hex:0x3");
  b.rec.args[0] = 0x55550000c000;
  EXPECT_EQ(arg_str(decode(b), "stream"), "hex:0x55550000c000");
}

TEST(DecodeCall, MemcpyAsyncVariantDecodesLikeBase) {
  RecBuf b;
  init_rec(b, "cudaMemcpyAsync_ptsz");
  b.rec.args[2] = 8;
  b.rec.args[3] = 2;
  b.rec.args[4] = 2;
  const Call c = decode(b);
  EXPECT_EQ(c.api->symbol, "cudaMemcpyAsync_ptsz");
  EXPECT_EQ(arg_names(c), "dst,src,count,kind,stream");
  EXPECT_EQ(arg_str(c, "kind"), "named:cudaMemcpyDeviceToHost(2)");
  EXPECT_EQ(arg_str(c, "stream"), "named:cudaStreamPerThread(2)");
}

// ---- Return codes ----------------------------------------------------------

TEST(DecodeCall, StreamQueryNotReadyIsNotAFailure) {
  RecBuf b;
  init_rec(b, "cudaStreamQuery");
  b.rec.ret = 600;
  Call c = decode(b);
  EXPECT_FALSE(c.failed());
  EXPECT_STREQ(c.ret_name(), "cudaErrorNotReady");

  init_rec(b, "cuStreamQuery");
  b.rec.ret = 600;
  c = decode(b);
  EXPECT_FALSE(c.failed());
  EXPECT_STREQ(c.ret_name(), "CUDA_ERROR_NOT_READY");

  b.rec.ret = 400;  // CUDA_ERROR_INVALID_HANDLE
  c = decode(b);
  EXPECT_TRUE(c.failed());
  EXPECT_STREQ(c.ret_name(), "CUDA_ERROR_INVALID_HANDLE");
}

TEST(DecodeCall, DriverLayerReturnNames) {
  RecBuf b;
  init_rec(b, "cuMemAlloc_v2");
  b.rec.args[1] = 1 << 20;
  b.rec.outs[0] = 0x7f0000800000;
  b.rec.ret = 1;
  Call c = decode(b);
  EXPECT_EQ(arg_names(c), "dptr,bytesize");
  EXPECT_STREQ(c.ret_name(), "CUDA_ERROR_INVALID_VALUE");
  EXPECT_TRUE(c.failed());
  EXPECT_EQ(arg_str(c, "dptr"), "unavailable");

  b.rec.ret = 0;
  c = decode(b);
  EXPECT_STREQ(c.ret_name(), "CUDA_SUCCESS");
  EXPECT_EQ(arg_str(c, "dptr"), "hex:0x7f0000800000");
}

TEST(DecodeCall, UnknownReturnCodeHasNoName) {
  RecBuf b;
  init_rec(b, "cudaFree");
  b.rec.ret = 12345;
  const Call c = decode(b);
  EXPECT_EQ(c.ret_name(), nullptr);
  EXPECT_TRUE(c.failed());
}

TEST(DecodeCall, ReturnCodeUsesLow32BitsOfRax) {
  // cudaError_t is an int: the upper half of rax is undefined.
  RecBuf b;
  init_rec(b, "cudaMalloc");
  b.rec.ret = static_cast<std::int64_t>(0xabcd000000000000ull);
  b.rec.outs[0] = 0x7f0000200000;
  Call c = decode(b);
  EXPECT_FALSE(c.failed());
  EXPECT_STREQ(c.ret_name(), "cudaSuccess");
  EXPECT_EQ(arg_str(c, "devPtr"), "hex:0x7f0000200000");

  b.rec.ret = static_cast<std::int64_t>(0x1234000000000002ull);
  c = decode(b);
  EXPECT_TRUE(c.failed());
  EXPECT_STREQ(c.ret_name(), "cudaErrorMemoryAllocation");
}

// ---- Unfinished calls ------------------------------------------------------

TEST(DecodeCall, UnfinishedCallHasNoOutParamsOrReturn) {
  RecBuf b;
  init_rec(b, "cudaMallocPitch");
  b.rec.type = CT_REC_UNFINISHED;
  b.rec.dur_ns = 0;
  b.rec.args[2] = 100;
  b.rec.outs[0] = 0x7f0000400000;
  b.rec.outs[1] = 512;
  const Call c = decode(b);
  EXPECT_TRUE(c.unfinished);
  EXPECT_EQ(arg_str(c, "devPtr"), "unavailable");
  EXPECT_EQ(arg_str(c, "pitch"), "unavailable");
  EXPECT_EQ(arg_str(c, "width"), "u64:100");
  EXPECT_FALSE(c.failed());
  EXPECT_EQ(c.ret_name(), nullptr);
}

// ---- Launches --------------------------------------------------------------

TEST(DecodeCall, CudaLaunchKernelDim3FromPackedRegistersAndStackSlots) {
  RecBuf b;
  init_rec(b, "cudaLaunchKernel");
  b.rec.args[0] = 0x401136;                              // func (host stub)
  b.rec.args[1] = 64 | (std::uint64_t(2) << 32);         // grid.x | grid.y << 32
  b.rec.args[2] = 0xdead000000000003;                    // grid.z in the low half
  b.rec.args[3] = 256 | (std::uint64_t(1) << 32);        // block.x | block.y << 32
  b.rec.args[4] = 1;                                     // block.z
  b.rec.args[5] = 0x7ffd00001000;                        // args
  b.rec.args[6] = 1024;                                  // sharedMem (stack word 0)
  b.rec.args[7] = 0x5555000c0000;                        // stream (stack word 1)
  const Call c = decode(b);
  EXPECT_EQ(arg_names(c), "func,grid,block,args,sharedMem,stream");
  EXPECT_EQ(arg_str(c, "func"), "hex:0x401136");
  EXPECT_EQ(arg_str(c, "grid"), "dim3:(64,2,3)");
  EXPECT_EQ(arg_str(c, "block"), "dim3:(256,1,1)");
  EXPECT_EQ(arg_str(c, "args"), "hex:0x7ffd00001000");
  EXPECT_EQ(arg_str(c, "sharedMem"), "u64:1024");
  EXPECT_EQ(arg_str(c, "stream"), "hex:0x5555000c0000");
  EXPECT_EQ(c.kernel_handle, 0x401136u);
  // No name source: the kernel is "?", not empty.
  EXPECT_EQ(c.kernel, "?");
  EXPECT_EQ(c.kernel_mangled, "?");
}

TEST(DecodeCall, CuLaunchKernelSplitDims) {
  RecBuf b;
  init_rec(b, "cuLaunchKernel");
  const std::uint64_t vals[11] = {0x5555aaaa0000, 10, 20, 30, 32, 4, 2, 0xffffffff00000010, 1, 0x7ffd2000, 0};
  std::memcpy(b.rec.args, vals, sizeof vals);
  const Call c = decode(b);
  EXPECT_EQ(arg_names(c), "f,grid,block,sharedMemBytes,hStream,kernelParams,extra");
  EXPECT_EQ(arg_str(c, "f"), "hex:0x5555aaaa0000");
  EXPECT_EQ(arg_str(c, "grid"), "dim3:(10,20,30)");
  EXPECT_EQ(arg_str(c, "block"), "dim3:(32,4,2)");
  EXPECT_EQ(arg_str(c, "sharedMemBytes"), "u64:16");
  EXPECT_EQ(arg_str(c, "hStream"), "named:cudaStreamLegacy(1)");
  EXPECT_EQ(arg_str(c, "kernelParams"), "hex:0x7ffd2000");
  EXPECT_EQ(arg_str(c, "extra"), "hex:0x0");
  EXPECT_EQ(c.kernel_handle, 0x5555aaaa0000u);
  EXPECT_EQ(c.kernel, "?");
}

TEST(DecodeCall, GraphLaunchIsNotAKernelLaunch) {
  RecBuf b;
  init_rec(b, "cudaGraphLaunch");
  b.rec.args[0] = 0x1234;
  const Call c = decode(b);
  EXPECT_TRUE(c.kernel.empty());
  EXPECT_EQ(c.kernel_handle, 0u);
}

TEST(DecodeCall, RuntimeLaunchConfigPayloadWithClusterDim) {
  RecBuf b;
  init_rec(b, "cudaLaunchKernelExC");
  b.rec.args[0] = 0x7ffd00003000;  // config pointer
  b.rec.args[1] = 0x401200;        // func
  b.rec.args[2] = 0x7ffd00004000;  // args
  std::uint8_t p[CT_LAUNCH_CONFIG_SIZE + CT_LAUNCH_ATTR_SIZE] = {};
  put_u32(p + 0, 8);  // gridDim
  put_u32(p + 4, 4);
  put_u32(p + 8, 1);
  put_u32(p + 12, 128);  // blockDim
  put_u32(p + 16, 1);
  put_u32(p + 20, 1);
  put_u64(p + 24, 0x100000010);  // size_t dynamicSmemBytes: all 64 bits count
  put_u64(p + 32, 2);            // stream: cudaStreamPerThread
  put_u64(p + 40, 0x7ffd00005000);
  put_u32(p + 48, 1);
  put_attr(p + CT_LAUNCH_CONFIG_SIZE, kClusterDimensionAttr, 2, 1, 1);
  set_payload(b, p, sizeof p);
  const Call c = decode(b);
  EXPECT_EQ(arg_names(c), "grid,block,sharedMem,stream,clusterDim,func,args");
  EXPECT_EQ(arg_str(c, "grid"), "dim3:(8,4,1)");
  EXPECT_EQ(arg_str(c, "block"), "dim3:(128,1,1)");
  EXPECT_EQ(arg_str(c, "sharedMem"), "u64:4294967312");
  EXPECT_EQ(arg_str(c, "stream"), "named:cudaStreamPerThread(2)");
  EXPECT_EQ(arg_str(c, "clusterDim"), "dim3:(2,1,1)");
  EXPECT_EQ(arg_str(c, "func"), "hex:0x401200");
  EXPECT_EQ(c.kernel_handle, 0x401200u);
  EXPECT_EQ(c.kernel, "?");
}

TEST(DecodeCall, DriverLaunchConfigPayloadWithClusterDim) {
  RecBuf b;
  init_rec(b, "cuLaunchKernelEx");
  b.rec.args[0] = 0x7ffd00003000;
  b.rec.args[1] = 0x5555bbbb0000;  // f
  b.rec.args[2] = 0x7ffd00004000;  // kernelParams
  b.rec.args[3] = 0;               // extra
  std::uint8_t p[CT_LAUNCH_CONFIG_SIZE + CT_LAUNCH_ATTR_SIZE] = {};
  const std::uint32_t dims[7] = {16, 8, 2, 64, 2, 1, 2048};  // gridDimX..Z, blockDimX..Z, sharedMemBytes
  std::memcpy(p, dims, sizeof dims);
  put_u32(p + 28, 0xffffffff);  // padding before hStream: ignored
  put_u64(p + 32, 0x5555000d0000);
  put_u64(p + 40, 0x7ffd00005000);
  put_u32(p + 48, 1);
  put_attr(p + CT_LAUNCH_CONFIG_SIZE, kClusterDimensionAttr, 2, 1, 1);
  set_payload(b, p, sizeof p);
  const Call c = decode(b);
  EXPECT_EQ(arg_names(c), "grid,block,sharedMemBytes,hStream,clusterDim,f,kernelParams,extra");
  EXPECT_EQ(arg_str(c, "grid"), "dim3:(16,8,2)");
  EXPECT_EQ(arg_str(c, "block"), "dim3:(64,2,1)");
  EXPECT_EQ(arg_str(c, "sharedMemBytes"), "u64:2048");
  EXPECT_EQ(arg_str(c, "hStream"), "hex:0x5555000d0000");
  EXPECT_EQ(arg_str(c, "clusterDim"), "dim3:(2,1,1)");
  EXPECT_EQ(arg_str(c, "f"), "hex:0x5555bbbb0000");
  EXPECT_EQ(c.kernel_handle, 0x5555bbbb0000u);
}

TEST(DecodeCall, LaunchConfigOtherAttributesAreSkipped) {
  RecBuf b;
  init_rec(b, "cuLaunchKernelEx");
  std::uint8_t p[CT_LAUNCH_CONFIG_SIZE + 2 * CT_LAUNCH_ATTR_SIZE] = {};
  const std::uint32_t dims[7] = {1, 1, 1, 32, 1, 1, 0};
  std::memcpy(p, dims, sizeof dims);
  put_u32(p + 48, 2);
  put_attr(p + CT_LAUNCH_CONFIG_SIZE, kCooperativeAttr, 1, 0, 0);
  put_attr(p + CT_LAUNCH_CONFIG_SIZE + CT_LAUNCH_ATTR_SIZE, kClusterDimensionAttr, 4, 2, 1);
  set_payload(b, p, sizeof p);
  Call c = decode(b);
  EXPECT_EQ(arg_names(c), "grid,block,sharedMemBytes,hStream,clusterDim,f,kernelParams,extra");
  EXPECT_EQ(arg_str(c, "clusterDim"), "dim3:(4,2,1)");

  // Config only (no attributes read): no clusterDim at all.
  set_payload(b, p, CT_LAUNCH_CONFIG_SIZE);
  c = decode(b);
  EXPECT_EQ(arg_names(c), "grid,block,sharedMemBytes,hStream,f,kernelParams,extra");
  EXPECT_EQ(arg_str(c, "hStream"), "named:default(0)");
}

TEST(DecodeCall, LaunchConfigUnreadableGivesUnavailableConfig) {
  // The BPF side could not read the config itself: no payload, fault flag.
  RecBuf b;
  init_rec(b, "cudaLaunchKernelExC");
  b.rec.args[1] = 0x401200;
  b.rec.flags = CT_FLAG_PAYLOAD_FAULT;
  b.rec.payload_len = 0;
  Call c = decode(b);
  EXPECT_EQ(arg_names(c), "config,func,args");
  EXPECT_EQ(arg_str(c, "config"), "unavailable");
  EXPECT_EQ(c.kernel, "?");

  b.rec.flags = 0;
  std::uint8_t p[CT_LAUNCH_CONFIG_SIZE] = {1};
  set_payload(b, p, CT_LAUNCH_CONFIG_SIZE - 1);  // short read
  c = decode(b);
  EXPECT_EQ(arg_names(c), "config,func,args");
  EXPECT_EQ(arg_str(c, "config"), "unavailable");
}

TEST(DecodeCall, LaunchConfigWithUnreadableAttributesKeepsGridAndBlock) {
  // Regression: bpf/cudatrace.bpf.c read_payload() returns the 56 config
  // bytes with CT_FLAG_PAYLOAD_FAULT when the config was read but its
  // attribute array was not; decode_call() used to treat any PAYLOAD_FAULT as
  // "no payload" and threw the readable grid/block/stream away.
  RecBuf b;
  init_rec(b, "cuLaunchKernelEx");
  b.rec.args[1] = 0x5555bbbb0000;
  std::uint8_t p[CT_LAUNCH_CONFIG_SIZE] = {};
  const std::uint32_t dims[7] = {16, 8, 2, 64, 2, 1, 2048};
  std::memcpy(p, dims, sizeof dims);
  put_u64(p + 32, 0x5555000d0000);
  put_u64(p + 40, 0x7ffd00005000);  // attrs: unreadable
  put_u32(p + 48, 1);
  set_payload(b, p, sizeof p);
  b.rec.flags = CT_FLAG_PAYLOAD_FAULT;
  const Call c = decode(b);
  EXPECT_EQ(arg_names(c), "grid,block,sharedMemBytes,hStream,f,kernelParams,extra");
  EXPECT_EQ(arg_str(c, "grid"), "dim3:(16,8,2)");
  EXPECT_EQ(arg_str(c, "block"), "dim3:(64,2,1)");
  EXPECT_EQ(arg_str(c, "hStream"), "hex:0x5555000d0000");
}

// ---- String payloads -------------------------------------------------------

TEST(DecodeCall, RegisterFunctionStringPayload) {
  RecBuf b;
  init_rec(b, "__cudaRegisterFunction");
  b.rec.args[0] = 0x5555000e0000;
  b.rec.args[1] = 0x401136;
  b.rec.args[2] = 0x402000;  // the const char*; the string is the payload
  b.rec.ret = 0x1234567;     // void function: rax is garbage
  set_string_payload(b, "_Z6addOnePfi");
  const Call c = decode(b);
  EXPECT_EQ(arg_names(c), "fatCubinHandle,hostFun,deviceFun");
  EXPECT_EQ(arg_str(c, "fatCubinHandle"), "hex:0x5555000e0000");
  EXPECT_EQ(arg_str(c, "hostFun"), "hex:0x401136");
  EXPECT_EQ(arg_str(c, "deviceFun"), "str:_Z6addOnePfi");
  EXPECT_FALSE(c.failed());
  EXPECT_EQ(c.ret_name(), nullptr);
  // Registration is not a launch: no kernel fields.
  EXPECT_TRUE(c.kernel.empty());
}

TEST(DecodeCall, StringPayloadIsBoundedByPayloadLen) {
  RecBuf b;
  init_rec(b, "__cudaRegisterFunction");
  std::memset(b.payload, 'X', 64);
  std::memcpy(b.payload, "_Z3foov", 7);
  b.rec.payload_len = 7;  // no NUL inside the payload
  EXPECT_EQ(arg_str(decode(b), "deviceFun"), "str:_Z3foov");

  set_string_payload(b, "");
  EXPECT_EQ(arg_str(decode(b), "deviceFun"), "str:");
}

TEST(DecodeCall, StringPayloadFaultOrMissingIsUnavailable) {
  RecBuf b;
  init_rec(b, "cuModuleGetFunction");
  set_string_payload(b, "kernel_a");
  b.rec.flags = CT_FLAG_PAYLOAD_FAULT;
  EXPECT_EQ(arg_str(decode(b), "name"), "unavailable");
  b.rec.flags = 0;
  b.rec.payload_len = 0;
  EXPECT_EQ(arg_str(decode(b), "name"), "unavailable");
}

TEST(DecodeCall, StringReaderFillsInAnUnreadablePayload) {
  RecBuf b;
  init_rec(b, "cuModuleGetFunction", 777);
  b.rec.args[2] = 0x402100;
  b.rec.outs[0] = 0x5555cc000000;
  b.rec.flags = CT_FLAG_PAYLOAD_FAULT;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> asked;
  const StringReader reader = [&](std::uint32_t pid, std::uint64_t addr, std::string& out) {
    asked.emplace_back(pid, addr);
    out = "_Z6lookupv";
    return true;
  };
  Call c;
  ASSERT_TRUE(decode_call(b.rec, nullptr, c, &reader));
  EXPECT_EQ(arg_str(c, "name"), "str:_Z6lookupv");
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], std::make_pair(std::uint32_t(777), std::uint64_t(0x402100)));

  // No payload at all (not a fault) also asks.
  b.rec.flags = 0;
  b.rec.payload_len = 0;
  ASSERT_TRUE(decode_call(b.rec, nullptr, c, &reader));
  EXPECT_EQ(arg_str(c, "name"), "str:_Z6lookupv");
  EXPECT_EQ(asked.size(), 2u);

  // A payload that was read: the reader is not consulted.
  set_string_payload(b, "_Z7payloadv");
  ASSERT_TRUE(decode_call(b.rec, nullptr, c, &reader));
  EXPECT_EQ(arg_str(c, "name"), "str:_Z7payloadv");
  EXPECT_EQ(asked.size(), 2u);
}

TEST(DecodeCall, StringReaderFailureOrNullPointerIsUnavailable) {
  RecBuf b;
  init_rec(b, "cuModuleGetFunction");
  b.rec.flags = CT_FLAG_PAYLOAD_FAULT;
  int calls = 0;
  const StringReader failing = [&](std::uint32_t, std::uint64_t, std::string&) {
    ++calls;
    return false;
  };
  Call c;
  b.rec.args[2] = 0x402100;
  ASSERT_TRUE(decode_call(b.rec, nullptr, c, &failing));
  EXPECT_EQ(arg_str(c, "name"), "unavailable");
  EXPECT_EQ(calls, 1);
  b.rec.args[2] = 0;  // NULL name: nothing to read
  ASSERT_TRUE(decode_call(b.rec, nullptr, c, &failing));
  EXPECT_EQ(arg_str(c, "name"), "unavailable");
  EXPECT_EQ(calls, 1);
}

TEST(DecodeCall, StringFromReaderFeedsKernelNames) {
  RecBuf b;
  init_rec(b, "cuModuleGetFunction");
  b.rec.args[2] = 0x402100;
  b.rec.outs[0] = 0x5555cc000000;
  b.rec.flags = CT_FLAG_PAYLOAD_FAULT;
  const StringReader reader = [](std::uint32_t, std::uint64_t, std::string& out) {
    out = "_Z6addOnePfi";
    return true;
  };
  KernelNames names;
  Call c;
  ASSERT_TRUE(decode_call(b.rec, &names, c, &reader));
  names.learn(c);
  const KernelNames::Name* n = names.find(1234, 0x5555cc000000);
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->demangled, "addOne(float*, int)");
}

// ---- Record-level fields ---------------------------------------------------

TEST(DecodeCall, UnknownApiIdIsRejected) {
  RecBuf b;
  init_rec(b, "cudaMalloc");
  Call c;
  b.rec.api = static_cast<std::uint16_t>(apis().size());
  EXPECT_FALSE(decode_call(b.rec, nullptr, c));
  b.rec.api = kNoApi;
  EXPECT_FALSE(decode_call(b.rec, nullptr, c));
  b.rec.api = CT_MAX_APIS - 1;
  if (CT_MAX_APIS - 1 >= apis().size()) {
    EXPECT_FALSE(decode_call(b.rec, nullptr, c));
  }
}

TEST(DecodeCall, ParentApi) {
  RecBuf b;
  init_rec(b, "cuMemAlloc_v2");
  EXPECT_EQ(decode(b).parent, nullptr);  // parent_api 0xffff
  b.rec.parent_api = cudatrace_test::api_id("cudaMalloc");
  b.rec.depth = 1;
  const Call c = decode(b);
  ASSERT_NE(c.parent, nullptr);
  EXPECT_EQ(c.parent->symbol, "cudaMalloc");
  b.rec.parent_api = 0;
  EXPECT_EQ(decode(b).parent, &apis()[0]);
}

TEST(DecodeCall, CommIsBoundedBy16Bytes) {
  RecBuf b;
  init_rec(b, "cudaFree");
  std::memcpy(b.rec.comm, "0123456789abcdef", CT_COMM_LEN);  // no terminator
  b.rec.payload_len = 0;
  EXPECT_EQ(decode(b).comm(), "0123456789abcdef");
  std::memcpy(b.rec.comm, "ab\0cd", 6);
  EXPECT_EQ(decode(b).comm(), "ab");
}

TEST(DecodeCall, ReusingACallResetsLaunchAndArgState) {
  RecBuf launch, malloc_rec;
  init_rec(launch, "cudaLaunchKernel");
  launch.rec.args[0] = 0x401136;
  init_rec(malloc_rec, "cudaMalloc");
  malloc_rec.rec.args[1] = 8;
  Call c;
  ASSERT_TRUE(decode_call(launch.rec, nullptr, c));
  EXPECT_EQ(c.kernel, "?");
  ASSERT_TRUE(decode_call(malloc_rec.rec, nullptr, c));
  EXPECT_EQ(c.api, api_by_symbol("cudaMalloc"));
  EXPECT_TRUE(c.kernel.empty());
  EXPECT_TRUE(c.kernel_mangled.empty());
  EXPECT_EQ(c.kernel_handle, 0u);
  EXPECT_EQ(arg_names(c), "devPtr,size");
}

TEST(DecodeCall, EveryApiDecodesWithOneValuePerArgument) {
  // Launch configs expand into several values; everything else is one per argument.
  RecBuf b;
  for (const Api& a : apis()) {
    init_rec(b, a.symbol);
    Call c;
    ASSERT_TRUE(decode_call(b.rec, nullptr, c)) << a.symbol;
    if (a.payload_index >= 0 && a.spec->args[a.payload_index].type == ArgType::LaunchConfig) continue;
    ASSERT_EQ(c.args.size(), a.spec->args.size()) << a.symbol;
    for (std::size_t i = 0; i < c.args.size(); ++i) EXPECT_EQ(c.args[i].name, a.spec->args[i].name) << a.symbol;
  }
}

}  // namespace
