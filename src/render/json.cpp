#include "cudatrace/render/json.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "cudatrace/render/append.h"
#include "cudatrace/render/format.h"

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

// True when one of the 8 bytes of `w` needs a look of its own: a control
// byte, DEL, '"', '\\' or a byte of a multi-byte UTF-8 sequence. (Each test
// is exact about whether such a byte exists, which is all that is asked.)
bool needs_care(std::uint64_t w) {
  constexpr std::uint64_t kOnes = 0x0101010101010101ull, kHighs = 0x8080808080808080ull;
  const auto has_zero = [](std::uint64_t v) { return (v - kOnes) & ~v & kHighs; };
  const std::uint64_t below_space = (w - kOnes * 0x20) & ~w & kHighs;
  return (below_space | (w & kHighs) | has_zero(w ^ (kOnes * 0x7f)) | has_zero(w ^ (kOnes * '"')) |
          has_zero(w ^ (kOnes * '\\'))) != 0;
}

}  // namespace

void append_json_string(fmt::memory_buffer& out, std::string_view s) {
  append_char(out, '"');
  // Bytes that need no escaping are appended in runs: this runs for every
  // process name, argument string and kernel name of the trace.
  std::size_t run = 0;
  const auto flush_run = [&](std::size_t end) { append_piece(out, s.data() + run, end - run); };
  for (std::size_t i = 0; i < s.size();) {
    if (i + 8 <= s.size()) {  // eight plain bytes at a time (kernel names are long)
      std::uint64_t word;
      std::memcpy(&word, s.data() + i, sizeof word);
      if (!needs_care(word)) {
        i += 8;
        continue;
      }
    }
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      ++i;
      continue;
    }
    std::string_view escape;
    switch (c) {
      case '"':
        escape = "\\\"";
        break;
      case '\\':
        escape = "\\\\";
        break;
      case '\n':
        escape = "\\n";
        break;
      case '\r':
        escape = "\\r";
        break;
      case '\t':
        escape = "\\t";
        break;
      default:
        break;
    }
    if (escape.empty() && c >= 0x80) {
      const std::size_t len = utf8_sequence(s, i);
      if (len != 0) {  // valid UTF-8 stays as it is
        i += len;
        continue;
      }
      escape = "\\ufffd";
    }
    flush_run(i);
    if (!escape.empty()) {
      append_piece(out, escape);
    } else {  // other control bytes and DEL
      static const char kHex[] = "0123456789abcdef";
      const char unicode[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
      out.append(unicode, unicode + sizeof unicode);
    }
    run = ++i;
  }
  flush_run(s.size());
  append_char(out, '"');
}

void append_json_value(fmt::memory_buffer& out, const Value& v) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          out.append(std::string_view("null"));
        } else if constexpr (std::is_same_v<T, Hex>) {
          append_char(out, '"');
          append_hex(out, x.v);
          append_char(out, '"');
        } else if constexpr (std::is_same_v<T, Dim3>) {
          append_char(out, '[');
          append_uint(out, x.x);
          append_char(out, ',');
          append_uint(out, x.y);
          append_char(out, ',');
          append_uint(out, x.z);
          append_char(out, ']');
        } else if constexpr (std::is_same_v<T, Named>) {
          if (x.name) {  // a CUDA enum name: nothing to escape
            append_char(out, '"');
            append_piece(out, std::string_view(x.name));
            append_char(out, '"');
          } else {
            append_int(out, x.raw);
          }
        } else if constexpr (std::is_same_v<T, std::string_view>) {
          append_json_string(out, x);
        } else if constexpr (std::is_same_v<T, double>) {
          // JSON has no NaN or infinity: an event timing that is not a number is null.
          if (std::isfinite(x))
            fmt::format_to(std::back_inserter(out), "{}", x);
          else
            out.append(std::string_view("null"));
        } else if constexpr (std::is_same_v<T, std::uint64_t>) {
          append_uint(out, x);
        } else {
          append_int(out, x);
        }
      },
      v);
}


void JsonFieldWriter::value() {
  Open& o = open_[depth_ - 1];
  if (!o.array) return;  // after its key
  if (!o.empty) out_.push_back(',');
  o.empty = false;
}

void JsonFieldWriter::key(std::string_view name) {
  Open& o = open_[depth_ - 1];
  if (!o.empty) out_.push_back(',');
  o.empty = false;
  // Field names are identifiers, written for every field of every record:
  // only another name is escaped.
  const bool plain = std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
  if (!plain) {
    append_json_string(out_, name);
    out_.push_back(':');
    return;
  }
  append_char(out_, '"');
  append_piece(out_, name);
  append_piece(out_, "\":", 2);
}

void JsonFieldWriter::open(char c, bool array) {
  value();
  out_.push_back(c);
  if (depth_ == kMaxDepth) std::abort();  // a facet nests deeper than any JSON field it writes
  open_[depth_++] = {array, true};
}

void JsonFieldWriter::close(char c) {
  --depth_;
  out_.push_back(c);
}

void JsonFieldWriter::string(std::string_view v) {
  value();
  append_json_string(out_, v);
}

void JsonFieldWriter::number(std::uint64_t v) {
  value();
  append_uint(out_, v);
}

void JsonFieldWriter::hex(std::uint64_t v) {
  value();
  out_.push_back('"');
  append_hex(out_, v);
  out_.push_back('"');
}

void JsonFieldWriter::null() {
  value();
  append_piece(out_, std::string_view("null"));
}

}  // namespace cudatrace
