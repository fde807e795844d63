#include "cudatrace/decode/cuda_errors.h"

#include <algorithm>
#include <iterator>

namespace cudatrace {

namespace {

// ncclResult_t (nccl.h, unchanged since NCCL 2.12).
const char* nccl_result_name(std::int64_t code) {
  static const char* const kNames[] = {"ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError",
                                       "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
                                       "ncclRemoteError",   "ncclInProgress"};
  return code >= 0 && code < std::int64_t(std::size(kNames)) ? kNames[code] : nullptr;
}

}  // namespace

const char* cuda_error_name(Layer layer, std::int64_t code) {
  if (layer == Layer::Nccl) return nccl_result_name(code);
  const auto* table = layer == Layer::Runtime ? detail::kRuntimeErrors : detail::kDriverErrors;
  const std::size_t n = layer == Layer::Runtime ? detail::kRuntimeErrorCount : detail::kDriverErrorCount;
  const auto* end = table + n;
  // The generated tables are sorted by value.
  const auto* it = std::lower_bound(table, end, code,
                                    [](const std::pair<int, const char*>& e, std::int64_t v) { return e.first < v; });
  return it != end && it->first == code ? it->second : nullptr;
}

}  // namespace cudatrace
