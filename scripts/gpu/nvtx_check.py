"""PyTorch loop with NVTX ranges for `cudatrace --nvtx` (docs/nvtx.md).

Usage: cudatrace --nvtx --json -o TRACE -- python3 nvtx_check.py [STEPS]  (default 20)

Every range holds work whose kernel launches are known: in-place elementwise
ops on preallocated tensors (add_, fill_, mul_) launch exactly one kernel each
once warmed up, and warm-up happens outside every range. Ranges come from
torch.cuda.nvtx.range_push/pop and, in a last phase, from
torch.autograd.profiler.emit_nvtx() (one range per aten operator).

Prints one JSON line: the launches it made inside each range, as
{"expect": [{"path": [regex per stack level, outermost first], "launches": N}, ...]}
and the process's NVTX_INJECTION64_PATH. scripts/gpu/check_nvtx.py compares.
"""
import json
import os
import sys

import torch

ELEMENTS = 1 << 20
ADDS = 10  # per step, in "forward"
FILLS = 3  # per step, in "fill" inside "forward"


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    if steps < 1:
        sys.exit("nvtx_check.py: STEPS must be at least 1")
    x = torch.zeros(ELEMENTS, device="cuda")
    y = torch.ones_like(x)
    for _ in range(3):  # warm-up: module loading, allocator, no range open
        x.add_(y)
        x.fill_(0.0)
        x.mul_(2.0)
    torch.cuda.synchronize()

    nvtx = torch.cuda.nvtx
    for s in range(steps):
        nvtx.range_push(f"step {s}")
        nvtx.range_push("forward")
        for _ in range(ADDS):
            x.add_(y)
        nvtx.range_push("fill")
        for _ in range(FILLS):
            x.fill_(1.0)
        nvtx.range_pop()
        nvtx.range_pop()
        x.mul_(2.0)  # directly in "step s"
        nvtx.range_pop()
    torch.cuda.synchronize()

    nvtx.range_push("emit_nvtx")
    with torch.autograd.profiler.emit_nvtx():
        for _ in range(ADDS):
            x.add_(y)
    nvtx.range_pop()
    torch.cuda.synchronize()

    expect = [
        {"path": [r"step \d+", "forward"], "launches": steps * ADDS},
        {"path": [r"step \d+", "forward", "fill"], "launches": steps * FILLS},
        {"path": [r"step \d+"], "launches": steps},
        {"path": ["emit_nvtx", r"aten::add_\b.*"], "launches": ADDS},
        {"path": ["emit_nvtx"], "launches": 0},
    ]
    print(json.dumps({"steps": steps, "torch": torch.__version__,
                      "nvtx_injection": os.environ.get("NVTX_INJECTION64_PATH"), "expect": expect}))


if __name__ == "__main__":
    main()
