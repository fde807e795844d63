/* Argument capture and the records: what the entry saves of a call, what
 * the return reads (out-params, payloads), and the record sent through the
 * ring buffer. Included by cudatrace.bpf.c only. */
#pragma once

/* Records go without a reader wake-up, except every settings.wakeup_every-th on a
 * CPU: the reader drains in batches (and on its own timer), and the ring
 * holds at most (CPUs x settings.wakeup_every) records it has not been told about. */
static __always_inline __u64 ring_flags(void)
{
	__u32 zero = 0;
	__u32 *n = bpf_map_lookup_elem(&since_wakeup, &zero);
	if (!n || ++*n < settings.wakeup_every)
		return BPF_RB_NO_WAKEUP;
	*n = 0;
	return BPF_RB_FORCE_WAKEUP;
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

/* The argument in `slot` (1-based, as the tables of bpf_abi.h give it), or
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

/* Fills every field but payload_len (ring memory is not zeroed); no sections yet.
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
	c->sections_len = 0;
	__builtin_memcpy(c->comm, st->comm, sizeof(c->comm));
	if (type != CT_REC_CALL) {
		c->outs[0] = 0;
		c->outs[1] = 0;
	} else if (f->fwd_depth) {
		c->outs[0] = f->fwd_outs[0];
		c->outs[1] = f->fwd_outs[1];
		flags |= f->fwd_flags;
	} else {
		flags |= read_out(&c->outs[0], f->cookie, f->args, 0);
		flags |= read_out(&c->outs[1], f->cookie, f->args, 1);
	}
	c->flags = flags;
}

/* Copies the current thread's OpenTelemetry span (OTEP 4947) to dst: a
 * struct ct_span and its attributes. Returns the bytes written, 0 when the
 * thread has none (no record, valid != 1, all-zero ids) or it cannot be read.
 * Reads only the thread's own memory: its thread pointer, the module's TLS
 * block (static, or through the dtv), the record. */
static __always_inline __u32 read_span(struct ct_tls_target *t, __u8 *dst)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	__u64 tp = BPF_CORE_READ(task, thread.fsbase);
	if (!tp)
		return 0;
	__s64 off = t->static_offset;
	if (!off && t->link_map) {
		__s64 lm_off = 0;
		if (!bpf_probe_read_user(&lm_off, sizeof(lm_off), (void *)(t->link_map + t->lm_tls_offset)) &&
		    lm_off != CT_TLS_NO_OFFSET && lm_off != CT_TLS_FORCED_DYNAMIC)
			t->static_offset = off = lm_off; /* never changes once set */
	}
	__u64 block = 0;
	if (off) {
		block = tp - off;
	} else {
		__u64 modid = t->modid;
		if (!modid) {
			if (!t->link_map ||
			    bpf_probe_read_user(&modid, sizeof(modid), (void *)(t->link_map + t->lm_tls_modid)) || !modid)
				return 0;
			t->modid = modid;
		}
		__u64 dtv = 0, slots = 0;
		if (bpf_probe_read_user(&dtv, sizeof(dtv), (void *)(tp + t->dtv_in_tcb)) || !dtv)
			return 0;
		/* dtv[-1].counter: the slots the thread's dtv has */
		if (bpf_probe_read_user(&slots, sizeof(slots), (void *)(dtv - t->dtv_slot_size)) || modid > slots)
			return 0;
		if (bpf_probe_read_user(&block, sizeof(block), (void *)(dtv + modid * t->dtv_slot_size + t->dtv_val)))
			return 0;
		if (!block || block == (__u64)-1) /* TLS_DTV_UNALLOCATED: not used on this thread yet */
			return 0;
	}
	__u64 rec = 0;
	if (bpf_probe_read_user(&rec, sizeof(rec), (void *)(block + t->st_value)) || !rec)
		return 0;
	struct ct_span *sp = (struct ct_span *)dst;
	if (bpf_probe_read_user(sp, CT_SPAN_HEADER, (void *)rec) || sp->valid != 1)
		return 0;
	__u64 *ids = (__u64 *)sp;
	if (!(ids[0] | ids[1]) || !ids[2])
		return 0;
	__u32 n = sp->attrs_size;
	if (n > CT_MAX_SPAN_ATTRS)
		n = CT_MAX_SPAN_ATTRS;
	/* Its section's length is a multiple of 8: zeros after the attributes. */
	*(__u64 *)(dst + CT_SPAN_SIZE + (n & ~7u)) = 0;
	if (n && bpf_probe_read_user(dst + CT_SPAN_SIZE, n, (void *)(rec + CT_SPAN_HEADER)))
		n = 0;
	sp->attrs_size = n;
	sp->pad = 0;
	return CT_ALIGN8(CT_SPAN_BYTES(n));
}

/* --py-stack (docs/python.md): the calling thread's Python frames. */
#define CT_PY_MAX_THREADS 256 /* PyThreadStates walked to find the thread's */

/* What the loops below share: constant pointers; the cursor is buf->at. */
struct py_walk {
	struct ct_py_layout *py;
	struct exit_scratch *s;
	struct py_frame_buf *buf;
};

static long py_find_thread(__u64 i, struct py_walk *w)
{
	struct py_cursor *c = &w->buf->at;
	__u64 id = 0;
	if (!c->tstate || bpf_probe_read_user(&id, 8, (void *)(c->tstate + w->py->tstate_thread_id)))
		return 1;
	if (id == c->fsbase)
		return 1; /* found: c->tstate */
	__u64 next = 0;
	bpf_probe_read_user(&next, 8, (void *)(c->tstate + w->py->tstate_next));
	c->tstate = next;
	return 0;
}

/* A field of a frame whose bytes start at `frame`: 8 bytes (4 with `four`)
 * at `off`. */
static __always_inline __u64 py_field(const __u8 *frame, __u32 off, bool four)
{
	__u64 v = 0;
	if (off > CT_PY_FRAME_SPAN)
		return 0;
	if (four) {
		__s32 i = 0;
		__builtin_memcpy(&i, &frame[off], 4);
		return (__u64)(__s64)i;
	}
	__builtin_memcpy(&v, &frame[off], 8);
	return v;
}

/* The identity of the code object at `code` (bpf_abi.h: ct_py_ident), read
 * now, while the frame holds it; 0 when it cannot be read. */
static __always_inline __u64 py_code_ident(struct py_walk *w, __u64 code)
{
	__u32 len = w->py->code_ident_len;
	if (len > CT_PY_IDENT_SPAN)
		len = CT_PY_IDENT_SPAN;
	barrier_var(len);
	if (!code || !len || bpf_probe_read_user(w->buf->ident, len, (void *)(code + w->py->code_ident_at)))
		return 0;
	return ct_py_ident(w->buf->ident, len);
}

static long py_read_frame(__u64 i, struct py_walk *w)
{
	struct ct_py_layout *py = w->py;
	struct py_frame_buf *buf = w->buf;
	struct py_cursor *c = &buf->at;
	if (!c->frame || c->n >= CT_MAX_PY_FRAMES)
		return 1;
	__u32 span = py->frame_span;
	if (span > CT_PY_FRAME_SPAN)
		span = CT_PY_FRAME_SPAN;
	if (!span)
		return 1;
	__u64 at = c->frame - c->window;
	if (c->frame < c->window || at + span > c->window_len) {
		/* Outside the data stack's top (a generator's frame, 3.12's shim
		 * on the C stack, an older chunk): one read of its first bytes,
		 * into the slot after the window. */
		at = CT_PY_WINDOW;
		if (bpf_probe_read_user(&buf->window[CT_PY_WINDOW], span, (void *)c->frame))
			return 1;
	}
	if (at > CT_PY_WINDOW)
		return 1;
	const __u8 *frame = &buf->window[at];
	__u64 code = py_field(frame, py->frame_code, false);
	c->frame = py_field(frame, py->frame_previous, false);
	if (py->frame_owner != CT_PY_NONE) {
		__u32 o = py->frame_owner;
		if (o < CT_PY_FRAME_SPAN && frame[o] == py->cstack_owner)
			return 0; /* the interpreter's shim frame between C and Python */
	}
	__u64 instr = py_field(frame, py->frame_instr, py->instr_is_lasti);
	__u32 off = c->off;
	if (off > sizeof(w->s->payload) - sizeof(struct ct_py_frame))
		return 1;
	struct py_code_cache *codes = &buf->codes;
	__u32 way0 = 2 * (((code >> 4) ^ (code >> 12)) % CT_PY_CODE_SETS), way1 = way0 + 1;
	__u64 gen = codes->gen, ident = 0;
	if (codes->code[way0] == code && codes->slot_gen[way0] == gen)
		ident = codes->ident[way0];
	else if (codes->code[way1] == code && codes->slot_gen[way1] == gen)
		ident = codes->ident[way1];
	if (!ident) {
		ident = py_code_ident(w, code);
		if (ident) { /* the older way goes */
			codes->code[way1] = codes->code[way0];
			codes->ident[way1] = codes->ident[way0];
			codes->slot_gen[way1] = codes->slot_gen[way0];
			codes->code[way0] = code;
			codes->ident[way0] = ident;
			codes->slot_gen[way0] = gen;
		}
	}
	struct ct_py_frame *out = (struct ct_py_frame *)&w->s->payload[off];
	out->code = code;
	out->instr = instr;
	out->ident = ident;
	c->off = off + sizeof(struct ct_py_frame);
	c->n++;
	return 0;
}

/* 8 bytes of the thread state read by read_py_tstate. The bound is checked
 * here, next to the read: Linux 6.1's verifier forgets a 32-bit offset's
 * bound once it is spilled across a helper call. */
static __always_inline __u64 py_tstate_field(struct py_walk *w, __u32 off)
{
	__u64 v = 0;
	barrier_var(off); /* clang must not drop the check as one made before */
	if (off > CT_PY_TSTATE_SPAN)
		return 0;
	__builtin_memcpy(&v, &w->buf->tstate[off], 8);
	return v;
}

/* Reads the PyThreadState at `tstate` into buf->tstate; true when it is the
 * calling thread's. */
static __always_inline bool read_py_tstate(struct py_walk *w, __u64 tstate)
{
	__u32 span = w->py->tstate_span;
	if (span > CT_PY_TSTATE_SPAN)
		span = CT_PY_TSTATE_SPAN;
	barrier_var(span);
	__u32 at = w->py->tstate_thread_id;
	if (!tstate || !span || bpf_probe_read_user(w->buf->tstate, span, (void *)tstate))
		return false;
	return py_tstate_field(w, at) == w->buf->at.fsbase;
}

/* 3.11+: reads the top of the thread's data stack (its current chunk, up to
 * datastack_top) into buf->window: the innermost frames, read at once. */
static __always_inline void py_read_window(struct py_walk *w)
{
	struct py_cursor *c = &w->buf->at;
	c->window = 0;
	c->window_len = 0;
	__u32 at = w->py->tstate_datastack;
	if (at == CT_PY_NONE)
		return;
	__u64 chunk = py_tstate_field(w, at), top = py_tstate_field(w, at + 8);
	if (!chunk || top <= chunk)
		return;
	__u64 len = top - chunk;
	if (len > CT_PY_WINDOW)
		len = CT_PY_WINDOW;
	barrier_var(len);
	if (!len || bpf_probe_read_user(w->buf->window, len, (void *)(top - len)))
		return;
	c->window = top - len;
	c->window_len = len;
}

/* Writes the thread's Python frames at s->payload[off]; returns how many. */
static __always_inline __u32 read_py_frames(struct exit_scratch *s, struct ct_py_layout *py, __u32 off,
					    struct ct_thread_state *st)
{
	__u32 zero = 0;
	struct py_walk w = { .py = py, .s = s };
	w.buf = bpf_map_lookup_elem(&py_frame_scratch, &zero);
	if (!w.buf)
		return 0;
	struct py_cursor *c = &w.buf->at;
	struct task_struct *task = bpf_get_current_task_btf();
	c->fsbase = BPF_CORE_READ(task, thread.fsbase);
	c->off = off;
	c->n = 0;
	/* The identities read before hold while no code object of the process
	 * was freed since (py_code_freed); else, or with no epoch yet, from now. */
	__u64 epoch = *(volatile __u64 *)&py->code_epoch;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct py_code_cache *codes = &w.buf->codes;
	if (!epoch || codes->epoch != epoch || codes->tgid != tgid) {
		codes->gen++;
		codes->epoch = epoch;
		codes->tgid = tgid;
	}
	/* The thread's state found before still is this thread's unless it
	 * was freed and reused. */
	if (!st->py_tstate || !read_py_tstate(&w, st->py_tstate)) {
		__u64 interp = 0, first = 0;
		if (bpf_probe_read_user(&interp, 8, (void *)(py->runtime + py->interp_head)) || !interp ||
		    bpf_probe_read_user(&first, 8, (void *)(interp + py->interp_threads)))
			return 0;
		c->tstate = first;
		bpf_loop(CT_PY_MAX_THREADS, py_find_thread, &w, 0);
		if (!read_py_tstate(&w, c->tstate))
			return 0; /* no Python thread state: no frames, never another thread's */
		st->py_tstate = c->tstate;
	}
	__u64 frame = py_tstate_field(&w, py->tstate_frame);
	if (py->cframe_frame != CT_PY_NONE) {
		__u64 cframe = frame;
		frame = 0;
		if (!cframe || bpf_probe_read_user(&frame, 8, (void *)(cframe + py->cframe_frame)))
			return 0;
	}
	c->frame = frame;
	py_read_window(&w);
	bpf_loop(CT_MAX_PY_FRAMES * 2, py_read_frame, &w, 0);
	return c->n;
}

/* A record's sections (bpf_abi.h: struct ct_section) follow its payload:
 * the bytes of each go at section_bytes_at, then append_section puts its
 * header before them. */

/* Where the next section's bytes go in s->payload: after its header, at the
 * record's end. The bound (room for `max_len` bytes) is for the verifier:
 * the scratch has room for every kind at its largest. */
static __always_inline __u64 section_bytes_at(struct exit_scratch *s, __u32 max_len)
{
	/* 64-bit: no zero extension between the check and the index */
	__u64 at = CT_ALIGN8((__u64)s->call.payload_len) + s->call.sections_len + sizeof(struct ct_section);
	if (at > sizeof(s->payload) - max_len)
		at = sizeof(s->payload) - max_len;
	barrier_var(at); /* keep the bound on the register that indexes */
	return at;
}

/* Appends the section of `kind` whose `len` bytes (a multiple of 8) are at
 * section_bytes_at. */
static __always_inline void append_section(struct exit_scratch *s, __u32 kind, __u32 len)
{
	__u64 at = CT_ALIGN8((__u64)s->call.payload_len) + s->call.sections_len;
	barrier_var(at); /* clang must not drop the check */
	if (at > sizeof(s->payload) - sizeof(struct ct_section))
		return;
	struct ct_section *h = (struct ct_section *)&s->payload[at];
	h->kind = kind;
	h->len = len;
	s->call.sections_len += sizeof(*h) + len;
}

/* Sends the record of a completed call; false when the ring could not take it.
 * `only_under_span`: none unless the thread is in a published span (the
 * exporter's --otlp spans), and none is lost then. */
static __always_inline bool emit_call(void *ctx, __u64 pid_tgid, struct ct_thread_state *st, struct ct_frame *f,
				      __u64 dur, __s64 ret, __u64 caller, __u8 flags, bool only_under_span)
{
	__u64 cookie = f->cookie;
	__u32 tgid = pid_tgid >> 32;
	struct ct_tls_target *tls = NULL;
	if (settings.thread_ctx)
		tls = bpf_map_lookup_elem(&otel_tls, &tgid);
	if (only_under_span && !tls)
		return true;
	struct ct_py_layout *py = NULL;
	if (settings.py_stack)
		py = bpf_map_lookup_elem(&py_procs, &tgid);
	if (CT_COOKIE_PAYLOAD_KIND(cookie) == CT_PAYLOAD_NONE && !settings.capture_stack && !tls && !py) {
		/* The common case: a fixed-size record built in place. */
		struct ct_call *c = bpf_ringbuf_reserve(&events, sizeof(*c), 0);
		if (!c) {
			count(CT_CNT_LOST_RINGBUF);
			return false;
		}
		fill_call(c, CT_REC_CALL, pid_tgid, st, f, flags);
		c->dur_ns = dur;
		c->ret = ret;
		c->caller = caller;
		c->payload_len = 0;
		bpf_ringbuf_submit(c, ring_flags());
		return true;
	}

	__u32 zero = 0;
	struct exit_scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return false;
	struct ct_call *c = &s->call;
	fill_call(c, CT_REC_CALL, pid_tgid, st, f, flags);
	c->dur_ns = dur;
	c->ret = ret;
	c->caller = caller;
	__u32 len = read_payload(s, cookie, f);
	if (len > CT_MAX_PAYLOAD)
		len = CT_MAX_PAYLOAD;
	c->payload_len = len;
	/* Spans and Python frames are read in the traced thread, unpriced by the
	 * start-up measurement (cudatrace has neither): timed, for the exit line.
	 * The span first: a call that needs one (only_under_span) stops here
	 * without it, its frames and stack unread. */
	__u64 facets_start = py || tls ? bpf_ktime_get_ns() : 0;
	__u32 span = 0;
	if (tls) {
		span = read_span(tls, &s->payload[section_bytes_at(s, CT_SECTION_SPAN_ROOM)]);
		if (span)
			append_section(s, CT_SECTION_SPAN, span);
	}
	__u32 py_frames = 0;
	if (py && (span || !only_under_span)) {
		py_frames = read_py_frames(s, py, section_bytes_at(s, CT_MAX_PY_FRAMES * sizeof(struct ct_py_frame)), st);
		if (py_frames > CT_MAX_PY_FRAMES)
			py_frames = CT_MAX_PY_FRAMES;
		if (py_frames)
			append_section(s, CT_SECTION_PY_FRAMES, py_frames * sizeof(struct ct_py_frame));
	}
	if (facets_start)
		st->capture_ns += bpf_ktime_get_ns() - facets_start;
	if (only_under_span && !span)
		return true;
	if (settings.capture_stack) {
		/* At a return probe the registers are the caller's: the first
		 * frame is the call site, the rest follow its frame pointers. */
		long n = bpf_get_stack(ctx, &s->payload[section_bytes_at(s, CT_MAX_STACK_FRAMES * 8)],
				       CT_MAX_STACK_FRAMES * 8, BPF_F_USER_STACK);
		if (n > 0 && n <= CT_MAX_STACK_FRAMES * 8)
			append_section(s, CT_SECTION_STACK, n);
	}
	__u64 size = sizeof(struct ct_call) + len;
	if (c->sections_len)
		size = sizeof(struct ct_call) + CT_ALIGN8(len) + c->sections_len;
	if (size > sizeof(*s))
		size = sizeof(*s);
	__u64 wake = ring_flags();
	if (py_frames && py_reader_waiting) {
		py_reader_waiting = 0;
		wake = BPF_RB_FORCE_WAKEUP;
	}
	if (bpf_ringbuf_output(&events, s, size, wake)) {
		count(CT_CNT_LOST_RINGBUF);
		return false;
	}
	return true;
}
