// libFuzzer target: the JSON string writer. Whatever the bytes, the result
// is one line that parses as one JSON string; ASCII comes back unchanged,
// and a string that came back (now valid UTF-8) survives a second trip.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cudatrace/render/json.h"

namespace {

std::string round_trip(std::string_view s) {
  fmt::memory_buffer out;
  cudatrace::append_json_string(out, s);
  const std::string_view text(out.data(), out.size());
  if (text.find('\n') != std::string_view::npos) std::abort();
  const auto parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_string()) std::abort();
  return parsed.get<std::string>();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::string once = round_trip(input);
  if (std::all_of(data, data + size, [](std::uint8_t b) { return b < 0x80; }) && once != input) std::abort();
  if (round_trip(once) != once) std::abort();
  return 0;
}
