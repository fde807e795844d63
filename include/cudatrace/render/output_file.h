// Opening an output file (the -o trace, the --perfetto timeline) without
// being tricked: no symbolic link planted in a world-writable directory is
// followed, a trace of another user's process is readable by root only, and
// two outputs never write one file.
#pragma once

#include <functional>
#include <string>

namespace cudatrace {

struct OutputFileOptions {
  bool follow_symlinks = false;  // --output-follow-symlinks: also in a world-writable directory
  bool private_trace = false;    // it holds another user's trace: 0600
  // Asked while a FIFO's reader is waited for: true gives up the wait.
  std::function<bool()> stop_waiting;
};

// Opens (creates, truncates) `path` for writing. Returns the descriptor, or
// -1 with `error` set to the whole message for the user. A FIFO that nobody
// reads yet is waited for, with a line on stderr that says so, until a
// reader comes or `stop_waiting` says to give up (-1, `error` empty).
int open_output_file(const std::string& path, const OutputFileOptions& options, std::string& error);

// Whether `path` names anything (a file, a FIFO, a link): an output that
// did not exist is removed again if tracing never started.
bool output_file_exists(const std::string& path);

// Whether writing to `a` and to `b` would write one regular file: the same
// file under other names (hard links, symbolic links, other paths to its
// directory), or for a file not created yet, the same name in the same
// directory. Devices such as /dev/null may be shared.
bool same_output_file(const std::string& a, const std::string& b);
// The same for a file already open (standard output, the trace being read).
bool same_output_file(const std::string& path, int fd);

}  // namespace cudatrace
