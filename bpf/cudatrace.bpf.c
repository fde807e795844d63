// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * cudatrace BPF side. One generic entry program and one generic return
 * program serve every probed CUDA function: the attach cookie carries the API
 * id and the argument layout (see bpf_abi.h). The entry program pushes a frame
 * on a per-thread stack; the return program pops it and emits ONE record per
 * completed call, with out-parameters read from user memory at return.
 * Forwards (bpf_abi.h, ct_frame) are folded into their owner's record, and
 * the driver calls a runtime call makes into the runtime call's. Where the
 * kernel has uprobe sessions, ct_session does both halves and leaves the
 * returns of those driver calls unprobed.
 *
 * A BPF object is one compilation unit (one skeleton): its concerns are
 * headers included here, in the order they build on each other.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "cudatrace/bpf_abi.h"

#include "state.bpf.h"
#include "capture.bpf.h"
#include "aggregate.bpf.h"
#include "pairing.bpf.h"
#include "dlopen_stop.bpf.h"
#include "lookup.bpf.h"
#include "processes.bpf.h"

/* Kernel functions of session programs (Linux 6.10 kprobes, 6.13 uprobes).
 * Weak: on older kernels ct_session is not loaded. */
extern bool bpf_session_is_return(void) __ksym __weak;

SEC("uprobe")
int ct_enter(struct pt_regs *ctx)
{
	if (settings.empty_programs)
		return 0;
	enter_call(ctx, false);
	return 0;
}

SEC("uretprobe")
int ct_exit(struct pt_regs *ctx)
{
	if (settings.empty_programs)
		return 0;
	exit_call(ctx);
	return 0;
}

/* --empty-probes with session links: the floor traps as the plan does, so it
 * keeps only what decides which returns go unprobed (pairing.bpf.h,
 * inner_driver_call), in empty_runtime_bits. */
static __always_inline int empty_session(struct pt_regs *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 *bits = bpf_map_lookup_elem(&empty_runtime_bits, &tid);
	if (bpf_session_is_return()) {
		if (bits)
			*bits >>= 1;
		return 0;
	}
	if (!bits) {
		__u64 none = 0;
		bpf_map_update_elem(&empty_runtime_bits, &tid, &none, BPF_NOEXIST);
		bits = bpf_map_lookup_elem(&empty_runtime_bits, &tid);
		if (!bits)
			return 0;
	}
	__u64 cookie = bpf_get_attach_cookie(ctx);
	if (!settings.every_layer && (cookie & CT_COOKIE_DRIVER) && (*bits & 1) && !CT_COOKIE_HAS_OUTS(cookie))
		return 1;
	*bits = (*bits << 1) | ((cookie & CT_COOKIE_RUNTIME) != 0);
	return 0;
}

/* Entry and return in one program (uprobe_multi session link, Linux 6.13):
 * an entry that returns 1 has its return left unprobed, which saves the
 * return trap. Attached instead of ct_enter/ct_exit where the kernel has it. */
SEC("uprobe")
int ct_session(struct pt_regs *ctx)
{
	if (settings.empty_programs)
		return empty_session(ctx);
	if (bpf_session_is_return()) {
		exit_call(ctx);
		return 0;
	}
	return enter_call(ctx, true);
}

/* --py-stack: CPython's code object deallocator (PyCode_Type's tp_dealloc),
 * probed for each traced Python process. The memory of a code object freed
 * may hold the next one, so the identities read before it no longer hold
 * (capture.bpf.h: read_py_frames). */
SEC("uprobe")
int ct_py_code_freed(struct pt_regs *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct ct_py_layout *py = bpf_map_lookup_elem(&py_procs, &tgid);
	if (py && py->code_epoch)
		__sync_fetch_and_add(&py->code_epoch, 1);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
