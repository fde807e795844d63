// OpenTelemetry process and thread context: parsing (decode/otel.h).
#include "cudatrace/decode/otel.h"

#include <atomic>
#include <cstring>

namespace cudatrace {

std::string bounded_value(std::string_view value, std::size_t max_bytes) {
  static constexpr std::string_view kEllipsis = "\xE2\x80\xA6";
  if (value.size() <= max_bytes) return std::string(value);
  std::size_t keep = max_bytes - kEllipsis.size();
  while (keep > 0 && (static_cast<unsigned char>(value[keep]) & 0xC0) == 0x80) --keep;  // not inside a character
  return std::string(value.substr(0, keep)) + std::string(kEllipsis);
}

std::uint64_t next_context_generation() {
  static std::atomic<std::uint64_t> last{0};
  return ++last;
}

namespace {

// A bounds-checked reader of protobuf's wire format: only what the
// ProcessContext message uses (varints and length-delimited fields; fixed
// fields are skipped).
struct Pb {
  const std::uint8_t* p;
  const std::uint8_t* end;
  explicit Pb(std::string_view s)
      : p(reinterpret_cast<const std::uint8_t*>(s.data())), end(p + s.size()) {}
  bool done() const { return p >= end; }
  bool varint(std::uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) return false;
      const std::uint8_t b = *p++;
      v |= std::uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }
  // The next field: its number, wire type and, for a LEN field, its bytes.
  bool field(std::uint32_t& number, std::uint32_t& wire, std::string_view& bytes) {
    std::uint64_t tag;
    if (!varint(tag) || (tag >> 3) == 0 || (tag >> 3) > 0x1fffffff) return false;
    number = static_cast<std::uint32_t>(tag >> 3);
    wire = static_cast<std::uint32_t>(tag & 7);
    std::uint64_t n;
    switch (wire) {
      case 0:
        return varint(n);
      case 1:
        if (end - p < 8) return false;
        p += 8;
        return true;
      case 5:
        if (end - p < 4) return false;
        p += 4;
        return true;
      case 2:
        if (!varint(n) || n > std::uint64_t(end - p)) return false;
        bytes = std::string_view(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n));
        p += n;
        return true;
      default:
        return false;
    }
  }
};

// AnyValue: string_value (1) or array_value (5) of AnyValues with strings.
bool any_value(std::string_view bytes, std::string* str, std::vector<std::string>* strings) {
  Pb pb(bytes);
  while (!pb.done()) {
    std::uint32_t number, wire;
    std::string_view b;
    if (!pb.field(number, wire, b)) return false;
    if (wire != 2) continue;
    if (number == 1 && str) *str = std::string(b);
    if (number == 5 && strings) {
      Pb arr(b);
      while (!arr.done()) {
        std::uint32_t n2, w2;
        std::string_view v;
        if (!arr.field(n2, w2, v)) return false;
        if (n2 != 1 || w2 != 2) continue;
        std::string s;
        if (!any_value(v, &s, nullptr)) return false;
        strings->push_back(std::move(s));
      }
    }
  }
  return true;
}

// KeyValue: key (1), value (2: AnyValue).
bool key_value(std::string_view bytes, std::string& key, std::string_view& value) {
  Pb pb(bytes);
  bool has_key = false;
  while (!pb.done()) {
    std::uint32_t number, wire;
    std::string_view b;
    if (!pb.field(number, wire, b)) return false;
    if (wire != 2) continue;
    if (number == 1) {
      key = std::string(b);
      has_key = true;
    } else if (number == 2) {
      value = b;
    }
  }
  return has_key;
}

}  // namespace

std::string_view ProcessContext::attribute(std::string_view key) const {
  for (const auto& [k, v] : resource)
    if (k == key) return v;
  return {};
}

bool parse_process_context_header(std::string_view bytes, ProcessContextHeader& out) {
  if (bytes.size() < kProcessContextHeader || std::memcmp(bytes.data(), "OTEL_CTX", 8) != 0) return false;
  std::memcpy(&out.version, bytes.data() + 8, 4);
  std::memcpy(&out.payload_size, bytes.data() + 12, 4);
  std::memcpy(&out.published_at_ns, bytes.data() + 16, 8);
  std::memcpy(&out.payload, bytes.data() + 24, 8);
  return out.version == kProcessContextVersion && out.published_at_ns != 0 && out.payload_size > 0 &&
         out.payload_size <= kMaxProcessContextPayload && out.payload != 0;
}

bool decode_process_context(std::string_view payload, ProcessContext& out) {
  Pb pb(payload);
  while (!pb.done()) {
    std::uint32_t number, wire;
    std::string_view b;
    if (!pb.field(number, wire, b)) return false;
    if (wire != 2) continue;
    if (number == 1) {  // Resource: attributes (1)
      Pb res(b);
      while (!res.done()) {
        std::uint32_t n2, w2;
        std::string_view kv;
        if (!res.field(n2, w2, kv)) return false;
        if (n2 != 1 || w2 != 2) continue;
        std::string key, value;
        std::string_view any;
        if (!key_value(kv, key, any) || !any_value(any, &value, nullptr)) return false;
        if (out.resource.size() < kMaxResourceAttributes)
          out.resource.emplace_back(bounded_value(key), bounded_value(value));
      }
    } else if (number == 2) {  // extra_attributes: KeyValue
      std::string key;
      std::string_view any;
      if (!key_value(b, key, any)) return false;
      if (key == "threadlocal.attribute_key_map") {
        std::vector<std::string> keys;
        if (!any_value(any, nullptr, &keys)) return false;
        if (keys.size() > 256) keys.resize(256);  // a record's key index is a byte
        for (std::string& k : keys) k = bounded_value(k);
        out.span_keys = std::move(keys);
      } else if (key == "threadlocal.schema_version") {
        if (!any_value(any, &out.schema_version, nullptr)) return false;
        out.schema_version = bounded_value(out.schema_version);
      }
    }
  }
  return true;
}

std::vector<SpanAttr> parse_span_attrs(std::string_view bytes) {
  std::vector<SpanAttr> out;
  std::size_t i = 0;
  while (i + 2 <= bytes.size()) {
    const auto key = static_cast<std::uint8_t>(bytes[i]);
    const auto len = static_cast<std::uint8_t>(bytes[i + 1]);
    if (i + 2 + len > bytes.size()) break;
    out.push_back({key, bytes.substr(i + 2, len)});
    i += 2 + std::size_t(len);
  }
  return out;
}

std::string hex_id(const std::uint8_t* bytes, std::size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s(n * 2, '0');
  for (std::size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[bytes[i] >> 4];
    s[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return s;
}

std::string span_key_name(const ProcessContext* ctx, std::uint8_t key) {
  if (ctx && key < ctx->span_keys.size() && !ctx->span_keys[key].empty()) return ctx->span_keys[key];
  return std::to_string(key);
}

bool parse_hex_id(std::string_view hex, std::uint8_t* out, std::size_t n) {
  if (hex.size() != 2 * n) return false;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < n; ++i) {
    const int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return true;
}

}  // namespace cudatrace
