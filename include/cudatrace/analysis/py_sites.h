// --py-stack's summary tables (docs/python.md): CUDA work by Python call
// site, where the facet that places calls in the program's source says each
// call was made (decode/facet.h: SourceSite; the innermost Python frame):
// synchronisation time, allocations and their bytes never freed,
// host-to-device bytes with the pageable share, launches. A facet analysis
// (facet_analysis.h), "py_sites".
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cudatrace/analysis/facet_analysis.h"
#include "cudatrace/decode/decode.h"

namespace cudatrace {

class MemoryTracker;

struct PySiteStats {
  std::string file, func;  // the site: file (whole path), line, function
  int line = 0;
  bool unnamed = false;  // calls whose site could not be named
  std::uint64_t syncs = 0, sync_ns = 0;  // outermost synchronisations, their time
  std::uint64_t allocs = 0, alloc_bytes = 0, unfreed_bytes = 0;  // unfreed: filled by the report
  std::uint64_t unfreed = 0;
  std::uint64_t htod = 0, htod_bytes = 0, htod_pageable_bytes = 0;
  std::uint64_t launches = 0;
};

// "file.py:412 func" with the file's base name; "?" when unnamed.
std::string site_text(const PySiteStats& p);

// The snapshot's part: the whole run by call site, with the bytes never
// freed of each.
struct PySitesPart final : SummaryPart {
  std::vector<PySiteStats> sites;
  std::string_view name() const override { return "py_sites"; }
  SummaryPlace place() const override { return SummaryPlace::Tables; }
  bool from_records() const override { return true; }
};

class PySites final : public FacetAnalysis {
 public:
  void on_displayed_call(const Call& c, const MemoryTracker& memory) override;
  // Nothing while no call had a site.
  std::shared_ptr<const SummaryPart> part(const SummaryPartInput& in) const override;
  const std::map<std::string, PySiteStats>& sites() const { return sites_; }

 private:
  std::map<std::string, PySiteStats> sites_;  // by source_site_key
};

}  // namespace cudatrace
