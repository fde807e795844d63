// One named frame of a user stack (--stack): what decoded calls carry once
// the recorder has symbolised their return addresses (stacks.h).
#pragma once

#include <cstdint>
#include <string>

namespace cudatrace {

struct StackFrame {
  std::uint64_t addr = 0;
  std::string function;  // demangled; empty when no symbol holds the address
  std::uint64_t function_offset = 0;
  std::string module;  // the mapped file; empty when the address is not in one
  std::uint64_t module_offset = 0;
};

// "func+0x1c (libfoo.so)", "libfoo.so+0x1234", or "?" (stacks.cpp).
std::string frame_text(const StackFrame& f);

}  // namespace cudatrace
