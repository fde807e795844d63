// Stream capture and graphs in the stream model (streams.h): work issued to
// a capturing stream goes into its capture, a capture ends as a graph (or a
// graph is built from kernel nodes), an instantiation ties an executable
// graph to the graph's work, and a launch of it queues that work on its
// stream (streams.cpp).
#include <fmt/format.h>

#include <memory>

#include "cudatrace/analysis/streams.h"
#include "cudatrace/decode/transfer.h"

namespace cudatrace {
namespace {

NamedValue* first_arg(Call& c, ArgType type) {
  for (NamedValue& a : c.args)
    if (a.type == type) return &a;
  return nullptr;
}

// A graph launch: a launch without a kernel (cudaGraphLaunch, cuGraphLaunch).
bool is_graph_launch(const Call& c) { return c.api->effect() == Effect::Launch && c.kernel.empty(); }

}  // namespace

void StreamTracker::limit_graphs(Process& p) {
  // Called before adding one: at most kMaxHandles of each. Programs keep few
  // graphs, so which one goes matters little.
  while (p.graphs.size() >= kMaxHandles) {
    p.graphs.erase(p.graphs.begin());
    ++forgotten_.graphs;
  }
  while (p.execs.size() >= kMaxHandles) {
    p.execs.erase(p.execs.begin());
    ++forgotten_.graphs;
  }
}

GraphInfo& StreamTracker::exec_graph(Process& p, std::uint64_t handle) {
  if (auto it = p.execs.find(handle); it != p.execs.end()) return it->second;
  limit_graphs(p);
  GraphInfo& g = p.execs[handle];  // instantiated before the trace: what it runs is unknown
  g.id = fmt::format("g{}", p.next_graph++);
  g.work.stream = g.id;
  return g;
}

void StreamTracker::annotate_graph(Process& p, Call& c) {
  const Effect effect = c.api->effect();
  if (!is_graph_launch(c) && effect != Effect::GraphExecDestroy) return;
  NamedValue* exec = first_arg(c, ArgType::Handle);
  const auto handle = exec ? integer_value(exec->value) : std::nullopt;
  if (!handle) return;
  auto it = p.execs.find(*handle);
  if (it == p.execs.end()) return;
  exec->id = it->second.id;
  if (effect == Effect::Launch) c.graph = &it->second;
}

void StreamTracker::end_capture(Process& p, Stream& s, Call& c) {
  const std::shared_ptr<Capture> capture = std::move(s.capture);
  if (!capture) return;  // began before the trace: what it holds is unknown
  capture->ended = true;
  for (auto& [lane_number, other] : p.lanes)
    if (other->capture == capture) other->capture.reset();  // the streams that joined it
  capture_end_ = GraphInfo{};
  capture_end_.known = true;
  capture_end_.work = capture->work;
  c.graph = &capture_end_;
  const auto graph = role_value(c, Role::Created);
  if (!c.succeeded() || !graph || !*graph) return;  // invalidated: no graph
  if (!p.graphs.count(*graph)) limit_graphs(p);
  StreamWork& work = p.graphs[*graph];
  if (!capture->into_graph) work = StreamWork{};  // a new graph (its handle may be a destroyed one's)
  work.add(capture->work);
}

bool StreamTracker::apply_graph(Process& p, Call& c) {
  auto call_stream = [&]() -> Stream& { return stream_of_call(p, c); };
  auto call_event = [&] { return event_of_call(p, c); };
  switch (c.api->effect()) {
    case Effect::CaptureBegin: {
      Stream& s = call_stream();
      s.capture = std::make_shared<Capture>();
      // cudaStreamBeginCaptureToGraph: into an existing graph (its first Handle).
      s.capture->into_graph = role_value(c, Role::Object).value_or(0);
      return true;
    }
    case Effect::CaptureEnd:
      end_capture(p, call_stream(), c);
      return true;
    case Effect::GraphInstantiate: {
      NamedValue* out = first_arg(c, ArgType::OutHandle);
      const auto exec = out ? integer_value(out->value) : std::nullopt;
      if (!exec) return true;  // the out-parameter could not be read
      if (!p.execs.count(*exec)) limit_graphs(p);
      GraphInfo& g = p.execs[*exec];  // a reused handle is a new executable graph
      g = GraphInfo{};
      g.id = fmt::format("g{}", p.next_graph++);
      const auto graph = role_value(c, Role::Object);
      const auto source = graph ? p.graphs.find(*graph) : p.graphs.end();
      g.known = source != p.graphs.end();
      if (g.known) g.work = source->second;
      g.work.stream = g.id;
      out->id = g.id;
      c.graph = &g;
      return true;
    }
    case Effect::GraphExecDestroy:
      if (const auto handle = role_value(c, Role::Object)) p.execs.erase(*handle);
      return true;
    case Effect::GraphDestroy:
      if (const auto handle = role_value(c, Role::Object)) p.graphs.erase(*handle);
      return true;
    case Effect::GraphCreate:
      if (const auto graph = role_value(c, Role::Created); graph && *graph) {
        if (!p.graphs.count(*graph)) limit_graphs(p);
        p.graphs[*graph] = StreamWork{};  // empty, and known: its nodes are followed
      }
      return true;
    case Effect::GraphAddKernel:
    case Effect::GraphAddNode: {
      const auto graph = role_value(c, Role::Object);
      const auto it = graph ? p.graphs.find(*graph) : p.graphs.end();
      if (it == p.graphs.end()) return true;  // made out of sight: unknown already
      if (c.api->effect() == Effect::GraphAddKernel && !c.kernel.empty())
        it->second.add_launch(c.kernel, c.kernel_short);
      else
        p.graphs.erase(it);  // a node the model does not read: what the graph runs is no longer known
      return true;
    }
    case Effect::Launch:
    case Effect::HostFunc:
    case Effect::Copy:
    case Effect::Memset: {
      if (NamedValue* exec = is_graph_launch(c) ? first_arg(c, ArgType::Handle) : nullptr)
        if (const auto handle = integer_value(exec->value)) {
          c.graph = &exec_graph(p, *handle);
          exec->id = c.graph->id;  // first seen here: annotate_graph did not know it
        }
      if (!role_arg(c, Role::Stream)) return false;  // a synchronous copy: on the legacy stream, which cannot capture
      Stream& s = call_stream();
      if (!s.capture) return false;
      c.captured = true;
      StreamWork& work = s.capture->work;
      switch (c.api->effect()) {
        case Effect::Launch:
          if (c.graph && c.graph->known)  // a graph launched in a capture becomes a node of it
            work.add(c.graph->work);
          else if (c.kernel.empty())
            work.add_launch("graph", "graph");
          else
            work.add_launch(c.kernel, c.kernel_short);
          break;
        case Effect::HostFunc:
          ++work.host_functions;
          break;
        case Effect::Copy: {
          StreamWork::Bytes& b = work.copies[static_cast<int>(copy_direction(c))];
          ++b.count;
          b.bytes += role_bytes(c);
          break;
        }
        default:
          ++work.memsets.count;
          work.memsets.bytes += role_bytes(c);
      }
      return true;
    }
    case Effect::EventRecord: {
      Event* e = call_event();
      Stream& s = call_stream();
      if (e) e->capture = s.capture;  // a captured record is a node of the graph, not a point of the stream
      return s.capture != nullptr;
    }
    case Effect::StreamWaitEvent: {
      Event* e = call_event();
      Stream& s = call_stream();
      if (e && e->capture && !e->capture->ended) {
        s.capture = e->capture;  // waiting for an event recorded in a capture joins it
        return true;
      }
      return s.capture != nullptr;  // a capturing stream's wait is an edge of the graph
    }
    default:
      return false;
  }
}

}  // namespace cudatrace
