#include "cudatrace/record/ring_reader.h"

#include <linux/bpf.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include <cerrno>
#include <cstring>

namespace cudatrace {

std::unique_ptr<RingReader> RingReader::open(int map_fd, Handler handler, void* ctx, std::string& error) {
  bpf_map_info info{};
  __u32 len = sizeof info;
  if (bpf_obj_get_info_by_fd(map_fd, &info, &len) != 0 || info.type != BPF_MAP_TYPE_RINGBUF) {
    error = "not a BPF ring buffer";
    return nullptr;
  }
  std::unique_ptr<RingReader> r(new RingReader);
  r->handler_ = handler;
  r->ctx_ = ctx;
  r->page_size_ = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  r->data_size_ = info.max_entries;
  r->mask_ = info.max_entries - 1;
  r->consumer_page_ = mmap(nullptr, r->page_size_, PROT_READ | PROT_WRITE, MAP_SHARED, map_fd, 0);
  if (r->consumer_page_ == MAP_FAILED) {
    r->consumer_page_ = nullptr;
    error = std::string("mapping the ring buffer: ") + std::strerror(errno);
    return nullptr;
  }
  // The kernel maps the data area twice in a row, so a record that wraps
  // around the end is still contiguous here.
  r->producer_area_ =
      mmap(nullptr, r->page_size_ + 2 * r->data_size_, PROT_READ, MAP_SHARED, map_fd, static_cast<off_t>(r->page_size_));
  if (r->producer_area_ == MAP_FAILED) {
    r->producer_area_ = nullptr;
    error = std::string("mapping the ring buffer: ") + std::strerror(errno);
    return nullptr;
  }
  // The helpers cudatrace forks (the stop watchdog, the probe keeper) and
  // the command never read it: not theirs, so not in their RSS either.
  madvise(r->consumer_page_, r->page_size_, MADV_DONTFORK);
  madvise(r->producer_area_, r->page_size_ + 2 * r->data_size_, MADV_DONTFORK);
  r->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (r->epoll_fd_ < 0 || epoll_ctl(r->epoll_fd_, EPOLL_CTL_ADD, map_fd, &ev) != 0) {
    error = std::string("waiting on the ring buffer: ") + std::strerror(errno);
    return nullptr;
  }
  return r;
}

RingReader::~RingReader() {
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (producer_area_) munmap(producer_area_, page_size_ + 2 * data_size_);
  if (consumer_page_) munmap(consumer_page_, page_size_);
}

bool RingReader::poll(int timeout_ms) {
  epoll_event ev{};
  if (epoll_wait(epoll_fd_, &ev, 1, timeout_ms) < 0 && errno != EINTR) return false;
  drain();
  return true;
}

bool RingReader::wake_on(int map_fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  return epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, map_fd, &ev) == 0;
}

bool RingReader::pending() const {
  const auto* consumer_pos = static_cast<const std::uint64_t*>(consumer_page_);
  const auto* producer_pos = static_cast<const std::uint64_t*>(producer_area_);
  return __atomic_load_n(producer_pos, __ATOMIC_ACQUIRE) != __atomic_load_n(consumer_pos, __ATOMIC_RELAXED);
}

void RingReader::drain() {
  auto* consumer_pos = static_cast<std::uint64_t*>(consumer_page_);
  const auto* producer_pos = static_cast<const std::uint64_t*>(producer_area_);
  const auto* data = static_cast<const std::uint8_t*>(producer_area_) + page_size_;
  std::uint64_t pos = __atomic_load_n(consumer_pos, __ATOMIC_RELAXED);
  // Publish at least every sixteenth of the ring, so producers never see it
  // fuller than it is by more than that.
  const std::uint64_t publish_every = data_size_ / 16;
  std::uint64_t published = pos;
  // What is there now; records written meanwhile wait for the next call,
  // rather than the reader chasing the producers' cache lines.
  const std::uint64_t end = __atomic_load_n(producer_pos, __ATOMIC_ACQUIRE);
  while (pos < end) {
    const auto* header = reinterpret_cast<const std::uint32_t*>(data + (pos & mask_));
    const std::uint32_t len = __atomic_load_n(header, __ATOMIC_ACQUIRE);
    if (len & BPF_RINGBUF_BUSY_BIT) break;  // reserved, not yet submitted
    const std::uint32_t size = len & ~(BPF_RINGBUF_BUSY_BIT | BPF_RINGBUF_DISCARD_BIT);
    const bool publish_now =
        !(len & BPF_RINGBUF_DISCARD_BIT) && handler_(ctx_, header + BPF_RINGBUF_HDR_SZ / 4, size);
    pos += (size + BPF_RINGBUF_HDR_SZ + 7) & ~std::uint64_t(7);
    if (publish_now || pos - published >= publish_every) {
      __atomic_store_n(consumer_pos, pos, __ATOMIC_RELEASE);
      published = pos;
    }
  }
  if (pos != published) __atomic_store_n(consumer_pos, pos, __ATOMIC_RELEASE);
}

}  // namespace cudatrace
