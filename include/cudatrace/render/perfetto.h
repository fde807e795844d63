// The --perfetto timeline's layout that its readers rely on (docs/timeline.md,
// scripts/render-timeline.py); the writer is make_perfetto_writer (writer.h).
#pragma once

#include <cstdint>

namespace cudatrace {

// Stream lanes are pseudo-threads of their process with this tid + lane
// number: above any Linux tid (pid_max is at most 2^22).
inline constexpr std::uint32_t kStreamLaneTidBase = 1u << 30;
// --gpu-time: a stream's estimated GPU track, after the lanes.
inline constexpr std::uint32_t kGpuEstimateTidBase = kStreamLaneTidBase + (1u << 29);

}  // namespace cudatrace
