// The text format: the trace's lines in bcc-style columns, with the
// analyses' annotations, and the end of the trace (what was lost, what
// tracing cost) as lines on stderr. Hand-formatted: this runs for every
// traced call, and fmt's format-string parsing and float formatting
// dominated the reader's time. The summary tables: text_summary.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <string_view>
#include <utility>
#include <vector>

#include "cudatrace/decode/arg_types.h"
#include "cudatrace/render/append.h"
#include "cudatrace/render/format.h"
#include "cudatrace/render/json.h"
#include "cudatrace/render/text.h"
#include "cudatrace/render/writer.h"

namespace cudatrace {
namespace {

using Buf = fmt::memory_buffer;

void append_dim3(Buf& out, const Dim3& d, char open, char close) {
  append_char(out, open);
  append_uint(out, d.x);
  append_char(out, ',');
  append_uint(out, d.y);
  append_char(out, ',');
  append_uint(out, d.z);
  append_char(out, close);
}

void pad_to(Buf& out, std::size_t size) {
  if (out.size() < size) append_chars(out, ' ', size - out.size());
}

void append_right(Buf& out, std::string_view text, std::size_t width) {
  if (text.size() < width) append_chars(out, ' ', width - text.size());
  append_piece(out, text);
}

enum class Align { Left, Right };

// value / 10^decimals with exactly `decimals` decimals, padded to `width`.
void append_fixed(Buf& out, std::uint64_t value, int decimals, std::size_t width, Align align) {
  std::uint64_t scale = 1;
  for (int i = 0; i < decimals; ++i) scale *= 10;
  char text[48];
  const fmt::format_int whole(value / scale), fraction(value % scale + scale);  // leading 1 keeps the zeros
  const std::size_t n = whole.size();
  std::memcpy(text, whole.data(), n);
  text[n] = '.';
  std::memcpy(text + n + 1, fraction.data() + 1, decimals);
  const std::string_view fixed(text, n + 1 + decimals);
  if (align == Align::Right) {
    append_right(out, fixed, width);
  } else {
    const std::size_t start = out.size();
    append_piece(out, fixed);
    pad_to(out, start + width);
  }
}

void append_text_value(Buf& out, const Value& v) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          out.push_back('?');
        } else if constexpr (std::is_same_v<T, Hex>) {
          append_hex(out, x.v);
        } else if constexpr (std::is_same_v<T, Dim3>) {
          append_dim3(out, x, '(', ')');
        } else if constexpr (std::is_same_v<T, Named>) {
          if (x.name)
            append_piece(out, std::string_view(x.name));
          else
            append_int(out, x.raw);
        } else if constexpr (std::is_same_v<T, std::string_view>) {
          // Keep one line per call: quote and escape like JSON.
          append_json_string(out, x);
        } else if constexpr (std::is_same_v<T, double>) {
          fmt::format_to(std::back_inserter(out), "{}", x);
        } else if constexpr (std::is_same_v<T, std::uint64_t>) {
          append_uint(out, x);
        } else {
          append_int(out, x);
        }
      },
      v);
}

constexpr std::size_t kKernelsShown = 4;  // per stream in a text line; JSON has all

// "2 launches (k x2), 1 copy HtoD 4.0 MiB" ("2 kernels (k x2)" in a graph); nothing when empty.
void append_work_items(Buf& out, const StreamWork& w, bool in_graph) {
  auto it = std::back_inserter(out);
  const char* sep = " ";
  if (w.launches) {
    if (in_graph)
      fmt::format_to(it, "{}{} kernel{} (", sep, w.launches, w.launches == 1 ? "" : "s");
    else
      fmt::format_to(it, "{}{} launch{} (", sep, w.launches, w.launches == 1 ? "" : "es");
    for (std::size_t i = 0; i < w.kernels.size() && i < kKernelsShown; ++i) {
      fmt::format_to(it, "{}{}", i ? ", " : "", w.kernels[i].short_name);
      if (w.kernels[i].count > 1) fmt::format_to(it, " x{}", w.kernels[i].count);
    }
    if (w.kernels.size() > kKernelsShown) fmt::format_to(it, ", +{} more", w.kernels.size() - kKernelsShown);
    if (w.unlisted_launches)
      fmt::format_to(it, ", +{} launch{} of other kernels", w.unlisted_launches, w.unlisted_launches == 1 ? "" : "es");
    out.push_back(')');
    sep = ", ";
  }
  for (int d = 0; d < kCopyDirections; ++d) {
    const StreamWork::Bytes& b = w.copies[d];
    if (!b.count) continue;
    fmt::format_to(it, "{}{} cop{} {} {}", sep, b.count, b.count == 1 ? "y" : "ies",
                   direction_name(static_cast<Direction>(d)), format_bytes(b.bytes));
    sep = ", ";
  }
  if (w.memsets.count) {
    fmt::format_to(it, "{}{} memset{} {}", sep, w.memsets.count, w.memsets.count == 1 ? "" : "s",
                   format_bytes(w.memsets.bytes));
    sep = ", ";
  }
  if (w.host_functions)
    fmt::format_to(it, "{}{} host function{}", sep, w.host_functions, w.host_functions == 1 ? "" : "s");
}

void append_work_text(Buf& out, const StreamWork& w) {
  fmt::format_to(std::back_inserter(out), "{}:", w.stream);
  append_work_items(out, w, false);
}

void append_work_list_text(Buf& out, const std::vector<StreamWork>& work) {
  if (work.empty()) append_piece(out, std::string_view("nothing"));
  for (std::size_t i = 0; i < work.size(); ++i) {
    if (i) append_piece(out, std::string_view("; "));
    append_work_text(out, work[i]);
  }
}


void append_budget_text(Buf& out, const BudgetReport& r) {
  auto it = std::back_inserter(out);
  fmt::format_to(it, "cudatrace: --max-overhead {:g} %: estimated cost {:.2f} % (hits priced at {:g}x the start-up "
                 "measurement)", r.max_pct, r.estimated_cost_pct, r.safety_factor);
  if (r.sampled_apis.empty()) {
    append_piece(out, std::string_view(", every call traced\n"));
  } else {
    std::string names;
    for (std::size_t i = 0; i < r.sampled_apis.size() && i < 4; ++i) names += (i ? ", " : "") + r.sampled_apis[i];
    if (r.sampled_apis.size() > 4) names += ", ...";
    fmt::format_to(it,
                   "; {} launch-rate APIs ({}) traced in sampled windows, {:.1f} % of the time (switched {} times, "
                   "the slowest attach {:.1f} ms, detach {:.1f} ms): their counts are estimates from {:.2f} % of "
                   "their calls (marked ~)\n",
                   r.sampled_apis.size(), names, r.attached_pct, r.switches, r.attach_ms_max, r.detach_ms_max,
                   100 * r.seen_ratio);
  }
  if (r.unreachable)
    append_piece(out, std::string_view("cudatrace: warning: the APIs that are not sampled cost more than the budget "
                                "on their own; calls to them are all traced\n"));
}

}  // namespace

void append_wait_description(fmt::memory_buffer& out, const WaitInfo& w) {
  if (w.kind == WaitInfo::Kind::Event || w.kind == WaitInfo::Kind::StreamWaitEvent) {
    append_piece(out, w.target);
    if (w.recorded_on.empty()) {
      append_piece(out, std::string_view(" (never recorded)"));
      return;
    }
    fmt::format_to(std::back_inserter(out), " (recorded on {}) for ", w.recorded_on);
  }
  append_work_list_text(out, w.work);
  if (w.approximate) append_piece(out, std::string_view(" (approximate: older queued work summarised together)"));
}

void append_nccl_text(fmt::memory_buffer& out, const NcclInfo& n) {
  if (n.has_comm) {
    append_piece(out, std::string_view(" comm_id="));
    append_hex16(out, n.comm_id);
    append_piece(out, std::string_view(" rank="));
    if (n.rank >= 0)
      append_int(out, n.rank);
    else
      out.push_back('?');
    out.push_back('/');
    if (n.nranks >= 0)
      append_int(out, n.nranks);
    else
      out.push_back('?');
  }
  if (n.has_seq) {
    append_piece(out, std::string_view(" seq="));
    append_uint(out, n.seq);
  }
  if (n.has_bytes) {
    append_piece(out, std::string_view(" bytes="));
    append_uint(out, n.bytes);
  }
  if (n.in_group) append_piece(out, std::string_view(" [group]"));
}

void append_graph_text(fmt::memory_buffer& out, const GraphInfo& g) {
  if (g.id.empty()) {
    append_piece(out, std::string_view(" captured:"));
  } else {
    append_piece(out, std::string_view(" graph "));
    append_piece(out, g.id);
    out.push_back(':');
  }
  if (!g.known)
    append_piece(out, std::string_view(" contents unknown"));
  else if (g.work.empty())
    append_piece(out, std::string_view(" nothing"));
  else
    append_work_items(out, g.work, true);
}

void append_wait_text(fmt::memory_buffer& out, const WaitInfo& w) {
  append_piece(out, std::string_view(w.kind == WaitInfo::Kind::StreamWaitEvent ? " waits: " : " waited: "));
  append_wait_description(out, w);
}

void append_nvtx_text(fmt::memory_buffer& out, const Call& c) {
  if (!c.nvtx) return;  // the innermost range, and how deep
  append_piece(out, std::string_view(" nvtx["));
  append_uint(out, c.nvtx->size());
  append_piece(out, std::string_view("]="));
  append_json_string(out, c.nvtx->back().message);
}

void append_stack_text(fmt::memory_buffer& out, const std::vector<StackFrame>& stack, int indent) {
  append_piece(out, stack_lines(stack, indent));
}

void append_cost_text(Buf& out, const CostReport& r) {
  auto it = std::back_inserter(out);
  constexpr std::size_t kShown = 5;
  for (std::size_t i = 0; i < r.processes.size() && i < kShown; ++i) {
    const ProcessCost& p = r.processes[i];
    const double ms = p.added_ns / 1e6;
    fmt::format_to(it, "cudatrace: added \u2248 {:.{}f} ms of CPU time to {} (PID {})", ms, ms < 1 ? 3 : 1,
                   terminal_safe(p.comm), p.pid);
    if (p.cpu_ns && *p.cpu_ns)
      fmt::format_to(it, ", {:.1f} % of its CPU time while traced", 100.0 * p.added_ns / double(*p.cpu_ns));
    fmt::format_to(it, " ({} probe hits)\n", group_digits(p.hits()));
    if (p.waited_ns) {
      const double waited_ms = *p.waited_ns / 1e6;
      fmt::format_to(it, "cudatrace: {} (PID {}) also waited \u2248 {:.{}f} ms for the CPUs it shares with cudatrace",
                     terminal_safe(p.comm), p.pid, waited_ms, waited_ms < 1 ? 3 : 1);
      if (p.cpu_ns && *p.cpu_ns) fmt::format_to(it, ", {:.1f} % of its CPU time", 100.0 * *p.waited_ns / double(*p.cpu_ns));
      out.push_back('\n');
    }
  }
  if (r.processes.size() > kShown) {
    double rest = 0;
    for (std::size_t i = kShown; i < r.processes.size(); ++i) rest += r.processes[i].added_ns;
    fmt::format_to(it, "cudatrace: added \u2248 {:.1f} ms of CPU time to {} more processes\n", rest / 1e6,
                   r.processes.size() - kShown);
  }
  if (r.budget) append_budget_text(out, *r.budget);
  const double cpu = r.per_hit.entry_ns + r.per_hit.return_ns;
  const double wall = r.per_hit.entry_wall_ns + r.per_hit.return_wall_ns;
  if (!r.processes.empty() && wall > 2 * cpu)
    fmt::format_to(it,
                   "cudatrace: here a probed call takes {:.1f} us longer but only {:.1f} us more CPU time (a virtual "
                   "machine?): the slowdown can be up to {:.0f} times the CPU time added\n",
                   wall / 1e3, cpu / 1e3, wall / std::max(cpu, 1.0));
}

void append_end_text(Buf& out, const EndStats& s) {
  auto it = std::back_inserter(out);
  fmt::format_to(it, "cudatrace: {} calls traced, {} lost, {} unfinished", s.calls, s.lost(), s.unfinished);
  if (!s.empty_because.empty()) fmt::format_to(it, ": {}", s.empty_because);
  out.push_back('\n');
  if (const std::uint64_t in_bpf = s.lost() - s.lost_output)
    fmt::format_to(it,
                   "cudatrace: lost {} records (ring buffer full: {}, thread table full: {}, nesting deeper than "
                   "{}: {}); try a larger --ring-mb or fewer groups with -f\n",
                   in_bpf, s.kernel.ring_buffer, s.kernel.thread_table, CT_MAX_DEPTH, s.kernel.depth_overflow);
  if (!s.kernel.ring_buffer_calls.empty()) {
    std::vector<std::pair<std::uint64_t, std::string_view>> by_count;
    for (const auto& [id, st] : s.kernel.ring_buffer_calls)
      if (const Api* api = api_by_id(id)) by_count.emplace_back(st.calls, api->symbol);
    std::sort(by_count.begin(), by_count.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    fmt::format_to(it, "cudatrace: the calls the ring buffer lost, counted by API:");
    std::string_view sep = " ";
    for (const auto& [n, symbol] : by_count) {
      fmt::format_to(it, "{}{} {}", sep, symbol, n);
      sep = ", ";
    }
    fmt::format_to(it, "{}\n", s.counts_exact.value_or(false) ? " (every call is counted: the trace's lines and these)"
                                                              : "");
  }
  if (s.lost_output && !s.output_failure.empty())
    fmt::format_to(it, "cudatrace: lost {} records that could not be written ({})\n", s.lost_output, s.output_failure);
  else if (s.lost_output)
    fmt::format_to(it,
                   "cudatrace: lost {} records the output's consumer did not read in time (output buffer full); "
                   "try a larger --buffer-mb, or -o FILE\n",
                   s.lost_output);
  if (s.kernel.control)
    fmt::format_to(it, "cudatrace: lost {} loader or thread-exit notifications (ring buffer full)\n", s.kernel.control);
  if (s.otlp && s.otlp->lost())
    fmt::format_to(it,
                   "cudatrace: {} of {} OTLP spans not sent (queue full: {}, refused: {}, unsent at the exit "
                   "timeout: {}){}\n",
                   s.otlp->lost(), s.otlp->spans, s.otlp->queue_full, s.otlp->rejected, s.otlp->unsent,
                   s.otlp->last_error.empty() ? "" : "; last error: " + s.otlp->last_error);
  if (s.cost) append_cost_text(out, *s.cost);
}

namespace {

class TextWriter final : public Writer {
 public:
  TextWriter(std::uint64_t start_ns, bool full_names) : start_ns_(start_ns), full_names_(full_names) {}

  fmt::memory_buffer* buffer() override { return &buf_; }

  void header() override {
    fmt::format_to(std::back_inserter(buf_), "{:<12} {:<16} {:>7} {:>7} {:<28} {:>10} {} {}\n", "TIME(s)", "COMM",
                   "PID", "TID", "API", "LAT(us)", "RET", "ARGS");
  }

  void call(const Call& c, const CallAnalysis&) override {
    line_start(c);
    if (c.unfinished) {
      fmt::format_to(std::back_inserter(buf_), " {:>10} {}", "-", "unfinished");
      args(c);
      return;
    }
    append_char(buf_, ' ');
    append_fixed(buf_, c.dur_ns, 3, 10, Align::Right);  // microseconds
    append_char(buf_, ' ');
    if (c.api->spec->returns != Returns::Status)
      append_char(buf_, '-');
    else if (c.ret == 0)
      append_char(buf_, '0');
    else if (const char* name = c.ret_name())
      append_piece(buf_, std::string_view(name));
    else
      append_int(buf_, c.ret);
    args(c);
  }

  void end(const EndStats& s, Buf& messages) override { append_end_text(messages, s); }

  void summary(const SummarySnapshot& s) override { append_summary_text(buf_, s, full_names_); }

 private:
  void line_start(const Call& c) {
    append_fixed(buf_, c.ts_ns >= start_ns_ ? (c.ts_ns - start_ns_) / 1000 : 0, 6, 12, Align::Left);  // seconds
    append_char(buf_, ' ');
    // comm is at most 15 bytes; escape anything that would break the line.
    const std::size_t comm_start = buf_.size();
    append_terminal_safe(buf_, c.comm());
    pad_to(buf_, comm_start + 16);
    append_char(buf_, ' ');
    const fmt::format_int pid(c.pid), tid(c.tid);
    append_right(buf_, {pid.data(), pid.size()}, 7);
    append_char(buf_, ' ');
    append_right(buf_, {tid.data(), tid.size()}, 7);
    append_char(buf_, ' ');
    const std::size_t api_start = buf_.size();
    append_chars(buf_, ' ', 2 * c.depth);
    append_piece(buf_, c.api->symbol);
    pad_to(buf_, api_start + 28);
  }

  void args(const Call& c) {
    // A launch of a known kernel shows its short name instead of its handle (--full-names: both).
    const bool kernel_named = !full_names_ && !c.kernel.empty() && c.kernel != "?";
    for (const NamedValue& a : c.args) {
      if (kernel_named && arg_facts(a.type).handle_of == HandleOf::Kernel && !is_out(a.type)) continue;
      append_char(buf_, ' ');
      append_piece(buf_, a.name);
      append_char(buf_, '=');
      if (!a.id.empty())
        append_piece(buf_, a.id);
      else
        append_text_value(buf_, a.value);
    }
    if (!c.kernel.empty()) {
      append_piece(buf_, std::string_view(" kernel="));
      if (c.kernel == "?")
        append_char(buf_, '?');
      else
        append_json_string(buf_, full_names_ ? c.kernel : c.kernel_short);
    }
    if (c.waited) append_wait_text(buf_, *c.waited);
    if (c.graph) append_graph_text(buf_, *c.graph);
    if (c.captured) append_piece(buf_, std::string_view(" [captured]"));
    append_nvtx_text(buf_, c);
    if (c.nccl) append_nccl_text(buf_, *c.nccl);
    below_.clear();
    for (const Facet* f : call_facets()) {
      if (!f->present(c)) continue;
      line_.clear();
      f->write_text(c, line_, below_);
      append_piece(buf_, line_);
    }
    buf_.push_back('\n');
    append_piece(buf_, below_);
  }

  Buf buf_;
  std::string line_, below_;  // a facet's text on the call's line, and below it
  std::uint64_t start_ns_;
  bool full_names_;
};

}  // namespace

std::unique_ptr<Writer> make_text_writer(std::uint64_t start_ns, bool full_names) {
  return std::make_unique<TextWriter>(start_ns, full_names);
}

}  // namespace cudatrace
