#include "cudatrace/record/saved_trace.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <cstdlib>
#include <cstring>

#include "cudatrace/decode/api_stats.h"
#include "cudatrace/decode/facet.h"
#include "cudatrace/options.h"
#include "cudatrace/terminal.h"

namespace cudatrace {
namespace {

// Lines handed on per feed: the driver flushes its outputs between feeds.
constexpr int kLinesPerFeed = 4096;
// Room for a read beyond the longest line.
constexpr std::size_t kReadBlock = 65536;

}  // namespace

std::FILE* open_trace(const std::string& path, std::chrono::milliseconds writer_wait, std::string& error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) {
    error = "cannot read " + path + ": " + std::strerror(errno);
    if (fd >= 0) close(fd);
    return nullptr;
  }
  // Opened without blocking: a FIFO nobody opens for writing would wait for
  // ever. A read says whether a writer is there (EAGAIN, or a byte, which is
  // put back) or not (end of file, until one comes).
  int first = EOF;
  for (const auto deadline = std::chrono::steady_clock::now() + writer_wait; S_ISFIFO(st.st_mode);) {
    unsigned char byte = 0;
    const ssize_t n = ::read(fd, &byte, 1);
    if (n == 1) first = byte;
    if (n == 1 || (n < 0 && errno == EAGAIN)) break;
    if (n < 0 && errno != EINTR) {
      error = "reading " + path + ": " + std::strerror(errno);
      close(fd);
      return nullptr;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      error = fmt::format("cannot read {}: it is a FIFO and no process opened it for writing within {} s", path,
                          std::chrono::duration_cast<std::chrono::seconds>(writer_wait).count());
      close(fd);
      return nullptr;
    }
    pollfd p{fd, POLLIN, 0};
    poll(&p, 1, 20);  // data wakes it; a writer that opens and waits does not: look again soon
  }
  std::FILE* f = nullptr;
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0 || !(f = fdopen(fd, "r"))) {
    error = "cannot read " + path + ": " + std::strerror(errno);
    close(fd);
    return nullptr;
  }
  std::setvbuf(f, nullptr, _IONBF, 0);  // nothing read ahead: the reader goes on with read(2)
  if (first != EOF) std::ungetc(first, f);
  return f;
}

// `in` is unbuffered: one getc takes the byte open_trace put back (or reads
// one), and stdio holds nothing more.
SavedTrace::LineReader::LineReader(std::FILE* in)
    : fd_(fileno(in)), first_(std::getc(in)), buf_(kMaxTraceLineBytes + kReadBlock) {}

SavedTrace::LineReader::Result SavedTrace::LineReader::next(std::string_view& line) {
  while (true) {
    const char* at = buf_.data() + begin_;
    if (const void* newline = std::memchr(at, '\n', end_ - begin_)) {
      const std::size_t length = static_cast<const char*>(newline) - at;
      line = std::string_view(at, length);
      begin_ += length + 1;
      return length > kMaxTraceLineBytes ? TooLong : Line;
    }
    if (end_ - begin_ > kMaxTraceLineBytes) return TooLong;
    if (eof_) {
      if (begin_ == end_) return End;
      line = std::string_view(at, end_ - begin_);  // the last line, without a newline
      begin_ = end_;
      return CutLine;
    }
    std::memmove(buf_.data(), at, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
    if (first_ != EOF) {
      buf_[end_++] = static_cast<char>(first_);
      first_ = EOF;
      continue;
    }
    const ssize_t n = ::read(fd_, buf_.data() + end_, buf_.size() - end_);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error;
    end_ += static_cast<std::size_t>(n);
    eof_ = n == 0;
  }
}

SavedTrace::SavedTrace(std::string path)
    : path_(std::move(path)), name_(path_ == "-" ? "standard input" : path_) {}

SavedTrace::~SavedTrace() {
  if (in_ && in_ != stdin) std::fclose(in_);
}

bool SavedTrace::fail(const std::string& why) {
  // What is wrong can quote the line, which is anyone's bytes.
  std::fprintf(stderr, "cudatrace: %s:%zu: %s\n", name_.c_str(), number_, terminal_safe(why).c_str());
  failed_ = true;
  return false;
}

bool SavedTrace::read_line() {
  while (true) {
    std::string_view text;
    const LineReader::Result read = reader_->next(text);
    if (read == LineReader::End) {
      read_to_end_ = true;
      return false;
    }
    if (read == LineReader::Error) {
      error_line("reading " + name_ + ": " + std::strerror(errno));
      failed_ = true;
      return false;
    }
    ++number_;
    if (read == LineReader::TooLong)
      return fail(fmt::format("a line longer than {} MiB: not a line of a cudatrace trace", kMaxTraceLineBytes >> 20));
    if (text.empty()) continue;
    if (ended_) return fail("a line after the end line");
    // Parsed into a free slot, which a call keeps until it is handed on.
    if (free_slots_.empty()) {
      free_slots_.push_back(static_cast<std::uint32_t>(slots_.size()));
      slots_.emplace_back();
    }
    const std::uint32_t slot = free_slots_.back();
    TraceLine& line = slots_[slot];
    std::string error;
    if (!line.parse(text, error, &facet_lines_)) {
      if (read != LineReader::CutLine) return fail(error);
      // What was written whole is reported; finish() warns of the rest.
      cut_line_ = number_;
      read_to_end_ = true;
      return false;
    }
    switch (line.type()) {
      case TraceLine::Type::FacetLine:
        continue;
      case TraceLine::Type::End:
        ended_ = true;
        lost_ = line.end();
        end_calls_ = line.end_calls();
        end_unfinished_ = line.end_unfinished();
        continue;
      case TraceLine::Type::Warning: {
        const TraceLine::WarningSite& w = line.warning();
        if (locations_.size() < kMaxWarningSites) locations_[{w.pid, w.caller}] = w.location;
        if (!w.gpu_code.empty() && gpu_codes_.size() < kMaxWarningSites) gpu_codes_[{w.pid, w.caller}] = w.gpu_code;
        continue;
      }
      case TraceLine::Type::Call:
        break;
    }
    const ct_call& rec = line.record();
    const bool unfinished = rec.type == CT_REC_UNFINISHED;
    ++(unfinished ? unfinished_read_ : calls_read_);
    if (rec.ts_ns >= kMaxTraceNs || (!unfinished && rec.dur_ns >= kMaxTraceNs)) {
      leave_out(rec.ts_ns >= kMaxTraceNs ? impossible_ts_ : impossible_dur_, rec.ts_ns >= kMaxTraceNs, rec);
      continue;
    }
    // An unfinished call is written where the tracer found it open (a thread
    // that exited, the end of tracing): it keeps its place.
    const std::uint64_t returned = unfinished ? std::max<std::uint64_t>(rec.ts_ns, newest_ns_)
                                              : rec.ts_ns + std::min<std::uint64_t>(rec.dur_ns, ~rec.ts_ns);
    if (released_line_ && returned < released_ns_)
      return fail(fmt::format(
          "out of order: this call returned {:.6f} s before the call of line {}, which was already reported (a "
          "trace is read in the order cudatrace writes it, by return time, and put in order only within {} s or {} "
          "lines)",
          double(released_ns_ - returned) / 1e9, released_line_, kOrderWindowNs / 1000000000, kOrderWindowLines));
    free_slots_.pop_back();
    const Pending pending{returned, number_, text.size(), slot};
    if (returned >= newest_ns_) {
      in_order_.push_back(pending);
      newest_ns_ = returned;
    } else {
      late_.push_back(pending);
      std::push_heap(late_.begin(), late_.end(), std::greater<>());
    }
    window_bytes_ += text.size();
    return true;
  }
}

// A time no clock since boot can give: a report of it would print a call of
// centuries, and tables whose sums wrap. Said once per field, counted at the end.
void SavedTrace::leave_out(std::uint64_t& count, bool ts, const ct_call& rec) {
  if (count++ == 0)
    std::fprintf(stderr,
                 "cudatrace: warning: %s:%zu: \"%s\" %s cannot be real (%s 10^18 ns, 31 years, or more): such calls "
                 "are left out, and counted at the end\n",
                 name_.c_str(), number_, ts ? "ts_ns" : "dur_ns",
                 fmt::to_string(ts ? rec.ts_ns : rec.dur_ns).c_str(), ts ? "a time since boot of" : "a duration of");
}

// A timeline is no easier to read than the trace it is made of. Asked
// before start (the outputs are opened first).
bool SavedTrace::private_trace() const {
  struct stat st {};
  const bool found = path_ == "-" ? fstat(STDIN_FILENO, &st) == 0 : stat(path_.c_str(), &st) == 0;
  return found && S_ISREG(st.st_mode) && !(st.st_mode & S_IROTH);
}

const SavedTrace::Pending* SavedTrace::earliest() const {
  if (in_order_.empty() || (!late_.empty() && in_order_.front() > late_.front()))
    return late_.empty() ? nullptr : &late_.front();
  return &in_order_.front();
}

bool SavedTrace::window_full() const {
  const Pending* first = earliest();
  return first && (newest_ns_ - first->returned_ns > kOrderWindowNs ||
                   in_order_.size() + late_.size() > kOrderWindowLines || window_bytes_ > kOrderWindowBytes);
}

bool SavedTrace::next_call() {
  if (current_ != kNoSlot) free_slots_.push_back(current_);  // handed on
  current_ = kNoSlot;
  while (!window_full() && read_line()) {
  }
  const Pending* first = earliest();
  if (failed_ || !first) return false;
  released_ns_ = first->returned_ns;
  released_line_ = first->number;
  window_bytes_ -= first->bytes;
  current_ = first->slot;
  if (!late_.empty() && first == &late_.front()) {
    std::pop_heap(late_.begin(), late_.end(), std::greater<>());
    late_.pop_back();
  } else {
    in_order_.pop_front();
  }
  return true;
}

int SavedTrace::start(const RecordsNeeded&) {
  if (path_ == "-") {
    in_ = stdin;
    std::setvbuf(in_, nullptr, _IONBF, 0);  // as open_trace's
  } else {
    std::string error;
    in_ = open_trace(path_, kFifoWriterWait, error);
    if (!in_) {
      error_line(error);
      return kExitInput;
    }
  }
  reader_ = std::make_unique<LineReader>(in_);
  api_stats_.assign(apis().size(), ct_api_stats{});
  while (!window_full() && read_line()) {
  }
  if (failed_) return kExitInput;
  if (!earliest() && !ended_) {
    error_line(name_ + ": not a trace: no calls and no end line in it");
    return kExitInput;
  }
  // The trace does not say when tracing started: the earliest call that
  // began in its first window is time 0 (a trace of no calls: empty tables).
  if (const Pending* first = earliest()) {
    start_ns_ = slots_[first->slot].record().ts_ns;
    const auto earlier = [this](const Pending& p) {
      start_ns_ = std::min<std::uint64_t>(start_ns_, slots_[p.slot].record().ts_ns);
    };
    std::for_each(in_order_.begin(), in_order_.end(), earlier);
    std::for_each(late_.begin(), late_.end(), earlier);
    last_ns_ = start_ns_;
  }
  return kExitOk;
}

void SavedTrace::note_process(std::uint32_t pid, CallConsumer& to) {
  const auto [at, fresh] = process_at_.try_emplace(pid);
  if (!fresh) {
    processes_.splice(processes_.end(), processes_, at->second);
    return;
  }
  at->second = processes_.insert(processes_.end(), pid);
  if (processes_.size() <= kMaxReportProcesses) return;
  // An eighth at a time: forgetting kernel names is a pass over them all.
  std::unordered_set<std::uint32_t> oldest;
  while (oldest.size() < kMaxReportProcesses / 8) {
    const std::uint32_t p = processes_.front();
    processes_.pop_front();
    process_at_.erase(p);
    for (const Facet* f : call_facets()) f->forget_process(facet_lines_, p);
    to.forget_process(p);
    oldest.insert(p);
  }
  names_.forget(oldest);
  forgotten_processes_ += oldest.size();
}

void SavedTrace::hand_on(CallConsumer& to) {
  const TraceLine& line = slots_[current_];
  const ct_call& rec = line.record();
  note_process(rec.pid, to);
  if (!line.kernel_mangled().empty()) names_.add(rec.pid, line.kernel_handle(), line.kernel_mangled());
  if (!decode_call(rec, &names_, call_)) return;
  if (call_.api->group() == Group::Module) names_.learn(call_);
  for (const Facet* f : call_facets()) f->carry(line.facets(), call_);
  last_ns_ = std::max<std::uint64_t>(last_ns_, call_.end_ns());
  // What BPF counts live in summary mode.
  if (!call_.unfinished)
    add_call(api_stats_[call_.api->id], call_.dur_ns, call_.failed());
  to.on_call(call_);
}

bool SavedTrace::feed(CallConsumer& to, int) {
  for (int i = 0; i < kLinesPerFeed; ++i) {
    if (!next_call()) return false;
    hand_on(to);
  }
  return true;
}

void SavedTrace::finish(CallConsumer&) {
  if (forgotten_processes_)
    std::fprintf(stderr,
                 "cudatrace: warning: %s: more than %zu processes made calls: %s processes whose last calls were the "
                 "oldest were forgotten (their streams, kernel names and handles start afresh should they call "
                 "again)\n",
                 name_.c_str(), kMaxReportProcesses, fmt::to_string(forgotten_processes_).c_str());
  if (impossible_ts_ + impossible_dur_)
    std::fprintf(stderr, "cudatrace: warning: %s: %s calls left out: %s with an impossible \"ts_ns\", %s with an "
                 "impossible \"dur_ns\"\n",
                 name_.c_str(), fmt::to_string(impossible_ts_ + impossible_dur_).c_str(),
                 fmt::to_string(impossible_ts_).c_str(), fmt::to_string(impossible_dur_).c_str());
  if (failed_ || !read_to_end_ || earliest()) return;  // (the output failed: the rest was not read)
  if (cut_line_)
    std::fprintf(stderr,
                 "cudatrace: warning: %s:%zu: the last line is cut short (no end line: writing the trace stopped in "
                 "the middle of a line, on a full disk say); this report is of the %zu lines before it\n",
                 name_.c_str(), cut_line_, cut_line_ - 1);
  else if (!ended_)
    std::fprintf(stderr,
                 "cudatrace: warning: %s has no end line: the trace was cut short, its last calls may be missing\n",
                 name_.c_str());
  else if (calls_read_ != end_calls_ || unfinished_read_ != end_unfinished_)
    std::fprintf(stderr,
                 "cudatrace: warning: %s: its end line counts %s calls and %s unfinished, but it holds %s and %s: "
                 "lines were added or removed since cudatrace wrote it (this report is of the lines it holds)\n",
                 name_.c_str(), fmt::to_string(end_calls_).c_str(), fmt::to_string(end_unfinished_).c_str(),
                 fmt::to_string(calls_read_).c_str(), fmt::to_string(unfinished_read_).c_str());
}

std::string SavedTrace::location(std::uint32_t pid, std::uint64_t addr) {
  const auto it = locations_.find({pid, addr});
  return it != locations_.end() ? it->second : fmt::format("{:#x}", addr);
}

std::string SavedTrace::gpu_code(std::uint32_t pid, std::uint64_t addr) {
  const auto it = gpu_codes_.find({pid, addr});
  return it != gpu_codes_.end() ? it->second : std::string();
}

int SavedTrace::exit_status() const { return failed_ ? kExitInput : kExitOk; }

std::vector<ct_api_stats> SavedTrace::api_stats() {
  std::vector<ct_api_stats> all = api_stats_;
  for (const auto& [id, lost] : lost_.ring_buffer_calls)
    if (id < all.size()) add_stats(all[id], lost);
  return all;
}

}  // namespace cudatrace
