// The API table's rows generated from the toolkit's headers (issue 28):
// a few known rows exactly, where the x86-64 ABI puts their arguments, how
// they decode, and how the hand-written overrides sit on them.
#include "cudatrace/decode/header_rows.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <string_view>

#include "cudatrace/decode/api_overrides.h"
#include "cudatrace/decode/api_table.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/selection.h"
#include "record_builder.h"

namespace {

using namespace cudatrace;
using namespace cudatrace_test;

const Api& api(const char* symbol) {
  const Api* a = api_by_symbol(symbol);
  if (!a) throw std::runtime_error(std::string("no API ") + symbol);
  return *a;
}

// `symbol`'s record with `args` in its argument slots, decoded (its views
// point into the record, kept until the next call).
Call decoded(const char* symbol, std::initializer_list<std::uint64_t> args, std::uint64_t out0 = 0) {
  static RecBuf b;
  init_rec(b, symbol);
  std::copy(args.begin(), args.end(), b.rec.args);
  b.rec.outs[0] = out0;
  Call c;
  EXPECT_TRUE(decode_call(b.rec, nullptr, c));
  return c;
}

// The generated row of `name`, nullptr when no header declares it.
const HeaderRow* header_row_of(std::string_view name) {
  for (const HeaderRow& r : header_rows())
    if (name == r.name) return &r;
  return nullptr;
}

const HeaderRow& header_row(std::string_view name) {
  if (const HeaderRow* r = header_row_of(name)) return *r;
  throw std::runtime_error("no header row " + std::string(name));
}

std::vector<int> slots_of_api(const Api& a) { return std::vector<int>(a.slots.begin(), a.slots.end()); }

std::string arg_text(const ArgSpec& a) {
  return std::string(a.name) + ":" + std::to_string(static_cast<int>(a.type)) + ":" + (a.ctype ? a.ctype : "");
}

TEST(HeaderRows, CuMemAllocIsItsV2WithTheHeadersTypes) {
  const HeaderRow& r = header_row("cuMemAlloc_v2");
  EXPECT_EQ(r.layer, Layer::Driver);
  EXPECT_EQ(r.returns, Returns::Status);
  EXPECT_STREQ(r.prototype, "CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)");
  ASSERT_EQ(r.args.size(), 2u);
  EXPECT_EQ(arg_text(r.args[0]), arg_text({"dptr", ArgType::OutPtr, "CUdeviceptr *"}));
  EXPECT_EQ(arg_text(r.args[1]), arg_text({"bytesize", ArgType::Size, "size_t"}));
  EXPECT_EQ(r.per_thread, 0);
  // The legacy 32-bit cuMemAlloc that libcuda still exports is a row of its own.
  EXPECT_STREQ(header_row("cuMemAlloc").args[1].ctype, "unsigned int");
}

TEST(HeaderRows, CudaMemcpyAsyncHasItsPtszFormAndItsKindByName) {
  const HeaderRow& r = header_row("cudaMemcpyAsync");
  EXPECT_EQ(r.layer, Layer::Runtime);
  EXPECT_EQ(r.per_thread, kPerThreadPtsz);
  ASSERT_EQ(r.args.size(), 5u);
  EXPECT_EQ(r.args[3].type, ArgType::Enum);
  ASSERT_NE(r.args[3].enum_type, nullptr);
  EXPECT_STREQ(r.args[3].enum_type->name, "cudaMemcpyKind");
  EXPECT_EQ(r.args[4].type, ArgType::Stream);
  EXPECT_EQ(header_row("cudaMemcpy").per_thread, kPerThreadPtds);
  // The symbol the header's macros make of the _ptsz form is not a row of its own.
  for (const HeaderRow& h : header_rows()) EXPECT_STRNE(h.name, "cudaMemcpyAsync_ptsz");
}

TEST(HeaderRows, EnumsComeFromTheHeaders) {
  const EnumType* attr = header_enum("CUdevice_attribute");
  ASSERT_NE(attr, nullptr);
  EXPECT_STREQ(enum_value_name(*attr, 75), "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR");
  EXPECT_EQ(enum_value_name(*attr, 123456), nullptr);
  const EnumType* kind = header_enum("cudaMemcpyKind");
  ASSERT_NE(kind, nullptr);
  EXPECT_STREQ(enum_value_name(*kind, 4), "cudaMemcpyDefault");
}

TEST(HeaderRows, AGeneratedEnumArgumentDecodesByName) {
  // An int's upper half is not the argument's.
  const Call c = decoded("cuDeviceGetAttribute", {0x7ffd0000, 0xffffffff00000000ull | 75, 0}, 9);
  EXPECT_EQ(describe(*find_arg(c, "attrib")), "named:CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR(75)");
  EXPECT_EQ(describe(*find_arg(c, "pi")), "i64:9");
}

TEST(HeaderRows, AFloatTravelsInAnXmmRegisterAndIsNotRead) {
  const HeaderRow& r = header_row("cuTexRefSetMipmapLevelBias");
  ASSERT_EQ(r.args.size(), 2u);
  EXPECT_EQ(r.args[1].type, ArgType::Float);
  const Api& a = api("cuTexRefSetMipmapLevelBias");
  EXPECT_EQ(a.slots[0], 0);
  EXPECT_EQ(a.slots[1], kNotCaptured);
  const Call c = decoded("cuTexRefSetMipmapLevelBias", {0x7e00, 42});  // rsi's 42 is never read as the float
  EXPECT_EQ(describe(*find_arg(c, "hTexRef")), "hex:0x7e00");
  EXPECT_EQ(describe(*find_arg(c, "bias")), "unavailable");
}

TEST(HeaderRows, AStructOver16BytesByValueIsPassedInMemory) {
  // cudaMemset3D(struct cudaPitchedPtr (32 bytes), int value, struct cudaExtent (24 bytes)):
  // both structs on the stack, the int in the first register.
  const HeaderRow& r = header_row("cudaMemset3D");
  ASSERT_EQ(r.args.size(), 3u);
  EXPECT_EQ(r.args[0].type, ArgType::Struct);
  EXPECT_EQ(r.args[0].words, 4);
  EXPECT_EQ(r.args[2].words, 3);
  const Api& a = api("cudaMemset3D");
  EXPECT_EQ(a.slots[0], kNotCaptured);
  EXPECT_EQ(a.slots[1], 0);
  EXPECT_EQ(a.slots[2], kNotCaptured);
  EXPECT_EQ(CT_COOKIE_STACK_WORDS(a.cookie), 0u);
  const Call c = decoded("cudaMemset3D", {7});
  EXPECT_EQ(describe(*find_arg(c, "value")), "i64:7");
  EXPECT_EQ(describe(*find_arg(c, "pitchedDevPtr")), "unavailable");
  EXPECT_EQ(describe(*find_arg(c, "extent")), "unavailable");
}

TEST(HeaderRows, ASmallStructByValueTakesTheRegistersOfItsEightbytes) {
  // cuMemPrefetchAsync_v2(CUdeviceptr, size_t, CUmemLocation (8 bytes: one register), unsigned int flags, CUstream)
  const Api& a = api("cuMemPrefetchAsync_v2");
  ASSERT_EQ(a.spec->args.size(), 5u);
  EXPECT_EQ(a.spec->args[2].type, ArgType::Struct);
  EXPECT_EQ(a.spec->args[2].int_words, 1);
  EXPECT_EQ(slots_of_api(a), (std::vector<int>{0, 1, kNotCaptured, 3, 4}));
}

TEST(HeaderRows, AStructReturnedInMemoryShiftsTheArgumentsByOne) {
  // struct cudaChannelFormatDesc (20 bytes) cudaCreateChannelDesc(int x, int y, int z, int w, enum f):
  // the caller passes the result's address in rdi.
  const Api& a = api("cudaCreateChannelDesc");
  EXPECT_EQ(a.spec->returns, Returns::Memory);
  EXPECT_EQ(slots_of_api(a), (std::vector<int>{1, 2, 3, 4, 5}));
  EXPECT_TRUE(a.cookie & CT_COOKIE_VOID);  // its return register is no status
}

TEST(HeaderRows, ARowWithoutAStatusNeverFails) {
  RecBuf b;
  init_rec(b, "cudaGetErrorString");
  b.rec.ret = 0x7f0000001000;  // the string's address
  b.rec.args[0] = 35;
  Call c;
  ASSERT_TRUE(decode_call(b.rec, nullptr, c));
  EXPECT_FALSE(c.failed());
  EXPECT_EQ(c.ret_name(), nullptr);
  EXPECT_EQ(describe(*find_arg(c, "error")), "named:cudaErrorInsufficientDriver(35)");
}

TEST(HeaderRows, EveryReadArgumentFitsTheSavedSlots) {
  for (const Api& a : apis()) {
    for (std::size_t i = 0; i < a.slots.size(); ++i)
      if (a.slots[i] != kNotCaptured)
        EXPECT_LE(a.slots[i] + slot_count(a.spec->args[i].type), CT_MAX_ARGS + (a.spec->args[i].type == ArgType::NcclUniqueId))
            << a.symbol << " " << a.spec->args[i].name;
    EXPECT_LE(CT_COOKIE_STACK_WORDS(a.cookie), unsigned(CT_MAX_STACK_ARGS)) << a.symbol;
  }
}

TEST(HeaderRows, AnArgumentBeyondTheSavedSlotsIsNotRead) {
  // cuTensorMapEncodeTiled has 12 integer arguments: the twelfth would be a sixth stack word.
  const Api& a = api("cuTensorMapEncodeTiled");
  ASSERT_EQ(a.spec->args.size(), 12u);
  EXPECT_EQ(a.slots[10], CT_MAX_ARGS - 1);
  EXPECT_EQ(a.slots[11], kNotCaptured);
  EXPECT_EQ(CT_COOKIE_STACK_WORDS(a.cookie), unsigned(CT_MAX_STACK_ARGS));
}

TEST(ApiOverrides, HandRowsAgreeWithTheHeaders) {
  // A hand-written row of a declared function decodes the same slots as the header's row:
  // it may name arguments differently (cudaLaunchKernel's grid) or join three into one
  // (cuLaunchKernel's Dim3Split), but never misplaces them.
  for (const ApiSpec& hand : hand_rows()) {
    const HeaderRow* declared = header_row_of(hand.name);
    if (!declared) continue;
    EXPECT_EQ(hand.layer, declared->layer) << hand.name;
    const Api& a = api(hand.name);
    const ApiSpec generated{declared->name, declared->layer, hand.group, hand.effect, declared->args,
                            declared->returns};
    int hand_slots = 0, header_slots = 0;
    for (std::size_t i = 0; i < a.spec->args.size(); ++i)
      if (a.slots[i] != kNotCaptured) hand_slots += slot_count(a.spec->args[i].type);
    for (const ArgSpec& arg : generated.args)
      if (arg.type != ArgType::Float && arg.type != ArgType::Struct) header_slots += slot_count(arg.type);
    EXPECT_EQ(hand_slots, header_slots) << hand.name;
    EXPECT_STREQ(a.spec->prototype, declared->prototype) << hand.name;
    EXPECT_EQ(a.spec->per_thread, declared->per_thread) << hand.name;
  }
}

TEST(ApiOverrides, AHandRowOfADeclaredFunctionDecodesSomethingTheHeaderDoesNot) {
  // One that repeats the generated row, names and types alike, belongs in the rules (group, effect, core).
  for (const ApiSpec& hand : hand_rows()) {
    const HeaderRow* declared = header_row_of(hand.name);
    if (!declared) continue;
    bool same = hand.args.size() == declared->args.size() && hand.returns == declared->returns;
    for (std::size_t i = 0; same && i < hand.args.size(); ++i)
      same = hand.args[i].type == declared->args[i].type && std::strcmp(hand.args[i].name, declared->args[i].name) == 0;
    EXPECT_FALSE(same) << hand.name << " repeats its generated row";
  }
}

TEST(ApiOverrides, HotGettersAreOffByDefault) {
  // The most frequent calls of one GPT-2 generate run that CUPTI counted (issue 28).
  for (const char* name : {"cuDevicePrimaryCtxGetState", "cuGetErrorString", "cuGetProcAddress_v2",
                           "cuKernelSetAttribute", "cuDriverGetVersion", "cuCtxGetLimit", "cudaGetErrorString",
                           "cuDeviceGet", "cuOccupancyMaxActiveClusters", "cudaGetDeviceProperties",
                           "cudaFuncSetAttribute", "cuFuncSetAttribute", "cuDeviceTotalMem_v2",
                           "cuFuncSetCacheConfig", "cuDeviceGetPCIBusId", "cuCtxPushCurrent_v2",
                           "cuTensorMapEncodeTiled"})
    EXPECT_FALSE(group_on_by_default(api(name).group())) << name;
}

TEST(ApiOverrides, WhatTheAnalysesReadIsPlaced) {
  EXPECT_EQ(api("cuLaunchHostFunc").effect(), Effect::HostFunc);
  EXPECT_EQ(api("cudaLaunchHostFunc").effect(), Effect::HostFunc);
  EXPECT_EQ(api("cudaLaunchHostFunc").group(), Group::Launch);
  EXPECT_EQ(api("cudaMemGetInfo").effect(), Effect::MemInfo);
  EXPECT_EQ(api("cuMemGetInfo_v2").effect(), Effect::MemInfo);
  EXPECT_TRUE(group_on_by_default(api("cuMemGetInfo_v2").group()));
  for (const char* load : {"cuModuleLoadData", "cuModuleLoadDataEx", "cuLibraryLoadData", "cudaLibraryLoadData"})
    EXPECT_EQ(api(load).effect(), Effect::ModuleLoad) << load;
  for (const char* unload : {"cuModuleUnload", "cuLibraryUnload", "cudaLibraryUnload"})
    EXPECT_EQ(api(unload).effect(), Effect::ModuleUnload) << unload;
  EXPECT_EQ(api("cuGraphicsMapResources").group(), Group::Interop);  // not a graph
  EXPECT_EQ(api("cuGraphAddKernelNode_v2").group(), Group::Graph);
}

TEST(ApiOverrides, OnlyTheModuleCallsThatNameKernelsAreTracedWithLaunches) {
  Selection launches;  // what -f launch probes (main.cpp)
  launches.group[static_cast<int>(Group::Launch)] = launches.graph_model = launches.kernel_names = true;
  for (const char* naming : {"__cudaRegisterFunction", "__cudaGetKernel", "cudaGetKernel", "cuModuleGetFunction",
                             "cuKernelGetFunction", "cuLibraryLoadData", "cuModuleUnload"})
    EXPECT_TRUE(launches.wants(api(naming))) << naming;
  // nvcc's other helpers: per launch (the configuration) or per module, and no kernel name.
  for (const char* helper : {"__cudaPushCallConfiguration", "__cudaPopCallConfiguration", "__cudaRegisterFatBinary",
                             "__cudaRegisterVar", "__cudaInitModule"}) {
    EXPECT_EQ(api(helper).group(), Group::Module) << helper;
    EXPECT_FALSE(launches.wants(api(helper))) << helper;
  }
  EXPECT_TRUE(is_hot_api(api("__cudaPushCallConfiguration")));
}

TEST(ApiOverrides, ALaunchConfigurationPopReadsTheStream) {
  // __cudaPopCallConfiguration(dim3*, dim3*, size_t* sharedMem, void* stream): the header says void*.
  const Call c = decoded("__cudaPopCallConfiguration", {0x7ffd0010, 0x7ffd0020, 0x7ffd0030, 0x7ffd0038});
  EXPECT_EQ(describe(*find_arg(c, "gridDim")), "hex:0x7ffd0010");
  EXPECT_EQ(api("__cudaPopCallConfiguration").out_index[1], 3);
}

TEST(ApiOverrides, RowsOfTheDefaultGroupsHaveTheSmallestIds) {
  bool default_part = true;
  for (const Api& a : apis()) {
    const bool in_default = group_on_by_default(a.group()) || names_kernels(*a.spec);
    if (!in_default) default_part = false;
    EXPECT_TRUE(!in_default || default_part) << a.symbol;
  }
}

}  // namespace
