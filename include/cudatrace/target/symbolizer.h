// Maps addresses in a traced process to ELF function symbols and reads
// strings it holds, through the process's mappings. The mappings and the
// files behind them are captured while the process lives (at attach and at
// every loader notification), so records are decodable after it exits;
// forget() a process once its last records are decoded. The files stay
// mapped (page cache, not the tracer's own memory) while a process maps them.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cudatrace/target/elf_file.h"
#include "cudatrace/target/handle_names.h"
#include "cudatrace/target/process.h"
#include "cudatrace/target/python.h"

namespace cudatrace {

class Symbolizer {
 public:
  // The function symbol starting exactly at `addr` (exact: a kernel's host
  // stub is its start address; anything else would be a guess), or "".
  // An address outside the process's code may be a kernel handle that a
  // host stub keeps (ElfFile::kernel_handle_slots): its kernel's name then;
  // or a handle the driver made before cudatrace came, named from the
  // driver's object once its layout is learnt (handle_names.h).
  std::string function_at(pid_t pid, std::uint64_t addr);
  // A kernel handle whose name a traced lookup gave: teaches where the
  // driver keeps names. True when that layout was learnt just now.
  bool learn_handle(pid_t pid, std::uint64_t handle, std::string_view mangled);
  // How many times a layout was learnt: a name unknown before may be known now.
  std::uint64_t handle_layouts_learnt() const { return layouts_learnt_; }
  // What each live process's handles taught (HandleNames::describe), for -v.
  std::vector<std::string> handle_layout_notes() const { return handle_names_.describe(); }
  // Where a code address lies: the file mapped there and the offset in it,
  // and the function symbol whose [start, start + size) holds it.
  // The module of a frame in the kernel's uprobes page (Mapping::uprobes_area).
  static constexpr const char* kUprobesArea = "[uprobes]";
  struct Location {
    std::string module;                // path as the process sees it, or kUprobesArea; empty if unmapped
    std::uint64_t module_offset = 0;   // file offset
    std::string function;              // symbol name as in the ELF file; empty if none holds it
    std::uint64_t function_offset = 0;
    bool code = false;                 // in an executable mapping
  };
  Location locate(pid_t pid, std::uint64_t addr);
  // The GPU code of the file mapped at `addr` (target/gpu_code.h): "app
  // holds sm_80 only, no PTX"; empty when no file is mapped there.
  std::string gpu_code(pid_t pid, std::uint64_t addr);
  // A string at `addr` (at most `max` bytes): from the live process, else
  // from the file mapped there (constant data such as kernel names).
  bool string_at(pid_t pid, std::uint64_t addr, std::size_t max, std::string& out);
  // Records the process's current mappings and opens the files behind them.
  void capture(pid_t pid, std::vector<Mapping> maps);
  void forget(pid_t pid);
  std::vector<pid_t> processes() const;
  // --py-stack: the CPython interpreter in the files `pid` maps as captured
  // (target/python.h), or nullopt, with `why` set when one was found whose
  // frames cannot be read.
  std::optional<PyInterpreter> find_python(pid_t pid, std::string& why);
  PyNames& python() { return python_; }

 private:
  PyNames python_;
  std::set<std::pair<std::uint64_t, std::string>> not_python_;  // files without _PyRuntime (inode, path)
  using FileKey = std::pair<std::uint64_t, std::string>;  // inode, path
  struct File {
    std::unique_ptr<ElfFile> elf;  // null: not an ELF file
    std::uint32_t users = 0;       // processes whose captured mappings hold it
  };
  const Mapping* mapping_at(pid_t pid, std::uint64_t addr);
  // The ELF file behind `m` (nullptr: anonymous or not ELF), opened once for
  // every process that maps it; its key is added to `keys`, the process's.
  const ElfFile* hold_file(pid_t pid, const Mapping& m, std::vector<FileKey>& keys);
  void release(pid_t pid);

  std::unordered_map<pid_t, std::vector<Mapping>> maps_;
  std::unordered_map<pid_t, std::vector<const ElfFile*>> files_of_;  // parallel to maps_[pid]
  std::unordered_map<pid_t, std::vector<FileKey>> keys_of_;          // the files each process holds
  std::map<FileKey, File> files_;
  // Processes whose mappings were read again for an address outside them,
  // since their last capture: once per capture, as a stack of code without
  // frame pointers can hold many such addresses.
  std::unordered_set<pid_t> read_for_a_miss_;
  // Kernel handles read from the host stubs' variables, per process: read
  // again on a miss at most once a second (a kernel first launched later
  // gets its handle then).
  struct KernelHandles {
    std::uint64_t read_ns = 0;
    std::unordered_map<std::uint64_t, std::string> names;
  };
  std::string kernel_handle_name(pid_t pid, std::uint64_t handle);
  void read_kernel_handles(pid_t pid, KernelHandles& known);
  std::unordered_map<pid_t, KernelHandles> kernel_handles_;
  HandleNames handle_names_;
  std::uint64_t layouts_learnt_ = 0;
};

// The 8-byte words at `addrs` in `pid`, IOV_MAX of them a system call (a
// module can hold tens of thousands of kernel handles); 0 for a word that
// cannot be read.
std::vector<std::uint64_t> read_process_words(pid_t pid, const std::vector<std::uint64_t>& addrs);

// Reads a NUL-terminated string of at most `max` bytes at `addr` in `pid`.
bool read_process_string(pid_t pid, std::uint64_t addr, std::size_t max, std::string& out);

}  // namespace cudatrace
