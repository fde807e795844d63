#include <fmt/format.h>

#include "cudatrace/decode/otel.h"
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

std::string utf8_label(std::string_view value) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  out.reserve(value.size());
  for (std::size_t i = 0; i < value.size();) {
    const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(value[k]); };
    const unsigned char c = byte(i);
    // The length of the sequence c starts, and the range of its second
    // byte, which rules out overlong forms, surrogates and code points past
    // U+10FFFF (RFC 3629's table).
    std::size_t len = 0;
    unsigned char low = 0x80, high = 0xBF;
    if (c < 0x80) len = 1;
    else if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, low = c == 0xE0 ? 0xA0 : 0x80, high = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, low = c == 0xF0 ? 0x90 : 0x80, high = c == 0xF4 ? 0x8F : 0xBF;
    bool valid = len > 0 && i + len <= value.size();
    for (std::size_t k = 1; valid && k < len; ++k) {
      const unsigned char lo = k == 1 ? low : 0x80, hi = k == 1 ? high : 0xBF;
      valid = byte(i + k) >= lo && byte(i + k) <= hi;
    }
    if (valid) {
      out.append(value.substr(i, len));
      i += len;
    } else {
      out.append(kReplacement);
      ++i;
    }
  }
  return bounded_value(out, kMaxLabelBytes);
}

const char* direction_label(std::uint8_t direction) {
  return direction_name(direction < kCopyDirections ? static_cast<Direction>(direction) : Direction::Default);
}

}  // namespace cudatrace
