// How the analyses' annotations on a call are written, in text lines and in
// JSON records alike: what a synchronisation waited for, NVTX ranges, NCCL
// fields, user stacks. Every output format takes them from here.
#include "cudatrace/render/annotations.h"

#include <iterator>

#include "cudatrace/render/format.h"
#include "cudatrace/render/json.h"
#include "cudatrace/target/stacks.h"

namespace cudatrace {
namespace {

using Buf = fmt::memory_buffer;

constexpr std::size_t kKernelsShown = 4;  // per stream in a text line; JSON has all

void append_work_text(fmt::memory_buffer& out, const StreamWork& w) {
  auto it = std::back_inserter(out);
  fmt::format_to(it, "{}:", w.stream);
  const char* sep = " ";
  if (w.launches) {
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
  if (w.memsets.count)
    fmt::format_to(it, "{}{} memset{} {}", sep, w.memsets.count, w.memsets.count == 1 ? "" : "s",
                   format_bytes(w.memsets.bytes));
}

void append_work_json(fmt::memory_buffer& out, const StreamWork& w) {
  auto it = std::back_inserter(out);
  fmt::format_to(it, "{{\"stream\":\"{}\",\"launches\":{},\"kernels\":[", w.stream, w.launches);
  for (std::size_t i = 0; i < w.kernels.size(); ++i) {
    out.append(std::string_view(i ? ",{\"kernel\":" : "{\"kernel\":"));
    append_json_string(out, w.kernels[i].name);
    fmt::format_to(it, ",\"count\":{}}}", w.kernels[i].count);
  }
  out.push_back(']');
  if (w.unlisted_launches) fmt::format_to(it, ",\"unlisted_launches\":{}", w.unlisted_launches);
  out.append(std::string_view(",\"copies\":{"));
  const char* sep = "";
  for (int d = 0; d < kCopyDirections; ++d) {
    const StreamWork::Bytes& b = w.copies[d];
    if (!b.count) continue;
    fmt::format_to(it, "{}\"{}\":{{\"count\":{},\"bytes\":{}}}", sep, direction_name(static_cast<Direction>(d)),
                   b.count, b.bytes);
    sep = ",";
  }
  fmt::format_to(it, "}},\"memsets\":{{\"count\":{},\"bytes\":{}}}}}", w.memsets.count, w.memsets.bytes);
}

void append_work_list_text(fmt::memory_buffer& out, const std::vector<StreamWork>& work) {
  if (work.empty()) out.append(std::string_view("nothing"));
  for (std::size_t i = 0; i < work.size(); ++i) {
    if (i) out.append(std::string_view("; "));
    append_work_text(out, work[i]);
  }
}

void append_messages(fmt::memory_buffer& out, const char* key, const std::vector<NvtxRange>& ranges) {
  out.append(std::string_view(key));
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    out.push_back(i ? ',' : '[');
    append_json_string(out, ranges[i].message);
  }
  out.push_back(']');
}

// The per-call fields are formatted by hand, like the rest of a trace line (output.cpp).
template <typename Int>
void append_number(Buf& out, Int v) {
  const fmt::format_int text(v);
  out.append(text.data(), text.data() + text.size());
}

// 16 lower-case hex digits, as nccl_id_text.
void append_id(Buf& out, std::uint64_t id) {
  static const char kHex[] = "0123456789abcdef";
  char text[16];
  for (int i = 15; i >= 0; --i, id >>= 4) text[i] = kHex[id & 15];
  out.append(text, text + sizeof text);
}

}  // namespace

void append_wait_description(fmt::memory_buffer& out, const WaitInfo& w) {
  if (w.kind == WaitInfo::Kind::Event || w.kind == WaitInfo::Kind::StreamWaitEvent) {
    out.append(w.target);
    if (w.recorded_on.empty()) {
      out.append(std::string_view(" (never recorded)"));
      return;
    }
    fmt::format_to(std::back_inserter(out), " (recorded on {}) for ", w.recorded_on);
  }
  append_work_list_text(out, w.work);
  if (w.approximate) out.append(std::string_view(" (approximate: older queued work summarised together)"));
}

void append_wait_text(fmt::memory_buffer& out, const WaitInfo& w) {
  out.append(std::string_view(w.kind == WaitInfo::Kind::StreamWaitEvent ? " waits: " : " waited: "));
  append_wait_description(out, w);
}

void append_wait_json(fmt::memory_buffer& out, const WaitInfo& w) {
  auto it = std::back_inserter(out);
  switch (w.kind) {
    case WaitInfo::Kind::Stream:
      fmt::format_to(it, ",\"waited_for\":{{\"kind\":\"stream\",\"stream\":\"{}\"", w.target);
      break;
    case WaitInfo::Kind::Device:
      out.append(std::string_view(",\"waited_for\":{\"kind\":\"device\""));
      break;
    case WaitInfo::Kind::Event:
    case WaitInfo::Kind::StreamWaitEvent:
      fmt::format_to(it, ",\"waited_for\":{{\"kind\":\"{}\",\"event\":\"{}\",\"recorded_on\":",
                     w.kind == WaitInfo::Kind::Event ? "event" : "stream_wait_event", w.target);
      if (w.recorded_on.empty())
        out.append(std::string_view("null"));
      else
        fmt::format_to(it, "\"{}\"", w.recorded_on);
  }
  if (w.approximate) out.append(std::string_view(",\"approximate\":true"));
  out.append(std::string_view(",\"work\":["));
  for (std::size_t i = 0; i < w.work.size(); ++i) {
    if (i) out.push_back(',');
    append_work_json(out, w.work[i]);
  }
  out.append(std::string_view("]}"));
}

void append_nvtx_json(fmt::memory_buffer& out, const Call& c) {
  if (c.nvtx) append_messages(out, ",\"nvtx\":", *c.nvtx);
  if (c.nvtx_process) append_messages(out, ",\"nvtx_process\":", *c.nvtx_process);
}

void append_nvtx_text(fmt::memory_buffer& out, const Call& c) {
  if (!c.nvtx) return;
  fmt::format_to(std::back_inserter(out), " nvtx[{}]=", c.nvtx->size());
  append_json_string(out, c.nvtx->back().message);
}

void append_nccl_text(Buf& out, const NcclInfo& n) {
  if (n.has_comm) {
    out.append(std::string_view(" comm_id="));
    append_id(out, n.comm_id);
    out.append(std::string_view(" rank="));
    if (n.rank >= 0)
      append_number(out, n.rank);
    else
      out.push_back('?');
    out.push_back('/');
    if (n.nranks >= 0)
      append_number(out, n.nranks);
    else
      out.push_back('?');
  }
  if (n.has_seq) {
    out.append(std::string_view(" seq="));
    append_number(out, n.seq);
  }
  if (n.has_bytes) {
    out.append(std::string_view(" bytes="));
    append_number(out, n.bytes);
  }
  if (n.in_group) out.append(std::string_view(" [group]"));
}

void append_nccl_json(Buf& out, const NcclInfo& n) {
  out.append(std::string_view(",\"nccl\":{\"comm_id\":"));
  if (n.has_comm) {
    out.push_back('"');
    append_id(out, n.comm_id);
    out.push_back('"');
  } else {
    out.append(std::string_view("null"));
  }
  const auto number = [&](std::string_view key, bool known, auto v) {
    out.append(key);
    if (known)
      append_number(out, v);
    else
      out.append(std::string_view("null"));
  };
  number(",\"rank\":", n.rank >= 0, n.rank);
  number(",\"nranks\":", n.nranks >= 0, n.nranks);
  number(",\"seq\":", n.has_seq, n.seq);
  out.append(n.in_group ? std::string_view(",\"in_group\":true") : std::string_view(",\"in_group\":false"));
  number(",\"bytes\":", n.has_bytes, n.bytes);
  out.push_back('}');
}

void append_stack_text(fmt::memory_buffer& out, const std::vector<StackFrame>& stack, int indent) {
  for (std::size_t i = 0; i < stack.size(); ++i)
    fmt::format_to(std::back_inserter(out), "{:{}}#{:<2} {:#018x} {}\n", "", indent, i, stack[i].addr,
                   terminal_safe(frame_text(stack[i])));
}

void append_stack_json(fmt::memory_buffer& out, const std::vector<StackFrame>& stack) {
  auto it = std::back_inserter(out);
  out.push_back('[');
  for (std::size_t i = 0; i < stack.size(); ++i) {
    const StackFrame& f = stack[i];
    if (i) out.push_back(',');
    fmt::format_to(it, "{{\"addr\":\"{:#x}\",\"function\":", f.addr);
    if (f.function.empty()) {
      out.append(std::string_view("null,\"function_offset\":null"));
    } else {
      append_json_string(out, f.function);
      fmt::format_to(it, ",\"function_offset\":{}", f.function_offset);
    }
    out.append(std::string_view(",\"module\":"));
    if (f.module.empty()) {
      out.append(std::string_view("null,\"module_offset\":null"));
    } else {
      append_json_string(out, f.module);
      fmt::format_to(it, ",\"module_offset\":{}", f.module_offset);
    }
    out.push_back('}');
  }
  out.push_back(']');
}

}  // namespace cudatrace
