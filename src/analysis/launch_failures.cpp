#include "cudatrace/analysis/launch_failures.h"

#include <fmt/format.h>

namespace cudatrace {
namespace {

constexpr std::size_t kCausesPerProcess = 16;  // more are one cause too many to read

// Status values shared by cudaError_t and CUresult where both name the cause.
enum Status : std::int32_t {
  kInvalidValue = 1,
  kNotInitialized = 3,
  kInvalidConfiguration = 9,  // runtime only
  kInsufficientDriver = 35,   // runtime only
  kInvalidDeviceFunction = 98,  // runtime only
  kNoDevice = 100,
  kNoBinaryForGpu = 209,
  kUnsupportedPtxVersion = 222,
  kInvalidHandle = 400,
  kIllegalAddress = 700,
  kLaunchOutOfResources = 701,
  kLaunchTimeout = 702,
  kLaunchFailed = 719,
  kCooperativeLaunchTooLarge = 720,
};

// The default limit of a block's dynamic shared memory without an opt-in.
constexpr std::uint64_t kDefaultSharedMemory = 48 * 1024;
constexpr std::uint64_t kMaxThreadsPerBlock = 1024;

// "grid" or "block", whichever way the launch passed it (dim3, three
// arguments, a launch configuration).
std::optional<Dim3> dims(const Call& c, std::string_view name) {
  for (const NamedValue& a : c.args)
    if (a.name == name)
      if (const auto* d = std::get_if<Dim3>(&a.value)) return *d;
  return std::nullopt;
}

std::optional<std::uint64_t> shared_memory(const Call& c) {
  for (const NamedValue& a : c.args)
    if (std::string_view(a.name).rfind("sharedMem", 0) == 0) return integer_value(a.value);
  return std::nullopt;
}

std::string why(const Call& c, const LaunchFacts& facts) {
  switch (c.status()) {
    case kNoBinaryForGpu:
      return "no code for this GPU" + (facts.code.empty() ? "" : ": " + facts.code) +
             "; build with code for its compute capability (nvidia-smi --query-gpu=compute_cap gives it: 9.0 is "
             "-gencode arch=compute_90,code=sm_90) or with PTX a newer GPU can compile";
    case kInvalidDeviceFunction:
      return "its function" + (facts.func_site.empty() ? "" : " (" + facts.func_site + ")") +
             " is not a kernel this runtime registered: a host function passed as a kernel, or a kernel of "
             "a module that was not loaded";
    case kInvalidConfiguration:
    case kInvalidValue: {
      const auto block = dims(c, "block");
      const auto grid = dims(c, "grid");
      const auto smem = shared_memory(c);
      if (block && std::uint64_t(block->x) * block->y * block->z > kMaxThreadsPerBlock)
        return fmt::format("a block of {} threads: at most {} are allowed", std::uint64_t(block->x) * block->y * block->z,
                           kMaxThreadsPerBlock);
      if ((block && (!block->x || !block->y || !block->z)) || (grid && (!grid->x || !grid->y || !grid->z)))
        return "a grid or block dimension is 0";
      if (smem && *smem > kDefaultSharedMemory)
        return fmt::format("{} KiB of dynamic shared memory: above 48 KiB a kernel needs "
                           "cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize), and no GPU has "
                           "more than 227 KiB a block",
                           *smem / 1024);
      return "the launch configuration or an argument was refused";
    }
    case kLaunchOutOfResources:
      return "the block needs more registers or shared memory than a multiprocessor has: use smaller blocks or "
             "__launch_bounds__";
    case kCooperativeLaunchTooLarge:
      return "a cooperative grid must fit on the GPU at once";
    case kInsufficientDriver:
      return "no CUDA driver, or one older than this runtime needs";
    case kNoDevice:
      return "the process sees no CUDA GPU (CUDA_VISIBLE_DEVICES?)";
    case kNotInitialized:
      return "the driver is not initialised (a fork after CUDA was initialised?)";
    case kUnsupportedPtxVersion:
      return "its PTX is newer than this driver can compile";
    case kInvalidHandle:
      return "its function or stream handle is not valid";
    case kIllegalAddress:
    case kLaunchFailed:
    case kLaunchTimeout:
      return "an earlier kernel faulted: the context is lost and every later call fails";
    default:
      return {};
  }
}

}  // namespace

bool LaunchFailures::first_of_its_cause(const Call& c) {
  if (c.api->effect() != Effect::Launch || !c.outermost() || !c.failed()) return false;
  std::set<std::int32_t>& causes = seen_[c.pid];
  return causes.size() < kCausesPerProcess && causes.insert(c.status()).second;
}

std::string launch_failure_message(const Call& c, const LaunchFacts& facts) {
  std::string what = c.api->symbol;
  if (!c.kernel_short.empty() && c.kernel_short != "?") what += fmt::format(" of {}", c.kernel_short);
  const char* name = c.ret_name();
  std::string text = fmt::format("{} failed with {} at {}", what, name ? name : std::to_string(c.status()), facts.site);
  if (const std::string cause = why(c, facts); !cause.empty()) text += ": " + cause;
  return text;
}

}  // namespace cudatrace
