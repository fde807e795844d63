#!/usr/bin/env bash
# Builds everything and runs every test (unit, and as root, integration with
# real eBPF). Run from anywhere; dependencies: scripts/install-deps.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build
ctest --test-dir build --output-on-failure
