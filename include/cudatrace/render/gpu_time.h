// --gpu-time in the summary: the text section and the JSON member
// (docs/gpu-time.md, docs/json.md). The timeline's estimated GPU tracks are
// perfetto.cpp's.
#pragma once

#include <fmt/format.h>

#include "cudatrace/analysis/gpu_time.h"

namespace cudatrace {

// "\nGPU time (estimated from host events...):\n\n" with the shares, the bounds and the per-kernel estimates.
void append_gpu_time_text(fmt::memory_buffer& out, const GpuTimeReport& r);
// ,"gpu_time":{...}
void append_gpu_time_json(fmt::memory_buffer& out, const GpuTimeReport& r);

}  // namespace cudatrace
