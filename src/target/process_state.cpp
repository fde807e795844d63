#include "cudatrace/target/process_state.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace cudatrace {
namespace {

// The fields of /proc/PID/stat that say where a process sits in job control.
struct JobControl {
  pid_t ppid = 0, pgrp = 0, session = 0;
  int tty = 0;  // controlling terminal (0: none)
};

bool read_job_control(pid_t pid, JobControl& jc) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(in, text);
  const auto paren = text.rfind(')');  // the command name may hold anything
  if (paren == std::string::npos) return false;
  std::istringstream fields(text.substr(paren + 1));
  char state = 0;
  return static_cast<bool>(fields >> state >> jc.ppid >> jc.pgrp >> jc.session >> jc.tty);
}

}  // namespace

ProcessKind process_kind(pid_t pid, std::string& comm) {
  constexpr unsigned long kKernelThread = 0x00200000;  // PF_KTHREAD in the stat flags
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(in, text);
  const auto open = text.find('('), close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return ProcessKind::User;
  comm = text.substr(open + 1, close - open - 1);
  std::istringstream fields(text.substr(close + 1));
  char state = 0;
  long ppid, pgrp, session, tty, tpgid;
  unsigned long flags = 0;
  if (!(fields >> state >> ppid >> pgrp >> session >> tty >> tpgid >> flags)) return ProcessKind::User;
  if (state == 'Z' || state == 'X') return ProcessKind::Zombie;
  return flags & kKernelThread ? ProcessKind::KernelThread : ProcessKind::User;
}

bool is_shell_job(pid_t pid) {
  JobControl self, parent;
  if (!read_job_control(pid, self) || self.tty == 0 || !read_job_control(self.ppid, parent)) return false;
  return parent.tty == self.tty && parent.session == self.session && parent.pgrp != self.pgrp;
}

bool trace_is_private(pid_t pid) {
  if (geteuid() != 0 || pid <= 0) return false;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Uid:", 0) != 0) continue;
    std::istringstream ids(line.substr(4));
    unsigned long uid = 0;
    while (ids >> uid)
      if (uid != 0) return true;
    return false;
  }
  return true;  // unknown owner: assume another user
}

bool started_with_nvtx_injection(pid_t pid) {
  std::ifstream environ("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::string entry;
  while (std::getline(environ, entry, '\0'))
    if (entry.rfind("NVTX_INJECTION64_PATH=", 0) == 0 && entry.size() > 22) return true;
  return false;
}

}  // namespace cudatrace
