#include "cudatrace/analysis/py_sites.h"

#include "cudatrace/analysis/memory.h"
#include "cudatrace/analysis/pipeline.h"
#include "cudatrace/decode/facet.h"
#include "cudatrace/decode/transfer.h"

namespace cudatrace {

std::string site_text(const PySiteStats& p) { return source_site_text({p.file, p.func, p.line, p.unnamed}); }

void PySites::on_displayed_call(const Call& c, const MemoryTracker& memory) {
  if (c.unfinished || !c.outermost()) return;
  const std::optional<SourceSite> top = source_site_of(c);
  if (!top) return;
  PySiteStats& s = sites_[source_site_key(*top)];
  if (s.file.empty() && s.func.empty()) {
    s.file = top->file;
    s.func = top->func;
    s.line = top->line;
    s.unnamed = top->unnamed;
  }
  const Effect e = c.api->effect();
  if (e == Effect::StreamSync || e == Effect::EventSync || e == Effect::DeviceSync) {
    ++s.syncs;
    s.sync_ns += c.dur_ns;
    return;
  }
  if (!c.counted() || c.captured) return;
  if (e == Effect::AllocDevice || e == Effect::AllocManaged) {
    ++s.allocs;
    s.alloc_bytes += role_bytes(c);
  } else if (e == Effect::Launch) {
    ++s.launches;
  } else if (e == Effect::Copy && copy_direction(c) == Direction::HtoD) {
    const std::uint64_t bytes = role_bytes(c);
    ++s.htod;
    s.htod_bytes += bytes;
    const auto src = role_value(c, Role::Source);
    if (src && !memory.pinned(c.pid, *src, bytes)) s.htod_pageable_bytes += bytes;
  }
}

std::shared_ptr<const SummaryPart> PySites::part(const SummaryPartInput& in) const {
  if (sites_.empty()) return nullptr;
  std::map<std::string, PySiteStats> sites = sites_;
  for (const Allocation* a : in.memory.outstanding()) {
    if (a->site.empty() || in.records_lost) continue;  // perhaps freed: the free's record may be lost
    const auto it = sites.find(a->site);
    if (it == sites.end()) continue;
    it->second.unfreed += 1;
    it->second.unfreed_bytes += a->bytes;
  }
  auto part = std::make_shared<PySitesPart>();
  for (auto& [key, site] : sites) part->sites.push_back(std::move(site));
  return part;
}

// Summary mode only: the tables are the summary's.
std::unique_ptr<FacetAnalysis> make_py_sites(const PipelineOptions& opts) {
  return opts.tables ? std::make_unique<PySites>() : nullptr;
}

}  // namespace cudatrace
