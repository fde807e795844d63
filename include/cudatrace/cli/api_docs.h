// Renders the API table for `cudatrace --list-apis` and docs/apis.md.
#pragma once

#include <string>

#include "cudatrace/decode/selection.h"
#include "cudatrace/record/probes.h"

namespace cudatrace {

// How each API is recorded under `plan`: "entry and return", "at entry"
// (an asynchronous operation: no latency or status), or "by its driver
// call" (a runtime operation left unprobed, seen at the driver).
const char* recording(const Api& a, ProbePlan plan);

std::string api_list_markdown(const Selection& selection, ProbePlan plan = {});
// One JSON line per API; "probed":false for those recorded by their driver call.
std::string api_list_json(const Selection& selection, ProbePlan plan = {});

}  // namespace cudatrace
