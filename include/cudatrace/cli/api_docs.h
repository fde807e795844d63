// Renders the API table for `cudatrace --list-apis` and docs/apis.md.
#pragma once

#include <string>

#include "cudatrace/decode/selection.h"

namespace cudatrace {

std::string api_list_markdown(const Selection& selection);
std::string api_list_json(const Selection& selection);

}  // namespace cudatrace
