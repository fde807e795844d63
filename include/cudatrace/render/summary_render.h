// The summary report (analysis/summary_report.h: SummarySnapshot) as text
// tables (docs/summary.md) or as one JSON line (docs/json.md).
#pragma once

#include <fmt/format.h>

#include "cudatrace/analysis/summary_report.h"

namespace cudatrace {

// `full_names`: kernels by their whole demangled names, not their short ones.
void render_summary_text(fmt::memory_buffer& out, const SummarySnapshot& s, bool full_names);
void render_summary_json(fmt::memory_buffer& out, const SummarySnapshot& s);

}  // namespace cudatrace
