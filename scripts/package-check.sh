#!/usr/bin/env bash
# Builds the Debian package of a build directory (CPack: the static binary,
# the man page, the bash completion) and checks, as root, that it installs
# with dpkg, runs and has its man page; then removes it again.
# Usage: scripts/package-check.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
(cd "$build" && cpack -G DEB >/dev/null)
deb=$(ls "$build"/cudatrace_*.deb)
if dpkg -s cudatrace >/dev/null 2>&1; then
  echo "package-check: a cudatrace package is already installed; not replacing it" >&2
  exit 1
fi
trap 'dpkg -r cudatrace >/dev/null' EXIT
dpkg -i "$deb" >/dev/null
/usr/bin/cudatrace --version
# The package's own files, not whatever `man -w` finds first: a
# `cmake --install` into /usr/local would shadow them.
dpkg -L cudatrace | grep -qx /usr/share/man/man8/cudatrace.8.gz
man -l /usr/share/man/man8/cudatrace.8.gz | grep -q "cudatrace report"
dpkg -L cudatrace | grep -qx /usr/share/bash-completion/completions/cudatrace
echo "package-check: $deb installs, runs and has its man page"
