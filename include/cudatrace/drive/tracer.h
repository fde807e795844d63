// What the command line runs: a source driven into the outputs the options
// ask for (driver.h). Each returns the process exit status.
#pragma once

#include <string>

#include "cudatrace/options.h"

namespace cudatrace {

// Traces live (record/recorder.h): the command's own status in command mode.
int run_tracer(const Options& opts);

// `cudatrace report TRACE.jsonl` (record/saved_trace.h; "-": standard input):
// the text or JSON trace with its annotations, the --summary/--hist/--insights
// reports and a --perfetto timeline, as tracing live would have written them.
int run_report(const Options& opts, const std::string& path);

}  // namespace cudatrace
