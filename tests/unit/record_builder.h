// Helpers for building ct_call records by hand, the way the BPF side lays
// them out in the ring buffer (payload bytes directly after the struct, then
// the sections).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <variant>

#include "cudatrace/decode/api_table.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/bpf_abi.h"

namespace cudatrace_test {

// A ring-buffer record: the fixed struct, then up to CT_MAX_PAYLOAD bytes of
// payload and its sections.
struct RecBuf {
  ct_call rec;
  std::uint8_t payload[CT_MAX_PAYLOAD + 2048];
};
static_assert(offsetof(RecBuf, payload) == sizeof(ct_call), "payload must follow the record directly");

inline std::uint16_t api_id(std::string_view symbol) {
  const cudatrace::Api* a = cudatrace::api_by_symbol(symbol);
  EXPECT_NE(a, nullptr) << "no API " << symbol;
  return a ? a->id : cudatrace::kNoApi;
}

// A completed top-level call of `symbol` with ret 0 and no arguments set.
inline void init_rec(RecBuf& b, std::string_view symbol, std::uint32_t pid = 1234, const char* comm = "app") {
  std::memset(&b, 0, sizeof b);
  b.rec.type = CT_REC_CALL;
  b.rec.api = api_id(symbol);
  b.rec.parent_api = cudatrace::kNoApi;
  b.rec.pid = pid;
  b.rec.tid = pid + 1;
  b.rec.ts_ns = 1000;
  b.rec.dur_ns = 2500;
  b.rec.ret = 0;
  std::strncpy(b.rec.comm, comm, CT_COMM_LEN);
}

inline void set_payload(RecBuf& b, const void* data, std::size_t len) {
  std::memcpy(b.payload, data, len);
  b.rec.payload_len = static_cast<std::uint16_t>(len);
}

// Appends a section of `kind` with `len` bytes (well formed when a multiple
// of 8) after the payload and the sections before it, as BPF does.
inline void add_section(RecBuf& b, std::uint32_t kind, const void* data, std::size_t len) {
  const std::size_t at = CT_ALIGN8(std::size_t(b.rec.payload_len)) + b.rec.sections_len;
  ASSERT_LE(at + sizeof(ct_section) + len, sizeof b.payload);
  const ct_section header{kind, static_cast<std::uint32_t>(len)};
  std::memcpy(b.payload + at, &header, sizeof header);
  if (len) std::memcpy(b.payload + at + sizeof header, data, len);
  b.rec.sections_len += static_cast<std::uint32_t>(sizeof header + len);
}

// A NUL-terminated string payload, as bpf_probe_read_user_str stores it.
inline void set_string_payload(RecBuf& b, std::string_view s) {
  std::memcpy(b.payload, s.data(), s.size());
  b.payload[s.size()] = 0;
  b.rec.payload_len = static_cast<std::uint16_t>(s.size() + 1);
}

inline const cudatrace::Value* find_arg(const cudatrace::Call& c, std::string_view name) {
  for (const auto& a : c.args)
    if (a.name == name) return &a.value;
  return nullptr;
}

// A type-tagged rendering of a decoded value, so one EXPECT_EQ checks both the
// variant alternative and the value.
inline std::string describe(const cudatrace::Value& v) {
  using namespace cudatrace;
  if (std::holds_alternative<std::monostate>(v)) return "unavailable";
  if (const auto* u = std::get_if<std::uint64_t>(&v)) return "u64:" + std::to_string(*u);
  if (const auto* i = std::get_if<std::int64_t>(&v)) return "i64:" + std::to_string(*i);
  if (const auto* h = std::get_if<Hex>(&v)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "hex:0x%llx", static_cast<unsigned long long>(h->v));
    return buf;
  }
  if (const auto* d = std::get_if<Dim3>(&v))
    return "dim3:(" + std::to_string(d->x) + "," + std::to_string(d->y) + "," + std::to_string(d->z) + ")";
  if (const auto* f = std::get_if<double>(&v)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "f64:%g", *f);
    return buf;
  }
  if (const auto* n = std::get_if<Named>(&v))
    return std::string("named:") + (n->name ? n->name : "null") + "(" + std::to_string(n->raw) + ")";
  if (const auto* s = std::get_if<std::string_view>(&v)) return "str:" + std::string(*s);
  return "???";
}

// describe() of the argument called `name`, or "<missing>".
inline std::string arg_str(const cudatrace::Call& c, std::string_view name) {
  const cudatrace::Value* v = find_arg(c, name);
  return v ? describe(*v) : "<missing>";
}

// The argument names of a decoded call, joined with ','.
inline std::string arg_names(const cudatrace::Call& c) {
  std::string out;
  for (const auto& a : c.args) {
    if (!out.empty()) out += ',';
    out += a.name;
  }
  return out;
}

inline std::uint64_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

}  // namespace cudatrace_test
