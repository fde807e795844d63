// libFuzzer target: arbitrary ring-buffer records through the decoder and
// both output formats. Every JSON line must parse and every record must give
// exactly one line in either format, whatever the bytes.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/kernel_names.h"
#include "cudatrace/render/writer.h"

using namespace cudatrace;

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

void require_one_line(const fmt::memory_buffer& buf) {
  const std::string_view s(buf.data(), buf.size());
  require(!s.empty() && s.back() == '\n' && s.find('\n') == s.size() - 1 && s.find('\r') == std::string_view::npos);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < sizeof(ct_call)) return 0;
  // As the session does (on_record): the payload and the sections after it
  // must fit in what arrived and be well formed (record_fits).
  std::vector<std::uint64_t> storage((size + 7) / 8);
  std::memcpy(storage.data(), data, size);
  auto& rec = *reinterpret_cast<ct_call*>(storage.data());
  const std::size_t room = size - sizeof(ct_call);
  if (!cudatrace::record_fits(rec, room)) return 0;

  static KernelNames names;
  Call call;
  if (!decode_call(rec, &names, call)) return 0;
  if (call.api->group() == Group::Module) names.learn(call);

  auto json = make_json_writer();
  auto text = make_text_writer(0, false);
  json->call(call, CallAnalysis{});
  text->call(call, CallAnalysis{});
  const fmt::memory_buffer& line = *json->buffer();
  require_one_line(line);
  require_one_line(*text->buffer());
  const auto parsed = nlohmann::json::parse(line.data(), line.data() + line.size(), nullptr, /*allow_exceptions=*/false);
  require(parsed.is_object() && parsed.contains("api") && parsed.contains("args"));
  return 0;
}
