#include "cudatrace/record/saved_trace.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "cudatrace/decode/api_stats.h"
#include "cudatrace/options.h"
#include "cudatrace/terminal.h"

namespace cudatrace {
namespace {

// Lines handed on per feed: the driver flushes its outputs between feeds.
constexpr int kLinesPerFeed = 4096;

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
  if (first != EOF) std::ungetc(first, f);
  return f;
}

SavedTrace::SavedTrace(std::string path)
    : path_(std::move(path)), name_(path_ == "-" ? "standard input" : path_) {}

SavedTrace::~SavedTrace() {
  std::free(buf_);
  if (in_ && in_ != stdin) std::fclose(in_);
}

bool SavedTrace::fail(const std::string& why) {
  // What is wrong can quote the line, which is anyone's bytes.
  std::fprintf(stderr, "cudatrace: %s:%zu: %s\n", name_.c_str(), number_, terminal_safe(why).c_str());
  failed_ = true;
  return false;
}

bool SavedTrace::next_line() {
  while (true) {
    const ssize_t n = ::getline(&buf_, &capacity_, in_);
    if (n < 0) {
      if (std::ferror(in_)) {
        std::fprintf(stderr, "cudatrace: reading %s: %s\n", name_.c_str(), std::strerror(errno));
        failed_ = true;
      }
      return false;
    }
    ++number_;
    std::string_view text(buf_, static_cast<std::size_t>(n));
    if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
    if (text.empty()) continue;
    if (ended_) return fail("a line after the end line");
    std::string error;
    if (!line_.parse(text, error)) return fail(error);
    switch (line_.type()) {
      case TraceLine::Type::End:
        ended_ = true;
        lost_ = line_.end();
        continue;
      case TraceLine::Type::Warning: {
        const TraceLine::WarningSite& w = line_.warning();
        locations_[{w.pid, w.caller}] = w.location;
        if (!w.gpu_code.empty()) gpu_codes_[{w.pid, w.caller}] = w.gpu_code;
        continue;
      }
      case TraceLine::Type::Call:
        return true;
    }
  }
}

// A timeline is no easier to read than the trace it is made of. Asked
// before start (the outputs are opened first).
bool SavedTrace::private_trace() const {
  struct stat st {};
  const bool found = path_ == "-" ? fstat(STDIN_FILENO, &st) == 0 : stat(path_.c_str(), &st) == 0;
  return found && S_ISREG(st.st_mode) && !(st.st_mode & S_IROTH);
}

int SavedTrace::start(const RecordsNeeded&) {
  if (path_ == "-") {
    in_ = stdin;
  } else {
    std::string error;
    in_ = open_trace(path_, kFifoWriterWait, error);
    if (!in_) {
      std::fprintf(stderr, "cudatrace: %s\n", error.c_str());
      return kExitInput;
    }
  }
  api_stats_.assign(apis().size(), ct_api_stats{});
  call_pending_ = next_line();
  if (failed_) return kExitInput;
  if (!call_pending_ && !ended_) {
    std::fprintf(stderr, "cudatrace: %s: not a trace: no calls and no end line in it\n", name_.c_str());
    return kExitInput;
  }
  // The trace does not say when tracing started: its first call is time 0
  // (a trace of no calls: empty tables).
  if (call_pending_) start_ns_ = last_ns_ = line_.record().ts_ns;
  return kExitOk;
}

void SavedTrace::hand_on(CallConsumer& to) {
  const ct_call& rec = line_.record();
  if (!line_.kernel_mangled().empty()) names_.add(rec.pid, line_.kernel_handle(), line_.kernel_mangled());
  if (!decode_call(rec, &names_, call_)) return;
  if (call_.api->group() == Group::Module) names_.learn(call_);
  call_.stack = line_.stack();
  last_ns_ = std::max<std::uint64_t>(last_ns_, call_.end_ns());
  // What BPF counts live in summary mode.
  if (!call_.unfinished)
    add_call(api_stats_[call_.api->id], call_.dur_ns, call_.failed());
  to.on_call(call_);
}

bool SavedTrace::feed(CallConsumer& to, int) {
  for (int i = 0; i < kLinesPerFeed; ++i) {
    if (!call_pending_) return false;
    hand_on(to);
    call_pending_ = next_line();
  }
  return call_pending_;
}

void SavedTrace::finish(CallConsumer&) {
  if (!failed_ && !ended_ && !call_pending_)
    std::fprintf(stderr,
                 "cudatrace: warning: %s has no end line: the trace was cut short, its last calls may be missing\n",
                 name_.c_str());
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

}  // namespace cudatrace
