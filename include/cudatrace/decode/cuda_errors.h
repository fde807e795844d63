// Names of cudaError_t and CUresult values (table generated from the CUDA
// headers by scripts/gen-error-names.py).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

namespace cudatrace {

// Nvtx: the range calls of cudatrace's NVTX injection library (docs/nvtx.md).
enum class Layer : std::uint8_t { Runtime, Driver, Nvtx, Nccl };
inline constexpr int kLayerCount = 4;

// The CUDA (or NCCL: ncclResult_t) name of a return code, or nullptr when
// the value is unknown.
const char* cuda_error_name(Layer layer, std::int64_t code);

namespace detail {
extern const std::pair<int, const char*> kRuntimeErrors[];
extern const std::pair<int, const char*> kDriverErrors[];
extern const std::size_t kRuntimeErrorCount;
extern const std::size_t kDriverErrorCount;
}  // namespace detail

}  // namespace cudatrace
