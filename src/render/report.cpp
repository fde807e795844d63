#include "cudatrace/render/report.h"

#include "cudatrace/render/summary_render.h"

namespace cudatrace {

void Reporter::report(fmt::memory_buffer& out, const std::vector<ct_api_stats>& run, std::uint64_t now_ns, bool final,
                      const CostReport* cost) {
  const SummarySnapshot s = summary_.snapshot(run, now_ns, final, cost);
  if (summary_.options().json)
    render_summary_json(out, s);
  else
    render_summary_text(out, s, summary_.options().full_names);
}

}  // namespace cudatrace
