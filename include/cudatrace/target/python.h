// --py-stack (docs/python.md): finding a CPython interpreter in a traced
// process (the file that defines _PyRuntime: a python executable linked
// with libpython, or libpython3.x.so) and where its threads keep their
// frames, for the BPF side; and naming the frames the records carry
// (code object + instruction) as function, file and line, read from the
// process's memory.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cudatrace/bpf_abi.h"
#include "cudatrace/decode/py_stack.h"

namespace cudatrace {

class ElfFile;
struct Mapping;

// Where a version's code objects keep what names a frame (user space reads these).
struct PyCodeLayout {
  int minor = 0;  // 3.<minor>
  std::uint32_t filename = 0, name = 0, qualname = 0 /* 0: none (3.10) */, firstlineno = 0, linetable = 0;
  std::uint32_t code_adaptive = 0;  // 3.11+: the bytecode inside the code object
  std::uint32_t ascii_size = 0;     // sizeof(PyASCIIObject): where a compact ASCII string's bytes are
  std::uint32_t compact_size = 0;   // sizeof(PyCompactUnicodeObject)
  std::uint32_t version = 0;        // 3.12+: co_version; 0: none
  // The bytes whose words are a code object's identity (bpf_abi.h: ct_py_ident):
  // co_version's word, else co_filename to co_linetable (side by side in 3.10 and 3.11).
  std::uint32_t ident_at = 0, ident_len = 0;
  std::uint32_t head_len = 0;  // the bytes read of a code object: up to the end of the above
};

struct PyInterpreter {
  ct_py_layout bpf{};  // for the "py_procs" map
  PyCodeLayout code;
  std::string version;  // "3.11"
  // The code objects' deallocator (PyCode_Type's tp_dealloc) in the file
  // that defines _PyRuntime, as a file offset to probe (ct_py_code_freed);
  // 0: not found (every walk then reads each code object's identity).
  std::uint64_t code_dealloc_offset = 0;
  std::string file;  // that file, as cudatrace opens it (host_path)
};

// Whether the file `elf`, mapped by `pid` at `m` (an executable mapping),
// defines _PyRuntime: nullopt if it does not. If it does but its layout is
// not known (a version outside 3.10-3.13, a free-threaded build), `why` says
// so and the result is nullopt too.
std::optional<PyInterpreter> find_python(pid_t pid, const ElfFile& elf, const Mapping& m, std::string& why);

// The code objects of CPython 3.<minor> (10 to 13) as cudatrace's own table
// has them (find_python reads 3.13's from the process); nullopt for others.
std::optional<PyCodeLayout> py_code_layout(int minor);

// Names the frames of the processes whose interpreter was found. A code
// object is read from the process's memory after the call, and CPython
// puts new code objects where freed ones were: a frame is named only from a
// code object that still has the identity the record took at the call
// (ct_py_frame.ident), and names are cached by (process, address, identity).
class PyNames {
 public:
  void set(pid_t pid, const PyCodeLayout& layout) { layouts_[pid] = layout; }
  bool knows(pid_t pid) const { return layouts_.count(pid) != 0; }
  bool any() const { return !layouts_.empty(); }
  void forget(pid_t pid);
  // The frames, innermost first, into `out` (whose strings' room is reused);
  // a frame whose code object cannot be read,
  // or is no longer the one the call ran, stays unnamed (PyFrame::unnamed)
  // and is counted in unnamed().
  void name(pid_t pid, const ct_py_frame* frames, std::size_t n, std::vector<PyFrame>& out);
  std::uint64_t unnamed() const { return unnamed_; }

 private:
  struct Code {
    std::uint64_t ident = 0;
    std::string func, file;
    int firstlineno = 0;
    std::string linetable;
    // Lines by instruction offset, as found: a loop calls from the same few
    // instructions, and decoding the table each time cost more than the rest.
    std::unordered_map<std::int64_t, int> lines;
  };
  Code* code(pid_t pid, const PyCodeLayout& l, std::uint64_t addr, std::uint64_t ident);
  bool read_head(pid_t pid, const PyCodeLayout& l, std::uint64_t addr, std::uint64_t ident, std::uint8_t* head);
  bool is_code_type(pid_t pid, std::uint64_t type);
  std::map<pid_t, PyCodeLayout> layouts_;
  std::map<std::pair<pid_t, std::uint64_t>, Code> codes_;
  std::map<std::pair<pid_t, std::uint64_t>, bool> code_types_;
  std::uint64_t unnamed_ = 0;
};

// The line of the instruction at byte offset `offset` of a code object's
// bytecode, from its line table (3.10: co_linetable's address/line pairs;
// 3.11+: the location table); 0 when the table gives none.
int py_line(int minor, const std::string& linetable, int firstlineno, std::int64_t offset);

}  // namespace cudatrace
