// The trace's way out: formatted output is cut into chunks that a writer
// thread writes with blocking writes, through a queue bounded in memory.
// The reader of the ring buffer never waits for the consumer of the trace:
// a consumer that stalls costs memory (up to the cap), not ring-buffer
// records; only when it stays behind for longer than the queue holds are
// whole chunks dropped, and their records counted as lost.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace cudatrace {

// Formatted output and where each record in it ends, so that output that is
// not written can be counted in records.
struct Chunk {
  static constexpr std::uint32_t kUnfinished = 1u << 31;  // flag on a record end: an unfinished call

  fmt::memory_buffer bytes;
  std::vector<std::uint32_t> record_ends;  // offset just after each record's text, | kUnfinished

  // The entry of `record_ends` for a record whose text ends at `offset`.
  static std::uint32_t record_end(std::size_t offset, bool unfinished) {
    return static_cast<std::uint32_t>(offset) | (unfinished ? kUnfinished : 0);
  }
};

struct RecordCount {
  std::uint64_t calls = 0, unfinished = 0;
  std::uint64_t total() const { return calls + unfinished; }
};

// The records of `chunk` whose text ends after byte `written`.
RecordCount records_after(const Chunk& chunk, std::size_t written);

class OutputWriter {
 public:
  // A chunk is handed over once it holds this much (and at the end of every
  // batch the reader drains).
  static constexpr std::size_t kChunkBytes = 256 << 10;
  // Storage to format a chunk in: room for the record that crosses kChunkBytes.
  static constexpr std::size_t kChunkCapacity = kChunkBytes + kChunkBytes / 4;

  // Starts the writer thread on `fd`; the queued chunks hold at most
  // `cap_bytes` of memory.
  OutputWriter(int fd, std::size_t cap_bytes);
  ~OutputWriter();
  OutputWriter(const OutputWriter&) = delete;
  OutputWriter& operator=(const OutputWriter&) = delete;

  // Queues the chunk's content and leaves `chunk` empty, with storage to
  // format the next chunk in. Returns false, queueing nothing, when the queue
  // would exceed the cap or writing has stopped: `chunk` is then left as it
  // was, for the caller to count its records as lost and clear it.
  bool push(Chunk& chunk);

  // Waits up to `limit` until everything queued is written or writing failed.
  void wait_written(std::chrono::milliseconds limit);

  // Waits until everything queued is written. If no byte could be written for
  // `stall` (the consumer is stuck), gives up: interrupts the write in
  // progress, drops the rest and stops writing. Returns the records that were
  // not written whole (also after a failed write); `complete` says whether
  // all was written, so that more (the end line) may follow. Once incomplete,
  // writing has stopped: pushes fail and drain() has nothing more to count.
  struct Drained {
    RecordCount unwritten;
    bool complete = true;
  };
  Drained drain(std::chrono::milliseconds stall);

  // The errno of the write that failed (EPIPE: the reader went away), 0 while
  // writing works.
  int error() const;

 private:
  void stop();  // ends writing: interrupts a write in progress, the thread exits

  struct State;
  std::shared_ptr<State> state_;  // shared with the thread, which may outlive this when a write never returns
};

}  // namespace cudatrace
