// What cudatrace writes for a terminal: its messages on stderr, and the
// names from the traced system (process names, file paths, symbols) made
// safe to show there. Every stage that prints writes them this way, so the
// header is shared like bpf_abi.h.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <string_view>

namespace cudatrace {

// A name from the traced system (process name, file path, symbol) made safe
// for a terminal: printable ASCII as it is, every other byte and '\' as
// \xNN, so that no control sequence, line break or invalid UTF-8 gets out
// and "\x0a" can only mean a newline byte. The trace's text lines and every
// message on stderr write such names this way.
inline void append_terminal_safe(fmt::memory_buffer& out, std::string_view s) {
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

inline std::string terminal_safe(std::string_view s) {
  fmt::memory_buffer out;
  append_terminal_safe(out, s);
  return fmt::to_string(out);
}

// A message kept to one line: its control bytes as \xNN. Names made
// terminal_safe() in it have none left, so they are not escaped twice; a
// name put in raw (a path from the command line) gets its line break escaped.
inline std::string one_line(const std::string& msg) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(msg.size());
  for (const char ch : msg) {
    const auto u = static_cast<unsigned char>(ch);
    if (u < 0x20 || u == 0x7f)
      out.append({'\\', 'x', kHex[u >> 4], kHex[u & 15]});
    else
      out.push_back(ch);
  }
  return out;
}

// "cudatrace: MSG" and "cudatrace: warning: MSG" on stderr, one line each.
inline void error_line(const std::string& msg) { std::fprintf(stderr, "cudatrace: %s\n", one_line(msg).c_str()); }
inline void warn_line(const std::string& msg) {
  std::fprintf(stderr, "cudatrace: warning: %s\n", one_line(msg).c_str());
}

}  // namespace cudatrace
