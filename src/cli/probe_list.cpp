#include "cudatrace/cli/probe_list.h"

#include <fmt/format.h>

#include "cudatrace/cli/api_docs.h"

namespace cudatrace {

bool probe_list_markdown(const std::vector<std::string>& files, const Selection& selection, std::string& out,
                         std::string& error) {
  Probes probes(nullptr, nullptr, nullptr, selection, [](const std::string&) {});
  for (const std::string& path : files) {
    std::vector<PlannedProbe> planned;
    if (!probes.plan_file(path, planned, error)) return false;
    out += probe_summary(path, planned) + "\n\n";
    out += "| API | file offset | probed instruction | probed |\n| --- | --- | --- | --- |\n";
    for (const PlannedProbe& p : planned) {
      const char* how = p.attached ? recording(*p.api) : "no: not selected";
      out += fmt::format("| `{}` | {:#x} | {} | {} |\n", p.api->symbol, p.entry + p.place.offset, describe(p.place), how);
    }
    out += "\n";
  }
  return true;
}

}  // namespace cudatrace
