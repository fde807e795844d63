// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * cudatrace BPF side. One generic entry program and one generic return
 * program serve every probed CUDA function: the attach cookie carries the API
 * id and the argument layout (see record.h). The entry program pushes a frame
 * on a per-thread stack; the return program pops it and emits ONE record per
 * completed call, with out-parameters read from user memory at return.
 * Forwards (record.h, ct_frame) are folded into their owner's record. Where
 * the kernel has uprobe sessions, ct_session does both halves and records
 * nested calls with nothing to read at return at entry instead.
 *
 * Over 400 lines because a BPF object is one compilation unit: the maps every
 * program shares, the helpers they inline and the programs themselves must sit
 * in one source for bpftool's one skeleton.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "cudatrace/record.h"

#define SIGSTOP 19
#define SIGCONT 18
#define SIGNAL_GROUP_EXIT 0x00000004 /* signal_struct.flags: the group is exiting (include/linux/sched/signal.h) */

/* Set by user space between open and load. */
const volatile __u32 filter_tgid = 0;      /* trace only this process (0: see use_tgid_set) */
const volatile bool use_tgid_set = false;  /* trace the processes in traced_tgids */
const volatile bool follow_forks = false;  /* add children of traced processes to the set */
const volatile __u32 filter_tid = 0;
const volatile __u64 min_dur_ns = 0;
const volatile bool errors_only = false;
const volatile bool stop_on_map_change = true;
const volatile __u32 wakeup_every = 256; /* records per CPU between reader wake-ups */
const volatile bool summary_mode = false;    /* aggregate in api_stats; records only for detail calls */
const volatile bool summary_records_all = false; /* ... and for every call (--by-range, docs/nvtx.md) */
const volatile bool capture_stack = false;   /* append the user stack to each record */
/* Session programs only: record nested calls without out-params at entry and
 * skip their return probe (record.h: CT_FLAG_ENTRY_ONLY). */
const volatile bool skip_nested_returns = false;
/* Exporter mode (record.h): count calls in export_stats, records only for
 * allocations and frees. */
const volatile bool export_mode = false;
/* Whole-node mode (--all-processes): every exec sends a map-change record,
 * so that user space looks at the new program's files (a static runtime, a
 * container's own dynamic loader) without stopping it. */
const volatile bool report_execs = false;
/* cudatrace's own process: once it dies, nobody would continue a process
 * stopped at a library load (ct_map_change). */
const volatile __u32 tracer_tgid = 0;
/* --empty-probes (benchmarks): the probes as placed, programs that do
 * nothing, so that the trap's cost can be told from the programs'. */
const volatile bool empty_programs = false;

/* Such a record has no status, latency or return-time stack: only when no
 * filter or summary needs them. */
#define record_at_entry (skip_nested_returns && !summary_mode && !export_mode && !errors_only && !min_dur_ns && !capture_stack)

/* Kernel functions of session programs (Linux 6.10 kprobes, 6.13 uprobes).
 * Weak: on older kernels ct_session is not loaded. */
extern bool bpf_session_is_return(void) __ksym __weak;
const volatile bool activity_in_bpf = false; /* summary mode: count launches and copies in "activity" */

struct exit_scratch {
	struct ct_call call;
	__u8 payload[CT_MAX_PAYLOAD + CT_MAX_STACK_FRAMES * 8];
};

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

/* The page-locked generation (record.h). */
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

/* Never written: a source of zeroes for new thread_state entries. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ct_thread_state);
} zero_state SEC(".maps");

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

static __always_inline bool tgid_traced(__u32 tgid)
{
	if (filter_tgid)
		return tgid == filter_tgid;
	if (use_tgid_set)
		return bpf_map_lookup_elem(&traced_tgids, &tgid) != NULL;
	return true;
}

static __always_inline bool current_traced(__u64 pid_tgid)
{
	if (!tgid_traced(pid_tgid >> 32))
		return false;
	return !filter_tid || (__u32)pid_tgid == filter_tid;
}

/* Records go without a reader wake-up, except every wakeup_every-th on a
 * CPU: the reader drains in batches (and on its own timer), and the ring
 * holds at most (CPUs x wakeup_every) records it has not been told about. */
static __always_inline __u64 ring_flags(void)
{
	__u32 zero = 0;
	__u32 *n = bpf_map_lookup_elem(&since_wakeup, &zero);
	if (!n || ++*n < wakeup_every)
		return BPF_RB_NO_WAKEUP;
	*n = 0;
	return BPF_RB_FORCE_WAKEUP;
}

/* A thread has state only once a call of it passed the process filter, so
 * an existing state needs no filter check: one map lookup per probe. */
static __always_inline struct ct_thread_state *new_thread_state(__u64 pid_tgid)
{
	if (!current_traced(pid_tgid))
		return NULL;
	__u32 tid = (__u32)pid_tgid, zero = 0;
	struct ct_thread_state *init = bpf_map_lookup_elem(&zero_state, &zero);
	if (!init || bpf_map_update_elem(&threads, &tid, init, BPF_NOEXIST)) {
		count(CT_CNT_LOST_THREADS);
		return NULL;
	}
	struct ct_thread_state *st = bpf_map_lookup_elem(&threads, &tid);
	if (!st)
		return NULL;
	st->tgid = pid_tgid >> 32;
	bpf_get_current_comm(st->comm, sizeof(st->comm));
	return st;
}

static __always_inline void read_args(struct pt_regs *ctx, struct ct_frame *f, __u64 cookie)
{
	f->args[0] = PT_REGS_PARM1(ctx);
	f->args[1] = PT_REGS_PARM2(ctx);
	f->args[2] = PT_REGS_PARM3(ctx);
	f->args[3] = PT_REGS_PARM4(ctx);
	f->args[4] = PT_REGS_PARM5(ctx);
	f->args[5] = ctx->r9;
	__u32 words = CT_COOKIE_STACK_WORDS(cookie);
	if (words) {
		if (words > CT_MAX_STACK_ARGS)
			words = CT_MAX_STACK_ARGS;
		/* At the first instruction rsp points at the return address.
		 * On a fault the helper zeroes the words. */
		bpf_probe_read_user(&f->args[CT_REG_ARGS], words * 8, (void *)(PT_REGS_SP(ctx) + 8));
	}
	if (cookie & CT_COOKIE_STACK_ADDR)
		f->args[CT_REG_ARGS] = PT_REGS_SP(ctx) + 8;
}

static __always_inline void emit_call(void *ctx, __u64 pid_tgid, struct ct_thread_state *st, struct ct_frame *f,
				      __u64 dur, __s64 ret, __u64 caller, __u8 flags);

/* Records a call at its entry, its return left unprobed: dur_ns, ret are 0.
 * The frame slot is scratch. Returns 1 for enter_call. */
static __always_inline int emit_at_entry(struct pt_regs *ctx, __u64 pid_tgid, struct ct_thread_state *st,
					 struct ct_frame *f, __u64 cookie)
{
	read_args(ctx, f, cookie);
	f->ts_ns = bpf_ktime_get_ns();
	__u64 caller = 0;
	bpf_probe_read_user(&caller, sizeof(caller), (void *)PT_REGS_SP(ctx));
	emit_call(ctx, pid_tgid, st, f, 0, 0, caller, CT_FLAG_ENTRY_ONLY);
	return 1;
}

/* The top frame of a stack `depth` deep (depth > 0). clang knows depth - 1
 * is below CT_MAX_DEPTH where this is called and drops the mask, but Linux
 * 6.1's verifier does not narrow depth after a depth != 0 test, so it takes
 * depth - 1 for any u32 and rejects the access: barrier_var hides the bound
 * from clang, and the mask stays. */
static __always_inline struct ct_frame *top_frame(struct ct_thread_state *st, __u32 depth)
{
	__u32 top = depth - 1;
	barrier_var(top);
	return &st->frames[top & (CT_MAX_DEPTH - 1)];
}

/* --max-overhead (src/record/budget.h): user space detaches the probes of the
 * APIs flagged in hot_apis and attaches them again. A call of one of them in
 * progress when its return probe went never sees its return: its frame,
 * entered before hot_stale_before_ns (set once a detach is complete), is
 * dropped when found on top of its thread's stack, so that it neither makes
 * later calls look nested nor pairs with a later return. */
__u64 hot_stale_before_ns = 0;
__u8 hot_apis[CT_MAX_APIS] = {};
/* APIs whose outermost entry-only records carry the caller chain
 * (CT_FLAG_CALLER_CHAIN): the copies. Set by user space. */
__u8 chain_apis[CT_MAX_APIS] = {};

static __always_inline void drop_stale_frames(struct ct_thread_state *st)
{
	__u64 before = hot_stale_before_ns;
	if (!before)
		return;
	for (int i = 0; i < CT_MAX_DEPTH; i++) {
		__u32 depth = st->depth;
		if (depth == 0 || depth > CT_MAX_DEPTH)
			return;
		struct ct_frame *f = top_frame(st, depth);
		if (f->ts_ns >= before || !hot_apis[CT_COOKIE_API(f->cookie) & (CT_MAX_APIS - 1)])
			return;
		st->depth = depth - 1;
		count(CT_CNT_UNMATCHED);
	}
}

/* The argument in `slot` (1-based, as the tables of record.h give it), or
 * `fallback` when the slot is 0 or out of range. An indexed read, not a loop
 * over the slots that assigns on a match: such a loop gives the verifier a
 * new state for every combination of matches, and exporter mode's return
 * program ran past its million instructions. */
static __always_inline __u64 arg_in_slot(struct ct_frame *f, __u32 slot, __u64 fallback)
{
	__u32 idx = slot - 1; /* wraps to huge for slot 0 */
	barrier_var(idx);     /* keep the bound on the register that indexes */
	if (idx >= CT_MAX_ARGS)
		return fallback;
	return f->args[idx];
}

static __always_inline void aggregate_untimed(__u32 api);
static __always_inline void fill_call(struct ct_call *c, __u32 type, __u64 pid_tgid, struct ct_thread_state *st,
				      struct ct_frame *f, __u8 flags);
static __always_inline bool count_activity(__u32 api, struct ct_frame *f, __u32 depth, bool failed, __u64 dur,
					   __u64 pid_tgid);
static __always_inline bool export_call(__u32 api, struct ct_frame *f, __u64 dur, __s64 ret, bool failed,
					__u64 pid_tgid);

/* An entry-only probe (CT_COOKIE_ENTRY_ONLY): the call is recorded now and
 * pushes no frame, since no return will pop it; the frame slot above the
 * stack is scratch. Inside a forward of the same operation (a framework's
 * local function named like the API, probed with its return) it is the
 * library's end of that call: the forward's record takes its API name.
 * Returns 1 (a session program then leaves the return unprobed). */
static __always_inline int enter_only(struct pt_regs *ctx, __u64 pid_tgid, struct ct_thread_state *st, __u32 depth,
				      __u64 cookie)
{
	struct ct_frame *f = &st->frames[depth & (CT_MAX_DEPTH - 1)];
	f->cookie = cookie;
	f->fwd_depth = 0;
	f->owner = CT_FRAME_RECORDED;
	f->level = 0;
	f->parent_api = CT_NO_API;
	struct ct_frame *top = f;
	if (depth) {
		top = top_frame(st, depth);
		__u32 rec = top->owner == CT_FRAME_RECORDED ? depth - 1 : top->owner;
		struct ct_frame *recorded = &st->frames[rec & (CT_MAX_DEPTH - 1)];
		if (CT_COOKIE_OP(top->cookie) == CT_COOKIE_OP(cookie)) {
			if (depth + 1 >= recorded->fwd_depth) {
				recorded->fwd_depth = depth + 1;
				recorded->fwd_api = CT_COOKIE_API(cookie);
				recorded->fwd_flags = CT_FWD_NO_RET;
			}
			return 1;
		}
		f->level = recorded->level + 1;
		f->parent_api = CT_COOKIE_API(top->cookie);
	}
	read_args(ctx, f, cookie);
	f->ts_ns = bpf_ktime_get_ns();
	__u32 api = CT_COOKIE_API(cookie);
	if (export_mode) {
		if (!export_call(api, f, 0, 0, false, pid_tgid))
			return 1;
	} else if (summary_mode) {
		aggregate_untimed(api);
		if (count_activity(api, f, f->level, false, 0, pid_tgid))
			return 1;
		if (!summary_records_all && !(cookie & CT_COOKIE_DETAIL))
			return 1;
	}
	__u64 caller = 0;
	bpf_probe_read_user(&caller, sizeof(caller), (void *)PT_REGS_SP(ctx));
	__u8 flags = CT_FLAG_ENTRY_ONLY;
	__u32 zero = 0;
	struct exit_scratch *s = !depth && chain_apis[api & (CT_MAX_APIS - 1)] && !capture_stack
					 ? bpf_map_lookup_elem(&scratch, &zero) : NULL;
	if (s) {
		struct ct_call *c = &s->call;
		fill_call(c, CT_REC_CALL, pid_tgid, st, f, flags | CT_FLAG_CALLER_CHAIN);
		c->dur_ns = 0;
		c->ret = 0;
		c->caller = caller;
		c->payload_len = 0;
		c->stack_len = CT_CALLER_SCAN_WORDS; /* zeroes where unreadable */
		bpf_probe_read_user(s->payload, CT_CALLER_SCAN_WORDS * 8, (void *)(PT_REGS_SP(ctx) + 8));
		if (bpf_ringbuf_output(&events, s, sizeof(struct ct_call) + CT_CALLER_SCAN_WORDS * 8, ring_flags()))
			count(CT_CNT_LOST_RINGBUF);
		return 1;
	}
	if (depth) {
		/* fill_call reads no out-params of an entry-only call: these
		 * slots carry the enclosing call's first arguments. */
		f->fwd_depth = 1;
		f->fwd_outs[0] = top->args[0];
		f->fwd_outs[1] = top->args[1];
		f->fwd_api = CT_COOKIE_API(cookie);
		f->fwd_flags = 0;
		flags |= CT_FLAG_PARENT_ARGS;
	}
	emit_call(ctx, pid_tgid, st, f, 0, 0, caller, flags);
	return 1;
}

/* Returns 1 when the call's return need not be probed (session programs
 * then skip it), 0 when it must be. */
static __always_inline int enter_call(struct pt_regs *ctx, bool session)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	struct ct_thread_state *st = bpf_map_lookup_elem(&threads, &tid);
	if (!st) {
		st = new_thread_state(pid_tgid);
		if (!st)
			return 1;
	}
	__u64 cookie = bpf_get_attach_cookie(ctx);
	st->entry_hits++;
	if (cookie & CT_COOKIE_STEPPED)
		st->stepped_hits++;
	drop_stale_frames(st);
	__u32 depth = st->depth;
	if (depth >= CT_MAX_DEPTH) {
		count(CT_CNT_DEPTH_OVERFLOW);
		if (cookie & CT_COOKIE_ENTRY_ONLY)
			return 1; /* no return comes to pop a depth */
		st->depth = depth + 1;
		return 0; /* the return must come to pop the depth */
	}
	if (cookie & CT_COOKIE_ENTRY_ONLY)
		return enter_only(ctx, pid_tgid, st, depth, cookie);
	struct ct_frame *f = &st->frames[depth & (CT_MAX_DEPTH - 1)];
	f->cookie = cookie;
	f->fwd_depth = 0;
	f->owner = CT_FRAME_RECORDED;
	if (depth == 0) {
		f->level = 0;
		f->parent_api = CT_NO_API;
	} else {
		struct ct_frame *top = top_frame(st, depth);
		__u32 rec = top->owner == CT_FRAME_RECORDED ? depth - 1 : top->owner;
		struct ct_frame *recorded = &st->frames[rec & (CT_MAX_DEPTH - 1)];
		if (CT_COOKIE_OP(top->cookie) == CT_COOKIE_OP(cookie)) {
			f->owner = rec; /* a forward */
		} else {
			f->level = recorded->level + 1;
			/* The enclosing function: inside a forward chain, the library's,
			 * whose API the record will name. */
			f->parent_api = CT_COOKIE_API(top->cookie);
			if (session && record_at_entry && !CT_COOKIE_HAS_OUTS(cookie))
				/* Nothing to read at return: record it now. */
				return emit_at_entry(ctx, pid_tgid, st, f, cookie);
		}
	}
	/* An NVTX range call (--nvtx) has no result: its message is read now,
	 * and one trap is spent instead of two. */
	if (session && (cookie & CT_COOKIE_ALWAYS) && !capture_stack && !export_mode)
		return emit_at_entry(ctx, pid_tgid, st, f, cookie);
	st->depth = depth + 1;
	if (((summary_mode && !summary_records_all) || export_mode) && !(cookie & CT_COOKIE_DETAIL)) {
		/* Only its latency is kept: the arguments are not needed. */
		f->ts_ns = bpf_ktime_get_ns();
		return 0;
	}
	read_args(ctx, f, cookie);
	f->ts_ns = bpf_ktime_get_ns();
	return 0;
}

SEC("uprobe")
int ct_enter(struct pt_regs *ctx)
{
	if (empty_programs)
		return 0;
	enter_call(ctx, false);
	return 0;
}

static __always_inline __u32 read_payload(struct exit_scratch *s, __u64 cookie, struct ct_frame *f)
{
	__u32 kind = CT_COOKIE_PAYLOAD_KIND(cookie);
	__u32 idx = CT_COOKIE_PAYLOAD_SLOT(cookie) - 1; /* wraps to huge when there is none */
	if (kind == CT_PAYLOAD_NONE || idx >= CT_MAX_ARGS)
		return 0;
	void *ptr = (void *)f->args[idx];
	if (kind == CT_PAYLOAD_STRING) {
		long n = bpf_probe_read_user_str(s->payload, CT_MAX_PAYLOAD, ptr);
		if (n <= 0) {
			s->call.flags |= CT_FLAG_PAYLOAD_FAULT;
			return 0;
		}
		if (n == CT_MAX_PAYLOAD)
			s->call.flags |= CT_FLAG_PAYLOAD_TRUNC;
		return n;
	}
	if (kind == CT_PAYLOAD_BYTES) {
		__u32 len = CT_COOKIE_PAYLOAD_WORDS(cookie) * 8;
		if (len > CT_MAX_PAYLOAD)
			len = CT_MAX_PAYLOAD;
		if (bpf_probe_read_user(s->payload, len, ptr)) {
			s->call.flags |= CT_FLAG_PAYLOAD_FAULT;
			return 0;
		}
		return len;
	}
	/* CT_PAYLOAD_LAUNCH_CONFIG: the config, then up to CT_LAUNCH_MAX_ATTRS attributes. */
	if (bpf_probe_read_user(s->payload, CT_LAUNCH_CONFIG_SIZE, ptr)) {
		s->call.flags |= CT_FLAG_PAYLOAD_FAULT;
		return 0;
	}
	__u64 attrs = *(__u64 *)&s->payload[40];
	__u32 nattrs = *(__u32 *)&s->payload[48];
	if (nattrs > CT_LAUNCH_MAX_ATTRS) {
		nattrs = CT_LAUNCH_MAX_ATTRS;
		s->call.flags |= CT_FLAG_PAYLOAD_TRUNC;
	}
	if (!attrs || !nattrs)
		return CT_LAUNCH_CONFIG_SIZE;
	if (bpf_probe_read_user(&s->payload[CT_LAUNCH_CONFIG_SIZE], nattrs * CT_LAUNCH_ATTR_SIZE,
				(void *)attrs)) {
		s->call.flags |= CT_FLAG_PAYLOAD_FAULT;
		return CT_LAUNCH_CONFIG_SIZE;
	}
	return CT_LAUNCH_CONFIG_SIZE + nattrs * CT_LAUNCH_ATTR_SIZE;
}

/* Reads out-param i of the call whose arguments are `args` into *dst; returns
 * its fault flag (0 when read or when there is none). */
static __always_inline __u8 read_out(__u64 *dst, __u64 cookie, __u64 *args, int i)
{
	__u32 idx = CT_COOKIE_OUT_SLOT(cookie, i) - 1;
	__u32 size = CT_COOKIE_OUT_SIZE(cookie, i);
	*dst = 0;
	if (idx >= CT_MAX_ARGS || !size || size > 8)
		return 0;
	void *ptr = (void *)args[idx];
	if (!ptr || bpf_probe_read_user(dst, size, ptr))
		return i ? CT_FLAG_OUT1_FAULT : CT_FLAG_OUT0_FAULT;
	return 0;
}

/* Fills every field but payload_len and stack_len (ring memory is not zeroed).
 * Out-params come from the innermost forward when one returned. */
static __always_inline void fill_call(struct ct_call *c, __u32 type, __u64 pid_tgid, struct ct_thread_state *st,
				      struct ct_frame *f, __u8 flags)
{
	c->type = type;
	c->api = type == CT_REC_CALL && f->fwd_depth ? f->fwd_api : CT_COOKIE_API(f->cookie);
	c->parent_api = f->parent_api;
	c->pid = pid_tgid >> 32;
	c->tid = (__u32)pid_tgid;
	c->ts_ns = f->ts_ns;
	__builtin_memcpy(c->args, f->args, sizeof(c->args));
	c->depth = f->level;
	c->reserved = 0;
	__builtin_memcpy(c->comm, st->comm, sizeof(c->comm));
	if (type != CT_REC_CALL) {
		c->outs[0] = 0;
		c->outs[1] = 0;
	} else if (f->fwd_depth && !(f->fwd_flags & CT_FWD_NO_RET)) {
		c->outs[0] = f->fwd_outs[0];
		c->outs[1] = f->fwd_outs[1];
		flags |= f->fwd_flags;
	} else {
		flags |= read_out(&c->outs[0], f->cookie, f->args, 0);
		flags |= read_out(&c->outs[1], f->cookie, f->args, 1);
	}
	c->flags = flags;
}

/* floor(log2(v)) for v > 0; BPF has no count-leading-zeros instruction. */
static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0, shift;
	shift = (v > 0xffffffffull) << 5;
	v >>= shift;
	r |= shift;
	shift = (v > 0xffff) << 4;
	v >>= shift;
	r |= shift;
	shift = (v > 0xff) << 3;
	v >>= shift;
	r |= shift;
	shift = (v > 0xf) << 2;
	v >>= shift;
	r |= shift;
	shift = (v > 0x3) << 1;
	v >>= shift;
	r |= shift;
	return r | (__u32)(v >> 1);
}

/* The log-linear bucket of record.h. */
static __always_inline __u32 hist_bucket(__u64 d)
{
	if (d < CT_HIST_SUB)
		return d;
	__u32 p = log2_u64(d);
	if (p > CT_HIST_MAX_POW)
		return CT_HIST_BUCKETS - 1;
	return (p - 1) * CT_HIST_SUB + ((d >> (p - 2)) & (CT_HIST_SUB - 1));
}

static __always_inline void aggregate(__u32 api, __u64 dur, bool failed)
{
	struct ct_api_stats *st = bpf_map_lookup_elem(&api_stats, &api);
	if (!st)
		return;
	if (!st->calls || dur < st->min_ns)
		st->min_ns = dur;
	if (dur > st->max_ns)
		st->max_ns = dur;
	st->calls++;
	st->errors += failed;
	st->total_ns += dur;
	/* dur^2 = hi^2 * 2^64 + hi*lo * 2^33 + lo^2 with 32-bit halves, added to a 128-bit sum. */
	__u64 hi = dur >> 32, lo = dur & 0xffffffffull, cross = hi * lo;
	__u64 sq_lo = lo * lo, mid = cross << 33;
	__u64 sum = st->sum_sq_lo + sq_lo;
	__u64 carry = sum < sq_lo;
	__u64 sum2 = sum + mid;
	carry += sum2 < mid;
	st->sum_sq_lo = sum2;
	st->sum_sq_hi += hi * hi + (cross >> 31) + carry;
	__u32 b = hist_bucket(dur);
	barrier_var(b); /* keep the bounds check on the register that indexes */
	if (b < CT_HIST_BUCKETS)
		st->hist[b]++;
}

/* A call recorded at its entry (CT_COOKIE_ENTRY_ONLY): counted, not timed. */
static __always_inline void aggregate_untimed(__u32 api)
{
	struct ct_api_stats *st = bpf_map_lookup_elem(&api_stats, &api);
	if (!st)
		return;
	st->calls++;
	st->untimed++;
}

/* Summary mode: counts a successful outermost launch, copy or memset in the
 * activity map, and bumps the page-locked generation after a call that
 * changed page-locked memory. Returns true when the call needs no record:
 * the tables count only successful outermost calls, so the others need none
 * either. A full map sends the record instead, which user space counts the same. */
static __always_inline bool count_activity(__u32 api, struct ct_frame *f, __u32 depth, bool failed, __u64 dur,
					   __u64 pid_tgid)
{
	if (!activity_in_bpf)
		return false;
	struct ct_activity_api *a = bpf_map_lookup_elem(&activity_apis, &api);
	if (!a || a->kind == CT_ACT_NONE)
		return false;
	__u32 zero = 0;
	__u64 *gen = bpf_map_lookup_elem(&page_locked_gen, &zero);
	if (!gen)
		return false;
	if (a->kind == CT_ACT_PAGE_LOCK) {
		if (!failed && depth == 0)
			__sync_fetch_and_add(gen, 1);
		return false;
	}
	if (failed || depth)
		return true;
	struct ct_activity_key *key = bpf_map_lookup_elem(&activity_key_scratch, &zero);
	if (!key)
		return false;
	key->tgid = pid_tgid >> 32;
	key->api = api;
	key->pad = 0;
	key->page_locked_gen = a->kind == CT_ACT_COPY ? *gen : 0;
	/* Copies: the host side of a host<->device copy (page-locked or not). */
	__u64 dir = arg_in_slot(f, a->copy_kind_slot, a->copy_kind);
	__u32 host_slot = dir == CT_COPY_HTOD ? a->src_slot : dir == CT_COPY_DTOH ? a->dst_slot : 0;
	__u16 mask = a->key_args;
	for (int i = 0; i < CT_MAX_ARGS; i++)
		key->args[i] = (mask & (1u << i)) || i + 1 == host_slot ? f->args[i] : 0;
	__builtin_memset(key->dims, 0, sizeof(key->dims));
	__u32 slot = a->config_slot - 1; /* wraps to huge when there is none */
	if (slot < CT_MAX_ARGS && bpf_probe_read_user(key->dims, sizeof(key->dims), (void *)f->args[slot]))
		return false; /* the record says the config could not be read */
	struct ct_activity *v = bpf_map_lookup_elem(&activity, key);
	if (!v) {
		struct ct_activity first = {1, dur, f->ts_ns, f->ts_ns};
		if (!bpf_map_update_elem(&activity, key, &first, BPF_NOEXIST))
			return true;
		v = bpf_map_lookup_elem(&activity, key); /* another CPU added it meanwhile */
		if (!v) {
			count(CT_CNT_ACTIVITY_FULL);
			return false;
		}
	}
	__sync_fetch_and_add(&v->calls, 1);
	__sync_fetch_and_add(&v->total_ns, dur);
	if (f->ts_ns < v->first_ts_ns)
		v->first_ts_ns = f->ts_ns;
	if (f->ts_ns > v->last_ts_ns)
		v->last_ts_ns = f->ts_ns;
	return true;
}

static const __u64 export_bounds_ns[CT_EXPORT_BUCKETS - 1] = CT_EXPORT_BOUNDS_NS;

static __always_inline __u32 export_bucket(__u64 dur)
{
	__u32 b = CT_EXPORT_BUCKETS - 1;
	for (__u32 i = 0; i < CT_EXPORT_BUCKETS - 1; i++) {
		if (dur <= export_bounds_ns[i]) {
			b = i;
			break;
		}
	}
	return b;
}

/* Exporter mode: counts a completed call in export_stats. Returns true when
 * the call also needs its record (an allocation or a free). */
static __always_inline bool export_call(__u32 api, struct ct_frame *f, __u64 dur, __s64 ret, bool failed,
					__u64 pid_tgid)
{
	struct ct_export_api *a = bpf_map_lookup_elem(&export_apis, &api);
	if (!a)
		return false;
	struct ct_export_key key = {};
	key.tgid = pid_tgid >> 32;
	key.api = api;
	key.status = ret >= 0 && ret < CT_EXPORT_STATUS_OTHER ? (__u16)ret : CT_EXPORT_STATUS_OTHER;
	bool outer_ok = !failed && f->level == 0;
	__u64 bytes = 0;
	if (a->kind == CT_EXP_COPY) {
		__u64 dir = a->copy_kind;
		if (a->copy_kind_slot) { /* cudaMemcpyKind 0..3 are HtoH..DtoD */
			dir = arg_in_slot(f, a->copy_kind_slot, CT_EXPORT_DIR_DEFAULT);
			if (dir > 3)
				dir = CT_EXPORT_DIR_DEFAULT;
		}
		bytes = arg_in_slot(f, a->bytes_slot, 0);
		__u64 rows = arg_in_slot(f, a->rows_slot, 1);
		key.direction = dir <= CT_EXPORT_DIR_DEFAULT ? (__u8)dir : CT_EXPORT_DIR_DEFAULT;
		bytes = outer_ok ? bytes * rows : 0;
	}
	struct ct_export_value *v = bpf_map_lookup_elem(&export_stats, &key);
	if (!v) {
		struct ct_export_value zero = {};
		bpf_map_update_elem(&export_stats, &key, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&export_stats, &key); /* ours, or another CPU's */
		if (!v) {
			count(CT_CNT_EXPORT_FULL);
			return a->kind == CT_EXP_MEMORY;
		}
	}
	__sync_fetch_and_add(&v->calls, 1);
	if (outer_ok)
		__sync_fetch_and_add(&v->outer_ok, 1);
	if (bytes)
		__sync_fetch_and_add(&v->bytes, bytes);
	if (CT_COOKIE_ENTRY_ONLY & f->cookie)
		return a->kind == CT_EXP_MEMORY; /* recorded at entry: no latency to count */
	__sync_fetch_and_add(&v->total_ns, dur);
	__u32 b = export_bucket(dur);
	barrier_var(b);
	if (b < CT_EXPORT_BUCKETS)
		__sync_fetch_and_add(&v->buckets[b], 1);
	return a->kind == CT_EXP_MEMORY;
}

/* Sends the record of a completed (or entry-only) call. */
static __always_inline void emit_call(void *ctx, __u64 pid_tgid, struct ct_thread_state *st, struct ct_frame *f,
				      __u64 dur, __s64 ret, __u64 caller, __u8 flags)
{
	__u64 cookie = f->cookie;
	if (CT_COOKIE_PAYLOAD_KIND(cookie) == CT_PAYLOAD_NONE && !capture_stack) {
		/* The common case: a fixed-size record built in place. */
		struct ct_call *c = bpf_ringbuf_reserve(&events, sizeof(*c), 0);
		if (!c) {
			count(CT_CNT_LOST_RINGBUF);
			return;
		}
		fill_call(c, CT_REC_CALL, pid_tgid, st, f, flags);
		c->dur_ns = dur;
		c->ret = ret;
		c->caller = caller;
		c->payload_len = 0;
		c->stack_len = 0;
		bpf_ringbuf_submit(c, ring_flags());
		return;
	}

	__u32 zero = 0;
	struct exit_scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return;
	struct ct_call *c = &s->call;
	fill_call(c, CT_REC_CALL, pid_tgid, st, f, flags);
	c->dur_ns = dur;
	c->ret = ret;
	c->caller = caller;
	c->stack_len = 0;
	__u32 len = read_payload(s, cookie, f);
	if (len > CT_MAX_PAYLOAD)
		len = CT_MAX_PAYLOAD;
	c->payload_len = len;
	__u64 size = sizeof(struct ct_call) + len;
	if (capture_stack) {
		__u32 off = CT_ALIGN8(len);
		if (off > CT_MAX_PAYLOAD)
			off = CT_MAX_PAYLOAD;
		/* At a return probe the registers are the caller's: the first
		 * frame is the call site, the rest follow its frame pointers. */
		long n = bpf_get_stack(ctx, &s->payload[off], CT_MAX_STACK_FRAMES * 8, BPF_F_USER_STACK);
		if (n > 0 && n <= CT_MAX_STACK_FRAMES * 8) {
			c->stack_len = n / 8;
			size = sizeof(struct ct_call) + off + n;
		}
	}
	if (size > sizeof(*s))
		size = sizeof(*s);
	if (bpf_ringbuf_output(&events, s, size, ring_flags()))
		count(CT_CNT_LOST_RINGBUF);
}

/* A forward returned: its results go to its owner's record, unless a deeper
 * forward (closer to the library) already gave them. */
static __always_inline void pass_to_owner(struct ct_thread_state *st, struct ct_frame *f, __u32 depth, __s64 ret)
{
	struct ct_frame *owner = &st->frames[f->owner & (CT_MAX_DEPTH - 1)];
	if (depth + 1 < owner->fwd_depth)
		return;
	owner->fwd_depth = depth + 1;
	owner->fwd_api = CT_COOKIE_API(f->cookie);
	owner->fwd_ret = ret;
	if (summary_mode && !summary_records_all && !(f->cookie & CT_COOKIE_DETAIL))
		return; /* no arguments were saved, and no record will read them */
	owner->fwd_flags = read_out(&owner->fwd_outs[0], f->cookie, f->args, 0) |
			   read_out(&owner->fwd_outs[1], f->cookie, f->args, 1);
}

static __always_inline void exit_call(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	struct ct_thread_state *st = bpf_map_lookup_elem(&threads, &tid);
	if (!st)
		return;
	st->return_hits++;
	drop_stale_frames(st);
	if (st->depth == 0)
		return;
	__u64 now = bpf_ktime_get_ns();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 depth = st->depth - 1;
	if (depth >= CT_MAX_DEPTH) {
		st->depth = depth;
		return;
	}
	/* Find this call's frame. It is the top one unless a frame above it was
	 * skipped (longjmp, exception): discard those. */
	__u32 api = CT_COOKIE_API(cookie);
	if (CT_COOKIE_API(st->frames[depth].cookie) != api) {
		int found = -1;
		for (int i = 0; i < CT_MAX_DEPTH; i++) {
			if (i >= (int)depth)
				break;
			if (CT_COOKIE_API(st->frames[i].cookie) == api)
				found = i;
		}
		if (found < 0)
			return; /* entered before we attached */
		count_n(CT_CNT_UNMATCHED, depth - found);
		depth = (__u32)found & (CT_MAX_DEPTH - 1);
	}
	st->depth = depth;
	struct ct_frame *f = &st->frames[depth];

	__s64 ret = cookie & CT_COOKIE_VOID ? 0 : (__s32)PT_REGS_RC(ctx);
	if (f->owner != CT_FRAME_RECORDED) {
		pass_to_owner(st, f, depth, ret);
		return;
	}
	if (f->fwd_depth) { /* the library's API variant and status */
		api = f->fwd_api;
		if (!(f->fwd_flags & CT_FWD_NO_RET))
			ret = f->fwd_ret;
	}
	__u64 dur = now - f->ts_ns;
	__s64 not_failure = cookie & CT_COOKIE_NCCL_STATUS ? CT_NCCL_IN_PROGRESS : CT_CUDA_NOT_READY;
	if (export_mode) {
		if (!export_call(api, f, dur, ret, ret != 0 && ret != not_failure, pid_tgid))
			return;
	} else if (summary_mode) {
		bool failed = ret != 0 && ret != not_failure;
		aggregate(api, dur, failed);
		if (count_activity(api, f, f->level, failed, dur, pid_tgid))
			return;
		if (!summary_records_all && !(cookie & CT_COOKIE_DETAIL))
			return;
	} else if (!(cookie & CT_COOKIE_ALWAYS)) {
		if (dur < min_dur_ns)
			return;
		if (errors_only && (ret == 0 || ret == not_failure))
			return;
	}
	/* At a return probe the instruction pointer is the return address: the call site. */
	emit_call(ctx, pid_tgid, st, f, dur, ret, PT_REGS_IP(ctx), 0);
}

SEC("uretprobe")
int ct_exit(struct pt_regs *ctx)
{
	if (empty_programs)
		return 0;
	exit_call(ctx);
	return 0;
}

/* Entry and return in one program (uprobe_multi session link, Linux 6.13):
 * an entry that returns 1 has its return left unprobed, which saves the
 * return trap. Attached instead of ct_enter/ct_exit where the kernel has it. */
SEC("uprobe")
int ct_session(struct pt_regs *ctx)
{
	if (empty_programs) /* as planned: entry-only probes leave their return unprobed */
		return bpf_session_is_return() ? 0 : (bpf_get_attach_cookie(ctx) & CT_COOKIE_ENTRY_ONLY) != 0;
	if (bpf_session_is_return()) {
		exit_call(ctx);
		return 0;
	}
	return enter_call(ctx, true);
}

/* r_state in the loader's struct r_debug (<link.h>): RT_ADD or RT_DELETE
 * while it maps or unmaps objects, RT_CONSISTENT once the link map is whole. */
#define RT_CONSISTENT 0

/*
 * The dynamic loader calls _dl_debug_state() around each change to the link
 * map: with r_state RT_ADD (or RT_DELETE) before it maps (unmaps) objects,
 * RT_CONSISTENT after, before any code of a new object runs. Only the call
 * in the consistent state can find new code: tell user space then, and stop
 * the process so that it cannot call into a just-mapped library before
 * probes are attached there; user space sends SIGCONT once it has attached.
 *
 * The cookie is the distance from _dl_debug_state to _r_debug.r_state in the
 * loader (0 when unknown: then every call is reported and stops).
 *
 * Invariant: every SIGCONT that a record makes user space (or the watchdog)
 * send follows the SIGSTOP it answers, so the last word for a process is
 * always a continue, however many threads load libraries at once. Hence the
 * order: reserve the record (a full ring means no record, so no stop), send
 * the signal, and only then publish the record. From a uprobe the helper
 * runs in task context with interrupts on and a zero preempt count, so it
 * queues the SIGSTOP synchronously (group_send_sig_info) before returning;
 * a SIGCONT sent after that cancels it whether it is still pending (SIGCONT
 * flushes pending stop signals) or already taken (it wakes the stopped
 * group). Sending first and publishing second closes the race where the
 * reader's SIGCONT came before the SIGSTOP and the process stayed stopped.
 * (Kernels that defer the signal to an irq_work: docs/reliability.md, 9.)
 */
/* Set when cudatrace's own process starts to exit (ct_thread_exit). */
__u64 tracer_dying = 0;

SEC("uprobe")
int ct_map_change(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!tgid_traced(pid_tgid >> 32))
		return 0;
	__s64 to_r_state = (__s64)bpf_get_attach_cookie(ctx);
	__u64 probe_ip = bpf_get_func_ip(ctx);
	if (to_r_state && probe_ip) {
		__s32 r_state = RT_CONSISTENT;
		/* An unreadable state is taken as consistent: act on it. */
		bpf_probe_read_user(&r_state, sizeof(r_state), (void *)(probe_ip + to_r_state));
		if (r_state != RT_CONSISTENT)
			return 0;
	}
	struct ct_map_change *m = report_execs ? bpf_ringbuf_reserve(&control, sizeof(*m), 0)
					       : bpf_ringbuf_reserve(&events, sizeof(*m), 0);
	if (!m) {
		count(CT_CNT_LOST_CONTROL);
		return 0;
	}
	m->type = CT_REC_MAP_CHANGE;
	m->pid = pid_tgid >> 32;
	m->tid = (__u32)pid_tgid;
	m->stopped = stop_on_map_change && !tracer_dying && bpf_send_signal(SIGSTOP) == 0;
	/* A stop is undone whoever dies. cudatrace itself continues it, or its
	 * watchdog, which drains this ring once cudatrace has gone; but once
	 * cudatrace is dying (ct_thread_exit set tracer_dying) its probes stay
	 * in place for seconds while the kernel closes its links, and a stop
	 * then would wait for a reader that never comes. The SIGSTOP is queued
	 * before tracer_dying is read again (the atomic below is a full
	 * barrier): either the dying tracer's flag is seen here and the stop is
	 * undone at once (SIGCONT flushes the pending SIGSTOP), or the flag was
	 * set later and this record, published below, is drained by the
	 * watchdog after every probe is gone. */
	if (m->stopped && __sync_fetch_and_add(&tracer_dying, 0)) {
		bpf_send_signal(SIGCONT);
		m->stopped = 0;
	}
	bpf_ringbuf_submit(m, BPF_RB_FORCE_WAKEUP);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(ct_fork, struct task_struct *parent, struct task_struct *child)
{
	if (!follow_forks)
		return 0;
	__u32 parent_tgid = parent->tgid;
	__u32 child_tgid = child->tgid;
	if (parent_tgid == child_tgid || !bpf_map_lookup_elem(&traced_tgids, &parent_tgid))
		return 0;
	__u8 one = 1;
	bpf_map_update_elem(&traced_tgids, &child_tgid, &one, BPF_ANY);
	return 0;
}

/* After exec the thread runs another program: new name, no calls open. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(ct_exec, struct task_struct *task)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct ct_thread_state *st = bpf_map_lookup_elem(&threads, &tid);
	if (st) {
		st->depth = 0;
		bpf_get_current_comm(st->comm, sizeof(st->comm));
	}
	if (report_execs) {
		struct ct_map_change *m = bpf_ringbuf_reserve(&control, sizeof(*m), 0);
		if (!m) {
			count(CT_CNT_LOST_CONTROL);
			return 0;
		}
		__u64 pid_tgid = bpf_get_current_pid_tgid();
		m->type = CT_REC_MAP_CHANGE;
		m->pid = pid_tgid >> 32;
		m->tid = (__u32)pid_tgid;
		m->stopped = 0;
		bpf_ringbuf_submit(m, BPF_RB_FORCE_WAKEUP);
	}
	return 0;
}

/* Adds an exiting thread's probe hits to its process's; at the exit of the
 * last thread, also the process's CPU time. */
static __always_inline void fold_cost(struct task_struct *task, __u32 tgid, struct ct_thread_state *st)
{
	bool last = BPF_CORE_READ(task, signal, live.counter) == 0;
	struct ct_process_cost *c = bpf_map_lookup_elem(&process_cost, &tgid);
	if (!c) {
		if (!st)
			return;
		struct ct_process_cost first = {};
		__builtin_memcpy(first.comm, st->comm, sizeof(first.comm));
		bpf_map_update_elem(&process_cost, &tgid, &first, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&process_cost, &tgid);
		if (!c)
			return;
	}
	if (st) {
		__sync_fetch_and_add(&c->entry_hits, st->entry_hits);
		__sync_fetch_and_add(&c->return_hits, st->return_hits);
		__sync_fetch_and_add(&c->stepped_hits, st->stepped_hits);
	}
	if (last)
		c->cpu_ns = BPF_CORE_READ(task, signal, sum_sched_runtime) + BPF_CORE_READ(task, se.sum_exec_runtime);
}

/* A thread that exits inside a probed call never returns from it: report its
 * open frames as unfinished and free its state. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(ct_thread_exit, struct task_struct *task)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	/* cudatrace is dying (killed, or exiting): its main thread exits, or
	 * any thread of it exits with the whole group (a fatal signal, exit()).
	 * Its helper threads ending on their own are neither. */
	if (tracer_tgid && pid_tgid >> 32 == tracer_tgid &&
	    (tid == tracer_tgid || (BPF_CORE_READ(task, signal, flags) & SIGNAL_GROUP_EXIT)))
		__sync_fetch_and_or(&tracer_dying, 1);
	struct ct_thread_state *st = bpf_map_lookup_elem(&threads, &tid);
	fold_cost(task, pid_tgid >> 32, st);
	if (st) {
		__u32 depth = st->depth;
		for (__u32 i = 0; i < CT_MAX_DEPTH; i++) {
			if (i >= depth)
				break;
			struct ct_frame *f = &st->frames[i];
			if (f->owner != CT_FRAME_RECORDED)
				continue; /* a forward: its owner is reported */
			struct ct_call *c = bpf_ringbuf_reserve(&events, sizeof(*c), 0);
			if (!c) {
				count(CT_CNT_LOST_CONTROL);
				continue;
			}
			fill_call(c, CT_REC_UNFINISHED, pid_tgid, st, f, 0);
			c->dur_ns = 0;
			c->ret = 0;
			c->caller = 0;
			c->payload_len = 0;
			c->stack_len = 0;
			bpf_ringbuf_submit(c, BPF_RB_FORCE_WAKEUP);
		}
		bpf_map_delete_elem(&threads, &tid);
	}
	if (use_tgid_set && BPF_CORE_READ(task, signal, live.counter) == 0) {
		__u32 tgid = pid_tgid >> 32;
		bpf_map_delete_elem(&traced_tgids, &tgid);
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
