#!/usr/bin/env bash
# What one probe hit costs on this host for each kind of first instruction
# (issue 24): the prologue table of the CUDA files real programs load
# (prologues.py), then a loop of calls into fixture libraries that differ
# only in their prologue (tests/fixtures/prologues.S) and into functions of
# the real driver and runtime, untraced and under empty BPF programs
# (probe_bench floor-entry: an entry probe; floor: entry + return probe).
# Rounds interleave the kinds; prints one line per measurement:
#   cost KIND MODE ROUND ns_per_call
# Usage: probe-cost.sh DIR [ROUNDS]   DIR holds probe_bench-static,
# prologue_loop and the fixtures' lib_<kind>.so; writes $OUT/prologues.json
# when OUT is set.
set -u
DIR=$1
ROUNDS=${2:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
BENCH=$DIR/probe_bench-static
LOOP=$DIR/prologue_loop
CALLS=${CALLS:-200000}

python3 "$HERE/prologues.py" ${OUT:+--json "$OUT/prologues.json"}

libcuda=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
libcudart=$(python3 -c 'import glob, site; print(sorted(glob.glob(site.getsitepackages()[0] + "/nvidia/cu*/lib/libcudart.so.*"))[0])' 2>/dev/null)
echo "libcuda=$libcuda libcudart=$libcudart"
targets=()
for lib in "$DIR"/lib_*.so; do
	k=${lib##*/lib_}
	targets+=("${k%.so}:$lib:cudaGetDevice")
done
[ -n "$libcuda" ] && targets+=("driver-cuDriverGetVersion:$libcuda:cuDriverGetVersion"
	"driver-cuCtxGetCurrent:$libcuda:cuCtxGetCurrent")
[ -n "$libcudart" ] && targets+=("wheel-cudaGetLastError:$libcudart:cudaGetLastError"
	"wheel-cudaGetDevice:$libcudart:cudaGetDevice")
for round in $(seq "$ROUNDS"); do
	for t in "${targets[@]}"; do
		IFS=: read -r kind lib sym <<<"$t"
		for mode in untraced floor-entry floor; do
			if [ $mode = untraced ]; then
				r=$(taskset -c 2 "$LOOP" "$lib" "$sym" "$CALLS" 3 2>&1)
			else
				r=$(taskset -c 2 "$BENCH" $mode --lib "$lib" -- "$LOOP" "$lib" "$sym" "$CALLS" 3 2>&1 | grep ns_per_call)
			fi
			echo "cost $kind $mode $round ${r#ns_per_call=}"
		done
	done
done
