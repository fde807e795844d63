// JSON string escaping for output that must stay valid whatever bytes a
// process name or kernel name holds.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace cudatrace {

// Appends `s` as a quoted JSON string. Control bytes are escaped; bytes that
// are not valid UTF-8 are replaced by \ufffd so every line parses.
void append_json_string(fmt::memory_buffer& out, std::string_view s);

}  // namespace cudatrace
