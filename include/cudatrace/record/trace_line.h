// A line of a --json trace (docs/json.md) parsed back into the record the
// tracer decoded it from, and its facets (decode/facet.h) read by their own
// code: `cudatrace report` decodes and analyses it exactly as it was live.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cudatrace/accounting.h"
#include "cudatrace/bpf_abi.h"
#include "cudatrace/decode/decode.h"
#include "cudatrace/decode/facet.h"

namespace cudatrace {

class TraceLine {
 public:
  // FacetLine: a facet's line of its own (decode/facet.h: Facet::line_type).
  enum class Type { Call, Warning, End, FacetLine };

  // Parses one line of a --json trace; false with `error` set (one phrase,
  // no line number) when it is not one. What the facets keep from line to
  // line is in `lines` (nullptr: a line read alone).
  bool parse(std::string_view line, std::string& error, FacetLines* lines = nullptr);

  Type type() const { return type_; }
  // Type::Call: the record and payload as the ring buffer held them
  // (a "call" or "unfinished" line).
  const ct_call& record() const { return *reinterpret_cast<const ct_call*>(buf_.data()); }
  // Launches of a known kernel: the function handle and the kernel's mangled name.
  std::uint64_t kernel_handle() const { return kernel_handle_; }
  const std::string& kernel_mangled() const { return kernel_mangled_; }
  // The line's facets (decode/facet.h), read into a call that holds
  // nothing else: each facet carries its own to the decoded record.
  const Call& facets() const { return facets_; }
  // Type::Warning: where the call site the warning was about is, as the
  // tracer named it live (the warning itself is found again from the calls).
  struct WarningSite {
    std::uint32_t pid = 0;
    std::uint64_t caller = 0;
    std::string location;
    std::string gpu_code;  // a failed launch's, when it had none for the GPU
  };
  const WarningSite& warning() const { return warning_; }
  // Type::End: the loss counters, and the calls and unfinished calls the
  // trace holds by its own count (report counts them again, and says when
  // they differ).
  const LossCounts& end() const { return end_; }
  std::uint64_t end_calls() const { return end_calls_; }
  std::uint64_t end_unfinished() const { return end_unfinished_; }

 private:
  Type type_ = Type::Call;
  std::vector<std::uint64_t> buf_;  // ct_call and payload: 8-byte aligned
  std::uint64_t kernel_handle_ = 0;
  std::string kernel_mangled_;
  Call facets_;
  WarningSite warning_;
  LossCounts end_;
  std::uint64_t end_calls_ = 0, end_unfinished_ = 0;
};

}  // namespace cudatrace
