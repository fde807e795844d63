// Reads the BPF ring buffer directly from its shared mapping. Unlike
// libbpf's ring_buffer, which publishes its read position after every record,
// it publishes once per batch: every store to that position moves a cache
// line the producing CPUs read on each reservation, and per record that
// costs the traced program a cache miss per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace cudatrace {

class RingReader {
 public:
  // Called for each record; returning true publishes the read position
  // right after it (for records whose consumption others must see at once).
  using Handler = bool (*)(void* ctx, const void* data, std::size_t size);

  static std::unique_ptr<RingReader> open(int map_fd, Handler handler, void* ctx, std::string& error);
  ~RingReader();
  RingReader(const RingReader&) = delete;
  RingReader& operator=(const RingReader&) = delete;

  // Waits up to timeout_ms for a wake-up, then drains. Returns false on a
  // wait error other than EINTR (errno is set).
  bool poll(int timeout_ms);
  // Also ends poll()'s wait when the ring buffer `map_fd` (read by another
  // RingReader) has a record.
  bool wake_on(int map_fd);
  // Handles the complete records present when called, then publishes the
  // read position.
  void drain();
  // Whether records are there that drain() has not read.
  bool pending() const;

 private:
  RingReader() = default;

  Handler handler_ = nullptr;
  void* ctx_ = nullptr;
  int epoll_fd_ = -1;
  std::size_t page_size_ = 0, data_size_ = 0;
  void* consumer_page_ = nullptr;  // read position (written by us)
  void* producer_area_ = nullptr;  // write position page, then the data mapped twice
  std::uint64_t mask_ = 0;
};

}  // namespace cudatrace
