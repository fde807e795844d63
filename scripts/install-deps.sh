#!/usr/bin/env bash
# Installs what building and testing cudatrace needs on Debian 12 (as root:
# as another user it runs itself through sudo, scripts/as-root.sh).
set -euo pipefail
. "$(dirname "$0")/as-root.sh"
export DEBIAN_FRONTEND=noninteractive
# cudatrace-static carries every exporter, but Debian ships prometheus-cpp
# without static archives, and a libcurl whose dependencies have none: the
# build compiles them from Debian's own source packages (cmake/static-deps.cmake),
# fetched at the end by apt (signed like the binary packages) into
# /usr/local/src/cudatrace-deps. Source packages need deb-src entries: the
# archives the binary packages come from.
if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src ' /etc/apt/sources.list; then
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources >/etc/apt/sources.list.d/cudatrace-deb-src.sources
  else
    sed -n 's/^deb /deb-src /p' /etc/apt/sources.list >/etc/apt/sources.list.d/cudatrace-deb-src.list
  fi
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build pkg-config clang llvm \
  libbpf-dev bpftool libelf-dev zlib1g-dev libzstd-dev \
  libcli11-dev libfmt-dev libgtest-dev nlohmann-json3-dev \
  prometheus-cpp-dev prometheus systemd python3-yaml \
  python3 libclang-rt-14-dev man-db jq curl qemu-system-x86 busybox-static cpio \
  dpkg-dev libprotobuf-dev protobuf-compiler libssl-dev libcurl4-openssl-dev python3-protobuf podman buildah >/dev/null  # python3: scripts/bench.py, render-timeline.py; libFuzzer and the sanitizer runtimes for clang (scripts/fuzz.sh); man-db: scripts/package-check.sh; jq: the output tests and the docs' examples; curl: the docs' Prometheus examples (doc_blocks)
# prometheus-cpp-dev: --prometheus (the server binary `prometheus` runs in its
# integration test); libprotobuf-dev, protobuf-compiler, libcurl4-openssl-dev:
# --otlp (python3-protobuf: its test's fake Collector decodes with the schema); systemd (systemd-analyze) and python3-yaml: the deploy/
# checks of scripts/test.sh. qemu-system-x86, busybox-static, cpio: the
# suites on Debian's Linux 6.1 (scripts/qemu-6.1/run.sh). podman, buildah: the
# DaemonSet's image (deploy/Containerfile, scripts/deploy-check.sh).
# libprotobuf-dev (with libprotobuf.a), protobuf-compiler, libssl-dev (libssl.a,
# libcrypto.a): the exporters' static dependencies (cmake/static-deps.cmake).

sources=/usr/local/src/cudatrace-deps
rm -rf "$sources"
mkdir -p "$sources"
chown _apt "$sources" 2>/dev/null || true  # apt downloads as _apt where it can
# apt checks each .dsc against the signed Sources index, and dpkg-source each
# tarball against its .dsc (its own gpgv lines, about the uploader's key, which
# no keyring here has, are left out), then applies Debian's patches.
(cd "$sources" && apt-get source -qq --download-only prometheus-cpp curl &&
  for dsc in *.dsc; do dpkg-source -q -x "$dsc" 2> >(grep -v '^gpgv:' >&2) >/dev/null; done)
