#include "cudatrace/streams.h"

#include <algorithm>
#include <iterator>
#include <limits>

#include "cudatrace/json.h"
#include "cudatrace/summary.h"

namespace cudatrace {
namespace {

constexpr std::uint64_t kAll = std::numeric_limits<std::uint64_t>::max();
constexpr std::size_t kKernelsShown = 4;  // per stream in a text line; JSON has all

// Handles as CUDA defines them: 0 is the default stream (per-thread in the
// _ptsz/_ptds forms), 1 cudaStreamLegacy / CU_STREAM_LEGACY, 2
// cudaStreamPerThread / CU_STREAM_PER_THREAD.
constexpr std::uint64_t kLegacyStream = 1, kPerThreadStream = 2;

CopyDirection queued_copy_direction(const Call& c) {
  if (auto kind = arg_value(c, ArgType::MemcpyKind)) {
    switch (*kind) {
      case 0:
        return CopyDirection::HostToHost;
      case 1:
        return CopyDirection::HostToDevice;
      case 2:
        return CopyDirection::DeviceToHost;
      case 3:
        return CopyDirection::DeviceToDevice;
      default:
        return CopyDirection::Unknown;
    }
  }
  const std::string_view name = c.api->spec->name;
  if (name.find("HtoD") != name.npos) return CopyDirection::HostToDevice;
  if (name.find("DtoH") != name.npos) return CopyDirection::DeviceToHost;
  if (name.find("DtoD") != name.npos) return CopyDirection::DeviceToDevice;
  if (name.find("Peer") != name.npos) return CopyDirection::Peer;
  return CopyDirection::Unknown;
}

bool succeeded(const Call& c) {
  return !c.unfinished && (c.api->spec->returns == Returns::Void || static_cast<std::int32_t>(c.rec->ret) == 0);
}

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
    out.push_back(')');
    sep = ", ";
  }
  for (int d = 0; d < kCopyDirections; ++d) {
    const StreamWork::Bytes& b = w.copies[d];
    if (!b.count) continue;
    fmt::format_to(it, "{}{} cop{} {} {}", sep, b.count, b.count == 1 ? "y" : "ies",
                   copy_direction_name(static_cast<CopyDirection>(d)), format_bytes(b.bytes));
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
  out.append(std::string_view("],\"copies\":{"));
  const char* sep = "";
  for (int d = 0; d < kCopyDirections; ++d) {
    const StreamWork::Bytes& b = w.copies[d];
    if (!b.count) continue;
    fmt::format_to(it, "{}\"{}\":{{\"count\":{},\"bytes\":{}}}", sep, copy_direction_name(static_cast<CopyDirection>(d)),
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

}  // namespace

const char* copy_direction_name(CopyDirection d) {
  static const char* const kNames[kCopyDirections] = {"H2D", "D2H", "D2D", "H2H", "P2P", "any"};
  return kNames[static_cast<int>(d)];
}

std::string format_bytes(std::uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = bytes / 1024.0;
  int unit = 0;
  while (v >= 1024 && unit < 3) {
    v /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {}", v, kUnits[unit]);
}

bool StreamWork::empty() const {
  if (launches || memsets.count) return false;
  for (const Bytes& b : copies)
    if (b.count) return false;
  return true;
}

void append_wait_text(fmt::memory_buffer& out, const WaitInfo& w) {
  switch (w.kind) {
    case WaitInfo::Kind::Stream:
    case WaitInfo::Kind::Device:
      out.append(std::string_view(" waited: "));
      append_work_list_text(out, w.work);
      return;
    case WaitInfo::Kind::Event:
    case WaitInfo::Kind::StreamWaitEvent:
      out.append(std::string_view(w.kind == WaitInfo::Kind::Event ? " waited: " : " waits: "));
      out.append(w.target);
      if (w.recorded_on.empty()) {
        out.append(std::string_view(" (never recorded)"));
        return;
      }
      fmt::format_to(std::back_inserter(out), " (recorded on {}) for ", w.recorded_on);
      append_work_list_text(out, w.work);
  }
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
  out.append(std::string_view(",\"work\":["));
  for (std::size_t i = 0; i < w.work.size(); ++i) {
    if (i) out.push_back(',');
    append_work_json(out, w.work[i]);
  }
  out.append(std::string_view("]}"));
}

// ---- StreamTracker ----------------------------------------------------------

struct StreamTracker::Gathering {
  std::vector<std::pair<Stream*, StreamWork>> work;   // in the order streams were reached
  std::unordered_map<Stream*, std::uint64_t> upto;    // each stream's work is gathered up to this seq

  StreamWork& entry(Stream* s) {
    for (auto& w : work)
      if (w.first == s) return w.second;
    work.emplace_back(s, StreamWork{});
    work.back().second.stream = s->id;
    return work.back().second;
  }
};

std::unique_ptr<StreamTracker::Stream> StreamTracker::new_stream(Process& p, std::string id) {
  auto s = std::make_unique<Stream>();
  s->id = std::move(id);
  s->lane = p.next_lane++;
  p.order.push_back(s.get());
  return s;
}

StreamTracker::Stream* StreamTracker::stream_for(Process& p, const Call& c, std::uint64_t handle, bool assign) {
  const bool per_thread = handle == kPerThreadStream || (handle == 0 && c.api->variant);
  if (per_thread) {
    auto& s = p.per_thread[c.rec->tid];
    if (!s) {
      s = new_stream(p, "per-thread");
      s->lane_name = fmt::format("stream per-thread (tid {})", c.rec->tid);
    }
    return s.get();
  }
  if (handle == 0 || handle == kLegacyStream) {
    if (!p.legacy) {
      p.legacy = new_stream(p, "default");
      p.legacy->lane_name = "stream default";
    }
    return p.legacy.get();
  }
  auto it = p.streams.find(handle);
  if (it != p.streams.end()) return it->second.get();
  if (!assign) return nullptr;
  return created_stream(p, handle);
}

StreamTracker::Stream* StreamTracker::created_stream(Process& p, std::uint64_t handle) {
  auto& s = p.streams[handle];
  if (s && !s->destroyed) return s.get();
  const std::string id = fmt::format("s{}", p.next_stream++);
  if (s) {  // the handle of a destroyed stream, reused for a new one
    s->id = id;
    s->lane = p.next_lane++;
    s->destroyed = false;
    s->pending.clear();
  } else {
    s = new_stream(p, id);
  }
  s->lane_name = "stream " + id;
  return s.get();
}

StreamTracker::Event* StreamTracker::event_for(Process& p, std::uint64_t handle, bool assign, bool created) {
  auto it = p.events.find(handle);
  if (it != p.events.end() && !(created && it->second.destroyed)) return &it->second;
  if (!assign && !created) return nullptr;
  Event& e = p.events[handle];
  e = Event{};
  e.id = fmt::format("e{}", p.next_event++);
  return &e;
}

void StreamTracker::annotate(Process& p, Call& c, bool outermost) {
  // A driver create inside a runtime create makes the same stream; one inside
  // anything else (the runtime's own set-up) is not the program's.
  const bool creates = outermost || c.parent->effect() == c.api->effect();
  for (NamedValue& a : c.args) {
    const auto raw = integer_value(a.value);
    if (!raw) continue;
    switch (a.type) {
      case ArgType::Stream:
        if (Stream* s = stream_for(p, c, *raw, outermost)) a.id = s->id;
        break;
      case ArgType::OutStream:
        if (c.api->effect() == Effect::StreamCreate && creates) a.id = created_stream(p, *raw)->id;
        break;
      case ArgType::Event:  // a null event is no event
        if (Event* e = *raw ? event_for(p, *raw, outermost, false) : nullptr) a.id = e->id;
        break;
      case ArgType::OutEvent:
        if (c.api->effect() == Effect::EventCreate && creates) a.id = event_for(p, *raw, true, true)->id;
        break;
      default:
        break;
    }
  }
}

void StreamTracker::gather(Stream& s, std::uint64_t until, Gathering& g) {
  std::uint64_t& upto = g.upto[&s];
  const std::uint64_t from = upto;
  if (until <= from) return;
  upto = until;
  for (const Entry& e : s.pending) {
    if (e.seq <= from) continue;
    if (e.seq > until) break;
    if (e.kind == Entry::Kind::Wait) {
      gather(*e.waits_on, e.waits_until, g);
      continue;
    }
    StreamWork& w = g.entry(&s);
    if (e.kind == Entry::Kind::Launch) {
      ++w.launches;
      auto k = std::find_if(w.kernels.begin(), w.kernels.end(), [&](const auto& kc) { return kc.name == e.kernel; });
      if (k == w.kernels.end())
        w.kernels.push_back({e.kernel, e.kernel_short, 1});
      else
        ++k->count;
    } else {
      StreamWork::Bytes& b = e.kind == Entry::Kind::Copy ? w.copies[static_cast<int>(e.direction)] : w.memsets;
      ++b.count;
      b.bytes += e.bytes;
    }
  }
}

void StreamTracker::settle(Gathering& g) {
  for (auto& [s, until] : g.upto)
    while (!s->pending.empty() && s->pending.front().seq <= until) s->pending.pop_front();
}

void StreamTracker::finish_wait(Gathering& g, WaitInfo::Kind kind, std::string target, std::string recorded_on,
                                bool erase) {
  if (erase) settle(g);
  wait_.kind = kind;
  wait_.target = std::move(target);
  wait_.recorded_on = std::move(recorded_on);
  wait_.work.clear();
  for (auto& [s, w] : g.work)
    if (!w.empty()) wait_.work.push_back(std::move(w));
}

void StreamTracker::queue(Process& p, Stream& s, Entry e, std::string label) {
  e.seq = ++p.seq;
  s.pending.push_back(std::move(e));
  activity_.queued = StreamActivity::Queued{s.id, s.lane, s.lane_name, std::move(label)};
}

void StreamTracker::apply(Process& p, Call& c) {
  const NamedValue* stream_arg = arg_of_type(c, ArgType::Stream);
  auto call_stream = [&]() -> Stream& {
    return *stream_for(p, c, stream_arg ? integer_value(stream_arg->value).value_or(0) : 0, true);
  };
  auto call_event = [&]() -> Event* {
    const auto handle = arg_value(c, ArgType::Event);
    return handle && *handle ? event_for(p, *handle, true, false) : nullptr;
  };
  auto consumed = [&](const Event& e) {
    activity_.consumed = StreamActivity::Consumed{next_flow_++, e.id, e.tid, e.ts_ns, e.dur_ns};
  };
  switch (c.api->effect()) {
    case Effect::Launch: {
      Entry e{0, Entry::Kind::Launch};
      e.kernel = c.kernel.empty() ? std::string("graph") : std::string(c.kernel);
      e.kernel_short = c.kernel.empty() ? std::string("graph") : std::string(c.kernel_short);
      const std::string label = e.kernel_short;
      queue(p, call_stream(), std::move(e), label);
      break;
    }
    case Effect::Copy:
    case Effect::Memset: {
      const bool copy = c.api->effect() == Effect::Copy;
      Entry e{0, copy ? Entry::Kind::Copy : Entry::Kind::Memset};
      e.direction = copy ? queued_copy_direction(c) : CopyDirection::Unknown;
      e.bytes = transfer_bytes(c);
      const std::string label = copy ? fmt::format("copy {} {}", copy_direction_name(e.direction), format_bytes(e.bytes))
                                     : fmt::format("memset {}", format_bytes(e.bytes));
      Stream& s = call_stream();
      const CopyDirection dir = e.direction;
      queue(p, s, std::move(e), label);
      if (copy && !stream_arg) {
        // A synchronous copy returns once it (and all earlier work on its stream) is done.
        Gathering g;
        gather(s, kAll, g);
        settle(g);
      }
      if (copy && stream_arg && (dir == CopyDirection::HostToDevice || dir == CopyDirection::DeviceToHost)) {
        // cudaMemcpyAsync(dst, src, ...): the host side is src for H2D, dst for D2H.
        const auto host = arg_value(c, ArgType::Ptr, dir == CopyDirection::HostToDevice ? 1 : 0);
        if (host && *host && !page_locked_.contains(c.rec->pid, *host, 1) && p.warned_sites.emplace(c.api->id, c.rec->caller).second)
          activity_.pageable_host_ptr = *host;
      }
      break;
    }
    case Effect::EventRecord:
      if (Event* e = call_event()) {
        e->stream = &call_stream();
        e->seq = p.seq;
        e->tid = c.rec->tid;
        e->ts_ns = c.rec->ts_ns;
        e->dur_ns = c.rec->dur_ns;
      }
      break;
    case Effect::StreamWaitEvent:
    case Effect::EventSync:
    case Effect::EventQuery: {
      Event* e = call_event();
      if (!e) break;
      const bool host_waits = c.api->effect() != Effect::StreamWaitEvent;
      const auto kind = host_waits ? WaitInfo::Kind::Event : WaitInfo::Kind::StreamWaitEvent;
      Gathering g;
      if (e->stream) {
        g.entry(e->stream);  // listed first
        gather(*e->stream, e->seq, g);
        if (!host_waits) {
          Entry w{0, Entry::Kind::Wait};
          w.waits_on = e->stream;
          w.waits_until = e->seq;
          w.seq = ++p.seq;
          call_stream().pending.push_back(std::move(w));
        }
      }
      finish_wait(g, kind, e->id, e->stream ? e->stream->id : std::string(), host_waits);
      // A query that returned success only tells that the work is done.
      if (c.api->effect() == Effect::EventQuery) break;
      if (e->stream) consumed(*e);
      c.waited = &wait_;
      break;
    }
    case Effect::StreamSync:
    case Effect::StreamQuery: {
      Stream& s = call_stream();
      Gathering g;
      g.entry(&s);
      gather(s, kAll, g);
      finish_wait(g, WaitInfo::Kind::Stream, s.id, {}, true);
      if (c.api->effect() == Effect::StreamSync) c.waited = &wait_;
      break;
    }
    case Effect::DeviceSync: {
      Gathering g;
      for (Stream* s : p.order) gather(*s, kAll, g);
      finish_wait(g, WaitInfo::Kind::Device, {}, {}, true);
      c.waited = &wait_;
      break;
    }
    case Effect::StreamDestroy:
      call_stream().destroyed = true;
      break;
    case Effect::EventDestroy:
      if (Event* e = call_event()) e->destroyed = true;
      break;
    default:
      break;
  }
  page_locked_.on_call(c);
}

const StreamActivity& StreamTracker::on_call(Call& c) {
  activity_ = StreamActivity{};
  Process& p = procs_[c.rec->pid];
  const bool outermost = c.parent == nullptr;
  annotate(p, c, outermost);
  if (outermost && succeeded(c)) apply(p, c);
  return activity_;
}

}  // namespace cudatrace
