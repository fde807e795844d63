#!/usr/bin/env bash
# The GPU rows of docs/fleet.md (issue 13, part 4), in one command on the GPU
# host, from the repository root, as root:
#   bash scripts/gpu-fleet-measure.sh [OUTFILE]    (default $OUT/fleet-h200.json, else /tmp/fleet-h200.json)
# Env: CUDATRACE  the cudatrace binary (default .devtmp/cudatrace-static, else build/cudatrace-static)
#      PYTHON     python3 with PyTorch (default python3)
#      WINDOW     seconds per traced window (default 6)
#      CPUS       CPUs of the workloads, a taskset list (default 2-5)
# Runs scripts/fleet-measure.py on the PyTorch workloads of scripts/bench-torch.py
# (launch-bound inference, CUDA-graph replay, MLP training step) and, with two
# GPUs or more, a 2-rank NCCL data-parallel step: calls/s per API, JSON Lines
# bytes per call (zstd -3/-19 where the zstd command exists), cudatrace's CPU
# per mode, and one /metrics scrape where cudatrace has --prometheus. About
# 4 minutes on an H200 host. Then, on the build machine:
#   scripts/fleet-cost.py docs/fleet-build-vm.json fleet-h200.json
set -eu
cd "$(dirname "$0")/.."
if [ -n "${OUT:-}" ]; then default_out=$OUT/fleet-h200.json; else default_out=/tmp/fleet-h200.json; fi
out=${1:-$default_out}
cudatrace=${CUDATRACE:-.devtmp/cudatrace-static}
[ -x "$cudatrace" ] || cudatrace=build/cudatrace-static
workloads=inference,graph,mlp
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${gpus:-0}" -ge 2 ] && workloads=$workloads,nccl
echo "gpu-fleet-measure: $gpus GPU(s), workloads $workloads, cudatrace $cudatrace" >&2
command -v zstd >/dev/null || echo "gpu-fleet-measure: no zstd here: compressed sizes come from the build VM's ratio" >&2
exec "${PYTHON:-python3}" scripts/fleet-measure.py --workloads "$workloads" --label H200 --cudatrace "$cudatrace" \
	--window "${WINDOW:-6}" --cpus "${CPUS:-2-5}" --out "$out"
