// The tables by Python call site in the summary (analysis/py_sites.h;
// docs/summary.md, docs/json.md): the "py_sites" part's writers.
#include <algorithm>
#include <iterator>
#include <tuple>

#include "cudatrace/analysis/py_sites.h"
#include "cudatrace/render/format.h"
#include "cudatrace/render/json.h"
#include "cudatrace/render/summary_parts.h"
#include "cudatrace/terminal.h"

namespace cudatrace {
namespace {

using Buf = fmt::memory_buffer;

// Four tables, top sites first (the first 15 of each).
void text(Buf& out, const SummaryPart& part, const SummarySnapshot& s) {
  const std::vector<PySiteStats>& sites = static_cast<const PySitesPart&>(part).sites;
  constexpr std::size_t kTop = 15;
  // The sites with work of a kind, most first by `key` (a tuple: ties go to its next members).
  const auto top = [&](auto key) {
    std::vector<const PySiteStats*> rows;
    for (const PySiteStats& p : sites)
      if (key(p) != decltype(key(p)){}) rows.push_back(&p);
    std::stable_sort(rows.begin(), rows.end(), [&](const auto* a, const auto* b) { return key(*a) > key(*b); });
    if (rows.size() > kTop) rows.resize(kTop);
    return rows;
  };
  Table sync{{"Time (ns)", "Count", "Python call site"}, {false, false, true}, {}};
  for (const PySiteStats* p : top([](const PySiteStats& p) { return std::make_tuple(p.sync_ns, p.syncs); }))
    sync.rows.push_back({group_digits(p->sync_ns), group_digits(p->syncs), terminal_safe(site_text(*p))});
  if (!sync.rows.empty()) append_section(out, "Synchronisation by Python call site", sync);
  Table alloc{{"Allocs", "Bytes", "Never Freed", "Bytes Never Freed", "Python call site"},
              {false, false, false, false, true}, {}};
  // With records lost, what was never freed is not known ("?"): a lost record may be a free.
  const auto unfreed = [&](std::uint64_t n) { return s.records_lost ? std::string("?") : group_digits(n); };
  for (const PySiteStats* p : top([](const PySiteStats& p) { return std::make_tuple(p.unfreed_bytes, p.alloc_bytes, p.allocs); }))
    alloc.rows.push_back({group_digits(p->allocs), group_digits(p->alloc_bytes), unfreed(p->unfreed),
                          unfreed(p->unfreed_bytes), terminal_safe(site_text(*p))});
  if (!alloc.rows.empty()) append_section(out, "Device allocations by Python call site", alloc);
  Table htod{{"Copies", "Bytes", "Pageable Bytes", "Pageable %", "Python call site"}, {false, false, false, false, true}, {}};
  for (const PySiteStats* p : top([](const PySiteStats& p) { return std::make_tuple(p.htod_bytes, p.htod); }))
    htod.rows.push_back({group_digits(p->htod), group_digits(p->htod_bytes), group_digits(p->htod_pageable_bytes),
                         p->htod_bytes ? fmt::format("{:.1f}", 100.0 * p->htod_pageable_bytes / p->htod_bytes) : "-",
                         terminal_safe(site_text(*p))});
  if (!htod.rows.empty()) append_section(out, "Host-to-device copies by Python call site", htod);
  Table launch{{"Launches", "Python call site"}, {false, true}, {}};
  for (const PySiteStats* p : top([](const PySiteStats& p) { return std::make_tuple(p.launches); }))
    launch.rows.push_back({group_digits(p->launches), terminal_safe(site_text(*p))});
  if (!launch.rows.empty()) append_section(out, "Kernel launches by Python call site", launch);
  append_lost_note(out, s);
}

// ,"py_sites":[...]: the work of each Python call site.
void json(Buf& out, const SummaryPart& part, const SummarySnapshot& s) {
  const std::vector<PySiteStats>& sites = static_cast<const PySitesPart&>(part).sites;
  auto it = std::back_inserter(out);
  out.append(std::string_view(",\"py_sites\":["));
  for (std::size_t i = 0; i < sites.size(); ++i) {
    const PySiteStats& p = sites[i];
    if (i) out.push_back(',');
    if (p.unnamed) {  // calls whose innermost frame is unnamed
      out.append(std::string_view("{\"file\":null,\"line\":null,\"func\":null"));
    } else {
      out.append(std::string_view("{\"file\":"));
      append_json_string(out, p.file);
      fmt::format_to(it, ",\"line\":{},\"func\":", p.line);
      append_json_string(out, p.func);
    }
    fmt::format_to(it, ",\"syncs\":{},\"sync_ns\":{},\"allocs\":{},\"alloc_bytes\":{}", p.syncs, p.sync_ns,
                   p.allocs, p.alloc_bytes);
    if (!s.records_lost)  // else not known: a lost record may be a free
      fmt::format_to(it, ",\"never_freed\":{},\"never_freed_bytes\":{}", p.unfreed, p.unfreed_bytes);
    fmt::format_to(it, ",\"htod\":{},\"htod_bytes\":{},\"htod_pageable_bytes\":{},\"launches\":{}}}", p.htod,
                   p.htod_bytes, p.htod_pageable_bytes, p.launches);
  }
  out.push_back(']');
}

}  // namespace

const SummaryPartWriter& py_sites_writer() {
  static const SummaryPartWriter w{"py_sites", text, json};
  return w;
}

}  // namespace cudatrace
