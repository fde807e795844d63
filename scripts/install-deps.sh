#!/usr/bin/env bash
# Installs what building and testing cudatrace needs on Debian 12 (as root:
# as another user it runs itself through sudo, scripts/as-root.sh).
set -euo pipefail
. "$(dirname "$0")/as-root.sh"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build pkg-config clang llvm \
  libbpf-dev bpftool libelf-dev zlib1g-dev libzstd-dev \
  libcli11-dev libfmt-dev libgtest-dev nlohmann-json3-dev \
  prometheus-cpp-dev prometheus systemd python3-yaml \
  libprotobuf-dev protobuf-compiler libcurl4-openssl-dev python3-protobuf \
  python3 libclang-rt-14-dev man-db jq curl qemu-system-x86 busybox-static cpio >/dev/null  # python3: scripts/bench.py, render-timeline.py; libFuzzer and the sanitizer runtimes for clang (scripts/fuzz.sh); man-db: scripts/package-check.sh; jq: the output tests and the docs' examples; curl: the docs' Prometheus examples (doc_blocks)
# prometheus-cpp-dev: --prometheus (the server binary `prometheus` runs in its
# integration test); libprotobuf-dev, protobuf-compiler, libcurl4-openssl-dev:
# --otlp (python3-protobuf: its test's fake Collector decodes with the schema); systemd (systemd-analyze) and python3-yaml: the deploy/
# checks of scripts/test.sh. qemu-system-x86, busybox-static, cpio: the
# suites on Debian's Linux 6.1 (scripts/qemu-6.1/run.sh). cudatrace-static links prometheus-cpp statically
# only with CUDATRACE_STATIC_PROMETHEUS (scripts/build-static-prometheus.sh).
