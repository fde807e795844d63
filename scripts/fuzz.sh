#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang, ASan and UBSan, and
# runs each for a bounded time: FUZZ_SECONDS each (default 30). A crash or a
# failed check stops with a non-zero status and leaves the input in
# build-fuzz/crashes/. Called by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-30}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCUDATRACE_FUZZ=ON -DCUDATRACE_STATIC=OFF >/dev/null
ninja -C build-fuzz decode_fuzzer json_fuzzer trace_line_fuzzer
mkdir -p build-fuzz/crashes
for target in decode_fuzzer json_fuzzer trace_line_fuzzer; do
  corpus=build-fuzz/corpus/$target
  mkdir -p "$corpus"
  echo "fuzzing $target for ${seconds}s"
  build-fuzz/tests/fuzz/$target -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 \
    -artifact_prefix=build-fuzz/crashes/$target- "$corpus" 2>&1 | tail -n 12
done
