// --by-span (docs/correlation.md): CUDA work per OpenTelemetry trace and per
// attribute of the thread context's key map (http.route=/predict), from the
// span each call carries (decode/otel.h); and the process contexts seen.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cudatrace/decode/decode.h"

namespace cudatrace {

class SpanSummary {
 public:
  void on_call(const Call& c);

  struct Stats {
    std::uint64_t calls = 0, api_ns = 0, launches = 0, sync_ns = 0, bytes = 0;
  };
  const std::map<std::string, Stats>& traces() const { return traces_; }          // by trace id (hex)
  const std::map<std::string, Stats>& attributes() const { return attributes_; }  // by "key=value"
  const Stats& outside() const { return outside_; }  // calls under no span
  // Rows of `m`, most API time first, at most `limit`.
  static std::vector<std::pair<const std::string*, const Stats*>> top(const std::map<std::string, Stats>& m,
                                                                      std::size_t limit);
  static constexpr std::size_t kTopTraces = 10;

 private:
  std::map<std::string, Stats> traces_, attributes_;
  Stats outside_;
};

// Whether a call synchronises with the GPU (its time is time waited).
bool is_synchronisation(const Call& c);

}  // namespace cudatrace
