// The Python stack facet (--py-stack, docs/python.md; src/decode/facet_py_stack.cpp):
// its decoded form on a call, how a live source names it, and the text of a frame.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cudatrace/bpf_abi.h"

namespace cudatrace {

struct Call;
class Facet;

// One Python frame: the function (its qualified name where the interpreter
// has one), the file as the code object names it, and the line. Unnamed
// (all empty) when its code object could not be told to be the one the call
// ran.
struct PyFrame {
  std::string func;
  std::string file;
  int line = 0;  // 0: unknown
  bool unnamed() const { return func.empty() && file.empty(); }
};

// "file.py:412 func" with the file's base name: how a line names a Python
// call site; "?" for an unnamed frame.
std::string py_frame_text(const PyFrame& f);

// The facet's decoded form: the calling thread's Python frames, innermost
// first; empty for a thread that was running no Python code.
using PyStack = std::vector<PyFrame>;
const PyStack& py_stack(const Call& c);
PyStack& py_stack(Call& c);

// How a live source names the frames BPF read (FacetNames, installed by
// record/python_capture.cpp): into `out`, which holds none.
using PyFrameNamer = std::function<void(std::uint32_t pid, const ct_py_frame* frames, std::size_t n, PyStack& out)>;

const Facet& py_stack_facet();

}  // namespace cudatrace
