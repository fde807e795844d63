// The BPF maps summary mode fills (bpf_abi.h): the per-CPU per-API
// statistics, and the activity counted without records, its table of what
// to count per API and the records rebuilt from its keys.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "cudatrace/decode/api_table.h"
#include "cudatrace/bpf_abi.h"

namespace cudatrace {

// Reads the per-CPU "api_stats" map (fd) and sums each API over CPUs.
bool read_api_stats(int map_fd, std::size_t apis, std::vector<ct_api_stats>& out);

// Reads the BPF "activity" map (bpf_abi.h: ct_activity_key), each key's slot
// in "activity_counts", incrementally: BPF never deletes an entry, and each
// read passes on what an entry counted since the previous read.
class ActivityReader {
 public:
  using Sink = std::function<void(const ct_activity_key&, const ct_activity&)>;
  // Calls `sink` for every entry that counted calls since the last read,
  // with those calls, except copies of page-locked generation `below_gen`
  // or later, which stay for a later read. Returns false if the map cannot
  // be read.
  bool read(int keys_fd, int counts_fd, std::uint64_t below_gen, const Sink& sink);

 private:
  struct KeyHash {
    std::size_t operator()(const ct_activity_key& k) const;
  };
  struct KeyEq {
    bool operator()(const ct_activity_key& a, const ct_activity_key& b) const;
  };
  std::unordered_map<ct_activity_key, ct_activity, KeyHash, KeyEq> seen_;
};

// ---- Launches and copies counted in BPF (bpf_abi.h: ct_activity_key) --------

// How BPF counts calls of `api` in summary mode: by the arguments Activity
// reads (the kernel, grid and block of launches; sizes and direction of
// copies and memsets, and the host side of host<->device copies); allocations
// and frees of page-locked memory bump the page-locked generation.
ct_activity_api activity_api(const Api& api);

// A call record rebuilt from an activity key: the key's process, API and
// arguments, a launch config holding the key's grid and block, the counted
// calls' total duration and first entry time. Decodes like a record.
struct ActivityRecord {
  alignas(8) unsigned char bytes[sizeof(ct_call) + CT_LAUNCH_CONFIG_SIZE];
  const ct_call& call() const { return *reinterpret_cast<const ct_call*>(bytes); }
};
void activity_record(const ct_activity_key& key, const ct_activity& counted, ActivityRecord& out);

}  // namespace cudatrace
