#!/usr/bin/env bash
# Installs dependencies, builds cudatrace, and traces the bundled demo CUDA
# program (tests/fixtures/real_app.cu, built with nvcc against the real
# libcudart; without a GPU its calls fail with cudaErrorInsufficientDriver,
# which is still a real trace). Needs root: run as another user, it runs
# itself through sudo (scripts/as-root.sh).
set -euo pipefail
. "$(dirname "$0")/as-root.sh"
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build cudatrace cudatrace-static fixtures
if [ -x build/tests/fixtures/real_app_shared ]; then
  demo=build/tests/fixtures/real_app_shared
else
  echo "nvcc not found at /usr/local/cuda: tracing the fake CUDA runtime demo instead" >&2
  demo=build/tests/fixtures/fake_app
fi
exec build/cudatrace -- "$demo" basic
