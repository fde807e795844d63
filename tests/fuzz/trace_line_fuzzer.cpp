// libFuzzer target: reading --json lines back (cudatrace report) and short
// kernel names. Whatever the bytes: no crash; a line that parses as a call
// decodes, and writing it as JSON and reading that back gives the same line;
// a kernel's short name is a non-empty part of its name.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cudatrace/analysis/pipeline.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/kernel_names.h"
#include "cudatrace/record/trace_line.h"
#include "cudatrace/render/writer.h"

namespace {

std::string json_of(const cudatrace::TraceLine& line) {
  cudatrace::KernelNames names;
  if (!line.kernel_mangled().empty()) names.add(line.record().pid, line.kernel_handle(), line.kernel_mangled());
  cudatrace::Call c;
  if (!cudatrace::decode_call(line.record(), &names, c)) std::abort();
  auto out = cudatrace::make_json_writer();
  out->call(c, cudatrace::CallAnalysis{});  // an unfinished call too (Call::unfinished)
  const fmt::memory_buffer& written = *out->buffer();
  return std::string(written.data(), written.size() - 1);  // without the newline
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::string_view base = cudatrace::kernel_base_name(input);
  const bool blank = input.find_first_not_of(' ') == std::string_view::npos;
  if ((!blank && base.empty()) || (!base.empty() && (base.data() < input.data() || base.end() > input.end())))
    std::abort();

  cudatrace::TraceLine line, again;
  std::string error;
  if (!line.parse(input, error)) {
    if (error.empty()) std::abort();
    return 0;
  }
  if (line.type() != cudatrace::TraceLine::Type::Call) return 0;
  const std::string once = json_of(line);
  if (!again.parse(once, error)) std::abort();
  if (json_of(again) != once) std::abort();
  return 0;
}
