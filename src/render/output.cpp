#include "cudatrace/render/output.h"

#include <cmath>
#include <cstring>
#include <iterator>

#include "cudatrace/render/format.h"
#include "cudatrace/render/json.h"
#include "cudatrace/analysis/nvtx.h"
#include "cudatrace/analysis/nccl.h"
#include "cudatrace/analysis/streams.h"
#include "cudatrace/target/stacks.h"
#include "cudatrace/render/annotations.h"

namespace cudatrace {
namespace {

using Buf = fmt::memory_buffer;

void append_dim3(Buf& out, const Dim3& d, char open, char close) {
  out.push_back(open);
  append_uint(out, d.x);
  out.push_back(',');
  append_uint(out, d.y);
  out.push_back(',');
  append_uint(out, d.z);
  out.push_back(close);
}

void pad_to(Buf& out, std::size_t size) {
  while (out.size() < size) out.push_back(' ');
}

void append_right(Buf& out, std::string_view text, std::size_t width) {
  for (std::size_t i = text.size(); i < width; ++i) out.push_back(' ');
  out.append(text);
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
    out.append(fixed);
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
            out.append(std::string_view(x.name));
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

}  // namespace

void append_end_summary(const EndStats& s, Buf& out) {
  auto it = std::back_inserter(out);
  fmt::format_to(it, "cudatrace: {} calls traced, {} lost, {} unfinished\n", s.calls, s.lost(), s.unfinished);
  if (const std::uint64_t in_bpf = s.lost() - s.lost_output)
    fmt::format_to(it,
                   "cudatrace: lost {} records (ring buffer full: {}, thread table full: {}, nesting deeper than "
                   "{}: {}); try a larger --ring-mb or fewer groups with -f\n",
                   in_bpf, s.lost_ringbuf, s.lost_threads, CT_MAX_DEPTH, s.depth_overflow);
  if (s.lost_output && !s.output_failure.empty())
    fmt::format_to(it, "cudatrace: lost {} records that could not be written ({})\n", s.lost_output, s.output_failure);
  else if (s.lost_output)
    fmt::format_to(it,
                   "cudatrace: lost {} records the output's consumer did not read in time (output buffer full); "
                   "try a larger --buffer-mb, or -o FILE\n",
                   s.lost_output);
  if (s.lost_control)
    fmt::format_to(it, "cudatrace: lost {} loader or thread-exit notifications (ring buffer full)\n", s.lost_control);
}

namespace {

class TextOutput final : public Output {
 public:
  TextOutput(std::uint64_t start_ns, bool full_names) : start_ns_(start_ns), full_names_(full_names) {}

  void header() override {
    fmt::format_to(std::back_inserter(buf_), "{:<12} {:<16} {:>7} {:>7} {:<28} {:>10} {} {}\n", "TIME(s)", "COMM",
                   "PID", "TID", "API", "LAT(us)", "RET", "ARGS");
  }

  void call(const Call& c) override {
    line_start(c);
    if (c.entry_only) {  // no latency or status of its own (docs/json.md)
      fmt::format_to(std::back_inserter(buf_), " {:>10} -", "-");
      args(c);
      return;
    }
    buf_.push_back(' ');
    append_fixed(buf_, c.dur_ns, 3, 10, Align::Right);  // microseconds
    buf_.push_back(' ');
    if (c.api->spec->returns == Returns::Void)
      buf_.push_back('-');
    else if (c.ret == 0)
      buf_.push_back('0');
    else if (const char* name = c.ret_name())
      buf_.append(std::string_view(name));
    else
      append_int(buf_, c.ret);
    args(c);
  }

  void unfinished(const Call& c) override {
    line_start(c);
    fmt::format_to(std::back_inserter(buf_), " {:>10} {}", "-", "unfinished");
    args(c);
  }

  void end(const EndStats& s, Buf& summary) override {
    append_end_summary(s, summary);
    if (s.cost) append_cost_text(summary, *s.cost);
  }

 private:
  // Hand-formatted: this runs for every traced call, and fmt's format-string
  // parsing and float formatting dominated the reader's time.
  void line_start(const Call& c) {
    append_fixed(buf_, c.ts_ns >= start_ns_ ? (c.ts_ns - start_ns_) / 1000 : 0, 6, 12, Align::Left);  // seconds
    buf_.push_back(' ');
    // comm is at most 15 bytes; escape anything that would break the line.
    const std::size_t comm_start = buf_.size();
    append_terminal_safe(buf_, c.comm());
    pad_to(buf_, comm_start + 16);
    buf_.push_back(' ');
    append_right(buf_, fmt::format_int(c.pid).c_str(), 7);
    buf_.push_back(' ');
    append_right(buf_, fmt::format_int(c.tid).c_str(), 7);
    buf_.push_back(' ');
    const std::size_t api_start = buf_.size();
    for (unsigned i = 0; i < 2 * c.depth; ++i) buf_.push_back(' ');
    buf_.append(c.api->symbol);
    pad_to(buf_, api_start + 28);
  }

  void args(const Call& c) {
    // A launch of a known kernel shows its short name instead of its handle (--full-names: both).
    const bool kernel_named = !full_names_ && !c.kernel.empty() && c.kernel != "?";
    for (const NamedValue& a : c.args) {
      if (kernel_named && a.type == ArgType::Func) continue;
      buf_.push_back(' ');
      buf_.append(a.name);
      buf_.push_back('=');
      if (!a.id.empty())
        buf_.append(a.id);
      else
        append_text_value(buf_, a.value);
    }
    if (!c.kernel.empty()) {
      buf_.append(std::string_view(" kernel="));
      if (c.kernel == "?")
        buf_.push_back('?');
      else
        append_json_string(buf_, full_names_ ? c.kernel : c.kernel_short);
    }
    if (c.waited) append_wait_text(buf_, *c.waited);
    append_nvtx_text(buf_, c);
    if (c.nccl) append_nccl_text(buf_, *c.nccl);
    buf_.push_back('\n');
    append_stack_text(buf_, c.stack, 4);
  }

  std::uint64_t start_ns_;
  bool full_names_;
};

class JsonOutput final : public Output {
 public:
  void call(const Call& c) override { object(c, "call"); }
  void unfinished(const Call& c) override { object(c, "unfinished"); }

  void warning(const Call& c, const Warning& w) override {
    auto it = std::back_inserter(buf_);
    fmt::format_to(it, "{{\"type\":\"warning\",\"kind\":\"{}\",\"ts_ns\":{},\"pid\":{},\"tid\":{},\"api\":\"{}\","
                   "\"host_ptr\":\"{:#x}\",\"caller\":\"{:#x}\",\"location\":",
                   w.kind, c.ts_ns, c.pid, c.tid, c.api->symbol, w.host_ptr, c.caller);
    append_json_string(buf_, w.location);
    buf_.append(std::string_view(",\"message\":"));
    append_json_string(buf_, w.message);
    buf_.append(std::string_view("}\n"));
  }

  void end(const EndStats& s, Buf&) override {
    auto it = std::back_inserter(buf_);
    fmt::format_to(it, "{{\"type\":\"end\",\"calls\":{},\"lost\":{},\"unfinished\":{}", s.calls, s.lost(),
                   s.unfinished);
    fmt::format_to(it, ",\"lost_detail\":{{\"ring_buffer\":{},\"thread_table\":{},\"depth_overflow\":{},\"output\":{}",
                   s.lost_ringbuf, s.lost_threads, s.depth_overflow, s.lost_output);
    fmt::format_to(it, ",\"control\":{}}}", s.lost_control);
    fmt::format_to(it, ",\"unmatched\":{}", s.unmatched);
    if (s.cost) {
      buf_.append(std::string_view(",\"overhead\":"));
      append_cost_json(buf_, *s.cost);
    }
    buf_.append(std::string_view("}\n"));
  }

 private:
  // Hand-formatted like the text output (fmt's format-string parsing
  // dominated the reader's time); the layout is docs/json.md.
  void object(const Call& c, std::string_view type) {
    buf_.append(std::string_view("{\"type\":\""));
    buf_.append(type);
    buf_.append(std::string_view("\",\"ts_ns\":"));
    append_uint(buf_, c.ts_ns);
    buf_.append(std::string_view(",\"pid\":"));
    append_uint(buf_, c.pid);
    buf_.append(std::string_view(",\"tid\":"));
    append_uint(buf_, c.tid);
    buf_.append(std::string_view(",\"comm\":"));
    append_json_string(buf_, c.comm());
    buf_.append(std::string_view(",\"layer\":\""));
    buf_.append(std::string_view(layer_name(c.api->layer())));
    buf_.append(std::string_view("\",\"api\":\""));
    buf_.append(c.api->symbol);
    buf_.push_back('"');
    if (c.entry_only) {
      buf_.append(std::string_view(",\"entry_only\":true"));
    } else if (!c.unfinished) {
      buf_.append(std::string_view(",\"dur_ns\":"));
      append_uint(buf_, c.dur_ns);
      if (c.api->spec->returns == Returns::Status) {
        buf_.append(std::string_view(",\"ret\":"));
        append_int(buf_, c.status());
        buf_.append(std::string_view(",\"ret_name\":"));
        if (const char* name = c.ret_name()) {
          buf_.push_back('"');
          buf_.append(std::string_view(name));
          buf_.push_back('"');
        } else {
          buf_.append(std::string_view("null"));
        }
      }
    }
    buf_.append(std::string_view(",\"depth\":"));
    append_uint(buf_, c.depth);
    if (c.parent) {
      buf_.append(std::string_view(",\"parent_api\":\""));
      buf_.append(c.parent->symbol);
      buf_.push_back('"');
    }
    buf_.append(std::string_view(",\"args\":{"));
    bool first = true;
    for (const NamedValue& a : c.args) {
      if (!first) buf_.push_back(',');
      first = false;
      append_json_string(buf_, a.name);
      buf_.push_back(':');
      append_json_value(buf_, a.value);
    }
    buf_.push_back('}');
    bool any_id = false;
    for (const NamedValue& a : c.args) {
      if (a.id.empty()) continue;
      buf_.append(std::string_view(any_id ? "," : ",\"handle_ids\":{"));
      any_id = true;
      append_json_string(buf_, a.name);
      buf_.push_back(':');
      append_json_string(buf_, a.id);
    }
    if (any_id) buf_.push_back('}');
    if (c.waited) append_wait_json(buf_, *c.waited);
    if (c.nccl) append_nccl_json(buf_, *c.nccl);
    if (!c.kernel.empty()) {
      buf_.append(std::string_view(",\"kernel\":"));
      append_json_string(buf_, c.kernel);
      buf_.append(std::string_view(",\"kernel_mangled\":"));
      append_json_string(buf_, c.kernel_mangled);
      buf_.append(std::string_view(",\"kernel_short\":"));
      append_json_string(buf_, c.kernel_short);
    }
    // The call site, for `cudatrace report` (allocation sites, warnings).
    if (c.caller) {
      buf_.append(std::string_view(",\"caller\":\""));
      append_hex(buf_, c.caller);
      buf_.push_back('"');
    }
    append_nvtx_json(buf_, c);
    if (!c.stack.empty()) {
      buf_.append(std::string_view(",\"stack\":"));
      append_stack_json(buf_, c.stack);
    }
    buf_.append(std::string_view("}\n"));
  }
};

}  // namespace

std::unique_ptr<Output> make_text_output(std::uint64_t start_ns, bool full_names) {
  return std::make_unique<TextOutput>(start_ns, full_names);
}
std::unique_ptr<Output> make_json_output() { return std::make_unique<JsonOutput>(); }

}  // namespace cudatrace
