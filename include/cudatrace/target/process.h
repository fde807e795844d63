// What cudatrace needs to know about a target process: its file mappings,
// paths as the process sees them (through /proc/PID/root), its loader.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cudatrace {

struct Mapping {
  std::uint64_t start, end, offset;
  std::uint64_t inode;
  bool exec;
  std::string path;  // as the process sees it; empty for anonymous mappings
  // The kernel's uprobes page ("[uprobes]"): a return address there is the
  // uretprobe trampoline that replaced a pending call's own (kernels before
  // the stack-trace fix show these frames; docs/kernels.md).
  bool uprobes_area = false;
  // A named anonymous mapping's name as the kernel shows it ("[anon:NAME]",
  // "[anon_shmem:NAME]", "[heap]"); empty for a file.
  std::string name;
};

// Parses /proc/PID/maps. Returns false if the process is gone or unreadable.
bool read_maps(pid_t pid, std::vector<Mapping>& out);

// A path openable from here for a file mapped by `pid`: through
// /proc/PID/root (another mount namespace), else /proc/PID/map_files.
std::string host_path(pid_t pid, const Mapping& m);

bool process_exists(pid_t pid);

// Resolves a command name like execvp does. Empty if not found.
std::string find_in_path(const std::string& name);

// An ELF file built for another machine or as 32-bit: cannot be run here.
bool is_foreign_elf(const std::string& path);

// Why the command `name` (resolved as execvp does, into `exe`) cannot be
// run, found before anything runs: not found, a directory, not executable,
// not a program (neither ELF nor a #! script), built for another machine,
// its ELF interpreter missing.
// Empty when it can be.
std::string command_problem(const std::string& name, std::string& exe);

// The ELF interpreter (dynamic loader) of an executable; follows one "#!"
// line for scripts. Empty for static executables or unreadable files.
std::string program_interpreter(const std::string& path);

}  // namespace cudatrace
