// Output formats. Each takes decoded calls and appends to an in-memory
// buffer that the session hands to its writer thread (output_writer.h) after
// every batch it drains, so pipes see whole lines promptly without a write
// per call.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "cudatrace/decode/decode.h"
#include "cudatrace/render/warning.h"
#include "cudatrace/trace/overhead.h"

namespace cudatrace {

struct EndStats {
  std::uint64_t calls = 0;           // calls written
  std::uint64_t unfinished = 0;      // calls that never returned
  std::uint64_t lost_ringbuf = 0;    // records dropped: ring buffer full
  std::uint64_t lost_threads = 0;    // calls not tracked: thread map full
  std::uint64_t depth_overflow = 0;  // calls not tracked: nesting too deep
  std::uint64_t unmatched = 0;       // frames skipped by longjmp/exceptions
  std::uint64_t lost_control = 0;    // loader/exit notifications dropped
  const CostReport* cost = nullptr;  // what tracing cost, if it was measured
  std::uint64_t lost_output = 0;     // records formatted but not written: the output's consumer fell behind,
  std::string output_failure;        // or writing failed: why ("writing F: No space left on device"), else empty
  std::uint64_t lost() const { return lost_ringbuf + lost_threads + depth_overflow + lost_output; }
};


class Output {
 public:
  virtual ~Output() = default;
  virtual void header() {}
  virtual void call(const Call& c) = 0;
  virtual void unfinished(const Call& c) = 0;
  virtual void warning(const Call&, const Warning&) {}
  // The closing record: the JSON end line, or the text-mode summary, which
  // goes to `summary` (stderr) rather than the trace.
  virtual void end(const EndStats& s, fmt::memory_buffer& summary) = 0;

  fmt::memory_buffer& buffer() { return buf_; }

 protected:
  fmt::memory_buffer buf_;
};

// The closing summary as text (what text mode prints on stderr).
void append_end_summary(const EndStats& s, fmt::memory_buffer& out);

// bcc-style columns; `start_ns` is the CLOCK_MONOTONIC time shown as 0.
// Kernels by their short names (KernelNames::short_name) unless `full_names`.
std::unique_ptr<Output> make_text_output(std::uint64_t start_ns, bool full_names = false);
// JSON Lines, documented in docs/json.md.
std::unique_ptr<Output> make_json_output();

}  // namespace cudatrace
