// OpenTelemetry context a traced process publishes (docs/correlation.md):
// the thread context (OTEP 4947: each thread's active span, read by BPF at
// every call, bpf_abi.h ct_span) and the process context (OTEP 4719: the
// resource attributes and the thread context's attribute key map, in a
// mapping named OTEL_CTX). Parsing only; reading the process is
// target/thread_context.h's.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cudatrace {

// A process's published context (OTEP 4719 ProcessContext).
struct ProcessContext {
  // Resource attributes (service.name, service.namespace,
  // deployment.environment.name ...), string values only, in payload order.
  std::vector<std::pair<std::string, std::string>> resource;
  // threadlocal.attribute_key_map: the name of each thread-context
  // attribute key index.
  std::vector<std::string> span_keys;
  std::string schema_version;  // threadlocal.schema_version, if given
  // Which publication this is, unique within a source: a context published
  // again gets another, and its process line is written again.
  std::uint64_t generation = 0;
  // False for a saved trace's process that had no "process" line: only the
  // span attribute names its calls gave, no context to write or report.
  bool published = true;
  // The value of a resource attribute; empty if absent.
  std::string_view attribute(std::string_view key) const;
};

// Any process may publish a context, of up to 1 MiB: each name and value
// is kept to kMaxContextValueBytes (bounded_value), and at most
// kMaxResourceAttributes resource attributes (the first ones) are kept.
// A value rides on every Prometheus series of its process and on its
// process lines: 100 kB of service.name made 8.2 MB per scrape.
inline constexpr std::size_t kMaxContextValueBytes = 128;
inline constexpr std::size_t kMaxResourceAttributes = 64;
// `value` if it has at most `max_bytes` (>= 4) bytes; else its beginning,
// cut between UTF-8 characters, and "…" (U+2026), in `max_bytes` at most.
std::string bounded_value(std::string_view value, std::size_t max_bytes = kMaxContextValueBytes);

// A generation no context had before (ProcessContext::generation).
std::uint64_t next_context_generation();

// The header of the OTEL_CTX mapping (version 2).
inline constexpr std::size_t kProcessContextHeader = 32;
inline constexpr std::uint32_t kProcessContextVersion = 2;
inline constexpr std::uint32_t kMaxProcessContextPayload = 1u << 20;
struct ProcessContextHeader {
  std::uint32_t version = 0;
  std::uint32_t payload_size = 0;
  std::uint64_t published_at_ns = 0;  // 0 while the publisher updates it
  std::uint64_t payload = 0;          // address in the process
};
// Parses the header's bytes; false if the signature is not "OTEL_CTX", the
// version unknown, an update is in progress or the size implausible.
bool parse_process_context_header(std::string_view bytes, ProcessContextHeader& out);

// Decodes a ProcessContext protobuf payload: resource (field 1) attributes
// and extra_attributes (field 2: threadlocal.attribute_key_map,
// threadlocal.schema_version). Bounds-checked: false on malformed input (what
// was decoded before stays in `out`); unknown fields are skipped.
bool decode_process_context(std::string_view payload, ProcessContext& out);

// One attribute of a thread-context record: [key index u8][length u8][value].
struct SpanAttr {
  std::uint8_t key;
  std::string_view value;
};
// The attributes of a record's attribute bytes; stops at a truncated one.
std::vector<SpanAttr> parse_span_attrs(std::string_view bytes);

// A call's span, copied from its record (bpf_abi.h ct_span).
struct Span {
  std::array<std::uint8_t, 16> trace_id{};
  std::array<std::uint8_t, 8> span_id{};
  std::uint8_t trace_flags = 0;
  std::string_view attrs;  // the attribute bytes, valid as the call's payload is
};
std::string hex_id(const std::uint8_t* bytes, std::size_t n);  // lowercase
// The name of attribute key `key`: from the process's key map, else its index.
std::string span_key_name(const ProcessContext* ctx, std::uint8_t key);
// Parses 2n hex digits into n bytes; false if it is not that.
bool parse_hex_id(std::string_view hex, std::uint8_t* out, std::size_t n);

struct Call;
class Facet;

// The span facet's decoded form on a call (src/decode/facet_span.cpp): the
// span its thread had, when its process publishes thread context and it had
// a valid one, and its process's published context (its resource, the span
// attributes' key names), else nullptr.
struct CallSpan {
  bool has_span = false;
  Span span;
  const ProcessContext* process = nullptr;
  // A call read back from JSON: what span.attrs views, and its process's
  // context as the trace said it then (a later "process" line replaces it).
  std::string read_bytes;
  std::shared_ptr<const ProcessContext> read_process;
};
const CallSpan& call_span(const Call& c);
CallSpan& call_span(Call& c);

// How a live source finds the context of a call's process, made at `call_ns`
// (FacetNames; installed by record/thread_context_capture.cpp).
using ProcessContextFinder = std::function<const ProcessContext*(std::uint32_t pid, std::uint64_t call_ns)>;

const Facet& span_facet();

}  // namespace cudatrace
