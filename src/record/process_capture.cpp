// The process captures (record/process_capture.h), in the order they look
// at a process.
#include "cudatrace/record/process_capture.h"

namespace cudatrace {

std::vector<std::unique_ptr<ProcessCapture>> make_process_captures(const CaptureSetup& setup) {
  std::vector<std::unique_ptr<ProcessCapture>> out;
  for (auto make : {make_thread_context_capture, make_python_capture})
    if (std::unique_ptr<ProcessCapture> c = make(setup)) out.push_back(std::move(c));
  return out;
}

}  // namespace cudatrace
