// The analyses of a facet's context (decode/facet.h: Facet::analyses names
// a facet's): the tables by Python call site, the processes' published
// contexts, the work per span. The pipeline makes those its options ask for
// and feeds them each call; the summary report takes each one's part of a
// snapshot, and the summary writers render the parts by name
// (render/summary_parts.h). None of them names an analysis.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "cudatrace/decode/decode.h"

namespace cudatrace {

class MemoryTracker;
struct PipelineOptions;

// Where the summary shows a part: before the tables; among the tables
// (--summary), after the allocations never freed; or after the report (a
// line of its own in JSON).
enum class SummaryPlace { Top, Tables, End };

// A facet analysis's part of a summary snapshot.
class SummaryPart {
 public:
  virtual ~SummaryPart() = default;
  // Its writers' name (render/summary_parts.h), and its name in a JSON
  // report's "incomplete" list.
  virtual std::string_view name() const = 0;
  virtual SummaryPlace place() const = 0;
  // Built from call records: incomplete when some were lost.
  virtual bool from_records() const = 0;
};

// What a part is made from besides its analysis.
struct SummaryPartInput {
  const MemoryTracker& memory;
  bool final = false;             // the whole run, at exit
  std::uint64_t records_lost = 0;  // call records lost so far
};

class FacetAnalysis {
 public:
  virtual ~FacetAnalysis() = default;
  // Every call, after the stream model.
  virtual void on_any_call(const Call&) {}
  // A call of a displayed API, after memory accounting saw it.
  virtual void on_displayed_call(const Call&, const MemoryTracker&) {}
  // State kept for a process that exited goes.
  virtual void forget_process(std::uint32_t) {}
  // Its part of a snapshot; nullptr: it has none to show. Valid while the
  // analysis is and sees no call.
  virtual std::shared_ptr<const SummaryPart> part(const SummaryPartInput& in) const = 0;
};

// An analysis a facet may name: made for a pipeline's options, or not
// (nullptr) under them.
struct FacetAnalysisKind {
  std::string_view name;
  std::unique_ptr<FacetAnalysis> (*make)(const PipelineOptions&);
};
// Every kind, each defined in its analysis's file.
const std::vector<FacetAnalysisKind>& facet_analysis_kinds();

}  // namespace cudatrace
