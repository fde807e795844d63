// The OpenTelemetry span the calling thread had (docs/correlation.md;
// decode/otel.h): its ids and attributes, named by its process's context.
#include <nlohmann/json.hpp>

#include <cstring>

#include "cudatrace/bpf_abi.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/facet.h"
#include "cudatrace/decode/otel.h"
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
            false, false};
  }
  FacetCapture capture() const override { return {&ct_config::thread_ctx}; }

  // The process's context names the span's attributes, and is carried by
  // calls under no span too (its process line, its resource).
  void decode(const ct_call& rec, const FacetNames* names, Call& c) const override {
    CallSpan& cs = call_span(c);
    cs.has_span = false;
    cs.span = {};
    const ProcessContextFinder* find = names ? names->get<ProcessContextFinder>(*this) : nullptr;
    cs.process = find ? (*find)(c.pid, c.ts_ns) : nullptr;
    const RecordSection sec = record_section(rec, CT_SECTION_SPAN);
    if (sec.len < CT_SPAN_SIZE) return;  // none, or too short to be one
    const std::uint8_t* at = sec.bytes;
    ct_span s;
    std::memcpy(&s, at, sizeof s);
    if (CT_SPAN_BYTES(std::size_t(s.attrs_size)) > sec.len) return;  // attributes past its section
    cs.has_span = true;
    std::memcpy(cs.span.trace_id.data(), s.trace_id, 16);
    std::memcpy(cs.span.span_id.data(), s.span_id, 8);
    cs.span.trace_flags = s.trace_flags;
    cs.span.attrs = std::string_view(reinterpret_cast<const char*>(at + CT_SPAN_SIZE), s.attrs_size);
  }

  bool present(const Call& c) const override { return call_span(c).has_span; }

  // ,"trace_id":"..","span_id":"..","trace_flags":..,"span_attrs":{..}
  void write_json(const Call& call, FieldWriter& out) const override {
    const CallSpan& c = call_span(call);
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
      out.key(span_key_name(c.process, a.key));
      out.string(a.value);
    }
    out.end_object();
  }

  // Its attributes are kept by their index in the process's key map.
  void read_json(const nlohmann::json& line, const FacetReading& in, Call& call) const override {
    CallSpan& c = call_span(call);
    c.has_span = false;
    c.span = {};
    c.read_bytes.clear();
    ProcessContexts& contexts = in.lines.of<ProcessContexts>(*this);
    const auto known = contexts.find(in.pid);
    c.read_process = known == contexts.end() ? nullptr : known->second;
    read_span(line, in.pid, contexts, c);
    c.process = c.read_process.get();
  }

  void carry(const Call& from_call, Call& to_call) const override {
    const CallSpan& from = call_span(from_call);
    CallSpan& to = call_span(to_call);
    to.has_span = from.has_span;
    to.span = from.span;
    to.read_bytes = from.read_bytes;
    to.span.attrs = to.read_bytes;  // `from` may have moved since it was read
    to.read_process = from.read_process;
    to.process = from.process;
  }

  // {"type":"process","pid":..,"resource":{..},"span_keys":[..]}: the
  // process context its calls after it carry.
  std::string_view line_type() const override { return kProcess; }
  void read_line(const nlohmann::json& j, FacetLines& lines) const override {
    const std::uint64_t pid = unsigned_of(field(j, kPid.name()), quoted(kPid.name()));
    if (pid > 0xffffffffu) throw FacetJsonError{"pid out of range"};
    ProcessContext ctx;
    const nlohmann::json& resource = field(j, kResource.name());
    if (!resource.is_object()) throw FacetJsonError{quoted(kResource.name()) + " is not an object"};
    for (const auto& [k, v] : resource.items()) ctx.resource.emplace_back(k, string_of(v, quoted(kResource.name())));
    if (const auto it = j.find(kSpanKeys.name()); it != j.end()) {
      if (!it->is_array() || it->size() > 256)
        throw FacetJsonError{quoted(kSpanKeys.name()) + " is not an array of at most 256 names"};
      for (const nlohmann::json& k : *it) ctx.span_keys.push_back(string_of(k, quoted(kSpanKeys.name())));
    }
    ctx.generation = next_context_generation();
    ProcessContexts& contexts = lines.of<ProcessContexts>(*this);
    contexts[static_cast<std::uint32_t>(pid)] = std::make_shared<ProcessContext>(std::move(ctx));
  }
  void forget_process(FacetLines& lines, std::uint32_t pid) const override {
    lines.of<ProcessContexts>(*this).erase(pid);
  }

  // span=<first 8 hex digits of the trace id>/<span id>
  void write_text(const Call& call, std::string& line, std::string&) const override {
    const CallSpan& c = call_span(call);
    line += " span=";
    line += hex_id(c.span.trace_id.data(), 4);
    line += '/';
    line += hex_id(c.span.span_id.data(), c.span.span_id.size());
  }

  // The processes' resources, and --by-span's tables (analysis/span_summary.h).
  std::vector<std::string_view> analyses() const override { return {"processes", "spans"}; }

  // To find the request's calls (docs/correlation.md).
  // The span is the OTLP span's parent (its trace and span ids), not an attribute of it.
  void otlp_attributes(const Call&, AttributeSink&) const override {}
  void perfetto_args(const Call& call,
                     const std::function<void(std::string_view, std::string_view)>& arg) const override {
    const CallSpan& c = call_span(call);
    arg("trace_id", hex_id(c.span.trace_id.data(), 16));
    arg("span_id", hex_id(c.span.span_id.data(), 8));
    for (const SpanAttr& a : parse_span_attrs(c.span.attrs)) arg(span_key_name(c.process, a.key), a.value);
  }

 private:
  // The process contexts of a saved trace's processes, by pid: from its
  // "process" lines, and the span attribute names its calls carry (a call's
  // span attributes are encoded by their index in span_keys). Shared with
  // the calls read under each: a context published again does not change
  // the calls before it.
  using ProcessContexts = std::map<std::uint32_t, std::shared_ptr<ProcessContext>>;

  static void read_span(const nlohmann::json& line, std::uint32_t pid, ProcessContexts& contexts, CallSpan& c) {
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
      std::shared_ptr<ProcessContext>& known = contexts[pid];
      if (!known) {  // a process without a "process" line: its names are kept, as no context
        known = std::make_shared<ProcessContext>();
        known->published = false;
        c.read_process = known;
      }
      ProcessContext& ctx = *known;
      for (const auto& [name, value] : a->items()) {
        const std::string& v = string_of(value, quoted(kSpanAttrs.name()));
        if (v.size() > 255) throw FacetJsonError{quoted(kSpanAttrs.name()) + " value longer than 255 bytes"};
        c.read_bytes.push_back(static_cast<char>(span_key_index(ctx, name)));
        c.read_bytes.push_back(static_cast<char>(v.size()));
        c.read_bytes += v;
      }
      if (c.read_bytes.size() > CT_MAX_SPAN_ATTRS) throw FacetJsonError{quoted(kSpanAttrs.name()) + " too long"};
    }
    c.span.attrs = c.read_bytes;
    c.has_span = true;
  }
};

}  // namespace

const Facet& span_facet() {
  static const SpanFacet facet;
  return facet;
}

const CallSpan& call_span(const Call& c) { return facet_form<CallSpan>(c, span_facet()); }

CallSpan& call_span(Call& c) { return facet_form<CallSpan>(c, span_facet()); }

}  // namespace cudatrace
