#!/usr/bin/env bash
# GPU verification of the NCCL layer (issue 15) on a machine with 2 GPUs.
# Run from the repository root:
#   bash scripts/gpu-nccl-check.sh [OUTDIR]        (default /tmp/ncclcheck)
# Env: CUDATRACE   prebuilt cudatrace binary (default ./build/cudatrace-static)
#      PYTHON      python3 with PyTorch (default python3)
#      ITERATIONS  loop count of scripts/gpu/nccl_check.py (default 20)
#      OUT         if set, the logs and traces are copied there
#
# Steps: nccl_check.py untraced (does the workload run at all?), then under
# `cudatrace --json` (scripts/gpu/nccl_compare.py checks counts, bytes and
# the (comm_id, seq) agreement of the two ranks), then under
# `cudatrace --summary -f coll` (collectives table and rank-skew insight).
# NCCL_* variables (NCCL_NVLS_ENABLE=0 on the H200 machines) are inherited,
# never set here. Prints PASS/FAIL per step and "RESULT: PASS|FAIL" last;
# exits 1 if anything failed.
set -u

OUTDIR=${1:-/tmp/ncclcheck}
KIT=$(cd "$(dirname "$0")/gpu" && pwd)
CUDATRACE=${CUDATRACE:-./build/cudatrace-static}
PYTHON=${PYTHON:-python3}
ITERATIONS=${ITERATIONS:-20}
RUN_TIMEOUT=300     # seconds, untraced
TRACED_TIMEOUT=480  # seconds, traced: start-up and probe attach add tens of seconds

mkdir -p "$OUTDIR" || exit 1
OUTDIR=$(cd "$OUTDIR" && pwd)
[ -e "$CUDATRACE" ] && CUDATRACE=$(cd "$(dirname "$CUDATRACE")" && pwd)/$(basename "$CUDATRACE")

failures=()
pass() { echo "PASS: $*"; }
fail() {
	echo "FAIL: $*"
	failures+=("$*")
}
section() { printf '\n===== %s =====\n' "$*"; }
show_tail() { # show_tail FILE: its last lines, indented
	[ -s "$1" ] && { echo "  --- last lines of $1:"; tail -n 20 "$1" | sed 's/^/  | /'; }
}
finish() {
	section "result"
	if [ -n "${OUT:-}" ]; then
		mkdir -p "$OUT" && cp -r "$OUTDIR"/. "$OUT"/ 2>/dev/null && echo "copied $OUTDIR to $OUT"
	fi
	if [ ${#failures[@]} -eq 0 ]; then
		echo "RESULT: PASS"
		exit 0
	fi
	echo "RESULT: FAIL (${#failures[@]}):"
	printf '  - %s\n' "${failures[@]}"
	exit 1
}

section "gpu-nccl-check $(date -Is)"
echo "host: $(hostname)  kernel: $(uname -r)  uid: $(id -u)"
nvidia-smi -L || fail "nvidia-smi -L"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$ngpu" -ge 2 ] && pass "$ngpu GPUs" || fail "needs 2 GPUs, found $ngpu"
echo "NCCL environment (inherited, not changed): $(env | grep '^NCCL_' | tr '\n' ' ')"
echo "python: $PYTHON ($($PYTHON --version 2>&1))"
if [ -x "$CUDATRACE" ]; then
	echo "cudatrace: $CUDATRACE ($("$CUDATRACE" --version 2>&1 | head -n 1))"
else
	fail "cudatrace binary $CUDATRACE missing or not executable"
	finish
fi
[ "$ngpu" -ge 2 ] || finish

section "untraced: nccl_check.py $ITERATIONS"
rm -rf "$OUTDIR/untraced" "$OUTDIR/traced" "$OUTDIR/summary"
timeout -k 10 "$RUN_TIMEOUT" "$PYTHON" "$KIT/nccl_check.py" "$ITERATIONS" "$OUTDIR/untraced" \
	>"$OUTDIR/untraced.out" 2>"$OUTDIR/untraced.err"
rc=$?
if [ $rc -eq 0 ]; then
	pass "untraced run"
	tail -n 1 "$OUTDIR/untraced.out"
else
	fail "untraced run exited $rc$([ $rc -eq 124 ] && echo ' (timeout)')"
	show_tail "$OUTDIR/untraced.err"
	finish  # nothing to compare if the workload itself does not run
fi

section "traced: cudatrace --json -- nccl_check.py $ITERATIONS"
timeout -k 10 "$TRACED_TIMEOUT" "$CUDATRACE" --json -o "$OUTDIR/trace.jsonl" -- \
	"$PYTHON" "$KIT/nccl_check.py" "$ITERATIONS" "$OUTDIR/traced" >"$OUTDIR/traced.out" 2>"$OUTDIR/traced.err"
rc=$?
if [ $rc -eq 0 ]; then
	pass "traced run ($(wc -l <"$OUTDIR/trace.jsonl") trace lines)"
	if timeout 300 "$PYTHON" "$KIT/nccl_compare.py" "$OUTDIR/trace.jsonl" "$OUTDIR/traced" "$OUTDIR/traced.out" \
		>"$OUTDIR/compare.txt" 2>&1; then
		pass "trace matches the program"
	else
		fail "trace does not match the program (see below)"
	fi
	cat "$OUTDIR/compare.txt"
	echo "  --- a few NCCL records:"
	grep '"layer":"nccl"' "$OUTDIR/trace.jsonl" | grep -m 6 -E 'ncclAllReduce|ncclCommInit|ncclSend' | cut -c1-600 | sed 's/^/  | /'
else
	fail "traced run exited $rc$([ $rc -eq 124 ] && echo ' (timeout)')"
	show_tail "$OUTDIR/traced.err"
fi

section "summary: cudatrace --summary -f coll -- nccl_check.py $ITERATIONS"
timeout -k 10 "$TRACED_TIMEOUT" "$CUDATRACE" --summary -f coll -o "$OUTDIR/summary.txt" -- \
	"$PYTHON" "$KIT/nccl_check.py" "$ITERATIONS" "$OUTDIR/summary" >"$OUTDIR/summary.out" 2>"$OUTDIR/summary.err"
rc=$?
# Text summaries go to -o; fall back to stderr/stdout if this build prints them there.
summary_text=$(cat "$OUTDIR/summary.txt" "$OUTDIR/summary.err" "$OUTDIR/summary.out" 2>/dev/null)
if [ $rc -eq 0 ] && grep -q "NCCL collectives" <<<"$summary_text"; then
	pass "summary run has the NCCL collectives table"
	grep -q "rank skew" <<<"$summary_text" && pass "rank-skew insight present" || fail "no rank-skew insight"
	sed -n '/NCCL collectives/,/^Allocations never freed/p;/Insights:/,$p' <<<"$summary_text" | sed 's/^/  | /'
else
	fail "summary run exited $rc or printed no NCCL collectives table"
	show_tail "$OUTDIR/summary.err"
fi

finish
