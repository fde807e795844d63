// The stream model (streams.h). Over 400 lines because it is one state
// machine: queueing, event records, waits and their settling share the
// per-process state and are read together. Capture and graphs are in
// streams_graphs.cpp.
#include "cudatrace/analysis/streams.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <limits>

#include "cudatrace/decode/arg_types.h"
#include "cudatrace/decode/facet.h"
#include "cudatrace/decode/transfer.h"

namespace cudatrace {
namespace {

constexpr std::uint64_t kAll = std::numeric_limits<std::uint64_t>::max();

// Handles as CUDA defines them: 0 is the default stream (per-thread in the
// _ptsz/_ptds forms), 1 cudaStreamLegacy / CU_STREAM_LEGACY, 2
// cudaStreamPerThread / CU_STREAM_PER_THREAD.
constexpr std::uint64_t kLegacyStream = 1, kPerThreadStream = 2;

}  // namespace

void StreamWork::add_launch(std::string_view kernel, std::string_view short_name, std::uint32_t count) {
  launches += count;
  auto k = std::find_if(kernels.begin(), kernels.end(), [&](const Kernel& kc) { return kc.name == kernel; });
  if (k != kernels.end())
    k->count += count;
  else if (kernels.size() < kMaxKernels)
    kernels.push_back({std::string(kernel), std::string(short_name), count});
  else
    unlisted_launches += count;
}

void StreamWork::add(const StreamWork& other) {
  for (const Kernel& k : other.kernels) add_launch(k.name, k.short_name, k.count);
  launches += other.unlisted_launches;
  unlisted_launches += other.unlisted_launches;
  for (int d = 0; d < kCopyDirections; ++d) {
    copies[d].count += other.copies[d].count;
    copies[d].bytes += other.copies[d].bytes;
  }
  memsets.count += other.memsets.count;
  memsets.bytes += other.memsets.bytes;
  host_functions += other.host_functions;
}

bool StreamWork::empty() const {
  if (launches || memsets.count || host_functions) return false;
  for (const Bytes& b : copies)
    if (b.count) return false;
  return true;
}



// ---- StreamTracker ----------------------------------------------------------

struct StreamTracker::Gathering {
  std::vector<std::pair<Stream*, StreamWork>> work;   // in the order streams were reached
  std::unordered_map<Stream*, std::uint64_t> upto;    // each stream's work is gathered up to this seq
  bool approximate = false;

  StreamWork& entry(Stream* s) {
    for (auto& w : work)
      if (w.first == s) return w.second;
    work.emplace_back(s, StreamWork{});
    work.back().second.stream = s->id;
    return work.back().second;
  }
};

StreamTracker::Stream& StreamTracker::new_stream(Process& p, std::string id) {
  auto s = std::make_unique<Stream>();
  s->id = std::move(id);
  s->lane = p.next_lane++;
  Stream& ref = *s;
  p.lanes.emplace(ref.lane, std::move(s));
  return ref;
}

StreamTracker::Stream* StreamTracker::lane(Process& p, std::uint32_t lane) {
  auto it = p.lanes.find(lane);
  return it == p.lanes.end() ? nullptr : it->second.get();
}

StreamTracker::Stream* StreamTracker::stream_for(Process& p, const Call& c, std::uint64_t handle, bool assign) {
  const bool per_thread = handle == kPerThreadStream || (handle == 0 && c.api->variant);
  if (per_thread) {
    const std::uint32_t tid = c.tid;
    if (auto it = p.per_thread.find(tid); it != p.per_thread.end()) return lane(p, it->second);
    Stream& s = new_stream(p, "per-thread");
    s.tid = tid;
    p.per_thread.emplace(tid, s.lane);
    return &s;
  }
  if (handle == 0 || handle == kLegacyStream) {
    if (!p.legacy) p.legacy = new_stream(p, "default").lane + 1;
    return lane(p, p.legacy - 1);
  }
  if (auto it = p.streams.find(handle); it != p.streams.end()) return lane(p, it->second);
  if (!assign) return nullptr;
  return created_stream(p, handle);
}

StreamTracker::Stream* StreamTracker::created_stream(Process& p, std::uint64_t handle) {
  if (auto it = p.streams.find(handle); it != p.streams.end()) {
    Stream* old = lane(p, it->second);
    if (!old->destroyed) return old;
    old->handle = 0;  // the handle of a destroyed stream, reused for a new one; the old one's work may be queued still
    p.streams.erase(it);
  }
  Stream& s = new_stream(p, fmt::format("s{}", p.next_stream++));
  s.handle = handle;
  p.streams.emplace(handle, s.lane);
  limit_handles(p);
  return &s;
}

void StreamTracker::drop_stream_if_done(Process& p, Stream& s) {
  if (!s.destroyed || !s.pending.empty()) return;
  if (s.handle) p.streams.erase(s.handle);
  p.lanes.erase(s.lane);
}

void StreamTracker::limit_handles(Process& p) {
  // The oldest created streams and events go first: a program that never
  // destroys what it creates mostly uses its recent ones.
  for (auto it = p.lanes.begin(); p.streams.size() > kMaxHandles && it != p.lanes.end();) {
    Stream& s = *it->second;
    if (!s.handle) {
      ++it;
      continue;
    }
    p.streams.erase(s.handle);
    it = p.lanes.erase(it);
    ++forgotten_.streams;
  }
  while (p.events.size() > kMaxHandles) {
    auto oldest = p.event_order.begin();
    p.events.erase(oldest->second);
    p.event_order.erase(oldest);
    ++forgotten_.events;
  }
}

StreamTracker::Event* StreamTracker::event_for(Process& p, std::uint64_t handle, bool assign, bool created) {
  auto it = p.events.find(handle);
  if (it != p.events.end()) return &it->second;  // (a driver create inside a runtime create: the same event)
  if (!assign && !created) return nullptr;
  Event& e = p.events[handle];
  e.number = p.next_event++;
  e.id = fmt::format("e{}", e.number);
  p.event_order.emplace(e.number, handle);
  limit_handles(p);
  return &e;
}

void StreamTracker::annotate(Process& p, Call& c, bool outermost) {
  // A driver create inside a runtime create makes the same stream; one inside
  // anything else (the runtime's own set-up) is not the program's.
  const bool creates = outermost || (c.parent && c.parent->effect() == c.api->effect());
  for (NamedValue& a : c.args) {
    const ArgTypeFacts& facts = arg_facts(a.type);
    const auto raw = integer_value(a.value);
    if (!raw) continue;
    if (facts.handle_of == HandleOf::Stream) {
      if (!facts.out_bytes) {
        if (Stream* s = stream_for(p, c, *raw, outermost)) a.id = s->id;
      } else if (c.api->effect() == Effect::StreamCreate && creates) {
        a.id = created_stream(p, *raw)->id;
      }
    } else if (facts.handle_of == HandleOf::Event) {
      if (!facts.out_bytes) {
        if (Event* e = *raw ? event_for(p, *raw, outermost, false) : nullptr) a.id = e->id;  // a null event is no event
      } else if (c.api->effect() == Effect::EventCreate && creates) {
        a.id = event_for(p, *raw, true, true)->id;
      }
    }
  }
}

void StreamTracker::gather(Process& p, Stream& s, std::uint64_t until, Gathering& g) {
  std::uint64_t& upto = g.upto[&s];
  const std::uint64_t from = upto;
  if (until <= from) return;
  upto = until;
  for (const Segment& seg : s.pending) {
    if (seg.last_seq <= from) continue;
    if (seg.first_seq > until) break;
    if (seg.last_seq > until) {
      // Only a merged segment straddles a point: take all of it, and say so.
      g.approximate = true;
      upto = seg.last_seq;
    }
    if (seg.is_wait) {
      if (Stream* other = lane(p, seg.waits_on)) gather(p, *other, seg.waits_until, g);
      continue;
    }
    g.entry(&s).add(seg.work);
  }
}

void StreamTracker::settle(Process& p, Gathering& g) {
  for (auto& [s, until] : g.upto) {
    auto done = s->pending.begin();
    while (done != s->pending.end() && done->last_seq <= until) ++done;
    s->pending.erase(s->pending.begin(), done);
    drop_stream_if_done(p, *s);
  }
}

void StreamTracker::finish_wait(Process& p, Gathering& g, WaitInfo::Kind kind, std::string target,
                                std::string recorded_on, bool erase) {
  wait_.kind = kind;
  wait_.target = std::move(target);
  wait_.recorded_on = std::move(recorded_on);
  wait_.approximate = g.approximate;
  wait_.work.clear();
  for (auto& [s, w] : g.work)
    if (!w.empty()) wait_.work.push_back(std::move(w));
  if (erase) settle(p, g);
}

StreamTracker::Segment& StreamTracker::open_segment(Process& p, Stream& s, bool wait) {
  if (!wait && !s.sealed && !s.pending.empty() && !s.pending.back().is_wait) return s.pending.back();
  if (s.pending.size() >= kMaxSegments) {
    // Merge the oldest two neighbouring work segments (or, with none, drop
    // the oldest wait): bounded memory, at the price of exact split points.
    auto& q = s.pending;
    std::size_t i = 0;
    while (i + 1 < q.size() && (q[i].is_wait || q[i + 1].is_wait)) ++i;
    if (i + 1 < q.size()) {
      q[i].work.add(q[i + 1].work);
      q[i].last_seq = q[i + 1].last_seq;
      q[i].merged = true;
      q.erase(q.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    } else {
      q.erase(std::find_if(q.begin(), q.end(), [](const Segment& seg) { return seg.is_wait; }));
    }
    ++forgotten_.merged_segments;
  }
  s.pending.emplace_back();
  Segment& seg = s.pending.back();
  seg.is_wait = wait;
  seg.first_seq = p.seq + 1;
  s.sealed = wait;
  return seg;
}

void StreamTracker::queue(Stream& s, const StreamActivity::Queued& what) {
  if (s.lane_name.empty())  // made once: every launch and copy is queued
    s.lane_name = s.tid ? fmt::format("stream per-thread (tid {})", s.tid) : "stream " + s.id;
  lane_name_ = s.lane_name;
  activity_.queued = what;
  activity_.queued->stream = s.id;
  activity_.queued->lane = s.lane;
  activity_.queued->lane_name = lane_name_;
}

// The stream a call names (its Stream argument; none: the default stream).
StreamTracker::Stream& StreamTracker::stream_of_call(Process& p, const Call& c) {
  const NamedValue* stream_arg = role_arg(c, Role::Stream);
  return *stream_for(p, c, stream_arg ? integer_value(stream_arg->value).value_or(0) : 0, true);
}

// The event a call names, or nullptr.
StreamTracker::Event* StreamTracker::event_of_call(Process& p, const Call& c) {
  const auto handle = role_value(c, Role::Event);
  return handle && *handle ? event_for(p, *handle, true, false) : nullptr;
}

void StreamTracker::apply(Process& p, Call& c) {
  const bool has_stream = role_arg(c, Role::Stream);  // an asynchronous copy, not a synchronous one
  auto call_stream = [&]() -> Stream& { return stream_of_call(p, c); };
  auto call_event = [&] { return event_of_call(p, c); };
  auto consumed = [&](const Event& e) {
    activity_.consumed = StreamActivity::Consumed{next_flow_++, e.id, e.tid, e.ts_ns, e.dur_ns};
  };
  switch (c.api->effect()) {
    case Effect::Launch: {
      const std::string_view kernel = c.kernel.empty() ? std::string_view("graph") : c.kernel;
      const std::string_view short_name = c.kernel.empty() ? std::string_view("graph") : c.kernel_short;
      Stream& s = call_stream();
      Segment& seg = open_segment(p, s, false);
      if (c.graph && c.graph->known)  // its kernels run when the graph runs
        seg.work.add(c.graph->work);
      else
        seg.work.add_launch(kernel, short_name);
      seg.last_seq = ++p.seq;
      queue(s, {{}, 0, {}, Effect::Launch, short_name});
      break;
    }
    case Effect::HostFunc: {
      Stream& s = call_stream();
      Segment& seg = open_segment(p, s, false);
      ++seg.work.host_functions;
      seg.last_seq = ++p.seq;
      queue(s, {{}, 0, {}, Effect::HostFunc});
      break;
    }
    case Effect::Copy:
    case Effect::Memset: {
      const bool copy = c.api->effect() == Effect::Copy;
      const Direction dir = copy_direction(c);
      const std::uint64_t bytes = role_bytes(c);
      Stream& s = call_stream();
      Segment& seg = open_segment(p, s, false);
      StreamWork::Bytes& b = copy ? seg.work.copies[static_cast<int>(dir)] : seg.work.memsets;
      ++b.count;
      b.bytes += bytes;
      seg.last_seq = ++p.seq;
      queue(s, {{}, 0, {}, c.api->effect(), {}, dir, bytes});
      if (copy && has_stream && (dir == Direction::HtoD || dir == Direction::DtoH)) {
        // cudaMemcpyAsync(dst, src, ...): the host side is src for HtoD, dst for DtoH.
        const auto host = role_value(c, dir == Direction::HtoD ? Role::Source : Role::Destination);
        if (host && *host && !page_locked_.contains(c.pid, *host, 1)) {
          if (p.warned_sites.size() >= kMaxWarnedSites) p.warned_sites.clear();  // a site may warn again
          // Where the call's facets say it was made is a site of its own (a Python line:
          // its copies all come from one native caller).
          std::uint64_t site = c.caller;
          for (const Facet* f : call_facets())
            if (f->present(c))
              if (const std::string at = f->call_site(c); !at.empty()) site ^= std::hash<std::string>{}(at);
          if (p.warned_sites.emplace(c.api->id, site).second) activity_.pageable_host_ptr = *host;
        }
      }
      if (copy && !has_stream) {
        // A synchronous copy returns once it (and all earlier work on its stream) is done.
        Gathering g;
        gather(p, s, kAll, g);
        settle(p, g);
      }
      break;
    }
    case Effect::EventRecord:
      if (Event* e = call_event()) {
        Stream& s = call_stream();
        e->recorded = true;
        e->lane = s.lane;
        e->recorded_on = s.id;
        e->seq = p.seq;
        e->tid = c.tid;
        e->ts_ns = c.ts_ns;
        e->dur_ns = c.dur_ns;
        s.sealed = true;  // later work is not part of what the record captured
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
      if (e->recorded) {
        if (Stream* recorded = lane(p, e->lane)) {
          g.entry(recorded);  // listed first
          gather(p, *recorded, e->seq, g);
        }
        if (!host_waits) {
          Segment& w = open_segment(p, call_stream(), true);
          w.waits_on = e->lane;
          w.waits_until = e->seq;
          w.last_seq = ++p.seq;
        }
      }
      finish_wait(p, g, kind, e->id, e->recorded ? e->recorded_on : std::string(), host_waits);
      // A query that returned success only tells that the work is done.
      if (c.api->effect() == Effect::EventQuery) break;
      if (e->recorded) consumed(*e);
      c.waited = &wait_;
      break;
    }
    case Effect::StreamSync:
    case Effect::StreamQuery: {
      Stream& s = call_stream();
      Gathering g;
      g.entry(&s);
      gather(p, s, kAll, g);
      finish_wait(p, g, WaitInfo::Kind::Stream, s.id, {}, true);
      if (c.api->effect() == Effect::StreamSync) c.waited = &wait_;
      break;
    }
    case Effect::DeviceSync: {
      Gathering g;
      for (auto& [lane_number, s] : p.lanes) gather(p, *s, kAll, g);
      finish_wait(p, g, WaitInfo::Kind::Device, {}, {}, true);
      c.waited = &wait_;
      break;
    }
    case Effect::StreamDestroy: {
      Stream& s = call_stream();
      s.destroyed = true;
      drop_stream_if_done(p, s);
      break;
    }
    case Effect::EventDestroy:
      if (const auto handle = role_value(c, Role::Event); handle && p.events.count(*handle)) {
        p.event_order.erase(p.events[*handle].number);
        p.events.erase(*handle);  // a later create of the handle is a new event
      }
      break;
    default:
      break;
  }
}

const StreamActivity& StreamTracker::on_call(Call& c) {
  activity_ = StreamActivity{};
  // Every record looks its process up: the one of the record before is kept at hand.
  if (!last_proc_ || last_pid_ != c.pid) {
    last_proc_ = &procs_[c.pid];
    last_pid_ = c.pid;
  }
  Process& p = *last_proc_;
  const bool outermost = c.outermost();
  annotate(p, c, outermost);
  annotate_graph(p, c);
  // A counted call changes the model only when it succeeded: a query that
  // says "not ready" (not a failure) has not seen the work complete.
  // A capture that ends invalidated has ended all the same.
  const bool capture_invalidated = c.api->effect() == Effect::CaptureEnd && c.outermost() && !c.unfinished &&
                                   c.status() == CT_CUDA_CAPTURE_INVALIDATED;
  if ((c.counted() && c.succeeded()) || capture_invalidated) {
    // apply() may drop a destroyed stream or event (or an old one over the
    // limit) whose id this call's arguments show: the output reads copies.
    std::size_t n = 0;
    for (const NamedValue& a : c.args) n += !a.id.empty();
    call_ids_.resize(n);
    n = 0;
    for (NamedValue& a : c.args)
      if (!a.id.empty()) a.id = call_ids_[n++].assign(a.id.data(), a.id.size());
    if (!apply_graph(p, c)) apply(p, c);
  }
  return activity_;
}

void StreamTracker::forget_process(std::uint32_t pid) {
  procs_.erase(pid);
  last_proc_ = nullptr;
}

void StreamTracker::forget_thread(std::uint32_t pid, std::uint32_t tid) {
  auto p = procs_.find(pid);
  if (p == procs_.end()) return;
  auto it = p->second.per_thread.find(tid);
  if (it == p->second.per_thread.end()) return;
  Stream* s = lane(p->second, it->second);
  if (s && !s->pending.empty()) return;  // a device synchronisation still waits for it
  p->second.lanes.erase(it->second);
  p->second.per_thread.erase(it);
}

std::vector<std::uint32_t> StreamTracker::processes() const {
  std::vector<std::uint32_t> out;
  for (const auto& [pid, p] : procs_) out.push_back(pid);
  return out;
}

std::vector<std::uint32_t> StreamTracker::threads(std::uint32_t pid) const {
  std::vector<std::uint32_t> out;
  if (auto p = procs_.find(pid); p != procs_.end())
    for (const auto& [tid, lane_number] : p->second.per_thread) out.push_back(tid);
  return out;
}

}  // namespace cudatrace
