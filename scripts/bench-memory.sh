#!/usr/bin/env bash
# cudatrace's own memory while it traces programs of shapes that used to
# make it grow (issue 10, part 4). Prints, per scenario, the largest
# anonymous resident memory (RssAnon, sampled every 10 ms from
# /proc/PID/status), the peak RSS (VmHWM, file-backed pages included) and
# the run time. Needs root. Results: docs/benchmarks.md.
#
#   scripts/bench-memory.sh [--build DIR] [--calls N] [--summary] [SCENARIO...]
#
# Scenarios (default: all), each about N traced calls (default 10 M):
#   launch-loop  launches on one stream, synchronised once at the end
#   streams      streams and events created and never destroyed, and an
#                allocation never freed with each
#   threads      1,000 threads, each launching on its per-thread stream
#   children     100 short-lived child processes, one after another
#   cublaslt     a process that dlopens libcublasLt (~500 MB, but only 440
#                exported symbols), 1,000 launches
#   libllvm      one that dlopens libLLVM (~45,000 exported functions, like
#                PyTorch's big libraries); a launch names a function in it
#   bigsyms      one that dlopens a generated library of 300,000 exported
#                functions with long C++ names (115 MiB of symbol tables,
#                .dynsym in hash order, like libtorch_cuda's); a launch
#                names a function in it
#   attach-toolkit  -p to a running process that has the toolkit's 17 big
#                libraries loaded (cuBLAS, cuBLASLt, cuDNN, cuFFT, cuSPARSE,
#                cuSOLVER, cuRAND, NCCL, NVRTC: 2 GB, each with its own
#                runtime to fingerprint), for 3 s: peak RSS and attach time
#                (issue 37's target: <= 96 MiB, <= 1 s)
# The trace goes to /dev/null (the output buffer stays empty); --summary
# traces with --summary instead (the memory tracker runs). CUDATRACE=PATH
# measures another cudatrace binary.
set -euo pipefail
build="$(cd "$(dirname "$0")/.." && pwd)/build"
calls=10000000
mode=(--json -o /dev/null)
scenarios=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --calls) calls="$2"; shift 2 ;;
    --summary) mode=(--summary); shift ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) scenarios+=("$1"); shift ;;
  esac
done
[ ${#scenarios[@]} -gt 0 ] || scenarios=(launch-loop streams threads children cublaslt libllvm bigsyms attach-toolkit)
cudatrace="${CUDATRACE:-$build/cudatrace}"
app="$build/tests/fixtures/insights_app"
[ -x "$cudatrace" ] && [ -x "$app" ] || { echo "bench-memory: build cudatrace and the fixtures in $build first" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench-memory: needs root" >&2; exit 2; }
export FAKE_CUDA_SYNC_US=0

# Runs cudatrace on the command; prints the largest RssAnon, VmHWM and the run time.
measure() {
  local start; start=$(date +%s.%N)
  "$cudatrace" "${mode[@]}" -- "$@" >/dev/null 2>&1 &
  local pid=$! peak=0 hwm=0 anon
  local key value _
  while kill -0 "$pid" 2>/dev/null; do
    while read -r key value _; do
      case "$key" in
        RssAnon:) [ "$value" -gt "$peak" ] && peak=$value ;;
        VmHWM:) hwm=$value ;;
      esac
    done <"/proc/$pid/status" 2>/dev/null || true
    sleep 0.01
  done
  wait "$pid" || true
  local end; end=$(date +%s.%N)
  printf '%-12s %s  RssAnon max %6.1f MiB  VmHWM %6.1f MiB  %6.1f s\n' "$scenario" "${mode[0]}" \
    "$(echo "$peak / 1024" | bc -l)" "$(echo "${hwm:-0} / 1024" | bc -l)" "$(echo "$end - $start" | bc -l)"
}

# A library with libtorch_cuda's shape of symbol tables, in a temporary directory.
big_symbols_library() {
  local dir; dir=$(mktemp -d)
  python3 - "$dir/big.s" <<'PY'
import sys
with open(sys.argv[1], "w") as out:
    out.write(".text\n")
    for i in range(300000):
        name = (f"_ZN2at6native12_GLOBAL__N_1{i:07d}launch_vectorized_kernel_with_a_long_templated_name_IZZZNS0_"
                f"23direct_copy_kernel_cudaERNS_18TensorIteratorBaseEENKUlvE0_clEvE{i}_EEvT_")
        out.write(f".globl {name}\n.type {name},@function\n{name}:\n ret\n.size {name},1\n")
    out.write('.section .note.GNU-stack,"",@progbits\n')
PY
  gcc -shared -o "$dir/libbigsyms.so" "$dir/big.s" && rm "$dir/big.s" && echo "$dir/libbigsyms.so"
}

# -p to a process holding the toolkit's libraries: VmHWM and cudatrace -v's attach time.
attach_toolkit() {
  local lib=/usr/local/cuda/lib64 libs=() name
  for name in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libcudnn_adv.so.9 libcudnn_cnn.so.9 \
      libcudnn_engines_precompiled.so.9 libcudnn_engines_runtime_compiled.so.9 libcudnn_graph.so.9 \
      libcudnn_heuristic.so.9 libcudnn_ops.so.9 libcufft.so.12 libcurand.so.10 libcusolver.so.12 libcusparse.so.12 \
      libnccl.so.2 libnvrtc.so.13; do
    [ -e "$lib/$name" ] && libs+=("$lib/$name")
  done
  local fifo; fifo=$(mktemp -u) && mkfifo "$fifo"
  LD_LIBRARY_PATH=$lib:$lib/stubs "$app" hold "${libs[@]}" <"$fifo" >"$fifo.out" 2>&1 &
  local holder=$!
  exec 9>"$fifo"
  timeout 60 bash -c "until grep -q ready '$fifo.out' 2>/dev/null; do sleep 0.1; done" || { echo "bench-memory: the holder did not start" >&2; exit 1; }
  local err; err=$(mktemp)
  "$cudatrace" -v -o /dev/null -p "$holder" 2>"$err" &
  local tracer=$!
  sleep 3
  kill -INT "$tracer"
  wait "$tracer" || true
  exec 9>&-
  wait "$holder" || true
  printf '%-12s %d libraries  %s  %s\n' "$scenario" "${#libs[@]}" \
    "$(grep -o 'BPF loaded and [0-9]* probes attached in [0-9.]* ms' "$err")" "$(grep -o 'peak RSS.*' "$err")"
  rm -f "$fifo" "$fifo.out" "$err"
}

for scenario in "${scenarios[@]}"; do
  case "$scenario" in
    # A launch is two traced calls (cudaLaunchKernel and its cuLaunchKernel);
    # a "streams" round about nine.
    launch-loop) measure "$app" launch-loop $((calls / 2)) $((calls / 2)) ;;
    streams) measure "$app" streams $((calls / 9)) ;;
    threads) measure "$app" threads 1000 $((calls / 2000)) ;;
    children) measure "$app" children 100 $((calls / 200)) ;;
    cublaslt) measure "$app" dlopen /usr/local/cuda/lib64/libcublasLt.so.13 1000 ;;
    libllvm) measure "$app" dlopen "$(ls /usr/lib/x86_64-linux-gnu/libLLVM-1*.so.1 | head -1)" 1000 ;;
    bigsyms)
      big=$(big_symbols_library)
      measure "$app" dlopen "$big" 1000
      rm -r "$(dirname "$big")" ;;
    attach-toolkit) attach_toolkit ;;
    *) echo "bench-memory: unknown scenario $scenario" >&2; exit 2 ;;
  esac
done
