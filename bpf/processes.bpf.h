/* The traced processes: the children a command forks, an exec's new
 * program, exiting threads (their open calls, their probe hits and CPU
 * time, the tracer's own death). Included by cudatrace.bpf.c only. */
#pragma once

#define SIGNAL_GROUP_EXIT 0x00000004 /* signal_struct.flags: the group is exiting (include/linux/sched/signal.h) */

SEC("tp_btf/sched_process_fork")
int BPF_PROG(ct_fork, struct task_struct *parent, struct task_struct *child)
{
	if (!settings.follow_forks)
		return 0;
	__u32 parent_tgid = parent->tgid;
	__u32 child_tgid = child->tgid;
	if (parent_tgid == child_tgid || !bpf_map_lookup_elem(&traced_tgids, &parent_tgid))
		return 0;
	__u8 one = 1;
	bpf_map_update_elem(&traced_tgids, &child_tgid, &one, BPF_ANY);
	return 0;
}

/* After exec the thread runs another program: new name, no calls open, no
 * Python thread state known. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(ct_exec, struct task_struct *task)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct ct_thread_state *st = bpf_map_lookup_elem(&threads, &tid);
	if (st) {
		st->depth = 0;
		st->py_tstate = 0;
		bpf_get_current_comm(st->comm, sizeof(st->comm));
	}
	if (settings.report_execs) {
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
		m->wanted = 0;
		m->wanted_by = 0;
		bpf_ringbuf_submit(m, BPF_RB_FORCE_WAKEUP);
	}
	return 0;
}

/* Adds an exiting thread's probe hits, capture time and run-queue wait to its
 * process's; at the exit of the last thread, also the process's CPU time. */
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
		__sync_fetch_and_add(&c->capture_ns, st->capture_ns);
	}
	/* What it waited for a CPU: the exit line says how much of it was
	 * cudatrace's doing, where the two share CPUs (record/cost.h). */
	if (bpf_core_field_exists(task->sched_info))
		__sync_fetch_and_add(&c->run_delay_ns, BPF_CORE_READ(task, sched_info.run_delay));
	if (!last)
		return;
	/* The signal's sum holds the threads released so far; a group leader is
	 * released only once the group is empty, so where another thread exits
	 * last (a CUDA program's helper thread, after main's exit_group), the
	 * leader's time, most of a program's, is still its own. */
	struct task_struct *leader = BPF_CORE_READ(task, group_leader);
	__u64 cpu = BPF_CORE_READ(task, signal, sum_sched_runtime) + BPF_CORE_READ(task, se.sum_exec_runtime);
	if (leader != task)
		cpu += BPF_CORE_READ(leader, se.sum_exec_runtime);
	c->cpu_ns = cpu;
	bpf_probe_read_kernel(c->cpus, sizeof(c->cpus), __builtin_preserve_access_index(&task->cpus_mask.bits));
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
	if (settings.tracer_tgid && pid_tgid >> 32 == settings.tracer_tgid &&
	    (tid == settings.tracer_tgid || (BPF_CORE_READ(task, signal, flags) & SIGNAL_GROUP_EXIT))) {
		__sync_fetch_and_or(&tracer_dying, 1);
		/* Its last thread: none of cudatrace runs user code any more, and
		 * its links are still open. Its watchdog may read the ring and
		 * continue what is stopped now (the links take seconds to close). */
		if (BPF_CORE_READ(task, signal, live.counter) == 0) {
			__u32 tgid = pid_tgid >> 32;
			bpf_ringbuf_output(&tracer_exit, &tgid, sizeof(tgid), BPF_RB_FORCE_WAKEUP);
		}
	}
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
			bpf_ringbuf_submit(c, BPF_RB_FORCE_WAKEUP);
		}
		bpf_map_delete_elem(&threads, &tid);
	}
	if (settings.empty_programs)
		bpf_map_delete_elem(&empty_runtime_bits, &tid);
	if (BPF_CORE_READ(task, signal, live.counter) == 0) {
		__u32 tgid = pid_tgid >> 32;
		if (settings.use_tgid_set)
			bpf_map_delete_elem(&traced_tgids, &tgid);
		if (settings.summary_mode)
			bpf_map_delete_elem(&capturing, &tgid); /* a capture it never ended */
	}
	return 0;
}
