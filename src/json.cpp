#include "cudatrace/json.h"

namespace cudatrace {
namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if invalid.
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  std::size_t len;
  std::uint32_t cp;
  if (b < 0x80) return 1;
  if ((b & 0xe0) == 0xc0) {
    len = 2;
    cp = b & 0x1f;
  } else if ((b & 0xf0) == 0xe0) {
    len = 3;
    cp = b & 0x0f;
  } else if ((b & 0xf8) == 0xf0) {
    len = 4;
    cp = b & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (c & 0x3f);
  }
  // Reject overlong forms, surrogates and values past U+10FFFF.
  static const std::uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return 0;
  return len;
}

}  // namespace

void append_json_string(fmt::memory_buffer& out, std::string_view s) {
  out.push_back('"');
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out.append(std::string_view("\\\""));
        ++i;
        continue;
      case '\\':
        out.append(std::string_view("\\\\"));
        ++i;
        continue;
      case '\n':
        out.append(std::string_view("\\n"));
        ++i;
        continue;
      case '\r':
        out.append(std::string_view("\\r"));
        ++i;
        continue;
      case '\t':
        out.append(std::string_view("\\t"));
        ++i;
        continue;
      default:
        break;
    }
    if (c < 0x20 || c == 0x7f) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
      ++i;
      continue;
    }
    const std::size_t len = utf8_sequence(s, i);
    if (len == 0) {
      out.append(std::string_view("\\ufffd"));
      ++i;
      continue;
    }
    out.append(s.substr(i, len));
    i += len;
  }
  out.push_back('"');
}

}  // namespace cudatrace
