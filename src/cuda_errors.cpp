#include "cudatrace/cuda_errors.h"

#include <algorithm>

namespace cudatrace {

const char* cuda_error_name(Layer layer, std::int64_t code) {
  const auto* table = layer == Layer::Runtime ? detail::kRuntimeErrors : detail::kDriverErrors;
  const std::size_t n = layer == Layer::Runtime ? detail::kRuntimeErrorCount : detail::kDriverErrorCount;
  const auto* end = table + n;
  // The generated tables are sorted by value.
  const auto* it = std::lower_bound(table, end, code,
                                    [](const std::pair<int, const char*>& e, std::int64_t v) { return e.first < v; });
  return it != end && it->first == code ? it->second : nullptr;
}

}  // namespace cudatrace
