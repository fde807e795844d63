#include "cudatrace/target/process.h"

#include <elf.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace cudatrace {

// The kernel writes a newline in a mapped file's path as "\012", its only
// escape there (seq_file_path(..., "\n")): the path is given back its newline,
// which terminal_safe() shows as "\x0a" (a file whose name holds "\012"
// itself is still opened: host_path() falls back to /proc/PID/map_files).
static std::string unescape_maps_path(std::string path) {
  for (auto at = path.find("\\012"); at != std::string::npos; at = path.find("\\012", at + 1)) path.replace(at, 4, "\n");
  return path;
}

bool read_maps(pid_t pid, std::vector<Mapping>& out) {
  out.clear();
  std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
  if (!in) return false;
  std::string line;
  while (std::getline(in, line)) {
    // start-end perms offset dev inode path
    Mapping m{};
    char perms[5] = {};
    unsigned long long start, end, offset, inode;
    int path_pos = -1;
    if (std::sscanf(line.c_str(), "%llx-%llx %4s %llx %*x:%*x %llu %n", &start, &end, perms, &offset, &inode,
                    &path_pos) < 5)
      continue;
    m.start = start;
    m.end = end;
    m.offset = offset;
    m.inode = inode;
    m.exec = perms[2] == 'x';
    if (path_pos > 0 && static_cast<std::size_t>(path_pos) < line.size() && line[path_pos] == '/')
      m.path = unescape_maps_path(line.substr(path_pos));
    m.uprobes_area = path_pos > 0 && line.compare(path_pos, std::string::npos, "[uprobes]") == 0;
    if (path_pos > 0 && static_cast<std::size_t>(path_pos) < line.size() && line[path_pos] == '[')
      m.name = line.substr(path_pos);
    out.push_back(std::move(m));
  }
  return true;
}

std::string host_path(pid_t pid, const Mapping& m) {
  const std::string proc = "/proc/" + std::to_string(pid);
  const std::string via_root = proc + "/root" + m.path;
  struct stat st {};
  if (stat(via_root.c_str(), &st) == 0 && st.st_ino == m.inode) return via_root;
  // Deleted or replaced on disk: the mapping itself still names the inode.
  char range[64];
  std::snprintf(range, sizeof range, "/map_files/%llx-%llx", static_cast<unsigned long long>(m.start),
                static_cast<unsigned long long>(m.end));
  return proc + range;
}

bool process_exists(pid_t pid) { return kill(pid, 0) == 0 || errno == EPERM; }

std::string find_in_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : std::string();
  const char* env = std::getenv("PATH");
  std::stringstream dirs(env ? env : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(candidate.c_str(), X_OK) == 0)
      return candidate;
  }
  return {};
}

std::string command_problem(const std::string& name, std::string& exe) {
  exe = find_in_path(name);
  struct stat st {};
  if (exe.empty()) {
    if (name.find('/') == std::string::npos || stat(name.c_str(), &st) != 0) return "command not found: " + name;
    return "cannot run " + name + (S_ISDIR(st.st_mode) ? ": it is a directory" : ": it is not executable");
  }
  if (stat(exe.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return "cannot run " + exe + (S_ISDIR(st.st_mode) ? ": it is a directory" : ": not a regular file");
  std::ifstream in(exe, std::ios::binary);
  if (!in.is_open()) return {};  // executable but unreadable: exec decides
  char head[SELFMAG] = {};
  in.read(head, sizeof head);
  if (in.gcount() >= 2 && head[0] == '#' && head[1] == '!') return {};
  if (in.gcount() < SELFMAG || std::memcmp(head, ELFMAG, SELFMAG) != 0)
    return "cannot run " + exe + ": not a program (neither an ELF executable nor a script starting with #!)";
  if (is_foreign_elf(exe)) return "cannot run " + exe + ": not an x86-64 program";
  const std::string interp = program_interpreter(exe);
  if (!interp.empty() && access(interp.c_str(), F_OK) != 0)
    return "cannot run " + exe + ": its ELF interpreter " + interp + " does not exist";
  return {};
}

namespace {

// The kernel follows at most 4 levels of "#!" (BINPRM_MAX_RECURSION); so do we.
std::string interpreter_of(const std::string& path, int depth) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  char head[2] = {};
  in.read(head, 2);
  if (head[0] == '#' && head[1] == '!') {
    std::string line;
    std::getline(in, line);
    std::stringstream words(line);
    std::string interp;
    words >> interp;
    return interp.empty() || depth >= 4 ? std::string() : interpreter_of(interp, depth + 1);
  }
  Elf64_Ehdr eh{};
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(&eh), sizeof eh) || eh.e_ident[EI_CLASS] != ELFCLASS64) return {};
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph{};
    in.seekg(eh.e_phoff + std::uint64_t(i) * sizeof ph);
    if (!in.read(reinterpret_cast<char*>(&ph), sizeof ph)) return {};
    if (ph.p_type != PT_INTERP || ph.p_filesz == 0 || ph.p_filesz > 4096) continue;
    std::string interp(ph.p_filesz, '\0');
    in.seekg(ph.p_offset);
    if (!in.read(interp.data(), ph.p_filesz)) return {};
    interp.resize(interp.find('\0') == std::string::npos ? interp.size() : interp.find('\0'));
    return interp;
  }
  return {};
}

}  // namespace

std::string program_interpreter(const std::string& path) { return interpreter_of(path, 0); }

bool is_foreign_elf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  Elf64_Ehdr eh{};
  if (!in.read(reinterpret_cast<char*>(eh.e_ident), EI_NIDENT) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0)
    return false;
  in.read(reinterpret_cast<char*>(&eh.e_type), sizeof eh.e_type + sizeof eh.e_machine);
  return eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_machine != EM_X86_64;
}

}  // namespace cudatrace
