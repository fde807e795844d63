// A small strict JSON (RFC 8259) parser for the unit tests: accepts exactly
// one value surrounded by optional whitespace, rejects raw control bytes in
// strings, invalid UTF-8, lone surrogate escapes, bad numbers and trailing
// commas. Parses into a tree so tests can look fields up.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cudatrace_test {

struct JsonValue {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool boolean = false;
  std::string text;  // String: decoded UTF-8; Number: the literal as written
  std::vector<JsonValue> items;
  std::vector<std::pair<std::string, JsonValue>> members;  // in document order

  // Member lookup; nullptr if absent or not an object.
  const JsonValue* get(std::string_view key) const {
    if (kind != Object) return nullptr;
    for (const auto& m : members)
      if (m.first == key) return &m.second;
    return nullptr;
  }
  bool has(std::string_view key) const { return get(key) != nullptr; }
};

class JsonParser {
 public:
  // Returns true if `doc` is exactly one valid JSON value; on failure `error`
  // says where.
  static bool parse(std::string_view doc, JsonValue& out, std::string& error) {
    JsonParser p(doc);
    p.ws();
    if (!p.value(out, 0)) {
      error = p.error_;
      return false;
    }
    p.ws();
    if (p.i_ != doc.size()) {
      error = "trailing data at offset " + std::to_string(p.i_);
      return false;
    }
    return true;
  }
  static bool valid(std::string_view doc) {
    JsonValue v;
    std::string e;
    return parse(doc, v, e);
  }

  // Strict UTF-8 validation (no overlongs, surrogates or values > U+10FFFF).
  static bool valid_utf8(std::string_view s) {
    for (std::size_t i = 0; i < s.size();) {
      std::size_t n = utf8_len(s, i);
      if (n == 0) return false;
      i += n;
    }
    return true;
  }

 private:
  explicit JsonParser(std::string_view s) : s_(s) {}

  static std::size_t utf8_len(std::string_view s, std::size_t i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) return 1;
    std::size_t len;
    std::uint32_t cp;
    if (b >= 0xc2 && b <= 0xdf) {
      len = 2;
      cp = b & 0x1f;
    } else if (b >= 0xe0 && b <= 0xef) {
      len = 3;
      cp = b & 0x0f;
    } else if (b >= 0xf0 && b <= 0xf4) {
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
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return 0;
    if (cp >= 0xd800 && cp <= 0xdfff) return 0;
    if (cp > 0x10ffff) return 0;
    return len;
  }

  bool fail(const std::string& what) {
    error_ = what + " at offset " + std::to_string(i_);
    return false;
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return fail("bad literal");
    i_ += word.size();
    return true;
  }

  bool value(JsonValue& v, int depth) {
    if (depth > 64) return fail("too deep");
    if (i_ >= s_.size()) return fail("unexpected end");
    switch (s_[i_]) {
      case '{':
        return object(v, depth);
      case '[':
        return array(v, depth);
      case '"':
        v.kind = JsonValue::String;
        return string(v.text);
      case 't':
        v.kind = JsonValue::Bool;
        v.boolean = true;
        return literal("true");
      case 'f':
        v.kind = JsonValue::Bool;
        v.boolean = false;
        return literal("false");
      case 'n':
        v.kind = JsonValue::Null;
        return literal("null");
      default:
        v.kind = JsonValue::Number;
        return number(v.text);
    }
  }

  bool object(JsonValue& v, int depth) {
    v.kind = JsonValue::Object;
    ++i_;  // {
    ws();
    if (i_ < s_.size() && s_[i_] == '}') {
      ++i_;
      return true;
    }
    for (;;) {
      ws();
      if (i_ >= s_.size() || s_[i_] != '"') return fail("expected member name");
      std::string key;
      if (!string(key)) return false;
      ws();
      if (i_ >= s_.size() || s_[i_] != ':') return fail("expected ':'");
      ++i_;
      ws();
      JsonValue member;
      if (!value(member, depth + 1)) return false;
      v.members.emplace_back(std::move(key), std::move(member));
      ws();
      if (i_ >= s_.size()) return fail("unterminated object");
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (s_[i_] == '}') {
        ++i_;
        return true;
      }
      return fail("expected ',' or '}'");
    }
  }

  bool array(JsonValue& v, int depth) {
    v.kind = JsonValue::Array;
    ++i_;  // [
    ws();
    if (i_ < s_.size() && s_[i_] == ']') {
      ++i_;
      return true;
    }
    for (;;) {
      ws();
      JsonValue item;
      if (!value(item, depth + 1)) return false;
      v.items.push_back(std::move(item));
      ws();
      if (i_ >= s_.size()) return fail("unterminated array");
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (s_[i_] == ']') {
        ++i_;
        return true;
      }
      return fail("expected ',' or ']'");
    }
  }

  static void put_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }

  bool hex4(std::uint32_t& cp) {
    if (i_ + 4 > s_.size()) return fail("short \\u escape");
    cp = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      cp <<= 4;
      if (c >= '0' && c <= '9')
        cp |= c - '0';
      else if (c >= 'a' && c <= 'f')
        cp |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        cp |= c - 'A' + 10;
      else
        return fail("bad hex digit in \\u escape");
    }
    return true;
  }

  bool string(std::string& out) {
    ++i_;  // opening quote
    out.clear();
    while (i_ < s_.size()) {
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return true;
      }
      if (c < 0x20) return fail("raw control byte in string");
      if (c == '\\') {
        ++i_;
        if (i_ >= s_.size()) return fail("unterminated escape");
        const char e = s_[i_++];
        switch (e) {
          case '"': out.push_back('"'); break;
          case '\\': out.push_back('\\'); break;
          case '/': out.push_back('/'); break;
          case 'b': out.push_back('\b'); break;
          case 'f': out.push_back('\f'); break;
          case 'n': out.push_back('\n'); break;
          case 'r': out.push_back('\r'); break;
          case 't': out.push_back('\t'); break;
          case 'u': {
            std::uint32_t cp;
            if (!hex4(cp)) return false;
            if (cp >= 0xdc00 && cp <= 0xdfff) return fail("lone low surrogate escape");
            if (cp >= 0xd800 && cp <= 0xdbff) {
              std::uint32_t lo;
              if (s_.substr(i_, 2) != "\\u") return fail("lone high surrogate escape");
              i_ += 2;
              if (!hex4(lo)) return false;
              if (lo < 0xdc00 || lo > 0xdfff) return fail("bad low surrogate");
              cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            put_utf8(out, cp);
            break;
          }
          default:
            return fail("bad escape");
        }
        continue;
      }
      const std::size_t n = utf8_len(s_, i_);
      if (n == 0) return fail("invalid UTF-8 in string");
      out.append(s_.substr(i_, n));
      i_ += n;
    }
    return fail("unterminated string");
  }

  bool number(std::string& out) {
    const std::size_t start = i_;
    auto digit = [&] { return i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9'; };
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    if (!digit()) return fail("bad number");
    if (s_[i_] == '0') {
      ++i_;
    } else {
      while (digit()) ++i_;
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (!digit()) return fail("bad fraction");
      while (digit()) ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digit()) return fail("bad exponent");
      while (digit()) ++i_;
    }
    out.assign(s_.substr(start, i_ - start));
    return true;
  }

  std::string_view s_;
  std::size_t i_ = 0;
  std::string error_;
};

}  // namespace cudatrace_test
