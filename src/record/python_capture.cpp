// --py-stack in each process (docs/python.md): where its interpreter keeps
// its frames, told to BPF, and its code objects' frees watched so that the
// identities BPF keeps end with them.
#include <bpf/bpf.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cudatrace/decode/py_stack.h"
#include "cudatrace/record/process_capture.h"
#include "cudatrace/terminal.h"

namespace cudatrace {
namespace {

class PythonCapture final : public ProcessCapture {
 public:
  explicit PythonCapture(const CaptureSetup& setup) : s_(setup), processes_(setup.bpf.map_fd("py_procs")) {}

  void look(pid_t pid, const std::vector<Mapping>&) override {
    if (s_.symbolizer.python().knows(pid) || unreadable_.count(pid)) return;
    std::string why;
    const std::optional<PyInterpreter> py = s_.symbolizer.find_python(pid, why);
    if (!py) {
      if (why.empty()) return;  // no Python (yet: a library loaded later may bring it)
      unreadable_.insert(pid);
      warn_line(fmt::format("pid {}: {}; its calls are traced without Python stacks", pid, why));
      return;
    }
    if (!tell_bpf(pid, py->bpf)) {
      unreadable_.insert(pid);
      warn_line(fmt::format("pid {}: cannot tell BPF where Python {} keeps its frames: {}; its calls are traced "
                            "without Python stacks", pid, py->version, std::strerror(errno)));
      return;
    }
    s_.symbolizer.python().set(pid, py->code);
    const bool kept = watch_code_frees(pid, *py);
    if (s_.opts.verbose) {
      const std::string identities =
          kept ? fmt::format("kept until one is freed (its deallocator: 0x{:x} in the file)", py->code_dealloc_offset)
               : "read at every call";
      std::fprintf(stderr, "cudatrace: pid %d: Python %s, _PyRuntime at 0x%llx; code object identities %s\n", pid,
                   py->version.c_str(), static_cast<unsigned long long>(py->bpf.runtime), identities.c_str());
    }
  }

  void forget(pid_t pid) override {
    const auto key = static_cast<std::uint32_t>(pid);
    bpf_map_delete_elem(processes_, &key);
    unreadable_.erase(pid);
  }

  // Frames are named by their code objects, as the symbolizer reads them.
  void name_facet(FacetNames& names) override {
    Symbolizer& symbolizer = s_.symbolizer;
    names.set(py_stack_facet(), PyFrameNamer([&symbolizer](std::uint32_t pid, const ct_py_frame* frames, std::size_t n,
                                                           PyStack& out) {
      symbolizer.python().name(static_cast<pid_t>(pid), frames, n, out);
    }));
  }

  // What could not be read is said, not left out silently.
  void say_what_was_missed() const override {
    if (const std::size_t n = unreadable_.size())
      warn_line(fmt::format("--py-stack: {} process{} with a Python interpreter whose frames cannot be read "
                            "(py_unreadable, said above); traced without Python stacks", n, n == 1 ? "" : "es"));
    if (const std::uint64_t n = s_.symbolizer.python().unnamed())
      warn_line(fmt::format("--py-stack: {} Python frames are unnamed (\"?\", py_unnamed): their code objects "
                            "could not be read, or had been freed or replaced, when their records were read", n));
  }

 private:
  // Probes `py`'s code object deallocator and gives the process its epoch
  // (bpf_abi.h: ct_py_layout.code_epoch); false if not done.
  bool watch_code_frees(pid_t pid, const PyInterpreter& py) {
    if (!py.code_dealloc_offset) return false;
    std::string error;
    // Its program ends the identities cached in BPF (bpf_abi.h: ct_py_layout).
    if (!s_.bpf.attach_program(kCodeFreed, py.file, s_.bound_to_process ? pid : -1, py.code_dealloc_offset, error)) {
      if (s_.opts.verbose) std::fprintf(stderr, "cudatrace: pid %d: %s\n", pid, terminal_safe(error).c_str());
      return false;
    }
    // Set once the deallocator is probed, so that no free goes unseen; a
    // number of this process's own, so that no cache of another applies.
    ct_py_layout layout = py.bpf;
    layout.code_epoch = ++epochs_ * CT_PY_EPOCH_STEP;
    return tell_bpf(pid, layout);
  }

  // Where process `pid`'s interpreter keeps its frames ("py_procs").
  bool tell_bpf(pid_t pid, const ct_py_layout& layout) {
    const auto key = static_cast<std::uint32_t>(pid);
    return bpf_map_update_elem(processes_, &key, &layout, BPF_ANY) == 0;
  }

  static constexpr const char* kCodeFreed = "ct_py_code_freed";  // the facet's program (FacetCapture)
  CaptureSetup s_;
  int processes_;  // "py_procs"
  std::set<pid_t> unreadable_;  // processes with an interpreter whose frames cannot be read
  std::uint64_t epochs_ = 0;
};

}  // namespace

std::unique_ptr<ProcessCapture> make_python_capture(const CaptureSetup& setup) {
  if (!setup.settings.py_stack) return nullptr;
  return std::make_unique<PythonCapture>(setup);
}

}  // namespace cudatrace
