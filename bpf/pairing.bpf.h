/* Pairing entries and returns: the per-thread stack of calls in progress
 * (bpf_abi.h: ct_thread_state), forwards folded into their owner, the driver
 * calls that are part of a runtime call's record, and the stack kept right
 * when probes come and go.
 * Included by cudatrace.bpf.c only. */
#pragma once

static __always_inline bool tgid_traced(__u32 tgid)
{
	if (settings.filter_tgid)
		return tgid == settings.filter_tgid;
	if (settings.use_tgid_set)
		return bpf_map_lookup_elem(&traced_tgids, &tgid) != NULL;
	return true;
}

static __always_inline bool current_traced(__u64 pid_tgid)
{
	if (!tgid_traced(pid_tgid >> 32))
		return false;
	return !settings.filter_tid || (__u32)pid_tgid == settings.filter_tid;
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

/* A driver call made directly inside a runtime call, with no out-param to
 * read at its return: part of the runtime call's record (bpf_abi.h, bit 60). */
static __always_inline bool inner_driver_call(__u64 cookie, struct ct_frame *top)
{
	return !settings.every_layer && (cookie & CT_COOKIE_DRIVER) && (top->cookie & CT_COOKIE_RUNTIME) &&
	       !CT_COOKIE_HAS_OUTS(cookie);
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
	if (!tracing_begun) {
		count(CT_CNT_UNTRACED);
		return 1; /* no frame: a probed return finds none to pair with */
	}
	drop_stale_frames(st);
	__u32 depth = st->depth;
	if (depth >= CT_MAX_DEPTH) {
		count(CT_CNT_DEPTH_OVERFLOW);
		st->depth = depth + 1;
		return 0; /* the return must come to pop the depth */
	}
	struct ct_frame *f = &st->frames[depth & (CT_MAX_DEPTH - 1)];
	f->cookie = cookie;
	f->fwd_depth = 0;
	f->owner = CT_FRAME_RECORDED;
	if (depth == 0) {
		f->level = 0;
		f->parent_api = CT_NO_API;
	} else {
		struct ct_frame *top = top_frame(st, depth);
		__u32 rec = top->owner >= CT_FRAME_QUIET ? depth - 1 : top->owner;
		struct ct_frame *recorded = &st->frames[rec & (CT_MAX_DEPTH - 1)];
		if (CT_COOKIE_OP(top->cookie) == CT_COOKIE_OP(cookie)) {
			f->owner = rec; /* a forward */
		} else if (inner_driver_call(cookie, top)) {
			if (session)
				return 1; /* nothing to pop: its return stays unprobed */
			f->owner = CT_FRAME_QUIET;
			st->depth = depth + 1;
			return 0;
		} else {
			f->level = recorded->level + 1;
			/* The enclosing function: inside a forward chain, the library's,
			 * whose API the record will name. */
			f->parent_api = CT_COOKIE_API(top->cookie);
		}
	}
	st->depth = depth + 1;
	if ((settings.summary_mode && !summary_record(cookie, pid_tgid)) ||
	    (settings.export_mode && !(cookie & CT_COOKIE_DETAIL))) {
		/* Only its latency and status are kept: the arguments are not needed. */
		f->ts_ns = bpf_ktime_get_ns();
		return 0;
	}
	read_args(ctx, f, cookie);
	f->ts_ns = bpf_ktime_get_ns();
	return 0;
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
	if (settings.summary_mode && !summary_record(f->cookie, bpf_get_current_pid_tgid()))
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
	if (f->owner == CT_FRAME_QUIET)
		return;

	__s64 ret = cookie & CT_COOKIE_VOID ? 0 : (__s32)PT_REGS_RC(ctx);
	if (f->owner != CT_FRAME_RECORDED) {
		pass_to_owner(st, f, depth, ret);
		return;
	}
	if (f->fwd_depth) { /* the library's API variant and status */
		api = f->fwd_api;
		ret = f->fwd_ret;
	}
	__u64 dur = now - f->ts_ns;
	__s64 not_failure = cookie & CT_COOKIE_NCCL_STATUS ? CT_NCCL_IN_PROGRESS : CT_CUDA_NOT_READY;
	bool failed = ret != 0 && ret != not_failure;
	/* Counted before the trace's own filters (--min-us, --errors): those select records, not counts. */
	bool export_record = settings.export_counts && export_call(api, f, dur, ret, failed, pid_tgid);
	/* Exporter mode: a call counted needs no record, unless --otlp sends it as a span. */
	bool only_under_span = false;
	if (settings.export_mode) {
		if (!export_record && !settings.span_records)
			return;
		only_under_span = !export_record;
	} else if (settings.summary_mode) {
		aggregate(api, dur, failed);
		if (count_activity(api, f, f->level, failed, dur, pid_tgid, ret))
			return;
		if (!summary_record(cookie, pid_tgid))
			return;
	} else if (!(cookie & CT_COOKIE_ALWAYS)) {
		if (dur < settings.min_dur_ns)
			return;
		if (settings.errors_only && (ret == 0 || ret == not_failure))
			return;
	}
	/* At a return probe the instruction pointer is the return address: the call site. */
	if (!emit_call(ctx, pid_tgid, st, f, dur, ret, PT_REGS_IP(ctx), 0, only_under_span) && !settings.summary_mode &&
	    !settings.export_mode)
		/* A trace's line lost, its call counted: the per-API counts stay exact. */
		aggregate(api, dur, failed);
}
