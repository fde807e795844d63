#include "cudatrace/output.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <iterator>

#include "cudatrace/json.h"
#include "cudatrace/nccl.h"
#include "cudatrace/streams.h"

namespace cudatrace {
namespace {

using Buf = fmt::memory_buffer;

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
  auto it = std::back_inserter(out);
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          out.push_back('?');
        } else if constexpr (std::is_same_v<T, Hex>) {
          fmt::format_to(it, "{:#x}", x.v);
        } else if constexpr (std::is_same_v<T, Dim3>) {
          fmt::format_to(it, "({},{},{})", x.x, x.y, x.z);
        } else if constexpr (std::is_same_v<T, Named>) {
          if (x.name)
            out.append(std::string_view(x.name));
          else
            fmt::format_to(it, "{}", x.raw);
        } else if constexpr (std::is_same_v<T, std::string_view>) {
          // Keep one line per call: quote and escape like JSON.
          append_json_string(out, x);
        } else {
          fmt::format_to(it, "{}", x);
        }
      },
      v);
}

}  // namespace

void append_json_value(Buf& out, const Value& v) {
  auto it = std::back_inserter(out);
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          out.append(std::string_view("null"));
        } else if constexpr (std::is_same_v<T, Hex>) {
          fmt::format_to(it, "\"{:#x}\"", x.v);
        } else if constexpr (std::is_same_v<T, Dim3>) {
          fmt::format_to(it, "[{},{},{}]", x.x, x.y, x.z);
        } else if constexpr (std::is_same_v<T, Named>) {
          if (x.name)
            fmt::format_to(it, "\"{}\"", x.name);
          else
            fmt::format_to(it, "{}", x.raw);
        } else if constexpr (std::is_same_v<T, std::string_view>) {
          append_json_string(out, x);
        } else if constexpr (std::is_same_v<T, double>) {
          // JSON has no NaN or infinity: an event timing that is not a number is null.
          if (std::isfinite(x))
            fmt::format_to(it, "{}", x);
          else
            out.append(std::string_view("null"));
        } else {
          fmt::format_to(it, "{}", x);
        }
      },
      v);
}

namespace {

class TextOutput final : public Output {
 public:
  explicit TextOutput(std::uint64_t start_ns) : start_ns_(start_ns) {}

  void header() override {
    fmt::format_to(std::back_inserter(buf_), "{:<12} {:<16} {:>7} {:>7} {:<28} {:>10} {} {}\n", "TIME(s)", "COMM",
                   "PID", "TID", "API", "LAT(us)", "RET", "ARGS");
  }

  void call(const Call& c) override {
    line_start(c);
    buf_.push_back(' ');
    append_fixed(buf_, c.rec->dur_ns, 3, 10, Align::Right);  // microseconds
    buf_.push_back(' ');
    if (c.api->spec->returns == Returns::Void)
      buf_.push_back('-');
    else if (c.rec->ret == 0)
      buf_.push_back('0');
    else if (const char* name = c.ret_name())
      buf_.append(std::string_view(name));
    else
      fmt::format_to(std::back_inserter(buf_), "{}", c.rec->ret);
    args(c);
  }

  void unfinished(const Call& c) override {
    line_start(c);
    fmt::format_to(std::back_inserter(buf_), " {:>10} {}", "-", "unfinished");
    args(c);
  }

  void end(const EndStats& s, Buf& summary) override {
    fmt::format_to(std::back_inserter(summary), "cudatrace: {} calls traced, {} lost, {} unfinished\n", s.calls,
                   s.lost(), s.unfinished);
    if (s.lost())
      fmt::format_to(std::back_inserter(summary),
                     "cudatrace: lost {} records (ring buffer full: {}, thread table full: {}, nesting deeper than "
                     "{}: {}); try a larger --ring-mb or fewer groups with -f\n",
                     s.lost(), s.lost_ringbuf, s.lost_threads, CT_MAX_DEPTH, s.depth_overflow);
    if (s.lost_control)
      fmt::format_to(std::back_inserter(summary),
                     "cudatrace: lost {} loader or thread-exit notifications (ring buffer full)\n", s.lost_control);
  }

 private:
  // Hand-formatted: this runs for every traced call, and fmt's format-string
  // parsing and float formatting dominated the reader's time.
  void line_start(const Call& c) {
    const auto& r = *c.rec;
    append_fixed(buf_, r.ts_ns >= start_ns_ ? (r.ts_ns - start_ns_) / 1000 : 0, 6, 12, Align::Left);  // seconds
    buf_.push_back(' ');
    // comm is at most 15 bytes; escape anything that would break the line.
    const std::size_t comm_start = buf_.size();
    for (char ch : c.comm()) {
      const auto u = static_cast<unsigned char>(ch);
      // A backslash is escaped too, so "\x0a" can only mean a newline byte.
      if (u < 0x20 || u == 0x7f || u >= 0x80 || u == '\\') {
        static const char kHex[] = "0123456789abcdef";
        const char escaped[] = {'\\', 'x', kHex[u >> 4], kHex[u & 15]};
        buf_.append(escaped, escaped + 4);
      } else {
        buf_.push_back(ch);
      }
    }
    pad_to(buf_, comm_start + 16);
    buf_.push_back(' ');
    append_right(buf_, fmt::format_int(r.pid).c_str(), 7);
    buf_.push_back(' ');
    append_right(buf_, fmt::format_int(r.tid).c_str(), 7);
    buf_.push_back(' ');
    const std::size_t api_start = buf_.size();
    for (int i = 0; i < 2 * r.depth; ++i) buf_.push_back(' ');
    buf_.append(c.api->symbol);
    pad_to(buf_, api_start + 28);
  }

  void args(const Call& c) {
    for (const NamedValue& a : c.args) {
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
        append_json_string(buf_, c.kernel);
    }
    if (c.waited) append_wait_text(buf_, *c.waited);
    if (c.nccl) append_nccl_text(buf_, *c.nccl);
    buf_.push_back('\n');
    append_stack_text(buf_, c.stack, 4);
  }

  std::uint64_t start_ns_;
};

class JsonOutput final : public Output {
 public:
  void call(const Call& c) override { object(c, "call"); }
  void unfinished(const Call& c) override { object(c, "unfinished"); }

  void warning(const Call& c, const Warning& w) override {
    auto it = std::back_inserter(buf_);
    fmt::format_to(it, "{{\"type\":\"warning\",\"kind\":\"{}\",\"ts_ns\":{},\"pid\":{},\"tid\":{},\"api\":\"{}\","
                   "\"host_ptr\":\"{:#x}\",\"caller\":\"{:#x}\",\"location\":",
                   w.kind, c.rec->ts_ns, c.rec->pid, c.rec->tid, c.api->symbol, w.host_ptr, c.rec->caller);
    append_json_string(buf_, w.location);
    buf_.append(std::string_view(",\"message\":"));
    append_json_string(buf_, w.message);
    buf_.append(std::string_view("}\n"));
  }

  void end(const EndStats& s, Buf&) override {
    fmt::format_to(std::back_inserter(buf_),
                   "{{\"type\":\"end\",\"calls\":{},\"lost\":{},\"unfinished\":{},\"lost_detail\":{{\"ring_buffer\":{},"
                   "\"thread_table\":{},\"depth_overflow\":{},\"control\":{}}},\"unmatched\":{}}}\n",
                   s.calls, s.lost(), s.unfinished, s.lost_ringbuf, s.lost_threads, s.depth_overflow, s.lost_control,
                   s.unmatched);
  }

 private:
  void object(const Call& c, const char* type) {
    const auto& r = *c.rec;
    auto it = std::back_inserter(buf_);
    fmt::format_to(it, "{{\"type\":\"{}\",\"ts_ns\":{},\"pid\":{},\"tid\":{},\"comm\":", type, r.ts_ns, r.pid, r.tid);
    append_json_string(buf_, c.comm());
    fmt::format_to(it, ",\"layer\":\"{}\",\"api\":\"{}\"", layer_name(c.api->layer()), c.api->symbol);
    if (!c.unfinished) {
      fmt::format_to(it, ",\"dur_ns\":{}", r.dur_ns);
      if (c.api->spec->returns == Returns::Status) {
        const char* name = c.ret_name();
        fmt::format_to(it, ",\"ret\":{},\"ret_name\":", static_cast<std::int32_t>(r.ret));
        if (name)
          fmt::format_to(it, "\"{}\"", name);
        else
          buf_.append(std::string_view("null"));
      }
    }
    fmt::format_to(it, ",\"depth\":{}", r.depth);
    if (c.parent) fmt::format_to(it, ",\"parent_api\":\"{}\"", c.parent->symbol);
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
    }
    if (!c.stack.empty()) {
      buf_.append(std::string_view(",\"stack\":"));
      append_stack_json(buf_, c.stack);
    }
    buf_.append(std::string_view("}\n"));
  }
};

}  // namespace

std::unique_ptr<Output> make_text_output(std::uint64_t start_ns) { return std::make_unique<TextOutput>(start_ns); }
std::unique_ptr<Output> make_json_output() { return std::make_unique<JsonOutput>(); }

bool write_all(int fd, fmt::memory_buffer& buf, std::string& error) {
  const char* p = buf.data();
  std::size_t left = buf.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = std::strerror(errno);
      buf.clear();
      return false;
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  buf.clear();
  return true;
}

}  // namespace cudatrace
