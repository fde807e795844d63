// The summary parts' writers, by name (render/summary_parts.h).
#include "cudatrace/render/summary_parts.h"

#include <cstdlib>
#include <vector>

namespace cudatrace {

// Each defined in its part's file.
const SummaryPartWriter& py_sites_writer();
const SummaryPartWriter& processes_writer();
const SummaryPartWriter& spans_writer();

const SummaryPartWriter& summary_part_writer(std::string_view name) {
  static const std::vector<const SummaryPartWriter*> all = {&py_sites_writer(), &processes_writer(), &spans_writer()};
  for (const SummaryPartWriter* w : all)
    if (w->name == name) return *w;
  std::abort();  // a part without writers: a bug, which every summary test would show
}

}  // namespace cudatrace
