// What the running kernel offers cudatrace, found by trying each feature at
// start-up (loading a tiny program, creating a link on a bad target), never
// from the version number: distribution kernels backport BPF features.
// Probing needs the privileges that loading BPF programs needs.
// docs/design.md "Kernel requirements" lists the feature per kernel version.
#pragma once

#include <string>

#include "cudatrace/options.h"
#include "cudatrace/record/probes.h"

namespace cudatrace {

// --attach: how uprobes are to be attached.

struct KernelFeatures {
  // uprobe_multi links: all of a file's probes in one link (Linux 6.6).
  bool uprobe_multi = false;
  // ... whose pid filter selects the process; the first kernels with
  // uprobe_multi selected only the thread of that id (fixed in 6.9).
  bool uprobe_multi_pid_filter = false;
  // The uprobe perf PMU, /sys/bus/event_source/devices/uprobe (4.17,
  // CONFIG_UPROBE_EVENTS): perf-event uprobes without tracefs.
  bool uprobe_pmu = false;
  // BPF links on perf events, with a cookie (5.15).
  bool perf_links = false;
  // Uprobe programs may use hash maps allocated at run time (6.1). Before,
  // the verifier warns (a kernel WARN that taints it) or, on PREEMPT_RT,
  // refuses: such kernels get a preallocated per-thread map.
  bool run_time_alloc_in_uprobes = false;
};

KernelFeatures probe_kernel_features();

// The first feature cudatrace cannot run without that this kernel lacks, as
// one line naming it and the Linux version that brought it; empty when the
// kernel has them all.
std::string missing_kernel_feature();

// The attach mode for this kernel and `request`, in `mode`; or one line
// saying what the kernel lacks for it. `sessions`: uprobe_multi sessions
// may be used where the kernel has them.
std::string choose_attach_mode(AttachRequest request, const KernelFeatures& kernel, bool sessions, AttachMode& mode);

// The uprobe PMU's perf event type and the config bit that makes a probe a
// return probe; false when the kernel has no uprobe PMU.
bool uprobe_pmu(int& type, int& retprobe_bit);

}  // namespace cudatrace
