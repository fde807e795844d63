#!/usr/bin/env bash
# Builds prometheus-cpp 1.0.1's core (the metrics and their text format;
# cudatrace serves /metrics itself) as a static archive for cudatrace-static:
# Debian's prometheus-cpp-dev has shared libraries only. Then configure
# cudatrace with
#   -DCUDATRACE_STATIC_PROMETHEUS=PREFIX
# Usage: scripts/build-static-prometheus.sh PREFIX [SOURCE]
# SOURCE: a prometheus-cpp v1.0.1 tree; without it, it is cloned from GitHub
# (network needed).
set -euo pipefail
prefix=$(realpath -m "${1:?usage: build-static-prometheus.sh PREFIX [SOURCE]}")
src=${2:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -z "$src" ]; then
  src=$work/prometheus-cpp
  git clone -q --depth 1 --branch v1.0.1 https://github.com/jupp0r/prometheus-cpp "$src"
fi
[ -f "$src/core/src/registry.cc" ] || { echo "build-static-prometheus: $src is not a prometheus-cpp tree" >&2; exit 1; }
# The core only: no pull (HTTP server) or push library, no gzip, no tests.
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DENABLE_PULL=OFF \
  -DENABLE_PUSH=OFF -DENABLE_COMPRESSION=OFF -DENABLE_TESTING=OFF -DGENERATE_PKGCONFIG=OFF \
  -DCMAKE_INSTALL_PREFIX="$prefix" >/dev/null
ninja -C "$work/build"
cmake --install "$work/build" >/dev/null
echo "prometheus-cpp static core in $prefix/lib; configure cudatrace with -DCUDATRACE_STATIC_PROMETHEUS=$prefix"
