#include "cudatrace/drive/tracer.h"

#include "cudatrace/drive/driver.h"
#include "cudatrace/record/recorder.h"
#include "cudatrace/record/saved_trace.h"

namespace cudatrace {

int run_tracer(const Options& opts) {
  Recorder recorder(opts);
  Driver driver(opts, recorder);
  return driver.run();
}

int run_report(const Options& opts, const std::string& path) {
  SavedTrace trace(path);
  Driver driver(opts, trace);
  return driver.run();
}

}  // namespace cudatrace
