// Names from the traced system (process names, file paths, symbols) on a
// terminal: every stage that prints one writes it this way.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace cudatrace {

// A name from the traced system (process name, file path, symbol) made safe
// for a terminal: printable ASCII as it is, every other byte and '\' as
// \xNN, so that no control sequence, line break or invalid UTF-8 gets out
// and "\x0a" can only mean a newline byte. The trace's text lines and every
// message on stderr write such names this way.
void append_terminal_safe(fmt::memory_buffer& out, std::string_view s);
std::string terminal_safe(std::string_view s);

}  // namespace cudatrace
