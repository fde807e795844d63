// uprobe_multi links (Linux 6.6) and uprobe sessions (6.13) as the kernel's
// ABI spells them: Debian 12's headers predate them.
#pragma once

#include <linux/types.h>

namespace cudatrace {

constexpr int kBpfLinkCreate = 28;              // BPF_LINK_CREATE
constexpr unsigned kTraceUprobeMulti = 48;      // BPF_TRACE_UPROBE_MULTI
constexpr unsigned kTraceUprobeSession = 57;    // BPF_TRACE_UPROBE_SESSION
constexpr unsigned kUprobeMultiReturn = 1;      // BPF_F_UPROBE_MULTI_RETURN

// The link_create part of union bpf_attr for an uprobe_multi link.
struct UprobeMultiAttr {
  __u32 prog_fd, target_fd, attach_type, flags;
  __aligned_u64 path, offsets, ref_ctr_offsets, cookies;
  __u32 cnt, multi_flags, pid;
};

}  // namespace cudatrace
