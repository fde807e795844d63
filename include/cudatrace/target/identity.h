// Who a process is on a node shared by containers: its pid and name, and
// the container and Kubernetes pod its cgroup path names (whole-node mode,
// docs/prometheus.md). Container runtimes put the container id (64 hex
// digits) and the kubelet the pod UID into the cgroup path; the layouts of
// cgroup v1 and v2, Docker, containerd, CRI-O and podman differ.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace cudatrace {

struct CgroupIdentity {
  std::string container_id;  // 64 lowercase hex digits, or empty
  std::string pod_uid;       // 8-4-4-4-12 with dashes, or empty
};

// Parses the text of /proc/PID/cgroup (every line "ID:CONTROLLERS:PATH").
// The unified (v2) line wins over v1 lines unless it names nothing (hybrid
// hosts); a path component is a container
// when it is 64 hex digits with an optional runtime prefix (docker-,
// cri-containerd-, crio-, libpod-, containerd-) and .scope suffix; CRI-O's
// conmon scope is not the container. A pod is "pod<UID>" (cgroupfs driver)
// or "kubepods-<qos>-pod<UID with _>.slice" (systemd driver).
CgroupIdentity parse_cgroup(std::string_view text);

struct ProcessIdentity {
  std::uint32_t pid = 0;
  std::string comm;
  CgroupIdentity cgroup;
};

// From /proc/PID/comm and /proc/PID/cgroup; false if the process is gone.
bool read_identity(pid_t pid, ProcessIdentity& out);

}  // namespace cudatrace
