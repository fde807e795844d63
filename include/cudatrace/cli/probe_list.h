// `cudatrace --list-apis --lib FILE`: where each traced function of FILE is
// probed (target/prologue.h), whether the kernel emulates the probed
// instruction or single-steps it, and how its calls are recorded.
#pragma once

#include <string>
#include <vector>

#include "cudatrace/decode/selection.h"
#include "cudatrace/record/probes.h"

namespace cudatrace {

// A markdown table per file; false (with `error`) if a file cannot be read.
bool probe_list_markdown(const std::vector<std::string>& files, const Selection& selection, std::string& out,
                         std::string& error);

}  // namespace cudatrace
