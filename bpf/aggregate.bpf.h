/* Aggregation in the kernel, for the modes that need no record per call:
 * summary mode's per-API statistics and activity, exporter mode's counts.
 * Included by cudatrace.bpf.c only. */
#pragma once

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

/* The log-linear bucket of bpf_abi.h. */
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

/* Summary mode: whether a stream capture is open in the process. While one
 * is, every call sends its record: the stream model needs the event records
 * and stream waits that make streams join the capture, and the work issued
 * to them, to tell captured work from work that runs. Captures are rare and
 * short. */
static __always_inline bool capturing_now(__u64 pid_tgid)
{
	__u32 tgid = pid_tgid >> 32;
	__u32 *open = bpf_map_lookup_elem(&capturing, &tgid);
	return open && *open;
}

/* Summary mode: a call whose record user space reads (its arguments are saved). */
static __always_inline bool summary_record(__u64 cookie, __u64 pid_tgid)
{
	return settings.summary_records_all || (cookie & CT_COOKIE_DETAIL) || capturing_now(pid_tgid);
}

/* Summary mode: the counts of the call's activity key, built in the CPU's
 * last key: a key like the last one has its slot at hand, another is looked
 * up, or added with a new slot. NULL when the launch config cannot be read,
 * or when no slot is left. */
static __always_inline struct ct_activity *activity_counts_of(struct activity_last *last, struct ct_activity_api *a,
							      __u32 api, struct ct_frame *f, __u64 pid_tgid, __u64 gen)
{
	struct ct_activity_key *key = &last->key;
	bool same = last->valid;
	__u32 config[6] = {};
	__u32 slot = a->config_slot - 1; /* wraps to huge when there is none */
	if (slot < CT_MAX_ARGS && bpf_probe_read_user(config, sizeof(config), (void *)f->args[slot])) {
		last->valid = 0;
		return NULL;
	}
	/* Each field compared with the last key's as it is written. */
#define CT_KEY_SET(field, value)                   \
	do {                                       \
		__typeof__(field) v_ = (value);    \
		same &= field == v_;               \
		field = v_;                        \
	} while (0)
	CT_KEY_SET(key->tgid, pid_tgid >> 32);
	CT_KEY_SET(key->api, api);
	key->pad = 0;
	CT_KEY_SET(key->page_locked_gen, a->kind == CT_ACT_COPY ? gen : 0);
	/* Copies: the host side of a host<->device copy (page-locked or not). */
	__u64 dir = arg_in_slot(f, a->copy_kind_slot, a->copy_kind);
	__u32 host_slot = dir == CT_COPY_HTOD ? a->src_slot : dir == CT_COPY_DTOH ? a->dst_slot : 0;
	__u16 mask = a->key_args;
	for (int i = 0; i < CT_MAX_ARGS; i++)
		CT_KEY_SET(key->args[i], (mask & (1u << i)) || i + 1 == host_slot ? f->args[i] : 0);
	for (int i = 0; i < 6; i++)
		CT_KEY_SET(key->dims[i], config[i]);
#undef CT_KEY_SET
	if (!same) {
		last->valid = 0;
		__u32 *found = bpf_map_lookup_elem(&activity, key);
		if (found) {
			slot = *found;
		} else {
			__u64 next = __sync_fetch_and_add(&activity_slots_used, 1);
			slot = next < CT_ACTIVITY_ENTRIES ? next : CT_ACTIVITY_ENTRIES;
			struct ct_activity *fresh = bpf_map_lookup_elem(&activity_counts, &slot);
			if (fresh) {
				fresh->first_ts_ns = ~0ull;
				if (bpf_map_update_elem(&activity, key, &slot, BPF_NOEXIST)) {
					found = bpf_map_lookup_elem(&activity, key); /* another CPU added it meanwhile */
					slot = found ? *found : CT_ACTIVITY_ENTRIES;
				}
			}
		}
		last->slot = slot;
		last->valid = slot < CT_ACTIVITY_ENTRIES;
	}
	struct ct_activity *v = bpf_map_lookup_elem(&activity_counts, &last->slot);
	if (!v)
		count(CT_CNT_ACTIVITY_FULL);
	return v;
}

/* Summary mode: counts a successful outermost launch, copy or memset in the
 * activity map, and bumps the page-locked generation after a call that
 * changed page-locked memory. Returns true when the call needs no record:
 * the tables count only successful outermost calls, and nested ones need
 * none; a failed one sends its record (a failed launch is told once). A
 * full map sends the record instead, which user space counts the same. */
static __always_inline bool count_activity(__u32 api, struct ct_frame *f, __u32 depth, bool failed, __u64 dur,
					   __u64 pid_tgid, __s64 ret)
{
	if (!settings.activity_in_bpf)
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
	__u32 tgid = pid_tgid >> 32;
	if (a->kind == CT_ACT_CAPTURE_BEGIN || a->kind == CT_ACT_CAPTURE_END) {
		/* An end that failed as invalidated has ended the capture too. */
		if (depth || (failed && (a->kind == CT_ACT_CAPTURE_BEGIN || ret != CT_CUDA_CAPTURE_INVALIDATED)))
			return false;
		__u32 *open = bpf_map_lookup_elem(&capturing, &tgid);
		if (a->kind == CT_ACT_CAPTURE_BEGIN) {
			__u32 one = 1;
			if (open)
				__sync_fetch_and_add(open, 1);
			else
				bpf_map_update_elem(&capturing, &tgid, &one, BPF_NOEXIST);
		} else if (open && *open) {
			__sync_fetch_and_add(open, -1);
		}
		return false;
	}
	if (depth)
		return true;
	if (failed)
		return false; /* the tables skip it, but its record tells why it failed (a warning) */
	if (capturing_now(pid_tgid))
		return false; /* perhaps captured: the record tells the stream model */
	struct activity_last *last = bpf_map_lookup_elem(&activity_last, &zero);
	if (!last || __sync_val_compare_and_swap(&last->busy, 0, 1))
		return false; /* in use by a call this one preempted: its record counts it */
	struct ct_activity *v = activity_counts_of(last, a, api, f, pid_tgid, *gen);
	last->busy = 0;
	if (!v)
		return false; /* the config could not be read (the record says so), or the map is full */
	/* The times before the count: a reader that sees the count sees them. */
	if (f->ts_ns < v->first_ts_ns)
		v->first_ts_ns = f->ts_ns;
	if (f->ts_ns > v->last_ts_ns)
		v->last_ts_ns = f->ts_ns;
	__sync_fetch_and_add(&v->calls, 1);
	__sync_fetch_and_add(&v->total_ns, dur);
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
	__sync_fetch_and_add(&v->total_ns, dur);
	__u32 b = export_bucket(dur);
	barrier_var(b);
	if (b < CT_EXPORT_BUCKETS)
		__sync_fetch_and_add(&v->buckets[b], 1);
	return a->kind == CT_EXP_MEMORY;
}
