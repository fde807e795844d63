#include "cudatrace/cli/probe_list.h"

#include <fmt/format.h>

namespace cudatrace {

bool probe_list_markdown(const std::vector<std::string>& files, const Selection& selection, ProbePlan plan,
                         std::string& out, std::string& error) {
  Probes probes(nullptr, nullptr, nullptr, selection, [](const std::string&) {});
  probes.set_plan(plan);
  for (const std::string& path : files) {
    std::vector<PlannedProbe> planned;
    if (!probes.plan_file(path, planned, error)) return false;
    out += probe_summary(path, planned) + "\n\n";
    out += "| API | file offset | probed instruction | probed |\n| --- | --- | --- | --- |\n";
    for (const PlannedProbe& p : planned) {
      std::string how;
      if (!p.attached)
        how = recorded_at_driver(*p.api) && plan.ops_at_driver_only ? "no: recorded at the driver"
                                                                      : "no: not selected";
      else
        how = p.entry_only ? "entry only" : "entry and return";
      out += fmt::format("| `{}` | {:#x} | {} | {} |\n", p.api->symbol, p.entry + p.place.offset, describe(p.place), how);
    }
    out += "\n";
  }
  return true;
}

}  // namespace cudatrace
