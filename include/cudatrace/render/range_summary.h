// The --summary --by-range table (text) or its JSON line.
#pragma once

#include <fmt/format.h>

#include "cudatrace/analysis/nvtx.h"

namespace cudatrace {

void append_range_summary(fmt::memory_buffer& out, const RangeSummary& summary, bool json);

}  // namespace cudatrace
