/* SPDX-License-Identifier: MIT */
/* Records and constants shared by the BPF program (bpf/cudatrace.bpf.c) and
 * the user-space reader. Plain C, fixed-width fields only. */
#ifndef CUDATRACE_RECORD_H
#define CUDATRACE_RECORD_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define CT_COMM_LEN 16
/* Register arguments (6 on x86-64) plus stack words; cuLaunchKernel has 11. */
#define CT_REG_ARGS 6
#define CT_MAX_STACK_ARGS 5
#define CT_MAX_ARGS (CT_REG_ARGS + CT_MAX_STACK_ARGS)
/* Nested probed calls per thread (runtime -> driver -> ...). Power of two. */
#define CT_MAX_DEPTH 8
#define CT_MAX_OUTS 2
/* Largest string or struct payload read from user memory at return. */
#define CT_MAX_PAYLOAD 2048
#define CT_MAX_APIS 512

enum ct_record_type {
	CT_REC_CALL = 1,       /* one completed call */
	CT_REC_UNFINISHED = 2, /* a call whose thread exited before it returned */
	CT_REC_MAP_CHANGE = 3, /* the dynamic loader changed a traced process's maps */
};

/* Flags in ct_call.flags. */
#define CT_FLAG_OUT0_FAULT (1u << 0) /* reading out-param 0 failed */
#define CT_FLAG_OUT1_FAULT (1u << 1)
#define CT_FLAG_PAYLOAD_FAULT (1u << 2)
#define CT_FLAG_PAYLOAD_TRUNC (1u << 3)

/*
 * The attach cookie tells the generic entry/exit programs everything they need
 * about the probed function, so the hot path does no map lookup for metadata.
 *   bits  0..15  API id (index into the user-space API table)
 *   bits 16..19  number of stack argument words to save at entry (0..5)
 *   bits 20..23  out-param 0: argument slot + 1 (0: none)
 *   bits 24..27  out-param 0: size in bytes (1..8)
 *   bits 28..31  out-param 1: argument slot + 1
 *   bits 32..35  out-param 1: size in bytes
 *   bits 36..39  payload: argument slot + 1 holding a pointer to read at return
 *   bits 40..41  payload kind (enum ct_payload_kind)
 *   bits 42..49  payload size in 8-byte words for CT_PAYLOAD_BYTES
 *   bit  50      the function returns void (its return register is not a status)
 *   bit  51      summary mode still sends this call's record: the kernel,
 *                transfer and memory tables need its arguments
 *   bit  61      store the address of the first stack argument (rsp + 8 at
 *                entry) in args[CT_REG_ARGS]: a struct passed by value in
 *                memory (ncclUniqueId), read at return as the payload
 *   bit  62      an NCCL status: 7 (ncclInProgress) is not a failure, 600 is
 */
enum ct_payload_kind {
	CT_PAYLOAD_NONE = 0,
	CT_PAYLOAD_STRING = 1,       /* NUL-terminated string */
	CT_PAYLOAD_BYTES = 2,        /* fixed-size struct */
	CT_PAYLOAD_LAUNCH_CONFIG = 3, /* CUlaunchConfig / cudaLaunchConfig_t + attrs */
};

#define CT_COOKIE_API(c) ((__u32)((c) & 0xffff))
#define CT_COOKIE_STACK_WORDS(c) ((__u32)(((c) >> 16) & 0xf))
#define CT_COOKIE_OUT_SLOT(c, i) ((__u32)(((c) >> (20 + 8 * (i))) & 0xf))
#define CT_COOKIE_OUT_SIZE(c, i) ((__u32)(((c) >> (24 + 8 * (i))) & 0xf))
#define CT_COOKIE_PAYLOAD_SLOT(c) ((__u32)(((c) >> 36) & 0xf))
#define CT_COOKIE_PAYLOAD_KIND(c) ((__u32)(((c) >> 40) & 0x3))
#define CT_COOKIE_PAYLOAD_WORDS(c) ((__u32)(((c) >> 42) & 0xff))
#define CT_COOKIE_VOID (1ull << 50)
#define CT_COOKIE_DETAIL (1ull << 51)
#define CT_COOKIE_STACK_ADDR (1ull << 61)
#define CT_COOKIE_NCCL_STATUS (1ull << 62)
#define CT_NCCL_IN_PROGRESS 7

/* Launch configs: CUlaunchConfig and cudaLaunchConfig_t are both 56 bytes,
 * with the attribute array pointer at offset 40 and its length at 48. Each
 * attribute (CUlaunchAttribute / cudaLaunchAttribute) is 72 bytes. */
#define CT_LAUNCH_CONFIG_SIZE 56
#define CT_LAUNCH_ATTR_SIZE 72
#define CT_LAUNCH_MAX_ATTRS 4

struct ct_call {
	__u32 type;        /* CT_REC_CALL or CT_REC_UNFINISHED */
	__u16 api;         /* API id */
	__u16 parent_api;  /* API id of the enclosing probed call, 0xffff if none */
	__u32 pid;         /* tgid */
	__u32 tid;
	__u64 ts_ns;       /* entry, CLOCK_MONOTONIC */
	__u64 dur_ns;      /* 0 for unfinished calls */
	__s64 ret;         /* raw return register */
	__u64 args[CT_MAX_ARGS];
	__u64 outs[CT_MAX_OUTS];
	__u64 caller;      /* return address: the call site; 0 for unfinished calls */
	__u8 depth;        /* number of enclosing probed calls */
	__u8 flags;        /* CT_FLAG_* */
	__u16 payload_len; /* bytes of payload following this struct */
	__u16 stack_len;   /* user stack frames (u64 each) after the payload, at
			    * sizeof(struct ct_call) + CT_ALIGN8(payload_len) */
	__u16 reserved;
	char comm[CT_COMM_LEN];
};

#define CT_ALIGN8(n) (((n) + 7) & ~7u)
/* User stack frames captured with --stack, innermost (the call site) first. */
#define CT_MAX_STACK_FRAMES 64

struct ct_map_change {
	__u32 type; /* CT_REC_MAP_CHANGE */
	__u32 pid;
	__u32 tid;
	__u32 stopped; /* 1 if the process was sent SIGSTOP and waits for SIGCONT */
};

/* Per-thread stack of calls in progress (the "threads" map, keyed by tid). */
struct ct_frame {
	__u64 cookie;
	__u64 ts_ns;
	__u64 args[CT_MAX_ARGS];
};

struct ct_thread_state {
	__u32 depth; /* may exceed CT_MAX_DEPTH: frames beyond it are not recorded */
	__u32 tgid;
	char comm[CT_COMM_LEN]; /* at the thread's first traced call, and after exec */
	struct ct_frame frames[CT_MAX_DEPTH];
};

/*
 * Summary mode (--summary): per-API statistics kept in BPF (the per-CPU
 * "api_stats" array, indexed by API id), so calls need no ring-buffer record.
 * Latencies go to a log-linear histogram: bucket b < CT_HIST_SUB covers
 * exactly b ns; above, each power of two [2^p, 2^(p+1)) is split into
 * CT_HIST_SUB equal buckets: b = (p - 1) * CT_HIST_SUB + ((d >> (p - 2)) & 3)
 * for p >= 2. The last bucket also takes everything longer.
 * ct_hist_bucket_low(b) in user space inverts this.
 */
#define CT_HIST_SUB 4
#define CT_HIST_MAX_POW 40 /* 2^41 ns ~ 37 minutes */
#define CT_HIST_BUCKETS (CT_HIST_MAX_POW * CT_HIST_SUB)

struct ct_api_stats {
	__u64 calls;
	__u64 errors;    /* returned neither 0 nor cudaErrorNotReady */
	__u64 total_ns;
	__u64 min_ns;    /* 0 with calls == 0 */
	__u64 max_ns;
	__u64 sum_sq_lo; /* sum of dur_ns^2 as a 128-bit number, for StdDev */
	__u64 sum_sq_hi;
	__u64 hist[CT_HIST_BUCKETS];
};

/* Counters in the per-CPU "counters" array. */
enum ct_counter {
	CT_CNT_LOST_RINGBUF = 0, /* ring buffer full: call record dropped */
	CT_CNT_LOST_THREADS,     /* thread state map full: call not tracked */
	CT_CNT_DEPTH_OVERFLOW,   /* nesting deeper than CT_MAX_DEPTH: call not tracked */
	CT_CNT_UNMATCHED,        /* frames discarded because a return skipped them */
	CT_CNT_LOST_CONTROL,     /* ring full: map-change or unfinished record dropped */
	CT_CNT_NR,
};

#endif
