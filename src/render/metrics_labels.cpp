#include <fmt/format.h>

#include "cudatrace/decode/transfer.h"
#include "cudatrace/render/metrics.h"

namespace cudatrace {

const double PrometheusMetrics::kDurationBounds[CT_EXPORT_BUCKETS - 1] = {
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
    5e-3, 1e-2,   2.5e-2, 5e-2, 0.1, 0.25,  0.5,  1,      2.5,  5,    10};

std::string status_label(const Api& api, std::uint16_t status) {
  if (status == 0) return "success";
  if (status == CT_EXPORT_STATUS_OTHER) return "other";
  const char* name = cuda_error_name(api.layer(), status);
  // A code no header names: a number, still bounded by the 16-bit key.
  return name ? name : fmt::format("code_{}", status);
}

const char* direction_label(std::uint8_t direction) {
  return direction_name(direction < kCopyDirections ? static_cast<Direction>(direction) : Direction::Default);
}

}  // namespace cudatrace
