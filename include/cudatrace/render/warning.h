// A problem the analyses found in the traced program (the pageable-copy
// check). The session prints `message` to stderr; sinks may write it too
// (JSON Lines: a "warning" line).
#pragma once

#include <cstdint>
#include <string>

namespace cudatrace {

struct Warning {
  const char* kind;        // "pageable_async_copy"
  std::uint64_t host_ptr;  // the host memory concerned
  std::string location;    // the call site: "app+0x1234 (main+0x2a)"
  std::string message;     // one line, without "cudatrace: warning: "
};

}  // namespace cudatrace
