#include "cudatrace/cli/probe_list.h"

#include <fmt/format.h>

namespace cudatrace {

std::string probe_summary(const std::string& path, const std::vector<PlannedProbe>& planned) {
  std::size_t probes = 0, emulated = 0, entry_only = 0;
  std::string stepped;
  int listed = 0;
  for (const PlannedProbe& p : planned) {
    if (!p.attached) continue;
    ++probes;
    entry_only += p.entry_only;
    if (p.place.emulated) {
      ++emulated;
    } else if (listed++ < 4) {
      stepped += fmt::format("{}{} {}", stepped.empty() ? "" : ", ", p.api->symbol, describe(p.place));
    }
  }
  const std::size_t steps = probes - emulated;
  return fmt::format("{}: {} probes, {} on instructions the kernel emulates, {} single-stepped{}; {} at entry only",
                     path.substr(path.rfind('/') + 1), probes, emulated, steps,
                     steps ? " (" + stepped + (steps > 4 ? ", ..." : "") + ")" : "", entry_only);
}

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
