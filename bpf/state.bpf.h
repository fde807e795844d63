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

/* A record built before it is sent: the call, then its payload and its
 * sections (bpf_abi.h: struct ct_section), room for each kind at its
 * largest. */
struct exit_scratch {
	struct ct_call call;
	__u8 payload[CT_MAX_PAYLOAD + CT_SECTIONS_MAX_BYTES];
};

/* --py-stack: the interpreter layout of each Python process (by tgid), set
 * by user space when it finds a file defining _PyRuntime in the process. */
/* One record once every thread of cudatrace has begun to exit (ct_thread_exit):
 * what its watchdog waits for, seconds before the kernel has closed its links
 * (src/record/watchdog.h). Nobody consumes it: it stays readable. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096); /* set to the page size by user space */
} tracer_exit SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tgid */
	__type(value, struct ct_py_layout);
} py_procs SEC(".maps");

/* --py-stack: the frame walk's cursor, kept here rather than on the stack so
 * that the verifier checks each loop body once for any values, not once per
 * iteration (capture.bpf.h: read_py_frames). */
struct py_cursor {
	__u64 fsbase;  /* pthread_self() of the thread: its PyThreadState's thread_id */
	__u64 tstate;  /* the thread list's cursor, then the thread's */
	__u64 frame;   /* the next frame */
	__u64 window;  /* the address `window` below was read from */
	__u32 window_len;
	__u32 off;     /* where the next frame goes in the record's payload */
	__u32 n;       /* frames written */
	__u32 pad;
};
/* Code objects whose identity was read, and their identities: two ways per
 * address hash, the newer first. Valid for the process `tgid` while its
 * code_epoch stays `epoch`; with no epoch yet (0), only for one walk: a code
 * object on the stack lives while the walk runs, so a recursion's frames,
 * or PyTorch's Module._call_impl between each module's forward, share one
 * read. */
#define CT_PY_CODE_SETS 128
#define CT_PY_CODE_SLOTS (2 * CT_PY_CODE_SETS)
struct py_code_cache {
	__u64 epoch;
	__u32 tgid;
	__u32 pad;
	__u64 gen;                      /* raised to start over: a slot of another gen is empty */
	__u64 code[CT_PY_CODE_SLOTS];
	__u64 ident[CT_PY_CODE_SLOTS];
	__u64 slot_gen[CT_PY_CODE_SLOTS];
};
/* The cursor; the code objects' identities; the thread's PyThreadState (read_py_tstate); the top of its
 * data stack (py_read_window), then one frame from outside it
 * (py_read_frame). Past each, room to read a field at any offset the
 * verifier allows. Then a code object's identity (py_code_ident). */
struct py_frame_buf {
	struct py_cursor at;
	struct py_code_cache codes;
	__u8 tstate[CT_PY_TSTATE_SPAN + 16];
	__u8 window[CT_PY_WINDOW + CT_PY_FRAME_SPAN + 8];
	__u8 ident[CT_PY_IDENT_SPAN];
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_frame_buf);
} py_frame_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* resized by user space */
} events SEC(".maps");

/* Map-change records (and, on the whole node, exec records) go here, not
 * behind a backlog of call records in "events": new library files are found
 * at once, and "events" is read while they are probed. A stopped process's
 * record stays unread until its stop is undone: the watchdog reads this ring. */
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

/* Summary mode's activity: each key's slot in activity_counts, which holds
 * its counts (a slot, not the counts, so that a CPU can keep it at hand:
 * activity_last). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, CT_ACTIVITY_ENTRIES);
	__type(key, struct ct_activity_key);
	__type(value, __u32);
} activity SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CT_ACTIVITY_ENTRIES);
	__type(key, __u32);
	__type(value, struct ct_activity);
} activity_counts SEC(".maps");

/* The slots of activity_counts handed out (a slot whose key another CPU
 * added first stays unused). */
__u64 activity_slots_used = 0;

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

/* Summary mode: each CPU's last activity key and its slot, so that a call
 * like the one before it (a loop launching one kernel) skips the hash
 * lookup of a 128-byte key (about 65 ns of a launch). */
struct activity_last {
	__u64 busy;  /* a call on this CPU is using it: another one preempted meanwhile must not */
	__u32 slot;  /* of key in activity_counts */
	__u32 valid; /* key and slot go together */
	struct ct_activity_key key;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct activity_last);
} activity_last SEC(".maps");

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

/* --py-stack: set by the reader before a long wait, when no record with
 * Python frames came since its last one; the next such record clears it and
 * wakes the reader, which then reads every millisecond while they come
 * (RecordReader::wait_ms): code objects are named from the process's memory,
 * gone once it exits. */
__u32 py_reader_waiting = 0;

/* Set once the reader drains the ring (BpfObject::begin_tracing): until then a
 * call of a program that runs already, made while probes are still being
 * attached to its other libraries, would only fill a ring nobody reads and be
 * counted lost. Calls are traced from cudatrace's "tracing" line on. */
__u32 tracing_begun = 0;

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
