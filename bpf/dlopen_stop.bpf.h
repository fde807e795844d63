/* --dlopen-stop: a traced process is stopped at each library load until
 * user space has attached to what it mapped. Included by cudatrace.bpf.c
 * only. */
#pragma once

#define SIGSTOP 19
#define SIGCONT 18

/* r_state in the loader's struct r_debug (<link.h>): RT_ADD or RT_DELETE
 * while it maps or unmaps objects, RT_CONSISTENT once the link map is whole. */
#define RT_CONSISTENT 0

/* Tells user space that `pid_tgid`'s process needs probes (new files, or
 * the driver function at `wanted`), and stops it until they are attached
 * when `stop` (user space sends SIGCONT then).
 *
 * Invariant: every SIGCONT that a record makes user space (or the watchdog)
 * send follows the SIGSTOP it answers, so the last word for a process is
 * always a continue, however many threads ask at once. Hence the order:
 * reserve the record (a full ring means no record, so no stop), send the
 * signal, and only then publish the record. From a uprobe the helper runs
 * in task context with interrupts on and a zero preempt count, so it queues
 * the SIGSTOP synchronously (group_send_sig_info) before returning; a
 * SIGCONT sent after that cancels it whether it is still pending (SIGCONT
 * flushes pending stop signals) or already taken (it wakes the stopped
 * group). Sending first and publishing second closes the race where the
 * reader's SIGCONT came before the SIGSTOP and the process stayed stopped.
 * (Kernels that defer the signal to an irq_work: docs/reliability.md, 9.)
 */
static __always_inline void stop_until_attached(__u64 pid_tgid, __u64 wanted, __u64 wanted_by, bool stop)
{
	struct ct_map_change *m = bpf_ringbuf_reserve(&control, sizeof(*m), 0);
	if (!m) {
		count(CT_CNT_LOST_CONTROL);
		return;
	}
	m->type = CT_REC_MAP_CHANGE;
	m->pid = pid_tgid >> 32;
	m->tid = (__u32)pid_tgid;
	m->wanted = wanted;
	m->wanted_by = wanted_by;
	m->stopped = stop && !tracer_dying && bpf_send_signal(SIGSTOP) == 0;
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
}

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
 */
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
	stop_until_attached(pid_tgid, 0, 0, settings.stop_on_map_change);
	return 0;
}
