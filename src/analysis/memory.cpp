#include "cudatrace/analysis/memory.h"
#include "cudatrace/decode/facet.h"

#include <algorithm>
#include <climits>


namespace cudatrace {

int MemoryTracker::current_device(std::uint32_t tid) const {
  auto it = thread_device_.find(tid);
  return it == thread_device_.end() ? 0 : it->second;
}

void MemoryTracker::on_call(const Call& c) {
  if (!c.counted()) return;
  switch (c.api->effect()) {
    case Effect::SetDevice: {
      const int device = static_cast<int>(role_value(c, Role::Device).value_or(0));
      if (device)
        thread_device_[c.tid] = device;
      else
        thread_device_.erase(c.tid);  // the default: threads that exited leave nothing behind
      break;
    }
    case Effect::AllocDevice:
      allocate(c, false);
      break;
    case Effect::AllocManaged:
      allocate(c, true);
      break;
    case Effect::Free:
      free(c);
      break;
    case Effect::MemInfo:
      memory_info(c);
      break;
    default:
      break;
  }
  page_locked_.on_call(c);
}

// cudaMemGetInfo(free, total) / cuMemGetInfo: of the thread's current device.
void MemoryTracker::memory_info(const Call& c) {
  const auto free_bytes = role_value(c, Role::FreeBytes), total_bytes = role_value(c, Role::TotalBytes);
  if (!free_bytes || !total_bytes) return;
  DeviceMemory& d = devices_[{c.pid, current_device(c.tid)}];
  d.reported_free_bytes = *free_bytes;
  d.reported_total_bytes = *total_bytes;
  d.reported_ts_ns = c.ts_ns;
}

void MemoryTracker::allocate(const Call& c, bool managed) {
  const std::uint64_t ptr = role_value(c, Role::Address).value_or(0);
  const std::uint64_t bytes = role_bytes(c);
  if (!ptr) return;
  Allocation a;
  a.pid = c.pid;
  a.tid = c.tid;
  a.ptr = ptr;
  a.bytes = bytes;
  a.device = current_device(c.tid);
  a.managed = managed;
  a.ts_ns = c.ts_ns;
  a.call_ns = c.dur_ns;
  a.caller = c.caller;
  a.api = c.api;
  a.order = next_order_++;
  a.stack = user_stack(c).addresses;
  if (const std::optional<SourceSite> site = source_site_of(c)) a.site = source_site_key(*site);
  DeviceMemory& d = devices_[{a.pid, a.device}];
  ++d.allocs;
  if (managed) {
    d.managed_live_bytes += bytes;
    d.managed_peak_bytes = std::max(d.managed_peak_bytes, d.managed_live_bytes);
  } else {
    d.live_bytes += bytes;
    if (d.live_bytes > d.peak_bytes) {
      d.peak_bytes = d.live_bytes;
      d.peak_ts_ns = a.ts_ns;
    }
  }
  // The same address again without a free seen: the old block is gone.
  const std::uint64_t order = a.order;
  auto [it, inserted] = live_.try_emplace({a.pid, ptr}, a);
  if (!inserted) {
    const Allocation& old = it->second;
    DeviceMemory& od = devices_[{old.pid, old.device}];
    (old.managed ? od.managed_live_bytes : od.live_bytes) -= old.bytes;
    by_age_.erase(old.order);
    it->second = std::move(a);
  }
  by_age_.emplace(order, it->first);
  if (live_.size() > kMaxLive) {
    auto oldest = by_age_.begin();
    auto dropped = live_.find(oldest->second);
    ++untracked_.allocations;
    untracked_.bytes += dropped->second.bytes;
    live_.erase(dropped);
    by_age_.erase(oldest);
  }
}

void MemoryTracker::free(const Call& c) {
  const std::uint64_t ptr = role_value(c, Role::Address).value_or(0);
  auto it = live_.find({c.pid, ptr});
  if (!ptr || it == live_.end()) return;  // allocated before tracing started
  const Allocation& a = it->second;
  DeviceMemory& d = devices_[{a.pid, a.device}];
  ++d.frees;
  (a.managed ? d.managed_live_bytes : d.live_bytes) -= a.bytes;
  const ChurnKey key{a.pid, a.caller, a.bytes};
  auto site = churn_.find(key);
  if (site == churn_.end() && churn_.size() < kMaxChurnSites) site = churn_.emplace(key, ChurnSite{}).first;
  if (site != churn_.end()) {
    site->second.api = a.api;
    ++site->second.pairs;
    site->second.lifetime_ns += c.ts_ns - std::min<std::uint64_t>(c.ts_ns, a.ts_ns);
    site->second.calls_ns += a.call_ns + c.dur_ns;
  } else {
    ++untracked_.churn_pairs;
  }
  by_age_.erase(a.order);
  live_.erase(it);
}

void PageLockedMemory::on_call(const Call& c) {
  const std::uint32_t pid = c.pid;
  switch (c.api->effect()) {
    case Effect::AllocHost:
    case Effect::AllocManaged:
    case Effect::RegisterHost: {
      const auto ptr = role_value(c, Role::Address);
      const auto bytes = role_value(c, Role::Bytes);
      if (!ptr || !*ptr || !bytes || !*bytes) break;
      ranges_[{pid, *ptr}] = *ptr + *bytes;
      if (ranges_.size() > kMaxRanges) {
        auto oldest = ranges_.lower_bound({pid, 0});
        if (oldest->first == std::make_pair(pid, *ptr)) ++oldest;
        if (oldest == ranges_.end() || oldest->first.first != pid) oldest = ranges_.begin();
        ranges_.erase(oldest);
        ++evicted_;
      }
      break;
    }
    case Effect::FreeHost:
    case Effect::UnregisterHost:
    case Effect::Free:  // managed memory
      if (const auto ptr = role_value(c, Role::Address)) ranges_.erase({pid, *ptr});
      break;
    default:
      break;
  }
}

bool PageLockedMemory::contains(std::uint32_t pid, std::uint64_t addr, std::uint64_t bytes) const {
  auto it = ranges_.upper_bound({pid, addr});
  if (it == ranges_.begin()) return false;
  --it;
  return it->first.first == pid && addr >= it->first.second && addr + bytes <= it->second;
}

void MemoryTracker::forget(std::uint32_t pid) {
  for (auto it = live_.lower_bound({pid, 0}); it != live_.end() && it->first.first == pid; it = live_.erase(it))
    by_age_.erase(it->second.order);
  devices_.erase(devices_.lower_bound({pid, INT_MIN}), devices_.lower_bound({pid + 1, INT_MIN}));
  churn_.erase(churn_.lower_bound({pid, 0, 0}), churn_.lower_bound({pid + 1, 0, 0}));
  page_locked_.forget(pid);
}

void PageLockedMemory::forget(std::uint32_t pid) {
  ranges_.erase(ranges_.lower_bound({pid, 0}), ranges_.upper_bound({pid, ~std::uint64_t(0)}));
}

std::vector<const Allocation*> MemoryTracker::outstanding() const {
  std::vector<const Allocation*> out;
  for (const auto& [key, a] : live_) out.push_back(&a);
  std::stable_sort(out.begin(), out.end(), [](const Allocation* x, const Allocation* y) { return x->bytes > y->bytes; });
  return out;
}

}  // namespace cudatrace
