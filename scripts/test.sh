#!/usr/bin/env bash
# Builds everything and runs every test (unit, and as root, integration with
# real eBPF; the integration and fault suites also on Linux 6.1 under QEMU), the Debian package (scripts/package-check.sh) and the overhead guard (scripts/bench.py --guard),
# then the same suite built with AddressSanitizer and
# UndefinedBehaviorSanitizer, then the fuzzers for a bounded time
# (scripts/fuzz.sh). deploy/ is checked by scripts/deploy-check.sh. Run from anywhere; dependencies: scripts/install-deps.sh.
set -euo pipefail
. "$(dirname "$0")/as-root.sh"
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build
ctest --test-dir build --output-on-failure
# The integration and fault suites again on Debian 12's Linux 6.1 under QEMU
# (its verifier, perf-event uprobes): scripts/qemu-6.1/run.sh, docs/kernels.md.
bash scripts/qemu-6.1/run.sh build
# deploy/: the systemd unit verifies, the DaemonSet parses and holds its shape.
bash scripts/deploy-check.sh build/cudatrace
# The Debian package installs, runs and has its man page.
bash scripts/package-check.sh build
# Overhead regression guard: cudatrace's added cost per call as a ratio to
# empty probes on the same symbols (about 1.5 here); fails only when gross.
python3 scripts/bench.py --build build --guard 3.0 --calls 200000 --reps 5

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUDATRACE_SANITIZE=ON >/dev/null
ninja -C build-asan
# Every suite but those that spend their time waiting rather than running
# cudatrace's code: the perf-event passes (*_perf: the same suites again with
# --attach perf), node (a Prometheus server and 100 processes over minutes),
# budget (duty cycles in time) and faults (signals, kills and timeouts; its
# hostile inputs are the fuzzers' too). CI stays under 45 min.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -E '_perf$|^node$|^budget$|^faults$'

bash scripts/fuzz.sh
