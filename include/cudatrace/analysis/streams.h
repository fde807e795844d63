// The stream model: short ids for streams and events, the work queued on each
// stream since it was last synchronised, event record -> wait edges, what
// every synchronisation waited for, and the pageable-copy warning (checked
// against the page-locked registry of memory.h). Fed every decoded call in
// completion order; all state is per process. Only the host side is seen: "queued" means a call returned
// success, "waited for" means queued and not yet known to be complete.
//
// Memory stays bounded whatever the program does: queued work is kept as
// summaries (launches per kernel name, bytes per direction) between the points
// an event record can refer to, at most kMaxSegments per stream; each process
// keeps at most kMaxHandles streams and as many events that it never
// destroyed, forgetting the oldest (counted: forgotten()), and as many graphs
// and executable graphs.
//
// Stream capture (docs/graphs.md): work issued to a capturing stream (or to a
// stream that joined the capture by waiting for an event recorded in it)
// does not run: it goes into the graph that the capture ends with, not into
// the stream's queued work. A graph created while traced gets the kernels of
// its kernel nodes. An instantiation ties the executable graph to that work,
// and each launch of it queues the work on its stream.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/transfer.h"
#include "cudatrace/analysis/memory.h"

namespace cudatrace {

// The work of one stream that a synchronisation covered.
struct StreamWork {
  struct Bytes {
    std::uint32_t count = 0;
    std::uint64_t bytes = 0;
  };
  // At most this many kernel names are listed; launches of further kernels
  // count in `launches` and `unlisted_launches` only.
  static constexpr std::size_t kMaxKernels = 64;
  std::string stream;  // short id
  std::uint32_t launches = 0;
  struct Kernel {
    std::string name;        // demangled, as JSON writes it
    std::string short_name;  // as text writes it (Call::kernel_short)
    std::uint32_t count = 0;
  };
  std::vector<Kernel> kernels;  // launches per kernel, in launch order
  std::uint32_t unlisted_launches = 0;
  Bytes copies[kCopyDirections];  // by Direction
  Bytes memsets;
  std::uint32_t host_functions = 0;  // cudaLaunchHostFunc, cuLaunchHostFunc, *StreamAddCallback
  bool empty() const;
  void add_launch(std::string_view kernel, std::string_view short_name, std::uint32_t count = 1);
  void add(const StreamWork& other);
};

// What an executable graph runs, as far as the trace saw it built.
struct GraphInfo {
  // Per process, in the order graphs were instantiated or first launched:
  // "g1". Empty for the graph a capture ended with (not yet executable).
  std::string id;
  // Built by captures and kernel nodes the trace saw: `work` is what one
  // launch runs. Else (instantiated before the trace, from a graph made out of
  // sight or given a node the model does not read) nothing is known of it.
  bool known = false;
  StreamWork work;  // work.stream is `id`
};

struct WaitInfo {
  enum class Kind : std::uint8_t {
    Stream,           // cudaStreamSynchronize: target is the stream
    Device,           // cudaDeviceSynchronize, cuCtxSynchronize: every stream of the process
    Event,            // cudaEventSynchronize: target is the event
    StreamWaitEvent,  // cudaStreamWaitEvent: the stream's later work waits for the event (the host does not)
  };
  Kind kind = Kind::Stream;
  std::string target;       // stream or event id; empty for Device
  std::string recorded_on;  // events: the stream of the event's last record; empty if never recorded
  std::vector<StreamWork> work;  // non-empty entries only; the target's own stream first
  // The point waited for lay inside work summarised together when a stream
  // held more than kMaxSegments pieces: all of that work is listed.
  bool approximate = false;
};

// What one call did to the model, for the timeline and the warnings.
struct StreamActivity {
  struct Queued {              // work the call put on a stream
    std::string_view stream;   // short id
    std::uint32_t lane;        // per-process stream number, never reused: 0 is the first stream seen
    std::string_view lane_name;  // "stream s1", "stream per-thread (tid 42)"
    Effect effect;             // Launch, HostFunc, Copy or Memset
    std::string_view kernel;   // launches: the kernel's short name ("graph" for a graph launch)
    Direction direction = Direction::Default;  // copies
    std::uint64_t bytes = 0;   // copies and memsets
  };
  struct Consumed {  // the event record a wait or synchronisation consumed
    std::uint64_t flow_id;  // unique per consumer
    std::string_view event;
    std::uint32_t record_tid;
    std::uint64_t record_ts_ns, record_dur_ns;
  };
  std::optional<Queued> queued;
  std::optional<Consumed> consumed;
  // An async copy from or to pageable host memory, reported once per call site.
  std::optional<std::uint64_t> pageable_host_ptr;
};

class StreamTracker {
 public:
  // Copies are judged pageable against `page_locked`, which the caller
  // keeps up to date (pipeline.h: the memory accounting follows it).
  explicit StreamTracker(const PageLockedMemory& page_locked) : page_locked_(page_locked) {}

  // Updates the model with `call` and annotates it: short ids on its stream
  // and event arguments, `waited` on synchronisations and stream waits. An
  // operation counts once, at its outermost traced call (a runtime call, not
  // the driver call it makes); failed and unfinished calls change nothing.
  // The result and the annotations stay valid until the next call.
  const StreamActivity& on_call(Call& call);

  static constexpr std::size_t kMaxSegments = 256;
  static constexpr std::size_t kMaxHandles = 16384;
  static constexpr std::size_t kMaxWarnedSites = 4096;
  struct Forgotten {
    std::uint64_t streams = 0, events = 0;  // over kMaxHandles: a later use gets a new id
    std::uint64_t merged_segments = 0;      // over kMaxSegments
    std::uint64_t graphs = 0;               // graphs and executable graphs over kMaxHandles
  };
  const Forgotten& forgotten() const { return forgotten_; }
  // Forgets what is kept for a process that exited, or for one of its
  // threads (its per-thread stream, once nothing is queued on it).
  void forget_process(std::uint32_t pid);
  void forget_thread(std::uint32_t pid, std::uint32_t tid);
  // The processes that have state, for the caller to check which exited.
  std::vector<std::uint32_t> processes() const;
  std::vector<std::uint32_t> threads(std::uint32_t pid) const;

 private:
  // Queued work between two points an event record or a wait can refer to,
  // summarised; or a wait for another stream's work up to a point.
  struct Segment {
    std::uint64_t first_seq = 0, last_seq = 0;
    bool is_wait = false;
    bool merged = false;  // holds work from either side of such a point
    StreamWork work;
    std::uint32_t waits_on = 0;  // lane
    std::uint64_t waits_until = 0;
  };
  // The work of one capture sequence: every stream in it shares it.
  struct Capture {
    StreamWork work;
    bool ended = false;  // an event recorded in it no longer makes a waiting stream join it
    std::uint64_t into_graph = 0;  // cudaStreamBeginCaptureToGraph: the graph it adds to
  };
  struct Stream {
    std::string id;
    std::uint32_t lane = 0;
    std::uint32_t tid = 0;  // per-thread streams: the thread
    std::uint64_t handle = 0;  // created streams: the handle
    bool destroyed = false;
    bool sealed = true;  // the next work starts a new segment
    std::deque<Segment> pending;  // in seq order, at most kMaxSegments (a deque: the oldest go first)
    std::shared_ptr<Capture> capture;  // while the stream captures
    std::string lane_name;  // "stream s1", made when it is first queued to
  };
  struct Event {
    std::string id;
    std::uint32_t number = 0;  // creation order
    bool recorded = false;
    std::uint32_t lane = 0;     // of the last record
    std::string recorded_on;    // that stream's id
    std::uint64_t seq = 0;      // work on that stream up to this seq is what the record captured
    std::uint32_t tid = 0;
    std::uint64_t ts_ns = 0, dur_ns = 0;
    std::shared_ptr<Capture> capture;  // the last record was captured: a wait for it joins the capture
  };
  struct Process {
    std::map<std::uint32_t, std::unique_ptr<Stream>> lanes;  // every stream, first seen first
    std::uint32_t legacy = 0;  // lane + 1 of the default stream; 0: none yet
    std::unordered_map<std::uint32_t, std::uint32_t> per_thread;  // tid -> lane
    std::unordered_map<std::uint64_t, std::uint32_t> streams;     // handle -> lane
    std::unordered_map<std::uint64_t, Event> events;              // by handle
    std::map<std::uint32_t, std::uint64_t> event_order;           // number -> handle
    std::uint32_t next_stream = 1, next_event = 1, next_lane = 0;
    std::uint64_t seq = 0;
    std::set<std::pair<std::uint16_t, std::uint64_t>> warned_sites;  // API id, caller (and Python line)
    std::unordered_map<std::uint64_t, StreamWork> graphs;  // cudaGraph_t -> the work captured into it
    std::unordered_map<std::uint64_t, GraphInfo> execs;    // cudaGraphExec_t -> what it runs
    std::uint32_t next_graph = 1;
  };
  struct Gathering;

  Stream& new_stream(Process& p, std::string id);
  Stream* lane(Process& p, std::uint32_t lane);
  Stream* stream_for(Process& p, const Call& c, std::uint64_t handle, bool assign);
  Stream* created_stream(Process& p, std::uint64_t handle);
  Event* event_for(Process& p, std::uint64_t handle, bool assign, bool created);
  Stream& stream_of_call(Process& p, const Call& c);
  Event* event_of_call(Process& p, const Call& c);
  void drop_stream_if_done(Process& p, Stream& s);
  void limit_handles(Process& p);
  void annotate(Process& p, Call& c, bool outermost);
  void apply(Process& p, Call& c);
  void gather(Process& p, Stream& s, std::uint64_t until, Gathering& g);
  void settle(Process& p, Gathering& g);  // drops the gathered work: it is complete
  void finish_wait(Process& p, Gathering& g, WaitInfo::Kind kind, std::string target, std::string recorded_on,
                   bool erase);
  Segment& open_segment(Process& p, Stream& s, bool wait);
  void queue(Stream& s, const StreamActivity::Queued& what);
  // Capture and graphs (streams_graphs.cpp).
  void annotate_graph(Process& p, Call& c);
  bool apply_graph(Process& p, Call& c);  // false: not a capture or graph call
  void end_capture(Process& p, Stream& s, Call& c);
  GraphInfo& exec_graph(Process& p, std::uint64_t handle);
  void limit_graphs(Process& p);

  std::unordered_map<std::uint32_t, Process> procs_;
  Process* last_proc_ = nullptr;  // procs_[last_pid_]
  std::uint32_t last_pid_ = 0;
  const PageLockedMemory& page_locked_;  // followed by the memory accounting (memory.h)
  StreamActivity activity_;
  std::string lane_name_;  // activity_.queued->lane_name
  WaitInfo wait_;
  GraphInfo capture_end_;  // Call::graph of a cudaStreamEndCapture
  std::vector<std::string> call_ids_;  // the handle ids of the last applied call (Call::args[].id)
  Forgotten forgotten_;
  std::uint64_t next_flow_ = 1;
};

}  // namespace cudatrace
