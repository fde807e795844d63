"""JAX workload for cudatrace's GPU check: jit(tanh(a @ a).sum()) ITER times.

XLA's CUDA plugin holds local functions named like CUDA APIs that forward to
libcuda/libcudart: each operation must still be counted once.
Usage: python3 jax_loop.py [ITER]   (default 20)
"""
import json
import os
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax
import jax.numpy as jnp


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    if iters < 1:
        sys.exit("ITER must be at least 1")
    f = jax.jit(lambda a: jnp.tanh(a @ a).sum())
    a = jnp.ones((512, 512), dtype=jnp.float32) / 512
    total = 0.0
    for _ in range(iters):
        total += float(f(a).block_until_ready())
    print(json.dumps({"iterations": iters, "jax": jax.__version__, "devices": [str(d) for d in jax.devices()],
                      "total": total}))


if __name__ == "__main__":
    main()
