// Renders the API table for `cudatrace --list-apis` and docs/apis.md.
#pragma once

#include <string>

#include "cudatrace/decode/selection.h"
#include "cudatrace/decode/api_table.h"

namespace cudatrace {

// How each API's calls are recorded: each with its latency and status, a
// driver call without out-params made by a runtime call as part of that
// call's record (bpf_abi.h, bit 60).
const char* recording(const Api& a);

std::string api_list_markdown(const Selection& selection);
// One JSON line per API.
std::string api_list_json(const Selection& selection);
// The groups: traced by default or not, how many APIs of each layer, what
// they hold (the end of --list-apis, docs/apis.md and docs/guide.md).
std::string api_groups_markdown();
// The groups traced by default, or the others: "mem, xfer, ...".
std::string group_names(bool traced_by_default);

}  // namespace cudatrace
