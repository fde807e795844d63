// The OpenTelemetry span the calling thread had (docs/correlation.md;
// decode/otel.h): its ids and attributes, named by its process's context.
#include <nlohmann/json.hpp>

#include <cstring>

#include "cudatrace/bpf_abi.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/facet.h"
#include "cudatrace/json_fields.h"
#include "cudatrace/options.h"

namespace cudatrace {
namespace {

using namespace json_fields;
using namespace facet_json;

// The index of span attribute `name` in the process's key map, added when new.
std::uint8_t span_key_index(ProcessContext& ctx, const std::string& name) {
  for (std::size_t i = 0; i < ctx.span_keys.size(); ++i)
    if (ctx.span_keys[i] == name) return static_cast<std::uint8_t>(i);
  // A name that is an index: the tracer had no name for it.
  if (!name.empty() && name.size() <= 3 && name.find_first_not_of("0123456789") == std::string::npos) {
    const unsigned n = static_cast<unsigned>(std::stoul(name));
    if (n < 256 && n >= ctx.span_keys.size()) return static_cast<std::uint8_t>(n);
  }
  if (ctx.span_keys.size() >= 256) throw FacetJsonError{"more than 256 span attribute names"};
  ctx.span_keys.push_back(name);
  return static_cast<std::uint8_t>(ctx.span_keys.size() - 1);
}

class SpanFacet final : public Facet {
 public:
  // On unless --no-otel; BPF reads the span of the processes user space found a context in (otel_tls).
  FacetOption option() const override {
    return {"--no-otel", "TUNING",
            "Read no OpenTelemetry thread or process context: calls carry no span (docs/correlation.md)",
            &Options::otel, false, false};
  }
  FacetCapture capture() const override { return {&ct_config::thread_ctx}; }

  void decode(const ct_call& rec, const FacetNames*, Call& c) const override {
    c.has_span = false;
    c.span = {};
    const RecordSection sec = record_section(rec, CT_SECTION_SPAN);
    if (sec.len < CT_SPAN_SIZE) return;  // none, or too short to be one
    const std::uint8_t* at = sec.bytes;
    ct_span s;
    std::memcpy(&s, at, sizeof s);
    if (CT_SPAN_BYTES(std::size_t(s.attrs_size)) > sec.len) return;  // attributes past its section
    c.has_span = true;
    std::memcpy(c.span.trace_id.data(), s.trace_id, 16);
    std::memcpy(c.span.span_id.data(), s.span_id, 8);
    c.span.trace_flags = s.trace_flags;
    c.span.attrs = std::string_view(reinterpret_cast<const char*>(at + CT_SPAN_SIZE), s.attrs_size);
  }

  bool present(const Call& c) const override { return c.has_span; }

  // ,"trace_id":"..","span_id":"..","trace_flags":..,"span_attrs":{..}
  void write_json(const Call& c, FieldWriter& out) const override {
    out.key(kTraceId.name());
    out.string(hex_id(c.span.trace_id.data(), c.span.trace_id.size()));
    out.key(kSpanId.name());
    out.string(hex_id(c.span.span_id.data(), c.span.span_id.size()));
    out.key(kTraceFlags.name());
    out.number(c.span.trace_flags);
    const std::vector<SpanAttr> attrs = parse_span_attrs(c.span.attrs);
    if (attrs.empty()) return;
    out.key(kSpanAttrs.name());
    out.begin_object();
    for (const SpanAttr& a : attrs) {
      out.key(span_key_name(c.otel, a.key));
      out.string(a.value);
    }
    out.end_object();
  }

  // Its attributes are kept by their index in the process's key map.
  void read_json(const nlohmann::json& line, const FacetReading& in, Call& c) const override {
    c.has_span = false;
    c.span = {};
    c.facet_bytes.clear();
    const auto it = line.find(kTraceId.name());
    if (it == line.end()) return;
    if (!parse_hex_id(string_of(*it, quoted(kTraceId.name())), c.span.trace_id.data(), 16))
      throw FacetJsonError{quoted(kTraceId.name()) + " is not 32 hex digits"};
    if (!parse_hex_id(string_of(field(line, kSpanId.name()), quoted(kSpanId.name())), c.span.span_id.data(), 8))
      throw FacetJsonError{quoted(kSpanId.name()) + " is not 16 hex digits"};
    const std::uint64_t flags = unsigned_of(field(line, kTraceFlags.name()), quoted(kTraceFlags.name()));
    if (flags > 0xff) throw FacetJsonError{quoted(kTraceFlags.name()) + " out of range"};
    c.span.trace_flags = static_cast<std::uint8_t>(flags);
    if (const auto a = line.find(kSpanAttrs.name()); a != line.end()) {
      if (!a->is_object()) throw FacetJsonError{quoted(kSpanAttrs.name()) + " is not an object"};
      ProcessContext& ctx = in.process_context();
      for (const auto& [name, value] : a->items()) {
        const std::string& v = string_of(value, quoted(kSpanAttrs.name()));
        if (v.size() > 255) throw FacetJsonError{quoted(kSpanAttrs.name()) + " value longer than 255 bytes"};
        c.facet_bytes.push_back(static_cast<char>(span_key_index(ctx, name)));
        c.facet_bytes.push_back(static_cast<char>(v.size()));
        c.facet_bytes += v;
      }
      if (c.facet_bytes.size() > CT_MAX_SPAN_ATTRS) throw FacetJsonError{quoted(kSpanAttrs.name()) + " too long"};
    }
    c.span.attrs = c.facet_bytes;
    c.has_span = true;
  }

  void carry(const Call& from, Call& to) const override {
    to.has_span = from.has_span;
    to.span = from.span;
    to.facet_bytes = from.facet_bytes;
    to.span.attrs = to.facet_bytes;  // `from` may have moved since it was read
  }

  // span=<first 8 hex digits of the trace id>/<span id>
  void write_text(const Call& c, std::string& line, std::string&) const override {
    line += " span=";
    line += hex_id(c.span.trace_id.data(), 4);
    line += '/';
    line += hex_id(c.span.span_id.data(), c.span.span_id.size());
  }

  // To find the request's calls (docs/correlation.md).
  // The span is the OTLP span's parent (its trace and span ids), not an attribute of it.
  void otlp_attributes(const Call&, AttributeSink&) const override {}
  void perfetto_args(const Call& c,
                     const std::function<void(std::string_view, std::string_view)>& arg) const override {
    arg("trace_id", hex_id(c.span.trace_id.data(), 16));
    arg("span_id", hex_id(c.span.span_id.data(), 8));
    for (const SpanAttr& a : parse_span_attrs(c.span.attrs)) arg(span_key_name(c.otel, a.key), a.value);
  }
};

}  // namespace

const Facet& span_facet() {
  static const SpanFacet facet;
  return facet;
}

}  // namespace cudatrace
