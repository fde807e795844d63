// The one clock every stage reads: CLOCK_MONOTONIC, which BPF's
// bpf_ktime_get_ns() also reads, so that record times and user-space times
// compare.
#pragma once

#include <time.h>

#include <cstdint>

namespace cudatrace {

inline std::uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1000000000ull + std::uint64_t(ts.tv_nsec);
}

}  // namespace cudatrace
