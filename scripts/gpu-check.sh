#!/usr/bin/env bash
# GPU verification of cudatrace against CUPTI. Run on a GPU machine from the
# repository root:
#   bash scripts/gpu-check.sh [OUTDIR]        (default /tmp/gpucheck)
# Env: CUDATRACE  prebuilt cudatrace binary (default ./build/cudatrace-static)
#      PYTHON     python3 with PyTorch (default python3)
#      OUT        if set, gpucheck.tar.gz and summary.txt are copied there
#      SKIP_BUILD if set, the kit is already built in OUTDIR/build (scripts/gpu/build.sh)
#      SELECTION  cudatrace's selection in the compared runs: "all" (default:
#                 -f all, every API at both layers) or "default" (the default
#                 groups, driver functions probed on demand: what a user gets)
#      ONLY       run only these checks, comma-separated (names as in main:
#                 multistream, driver_api, late_runtime, streams, failures,
#                 torch_loop, hf_decode, cupy_loop, torch_compile, jax_loop,
#                 attach, nvtx, graphs); all by default
#
# Each test program runs twice under the CUPTI counter (libcupti_count.so via
# CUDA_INJECTION64_PATH): once untraced, once under cudatrace, so cudatrace
# and CUPTI observe the very same execution. scripts/gpu/compare.py then
# checks cudatrace's counts. A failing step is reported and the next program
# still runs; the exit status is 1 if anything failed.
set -u

OUTDIR=${1:-/tmp/gpucheck}
KIT=$(cd "$(dirname "$0")/gpu" && pwd)
CUDATRACE=${CUDATRACE:-./build/cudatrace-static}
PYTHON=${PYTHON:-python3}
BUILD=$OUTDIR/build
LIB=$BUILD/libcupti_count.so
RUN_TIMEOUT=120   # seconds per untraced run
case ${SELECTION:-all} in
all) SELECT=(-f all) ;;
default) SELECT=(-v) ;;  # -v: which driver functions were probed on demand, and why
*) echo "SELECTION must be all or default" >&2; exit 2 ;;
esac
TRACED_TIMEOUT=180 # seconds per traced run: cudatrace's start-up adds tens of seconds

mkdir -p "$OUTDIR" || exit 1
OUTDIR=$(cd "$OUTDIR" && pwd)
[ -e "$CUDATRACE" ] && CUDATRACE=$(cd "$(dirname "$CUDATRACE")" && pwd)/$(basename "$CUDATRACE")

failures=()
fail() {
	echo "FAILED: $*"
	failures+=("$*")
}

section() { printf '\n===== %s =====\n' "$*"; }

show_tail() { # show_tail FILE: last lines of a log, indented
	[ -s "$1" ] && { echo "  --- last lines of $1:"; tail -n 15 "$1" | sed 's/^/  | /'; }
}

header() {
	section "gpu-check $(date -Is)"
	echo "host: $(hostname)  kernel: $(uname -r)  uid: $(id -u)"
	nvidia-smi -L || fail "nvidia-smi -L"
	echo "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)"
	echo "nvcc: $("${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" --version | tail -n 1)"
	echo "python: $PYTHON ($($PYTHON --version 2>&1))"
	if [ -x "$CUDATRACE" ]; then
		echo "cudatrace: $CUDATRACE ($("$CUDATRACE" --version 2>&1 | head -n 1))"
	else
		fail "cudatrace binary $CUDATRACE missing or not executable"
	fi
	echo "outdir: $OUTDIR"
}

# Use cudatrace's own list of traced APIs when it can print one.
traced_list() {
	TRACED_ARGS=()
	local f=$OUTDIR/traced-apis.json
	if timeout 20 "$CUDATRACE" "${SELECT[@]}" --list-apis --json >"$f" 2>"$OUTDIR/traced-apis.err" && [ -s "$f" ]; then
		echo "traced API list: $f ($(wc -c <"$f") bytes)"
		TRACED_ARGS=(--traced "$f")
	else
		echo "cudatrace --list-apis --json unavailable: comparing the APIs cudatrace reports"
	fi
}

# check NAME EXPECTED(yes|no) CMD...: untraced run, traced run, comparison.
check() {
	local name=$1 expected=$2
	shift 2
	local p=$OUTDIR/$name rc
	section "$name: $*"
	rm -f "$p".*

	env "${INJECT[@]}" CUPTI_COUNT_OUT="$p.cupti-untraced.json" \
		timeout -k 10 "$RUN_TIMEOUT" "$@" >"$p.untraced.out" 2>"$p.untraced.err"
	rc=$?
	if [ $rc -eq 0 ]; then
		echo "untraced run: ok"
	else
		fail "$name: untraced run exited $rc"
		show_tail "$p.untraced.err"
	fi
	[ -s "$p.cupti-untraced.json" ] || fail "$name: CUPTI counter wrote nothing (untraced run)"

	local start=$SECONDS
	# -f all: every traced API (queries too) is compared with CUPTI.
	# EXTRA_ARGS: more cudatrace options for this check (--every-layer).
	timeout -k 10 "$TRACED_TIMEOUT" "$CUDATRACE" "${SELECT[@]}" "${EXTRA_ARGS[@]}" --json -o "$p.trace.jsonl" --perfetto "$p.perfetto.json" -- \
		env "${INJECT[@]}" CUPTI_COUNT_OUT="$p.cupti.json" "$@" \
		>"$p.out" 2>"$p.err"
	rc=$?
	if [ $rc -eq 0 ]; then
		echo "traced run: ok ($((SECONDS - start)) s, $(wc -l <"$p.trace.jsonl" 2>/dev/null || echo 0) trace lines)"
	else
		fail "$name: traced run exited $rc"
		show_tail "$p.err"
	fi
	echo "program output: $(tail -n 1 "$p.out" 2>/dev/null)"
	if "$PYTHON" -c 'import json, sys; json.load(open(sys.argv[1]))' "$p.perfetto.json" 2>"$p.perfetto.err"; then
		echo "timeline: $p.perfetto.json ($(wc -c <"$p.perfetto.json") bytes, valid JSON)"
	else
		fail "$name: --perfetto file is not valid JSON"
		show_tail "$p.perfetto.err"
	fi

	local traced=("${TRACED_ARGS[@]}")
	if [ ${#EXTRA_ARGS[@]} -gt 0 ] && [ ${#traced[@]} -gt 0 ]; then  # the list as these options probe
		"$CUDATRACE" "${SELECT[@]}" "${EXTRA_ARGS[@]}" --list-apis --json >"$p.traced-apis.json" 2>/dev/null &&
			traced=(--traced "$p.traced-apis.json")
	fi
	local args=("$p.trace.jsonl" "$p.cupti.json" "${traced[@]}")
	[ "$expected" = yes ] && args+=(--expected "$p.out")
	[ -s "$p.cupti-untraced.json" ] && args+=(--baseline "$p.cupti-untraced.json")
	"$PYTHON" "$KIT/compare.py" "${args[@]}" >"$p.compare.txt" 2>&1
	rc=$?
	cat "$p.compare.txt"
	[ $rc -eq 0 ] || fail "$name: comparison (compare.py exit $rc)"
}

# The stream model: stream_events prints the edges and waits cudatrace should
# report; check_streams.py compares them, the pageable-copy warning and the
# --perfetto timeline.
check_streams() {
	local p=$OUTDIR/stream_events rc
	section "stream_events: $BUILD/stream_events"
	rm -f "$p".*
	timeout -k 10 "$TRACED_TIMEOUT" "$CUDATRACE" -o "$p.trace.txt" --perfetto "$p.perfetto.json" -- \
		"$BUILD/stream_events" >"$p.out" 2>"$p.err"
	rc=$?
	if [ $rc -ne 0 ]; then
		fail "stream_events: traced run exited $rc"
		show_tail "$p.err"
	fi
	"$PYTHON" "$KIT/check_streams.py" "$p.trace.txt" "$p.err" "$p.out" "$p.perfetto.json" >"$p.check.txt" 2>&1
	rc=$?
	cat "$p.check.txt"
	[ $rc -eq 0 ] || fail "stream_events: check_streams.py exit $rc"
}

# check_summary NAME CMD...: the --summary counts of a second run against
# the trace of the first (check NAME must have run).
check_summary() {
	local name=$1
	shift
	local p=$OUTDIR/$name rc
	section "$name --summary: $*"
	# The same selection as the trace it is compared with (check: SELECT).
	# Under the CUPTI counter as the trace was: CUPTI's own driver calls
	# (cuKernelGetName per launch, cuGetExportTable) are the program's too.
	timeout -k 10 "$TRACED_TIMEOUT" "$CUDATRACE" "${SELECT[@]}" --summary --insights --json -o "$p.summary.jsonl" -- \
		env "${INJECT[@]}" CUPTI_COUNT_OUT="$p.cupti-summary.json" "$@" >"$p.summary.out" 2>"$p.summary.err"
	rc=$?
	[ $rc -eq 0 ] || { fail "$name --summary: exited $rc"; show_tail "$p.summary.err"; }
	timeout -k 10 "$TRACED_TIMEOUT" "$CUDATRACE" "${SELECT[@]}" --summary --insights -o "$p.summary.txt" -- "$@" \
		>/dev/null 2>&1 || fail "$name --summary (text): exited non-zero"
	"$PYTHON" "$KIT/compare_summary.py" "$p.trace.jsonl" "$p.summary.jsonl" >"$p.summary-compare.txt" 2>&1
	rc=$?
	cat "$p.summary-compare.txt"
	[ $rc -eq 0 ] || fail "$name: summary counts differ from the trace's"
}

# NVTX ranges (--nvtx, docs/nvtx.md): nvtx_check.py says how many kernels it
# launched inside each of its ranges; check_nvtx.py compares with the range
# stack of every launch in the trace. --summary --by-range must run too.
check_nvtx() {
	local p=$OUTDIR/nvtx rc
	section "nvtx: $PYTHON $KIT/nvtx_check.py 20"
	rm -f "$p".*
	timeout -k 10 "$TRACED_TIMEOUT" "$CUDATRACE" --nvtx --json -o "$p.trace.jsonl" --perfetto "$p.perfetto.json" -- \
		"$PYTHON" "$KIT/nvtx_check.py" 20 >"$p.out" 2>"$p.err"
	rc=$?
	[ $rc -eq 0 ] || { fail "nvtx: traced run exited $rc"; show_tail "$p.err"; }
	"$PYTHON" "$KIT/check_nvtx.py" "$p.trace.jsonl" "$p.out" >"$p.check.txt" 2>&1
	rc=$?
	cat "$p.check.txt"
	[ $rc -eq 0 ] || fail "nvtx: check_nvtx.py exit $rc"
	timeout -k 10 "$TRACED_TIMEOUT" "$CUDATRACE" --summary --by-range -o "$p.by-range.txt" -- \
		"$PYTHON" "$KIT/nvtx_check.py" 20 >/dev/null 2>"$p.by-range.err"
	rc=$?
	[ $rc -eq 0 ] || { fail "nvtx --summary --by-range: exited $rc"; show_tail "$p.by-range.err"; }
	sed -n '/CUDA work per NVTX range/,$p' "$p.by-range.txt" | head -n 12
}

# Launches that fail (issue 35): a program built for sm_80 only (every launch
# fails in the runtime with cudaErrorNoKernelImageForDevice), and launches the
# GPU refuses (too many threads, too much shared memory, a host function):
# each shown with its status in the default trace and under --errors, each
# cause told once, and the synchronisation waiting only for what ran.
check_failures() {
	local mode prog p rc
	for mode in wrong-arch bad-config; do
		prog=$BUILD/launch_failures
		[ $mode = wrong-arch ] && prog=$BUILD/launch_failures_sm80
		[ -x "$prog" ] || { fail "$prog: not built"; continue; }
		for filter in default errors; do
			p=$OUTDIR/failures-$mode-$filter
			section "failures: $mode ($filter): $prog"
			local args=()
			[ $filter = errors ] && args=(--errors)
			local args_mode=$mode
			[ $filter = errors ] && args_mode=errors
			timeout -k 10 "$TRACED_TIMEOUT" "$CUDATRACE" "${args[@]}" --json -o "$p.trace.jsonl" -- \
				"$prog" $mode 10 >"$p.out" 2>"$p.err"
			rc=$?
			[ $rc -eq 0 ] || { fail "failures $mode $filter: exited $rc"; show_tail "$p.err"; }
			"$PYTHON" "$KIT/check_launch_failures.py" "$p.trace.jsonl" "$p.err" "$p.out" $args_mode >"$p.check.txt" 2>&1
			rc=$?
			cat "$p.check.txt"
			[ $rc -eq 0 ] || fail "failures $mode $filter: check_launch_failures.py exit $rc"
		done
	done
	# The text trace a user sees, and CUPTI's count of the same launches.
	[ -x "$BUILD/launch_failures_sm80" ] && timeout -k 10 "$TRACED_TIMEOUT" "$CUDATRACE" -- \
		"$BUILD/launch_failures_sm80" wrong-arch 3 2>&1 | cut -c 1-300
	[ -x "$BUILD/launch_failures" ] && timeout -k 10 "$TRACED_TIMEOUT" "$CUDATRACE" -- \
		"$BUILD/launch_failures" bad-config 2>&1 | cut -c 1-300
	[ -x "$BUILD/launch_failures_sm80" ] && check launch_failures_sm80 yes "$BUILD/launch_failures_sm80" wrong-arch 10
}

# -p to running services (issue 37): HF GPT-2 decode, a torch.compile loop
# and a JAX jit loop, each warm before cudatrace comes, so that every kernel
# handle was made before attach (nvcc stubs' variables, cuBLASLt's library
# kernels, Triton's and XLA's modules). attach_names.py counts the launches
# named (at least 99.5 %), checks each name against the kernels CUPTI saw run
# in the same process, and prints the attach time and the tracer's peak RSS.
check_attach() {
	local kind module
	for kind in hf compile jax; do
		module=torch
		[ "$kind" = hf ] && module=transformers
		[ "$kind" = jax ] && module=jax
		section "attach: -p PID of a running $kind service ($PYTHON $KIT/attach_names.py)"
		if ! "$PYTHON" -c "import $module" >/dev/null 2>&1; then
			echo "skipped (python cannot import $module)"
			continue
		fi
		timeout -k 10 400 "$PYTHON" "$KIT/attach_names.py" check "$kind" "$CUDATRACE" "$LIB" "$OUTDIR" 8 ||
			fail "attach $kind"
	done
}

# CUDA graphs (docs/graphs.md): a torch.cuda.graph capture and torch.compile's
# "reduce-overhead" CUDA graph trees, traced by default (what a user runs) and
# counted by CUPTI in the same execution; graph_check.py compares the kernels
# each cudatrace graph launch says it runs with CUPTI's kernel records of
# that graph, per launch.
check_graphs() {
	local p=$OUTDIR/graphs rc
	section "graphs: $PYTHON $KIT/graph_check.py run 30"
	rm -f "$p".*
	timeout -k 10 "$TRACED_TIMEOUT" "$CUDATRACE" --json -o "$p.trace.jsonl" -- \
		env "${INJECT[@]}" CUPTI_COUNT_OUT="$p.cupti.json" "$PYTHON" "$KIT/graph_check.py" run 30 >"$p.out" 2>"$p.err"
	rc=$?
	[ $rc -eq 0 ] || { fail "graphs: traced run exited $rc"; show_tail "$p.err"; }
	cat "$p.out"
	"$PYTHON" "$KIT/graph_check.py" compare "$p.trace.jsonl" "$p.cupti.json" >"$p.check.txt" 2>&1
	rc=$?
	cat "$p.check.txt"
	[ $rc -eq 0 ] || fail "graphs: graph_check.py exit $rc"
	grep -m 3 'GraphLaunch' "$p.trace.jsonl" | cut -c 1-400
}

# check_optional NAME MODULE CMD...: check NAME when python can import MODULE.
check_optional() {
	local name=$1 module=$2
	shift 2
	if "$PYTHON" -c "import $module" >/dev/null 2>&1; then
		check "$name" no "$@"
	else
		section "$name: skipped (python cannot import $module)"
	fi
}

# want NAME: whether ONLY (comma-separated) selects check NAME; all without it.
want() { [ -z "${ONLY:-}" ] || [[ ",$ONLY," == *",$1,"* ]]; }

main() {
	header
	section build
	if [ -z "${SKIP_BUILD:-}" ]; then
		bash "$KIT/build.sh" "$BUILD" >"$OUTDIR/build.log" 2>&1 || fail "build (see $OUTDIR/build.log)"
	fi
	grep -E '^(built|FAILED)' "$OUTDIR/build.log"
	# Without the counter library the programs still run (and fail to compare).
	INJECT=()
	EXTRA_ARGS=()
	[ -f "$LIB" ] && INJECT=(CUDA_INJECTION64_PATH="$LIB")
	traced_list

	want multistream && for prog in multistream_shared multistream_static; do
		if [ -x "$BUILD/$prog" ]; then
			check "$prog" yes "$BUILD/$prog" 50
		else
			fail "$prog: not built"
		fi
	done
	if want driver_api; then
		if [ -x "$BUILD/driver_api" ] && [ -f "$BUILD/driver_kernels.fatbin" ]; then
			check driver_api yes "$BUILD/driver_api" "$BUILD/driver_kernels.fatbin" 20
		else
			fail "driver_api: not built"
		fi
	fi
	if want late_runtime; then
		if [ -x "$BUILD/late_runtime" ] && [ -f "$BUILD/late_runtime_lib.so" ]; then
			check late_runtime yes "$BUILD/late_runtime" "$BUILD/late_runtime_lib.so"
		else
			fail "late_runtime: not built"
		fi
	fi
	if want streams; then
		if [ -x "$BUILD/stream_events" ]; then
			check_streams
		else
			fail "stream_events: not built"
		fi
	fi
	want failures && check_failures
	if want torch_loop; then
		check torch_loop no "$PYTHON" "$KIT/torch_loop.py" 100
		check_summary torch_loop "$PYTHON" "$KIT/torch_loop.py" 100
	fi
	want hf_decode && check_optional hf_decode transformers "$PYTHON" "$KIT/decode_loop.py" 2 16
	# Programs nobody here wrote: NVRTC kernels (CuPy), Triton kernels
	# launched through the driver API (torch.compile), and XLA, whose plugin
	# forwards through local functions named like the CUDA APIs (JAX).
	want cupy_loop && check_optional cupy_loop cupy "$PYTHON" "$KIT/cupy_loop.py" 50
	want torch_compile && check_optional torch_compile torch "$PYTHON" "$KIT/torch_compile_loop.py" 20
	want jax_loop && check_optional jax_loop jax "$PYTHON" "$KIT/jax_loop.py" 20
	want attach && check_attach
	if want nvtx || want graphs; then
		if "$PYTHON" -c "import torch" >/dev/null 2>&1; then
			want nvtx && check_nvtx
			want graphs && check_graphs
		else
			section "nvtx and graphs: skipped (python cannot import torch)"
		fi
	fi

	section summary
	if [ ${#failures[@]} -eq 0 ]; then
		echo "ALL OK"
		return 0
	fi
	printf '%s\n' "${failures[@]}" | sed 's/^/FAILED: /'
	return 1
}

main 2>&1 | tee "$OUTDIR/summary.txt"
status=${PIPESTATUS[0]}

if [ -n "${OUT:-}" ]; then
	mkdir -p "$OUT" && tar -czf "$OUT/gpucheck.tar.gz" -C "$OUTDIR" --exclude=./build . &&
		cp "$OUTDIR/summary.txt" "$OUT/summary.txt" &&
		echo "copied gpucheck.tar.gz and summary.txt to $OUT"
fi
exit "$status"
