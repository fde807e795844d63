// The span facet's analyses (facet_analysis.h): --by-span (docs/correlation.md),
// CUDA work per trace and per attribute of the thread context's key map
// (http.route=/predict), from the span each call carries ("spans"); and the
// resources of the processes that published a context ("processes").
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cudatrace/analysis/facet_analysis.h"
#include "cudatrace/decode/decode.h"

namespace cudatrace {

class SpanSummary final : public FacetAnalysis, public SummaryPart {
 public:
  void on_displayed_call(const Call& c, const MemoryTracker&) override;
  // The final report's: itself.
  std::shared_ptr<const SummaryPart> part(const SummaryPartInput& in) const override;
  std::string_view name() const override { return "spans"; }
  SummaryPlace place() const override { return SummaryPlace::End; }
  bool from_records() const override { return true; }

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

// The resource attributes each traced process published (docs/correlation.md),
// by pid: those of the first kMaxListed processes; the others are counted
// (unlisted), as any process may publish one.
class ProcessResources final : public FacetAnalysis, public SummaryPart {
 public:
  static constexpr std::size_t kMaxListed = 4096;
  void on_any_call(const Call& c) override;
  // Each snapshot's, while one is listed: itself.
  std::shared_ptr<const SummaryPart> part(const SummaryPartInput& in) const override;
  std::string_view name() const override { return "processes"; }
  SummaryPlace place() const override { return SummaryPlace::Top; }
  bool from_records() const override { return false; }
  // A process that exited: its entry stays for the summary, a reused pid publishes afresh.
  void forget_process(std::uint32_t pid) override { seen_.erase(pid); }

  using Resource = std::vector<std::pair<std::string, std::string>>;
  const std::map<std::uint32_t, Resource>& processes() const { return processes_; }
  std::uint64_t unlisted() const { return unlisted_; }

 private:
  std::map<std::uint32_t, Resource> processes_;
  std::uint64_t unlisted_ = 0;
  std::map<std::uint32_t, std::uint64_t> seen_;  // the generation of the source's context, to copy each once
};

// Whether a call synchronises with the GPU (its time is time waited).
bool is_synchronisation(const Call& c);

}  // namespace cudatrace
