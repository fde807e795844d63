#include "cudatrace/decode/kernel_names.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cudatrace/decode/decode.h"
#include "record_builder.h"

namespace {

using namespace cudatrace;
using cudatrace_test::init_rec;
using cudatrace_test::RecBuf;
using cudatrace_test::set_string_payload;

constexpr std::uint32_t kPid = 4242;
constexpr std::uint32_t kOtherPid = 4343;
constexpr std::uint64_t kHostFun = 0x401136;
constexpr std::uint64_t kKernelHandle = 0x5555aa000010;

class KernelNamesTest : public ::testing::Test {
 protected:
  // Decodes a record (kept alive by the fixture) and lets `names` learn from it.
  void learn(const RecBuf& b) {
    Call c;
    ASSERT_TRUE(decode_call(b.rec, &names, c));
    names.learn(c);
  }

  void register_function(std::uint32_t pid, std::uint64_t host_fun, const std::string& mangled) {
    RecBuf& b = next();
    init_rec(b, "__cudaRegisterFunction", pid);
    b.rec.args[0] = 0x5555000e0000;
    b.rec.args[1] = host_fun;
    b.rec.args[2] = 0x402000;
    set_string_payload(b, mangled);
    learn(b);
  }

  // __cudaGetKernel / cudaGetKernel / cuKernelGetFunction: out handle from a known one.
  void get_from_handle(const char* api, std::uint32_t pid, std::uint64_t out, std::uint64_t from,
                       std::int64_t ret = 0) {
    RecBuf& b = next();
    init_rec(b, api, pid);
    b.rec.args[0] = 0x7ffd00000100;
    b.rec.args[1] = from;
    b.rec.outs[0] = out;
    b.rec.ret = ret;
    learn(b);
  }

  // cuModuleGetFunction / cuLibraryGetKernel / cudaLibraryGetKernel: out handle from a name.
  void get_by_name(const char* api, std::uint32_t pid, std::uint64_t out, const std::string& name,
                   std::int64_t ret = 0) {
    RecBuf& b = next();
    init_rec(b, api, pid);
    b.rec.args[0] = 0x7ffd00000200;
    b.rec.args[1] = 0x5555000f0000;  // module / library
    b.rec.args[2] = 0x402100;
    b.rec.outs[0] = out;
    b.rec.ret = ret;
    set_string_payload(b, name);
    learn(b);
  }

  std::string mangled(std::uint32_t pid, std::uint64_t handle) {
    const KernelNames::Name* n = names.find(pid, handle);
    return n ? std::string(n->mangled) : "<unknown>";
  }
  std::string demangled(std::uint32_t pid, std::uint64_t handle) {
    const KernelNames::Name* n = names.find(pid, handle);
    return n ? std::string(n->demangled) : "<unknown>";
  }

  RecBuf& next() {
    recs_.emplace_back(new RecBuf);
    return *recs_.back();
  }

  KernelNames names;
  std::vector<std::unique_ptr<RecBuf>> recs_;
};

TEST_F(KernelNamesTest, RegisterThenGetKernelGivesSameName) {
  register_function(kPid, kHostFun, "_Z6addOnePfi");
  EXPECT_EQ(mangled(kPid, kHostFun), "_Z6addOnePfi");
  EXPECT_EQ(demangled(kPid, kHostFun), "addOne(float*, int)");

  get_from_handle("__cudaGetKernel", kPid, kKernelHandle, kHostFun);
  EXPECT_EQ(mangled(kPid, kKernelHandle), "_Z6addOnePfi");
  EXPECT_EQ(demangled(kPid, kKernelHandle), "addOne(float*, int)");
}

TEST_F(KernelNamesTest, AVariableRegistrationNamesNoKernel) {
  // __cudaRegisterVar(handle, hostVar, deviceAddress, deviceName, ...): a name, but no kernel handle.
  RecBuf& b = next();
  init_rec(b, "__cudaRegisterVar", kPid);
  b.rec.args[0] = 0x5555000e0000;
  b.rec.args[1] = kHostFun;
  set_string_payload(b, "counter");
  learn(b);
  EXPECT_EQ(mangled(kPid, kHostFun), "<unknown>");
  EXPECT_EQ(mangled(kPid, 0), "<unknown>");
}

TEST_F(KernelNamesTest, CudaGetKernelAlsoLearns) {
  register_function(kPid, kHostFun, "_Z5scalePff");
  get_from_handle("cudaGetKernel", kPid, kKernelHandle, kHostFun);
  EXPECT_EQ(demangled(kPid, kKernelHandle), "scale(float*, float)");
}

TEST_F(KernelNamesTest, LaunchDecodingUsesLearntNames) {
  register_function(kPid, kHostFun, "_Z6addOnePfi");
  get_from_handle("__cudaGetKernel", kPid, kKernelHandle, kHostFun);

  RecBuf launch;
  init_rec(launch, "cudaLaunchKernel", kPid);
  launch.rec.args[0] = kKernelHandle;
  Call c;
  ASSERT_TRUE(decode_call(launch.rec, &names, c));
  EXPECT_EQ(c.kernel, "addOne(float*, int)");
  EXPECT_EQ(c.kernel_mangled, "_Z6addOnePfi");

  // The legacy path launches by host stub: known from the registration.
  launch.rec.args[0] = kHostFun;
  ASSERT_TRUE(decode_call(launch.rec, &names, c));
  EXPECT_EQ(c.kernel, "addOne(float*, int)");

  // Same handle, other process: unknown.
  launch.rec.pid = kOtherPid;
  ASSERT_TRUE(decode_call(launch.rec, &names, c));
  EXPECT_EQ(c.kernel, "?");
  EXPECT_EQ(c.kernel_mangled, "?");
}

TEST_F(KernelNamesTest, ModuleGetFunctionLearnsByOutHandle) {
  get_by_name("cuModuleGetFunction", kPid, 0x5555cc000000, "_Z4axpyfPKfPf");
  EXPECT_EQ(mangled(kPid, 0x5555cc000000), "_Z4axpyfPKfPf");
  EXPECT_EQ(demangled(kPid, 0x5555cc000000), "axpy(float, float const*, float*)");
  // The module handle and the string pointer are not kernel handles.
  EXPECT_EQ(names.find(kPid, 0x5555000f0000), nullptr);
  EXPECT_EQ(names.find(kPid, 0x402100), nullptr);
}

TEST_F(KernelNamesTest, ExternCNamesAreKeptAsIs) {
  get_by_name("cuModuleGetFunction", kPid, 0x5555cc000100, "vector_add");
  EXPECT_EQ(mangled(kPid, 0x5555cc000100), "vector_add");
  EXPECT_EQ(demangled(kPid, 0x5555cc000100), "vector_add");
}

TEST_F(KernelNamesTest, LibraryGetKernelThenKernelGetFunctionChain) {
  const std::uint64_t cu_kernel = 0x5555dd000000, cu_function = 0x5555ee000000;
  get_by_name("cuLibraryGetKernel", kPid, cu_kernel, "_Z6reducePfS_i");
  get_from_handle("cuKernelGetFunction", kPid, cu_function, cu_kernel);
  EXPECT_EQ(mangled(kPid, cu_kernel), "_Z6reducePfS_i");
  EXPECT_EQ(mangled(kPid, cu_function), "_Z6reducePfS_i");
  EXPECT_EQ(demangled(kPid, cu_function), "reduce(float*, float*, int)");
}

TEST_F(KernelNamesTest, CudaLibraryGetKernelLearnsByName) {
  get_by_name("cudaLibraryGetKernel", kPid, 0x5555dd000100, "_Z3foov");
  EXPECT_EQ(demangled(kPid, 0x5555dd000100), "foo()");
}

TEST_F(KernelNamesTest, FailedLookupsLearnNothing) {
  get_by_name("cuModuleGetFunction", kPid, 0x5555cc000200, "_Z3badv", /*ret=*/500);  // CUDA_ERROR_NOT_FOUND
  EXPECT_EQ(names.find(kPid, 0x5555cc000200), nullptr);

  get_by_name("cuLibraryGetKernel", kPid, 0x5555cc000300, "_Z3badv", /*ret=*/1);
  EXPECT_EQ(names.find(kPid, 0x5555cc000300), nullptr);

  register_function(kPid, kHostFun, "_Z6addOnePfi");
  get_from_handle("__cudaGetKernel", kPid, 0x5555cc000400, kHostFun, /*ret=*/98);  // invalid device function
  EXPECT_EQ(names.find(kPid, 0x5555cc000400), nullptr);
}

TEST_F(KernelNamesTest, UnfinishedLookupsLearnNothing) {
  RecBuf& b = next();
  init_rec(b, "cuModuleGetFunction", kPid);
  b.rec.type = CT_REC_UNFINISHED;
  b.rec.outs[0] = 0x5555cc000500;
  set_string_payload(b, "_Z3foov");
  learn(b);
  EXPECT_EQ(names.find(kPid, 0x5555cc000500), nullptr);
}

TEST_F(KernelNamesTest, GetKernelForUnknownHostFunLearnsNothing) {
  get_from_handle("__cudaGetKernel", kPid, kKernelHandle, 0x409999);
  EXPECT_EQ(names.find(kPid, kKernelHandle), nullptr);
}

TEST_F(KernelNamesTest, NonModuleCallsAreIgnored) {
  RecBuf& b = next();
  init_rec(b, "cudaMalloc", kPid);
  b.rec.outs[0] = 0x7f0000200000;
  learn(b);
  EXPECT_EQ(names.find(kPid, 0x7f0000200000), nullptr);
}

TEST_F(KernelNamesTest, NamesArePerProcess) {
  register_function(kPid, kHostFun, "_Z6addOnePfi");
  register_function(kOtherPid, kHostFun, "_Z3subv");
  EXPECT_EQ(mangled(kPid, kHostFun), "_Z6addOnePfi");
  EXPECT_EQ(mangled(kOtherPid, kHostFun), "_Z3subv");
  EXPECT_EQ(names.find(kOtherPid + 1, kHostFun), nullptr);
}

TEST_F(KernelNamesTest, ForgetDropsOnlyThatProcess) {
  register_function(kPid, kHostFun, "_Z6addOnePfi");
  register_function(kOtherPid, kHostFun, "_Z3subv");
  names.forget(kPid);
  EXPECT_EQ(names.find(kPid, kHostFun), nullptr);
  EXPECT_EQ(mangled(kOtherPid, kHostFun), "_Z3subv");
  names.forget(kOtherPid);
  EXPECT_EQ(names.find(kOtherPid, kHostFun), nullptr);
  names.forget(999);  // unknown pid: harmless
}

TEST_F(KernelNamesTest, ReRegistrationReplacesTheName) {
  register_function(kPid, kHostFun, "_Z6addOnePfi");
  register_function(kPid, kHostFun, "_Z3foov");
  EXPECT_EQ(mangled(kPid, kHostFun), "_Z3foov");
  EXPECT_EQ(demangled(kPid, kHostFun), "foo()");
}

TEST_F(KernelNamesTest, ZeroHandleAndEmptyNameAreNotRemembered) {
  register_function(kPid, 0, "_Z6addOnePfi");
  EXPECT_EQ(names.find(kPid, 0), nullptr);
  register_function(kPid, kHostFun, "");
  EXPECT_EQ(names.find(kPid, kHostFun), nullptr);
}

TEST_F(KernelNamesTest, SymbolizerIsUsedOnlyOnAMissAndEmptyAnswersAreCached) {
  std::vector<std::pair<std::uint32_t, std::uint64_t>> calls;
  names.set_symbolizer([&](std::uint32_t pid, std::uint64_t addr) -> std::string {
    calls.emplace_back(pid, addr);
    return addr == 0x401500 ? "_Z8hostStubPi" : "";
  });
  register_function(kPid, kHostFun, "_Z6addOnePfi");

  // Known: no symbolizer call.
  EXPECT_EQ(mangled(kPid, kHostFun), "_Z6addOnePfi");
  EXPECT_TRUE(calls.empty());

  // Miss with an answer: asked once, then remembered.
  EXPECT_EQ(demangled(kPid, 0x401500), "hostStub(int*)");
  EXPECT_EQ(demangled(kPid, 0x401500), "hostStub(int*)");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], std::make_pair(kPid, std::uint64_t(0x401500)));

  // Miss without an answer: asked once, the empty answer cached.
  EXPECT_EQ(names.find(kPid, 0x409000), nullptr);
  EXPECT_EQ(names.find(kPid, 0x409000), nullptr);
  EXPECT_EQ(names.find(kPid, 0x409000), nullptr);
  EXPECT_EQ(calls.size(), 2u);

  // The negative cache is per process.
  EXPECT_EQ(names.find(kOtherPid, 0x409000), nullptr);
  EXPECT_EQ(calls.size(), 3u);

  // Handle 0 is never symbolised.
  EXPECT_EQ(names.find(kPid, 0), nullptr);
  EXPECT_EQ(calls.size(), 3u);
}

TEST_F(KernelNamesTest, LearningOverridesANegativeCacheEntry) {
  int count = 0;
  names.set_symbolizer([&](std::uint32_t, std::uint64_t) -> std::string {
    ++count;
    return "";
  });
  EXPECT_EQ(names.find(kPid, kHostFun), nullptr);
  EXPECT_EQ(count, 1);
  register_function(kPid, kHostFun, "_Z6addOnePfi");
  EXPECT_EQ(demangled(kPid, kHostFun), "addOne(float*, int)");
  EXPECT_EQ(count, 1);
}

TEST_F(KernelNamesTest, ForgetClearsTheNegativeCache) {
  int count = 0;
  names.set_symbolizer([&](std::uint32_t, std::uint64_t) -> std::string {
    ++count;
    return "";
  });
  EXPECT_EQ(names.find(kPid, 0x409000), nullptr);
  EXPECT_EQ(names.find(kPid, 0x409000), nullptr);
  EXPECT_EQ(count, 1);
  names.forget(kPid);
  EXPECT_EQ(names.find(kPid, 0x409000), nullptr);
  EXPECT_EQ(count, 2);
}

TEST_F(KernelNamesTest, SymbolizerNamesLaunchesByHostStub) {
  names.set_symbolizer([](std::uint32_t pid, std::uint64_t addr) -> std::string {
    return pid == kPid && addr == 0x401700 ? "_Z10fillKernelPii" : "";
  });
  RecBuf launch;
  init_rec(launch, "cudaLaunchKernel", kPid);
  launch.rec.args[0] = 0x401700;
  Call c;
  ASSERT_TRUE(decode_call(launch.rec, &names, c));
  EXPECT_EQ(c.kernel, "fillKernel(int*, int)");
  EXPECT_EQ(c.kernel_mangled, "_Z10fillKernelPii");
}

TEST(KernelNamesDemangle, MangledAndPlainNames) {
  EXPECT_EQ(KernelNames::demangle("_Z6addOnePfi"), "addOne(float*, int)");
  EXPECT_EQ(KernelNames::demangle("_ZN2ns6kernelIfEEvPT_i"), "void ns::kernel<float>(float*, int)");
  EXPECT_EQ(KernelNames::demangle("vector_add"), "vector_add");
  EXPECT_EQ(KernelNames::demangle("main"), "main");
  EXPECT_EQ(KernelNames::demangle(""), "");
  EXPECT_EQ(KernelNames::demangle("_Z"), "_Z");  // invalid mangling: unchanged
  EXPECT_EQ(KernelNames::demangle("_Zgarbage!"), "_Zgarbage!");
}

// Kernels of a PyTorch run on the H200 (docs/gpu-check-output.txt), as CUDA names them.
constexpr const char* kTorchReduce = "_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_14func_wrapper_tIfZNS0_11sum_functorIfffEclERNS_14TensorIteratorEEUlffE_EEjfLi4ELi4EEEEEvT1_";
constexpr const char* kTorchClamp = "_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_49_GLOBAL__N__d2ba64fb_16_TensorCompare_cu_71e06f4e19launch_clamp_scalarERNS_18TensorIteratorBaseEN3c106ScalarES6_NS0_6detail11ClampLimitsEENKUlvE_clEvENKUlvE5_clEvEUlfE_St5arrayIPcLm2EEEEviT0_T1_";
constexpr const char* kTorchNormal = "_ZN2at6native54_GLOBAL__N__d8ceb000_21_DistributionNormal_cu_0c5b6e8543distribution_elementwise_grid_stride_kernelIfLi4EZNS0_9templates4cuda20normal_and_transformIffPNS_17CUDAGeneratorImplEZZZNS4_13normal_kernelIS7_EEvRKNS_10TensorBaseEddT_ENKUlvE_clEvENKUlvE0_clEvEUlfE_EEvRNS_18TensorIteratorBaseET1_T2_EUlP24curandStatePhilox4_32_10E0_ZNS1_27distribution_nullary_kernelIff6float4S7_SM_SF_EEvSH_SJ_RKT3_T4_EUlifE_EEvlNS_15PhiloxCudaStateESI_SJ_";

TEST(KernelBaseName, PyTorchKernels) {
  EXPECT_EQ(kernel_base_name(KernelNames::demangle(kTorchReduce)), "reduce_kernel");
  EXPECT_EQ(kernel_base_name(KernelNames::demangle(kTorchClamp)), "vectorized_elementwise_kernel");
  const std::string normal = KernelNames::demangle(kTorchNormal);
  ASSERT_GT(normal.size(), 5000u);  // the 5,263-column line of issue 17
  EXPECT_EQ(kernel_base_name(normal), "distribution_elementwise_grid_stride_kernel");
}

TEST(KernelBaseName, CudaAndCublasStyleNames) {
  EXPECT_EQ(kernel_base_name("k1"), "k1");
  EXPECT_EQ(kernel_base_name("?"), "?");
  EXPECT_EQ(kernel_base_name(""), "");
  EXPECT_EQ(kernel_base_name("scale(float const*, float*, float, int)"), "scale");
  EXPECT_EQ(kernel_base_name("void ns::addKernel<float>(float const*, float, float*, int)"), "addKernel");
  EXPECT_EQ(kernel_base_name("void f<(anonymous namespace)::T>(int)"), "f");
  EXPECT_EQ(kernel_base_name("(anonymous namespace)::helper(int)"), "helper");
  EXPECT_EQ(kernel_base_name("void (anonymous namespace)::k<4>(int)"), "k");
  // cuBLAS and cuDNN ship kernels with C names.
  EXPECT_EQ(kernel_base_name("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_"
                             "segment_k_off_kernel__5x_cublas"),
            "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_"
            "kernel__5x_cublas");
  EXPECT_EQ(kernel_base_name("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>("
                             "cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4::Params)"),
            "Kernel2");
  EXPECT_EQ(kernel_base_name("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, "
                             "false, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, "
                             "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, "
                             "float> >(cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, "
                             "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, "
                             "float>, float, float)"),
            "gemv2T_kernel_val");
  EXPECT_EQ(kernel_base_name("_Zgarbage!"), "_Zgarbage!");  // did not demangle: whole
}

TEST(KernelBaseName, TemplateArgumentsThatLookLikeSyntax) {
  // Function pointers and expressions in template arguments, trailing qualifiers.
  EXPECT_EQ(kernel_base_name("void apply<&ns::op, void (*)(float*, int)>(float*, int)"), "apply");
  EXPECT_EQ(kernel_base_name("void k<((4)>(2)), 8>(std::function<void (int)>, int)"), "k");
  EXPECT_EQ(kernel_base_name("std::enable_if<true, void>::type ns::launch<float>(float*) [clone .constprop.0]"),
            "launch");
  EXPECT_EQ(kernel_base_name("E<((1)>(2))>::type g<1, 2>()"), "g");  // c++filt's form
  EXPECT_EQ(kernel_base_name("void k<decltype (((float*)0)->x)>(int)"), "k");
  EXPECT_EQ(kernel_base_name("void ns::k<ns::sum_functor<float>::operator()(int)::{lambda(float, float)#1}>(int)"),
            "k");
}

TEST(KernelBaseName, OperatorsAndLambdas) {
  EXPECT_EQ(kernel_base_name("bool operator< <A>(A const&, A const&)"), "operator<");
  EXPECT_EQ(kernel_base_name("ns::Functor::operator()(int) const"), "Functor::operator()");
  EXPECT_EQ(kernel_base_name("ns::f(int)::{lambda(float)#1}::operator()(float) const"),
            "{lambda(float)#1}::operator()");
  EXPECT_EQ(kernel_base_name("void* operator new[](unsigned long)"), "operator new[]");
  EXPECT_EQ(kernel_base_name("ns::S::operator<<=(int)"), "operator<<=");
  EXPECT_EQ(kernel_base_name("ns::S::operator->() const"), "operator->");
}

TEST(KernelShortName, SameBaseNameGetsANumberInFirstSeenOrder) {
  KernelNames names;
  const std::string a = "void at::native::reduce_kernel<512, 1>(int)";
  const std::string b = "void at::native::reduce_kernel<256, 2>(int)";
  const std::string c = "void other::reduce_kernel(float)";
  EXPECT_EQ(names.short_name(a), "reduce_kernel");
  EXPECT_EQ(names.short_name(b), "reduce_kernel#2");
  EXPECT_EQ(names.short_name(a), "reduce_kernel");  // stable
  EXPECT_EQ(names.short_name(c), "reduce_kernel#3");
  EXPECT_EQ(names.short_name("scale(float*)"), "scale");
  EXPECT_EQ(names.short_name(b), "reduce_kernel#2");
}

TEST_F(KernelNamesTest, LaunchCarriesTheShortName) {
  names.set_symbolizer([](std::uint32_t, std::uint64_t addr) -> std::string {
    return addr == 0x401700 ? kTorchReduce : "";
  });
  RecBuf launch;
  init_rec(launch, "cudaLaunchKernel", kPid);
  launch.rec.args[0] = 0x401700;
  Call c;
  ASSERT_TRUE(decode_call(launch.rec, &names, c));
  EXPECT_EQ(c.kernel_short, "reduce_kernel");
  EXPECT_EQ(c.kernel, KernelNames::demangle(kTorchReduce));
}

TEST(KernelNamesBounds, ManyKernelsStayNamedAndProcessesShareNames) {
  KernelNames names;
  int lookups = 0;
  // Handle h names "_Z<len>k<h>v" in every process: kernel k<h>().
  names.set_symbolizer([&](std::uint32_t, std::uint64_t h) {
    ++lookups;
    const std::string base = "k" + std::to_string(h);
    return "_Z" + std::to_string(base.size()) + base + "v";
  });
  const std::uint64_t n = KernelNames::kMaxDemangled + 100;
  for (std::uint32_t pid : {1u, 2u})
    for (std::uint64_t h = 1; h <= n; ++h) ASSERT_NE(names.find(pid, h), nullptr);
  EXPECT_EQ(lookups, int(2 * n));
  // Each name still right, demangled again when it had left the cache.
  for (std::uint64_t h : {std::uint64_t(1), n / 2, n}) {
    const KernelNames::Name* name = names.find(1, h);
    ASSERT_NE(name, nullptr);
    EXPECT_EQ(std::string(name->demangled), "k" + std::to_string(h) + "()");
  }
  EXPECT_EQ(lookups, int(2 * n)) << "known handles are not looked up again";
  names.forget(1);
  const KernelNames::Name* still = names.find(2, 7);
  ASSERT_NE(still, nullptr) << "process 2 keeps the names process 1 shared";
  EXPECT_EQ(std::string(still->mangled), "_Z2k7v");
  ASSERT_NE(names.find(1, 7), nullptr);
  EXPECT_EQ(lookups, int(2 * n) + 1) << "process 1 forgotten: looked up afresh";
}

}  // namespace

// ---- Modules and libraries that come and go (issue 28) ---------------------

class ModuleLifetimeTest : public KernelNamesTest {
 protected:
  static constexpr std::uint64_t kModule = 0x5555000f0000;  // what get_by_name looks kernels up in

  // cuModuleLoadData / cuLibraryLoadData / cudaLibraryLoadData: out-param 0 is the handle.
  void load(const char* api, std::uint64_t module) {
    RecBuf& b = next();
    init_rec(b, api, kPid);
    b.rec.args[0] = 0x7ffd00000300;
    b.rec.args[1] = 0x7f0000400000;  // the image
    b.rec.outs[0] = module;
    learn(b);
  }
  // cuModuleUnload / cuLibraryUnload / cudaLibraryUnload.
  void unload(const char* api, std::uint64_t module) {
    RecBuf& b = next();
    init_rec(b, api, kPid);
    b.rec.args[0] = module;
    learn(b);
  }
};

TEST_F(ModuleLifetimeTest, UnloadingAModuleForgetsItsKernels) {
  get_by_name("cuModuleGetFunction", kPid, 0x5555cc000000, "_Z4axpyfPKfPf");
  register_function(kPid, kHostFun, "_Z6addOnePfi");
  unload("cuModuleUnload", kModule);
  EXPECT_EQ(names.find(kPid, 0x5555cc000000), nullptr);
  // Registered host stubs and other modules' kernels stay.
  EXPECT_EQ(mangled(kPid, kHostFun), "_Z6addOnePfi");
  // CUDA gives the handle to a kernel of the next module: it gets that kernel's name.
  load("cuModuleLoadData", kModule);
  get_by_name("cuModuleGetFunction", kPid, 0x5555cc000000, "_Z3subv");
  EXPECT_EQ(mangled(kPid, 0x5555cc000000), "_Z3subv");
}

TEST_F(ModuleLifetimeTest, UnloadingALibraryForgetsItsKernelsAndTheirFunctions) {
  const std::uint64_t cu_kernel = 0x5555dd000000, cu_function = 0x5555ee000000;
  get_by_name("cuLibraryGetKernel", kPid, cu_kernel, "_Z6reducePfS_i");
  get_from_handle("cuKernelGetFunction", kPid, cu_function, cu_kernel);
  unload("cuLibraryUnload", kModule);
  EXPECT_EQ(names.find(kPid, cu_kernel), nullptr);
  EXPECT_EQ(names.find(kPid, cu_function), nullptr);
}

TEST_F(ModuleLifetimeTest, ALoadThatReturnsAnUnseenUnloadsHandleForgetsItsOldKernels) {
  // -p: the unload happened before tracing began; the load says the handle is new.
  get_by_name("cudaLibraryGetKernel", kPid, 0x5555cc000200, "_Z4axpyfPKfPf");
  load("cudaLibraryLoadData", kModule);
  EXPECT_EQ(names.find(kPid, 0x5555cc000200), nullptr);
}

TEST_F(ModuleLifetimeTest, UnloadingAnotherModuleOrProcessChangesNothing) {
  get_by_name("cuModuleGetFunction", kPid, 0x5555cc000000, "_Z4axpyfPKfPf");
  unload("cuModuleUnload", kModule + 0x100);
  unload("cuModuleUnload", 0);
  EXPECT_EQ(mangled(kPid, 0x5555cc000000), "_Z4axpyfPKfPf");
}
