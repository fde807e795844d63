#include "cudatrace/target/stacks.h"

#include <cstring>

#include "cudatrace/render/json.h"
#include "cudatrace/decode/kernel_names.h"
#include "cudatrace/target/symbolizer.h"

namespace cudatrace {

StackFrame StackSymbolizer::frame(pid_t pid, std::uint64_t return_address) {
  const auto key = std::make_pair(pid, return_address);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  StackFrame f;
  f.addr = return_address;
  const std::uint64_t call_site = return_address ? return_address - 1 : 0;
  Symbolizer::Location loc = symbolizer_.locate(pid, call_site);
  if (!loc.module.empty()) {
    f.module = std::move(loc.module);
    f.module_offset = loc.module_offset + 1;
  }
  if (!loc.function.empty()) {
    f.function = KernelNames::demangle(loc.function);
    f.function_offset = loc.function_offset + 1;
  }
  if (cache_.size() >= kMaxCached) cache_.clear();  // only a cache: names are looked up again
  return cache_.emplace(key, std::move(f)).first->second;
}

std::vector<StackFrame> StackSymbolizer::frames(pid_t pid, const std::vector<std::uint64_t>& return_addresses) {
  std::vector<StackFrame> out;
  out.reserve(return_addresses.size());
  for (std::uint64_t a : return_addresses) out.push_back(frame(pid, a));
  return out;
}

void StackSymbolizer::forget(pid_t pid) {
  cache_.erase(cache_.lower_bound({pid, 0}), cache_.upper_bound({pid, ~std::uint64_t(0)}));
}

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

void append_stack_text(fmt::memory_buffer& out, const std::vector<StackFrame>& stack, int indent) {
  for (std::size_t i = 0; i < stack.size(); ++i)
    fmt::format_to(std::back_inserter(out), "{:{}}#{:<2} {:#018x} {}\n", "", indent, i, stack[i].addr,
                   frame_text(stack[i]));
}

void append_stack_json(fmt::memory_buffer& out, const std::vector<StackFrame>& stack) {
  auto it = std::back_inserter(out);
  out.push_back('[');
  for (std::size_t i = 0; i < stack.size(); ++i) {
    const StackFrame& f = stack[i];
    if (i) out.push_back(',');
    fmt::format_to(it, "{{\"addr\":\"{:#x}\",\"function\":", f.addr);
    if (f.function.empty()) {
      out.append(std::string_view("null,\"function_offset\":null"));
    } else {
      append_json_string(out, f.function);
      fmt::format_to(it, ",\"function_offset\":{}", f.function_offset);
    }
    out.append(std::string_view(",\"module\":"));
    if (f.module.empty()) {
      out.append(std::string_view("null,\"module_offset\":null"));
    } else {
      append_json_string(out, f.module);
      fmt::format_to(it, ",\"module_offset\":{}", f.module_offset);
    }
    out.push_back('}');
  }
  out.push_back(']');
}

}  // namespace cudatrace
