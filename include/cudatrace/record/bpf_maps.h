// Reading the BPF maps summary mode fills (record.h): the per-CPU per-API
// statistics and the activity counted without records.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "cudatrace/record.h"

namespace cudatrace {

// Reads the per-CPU "api_stats" map (fd) and sums each API over CPUs.
bool read_api_stats(int map_fd, std::size_t apis, std::vector<ct_api_stats>& out);

// Reads the BPF "activity" map (record.h: ct_activity_key) incrementally:
// BPF never deletes an entry, and each read passes on what an entry counted
// since the previous read.
class ActivityReader {
 public:
  using Sink = std::function<void(const ct_activity_key&, const ct_activity&)>;
  // Calls `sink` for every entry that counted calls since the last read,
  // with those calls, except copies of page-locked generation `below_gen`
  // or later, which stay for a later read. Returns false if the map cannot
  // be read.
  bool read(int map_fd, std::uint64_t below_gen, const Sink& sink);

 private:
  struct KeyHash {
    std::size_t operator()(const ct_activity_key& k) const;
  };
  struct KeyEq {
    bool operator()(const ct_activity_key& a, const ct_activity_key& b) const;
  };
  std::unordered_map<ct_activity_key, ct_activity, KeyHash, KeyEq> seen_;
};

}  // namespace cudatrace
