/* SPDX-License-Identifier: MIT */
/* The BPF record ABI: the records, constants and read-only configuration
 * shared by the BPF program (bpf/cudatrace.bpf.c) and user space. Plain C,
 * fixed-width fields only. */
#ifndef CUDATRACE_BPF_ABI_H
#define CUDATRACE_BPF_ABI_H

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
/* Rows of the API table with their _ptsz/_ptds forms (the API id has 14 bits;
 * a power of two: BPF indexes its per-API arrays with a mask). */
#define CT_MAX_APIS 2048
/* The API id of "no API": parent_api of an outermost call. */
#define CT_NO_API 0xffff
/* cudaErrorNotReady == CUDA_ERROR_NOT_READY (a query's "not yet"): a status
 * that is not a failure. */
#define CT_CUDA_NOT_READY 600
/* cudaErrorStreamCaptureInvalidated == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
 * a failed cudaStreamEndCapture that ended the capture all the same. */
#define CT_CUDA_CAPTURE_INVALIDATED 901
/* cudaErrorNoKernelImageForDevice == CUDA_ERROR_NO_BINARY_FOR_GPU: a launch
 * of a program built without code for this GPU. */
#define CT_CUDA_NO_BINARY_FOR_GPU 209

/* What the BPF programs are told before they are loaded (read-only: the
 * verifier prunes the branches of the modes not asked for). Set by user
 * space from the records the driver needs, the target and the options
 * (src/record/bpf_object.cpp). */
struct ct_config {
	__u64 min_dur_ns;     /* --min-us: calls shorter than this send no record */
	__u32 filter_tgid;    /* trace only this process (0: see use_tgid_set) */
	__u32 filter_tid;     /* --tid: only this thread (0: every thread) */
	__u32 tracer_tgid;    /* cudatrace's own process: once it dies, nobody would continue a
			       * process stopped at a library load (ct_map_change) */
	__u32 wakeup_every;   /* records per CPU between reader wake-ups */
	__u8 use_tgid_set;    /* trace the processes in traced_tgids */
	__u8 follow_forks;    /* add children of traced processes to the set */
	__u8 errors_only;     /* --errors: only failed calls send records */
	__u8 stop_on_map_change; /* --dlopen-stop: stop a process at a library load */
	__u8 summary_mode;    /* aggregate in api_stats; records only for detail calls */
	__u8 summary_records_all; /* ... and for every call (--by-range, docs/nvtx.md) */
	__u8 capture_stack;   /* --stack: append the user stack to each record */
	/* --every-layer: also record the driver calls a runtime call makes
	 * (CT_COOKIE_DRIVER inside CT_COOKIE_RUNTIME), which are otherwise part
	 * of the runtime call's record. */
	__u8 every_layer;
	__u8 export_mode;     /* exporter mode: records only for allocations and frees (the
			       * calls are counted in export_stats: export_counts) */
	/* Whole-node mode (--all-processes): every exec sends a map-change
	 * record, so that user space looks at the new program's files (a static
	 * runtime, a container's own dynamic loader) without stopping it. */
	__u8 report_execs;
	/* --empty-probes (benchmarks): the probes as placed, programs that do
	 * nothing, so that the trap's cost can be told from the programs'. */
	__u8 empty_programs;
	__u8 activity_in_bpf; /* summary mode: count launches and copies in "activity" */
	/* --py-stack: records of a thread that runs Python code carry its Python
	 * frames (ct_py_frame), read from the interpreter's thread state at the
	 * return, for the processes user space put in "py_procs" */
	__u8 py_stack;
	/* OpenTelemetry thread context (docs/correlation.md): a call of a
	 * process that has an entry in "otel_tls" carries its thread's span. */
	__u8 thread_ctx;
	/* Count every completed call in export_stats (exporter mode, and --otlp's
	 * metrics beside the records of a trace or summary). */
	__u8 export_counts;
	/* Exporter mode with --otlp: a record also for each call made under a
	 * published span (thread_ctx), for its OTLP span. */
	__u8 span_records;
};

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
 *   bits  0..13  API id (index into the user-space API table)
 *   bit  14      a runtime function (libcudart, or a runtime linked into a
 *                program or library): the driver calls it makes are part of
 *                its record (see bit 60)
 *   bit  15      the kernel single-steps the probed instruction
 *                (target/prologue.h): its entry hits are counted apart,
 *                priced at what a single-stepped hit costs. The probe's bit,
 *                set by Probes on top of the API's cookie.
 *   bits 16..19  number of stack argument words to save at entry (0..5)
 *   bits 20..23  out-param 0: argument slot + 1 (0: none)
 *   bits 24..27  out-param 0: size in bytes (1..8)
 *   bits 28..31  out-param 1: argument slot + 1
 *   bits 32..35  out-param 1: size in bytes
 *   bits 36..39  payload: argument slot + 1 holding a pointer to read at return
 *   bits 40..41  payload kind (enum ct_payload_kind)
 *   bits 42..46  payload size in 8-byte words for CT_PAYLOAD_BYTES (up to 31)
 *   bit  47      the function returns no status (void, or another value)
 *   bit  48      summary mode still sends this call's record: the kernel,
 *                transfer and memory tables need its arguments
 *   bits 49..59  operation id: the API id of the first table row of the same
 *                operation (the API without _ptsz/_ptds/_vN suffix). A call
 *                entered directly inside a call of the same operation is a
 *                forward (see ct_frame) and gets no record of its own.
 *   bit  60      a driver function (libcuda). Entered directly inside a
 *                runtime function (bit 14) and without out-params, it is that
 *                runtime call's own work: it gets no record unless
 *                settings.every_layer, and a session program leaves its
 *                return unprobed (one trap saved per runtime operation). The
 *                runtime's record has the program's arguments and the status
 *                it got; out-params (a kernel lookup) are still recorded for
 *                the models.
 *   bit  61      store the address of the first stack argument (rsp + 8 at
 *                entry) in args[CT_REG_ARGS]: a struct passed by value in
 *                memory (ncclUniqueId), read at return as the payload
 *   bit  62      an NCCL status: 7 (ncclInProgress) is not a failure, 600 is one
 *   bit  63      always recorded, whatever --min-us and --errors say: an NVTX
 *                range call (user space keeps each thread's range stack)
 */
enum ct_payload_kind {
	CT_PAYLOAD_NONE = 0,
	CT_PAYLOAD_STRING = 1,       /* NUL-terminated string */
	CT_PAYLOAD_BYTES = 2,        /* fixed-size struct */
	CT_PAYLOAD_LAUNCH_CONFIG = 3, /* CUlaunchConfig / cudaLaunchConfig_t + attrs */
};

#define CT_COOKIE_API_MASK 0x3fffull
#define CT_COOKIE_API(c) ((__u32)((c) & CT_COOKIE_API_MASK))
#define CT_COOKIE_STACK_WORDS(c) ((__u32)(((c) >> 16) & 0xf))
#define CT_COOKIE_OUT_SLOT(c, i) ((__u32)(((c) >> (20 + 8 * (i))) & 0xf))
#define CT_COOKIE_OUT_SIZE(c, i) ((__u32)(((c) >> (24 + 8 * (i))) & 0xf))
#define CT_COOKIE_PAYLOAD_SLOT(c) ((__u32)(((c) >> 36) & 0xf))
#define CT_COOKIE_PAYLOAD_KIND(c) ((__u32)(((c) >> 40) & 0x3))
#define CT_COOKIE_PAYLOAD_WORDS_SHIFT 42
#define CT_COOKIE_PAYLOAD_WORDS(c) ((__u32)(((c) >> CT_COOKIE_PAYLOAD_WORDS_SHIFT) & 0x1f))
#define CT_COOKIE_RUNTIME (1ull << 14)
#define CT_COOKIE_STEPPED (1ull << 15)
#define CT_COOKIE_VOID (1ull << 47)
#define CT_COOKIE_DETAIL (1ull << 48)
#define CT_COOKIE_OP_SHIFT 49
#define CT_COOKIE_OP(c) ((__u32)(((c) >> CT_COOKIE_OP_SHIFT) & 0x7ff))
#define CT_COOKIE_HAS_OUTS(c) (((c) & ((0xfull << 20) | (0xfull << 28))) != 0)
#define CT_COOKIE_DRIVER (1ull << 60)
#define CT_COOKIE_STACK_ADDR (1ull << 61)
#define CT_COOKIE_NCCL_STATUS (1ull << 62)
#define CT_NCCL_IN_PROGRESS 7
#define CT_COOKIE_ALWAYS (1ull << 63)

/* Launch configs: CUlaunchConfig and cudaLaunchConfig_t are both 56 bytes,
 * with the attribute array pointer at offset 40 and its length at 48. Each
 * attribute (CUlaunchAttribute / cudaLaunchAttribute) is 72 bytes. */
#define CT_LAUNCH_CONFIG_SIZE 56
#define CT_LAUNCH_ATTR_SIZE 72
#define CT_LAUNCH_MAX_ATTRS 4

struct ct_call {
	__u32 type;        /* CT_REC_CALL or CT_REC_UNFINISHED */
	__u16 api;         /* API id */
	__u16 parent_api;  /* API id of the enclosing probed call, CT_NO_API if none */
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
	__u32 sections_len; /* bytes of sections (struct ct_section) after the payload */
	char comm[CT_COMM_LEN];
};

#define CT_ALIGN8(n) (((n) + 7) & ~7u)

/*
 * The contexts a call carries besides its arguments (facets, docs/design.md)
 * follow its payload as tagged sections, at sizeof(struct ct_call) +
 * CT_ALIGN8(payload_len): each a struct ct_section and its `len` bytes, the
 * next one right after, sections_len bytes in all. A record has each kind at
 * most once, in any order; a call without contexts has none.
 */
enum ct_section_kind {
	CT_SECTION_STACK = 1,     /* --stack: user stack frames (u64 each), innermost (the call site) first */
	CT_SECTION_PY_FRAMES = 2, /* --py-stack: struct ct_py_frame each, innermost first */
	CT_SECTION_SPAN = 3,      /* OpenTelemetry span: struct ct_span, its attributes, zeros to 8 bytes */
};
/* Kinds are below this: user space tells a kind seen twice with a bit per kind. */
#define CT_SECTION_KINDS 32
struct ct_section {
	__u32 kind; /* enum ct_section_kind */
	__u32 len;  /* bytes that follow this header, a multiple of 8 */
};

/* User stack frames captured with --stack. */
#define CT_MAX_STACK_FRAMES 64

/* --py-stack (docs/python.md): the Python frames of the calling thread. */
#define CT_MAX_PY_FRAMES 32
struct ct_py_frame {
	__u64 code;  /* the frame's code object */
	__u64 instr; /* 3.10: f_lasti (in code units); 3.11+: the instruction pointer
		      * (prev_instr / instr_ptr), an address inside the code object */
	__u64 ident; /* the code object's identity at the call (ct_py_ident); 0: not read.
		      * CPython reuses a freed code object's memory for the next: user
		      * space names the frame only if the code object it reads still has it */
};

/* A code object's identity: the 8-byte words of its bytes [code_ident_at,
 * code_ident_at + code_ident_len), fields that never change while it lives,
 * folded; never 0. 3.12+: the word of co_version, a number no other code
 * object gets; 3.10 and 3.11: co_filename to co_linetable (where the name,
 * file and line table objects are). BPF and user space fold alike. */
#define CT_PY_IDENT_SPAN 128
static __inline __u64 ct_py_ident(const __u8 *bytes, __u32 len)
{
	__u64 h = 0;
	for (__u32 i = 0; i < CT_PY_IDENT_SPAN / 8; i++) {
		if (i * 8 >= len)
			break;
		__u64 word;
		__builtin_memcpy(&word, bytes + i * 8, 8);
		h = (h ^ word) * 0x9e3779b97f4a7c15ULL;
	}
	return h ? h : 1;
}

/* Where an interpreter keeps a thread's frames ("py_procs" hash, by tgid):
 * set by user space for each process whose files define _PyRuntime
 * (src/target/python.cpp). Offsets in bytes; CT_PY_NONE: no such field. */
#define CT_PY_NONE 0xffffffffu
#define CT_PY_FRAME_SPAN 128
struct ct_py_layout {
	__u64 runtime;          /* address of _PyRuntime in the process */
	__u32 interp_head;      /* _PyRuntime.interpreters.head */
	__u32 interp_threads;   /* PyInterpreterState.threads.head (3.10: tstate_head) */
	__u32 tstate_next;      /* PyThreadState.next */
	__u32 tstate_thread_id; /* PyThreadState.thread_id: pthread_self(), the thread's fs base */
	__u32 tstate_frame;     /* 3.10 frame; 3.11/3.12 cframe; 3.13 current_frame */
	__u32 cframe_frame;     /* 3.11/3.12: _PyCFrame.current_frame; CT_PY_NONE otherwise */
	__u32 frame_code;       /* f_code / f_executable */
	__u32 frame_previous;   /* f_back / previous */
	__u32 frame_instr;      /* f_lasti (3.10) / prev_instr / instr_ptr */
	__u32 frame_owner;      /* owner byte (3.12+), CT_PY_NONE: none */
	__u8 instr_is_lasti;    /* frame_instr is a 4-byte f_lasti (3.10) */
	__u8 cstack_owner;      /* owner value of the C stack's shim frames (3), skipped */
	__u16 frame_span;       /* bytes from a frame's start that hold the fields above, read at once
				 * (at most CT_PY_FRAME_SPAN) */
	__u32 tstate_datastack; /* 3.11+: PyThreadState.datastack_chunk, followed by datastack_top;
				 * CT_PY_NONE: frames are read one by one */
	__u32 tstate_span;      /* bytes from a PyThreadState's start that hold the fields above,
				 * read at once (at most CT_PY_TSTATE_SPAN) */
	__u16 code_ident_at;    /* a code object's identity (ct_py_ident): where it starts, */
	__u16 code_ident_len;   /* and its bytes, a multiple of 8 (at most CT_PY_IDENT_SPAN) */
	__u32 pad;
	/* The process's code object epoch: 0 until its code objects' deallocator
	 * is probed; then a number of user space's (CT_PY_EPOCH_STEP apart per
	 * process), raised by one at each code object freed. While it stays, no
	 * code object of the process was freed, so the identities read at it
	 * still hold for the same addresses: a walk reads only new ones. */
	__u64 code_epoch;
};
#define CT_PY_EPOCH_STEP (1ULL << 32)
#define CT_PY_TSTATE_SPAN 512
/* 3.11+ keep a thread's frames contiguous in its data stack: the top
 * CT_PY_WINDOW bytes of it are read at once, and the frames in them need no
 * read of their own. */
#define CT_PY_WINDOW 8192

/*
 * OpenTelemetry thread context (OTEP 4947). The record an SDK publishes per
 * thread through the TLS pointer otel_thread_ctx_v1 starts with this header,
 * followed by attrs_size bytes of attributes, each [key index u8][length u8]
 * [value]. A call whose thread had a valid record carries the header and up
 * to CT_MAX_SPAN_ATTRS bytes of attributes (ct_span.attrs_size says how many
 * were copied) in its CT_SECTION_SPAN section.
 */
#define CT_SPAN_HEADER 28 /* what the OTEP record's header holds */
#define CT_MAX_SPAN_ATTRS 256
struct ct_span {
	__u8 trace_id[16];
	__u8 span_id[8];
	__u8 valid;       /* 1 */
	__u8 trace_flags;
	__u16 attrs_size; /* attribute bytes that follow (at most CT_MAX_SPAN_ATTRS) */
	__u32 pad;
};
#define CT_SPAN_SIZE 32 /* sizeof(struct ct_span) */
/* Bytes of a span with `attrs` attribute bytes (its section's are CT_ALIGN8 of them). */
#define CT_SPAN_BYTES(attrs) (CT_SPAN_SIZE + (attrs))

/* The most bytes of sections one record can carry, each kind at its largest:
 * BPF builds records with room for them (a new kind adds its own here). The
 * span's has room for the word read_span zeroes after it. */
#define CT_SECTION_SPAN_ROOM (CT_SPAN_BYTES(CT_MAX_SPAN_ATTRS) + 8)
#define CT_SECTIONS_MAX_BYTES \
	(3 * sizeof(struct ct_section) + CT_MAX_STACK_FRAMES * 8 + \
	 CT_MAX_PY_FRAMES * sizeof(struct ct_py_frame) + CT_SECTION_SPAN_ROOM)

/*
 * Where a process's otel_thread_ctx_v1 lives ("otel_tls" hash, by tgid; set by
 * user space, src/target/thread_context.cpp). x86-64 TLS is variant II: the
 * thread pointer (fsbase) is the TCB, a module in the static TLS block starts
 * l_tls_offset bytes below it; a module loaded later may live in a block the
 * thread's dtv points at (dtv[modid].pointer.val). BPF reads the module's
 * l_tls_offset and l_tls_modid from its link_map until it finds them set, and
 * keeps them here (static_offset, modid).
 */
#define CT_TLS_NO_OFFSET 0               /* glibc NO_TLS_OFFSET */
#define CT_TLS_FORCED_DYNAMIC (-1ll)     /* glibc FORCED_DYNAMIC_TLS_OFFSET */
struct ct_tls_target {
	__u64 st_value;       /* the variable's offset in its module's TLS block */
	__u64 link_map;       /* address of the module's struct link_map */
	__s64 static_offset;  /* l_tls_offset once known static; 0: not (yet) */
	__u64 modid;          /* l_tls_modid once read; 0: not yet */
	__u32 lm_tls_offset;  /* offsetof(struct link_map, l_tls_offset) (glibc's _thread_db_*) */
	__u32 lm_tls_modid;   /* offsetof(struct link_map, l_tls_modid) */
	__u32 dtv_in_tcb;     /* offset of the dtv pointer from the thread pointer */
	__u32 dtv_slot_size;  /* sizeof(dtv_t) */
	__u32 dtv_val;        /* offsetof(dtv_t, pointer.val) */
	__u32 pad;
};

struct ct_map_change {
	__u32 type; /* CT_REC_MAP_CHANGE */
	__u32 pid;
	__u32 tid;
	__u32 stopped; /* 1 if the process was sent SIGSTOP and waits for SIGCONT */
	/* 0: the dynamic loader changed the maps. Else the address of a driver
	 * function the process just looked up, not probed in it yet (the
	 * driver_fns map): probe it before the process can call it. */
	__u64 wanted;
	__u64 wanted_by; /* with `wanted`: the lookup's call site (for -v) */
};

/* Driver functions probed on demand (docs/design.md, "Two traps a call").
 * A driver function that a runtime wraps traps in every call of it, the
 * runtime's included, once probed. So a process traced from its start gets
 * no probe on a driver function until code other than a CUDA runtime may
 * call it: it imports it, or it looks it up (dlsym, dlvsym,
 * cuGetProcAddress, cudaGetDriverEntryPoint). The lookup programs
 * (ct_lookup_enter/exit, lookup.bpf.h) stop the process at such a lookup's
 * return until user space has probed the function. */
struct ct_driver_fn_key {
	__u32 tgid;
	__u32 pad;
	__u64 addr; /* the function's entry in the process */
};
enum ct_driver_fn_state {
	CT_DRIVER_FN_UNPROBED = 0,
	CT_DRIVER_FN_PROBED = 1,
};
/* Where a process's CUDA runtimes keep their code: a lookup made from there
 * is the runtime filling its own table. A shared libcudart's text is the
 * runtime's alone; a file that carries a static runtime (cuBLAS, cuDNN, a
 * program built by nvcc) also has code of its own, whose lookups by name
 * (dlsym: XLA's and Triton's) are not the runtime's, while its
 * cuGetProcAddress calls are taken to be (the runtime's mechanism; an
 * unstripped static runtime's internals are not where its API functions are,
 * so no narrower span can be told). Up to CT_RUNTIME_RANGES per process. */
#define CT_RUNTIME_RANGES 16
struct ct_runtime_range_key {
	__u32 tgid;
	__u32 index;
};
struct ct_runtime_range {
	__u64 start, end;
	__u64 runtime_library; /* 1: a runtime library; 0: a file with a static runtime */
};
/* The lookup probes' cookie: where the function's address is at return. */
enum ct_lookup_kind {
	CT_LOOKUP_RESULT = 0,      /* the return value (dlsym, dlvsym) */
	CT_LOOKUP_OUT_ARG2 = 1,    /* *second argument (cuGetProcAddress*) */
	CT_LOOKUP_OUT_ARG2_PROGRAM = 2, /* *second argument, for the program whoever
					 * asks (cudaGetDriverEntryPoint*) */
};

/* Per-thread stack of calls in progress (the "threads" map, keyed by tid).
 *
 * A forward is a call entered directly inside a call of the same operation
 * (a framework's local function named like the API that calls the library's,
 * or a chain of them). It has a frame, so that its return pairs, but no record:
 * it passes its API (the library's variant, e.g. _ptsz), return value and
 * out-params (the library's: the truth) to the frame that records the
 * operation, its owner, the outermost of the chain (whose record keeps the
 * caller's call site, arguments and whole duration). Depth and parent are set
 * at entry and count recorded calls only, as if forwards did not exist. */
#define CT_FRAME_RECORDED 0xff /* owner of a frame that has its own record */
/* owner of a frame that is part of its parent's record (CT_COOKIE_DRIVER
 * inside CT_COOKIE_RUNTIME, probed with its return): its return pops it and
 * records nothing. */
#define CT_FRAME_QUIET 0xfe
struct ct_frame {
	__u64 cookie;
	__u64 ts_ns;
	__u64 args[CT_MAX_ARGS];
	__u16 parent_api; /* of the record, CT_NO_API if none */
	__u8 level;       /* the record's depth */
	__u8 owner;       /* CT_FRAME_RECORDED, CT_FRAME_QUIET, or the index of a forward's owner */
	__u8 fwd_depth;   /* owners: 1 + stack index of the forward whose results
			   * fwd_* hold (the deepest, else the latest); 0: none */
	__u8 fwd_flags;   /* CT_FLAG_OUT*_FAULT of fwd_outs */
	__u16 fwd_api;
	__s64 fwd_ret;
	__u64 fwd_outs[CT_MAX_OUTS];
};

struct ct_thread_state {
	__u32 depth; /* may exceed CT_MAX_DEPTH: frames beyond it are not recorded */
	__u32 tgid;
	/* Probe hits of this thread (what tracing cost it): folded into
	 * process_cost when it exits. */
	__u64 entry_hits;
	__u64 return_hits;
	__u64 stepped_hits; /* of entry_hits, those on single-stepped probes */
	__u64 capture_ns;   /* BPF time spent reading Python frames and spans for its records */
	__u64 py_tstate; /* --py-stack: the thread's PyThreadState, once found (checked at each use) */
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

/*
 * Summary mode: successful outermost launches, copies and memsets are counted
 * in the "activity" hash by the arguments the kernel and transfer tables need,
 * instead of sent as records. User space fills "activity_apis" (indexed by API
 * id) and rebuilds a call from each key to decode it like a record.
 * Copies also carry the page-locked generation: the number of successful
 * outermost calls that changed page-locked or managed memory (allocations,
 * frees, registrations) before them, so user space can tell whether a copy's
 * host side was page-locked when it ran.
 */
#define CT_ACTIVITY_ENTRIES 16384
/* cudaMemcpyKind values whose host side is part of a copy's key. */
#define CT_COPY_HTOD 1
#define CT_COPY_DTOH 2

enum ct_activity_kind {
	CT_ACT_NONE = 0,
	CT_ACT_COUNT = 1,     /* a launch or memset: counted in "activity" */
	CT_ACT_COPY = 2,      /* a copy: counted, keyed by the page-locked generation too */
	CT_ACT_PAGE_LOCK = 3, /* changes page-locked memory: bumps the generation, sends its record */
	/* Stream capture begins or ends in the process (counted in "capturing"):
	 * while one is open, launches, copies and memsets send their records, for
	 * the stream model to put captured work into its graph. */
	CT_ACT_CAPTURE_BEGIN = 4,
	CT_ACT_CAPTURE_END = 5,
};

struct ct_activity_api {
	__u16 key_args;    /* bit i: argument slot i is part of the key */
	__u8 kind;         /* enum ct_activity_kind */
	__u8 config_slot;  /* argument slot + 1 of a launch config whose grid and block
			    * (its first 24 bytes) are part of the key; 0: none */
	/* Copies: the host side of a host-to-device copy (the source) or a
	 * device-to-host copy (the destination) is part of the key, to tell
	 * page-locked from pageable memory. The direction is the cudaMemcpyKind
	 * argument's value (1 HtoD, 2 DtoH) or, without one, copy_kind. */
	__u8 copy_kind_slot; /* argument slot + 1; 0: none */
	__u8 copy_kind;
	__u8 dst_slot;       /* argument slot + 1 of the destination and the source */
	__u8 src_slot;
};

struct ct_activity_key {
	__u32 tgid;
	__u16 api;
	__u16 pad;
	__u64 page_locked_gen;   /* copies only */
	__u64 args[CT_MAX_ARGS]; /* the slots in key_args; the others 0 */
	__u32 dims[6];           /* from the launch config: grid x, y, z, block x, y, z */
};

struct ct_activity {
	__u64 calls;
	__u64 total_ns;
	__u64 first_ts_ns; /* entry of the earliest and latest call counted */
	__u64 last_ts_ns;
};

/* What tracing cost each process ("process_cost" hash, by tgid): the probe
 * hits of its threads that exited; live threads keep theirs in their state. */
#define CT_COST_CPU_WORDS 4 /* CPUs 0-255 */
struct ct_process_cost {
	__u64 entry_hits;
	__u64 return_hits;
	__u64 stepped_hits;
	__u64 cpu_ns; /* its CPU time when its last thread exited; 0 while it runs */
	__u64 capture_ns;   /* of its exited threads (ct_thread_state) */
	__u64 run_delay_ns; /* time its exited threads waited on a run queue, over their lives */
	__u64 cpus[CT_COST_CPU_WORDS]; /* the CPUs its last thread could run on (CPU n: bit n % 64
					* of word n / 64), when it exited */
	char comm[CT_COMM_LEN];
};

/*
 * Exporter mode (--prometheus, docs/prometheus.md): every completed call is
 * counted in the "export_stats" hash by process, API, status and copy
 * direction, so no call sends a ring record but allocations and frees (for
 * live device memory). User space reads the cumulative values and turns
 * them into Prometheus counters and histograms; entries of processes that
 * exited are read one last time and deleted.
 *
 * Latencies go to fixed buckets: bucket i < CT_EXPORT_BUCKETS - 1 counts
 * calls with dur_ns <= ct_export_bounds_ns[i] (and above the previous bound);
 * the last one counts everything longer. The bounds are the documented
 * cuda_api_duration_seconds buckets (1, 2.5, 5, 10 ... 10^7 us).
 */
#define CT_EXPORT_BUCKETS 23
#define CT_EXPORT_ENTRIES 16384
#define CT_EXPORT_BOUNDS_NS                                                                                 \
	{ 1000ull, 2500ull, 5000ull, 10000ull, 25000ull, 50000ull, 100000ull, 250000ull, 500000ull,         \
	  1000000ull, 2500000ull, 5000000ull, 10000000ull, 25000000ull, 50000000ull, 100000000ull,         \
	  250000000ull, 500000000ull, 1000000000ull, 2500000000ull, 5000000000ull, 10000000000ull }
/* Direction::Default: cudaMemcpyDefault, or a kind argument out of range. */
#define CT_EXPORT_DIR_DEFAULT 5
/* A status that is not a small non-negative number (ret outside 0..0xfffe). */
#define CT_EXPORT_STATUS_OTHER 0xffff

enum ct_export_kind {
	CT_EXP_NONE = 0,
	CT_EXP_LAUNCH = 1, /* counted in outer_ok */
	CT_EXP_COPY = 2,   /* bytes and direction */
	CT_EXP_MEMORY = 3, /* allocation or free: also sends its record */
};

/* Per API ("export_apis" array, filled by user space from the API table). */
struct ct_export_api {
	__u8 kind;           /* enum ct_export_kind */
	__u8 bytes_slot;     /* argument slot + 1 of the byte count (copies; 0: none) */
	__u8 rows_slot;      /* argument slot + 1 of a row count that multiplies it (2D); 0: none */
	__u8 copy_kind_slot; /* argument slot + 1 of the cudaMemcpyKind; 0: copy_kind */
	__u8 copy_kind;      /* direction without a kind argument (decode/transfer.h Direction) */
	__u8 pad[3];
};

struct ct_export_key {
	__u32 tgid;
	__u16 api;
	__u16 status;   /* return code (0: success), CT_EXPORT_STATUS_OTHER */
	__u8 direction; /* copies: decode/transfer.h Direction (HtoH..DtoD as cudaMemcpyKind,
			 * Peer, Default); others 0 */
	__u8 pad[7];
};

struct ct_export_value {
	__u64 calls;
	__u64 outer_ok;  /* successful outermost calls (launches and copies count these) */
	__u64 total_ns;
	__u64 bytes;     /* copies: bytes of the successful outermost calls */
	__u64 buckets[CT_EXPORT_BUCKETS];
};

/* Counters in the per-CPU "counters" array. */
enum ct_counter {
	CT_CNT_LOST_RINGBUF = 0, /* ring buffer full: call record dropped */
	CT_CNT_LOST_THREADS,     /* thread state map full: call not tracked */
	CT_CNT_DEPTH_OVERFLOW,   /* nesting deeper than CT_MAX_DEPTH: call not tracked */
	CT_CNT_UNMATCHED,        /* frames discarded because a return skipped them */
	CT_CNT_LOST_CONTROL,     /* ring full: map-change or unfinished record dropped */
	CT_CNT_ACTIVITY_FULL,    /* activity map full: the call was sent as a record instead */
	CT_CNT_EXPORT_FULL,      /* export_stats map full: the call was not counted (export_counts) */
	CT_CNT_UNTRACED,         /* began while probes were attached or detached (tracing_begun): not traced */
	CT_CNT_NR,
};

#endif
