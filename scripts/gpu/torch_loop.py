"""Small PyTorch CUDA workload for cudatrace: matmul + relu + sum per iteration.

Usage: python3 torch_loop.py [ITER]   (default 20)
Prints one JSON line: iterations, torch version, and the CUDA libraries the
process has mapped (PyTorch wheels bring their own libcudart).
"""
import json
import sys

import torch


def mapped_libraries(prefixes):
    found = {p: [] for p in prefixes}
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) < 6:
                continue
            path = fields[5].strip()
            base = path.rsplit("/", 1)[-1]
            for p in prefixes:
                if base.startswith(p) and path not in found[p]:
                    found[p].append(path)
    return found


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    if iters < 1:
        sys.exit("ITER must be at least 1")
    x = torch.randn(1024, 1024, device="cuda")
    for _ in range(iters):
        y = torch.relu(x @ x)
        s = y.sum()
        torch.cuda.synchronize()
    libs = mapped_libraries(["libcudart", "libcuda.so", "libcublas", "libcupti"])
    print(json.dumps({
        "iterations": iters,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0),
        "libcudart": libs["libcudart"],
        "libcuda": libs["libcuda.so"],
        "libcublas": libs["libcublas"],
        "libcupti": libs["libcupti"],
        "last_sum": s.item(),
    }))


if __name__ == "__main__":
    main()
