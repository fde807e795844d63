#include "cudatrace/target/terminal.h"

namespace cudatrace {

void append_terminal_safe(fmt::memory_buffer& out, std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (u < 0x20 || u >= 0x7f || u == '\\') {
      const char escaped[] = {'\\', 'x', kHex[u >> 4], kHex[u & 15]};
      out.append(escaped, escaped + sizeof escaped);
    } else {
      out.push_back(ch);
    }
  }
}

std::string terminal_safe(std::string_view s) {
  fmt::memory_buffer out;
  append_terminal_safe(out, s);
  return fmt::to_string(out);
}

}  // namespace cudatrace
