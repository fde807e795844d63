#!/usr/bin/env bash
# Builds prometheus-cpp 1.0.1 (core + pull, civetweb embedded) as static
# archives for cudatrace-static: Debian's prometheus-cpp-dev has shared
# libraries only. Then configure cudatrace with
#   -DCUDATRACE_STATIC_PROMETHEUS=PREFIX
# Usage: scripts/build-static-prometheus.sh PREFIX [SOURCE]
# SOURCE: a prometheus-cpp v1.0.1 tree with 3rdparty/civetweb filled in;
# without it, it is cloned from GitHub (network needed).
set -euo pipefail
prefix=$(realpath -m "${1:?usage: build-static-prometheus.sh PREFIX [SOURCE]}")
src=${2:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -z "$src" ]; then
  src=$work/prometheus-cpp
  git clone -q --depth 1 --branch v1.0.1 --recurse-submodules --shallow-submodules \
    https://github.com/jupp0r/prometheus-cpp "$src"
fi
[ -f "$src/3rdparty/civetweb/src/civetweb.c" ] || { echo "build-static-prometheus: $src lacks 3rdparty/civetweb" >&2; exit 1; }
# No push library, no gzip (no zlib dependency), no tests.
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DENABLE_PUSH=OFF \
  -DENABLE_COMPRESSION=OFF -DENABLE_TESTING=OFF -DGENERATE_PKGCONFIG=OFF -DCMAKE_INSTALL_PREFIX="$prefix" >/dev/null
ninja -C "$work/build"
cmake --install "$work/build" >/dev/null
echo "prometheus-cpp static archives in $prefix/lib; configure cudatrace with -DCUDATRACE_STATIC_PROMETHEUS=$prefix"
