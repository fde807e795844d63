// The process captures (record/process_capture.h): the tracee runs one for
// each context BPF reads in a process, and only those.
#include "cudatrace/record/process_capture.h"

#include <gtest/gtest.h>

using namespace cudatrace;

namespace {

std::size_t captures_made(const ct_config& settings) {
  BpfObject bpf;  // not loaded: a capture finds no map in it, and looks at no process here
  Symbolizer symbolizer;
  const Options opts;
  return make_process_captures({bpf, settings, symbolizer, opts, false}).size();
}

}  // namespace

TEST(ProcessCapture, OneForEachContextBpfReadsInAProcess) {
  ct_config settings{};
  EXPECT_EQ(captures_made(settings), 0u) << "nothing is read in a process for a context BPF does not capture";
  settings.capture_stack = 1;  // read from the thread's registers: nothing to find in the process
  EXPECT_EQ(captures_made(settings), 0u);
  settings.thread_ctx = 1;
  EXPECT_EQ(captures_made(settings), 1u) << "the OpenTelemetry thread context";
  settings.py_stack = 1;
  EXPECT_EQ(captures_made(settings), 2u) << "and the Python interpreter's frames";
  settings.thread_ctx = 0;
  EXPECT_EQ(captures_made(settings), 1u);
}
