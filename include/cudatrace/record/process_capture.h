// What the record stage does in each traced process for a context that BPF
// reads there (decode/facet.h: FacetCapture): it finds where the process
// keeps it (the Python interpreter's frames, the OpenTelemetry thread
// context) and tells BPF, forgets it when the process goes, and says at the
// end what could not be read. The tracee runs those BPF was loaded for at
// each look at a process's maps, and names none of them.
#pragma once

#include <sys/types.h>

#include <memory>
#include <vector>

#include "cudatrace/decode/facet.h"
#include "cudatrace/options.h"
#include "cudatrace/record/bpf_object.h"
#include "cudatrace/target/symbolizer.h"

namespace cudatrace {

class ProcessCapture {
 public:
  virtual ~ProcessCapture() = default;
  // `pid`'s maps: at its first look and after each library load.
  virtual void look(pid_t pid, const std::vector<Mapping>& maps) = 0;
  // `pid` exited: a reused pid is another program.
  virtual void forget(pid_t pid) = 0;
  // Once tracing has ended: what could not be read, said on stderr.
  virtual void say_what_was_missed() const {}
  // How records of its context are named while they are decoded: it
  // installs its facet's namer (decode/facet.h: FacetNames), if it names.
  virtual void name_facet(FacetNames&) {}
  // A library load stopped `pid` (--dlopen-stop): what it must read while
  // the process waits.
  virtual void library_loaded(pid_t) {}
};

// What a capture works with: the loaded BPF object and what it was loaded
// with (which captures are made), the symbolizer, and whether probes fire
// in one process only.
struct CaptureSetup {
  BpfObject& bpf;
  const ct_config& settings;
  Symbolizer& symbolizer;
  const Options& opts;
  bool bound_to_process;
};

// The captures for the settings `setup.bpf` was loaded with, each from its
// own file.
std::vector<std::unique_ptr<ProcessCapture>> make_process_captures(const CaptureSetup& setup);
std::unique_ptr<ProcessCapture> make_python_capture(const CaptureSetup& setup);
std::unique_ptr<ProcessCapture> make_thread_context_capture(const CaptureSetup& setup);

}  // namespace cudatrace
