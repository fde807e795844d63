// Maps addresses in a traced process to ELF function symbols and reads
// strings it holds, through the process's mappings. The mappings and the
// files behind them are captured while the process lives (at attach and at
// every loader notification), so records are decodable after it exits.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cudatrace/elf_file.h"
#include "cudatrace/process.h"

namespace cudatrace {

class Symbolizer {
 public:
  // The function symbol starting exactly at `addr` (exact: a kernel's host
  // stub is its start address; anything else would be a guess), or "".
  std::string function_at(pid_t pid, std::uint64_t addr);
  // Where a code address lies: the file mapped there and the offset in it,
  // and the function symbol whose [start, start + size) holds it.
  struct Location {
    std::string module;                // path as the process sees it; empty if unmapped
    std::uint64_t module_offset = 0;   // file offset
    std::string function;              // symbol name as in the ELF file; empty if none holds it
    std::uint64_t function_offset = 0;
  };
  Location locate(pid_t pid, std::uint64_t addr);
  // A string at `addr` (at most `max` bytes): from the live process, else
  // from the file mapped there (constant data such as kernel names).
  bool string_at(pid_t pid, std::uint64_t addr, std::size_t max, std::string& out);
  // Records the process's current mappings and opens the files behind them.
  void capture(pid_t pid, std::vector<Mapping> maps);

 private:
  struct File {
    std::unique_ptr<ElfFile> elf;
    std::vector<FunctionSymbol> functions;
  };
  const Mapping* mapping_at(pid_t pid, std::uint64_t addr);

  std::unordered_map<pid_t, std::vector<Mapping>> maps_;
  std::unordered_map<pid_t, std::vector<const File*>> files_of_;  // parallel to maps_[pid]
  std::map<std::pair<std::uint64_t, std::string>, File> files_;   // by inode and path
};

// Reads a NUL-terminated string of at most `max` bytes at `addr` in `pid`.
bool read_process_string(pid_t pid, std::uint64_t addr, std::size_t max, std::string& out);

}  // namespace cudatrace
