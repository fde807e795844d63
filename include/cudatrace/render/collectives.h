// The --summary NCCL collectives table and rank skew, as text and as JSON.
#pragma once

#include <fmt/format.h>

#include "cudatrace/analysis/nccl.h"

namespace cudatrace {

// The text tables (nothing without collectives).
void append_collectives_text(fmt::memory_buffer& out, const NcclTracker& nccl);
// The JSON members ",\"collectives\":[...],\"rank_skew\":{...}".
void append_collectives_json(fmt::memory_buffer& out, const NcclTracker& nccl);

}  // namespace cudatrace
