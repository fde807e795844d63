// Opening the -o file without being tricked: no symbolic link planted in a
// world-writable directory is followed, and the trace of another user's
// process is readable by root only.
#pragma once

#include <string>

namespace cudatrace {

// Opens (creates, truncates) `path` for writing. Returns the descriptor, or
// -1 with `error` set to the whole message for the user.
int open_output_file(const std::string& path, bool follow_symlinks, bool private_trace, std::string& error);

}  // namespace cudatrace
