// Device memory accounting from decoded calls: live and peak bytes per
// process and device, allocations never freed, page-locked host ranges, and
// allocation sites that allocate and free the same size over and over.
//
// Memory stays bounded: at most kMaxLive allocations are tracked one by one
// (over it the oldest is dropped, counted in untracked(): its bytes stay in
// the live count, since its free can no longer be matched), at most
// kMaxChurnSites churn sites, and threads on device 0 are not stored.
//
// An operation counts once, at the outermost probed call: cudaMalloc nests
// cuMemAlloc_v2, and only cudaMalloc counts. With only the driver layer
// traced, the driver call is the outermost one.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cudatrace/decode/decode.h"

namespace cudatrace {

// Host memory a copy engine can read and write directly, so async copies
// stay async: pinned (cudaMallocHost, cudaHostAlloc and driver forms),
// registered (cudaHostRegister) and managed memory, per process.
class PageLockedMemory {
 public:
  // Takes a successful outermost call; follows the ones that create or
  // release such ranges.
  void on_call(const Call& c);
  // Whether [addr, addr + bytes) lies in one such range of `pid`.
  bool contains(std::uint32_t pid, std::uint64_t addr, std::uint64_t bytes) const;
  void forget(std::uint32_t pid);
  // At most kMaxRanges are kept; over it the lowest-addressed range of the
  // process goes (a copy from it may then be reported as pageable).
  static constexpr std::size_t kMaxRanges = 65536;
  std::uint64_t evicted() const { return evicted_; }

 private:
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::uint64_t> ranges_;  // pid, start -> end
  std::uint64_t evicted_ = 0;
};

struct Allocation {
  std::uint32_t pid = 0, tid = 0;
  std::uint64_t ptr = 0, bytes = 0;
  int device = 0;
  bool managed = false;
  std::uint64_t ts_ns = 0;    // when the allocating call started
  std::uint64_t call_ns = 0;  // how long it took
  std::uint64_t caller = 0;   // its return address
  std::uint64_t order = 0;    // allocation order, for dropping the oldest
  const Api* api = nullptr;
  std::vector<std::uint64_t> stack;  // with --stack
  std::string site;                  // with --py-stack: source_site_key of the call (decode/facet.h)
};

struct DeviceMemory {
  std::uint64_t live_bytes = 0, peak_bytes = 0;
  std::uint64_t peak_ts_ns = 0;  // the call that reached the peak (0: nothing allocated)
  std::uint64_t managed_live_bytes = 0, managed_peak_bytes = 0;  // cudaMallocManaged, kept apart
  std::uint64_t allocs = 0, frees = 0;
  // What the program last asked the device (cudaMemGetInfo, cuMemGetInfo):
  // free and total bytes, and when (0: never asked).
  std::uint64_t reported_free_bytes = 0, reported_total_bytes = 0, reported_ts_ns = 0;
};

// Allocations of one size from one call site that were freed again.
struct ChurnSite {
  const Api* api = nullptr;
  std::uint64_t pairs = 0;
  std::uint64_t lifetime_ns = 0;  // summed from allocation to free
  std::uint64_t calls_ns = 0;     // summed time inside the allocating and freeing calls
};

class MemoryTracker {
 public:
  using DeviceKey = std::pair<std::uint32_t, int>;                          // pid, device
  using ChurnKey = std::tuple<std::uint32_t, std::uint64_t, std::uint64_t>;  // pid, caller, bytes

  // Takes any decoded call; counts successful outermost ones by their effect.
  void on_call(const Call& c);
  // Whether [addr, addr + bytes) lies in page-locked host memory of `pid`.
  bool pinned(std::uint32_t pid, std::uint64_t addr, std::uint64_t bytes) const {
    return page_locked_.contains(pid, addr, bytes);
  }
  // Follows the page-locked ranges only, for a call not otherwise counted
  // (of an API the outputs do not show).
  void follow_page_locked(const Call& c) {
    if (c.counted()) page_locked_.on_call(c);
  }
  // The page-locked ranges it follows: the one registry of the pipeline.
  const PageLockedMemory& page_locked() const { return page_locked_; }
  void forget_page_locked(std::uint32_t pid) { page_locked_.forget(pid); }

  const std::map<DeviceKey, DeviceMemory>& devices() const { return devices_; }
  // Drops everything kept about a process that exited (whole-node mode).
  void forget(std::uint32_t pid);
  // Allocations not freed, largest first.
  std::vector<const Allocation*> outstanding() const;
  const std::map<ChurnKey, ChurnSite>& churn() const { return churn_; }

  static constexpr std::size_t kMaxLive = 16384;
  static constexpr std::size_t kMaxChurnSites = 4096;
  struct Untracked {
    std::uint64_t allocations = 0, bytes = 0;  // dropped from the table of live allocations
    std::uint64_t churn_pairs = 0;             // allocate/free pairs of sites beyond kMaxChurnSites
  };
  const Untracked& untracked() const { return untracked_; }

 private:
  int current_device(std::uint32_t tid) const;
  void allocate(const Call& c, bool managed);
  void free(const Call& c);
  void memory_info(const Call& c);

  std::unordered_map<std::uint32_t, int> thread_device_;  // by tid; CUDA's default is 0
  std::map<std::pair<std::uint32_t, std::uint64_t>, Allocation> live_;  // by pid, pointer
  std::map<std::uint64_t, std::pair<std::uint32_t, std::uint64_t>> by_age_;  // order -> key in live_
  std::uint64_t next_order_ = 0;
  Untracked untracked_;
  std::map<DeviceKey, DeviceMemory> devices_;
  PageLockedMemory page_locked_;
  std::map<ChurnKey, ChurnSite> churn_;
};

}  // namespace cudatrace
