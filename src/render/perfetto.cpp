// --perfetto FILE: a timeline in Chrome trace-event JSON, which
// ui.perfetto.dev and chrome://tracing open (docs/timeline.md). Written as
// the calls arrive; only the per-process bookkeeping stays in memory.
#include "cudatrace/render/perfetto.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "cudatrace/render/format.h"
#include "cudatrace/render/json.h"
#include "cudatrace/render/text.h"
#include "cudatrace/render/writer.h"
#include "cudatrace/render/output_file.h"

namespace cudatrace {
namespace {

constexpr std::size_t kFlushBytes = 1 << 16;

class PerfettoWriter final : public Writer {
 public:
  // Creates `path` as the -o file is created (output_file.h) and writes the
  // document's start; nullptr with `error` set if it cannot. `start_ns`
  // (CLOCK_MONOTONIC) becomes timestamp 0.
  static std::unique_ptr<PerfettoWriter> open(int fd, const std::string& path, std::uint64_t start_ns,
                                              std::string& error);
  ~PerfettoWriter();

  // One call: its API slice, the work it queued on a stream lane, the event
  // flow it consumed, and the process's live device memory it changed.
  void call(const Call& c, const CallAnalysis& a) override;
  // An NVTX range that ended (--nvtx): a slice on its thread's track, around
  // the calls made in it; start/end ranges are async slices of the process.
  void nvtx_range(const NvtxClosed& r) override;
  // Ends the JSON document and closes the file; later calls do nothing.
  // False (with `error`) if any write failed: the file is then left empty.
  bool finish(std::string& error) override;

 private:
  PerfettoWriter(std::FILE* f, const std::string& path, std::uint64_t start_ns);
  void begin_event(const char* ph, std::uint32_t pid, std::uint32_t tid, std::uint64_t ts_ns);
  void name_threads(const Call& c);
  void api_slice(const Call& c);
  void queued_slice(const Call& c, const StreamActivity::Queued& q);
  void graph_arg(const GraphInfo& g);
  void flow(const Call& c, const StreamActivity::Consumed& from);
  void memory_counter(const Call& c, std::uint64_t device_bytes);
  // --gpu-time: a closed window on its stream's "estimated GPU" track.
  void gpu_window(const GpuWindow& w);
  void end_event();
  void flush_if_large();
  void write_buffer();

  std::FILE* file_;
  std::string path_;
  std::uint64_t start_ns_;
  fmt::memory_buffer buf_;
  bool first_event_ = true;
  int write_errno_ = 0;  // of the first write that failed
  std::set<std::uint32_t> named_processes_;
  std::set<std::pair<std::uint32_t, std::uint32_t>> named_threads_;  // pid, tid (lanes included)
};

}  // namespace

std::unique_ptr<PerfettoWriter> PerfettoWriter::open(int fd, const std::string& path, std::uint64_t start_ns,
                                                     std::string& error) {
  std::FILE* f = fdopen(fd, "w");
  if (!f) {
    error = "cannot write " + path + ": " + std::strerror(errno);
    close(fd);
    return nullptr;
  }
  std::unique_ptr<PerfettoWriter> writer(new PerfettoWriter(f, path, start_ns));
  // The header now: a file that cannot be written (/dev/full) fails before anything is traced.
  writer->write_buffer();
  if (writer->write_errno_ || std::fflush(f) != 0) {
    error = "writing " + path + ": " + std::strerror(writer->write_errno_ ? writer->write_errno_ : errno);
    return nullptr;
  }
  return writer;
}

PerfettoWriter::PerfettoWriter(std::FILE* f, const std::string& path, std::uint64_t start_ns)
    : file_(f), path_(path), start_ns_(start_ns) {
  buf_.append(std::string_view(
      "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"cudatrace\",\"clock\":\"CLOCK_MONOTONIC, 0 = "
      "tracing start\",\"stream_lanes\":\"work as the host queued it: placed at the enqueue call, not at GPU "
      "execution\"},\"traceEvents\":[\n"));
}

PerfettoWriter::~PerfettoWriter() {
  std::string ignored;
  finish(ignored);
}

void PerfettoWriter::begin_event(const char* ph, std::uint32_t pid, std::uint32_t tid, std::uint64_t ts_ns) {
  if (!first_event_) buf_.append(std::string_view(",\n"));
  first_event_ = false;
  const std::int64_t rel = static_cast<std::int64_t>(ts_ns - start_ns_);
  fmt::format_to(std::back_inserter(buf_), "{{\"ph\":\"{}\",\"pid\":{},\"tid\":{},\"ts\":{:.3f}", ph, pid, tid,
                 rel / 1e3);
}

void PerfettoWriter::end_event() {
  buf_.push_back('}');
  flush_if_large();
}

void PerfettoWriter::name_threads(const Call& c) {
  if (named_processes_.insert(c.pid).second) {
    begin_event("M", c.pid, c.pid, start_ns_);
    buf_.append(std::string_view(",\"name\":\"process_name\",\"args\":{\"name\":"));
    append_json_string(buf_, c.comm());
    buf_.push_back('}');
    end_event();
  }
  if (named_threads_.emplace(c.pid, c.tid).second) {
    begin_event("M", c.pid, c.tid, start_ns_);
    buf_.append(std::string_view(",\"name\":\"thread_name\",\"args\":{\"name\":"));
    append_json_string(buf_, c.comm());
    buf_.push_back('}');
    end_event();
  }
}

void PerfettoWriter::api_slice(const Call& c) {
  auto it = std::back_inserter(buf_);
  // A call that never returned has no end: a "B" event without its "E".
  begin_event(c.unfinished ? "B" : "X", c.pid, c.tid, c.ts_ns);
  if (!c.unfinished) fmt::format_to(it, ",\"dur\":{:.3f}", c.dur_ns / 1e3);
  fmt::format_to(it, ",\"name\":\"{}\",\"cat\":\"{}\",\"args\":{{", c.api->symbol, layer_name(c.api->layer()));
  for (const NamedValue& a : c.args) {
    append_json_string(buf_, a.name);
    buf_.push_back(':');
    if (a.id.empty())
      append_json_value(buf_, a.value);
    else
      append_json_string(buf_, a.id);
    buf_.push_back(',');
  }
  if (!c.kernel.empty()) {
    buf_.append(std::string_view("\"kernel\":"));
    append_json_string(buf_, c.kernel);
    buf_.push_back(',');
  }
  if (c.waited) {
    fmt::memory_buffer text;
    append_wait_description(text, *c.waited);
    buf_.append(std::string_view("\"waited\":"));
    append_json_string(buf_, std::string_view(text.data(), text.size()));
    buf_.push_back(',');
  }
  if (c.graph) graph_arg(*c.graph);
  if (c.captured) buf_.append(std::string_view("\"captured\":true,"));
  for (const Facet* f : call_facets()) {
    if (!f->present(c)) continue;
    f->perfetto_args(c, [this](std::string_view key, std::string_view value) {
      append_json_string(buf_, key);
      buf_.push_back(':');
      append_json_string(buf_, value);
      buf_.push_back(',');
    });
  }
  if (c.unfinished) {
    buf_.append(std::string_view("\"ret\":\"unfinished\"}"));
  } else if (c.api->spec->returns != Returns::Status) {
    buf_.append(std::string_view("\"ret\":null}"));
  } else if (const char* name = c.ret_name()) {
    fmt::format_to(it, "\"ret\":\"{}\"}}", name);
  } else {
    fmt::format_to(it, "\"ret\":{}}}", c.status());
  }
  end_event();
}

void PerfettoWriter::nvtx_range(const NvtxClosed& r) {
  auto it = std::back_inserter(buf_);
  const std::uint64_t start = r.range.start_ns;
  if (!r.process_wide) {
    begin_event("X", r.pid, r.tid, start);
    fmt::format_to(it, ",\"dur\":{:.3f},\"cat\":\"nvtx\",\"name\":", (r.end_ns - std::min(r.end_ns, start)) / 1e3);
    append_json_string(buf_, r.range.message);
    end_event();
    return;
  }
  for (const char* ph : {"b", "e"}) {
    begin_event(ph, r.pid, r.tid, *ph == 'b' ? start : r.end_ns);
    fmt::format_to(it, ",\"cat\":\"nvtx\",\"id\":\"{}:{}\",\"name\":", r.pid, r.range.id);
    append_json_string(buf_, r.range.message);
    end_event();
  }
}

// "graph_runs":"g1: 3 kernels (k x2, add)", for a slice's args (where "graph" may be an argument's name).
void PerfettoWriter::graph_arg(const GraphInfo& g) {
  fmt::memory_buffer text;
  append_graph_text(text, g);  // " graph g1: ..."
  std::string_view description(text.data(), text.size());
  description.remove_prefix(description.find_first_of(' ', 1) + 1);
  buf_.append(std::string_view("\"graph_runs\":"));
  append_json_string(buf_, description);
  buf_.push_back(',');
}

void PerfettoWriter::queued_slice(const Call& c, const StreamActivity::Queued& q) {
  const std::uint32_t lane_tid = kStreamLaneTidBase + q.lane;
  auto it = std::back_inserter(buf_);
  if (named_threads_.emplace(c.pid, lane_tid).second) {
    begin_event("M", c.pid, lane_tid, start_ns_);
    buf_.append(std::string_view(",\"name\":\"thread_name\",\"args\":{\"name\":"));
    append_json_string(buf_, q.lane_name);
    buf_.push_back('}');
    end_event();
    // Lanes after the process's threads, in the order streams were seen.
    begin_event("M", c.pid, lane_tid, start_ns_);
    fmt::format_to(it, ",\"name\":\"thread_sort_index\",\"args\":{{\"sort_index\":{}}}", lane_tid);
    end_event();
  }
  begin_event("X", c.pid, lane_tid, c.ts_ns);
  fmt::format_to(it, ",\"dur\":{:.3f},\"name\":", c.dur_ns / 1e3);
  fmt::memory_buffer label;
  if (c.graph && c.graph->known)  // a replay: the graph and how much it runs
    fmt::format_to(std::back_inserter(label), "graph {} ({} kernel{})", c.graph->id, c.graph->work.launches,
                   c.graph->work.launches == 1 ? "" : "s");
  else if (c.graph)
    fmt::format_to(std::back_inserter(label), "graph {}", c.graph->id);
  else if (q.effect == Effect::Launch)
    label.append(q.kernel);
  else if (q.effect == Effect::HostFunc)
    label.append(std::string_view("host function"));
  else if (q.effect == Effect::Copy)
    fmt::format_to(std::back_inserter(label), "copy {} {}", direction_name(q.direction), format_bytes(q.bytes));
  else
    fmt::format_to(std::back_inserter(label), "memset {}", format_bytes(q.bytes));
  append_json_string(buf_, std::string_view(label.data(), label.size()));
  fmt::format_to(it, ",\"cat\":\"queued\",\"args\":{{\"stream\":\"{}\",\"api\":\"{}\",\"tid\":{},", q.stream,
                 c.api->symbol, c.tid);
  if (!c.kernel.empty()) {
    buf_.append(std::string_view("\"kernel\":"));
    append_json_string(buf_, c.kernel);
    buf_.push_back(',');
  }
  if (c.graph) graph_arg(*c.graph);
  buf_.append(std::string_view("\"timing\":\"host enqueue call, not GPU execution\"}"));
  end_event();
}

void PerfettoWriter::flow(const Call& c, const StreamActivity::Consumed& from) {
  auto it = std::back_inserter(buf_);
  // Each end is bound to the slice around its timestamp: the middle of the
  // record call and of the consuming call.
  begin_event("s", c.pid, from.record_tid, from.record_ts_ns + from.record_dur_ns / 2);
  fmt::format_to(it, ",\"id\":{},\"cat\":\"event\",\"name\":\"{}\"", from.flow_id, from.event);
  end_event();
  begin_event("f", c.pid, c.tid, c.ts_ns + c.dur_ns / 2);
  fmt::format_to(it, ",\"bp\":\"e\",\"id\":{},\"cat\":\"event\",\"name\":\"{}\"", from.flow_id, from.event);
  end_event();
}

void PerfettoWriter::memory_counter(const Call& c, std::uint64_t device_bytes) {
  begin_event("C", c.pid, c.pid, c.end_ns());
  fmt::format_to(std::back_inserter(buf_), ",\"name\":\"device memory\",\"args\":{{\"bytes\":{}}}", device_bytes);
  end_event();
}

void PerfettoWriter::gpu_window(const GpuWindow& w) {
  const std::uint32_t tid = kGpuEstimateTidBase + w.lane;
  auto it = std::back_inserter(buf_);
  if (named_threads_.emplace(w.pid, tid).second) {
    begin_event("M", w.pid, tid, start_ns_);
    fmt::format_to(it, ",\"name\":\"thread_name\",\"args\":{{\"name\":\"stream {} GPU (ESTIMATED from host events)\"}}",
                   w.stream);
    end_event();
    begin_event("M", w.pid, tid, start_ns_);
    fmt::format_to(it, ",\"name\":\"thread_sort_index\",\"args\":{{\"sort_index\":{}}}", tid);
    end_event();
  }
  // With an estimate: a GPU-bound window's work ended when the host stopped
  // waiting; a host-bound window's work started as it was queued. Without
  // one: the whole span the work lies in.
  std::uint64_t start = w.first_launch_ns, dur = w.close_end_ns - std::min(w.close_end_ns, w.first_launch_ns);
  if (w.estimate_ns) {
    dur = *w.estimate_ns;
    if (w.bound == GpuWindow::Bound::Gpu) start = w.close_end_ns - std::min(w.close_end_ns, dur);
  }
  begin_event("X", w.pid, tid, start);
  fmt::format_to(it, ",\"dur\":{:.3f},\"cat\":\"gpu_estimate\",\"name\":\"{}\"", dur / 1e3,
                 w.estimate_ns ? "GPU work (estimate)" : "GPU work somewhere in here (bounds only)");
  fmt::format_to(it,
                 ",\"args\":{{\"estimated\":true,\"stream\":\"{}\",\"bound\":\"{}\",\"lower_bound_us\":{:.3f},"
                 "\"upper_bound_us\":{:.3f},\"kernels\":{},\"transfers\":{},\"host_functions\":{}",
                 w.stream, w.bound == GpuWindow::Bound::Gpu ? "gpu" : "host", w.lower_ns / 1e3, w.upper_ns / 1e3,
                 w.kernels, w.transfers, w.host_functions);
  if (*w.lower_bound_note) fmt::format_to(it, ",\"lower_bound_zero_because\":\"{}\"", w.lower_bound_note);
  buf_.append(std::string_view(",\"timing\":\"estimated from host events (docs/gpu-time.md), not measured\"}"));
  end_event();
}

void PerfettoWriter::call(const Call& c, const CallAnalysis& a) {
  if (!file_) return;
  name_threads(c);
  api_slice(c);
  if (a.streams && a.streams->queued) queued_slice(c, *a.streams->queued);
  if (a.streams && a.streams->consumed) flow(c, *a.streams->consumed);
  if (a.device_bytes) memory_counter(c, *a.device_bytes);
  if (a.gpu_windows)
    for (const GpuWindow& w : *a.gpu_windows) gpu_window(w);
}

void PerfettoWriter::flush_if_large() {
  if (buf_.size() >= kFlushBytes) write_buffer();
}

void PerfettoWriter::write_buffer() {
  // After a failed write the rest is dropped: the file is emptied at the end.
  if (!write_errno_ && std::fwrite(buf_.data(), 1, buf_.size(), file_) != buf_.size()) write_errno_ = errno;
  buf_.clear();
}

bool PerfettoWriter::finish(std::string& error) {
  if (!file_) return !write_errno_;
  buf_.append(std::string_view("\n]}\n"));
  write_buffer();
  if (!write_errno_ && std::fflush(file_) != 0) write_errno_ = errno;
  // Half a JSON document opens nowhere: leave the file empty rather than look written.
  struct stat st {};
  const bool emptied = write_errno_ && fstat(fileno(file_), &st) == 0 && S_ISREG(st.st_mode) &&
                       ftruncate(fileno(file_), 0) == 0;
  if (std::fclose(file_) != 0 && !write_errno_) write_errno_ = errno;
  file_ = nullptr;
  if (write_errno_)
    error = "writing " + path_ + ": " + std::strerror(write_errno_) + "; the timeline is incomplete" +
            (emptied ? ", so the file was emptied" : "");
  return !write_errno_;
}

std::unique_ptr<Writer> make_perfetto_writer(int fd, const std::string& path, std::uint64_t start_ns,
                                             std::string& error) {
  return PerfettoWriter::open(fd, path, start_ns, error);
}

}  // namespace cudatrace
