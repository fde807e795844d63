// Names of cudaError_t and CUresult values (table generated from the CUDA
// headers by scripts/gen-error-names.py).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

namespace cudatrace {

enum class Layer : std::uint8_t { Runtime, Driver, Nccl };
inline constexpr int kLayerCount = 3;

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
