/* The BPF side's state, shared by every program of the one object: the
 * configuration user space sets before loading (bpf_abi.h: ct_config), the
 * maps, the globals user space writes while tracing, and the counters of
 * what was lost. Included by cudatrace.bpf.c only. */
#pragma once

/* Set by user space between open and load: read-only, so the verifier
 * prunes the branches of the modes not asked for. */
const volatile struct ct_config settings = {
	.stop_on_map_change = 1,
	.wakeup_every = 256,
};

/* A record built before it is sent: the call, then its payload, stack,
 * Python frames and span (bpf_abi.h: CT_SPAN_OFFSET), each at most its
 * maximum. */
#define CT_SCRATCH_SPAN_AT \
	(CT_MAX_PAYLOAD + CT_MAX_STACK_FRAMES * 8 + CT_MAX_PY_FRAMES * sizeof(struct ct_py_frame))
struct exit_scratch {
	struct ct_call call;
	__u8 payload[CT_SCRATCH_SPAN_AT + CT_SPAN_BYTES(CT_MAX_SPAN_ATTRS)];
};

/* --py-stack: the interpreter layout of each Python process (by tgid), set
 * by user space when it finds a file defining _PyRuntime in the process. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tgid */
	__type(value, struct ct_py_layout);
} py_procs SEC(".maps");

/* --py-stack: when this CPU last woke the reader for a record with Python
 * frames (ring_flags_py). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} py_last_wakeup SEC(".maps");

/* --py-stack: one frame's fields, read in one go (py_read_frame). */
struct py_frame_buf {
	__u8 bytes[CT_PY_FRAME_SPAN + 8];
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_frame_buf);
} py_frame_scratch SEC(".maps");

/* --py-stack: each thread's PyThreadState, found once by walking the
 * interpreter's thread list (checked against the thread at each use). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* tid */
	__type(value, __u64);
} py_tstates SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* resized by user space */
} events SEC(".maps");

/* Whole-node mode: map-change and exec records go here, not behind a backlog
 * of call records in "events", so that new library files are found at once. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 << 10);
} control SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536); /* resized by user space */
	__type(key, __u32);         /* tid */
	__type(value, struct ct_thread_state);
} threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32); /* tgid */
	__type(value, __u8);
} traced_tgids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CT_CNT_NR);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct exit_scratch);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CT_MAX_APIS); /* resized by user space to the table's size */
	__type(key, __u32);
	__type(value, struct ct_api_stats);
} api_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} since_wakeup SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, CT_ACTIVITY_ENTRIES);
	__type(key, struct ct_activity_key);
	__type(value, struct ct_activity);
} activity SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CT_MAX_APIS); /* resized by user space to the table's size */
	__type(key, __u32);
	__type(value, struct ct_activity_api);
} activity_apis SEC(".maps");

/* Summary mode: stream captures open per process (tgid), CT_ACT_CAPTURE_BEGIN/END. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} capturing SEC(".maps");

/* The page-locked generation (bpf_abi.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} page_locked_gen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ct_activity_key);
} activity_key_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, __u32); /* tgid */
	__type(value, struct ct_process_cost);
} process_cost SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, CT_EXPORT_ENTRIES);
	__type(key, struct ct_export_key);
	__type(value, struct ct_export_value);
} export_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CT_MAX_APIS); /* resized by user space to the table's size */
	__type(key, __u32);
	__type(value, struct ct_export_api);
} export_apis SEC(".maps");

/* --empty-probes with session links (cudatrace.bpf.c, empty_session): per
 * thread, a bit per probed call in progress, set for a runtime call, the
 * innermost lowest. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, __u32); /* tid */
	__type(value, __u64);
} empty_runtime_bits SEC(".maps");

/* OpenTelemetry thread context: where each process keeps otel_thread_ctx_v1
 * (bpf_abi.h, ct_tls_target; set by user space). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32); /* tgid */
	__type(value, struct ct_tls_target);
} otel_tls SEC(".maps");

/* Never written: a source of zeroes for new thread_state entries. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ct_thread_state);
} zero_state SEC(".maps");

/* --max-overhead (src/record/budget.h): user space detaches the probes of the
 * APIs flagged in hot_apis and attaches them again. A call of one of them in
 * progress when its return probe went never sees its return: its frame,
 * entered before hot_stale_before_ns (set once a detach is complete), is
 * dropped when found on top of its thread's stack, so that it neither makes
 * later calls look nested nor pairs with a later return. */
__u64 hot_stale_before_ns = 0;
__u8 hot_apis[CT_MAX_APIS] = {};

/* Set when cudatrace's own process starts to exit (ct_thread_exit). */
__u64 tracer_dying = 0;

static __always_inline void count_n(__u32 which, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &which);
	if (v)
		*v += n;
}

static __always_inline void count(__u32 which)
{
	count_n(which, 1);
}
