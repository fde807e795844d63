// SPDX-License-Identifier: GPL-2.0 OR MIT
/* Reference BPF programs for the benchmarks (scripts/bench.py), attached to
 * the same symbols as cudatrace's:
 *   floor_*  empty programs: the cost of the uprobe + uretprobe themselves
 *   floor_session        an empty uprobe session program (Linux 6.13) that
 *                        keeps every return: the pair's cost through a session
 *   floor_session_entry  the same, but every entry returns 1: its return is
 *                        not probed, the cost of an entry-only probe
 *   naive_*  the textbook design: an enter and an exit record per call, each
 *            submitted with a reader wake-up */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct naive_record {
	__u64 pid_tgid;
	__u64 ts_ns;
	__u64 cookie;
	__u64 value; /* first argument at entry, return value at exit */
	__u32 is_exit;
	char comm[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} naive_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} naive_lost SEC(".maps");

SEC("uprobe")
int floor_enter(struct pt_regs *ctx)
{
	return 0;
}

SEC("uretprobe")
int floor_exit(struct pt_regs *ctx)
{
	return 0;
}

SEC("uprobe")
int floor_session(struct pt_regs *ctx)
{
	return 0;
}

SEC("uprobe")
int floor_session_entry(struct pt_regs *ctx)
{
	return 1;
}

static __always_inline int naive_emit(struct pt_regs *ctx, __u32 is_exit, __u64 value)
{
	struct naive_record *r = bpf_ringbuf_reserve(&naive_events, sizeof(*r), 0);
	if (!r) {
		__u32 zero = 0;
		__u64 *lost = bpf_map_lookup_elem(&naive_lost, &zero);
		if (lost)
			__sync_fetch_and_add(lost, 1);
		return 0;
	}
	r->pid_tgid = bpf_get_current_pid_tgid();
	r->ts_ns = bpf_ktime_get_ns();
	r->cookie = bpf_get_attach_cookie(ctx);
	r->value = value;
	r->is_exit = is_exit;
	bpf_get_current_comm(r->comm, sizeof(r->comm));
	bpf_ringbuf_submit(r, 0); /* 0: wake the reader as libbpf's default does */
	return 0;
}

SEC("uprobe")
int naive_enter(struct pt_regs *ctx)
{
	return naive_emit(ctx, 0, PT_REGS_PARM1(ctx));
}

SEC("uretprobe")
int naive_exit(struct pt_regs *ctx)
{
	return naive_emit(ctx, 1, PT_REGS_RC(ctx));
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
