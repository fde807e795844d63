// The JSON Lines format (docs/json.md): each call a line with its
// annotations, warnings, the summary line (json_summary.cpp) and the end
// line. Hand-formatted like the text format (fmt's format-string parsing
// dominated the reader's time).
#include <iterator>
#include <map>

#include "cudatrace/decode/otel.h"
#include "cudatrace/json_fields.h"
#include "cudatrace/render/append.h"
#include "cudatrace/render/format.h"
#include "cudatrace/render/json.h"
#include "cudatrace/render/json_format.h"
#include "cudatrace/render/writer.h"

namespace cudatrace {
namespace {

using Buf = fmt::memory_buffer;
using namespace json_fields;

// "text", for text that needs no escaping (names cudatrace gives).
void append_quoted(Buf& out, std::string_view text) {
  append_char(out, '"');
  append_piece(out, text);
  append_char(out, '"');
}

// "0x1f": addresses.
void append_quoted_hex(Buf& out, std::uint64_t v) {
  append_char(out, '"');
  append_hex(out, v);
  append_char(out, '"');
}

// {"stream":ID,"launches":...}; without the stream for a graph's work.
void append_work_json(Buf& out, const StreamWork& w, bool with_stream = true) {
  auto it = std::back_inserter(out);
  if (with_stream) fmt::format_to(it, "{{\"stream\":\"{}\",", w.stream);
  fmt::format_to(it, "{}\"launches\":{},\"kernels\":[", with_stream ? "" : "{", w.launches);
  for (std::size_t i = 0; i < w.kernels.size(); ++i) {
    append_piece(out, std::string_view(i ? ",{\"kernel\":" : "{\"kernel\":"));
    append_json_string(out, w.kernels[i].name);
    fmt::format_to(it, ",\"count\":{}}}", w.kernels[i].count);
  }
  out.push_back(']');
  if (w.unlisted_launches) fmt::format_to(it, ",\"unlisted_launches\":{}", w.unlisted_launches);
  append_piece(out, std::string_view(",\"copies\":{"));
  const char* sep = "";
  for (int d = 0; d < kCopyDirections; ++d) {
    const StreamWork::Bytes& b = w.copies[d];
    if (!b.count) continue;
    fmt::format_to(it, "{}\"{}\":{{\"count\":{},\"bytes\":{}}}", sep, direction_name(static_cast<Direction>(d)),
                   b.count, b.bytes);
    sep = ",";
  }
  fmt::format_to(it, "}},\"memsets\":{{\"count\":{},\"bytes\":{}}}", w.memsets.count, w.memsets.bytes);
  if (w.host_functions) fmt::format_to(it, ",\"host_functions\":{}", w.host_functions);
  out.push_back('}');
}

void append_messages(Buf& out, const char* key, const std::vector<NvtxRange>& ranges) {
  append_piece(out, std::string_view(key));
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    out.push_back(i ? ',' : '[');
    append_json_string(out, ranges[i].message);
  }
  out.push_back(']');
}



void append_budget_json(Buf& out, const BudgetReport& r) {
  auto it = std::back_inserter(out);
  fmt::format_to(it,
                 "{{\"max_pct\":{:g},\"estimated_cost_pct\":{:.3f},\"safety_factor\":{:g},\"attached_pct\":{:.3f},"
                 "\"seen_ratio\":{:.6f},\"switches\":{},\"attach_ms_max\":{:.3f},\"detach_ms_max\":{:.3f},\"unreachable\":{},"
                 "\"estimated_apis\":[",
                 r.max_pct, r.estimated_cost_pct, r.safety_factor, r.attached_pct, r.seen_ratio, r.switches,
                 r.attach_ms_max, r.detach_ms_max, r.unreachable);
  for (std::size_t i = 0; i < r.sampled_apis.size(); ++i) {
    if (i) out.push_back(',');
    append_json_string(out, r.sampled_apis[i]);
  }
  append_piece(out, std::string_view("]}"));
}

}  // namespace

void append_wait_json(fmt::memory_buffer& out, const WaitInfo& w) {
  auto it = std::back_inserter(out);
  switch (w.kind) {
    case WaitInfo::Kind::Stream:
      fmt::format_to(it, ",\"waited_for\":{{\"kind\":\"stream\",\"stream\":\"{}\"", w.target);
      break;
    case WaitInfo::Kind::Device:
      append_piece(out, std::string_view(",\"waited_for\":{\"kind\":\"device\""));
      break;
    case WaitInfo::Kind::Event:
    case WaitInfo::Kind::StreamWaitEvent:
      fmt::format_to(it, ",\"waited_for\":{{\"kind\":\"{}\",\"event\":\"{}\",\"recorded_on\":",
                     w.kind == WaitInfo::Kind::Event ? "event" : "stream_wait_event", w.target);
      if (w.recorded_on.empty())
        append_piece(out, std::string_view("null"));
      else
        fmt::format_to(it, "\"{}\"", w.recorded_on);
  }
  if (w.approximate) append_piece(out, std::string_view(",\"approximate\":true"));
  append_piece(out, std::string_view(",\"work\":["));
  for (std::size_t i = 0; i < w.work.size(); ++i) {
    if (i) out.push_back(',');
    append_work_json(out, w.work[i]);
  }
  append_piece(out, std::string_view("]}"));
}

void append_graph_json(fmt::memory_buffer& out, const GraphInfo& g) {
  append_piece(out, std::string_view(",\"graph\":{\"id\":"));
  if (g.id.empty())
    append_piece(out, std::string_view("null"));
  else
    append_json_string(out, g.id);
  append_piece(out, std::string_view(g.known ? ",\"known\":true,\"runs\":" : ",\"known\":false,\"runs\":null}"));
  if (!g.known) return;
  append_work_json(out, g.work, false);
  out.push_back('}');
}

void append_nccl_json(fmt::memory_buffer& out, const NcclInfo& n) {
  append_piece(out, std::string_view(",\"nccl\":{\"comm_id\":"));
  if (n.has_comm) {
    out.push_back('"');
    append_hex16(out, n.comm_id);
    out.push_back('"');
  } else {
    append_piece(out, std::string_view("null"));
  }
  const auto number = [&](std::string_view key, bool known, auto v) {
    append_piece(out, key);
    if (!known)
      append_piece(out, std::string_view("null"));
    else if constexpr (std::is_signed_v<decltype(v)>)
      append_int(out, v);
    else
      append_uint(out, v);
  };
  number(",\"rank\":", n.rank >= 0, n.rank);
  number(",\"nranks\":", n.nranks >= 0, n.nranks);
  number(",\"seq\":", n.has_seq, n.seq);
  append_piece(out, n.in_group ? std::string_view(",\"in_group\":true") : std::string_view(",\"in_group\":false"));
  number(",\"bytes\":", n.has_bytes, n.bytes);
  out.push_back('}');
}

void append_nvtx_json(fmt::memory_buffer& out, const Call& c) {
  if (c.nvtx) append_messages(out, ",\"nvtx\":", *c.nvtx);
  if (c.nvtx_process) append_messages(out, ",\"nvtx_process\":", *c.nvtx_process);
}

void append_stack_json(fmt::memory_buffer& out, const std::vector<StackFrame>& stack) {
  JsonFieldWriter fields(out);
  write_stack_json(stack, fields);
}

void append_cost_json(fmt::memory_buffer& out, const CostReport& r) {
  auto it = std::back_inserter(out);
  fmt::format_to(it,
                 "{{\"entry_ns\":{:.1f},\"return_ns\":{:.1f},\"stepped_ns\":{:.1f},\"entry_wall_ns\":{:.1f},"
                 "\"return_wall_ns\":{:.1f},\"stepped_wall_ns\":{:.1f},\"workload_factor\":{:g},\"processes\":[",
                 r.per_hit.entry_ns, r.per_hit.return_ns, r.per_hit.stepped_ns, r.per_hit.entry_wall_ns,
                 r.per_hit.return_wall_ns, r.per_hit.stepped_wall_ns, r.workload_factor);
  for (std::size_t i = 0; i < r.processes.size(); ++i) {
    const ProcessCost& p = r.processes[i];
    fmt::format_to(it, "{}{{\"pid\":{},\"comm\":", i ? "," : "", p.pid);
    append_json_string(out, p.comm);
    fmt::format_to(it, ",\"entry_hits\":{},\"stepped_hits\":{},\"return_hits\":{},\"added_ns\":{:.0f}",
                   p.entry_hits, p.stepped_hits, p.return_hits, p.added_ns);
    if (p.cpu_ns && *p.cpu_ns)
      fmt::format_to(it, ",\"cpu_ns\":{},\"added_pct\":{:.3f}", *p.cpu_ns, 100.0 * p.added_ns / double(*p.cpu_ns));
    else
      append_piece(out, std::string_view(",\"cpu_ns\":null,\"added_pct\":null"));
    if (p.waited_ns) {
      fmt::format_to(it, ",\"waited_ns\":{:.0f}", *p.waited_ns);
      if (p.cpu_ns && *p.cpu_ns)
        fmt::format_to(it, ",\"waited_pct\":{:.3f}", 100.0 * *p.waited_ns / double(*p.cpu_ns));
      else
        append_piece(out, std::string_view(",\"waited_pct\":null"));
    }
    out.push_back('}');
  }
  out.push_back(']');
  if (r.budget) {
    append_piece(out, std::string_view(",\"budget\":"));
    append_budget_json(out, *r.budget);
  }
  out.push_back('}');
}

namespace {

class JsonWriter final : public Writer {
 public:
  fmt::memory_buffer* buffer() override { return &buf_; }

  void call(const Call& c, const CallAnalysis&) override {
    if (const ProcessContext* ctx = call_span(c).process) process_once(c.pid, *ctx);
    object(c, c.unfinished ? kUnfinished : kCall);
  }

  void warning(const Call& c, const Warning& w) override {
    buf_.push_back('{');
    append_piece(buf_, kType.first_key());
    append_quoted(buf_, kWarning);
    append_piece(buf_, kKind.key());
    append_quoted(buf_, w.kind);
    when_and_who(c);
    append_piece(buf_, kApi.key());
    append_quoted(buf_, c.api->symbol);
    if (w.host_ptr) {
      append_piece(buf_, kHostPtr.key());
      append_quoted_hex(buf_, w.host_ptr);
    }
    append_piece(buf_, kCaller.key());
    append_quoted_hex(buf_, c.caller);
    append_piece(buf_, kLocation.key());
    append_json_string(buf_, w.location);
    if (!w.gpu_code.empty()) {
      append_piece(buf_, kGpuCode.key());
      append_json_string(buf_, w.gpu_code);
    }
    append_piece(buf_, kMessage.key());
    append_json_string(buf_, w.message);
    append_piece(buf_, std::string_view("}\n"));
  }

  void summary(const SummarySnapshot& s) override { append_summary_json(buf_, s); }

  void end(const EndStats& s, Buf&) override {
    const auto count = [&](const auto& field, std::uint64_t n) {
      append_piece(buf_, field.key());
      append_uint(buf_, n);
    };
    buf_.push_back('{');
    append_piece(buf_, kType.first_key());
    append_quoted(buf_, kEnd);
    count(kCalls, s.calls);
    count(kLost, s.lost());
    count(kUnfinishedCalls, s.unfinished);
    append_piece(buf_, kLostDetail.key());
    buf_.push_back('{');
    append_piece(buf_, kRingBuffer.first_key());
    append_uint(buf_, s.kernel.ring_buffer);
    count(kThreadTable, s.kernel.thread_table);
    count(kDepthOverflow, s.kernel.depth_overflow);
    count(kOutput, s.lost_output);
    count(kControl, s.kernel.control);
    if (s.otlp) count(kOtlpSpans, s.otlp->lost());
    if (!s.kernel.ring_buffer_calls.empty()) lost_calls(s.kernel.ring_buffer_calls);
    buf_.push_back('}');
    count(kUnmatched, s.kernel.unmatched);
    if (s.counts_exact) {
      append_piece(buf_, kCountsExact.key());
      append_piece(buf_, std::string_view(*s.counts_exact ? "true" : "false"));
    }
    if (!s.empty_because.empty()) {
      append_piece(buf_, kEmptyBecause.key());
      append_json_string(buf_, s.empty_because);
    }
    if (s.cost) {
      append_piece(buf_, std::string_view(",\"overhead\":"));
      append_cost_json(buf_, *s.cost);
    }
    append_piece(buf_, std::string_view("}\n"));
  }

 private:
  // ,"ring_buffer_calls":{"API":{"calls":..,...,"hist":[[bucket,n],...]},...}: what report adds to the lines.
  void lost_calls(const std::map<std::uint16_t, ct_api_stats>& by_api) {
    append_piece(buf_, kRingBufferCalls.key());
    char sep = '{';
    for (const auto& [id, st] : by_api) {
      const Api* api = api_by_id(id);
      if (!api) continue;
      buf_.push_back(sep);
      sep = ',';
      append_quoted(buf_, api->symbol);
      buf_.push_back(':');
      buf_.push_back('{');
      append_piece(buf_, kCalls.first_key());
      append_uint(buf_, st.calls);
      for (const auto& [field, value] : {std::pair{kErrors.key(), st.errors}, {kTotalNs.key(), st.total_ns},
                                         {kMinNs.key(), st.min_ns}, {kMaxNs.key(), st.max_ns},
                                         {kSumSqHi.key(), st.sum_sq_hi}, {kSumSqLo.key(), st.sum_sq_lo}}) {
        append_piece(buf_, field);
        append_uint(buf_, value);
      }
      append_piece(buf_, kHist.key());
      char bucket_sep = '[';
      for (unsigned b = 0; b < CT_HIST_BUCKETS; ++b) {
        if (!st.hist[b]) continue;
        buf_.push_back(bucket_sep);
        bucket_sep = ',';
        buf_.push_back('[');
        append_uint(buf_, b);
        buf_.push_back(',');
        append_uint(buf_, st.hist[b]);
        buf_.push_back(']');
      }
      if (bucket_sep == '[') buf_.push_back('[');
      append_piece(buf_, std::string_view("]}"));
    }
    if (sep == '{') buf_.push_back('{');
    buf_.push_back('}');
  }

  // {"type":"process","pid":..,"resource":{..},"span_keys":[..]}: once per
  // process (and again should it publish another context).
  void process_once(std::uint32_t pid, const ProcessContext& ctx) {
    if (!ctx.published) return;
    auto [it, fresh] = processes_.try_emplace(pid, ctx.generation);
    if (!fresh && it->second == ctx.generation) return;
    it->second = ctx.generation;
    buf_.push_back('{');
    append_piece(buf_, kType.first_key());
    append_quoted(buf_, kProcess);
    append_piece(buf_, kPid.key());
    append_uint(buf_, pid);
    append_piece(buf_, kResource.key());
    buf_.push_back('{');
    for (std::size_t i = 0; i < ctx.resource.size(); ++i) {
      if (i) buf_.push_back(',');
      append_json_string(buf_, ctx.resource[i].first);
      buf_.push_back(':');
      append_json_string(buf_, ctx.resource[i].second);
    }
    buf_.push_back('}');
    append_piece(buf_, kSpanKeys.key());
    buf_.push_back('[');
    for (std::size_t i = 0; i < ctx.span_keys.size(); ++i) {
      if (i) buf_.push_back(',');
      append_json_string(buf_, ctx.span_keys[i]);
    }
    append_piece(buf_, std::string_view("]}\n"));
  }

  // ,"ts_ns":..,"pid":..,"tid":..
  void when_and_who(const Call& c) {
    append_piece(buf_, kTsNs.key());
    append_uint(buf_, c.ts_ns);
    append_piece(buf_, kPid.key());
    append_uint(buf_, c.pid);
    append_piece(buf_, kTid.key());
    append_uint(buf_, c.tid);
  }

  void object(const Call& c, std::string_view type) {
    append_char(buf_, '{');
    append_piece(buf_, kType.first_key());
    append_quoted(buf_, type);
    when_and_who(c);
    append_piece(buf_, kComm.key());
    append_json_string(buf_, c.comm());
    append_piece(buf_, kLayer.key());
    append_quoted(buf_, layer_name(c.api->layer()));
    append_piece(buf_, kApi.key());
    append_quoted(buf_, c.api->symbol);
    if (!c.unfinished) {
      append_piece(buf_, kDurNs.key());
      append_uint(buf_, c.dur_ns);
      if (c.api->spec->returns == Returns::Status) {
        append_piece(buf_, kRet.key());
        append_int(buf_, c.status());
        append_piece(buf_, std::string_view(",\"ret_name\":"));
        if (const char* name = c.ret_name())
          append_quoted(buf_, name);
        else
          append_piece(buf_, std::string_view("null"));
      }
    }
    append_piece(buf_, kDepth.key());
    append_uint(buf_, c.depth);
    if (c.parent) {
      append_piece(buf_, kParentApi.key());
      append_quoted(buf_, c.parent->symbol);
    }
    append_piece(buf_, kArgs.key());
    append_char(buf_, '{');
    bool first = true;
    for (const NamedValue& a : c.args) {
      if (!first) append_char(buf_, ',');
      first = false;
      append_json_string(buf_, a.name);
      append_char(buf_, ':');
      append_json_value(buf_, a.value);
    }
    append_char(buf_, '}');
    bool any_id = false;
    for (const NamedValue& a : c.args) {
      if (a.id.empty()) continue;
      append_piece(buf_, std::string_view(any_id ? "," : ",\"handle_ids\":{"));
      any_id = true;
      append_json_string(buf_, a.name);
      append_char(buf_, ':');
      append_json_string(buf_, a.id);
    }
    if (any_id) append_char(buf_, '}');
    if (c.waited) append_wait_json(buf_, *c.waited);
    if (c.graph) append_graph_json(buf_, *c.graph);
    if (c.captured) append_piece(buf_, std::string_view(",\"captured\":true"));
    if (c.nccl) append_nccl_json(buf_, *c.nccl);
    if (!c.kernel.empty()) {
      append_piece(buf_, std::string_view(",\"kernel\":"));
      append_json_string(buf_, c.kernel);
      append_piece(buf_, kKernelMangled.key());
      append_json_string(buf_, c.kernel_mangled);
      append_piece(buf_, std::string_view(",\"kernel_short\":"));
      append_json_string(buf_, c.kernel_short);
    }
    // The call site, for `cudatrace report` (allocation sites, warnings).
    if (c.caller) {
      append_piece(buf_, kCaller.key());
      append_quoted_hex(buf_, c.caller);
    }
    append_nvtx_json(buf_, c);
    JsonFieldWriter fields(buf_);
    for (const Facet* f : call_facets())
      if (f->present(c)) f->write_json(c, fields);
    append_piece(buf_, std::string_view("}\n"));
  }

  Buf buf_;
  std::map<std::uint32_t, std::uint64_t> processes_;  // the context generation whose process line was written
};

}  // namespace

std::unique_ptr<Writer> make_json_writer() { return std::make_unique<JsonWriter>(); }

}  // namespace cudatrace
