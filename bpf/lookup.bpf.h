/* Driver functions probed on demand (bpf_abi.h, ct_driver_fn_key): the
 * lookups that hand a driver function's address to code other than a CUDA
 * runtime stop the process until user space has probed that function.
 * Included by cudatrace.bpf.c only, after dlopen_stop.bpf.h. */
#pragma once

/* The state of each driver function of each process that is probed on
 * demand, set by user space when the driver's file is mapped. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* written by user space only */
	__uint(max_entries, 1 << 18);
	__type(key, struct ct_driver_fn_key);
	__type(value, __u8);
} driver_fns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* written by user space only */
	__uint(max_entries, 4096 * CT_RUNTIME_RANGES);
	__type(key, struct ct_runtime_range_key);
	__type(value, struct ct_runtime_range);
} runtime_code SEC(".maps");

/* A lookup in progress: where its result will be written (by tid; one
 * left by a lookup that never returned is overwritten or evicted). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} lookup_out SEC(".maps");

/* A lookup (of `kind`) a CUDA runtime makes for itself (bpf_abi.h, ct_runtime_range). */
static __always_inline bool from_runtime(__u32 tgid, __u64 caller, __u64 kind)
{
	for (__u32 i = 0; i < CT_RUNTIME_RANGES; i++) {
		struct ct_runtime_range_key key = {.tgid = tgid, .index = i};
		struct ct_runtime_range *r = bpf_map_lookup_elem(&runtime_code, &key);
		if (!r)
			return false; /* ranges are filled from index 0 */
		if (caller >= r->start && caller < r->end)
			return r->runtime_library || kind == CT_LOOKUP_OUT_ARG2;
	}
	return false;
}

SEC("uprobe")
int ct_lookup_enter(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!tgid_traced(pid_tgid >> 32))
		return 0;
	__u32 tid = (__u32)pid_tgid;
	__u64 out = PT_REGS_PARM2(ctx);
	bpf_map_update_elem(&lookup_out, &tid, &out, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int ct_lookup_exit(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32, tid = (__u32)pid_tgid;
	__u64 kind = bpf_get_attach_cookie(ctx);
	__u64 addr = 0;
	if (kind == CT_LOOKUP_RESULT) {
		if (!tgid_traced(tgid))
			return 0;
		addr = PT_REGS_RC(ctx);
	} else {
		__u64 *out = bpf_map_lookup_elem(&lookup_out, &tid);
		if (!out)
			return 0;
		__u64 where = *out;
		bpf_map_delete_elem(&lookup_out, &tid);
		if ((__s32)PT_REGS_RC(ctx) != 0 || !where ||
		    bpf_probe_read_user(&addr, sizeof(addr), (void *)where))
			return 0;
	}
	/* The runtime filling its own table (at the return probe the
	 * instruction pointer is the caller). */
	if (kind != CT_LOOKUP_OUT_ARG2_PROGRAM && from_runtime(tgid, PT_REGS_IP(ctx), kind))
		return 0;
	struct ct_driver_fn_key key = {.tgid = tgid, .addr = addr};
	__u8 *state = bpf_map_lookup_elem(&driver_fns, &key);
	if (!state || *state == CT_DRIVER_FN_PROBED)
		return 0;
	/* Stopped and published as a library load is (dlopen_stop.bpf.h), so
	 * the same reader and watchdog undo the stop; every thread that looks
	 * it up before it is probed waits the same way. */
	stop_until_attached(pid_tgid, addr, PT_REGS_IP(ctx), true);
	return 0;
}
