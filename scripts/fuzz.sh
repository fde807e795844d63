#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang, ASan and UBSan, and
# runs each for a bounded time: FUZZ_SECONDS each (default 30). A crash or a
# failed check stops with a non-zero status and leaves the input in
# BUILD_DIR/crashes/.
#   scripts/fuzz.sh [BUILD_DIR]   (default build-fuzz; scripts/test.sh passes
#                                  its sanitizer build, configured for fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-30}
build=${1:-build-fuzz}
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCUDATRACE_FUZZ=ON -DCUDATRACE_STATIC=OFF >/dev/null
ninja -C "$build" decode_fuzzer json_fuzzer trace_line_fuzzer
mkdir -p "$build/crashes"
for target in decode_fuzzer json_fuzzer trace_line_fuzzer; do
  corpus=$build/corpus/$target
  mkdir -p "$corpus"
  echo "fuzzing $target for ${seconds}s"
  "$build/tests/fuzz/$target" -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 \
    -artifact_prefix="$build/crashes/$target-" "$corpus" 2>&1 | tail -n 12
done
