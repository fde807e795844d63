#include "cudatrace/target/stacks.h"

#include <cstring>

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

}  // namespace cudatrace
