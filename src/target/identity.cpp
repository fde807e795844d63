#include "cudatrace/target/identity.h"

#include <fstream>
#include <sstream>
#include <vector>

namespace cudatrace {
namespace {

bool all_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return !s.empty();
}

bool remove_prefix(std::string_view& s, std::string_view prefix) {
  if (s.substr(0, prefix.size()) != prefix) return false;
  s.remove_prefix(prefix.size());
  return true;
}

// "docker-<id>.scope", "cri-containerd-<id>.scope", "crio-<id>", "<id>" ...
std::string container_of(std::string_view part) {
  if (part.size() > 6 && part.substr(part.size() - 6) == ".scope") part.remove_suffix(6);
  if (part.substr(0, 12) == "crio-conmon-") return {};  // CRI-O's monitor process, not the container
  for (std::string_view prefix : {"docker-", "cri-containerd-", "crio-", "libpod-", "containerd-"})
    if (remove_prefix(part, prefix)) break;
  return part.size() == 64 && all_hex(part) ? std::string(part) : std::string();
}

// A pod UID: 8-4-4-4-12 hex digits, with dashes (or underscores, which the
// systemd cgroup driver uses since systemd reserves dashes).
std::string pod_uid_of(std::string_view part) {
  if (part.size() > 6 && part.substr(part.size() - 6) == ".slice") part.remove_suffix(6);
  const auto at = part.rfind("pod");
  if (at == std::string_view::npos) return {};
  std::string uid(part.substr(at + 3));
  if (uid.size() != 36) return {};
  for (std::size_t i = 0; i < uid.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash) {
      if (uid[i] != '-' && uid[i] != '_') return {};
      uid[i] = '-';
    } else if (!all_hex(std::string_view(&uid[i], 1))) {
      return {};
    }
  }
  return uid;
}

CgroupIdentity parse_path(std::string_view path) {
  CgroupIdentity id;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view part = path.substr(start, end - start);
    if (!part.empty()) {
      // The innermost match wins: nested runtimes (kind, docker-in-docker).
      if (std::string c = container_of(part); !c.empty()) id.container_id = std::move(c);
      if (std::string p = pod_uid_of(part); !p.empty()) id.pod_uid = std::move(p);
    }
    start = end + 1;
  }
  return id;
}

}  // namespace

CgroupIdentity parse_cgroup(std::string_view text) {
  CgroupIdentity unified, v1;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    const auto first = line.find(':');
    const auto second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    const CgroupIdentity id = parse_path(line.substr(second + 1));
    if (line.substr(0, second + 1) == "0::") {
      unified = id;
      continue;
    }
    if (v1.container_id.empty()) v1.container_id = id.container_id;
    if (v1.pod_uid.empty()) v1.pod_uid = id.pod_uid;
  }
  // A hybrid host's unified line is often just "/": then the v1 lines say it.
  return unified.container_id.empty() && unified.pod_uid.empty() ? v1 : unified;
}

bool read_identity(pid_t pid, ProcessIdentity& out) {
  const std::string dir = "/proc/" + std::to_string(pid);
  std::ifstream comm(dir + "/comm");
  std::stringstream name;
  name << comm.rdbuf();
  // The kernel ends the name with a newline; a name may hold newlines too.
  out.comm = name.str();
  if (out.comm.empty() || out.comm.back() != '\n') return false;
  out.comm.pop_back();
  std::ifstream cgroup(dir + "/cgroup");
  std::stringstream text;
  text << cgroup.rdbuf();
  out.pid = static_cast<std::uint32_t>(pid);
  out.cgroup = parse_cgroup(text.str());
  return true;
}

}  // namespace cudatrace
