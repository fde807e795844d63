// The field names of the JSON Lines trace (docs/json.md) that `cudatrace
// report` reads back, declared once for the writer (render/json_writer.cpp,
// json_summary.cpp) and the reader (record/trace_line.cpp), so that neither
// renames one alone. A field gives its name, which the reader looks up, and
// the `,"name":` the writer puts before its value, made at compile time.
#pragma once

#include <cstddef>
#include <string_view>

namespace cudatrace::json_fields {

template <std::size_t N>  // N: the name's length with its terminating NUL
struct Field {
  char chars[N + 3];  // ,"name":
  constexpr std::string_view name() const { return {chars + 2, N - 1}; }
  constexpr std::string_view key() const { return {chars, N + 3}; }              // ,"name":
  constexpr std::string_view first_key() const { return {chars + 1, N + 2}; }  // "name": (an object's first)
};

template <std::size_t N>
constexpr Field<N> field(const char (&name)[N]) {
  Field<N> f{};
  f.chars[0] = ',';
  f.chars[1] = '"';
  for (std::size_t i = 0; i + 1 < N; ++i) f.chars[2 + i] = name[i];
  f.chars[N + 1] = '"';
  f.chars[N + 2] = ':';
  return f;
}

static_assert(field("ts_ns").key() == ",\"ts_ns\":" && field("ts_ns").first_key() == "\"ts_ns\":" &&
                  field("ts_ns").name() == "ts_ns",
              "a field's name and keys");

// Every line: its record type, one of the values below.
inline constexpr auto kType = field("type");
inline constexpr std::string_view kCall = "call", kUnfinished = "unfinished", kWarning = "warning", kEnd = "end",
                                  kSummary = "summary";

// A call ("call", "unfinished").
inline constexpr auto kTsNs = field("ts_ns");
inline constexpr auto kPid = field("pid");
inline constexpr auto kTid = field("tid");
inline constexpr auto kComm = field("comm");
inline constexpr auto kLayer = field("layer");
inline constexpr auto kApi = field("api");
// Written by cudatrace 0.2 for a call recorded at entry, without a status: refused.
inline constexpr auto kEntryOnly = field("entry_only");
inline constexpr auto kDurNs = field("dur_ns");
inline constexpr auto kRet = field("ret");
inline constexpr auto kDepth = field("depth");
inline constexpr auto kParentApi = field("parent_api");
inline constexpr auto kArgs = field("args");
inline constexpr auto kKernelMangled = field("kernel_mangled");
inline constexpr auto kCaller = field("caller");
inline constexpr auto kStack = field("stack");
// The OpenTelemetry span of the call's thread (docs/correlation.md), when it had one.
inline constexpr auto kTraceId = field("trace_id");
inline constexpr auto kSpanId = field("span_id");
inline constexpr auto kTraceFlags = field("trace_flags");
inline constexpr auto kSpanAttrs = field("span_attrs");

// A process's OpenTelemetry process context ("process", also pid), before its first call.
inline constexpr std::string_view kProcess = "process";
inline constexpr auto kResource = field("resource");
inline constexpr auto kSpanKeys = field("span_keys");
// A frame of "stack".
inline constexpr auto kAddr = field("addr");
inline constexpr auto kFunction = field("function");
inline constexpr auto kFunctionOffset = field("function_offset");
inline constexpr auto kModule = field("module");
inline constexpr auto kModuleOffset = field("module_offset");

// A warning (also pid, api and caller).
inline constexpr auto kKind = field("kind");
inline constexpr auto kHostPtr = field("host_ptr");
inline constexpr auto kLocation = field("location");
inline constexpr auto kMessage = field("message");
inline constexpr auto kGpuCode = field("gpu_code");

// The end.
inline constexpr auto kCalls = field("calls");
inline constexpr auto kLost = field("lost");
inline constexpr auto kUnfinishedCalls = field("unfinished");
inline constexpr auto kUnmatched = field("unmatched");
inline constexpr auto kLostDetail = field("lost_detail");
inline constexpr auto kEmptyBecause = field("empty_because");  // only when nothing was traced
inline constexpr auto kCountsExact = field("counts_exact");    // a trace's
// Of "lost_detail": a trace's lost calls by API, each {"calls", "errors",
// "total_ns", "min_ns", "max_ns", "sum_sq_hi", "sum_sq_lo", "hist": [[bucket, n], ...]}.
inline constexpr auto kRingBufferCalls = field("ring_buffer_calls");
inline constexpr auto kErrors = field("errors");
inline constexpr auto kTotalNs = field("total_ns");
inline constexpr auto kMinNs = field("min_ns");
inline constexpr auto kMaxNs = field("max_ns");
inline constexpr auto kSumSqHi = field("sum_sq_hi");
inline constexpr auto kSumSqLo = field("sum_sq_lo");
inline constexpr auto kHist = field("hist");
// Of "lost_detail".
inline constexpr auto kRingBuffer = field("ring_buffer");
inline constexpr auto kThreadTable = field("thread_table");
inline constexpr auto kDepthOverflow = field("depth_overflow");
inline constexpr auto kOutput = field("output");
inline constexpr auto kControl = field("control");
inline constexpr auto kOtlpSpans = field("otlp_spans");  // --otlp: spans not sent (not calls of the trace)

}  // namespace cudatrace::json_fields
