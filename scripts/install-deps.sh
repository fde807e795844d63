#!/usr/bin/env bash
# Installs what building and testing cudatrace needs on Debian 12 (as root).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build pkg-config clang llvm \
  libbpf-dev bpftool libelf-dev zlib1g-dev libzstd-dev \
  libcli11-dev libfmt-dev libgtest-dev nlohmann-json3-dev \
  python3 libclang-rt-14-dev man-db jq >/dev/null  # python3: scripts/bench.py, render-timeline.py; libFuzzer and the sanitizer runtimes for clang (scripts/fuzz.sh); man-db: scripts/package-check.sh; jq: the output tests
