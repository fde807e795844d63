// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * cudatrace BPF side. One generic entry program and one generic return
 * program serve every probed CUDA function: the attach cookie carries the API
 * id and the argument layout (see record.h). The entry program pushes a frame
 * on a per-thread stack; the return program pops it and emits ONE record per
 * completed call, with out-parameters read from user memory at return.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "cudatrace/record.h"

#define SIGSTOP 19
#define CUDA_NOT_READY 600 /* cudaErrorNotReady == CUDA_ERROR_NOT_READY: not a failure */

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
const volatile bool capture_stack = false;   /* append the user stack to each record */

struct exit_scratch {
	struct ct_call call;
	__u8 payload[CT_MAX_PAYLOAD + CT_MAX_STACK_FRAMES * 8];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* resized by user space */
} events SEC(".maps");

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

SEC("uprobe")
int ct_enter(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	struct ct_thread_state *st = bpf_map_lookup_elem(&threads, &tid);
	if (!st) {
		st = new_thread_state(pid_tgid);
		if (!st)
			return 0;
	}
	__u32 depth = st->depth;
	st->depth = depth + 1;
	if (depth >= CT_MAX_DEPTH) {
		count(CT_CNT_DEPTH_OVERFLOW);
		return 0;
	}
	struct ct_frame *f = &st->frames[depth & (CT_MAX_DEPTH - 1)];
	__u64 cookie = bpf_get_attach_cookie(ctx);
	f->cookie = cookie;
	if (summary_mode && !(cookie & CT_COOKIE_DETAIL)) {
		/* Only its latency is kept: the arguments are not needed. */
		f->ts_ns = bpf_ktime_get_ns();
		return 0;
	}
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
	f->ts_ns = bpf_ktime_get_ns();
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

static __always_inline void read_out(struct ct_call *c, __u64 cookie, struct ct_frame *f, int i)
{
	__u32 idx = CT_COOKIE_OUT_SLOT(cookie, i) - 1;
	__u32 size = CT_COOKIE_OUT_SIZE(cookie, i);
	c->outs[i] = 0;
	if (idx >= CT_MAX_ARGS || !size || size > 8)
		return;
	void *ptr = (void *)f->args[idx];
	if (!ptr || bpf_probe_read_user(&c->outs[i], size, ptr))
		c->flags |= i ? CT_FLAG_OUT1_FAULT : CT_FLAG_OUT0_FAULT;
}

/* Fills every field but payload_len and stack_len (ring memory is not zeroed). */
static __always_inline void fill_call(struct ct_call *c, __u32 type, __u64 pid_tgid, struct ct_thread_state *st,
				      struct ct_frame *f, __u32 parent_api, __u32 depth)
{
	c->type = type;
	c->api = CT_COOKIE_API(f->cookie);
	c->parent_api = parent_api;
	c->pid = pid_tgid >> 32;
	c->tid = (__u32)pid_tgid;
	c->ts_ns = f->ts_ns;
	__builtin_memcpy(c->args, f->args, sizeof(c->args));
	c->depth = depth;
	c->flags = 0;
	c->reserved = 0;
	__builtin_memcpy(c->comm, st->comm, sizeof(c->comm));
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

SEC("uretprobe")
int ct_exit(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	struct ct_thread_state *st = bpf_map_lookup_elem(&threads, &tid);
	if (!st || st->depth == 0)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 depth = st->depth - 1;
	if (depth >= CT_MAX_DEPTH) {
		st->depth = depth;
		return 0;
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
			return 0; /* entered before we attached */
		count_n(CT_CNT_UNMATCHED, depth - found);
		depth = (__u32)found & (CT_MAX_DEPTH - 1);
	}
	st->depth = depth;
	struct ct_frame *f = &st->frames[depth];

	__u64 dur = now - f->ts_ns;
	__s64 ret = cookie & CT_COOKIE_VOID ? 0 : (__s32)PT_REGS_RC(ctx);
	__s64 not_failure = cookie & CT_COOKIE_NCCL_STATUS ? CT_NCCL_IN_PROGRESS : CUDA_NOT_READY;
	if (summary_mode) {
		aggregate(api, dur, ret != 0 && ret != not_failure);
		if (!(cookie & CT_COOKIE_DETAIL))
			return 0;
	} else {
		if (dur < min_dur_ns)
			return 0;
		if (errors_only && (ret == 0 || ret == not_failure))
			return 0;
	}
	__u32 parent_api = depth ? CT_COOKIE_API(st->frames[(depth - 1) & (CT_MAX_DEPTH - 1)].cookie) : 0xffff;

	if (CT_COOKIE_PAYLOAD_KIND(cookie) == CT_PAYLOAD_NONE && !capture_stack) {
		/* The common case: a fixed-size record built in place. */
		struct ct_call *c = bpf_ringbuf_reserve(&events, sizeof(*c), 0);
		if (!c) {
			count(CT_CNT_LOST_RINGBUF);
			return 0;
		}
		fill_call(c, CT_REC_CALL, pid_tgid, st, f, parent_api, depth);
		c->dur_ns = dur;
		c->ret = ret;
		c->caller = PT_REGS_IP(ctx); /* at a return probe: the return address */
		c->payload_len = 0;
		c->stack_len = 0;
		read_out(c, cookie, f, 0);
		read_out(c, cookie, f, 1);
		bpf_ringbuf_submit(c, ring_flags());
		return 0;
	}

	__u32 zero = 0;
	struct exit_scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 0;
	struct ct_call *c = &s->call;
	fill_call(c, CT_REC_CALL, pid_tgid, st, f, parent_api, depth);
	c->dur_ns = dur;
	c->ret = ret;
	c->caller = PT_REGS_IP(ctx);
	c->stack_len = 0;
	read_out(c, cookie, f, 0);
	read_out(c, cookie, f, 1);
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
	return 0;
}

/* The dynamic loader calls _dl_debug_state() after each change to the link
 * map (start-up, dlopen, dlclose). Tell user space, and stop the process so
 * that it cannot call into a just-mapped library before probes are attached
 * there; user space sends SIGCONT once it has attached. */
SEC("uprobe")
int ct_map_change(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!tgid_traced(pid_tgid >> 32))
		return 0;
	struct ct_map_change *m = bpf_ringbuf_reserve(&events, sizeof(*m), 0);
	if (!m) {
		count(CT_CNT_LOST_CONTROL);
		return 0;
	}
	m->type = CT_REC_MAP_CHANGE;
	m->pid = pid_tgid >> 32;
	m->tid = (__u32)pid_tgid;
	m->stopped = stop_on_map_change;
	bpf_ringbuf_submit(m, BPF_RB_FORCE_WAKEUP);
	if (stop_on_map_change)
		bpf_send_signal(SIGSTOP);
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
	return 0;
}

/* A thread that exits inside a probed call never returns from it: report its
 * open frames as unfinished and free its state. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(ct_thread_exit, struct task_struct *task)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	struct ct_thread_state *st = bpf_map_lookup_elem(&threads, &tid);
	if (st) {
		__u32 depth = st->depth;
		for (__u32 i = 0; i < CT_MAX_DEPTH; i++) {
			if (i >= depth)
				break;
			struct ct_call *c = bpf_ringbuf_reserve(&events, sizeof(*c), 0);
			if (!c) {
				count(CT_CNT_LOST_CONTROL);
				continue;
			}
			struct ct_frame *f = &st->frames[i];
			__u32 parent_api = i ? CT_COOKIE_API(st->frames[(i - 1) & (CT_MAX_DEPTH - 1)].cookie) : 0xffff;
			fill_call(c, CT_REC_UNFINISHED, pid_tgid, st, f, parent_api, i);
			c->dur_ns = 0;
			c->ret = 0;
			c->outs[0] = 0;
			c->outs[1] = 0;
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
