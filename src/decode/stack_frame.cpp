#include "cudatrace/decode/stack_frame.h"

#include <fmt/format.h>

#include <iterator>

#include "cudatrace/terminal.h"

namespace cudatrace {
namespace {

std::string_view base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string_view(path) : std::string_view(path).substr(slash + 1);
}

}  // namespace

std::string frame_text(const StackFrame& f) {
  if (!f.function.empty())
    return f.module.empty() ? fmt::format("{}+{:#x}", f.function, f.function_offset)
                            : fmt::format("{}+{:#x} ({})", f.function, f.function_offset, base_name(f.module));
  if (!f.module.empty()) return fmt::format("{}+{:#x}", base_name(f.module), f.module_offset);
  return "?";
}

std::string stack_lines(const std::vector<StackFrame>& stack, int indent) {
  fmt::memory_buffer out;
  for (std::size_t i = 0; i < stack.size(); ++i)
    fmt::format_to(std::back_inserter(out), "{:{}}#{:<2} {:#018x} {}\n", "", indent, i, stack[i].addr,
                   terminal_safe(frame_text(stack[i])));
  return fmt::to_string(out);
}

}  // namespace cudatrace
