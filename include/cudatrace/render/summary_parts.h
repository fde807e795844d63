// The writers of the facet analyses' summary parts (analysis/facet_analysis.h),
// by the part's name: the text and JSON summaries (render/text_summary.cpp,
// json_summary.cpp) write each part of a snapshot at its place through these
// and name none. Each part's writers live in a file of their own.
#pragma once

#include <fmt/format.h>

#include <string_view>

#include "cudatrace/analysis/summary_report.h"

namespace cudatrace {

struct SummaryPartWriter {
  std::string_view name;  // SummaryPart::name
  // Its text: tables, each with the lost-records note where it is built from records.
  void (*text)(fmt::memory_buffer& out, const SummaryPart& part, const SummarySnapshot& s);
  // Its JSON: fields of the summary object (,"name":...), or, at SummaryPlace::End, a line of its own.
  void (*json)(fmt::memory_buffer& out, const SummaryPart& part, const SummarySnapshot& s);
};

// The writers of part `name`: every part an analysis makes has them.
const SummaryPartWriter& summary_part_writer(std::string_view name);

// The summary's parts at `place`.
template <class F>
void for_parts_at(const SummarySnapshot& s, SummaryPlace place, F&& f) {
  for (const auto& part : s.parts)
    if (part->place() == place) f(*part, summary_part_writer(part->name()));
}

// Under a table built from call records when some were lost: its numbers
// fall short (the CUDA API summary is counted in BPF).
void append_lost_note(fmt::memory_buffer& out, const SummarySnapshot& s);

}  // namespace cudatrace
