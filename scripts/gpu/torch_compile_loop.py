"""torch.compile workload for cudatrace's GPU check: a Triton-compiled
function (launched through the driver API) run ITER times.

Usage: python3 torch_compile_loop.py [ITER]   (default 20)
Compile workers are separate processes: cudatrace follows them.
"""
import json
import sys

import torch


def step(x, w):
    return torch.nn.functional.gelu(x @ w).mul(2.0).add(1.0).sum(dim=1)


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    if iters < 1:
        sys.exit("ITER must be at least 1")
    compiled = torch.compile(step)
    x = torch.randn(256, 512, device="cuda")
    w = torch.randn(512, 512, device="cuda")
    for _ in range(iters):
        out = compiled(x, w)
    torch.cuda.synchronize()
    print(json.dumps({"iterations": iters, "torch": torch.__version__, "checksum": float(out.sum())}))


if __name__ == "__main__":
    main()
