// JSON values for every output: string escaping that stays valid whatever
// bytes a process name or kernel name holds, and decoded argument values.
#pragma once

#include <fmt/format.h>

#include <string_view>

#include "cudatrace/decode/decode.h"

namespace cudatrace {

// Appends `s` as a quoted JSON string. Control bytes are escaped; bytes that
// are not valid UTF-8 are replaced by \ufffd so every line parses.
void append_json_string(fmt::memory_buffer& out, std::string_view s);

// A decoded argument value as JSON records write it (docs/json.md).
void append_json_value(fmt::memory_buffer& out, const Value& v);

}  // namespace cudatrace
