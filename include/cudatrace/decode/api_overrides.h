// What the toolkit's headers cannot say about an API, in one place
// (src/decode/api_overrides.cpp): its group, its effect for the analyses,
// and, in hand-written rows, how its arguments are decoded beyond their C
// types (host stubs, copy kinds, launch configs, kernel node params, ...)
// and the functions no header declares.
#pragma once

#include <string_view>
#include <vector>

#include "cudatrace/decode/api_table.h"

namespace cudatrace {

// Rows written by hand. One that a header declares replaces the generated
// row of the same name (keeping the header's prototype and per-thread forms);
// the others are functions no header declares: kernel registration, NVTX
// probe targets, NCCL.
const std::vector<ApiSpec>& hand_rows();

// A row written by hand, placed by a rule marked core, or whose effect an
// analysis reads: what cudatrace relies on a library of its layer to export
// (a library without one is warned about). The other generated rows may be
// missing from an older library unsaid.
bool is_core_api(const Api& a);

struct Placement {
  Group group;
  Effect effect;
  bool core;  // ApiSpec::core
};
// The group and effect of a generated row that has no hand-written row, from
// its name or its operation name (the name without its _vN suffix).
Placement placement(std::string_view name, std::string_view operation);

}  // namespace cudatrace
