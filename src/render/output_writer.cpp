#include "cudatrace/render/output_writer.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace cudatrace {
namespace {

using Clock = std::chrono::steady_clock;

// Sent to the writer thread to end a write() that waits for a consumer that
// does not read. The handler does nothing and is installed without
// SA_RESTART: the write returns what it wrote, or EINTR.
constexpr int kInterruptSignal = SIGUSR2;
void on_interrupt(int) {}

// One write() at most: with a slow consumer, progress is still seen often.
constexpr std::size_t kMaxWrite = 64 << 10;
// Written chunks kept for reuse, so that a steady stream allocates nothing.
constexpr std::size_t kMaxSpares = 2;
// How long to keep interrupting a write that does not return (one that
// waits uninterruptibly, on a hung file system say) before leaving it.
constexpr auto kInterruptFor = std::chrono::seconds(1);

std::size_t footprint(std::size_t bytes, std::size_t records) { return bytes + records * sizeof(std::uint32_t); }
std::size_t footprint(const Chunk& c) { return footprint(c.bytes.capacity(), c.record_ends.capacity()); }

}  // namespace

RecordCount records_after(const Chunk& chunk, std::size_t written) {
  RecordCount n;
  for (const std::uint32_t end : chunk.record_ends) {
    if ((end & ~Chunk::kUnfinished) <= written) continue;
    if (end & Chunk::kUnfinished)
      ++n.unfinished;
    else
      ++n.calls;
  }
  return n;
}

struct OutputWriter::State {
  int fd;
  std::size_t cap;
  std::mutex mu;
  std::condition_variable cv;  // a chunk was queued or written, or the state changed
  std::deque<Chunk> queue;     // the front one is being written
  std::vector<Chunk> spares;
  std::size_t queued_bytes = 0;   // memory the queue holds (and what push() has reserved)
  std::size_t front_written = 0;  // bytes of the front chunk written
  Clock::time_point progress;     // when a write last made progress
  bool writing = false;           // the thread is in write() (or about to be)
  bool abandon = false;           // stop writing: the consumer is stuck, or the trace ends
  int error = 0;
  pthread_t thread{};

  void run();
};

void OutputWriter::State::run() {
  std::unique_lock<std::mutex> lock(mu);
  while (true) {
    cv.wait(lock, [&] { return abandon || !queue.empty(); });
    if (abandon) break;
    Chunk& c = queue.front();  // stays put: the driver only appends to the queue
    if (front_written == c.bytes.size()) {
      Chunk finished = std::move(c);
      queue.pop_front();
      queued_bytes -= footprint(finished);
      front_written = 0;
      progress = Clock::now();
      if (finished.bytes.capacity() >= kChunkCapacity && spares.size() < kMaxSpares) {
        finished.bytes.clear();
        finished.record_ends.clear();
        spares.push_back(std::move(finished));
      }
      cv.notify_all();
      continue;
    }
    writing = true;
    const char* data = c.bytes.data() + front_written;
    const std::size_t size = std::min(c.bytes.size() - front_written, kMaxWrite);
    lock.unlock();
    const ssize_t n = ::write(fd, data, size);
    const int err = errno;
    lock.lock();
    writing = false;
    if (n > 0) {
      front_written += static_cast<std::size_t>(n);
      progress = Clock::now();
    } else if (n < 0 && err != EINTR) {
      error = err;
      break;
    }
  }
  writing = false;
  cv.notify_all();
}

OutputWriter::OutputWriter(int fd, std::size_t cap_bytes) : state_(std::make_shared<State>()) {
  state_->fd = fd;
  state_->cap = cap_bytes;
  state_->progress = Clock::now();
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;  // no SA_RESTART
  sigaction(kInterruptSignal, &sa, nullptr);
  // Signals are for the driver's thread (Ctrl-C, SIGTERM): the writer, which
  // inherits this mask, takes only the one that interrupts it.
  sigset_t all, old;
  sigfillset(&all);
  sigdelset(&all, kInterruptSignal);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  std::thread thread([state = state_] { state->run(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  state_->thread = thread.native_handle();
  // Detached, holding its own reference to the state: it may be left behind
  // in a write that never returns (see stop()) without touching freed memory.
  thread.detach();
}

OutputWriter::~OutputWriter() { stop(); }

void OutputWriter::stop() {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  s.abandon = true;
  s.cv.notify_all();
  const auto give_up = Clock::now() + kInterruptFor;
  // Once out of write() with `abandon` set, the thread ends without writing
  // again. Interrupt until it is: a signal that arrives just before the
  // write() starts is missed, the next one is not.
  while (s.writing && Clock::now() < give_up) {
    pthread_kill(s.thread, kInterruptSignal);
    s.cv.wait_for(lock, std::chrono::milliseconds(10));
  }
}

bool OutputWriter::push(Chunk& chunk) {
  if (chunk.bytes.size() == 0) return true;
  // A chunk with much unused storage is queued as an exact copy, so that the
  // cap bounds memory rather than bytes; a full one is queued as it is.
  const bool copy = chunk.bytes.capacity() > chunk.bytes.size() + chunk.bytes.size() / 4;
  const std::size_t reserved = copy ? footprint(chunk.bytes.size(), chunk.record_ends.size()) : footprint(chunk);
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.abandon || s.error || s.queued_bytes + reserved > s.cap) return false;
    s.queued_bytes += reserved;  // meanwhile only the writer thread changes it, downwards
  }
  Chunk queued;
  if (copy) {
    queued.bytes.reserve(chunk.bytes.size());
    queued.bytes.append(chunk.bytes.data(), chunk.bytes.data() + chunk.bytes.size());
    queued.record_ends.assign(chunk.record_ends.begin(), chunk.record_ends.end());
  } else {
    queued = std::move(chunk);
  }
  chunk.bytes.clear();
  chunk.record_ends.clear();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.queued_bytes = s.queued_bytes - reserved + footprint(queued);
    if (s.queue.empty()) s.progress = Clock::now();  // the stall clock starts now
    s.queue.push_back(std::move(queued));
    if (!copy && !s.spares.empty()) {
      chunk = std::move(s.spares.back());
      s.spares.pop_back();
    }
    s.cv.notify_all();
  }
  if (chunk.bytes.capacity() < kChunkCapacity) chunk.bytes.reserve(kChunkCapacity);
  return true;
}

void OutputWriter::wait_written(std::chrono::milliseconds limit) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  s.cv.wait_for(lock, limit, [&] { return s.queue.empty() || s.error || s.abandon; });
}

OutputWriter::Drained OutputWriter::drain(std::chrono::milliseconds stall) {
  State& s = *state_;
  Drained d;
  std::unique_lock<std::mutex> lock(s.mu);
  if (s.abandon) {
    d.complete = false;  // counted by the drain() that stopped writing
    return d;
  }
  const auto start = Clock::now();
  while (!s.queue.empty() && !s.error) {
    const auto deadline = std::max(s.progress, start) + stall;
    if (Clock::now() >= deadline) break;
    s.cv.wait_until(lock, deadline);
  }
  if (s.queue.empty() && !s.error) return d;
  d.complete = false;
  lock.unlock();
  stop();
  lock.lock();
  for (std::size_t i = 0; i < s.queue.size(); ++i) {
    const RecordCount n = records_after(s.queue[i], i == 0 ? s.front_written : 0);
    d.unwritten.calls += n.calls;
    d.unwritten.unfinished += n.unfinished;
  }
  // A write that never returned still reads the front chunk: leave it.
  s.queue.erase(s.queue.begin() + (s.writing ? 1 : 0), s.queue.end());
  return d;
}

int OutputWriter::error() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->error;
}

}  // namespace cudatrace
