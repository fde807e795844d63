// One named frame of a user stack (--stack): what decoded calls carry once
// the recorder has symbolised their return addresses (target/stacks.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace cudatrace {

struct StackFrame {
  std::uint64_t addr = 0;
  std::string function;  // demangled; empty when no symbol holds the address
  std::uint64_t function_offset = 0;
  std::string module;  // the mapped file; empty when the address is not in one
  std::uint64_t module_offset = 0;
};

// "func+0x1c (libfoo.so)", "libfoo.so+0x1234", or "?".
std::string frame_text(const StackFrame& f);

// One line per frame, "#0  0x00000000004011d6 func+0x1c (libfoo.so)",
// indented by `indent` spaces, terminal-safe.
std::string stack_lines(const std::vector<StackFrame>& stack, int indent);

struct Call;
class Facet;
// The user stack facet (--stack; src/decode/facet_stack.cpp): its decoded
// form on a call, the return addresses innermost first and their frames as
// the recorder symbolised them (none when no output shows them), and how a
// live source names the addresses (FacetNames).
const Facet& stack_facet();
struct UserStack {
  std::vector<std::uint64_t> addresses;
  std::vector<StackFrame> frames;
};
const UserStack& user_stack(const Call& c);
UserStack& user_stack(Call& c);
using StackNamer = std::function<std::vector<StackFrame>(std::uint32_t pid, const std::vector<std::uint64_t>& addrs)>;

// Names call sites and symbolises stacks of the traced processes: the
// source's to say (live, from the processes' files; a saved trace, from
// what it recorded). Unset: addresses alone.
struct SiteNames {
  std::function<std::string(std::uint32_t pid, std::uint64_t addr)> call_site;
  std::function<std::vector<StackFrame>(std::uint32_t pid, const std::vector<std::uint64_t>& addrs)> stack;
};

}  // namespace cudatrace
