// The one mapping from a decoded call to its OTLP span's attributes; the
// names are docs/otlp.md's table. Protobuf-free, so that it is tested
// alone and built in every configuration.
#include <fmt/format.h>

#include "cudatrace/decode/cuda_errors.h"
#include "cudatrace/decode/facet.h"
#include "cudatrace/decode/transfer.h"
#include "cudatrace/render/otlp.h"

namespace cudatrace {
namespace {

// A decoded value as an attribute value: integers as integers, pointers
// and handles as hex text (a uint64 may not fit an OTLP int), enums by name.
std::variant<std::string, std::int64_t, double, bool> attribute_value(const Value& v) {
  struct Visit {
    std::variant<std::string, std::int64_t, double, bool> operator()(std::monostate) const { return std::string("?"); }
    std::variant<std::string, std::int64_t, double, bool> operator()(std::uint64_t u) const {
      if (u > std::uint64_t(INT64_MAX)) return fmt::format("{}", u);
      return std::int64_t(u);
    }
    std::variant<std::string, std::int64_t, double, bool> operator()(std::int64_t i) const { return i; }
    std::variant<std::string, std::int64_t, double, bool> operator()(Hex h) const { return fmt::format("{:#x}", h.v); }
    std::variant<std::string, std::int64_t, double, bool> operator()(Dim3 d) const {
      return fmt::format("{},{},{}", d.x, d.y, d.z);
    }
    std::variant<std::string, std::int64_t, double, bool> operator()(double d) const { return d; }
    std::variant<std::string, std::int64_t, double, bool> operator()(Named n) const {
      if (n.name) return std::string(n.name);
      return n.raw;
    }
    std::variant<std::string, std::int64_t, double, bool> operator()(std::string_view s) const {
      return std::string(s);
    }
  };
  return std::visit(Visit{}, v);
}

}  // namespace

std::string otlp_error_name(const Call& c) {
  if (const char* name = c.ret_name()) return name;
  return fmt::format("error {}", c.status());
}

std::vector<OtlpAttribute> otlp_call_attributes(const Call& c) {
  std::vector<OtlpAttribute> out;
  const auto add = [&out](std::string key, std::variant<std::string, std::int64_t, double, bool> value) {
    out.push_back({std::move(key), std::move(value)});
  };
  add("cuda.api", c.api->symbol);
  add("cuda.layer", std::string(layer_name(c.api->layer())));
  if (c.unfinished)
    add("cuda.unfinished", true);
  else if (const char* status = c.ret_name())
    add("cuda.status", std::string(status));
  if (c.parent) add("cuda.parent_api", c.parent->symbol);
  if (!c.kernel.empty()) add("cuda.kernel.name", std::string(c.kernel));
  const Effect effect = c.api->effect();
  if (effect == Effect::Copy || effect == Effect::Memset) {
    add("cuda.bytes", std::int64_t(role_bytes(c)));
    add("cuda.copy.direction", std::string(direction_name(copy_direction(c))));
  }
  if (const NamedValue* stream = role_arg(c, Role::Stream); stream && !stream->id.empty())
    add("cuda.stream", std::string(stream->id));
  for (const NamedValue& a : c.args) add("cuda.arg." + std::string(a.name), attribute_value(a.value));
  add("thread.id", std::int64_t(c.tid));
  add("thread.name", std::string(c.comm()));
  // The facets' own (--py-stack: the Python call site), as every writer takes them.
  struct Sink final : AttributeSink {
    std::vector<OtlpAttribute>& out;
    explicit Sink(std::vector<OtlpAttribute>& o) : out(o) {}
    void string(std::string_view key, std::string_view value) override {
      out.push_back({std::string(key), std::string(value)});
    }
    void integer(std::string_view key, std::int64_t value) override { out.push_back({std::string(key), value}); }
  } sink{out};
  for (const Facet* f : call_facets())
    if (f->present(c)) f->otlp_attributes(c, sink);
  return out;
}

}  // namespace cudatrace
