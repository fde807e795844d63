#include "cudatrace/decode/api_table.h"

#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "cudatrace/bpf_abi.h"

namespace {

using namespace cudatrace;

const Api& api(const char* symbol) {
  const Api* a = api_by_symbol(symbol);
  if (!a) throw std::runtime_error(std::string("no API ") + symbol);
  return *a;
}

std::vector<int> slots_of(const Api& a) { return std::vector<int>(a.slots.begin(), a.slots.end()); }

// ---- Identity and lookup -------------------------------------------------

TEST(ApiTable, SymbolsAreUnique) {
  std::set<std::string> seen;
  for (const Api& a : apis()) EXPECT_TRUE(seen.insert(a.symbol).second) << "duplicate symbol " << a.symbol;
  EXPECT_EQ(seen.size(), apis().size());
}

TEST(ApiTable, RowNamesAreUnique) {
  std::set<std::string> seen;
  for (const ApiSpec& r : api_rows()) EXPECT_TRUE(seen.insert(r.name).second) << "duplicate row " << r.name;
}

TEST(ApiTable, IdsEqualTheirIndexAndFitTheBpfTable) {
  const auto& all = apis();
  ASSERT_FALSE(all.empty());
  ASSERT_LE(all.size(), std::size_t(CT_MAX_APIS));
  ASSERT_LT(all.size(), std::size_t(kNoApi));  // kNoApi must never be a real id
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].id, i) << all[i].symbol;
    EXPECT_EQ(CT_COOKIE_API(all[i].cookie), i) << all[i].symbol;
  }
}

TEST(ApiTable, LookupByIdAndBySymbolRoundTrip) {
  for (const Api& a : apis()) {
    EXPECT_EQ(api_by_id(a.id), &a) << a.symbol;
    EXPECT_EQ(api_by_symbol(a.symbol), &a) << a.symbol;
    EXPECT_EQ(api_by_symbol(api_by_id(a.id)->symbol), &a);
  }
}

TEST(ApiTable, LookupMissesGiveNull) {
  EXPECT_EQ(api_by_id(static_cast<std::uint16_t>(apis().size())), nullptr);
  EXPECT_EQ(api_by_id(kNoApi), nullptr);
  EXPECT_EQ(api_by_symbol(""), nullptr);
  EXPECT_EQ(api_by_symbol("cudaMallocX"), nullptr);
  EXPECT_EQ(api_by_symbol("cudamalloc"), nullptr);  // case-sensitive
  EXPECT_EQ(api_by_symbol("cudaMalloc "), nullptr);
}

TEST(ApiTable, EveryRowIsItsOwnNonVariantApi) {
  for (const ApiSpec& row : api_rows()) {
    const Api* a = api_by_symbol(row.name);
    ASSERT_NE(a, nullptr) << row.name;
    EXPECT_EQ(a->spec, &row);
    EXPECT_FALSE(a->variant) << row.name;
  }
}

// ---- _ptsz / _ptds variants ---------------------------------------------

TEST(ApiTable, CudaMemcpyAsyncHasThePerThreadVariantItsHeaderDeclares) {
  const Api& base = api("cudaMemcpyAsync");
  const Api* v = api_by_symbol("cudaMemcpyAsync_ptsz");
  ASSERT_NE(v, nullptr);
  EXPECT_TRUE(v->variant);
  EXPECT_EQ(v->spec, base.spec);
  EXPECT_EQ(v->slots, base.slots);
  EXPECT_NE(v->id, base.id);
  // Everything but the id bits is the same probe description.
  EXPECT_EQ(v->cookie >> 16, base.cookie >> 16);
  // cuda_runtime_api.h gives asynchronous calls a _ptsz form, synchronous ones a _ptds form.
  EXPECT_EQ(api_by_symbol("cudaMemcpyAsync_ptds"), nullptr);
  EXPECT_NE(api_by_symbol("cudaMemcpy_ptds"), nullptr);
  EXPECT_EQ(api_by_symbol("cudaMemcpy_ptsz"), nullptr);
}

TEST(ApiTable, VariantsAreThoseTheHeadersDeclare) {
  std::size_t expected = 0;
  for (const ApiSpec& row : api_rows()) {
    const std::string name = row.name;
    const bool ptsz = row.per_thread & kPerThreadPtsz, ptds = row.per_thread & kPerThreadPtds;
    expected += 1 + ptsz + ptds;
    EXPECT_EQ(api_by_symbol(name + "_ptsz") != nullptr, ptsz) << name;
    EXPECT_EQ(api_by_symbol(name + "_ptds") != nullptr, ptds) << name;
    if (row.group == Group::Module || row.group == Group::Nvtx || row.layer == Layer::Nccl)
      EXPECT_EQ(row.per_thread, 0) << name;
  }
  EXPECT_EQ(apis().size(), expected);
  EXPECT_EQ(api_by_symbol("__cudaRegisterFunction_ptsz"), nullptr);
  EXPECT_EQ(api_by_symbol("cuModuleGetFunction_ptds"), nullptr);
  EXPECT_EQ(api_by_symbol("cuKernelGetFunction_ptsz"), nullptr);
  EXPECT_NE(api_by_symbol("cuLaunchKernel_ptsz"), nullptr);
  EXPECT_NE(api_by_symbol("cuMemcpyHtoD_v2_ptds"), nullptr);
  EXPECT_NE(api_by_symbol("cuStreamGetCaptureInfo_v3_ptsz"), nullptr);
}

// ---- Cookies -------------------------------------------------------------

TEST(ApiCookie, CudaMallocOutParamSlot0Size8NoStack) {
  const Api& a = api("cudaMalloc");
  EXPECT_EQ(slots_of(a), (std::vector<int>{0, 1}));
  EXPECT_EQ(a.out_index[0], 0);
  EXPECT_EQ(a.out_index[1], -1);
  EXPECT_EQ(CT_COOKIE_API(a.cookie), a.id);
  EXPECT_EQ(CT_COOKIE_STACK_WORDS(a.cookie), 0u);
  EXPECT_EQ(CT_COOKIE_OUT_SLOT(a.cookie, 0), 1u);  // slot 0, stored + 1
  EXPECT_EQ(CT_COOKIE_OUT_SIZE(a.cookie, 0), 8u);
  EXPECT_EQ(CT_COOKIE_OUT_SLOT(a.cookie, 1), 0u);
  EXPECT_EQ(CT_COOKIE_OUT_SIZE(a.cookie, 1), 0u);
  EXPECT_EQ(CT_COOKIE_PAYLOAD_SLOT(a.cookie), 0u);
  EXPECT_EQ(CT_COOKIE_PAYLOAD_KIND(a.cookie), unsigned(CT_PAYLOAD_NONE));
  EXPECT_TRUE(a.cookie & CT_COOKIE_DETAIL);  // an allocation: the memory summary needs it
  EXPECT_EQ(CT_COOKIE_OP(a.cookie), a.id);  // its own operation
  const std::uint64_t op_bits = std::uint64_t(CT_COOKIE_OP(~0ull)) << CT_COOKIE_OP_SHIFT;
  EXPECT_EQ((a.cookie & ~CT_COOKIE_DETAIL & ~op_bits) >> 16, (std::uint64_t(1) << 4) | (std::uint64_t(8) << 8));  // nothing else set
}

TEST(ApiCookie, CudaMallocPitchHasTwoOutParams) {
  const Api& a = api("cudaMallocPitch");
  EXPECT_EQ(a.out_index[0], 0);
  EXPECT_EQ(a.out_index[1], 1);
  EXPECT_EQ(CT_COOKIE_OUT_SLOT(a.cookie, 0), 1u);
  EXPECT_EQ(CT_COOKIE_OUT_SIZE(a.cookie, 0), 8u);
  EXPECT_EQ(CT_COOKIE_OUT_SLOT(a.cookie, 1), 2u);  // slot 1
  EXPECT_EQ(CT_COOKIE_OUT_SIZE(a.cookie, 1), 8u);  // size_t*
  EXPECT_EQ(CT_COOKIE_STACK_WORDS(a.cookie), 0u);
  EXPECT_EQ(CT_COOKIE_PAYLOAD_KIND(a.cookie), unsigned(CT_PAYLOAD_NONE));
}

TEST(ApiCookie, FloatAndIntOutParamsAreFourBytes) {
  const Api& elapsed = api("cudaEventElapsedTime");
  EXPECT_EQ(CT_COOKIE_OUT_SLOT(elapsed.cookie, 0), 1u);
  EXPECT_EQ(CT_COOKIE_OUT_SIZE(elapsed.cookie, 0), 4u);
  EXPECT_EQ(CT_COOKIE_OUT_SLOT(elapsed.cookie, 1), 0u);

  const Api& get_device = api("cudaGetDevice");
  EXPECT_EQ(CT_COOKIE_OUT_SLOT(get_device.cookie, 0), 1u);
  EXPECT_EQ(CT_COOKIE_OUT_SIZE(get_device.cookie, 0), 4u);

  EXPECT_EQ(CT_COOKIE_OUT_SIZE(api("cudaGetDeviceCount").cookie, 0), 4u);
  EXPECT_EQ(CT_COOKIE_OUT_SIZE(api("cuEventElapsedTime_v2").cookie, 0), 4u);
  EXPECT_EQ(CT_COOKIE_OUT_SIZE(api("cudaStreamCreate").cookie, 0), 8u);  // handle
}

TEST(ApiCookie, CudaLaunchKernelDim3sTakeTwoSlotsEach) {
  const Api& a = api("cudaLaunchKernel");
  // func, grid (2 slots), block (2 slots), args, sharedMem, stream
  EXPECT_EQ(slots_of(a), (std::vector<int>{0, 1, 3, 5, 6, 7}));
  EXPECT_EQ(CT_COOKIE_STACK_WORDS(a.cookie), 2u);  // sharedMem and stream are on the stack
  EXPECT_EQ(CT_COOKIE_OUT_SLOT(a.cookie, 0), 0u);
  EXPECT_EQ(CT_COOKIE_PAYLOAD_KIND(a.cookie), unsigned(CT_PAYLOAD_NONE));
  EXPECT_EQ(a.payload_index, -1);
}

TEST(ApiCookie, CuLaunchKernelUsesElevenSlotsFiveOnTheStack) {
  const Api& a = api("cuLaunchKernel");
  // f, gridDimX..Z, blockDimX..Z, sharedMemBytes, hStream, kernelParams, extra
  EXPECT_EQ(slots_of(a), (std::vector<int>{0, 1, 4, 7, 8, 9, 10}));
  EXPECT_EQ(a.spec->args[4].name, std::string("hStream"));
  EXPECT_EQ(a.slots[4], 8);
  EXPECT_EQ(CT_COOKIE_STACK_WORDS(a.cookie), 5u);
  EXPECT_EQ(CT_COOKIE_STACK_WORDS(a.cookie), unsigned(CT_MAX_STACK_ARGS));
}

TEST(ApiCookie, CudaMemcpy2DAsyncHasTwoStackWords) {
  const Api& a = api("cudaMemcpy2DAsync");
  EXPECT_EQ(slots_of(a), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(CT_COOKIE_STACK_WORDS(a.cookie), 2u);
  EXPECT_EQ(CT_COOKIE_STACK_WORDS(api("cudaMemcpy2D").cookie), 1u);
  EXPECT_EQ(CT_COOKIE_STACK_WORDS(api("cudaMemcpyAsync").cookie), 0u);
}

TEST(ApiCookie, RegisterFunctionReadsStringPayloadFromSlot2) {
  const Api& a = api("__cudaRegisterFunction");
  EXPECT_EQ(a.payload_index, 2);
  EXPECT_EQ(CT_COOKIE_PAYLOAD_SLOT(a.cookie), 3u);  // slot 2, stored + 1
  EXPECT_EQ(CT_COOKIE_PAYLOAD_KIND(a.cookie), unsigned(CT_PAYLOAD_STRING));
  EXPECT_EQ(CT_COOKIE_PAYLOAD_WORDS(a.cookie), 0u);
  EXPECT_EQ(CT_COOKIE_OUT_SLOT(a.cookie, 0), 0u);
  EXPECT_EQ(a.spec->returns, Returns::Void);
}

TEST(ApiCookie, ModuleLookupsHaveStringPayloadAndOutHandle) {
  const Api& a = api("cuModuleGetFunction");
  EXPECT_EQ(CT_COOKIE_PAYLOAD_SLOT(a.cookie), 3u);
  EXPECT_EQ(CT_COOKIE_PAYLOAD_KIND(a.cookie), unsigned(CT_PAYLOAD_STRING));
  EXPECT_EQ(CT_COOKIE_OUT_SLOT(a.cookie, 0), 1u);
  EXPECT_EQ(CT_COOKIE_OUT_SIZE(a.cookie, 0), 8u);
}

TEST(ApiCookie, LaunchExReadsLaunchConfigFromSlot0) {
  for (const char* sym : {"cuLaunchKernelEx", "cudaLaunchKernelExC"}) {
    const Api& a = api(sym);
    EXPECT_EQ(a.payload_index, 0) << sym;
    EXPECT_EQ(CT_COOKIE_PAYLOAD_SLOT(a.cookie), 1u) << sym;
    EXPECT_EQ(CT_COOKIE_PAYLOAD_KIND(a.cookie), unsigned(CT_PAYLOAD_LAUNCH_CONFIG)) << sym;
    EXPECT_EQ(CT_COOKIE_STACK_WORDS(a.cookie), 0u) << sym;
  }
}

TEST(ApiCookie, NoArgumentApisHaveAnEmptyCookie) {
  const Api& a = api("cudaDeviceSynchronize");
  EXPECT_TRUE(a.slots.empty());
  EXPECT_EQ(a.cookie, a.id | CT_COOKIE_RUNTIME | std::uint64_t(a.id) << CT_COOKIE_OP_SHIFT);  // its own operation
}

// A driver call a runtime call makes is part of its record unless it has out-params (bpf_abi.h, bit 60).
TEST(ApiCookie, LayersTellWhichDriverCallsArePartOfARuntimeCall) {
  EXPECT_TRUE(api("cudaLaunchKernel").cookie & CT_COOKIE_RUNTIME);
  EXPECT_FALSE(api("cudaLaunchKernel").cookie & CT_COOKIE_DRIVER);
  EXPECT_TRUE(api("cuLaunchKernel").cookie & CT_COOKIE_DRIVER);
  EXPECT_FALSE(api("cuLaunchKernel").cookie & CT_COOKIE_RUNTIME);
  EXPECT_FALSE(CT_COOKIE_HAS_OUTS(api("cuLaunchKernel").cookie));
  EXPECT_TRUE(CT_COOKIE_HAS_OUTS(api("cuModuleGetFunction").cookie));
  for (const char* other : {"ncclAllReduce", "nvtxRangePush"})
    EXPECT_FALSE(api(other).cookie & (CT_COOKIE_RUNTIME | CT_COOKIE_DRIVER)) << other;
  for (const Api& a : apis()) EXPECT_LT(CT_COOKIE_OP(a.cookie), unsigned(CT_MAX_APIS)) << a.symbol;
}

// One operation id for an API's _ptsz/_ptds forms and _vN versions: a call of
// one entered inside a call of another is a forward (bpf_abi.h, ct_frame).
TEST(ApiCookie, VariantsAndVersionsShareTheOperation) {
  const auto op = [](const char* symbol) { return CT_COOKIE_OP(api(symbol).cookie); };
  EXPECT_EQ(op("cudaLaunchKernel"), api("cudaLaunchKernel").id);
  EXPECT_EQ(op("cudaLaunchKernel_ptsz"), op("cudaLaunchKernel"));
  EXPECT_EQ(op("cudaMemcpyAsync_ptsz"), op("cudaMemcpyAsync"));
  EXPECT_EQ(op("cuEventElapsedTime_v2"), op("cuEventElapsedTime"));
  EXPECT_EQ(op("cuCtxSynchronize_v2"), op("cuCtxSynchronize"));
  EXPECT_EQ(op("cuMemAlloc_v2"), api("cuMemAlloc_v2").id);
  EXPECT_NE(op("cudaMemcpy"), op("cudaMemcpyAsync"));
  EXPECT_NE(op("cudaMalloc"), op("cuMemAlloc_v2"));
  EXPECT_NE(op("cudaLaunchKernel"), op("cudaLaunchKernelExC"));
}

// Invariants that the BPF side relies on, for every API.
TEST(ApiCookie, FieldsAgreeWithSlotsForEveryApi) {
  for (const Api& a : apis()) {
    SCOPED_TRACE(a.symbol);
    ASSERT_EQ(a.slots.size(), a.spec->args.size());
    int used = 0, outs = 0, payloads = 0, next_slot = a.spec->returns == Returns::Memory ? 1 : 0;
    bool stack_struct = false, in_memory = false;
    for (std::size_t i = 0; i < a.spec->args.size(); ++i) {
      const ArgType t = a.spec->args[i].type;
      if (a.slots[i] == kNotCaptured) {  // header_rows_test.cpp checks where those went
        in_memory |= t == ArgType::Struct;
        continue;
      }
      if (t == ArgType::NcclUniqueId) {
        // Passed in memory: its address goes to slot CT_REG_ARGS, no register is used.
        stack_struct = true;
        ++payloads;
        EXPECT_EQ(a.slots[i], CT_REG_ARGS);
        EXPECT_EQ(a.payload_index, int(i));
        EXPECT_EQ(CT_COOKIE_PAYLOAD_SLOT(a.cookie), CT_REG_ARGS + 1u);
        EXPECT_EQ(CT_COOKIE_PAYLOAD_KIND(a.cookie), unsigned(CT_PAYLOAD_BYTES));
        EXPECT_EQ(CT_COOKIE_PAYLOAD_WORDS(a.cookie), unsigned(kNcclUniqueIdBytes / 8));
        continue;
      }
      if (!in_memory) EXPECT_EQ(a.slots[i], next_slot) << a.symbol;  // a struct in memory takes stack words
      next_slot = a.slots[i] + slot_count(t);
      used = std::max(used, a.slots[i] + slot_count(t));
      if (is_out(t)) {
        ASSERT_LT(outs, 2);
        EXPECT_EQ(a.out_index[outs], int(i));
        EXPECT_EQ(CT_COOKIE_OUT_SLOT(a.cookie, outs), a.slots[i] + 1u);
        const unsigned size =
            (t == ArgType::OutInt || t == ArgType::OutFloat || t == ArgType::OutUInt || t == ArgType::OutEnum) ? 4 : 8;
        EXPECT_EQ(CT_COOKIE_OUT_SIZE(a.cookie, outs), size);
        // The return probe reads out-params through saved argument registers.
        EXPECT_LT(a.slots[i], CT_MAX_ARGS);
        ++outs;
      }
      if (t == ArgType::String || t == ArgType::LaunchConfig || t == ArgType::NcclUniqueIdPtr ||
          t == ArgType::NcclCommArray || t == ArgType::KernelNodeParams) {
        ++payloads;
        EXPECT_EQ(a.payload_index, int(i));
        EXPECT_EQ(CT_COOKIE_PAYLOAD_SLOT(a.cookie), a.slots[i] + 1u);
      }
      if (t == ArgType::KernelNodeParams) {  // no more than the struct: reading past it could fault
        EXPECT_EQ(CT_COOKIE_PAYLOAD_KIND(a.cookie), unsigned(CT_PAYLOAD_BYTES));
        const bool v2 = a.spec->name == std::string_view("cuGraphAddKernelNode_v2");
        EXPECT_EQ(CT_COOKIE_PAYLOAD_WORDS(a.cookie), unsigned((v2 ? kKernelNodeParamsV2Bytes : kKernelNodeParamsBytes) / 8));
      }
    }
    EXPECT_LE(used, CT_MAX_ARGS);
    EXPECT_EQ(CT_COOKIE_STACK_WORDS(a.cookie), unsigned(used > CT_REG_ARGS ? used - CT_REG_ARGS : 0));
    for (int o = outs; o < 2; ++o) {
      EXPECT_EQ(a.out_index[o], -1);
      EXPECT_EQ(CT_COOKIE_OUT_SLOT(a.cookie, o), 0u);
    }
    if (payloads == 0) {
      EXPECT_EQ(a.payload_index, -1);
      EXPECT_EQ(CT_COOKIE_PAYLOAD_KIND(a.cookie), unsigned(CT_PAYLOAD_NONE));
    }
    EXPECT_LE(payloads, 1);
    EXPECT_LE(CT_COOKIE_OP(a.cookie), a.id);  // the first API of its operation
    EXPECT_EQ(api_by_id(CT_COOKIE_OP(a.cookie))->layer(), a.layer());
    // Bits 61..63, the last ones, each as documented.
    EXPECT_EQ(bool(a.cookie & CT_COOKIE_ALWAYS), a.group() == Group::Nvtx);
    EXPECT_EQ(bool(a.cookie & CT_COOKIE_STACK_ADDR), stack_struct);
    if (stack_struct) EXPECT_LE(next_slot, CT_REG_ARGS);
    EXPECT_EQ(bool(a.cookie & CT_COOKIE_NCCL_STATUS), a.layer() == Layer::Nccl);
    EXPECT_EQ(bool(a.cookie & CT_COOKIE_VOID), a.spec->returns != Returns::Status);
  }
}

// ---- Argument types ------------------------------------------------------

TEST(ArgTypes, OutTypesAndSlotCounts) {
  EXPECT_TRUE(is_out(ArgType::OutPtr));
  EXPECT_TRUE(is_out(ArgType::OutSize));
  EXPECT_TRUE(is_out(ArgType::OutFunc));
  EXPECT_FALSE(is_out(ArgType::Ptr));
  EXPECT_FALSE(is_out(ArgType::LaunchConfig));
  EXPECT_FALSE(is_out(ArgType::String));
  EXPECT_EQ(slot_count(ArgType::Dim3), 2);
  EXPECT_EQ(slot_count(ArgType::Dim3Split), 3);
  EXPECT_EQ(slot_count(ArgType::Size), 1);
  EXPECT_EQ(slot_count(ArgType::LaunchConfig), 1);
}

// ---- Groups and layers ---------------------------------------------------

TEST(Groups, NamesAreExact) {
  EXPECT_STREQ(group_name(Group::Mem), "mem");
  EXPECT_STREQ(group_name(Group::Xfer), "xfer");
  EXPECT_STREQ(group_name(Group::Launch), "launch");
  EXPECT_STREQ(group_name(Group::Stream), "stream");
  EXPECT_STREQ(group_name(Group::Event), "event");
  EXPECT_STREQ(group_name(Group::Device), "device");
  EXPECT_STREQ(group_name(Group::Module), "module");
  EXPECT_STREQ(group_name(Group::Query), "query");
}

TEST(Groups, HighFrequencyQueriesAreOffByDefault) {
  for (int i = 0; i < kGroupCount; ++i) {
    const Group g = static_cast<Group>(i);
    const bool by_default = g == Group::Mem || g == Group::Xfer || g == Group::Launch || g == Group::Stream ||
                            g == Group::Event || g == Group::Device || g == Group::Coll;
    EXPECT_EQ(group_on_by_default(g), by_default) << group_name(g);
    EXPECT_STRNE(group_description(g), "") << group_name(g);
  }
  for (const char* name : {"cudaGetDevice", "cudaGetLastError", "cudaPeekAtLastError", "cuCtxGetCurrent",
                           "cuCtxGetDevice", "cudaStreamGetCaptureInfo", "cudaStreamIsCapturing",
                           "cuStreamGetCaptureInfo_v3", "cudaDeviceGetAttribute", "cuDeviceGetAttribute",
                           "cuFuncGetAttribute", "cudaPointerGetAttributes"}) {
    const Api* a = api_by_symbol(name);
    ASSERT_NE(a, nullptr) << name;
    EXPECT_EQ(a->group(), Group::Query) << name;
  }
  // Seven arguments: one on the stack; the first two out-pointers are read.
  const Api& info = *api_by_symbol("cudaStreamGetCaptureInfo");
  EXPECT_EQ(CT_COOKIE_STACK_WORDS(info.cookie), 1u);
  EXPECT_EQ(CT_COOKIE_OUT_SLOT(info.cookie, 0), 2u);
  EXPECT_EQ(CT_COOKIE_OUT_SIZE(info.cookie, 0), 4u);
  EXPECT_EQ(CT_COOKIE_OUT_SLOT(info.cookie, 1), 3u);
  EXPECT_EQ(CT_COOKIE_OUT_SIZE(info.cookie, 1), 8u);
}

TEST(Groups, ParseGroupRoundTrips) {
  for (int i = 0; i < kGroupCount; ++i) {
    const Group g = static_cast<Group>(i);
    const auto parsed = parse_group(group_name(g));
    ASSERT_TRUE(parsed.has_value()) << group_name(g);
    EXPECT_EQ(*parsed, g);
  }
}

TEST(Groups, ParseGroupRejectsUnknownNames) {
  for (const char* bad : {"", "Mem", "MEM", "memory", "mem ", " mem", "launches", "all", "me"})
    EXPECT_FALSE(parse_group(bad).has_value()) << '"' << bad << '"';
  EXPECT_FALSE(parse_group(std::string_view("mem\0", 4)).has_value());
}

TEST(Groups, EveryGroupHasAtLeastOneApi) {
  std::set<int> seen;
  for (const ApiSpec& r : api_rows()) seen.insert(static_cast<int>(r.group));
  EXPECT_EQ(seen.size(), std::size_t(kGroupCount));
}

TEST(Layers, NamesAndAssignment) {
  EXPECT_STREQ(layer_name(Layer::Runtime), "runtime");
  EXPECT_STREQ(layer_name(Layer::Driver), "driver");
  EXPECT_EQ(api("cudaMalloc").layer(), Layer::Runtime);
  EXPECT_EQ(api("cuMemAlloc_v2").layer(), Layer::Driver);
  EXPECT_EQ(api("cuLaunchKernel").group(), Group::Launch);
  EXPECT_EQ(api("cudaMemcpyAsync_ptsz").group(), Group::Xfer);
}

// NVTX calls are shown by what they are, never by the injection library's
// functions they are probed at (issue 41); older traces named those.
TEST(ApiTable, NvtxRowsAreNamedByNvtxAndProbedInTheInjectionLibrary) {
  for (const Api& a : apis()) {
    if (a.layer() != Layer::Nvtx) {
      EXPECT_EQ(probe_symbol(a), a.symbol);
      continue;
    }
    EXPECT_EQ(a.symbol.rfind("nvtx", 0), 0u) << a.symbol;
    EXPECT_EQ(probe_symbol(a).rfind("cudatrace_nvtx_", 0), 0u) << a.symbol;
    EXPECT_EQ(api_by_symbol(probe_symbol(a)), &a) << "a trace of an older version reads back";
  }
  EXPECT_EQ(probe_symbol(api("nvtxRangePush")), "cudatrace_nvtx_push");
}

}  // namespace

TEST(ApiCookie, DetailBitMarksCallsTheSummaryTablesNeed) {
  EXPECT_TRUE(api("cudaLaunchKernel").cookie & CT_COOKIE_DETAIL);
  EXPECT_TRUE(api("cuMemcpyHtoD_v2").cookie & CT_COOKIE_DETAIL);
  EXPECT_TRUE(api("cudaFree").cookie & CT_COOKIE_DETAIL);
  EXPECT_TRUE(api("__cudaRegisterFunction").cookie & CT_COOKIE_DETAIL);  // kernel names
  EXPECT_FALSE(api("cudaGetDevice").cookie & CT_COOKIE_DETAIL);
  EXPECT_FALSE(api("cudaStreamSynchronize").cookie & CT_COOKIE_DETAIL);
  EXPECT_FALSE(api("cuEventRecord").cookie & CT_COOKIE_DETAIL);
}
