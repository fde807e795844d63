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
// The groups: traced by default or not, how many APIs of each layer, what
// they hold (the end of --list-apis, docs/apis.md and the README).
std::string api_groups_markdown();
// The groups traced by default, or the others: "mem, xfer, ...".
std::string group_names(bool traced_by_default);

}  // namespace cudatrace
