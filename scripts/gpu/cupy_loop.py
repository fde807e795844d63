"""CuPy workload for cudatrace's GPU check: an NVRTC-compiled ElementwiseKernel
run ITER times on the default stream, then an op on a non-blocking stream.

Usage: python3 cupy_loop.py [ITER]   (default 50)
Prints one JSON line with the iteration count and the result's checksum.
"""
import json
import sys

import cupy as cp


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    if iters < 1:
        sys.exit("ITER must be at least 1")
    axpy = cp.ElementwiseKernel("float32 a, float32 x, float32 y", "float32 z", "z = a * x + y", "cudatrace_axpy")
    x = cp.arange(1 << 16, dtype=cp.float32)
    y = cp.ones_like(x)
    for _ in range(iters):
        y = axpy(cp.float32(0.5), x, y)
    cp.cuda.Device().synchronize()
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        z = (x * 2).sum()
    stream.synchronize()
    print(json.dumps({"iterations": iters, "cupy": cp.__version__, "checksum": float(y.sum()), "stream_sum": float(z)}))


if __name__ == "__main__":
    main()
