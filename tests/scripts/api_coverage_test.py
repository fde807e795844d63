#!/usr/bin/env python3
"""Every function the toolkit's libcudart exports, every function cuda.h and
cuda_runtime_api.h declare, and every function the toolkit's stub libcuda
exports has a row in cudatrace's API table (issue 28), or is one of the few
exceptions below, each with its reason.

The functions are found here without the table's generator: by `nm -D` of
the libraries and by a plain reading of the preprocessed headers, so that a
generator that missed a declaration fails this test.

Usage: api_coverage_test.py CUDATRACE INCLUDE_DIR LIBCUDART [LIBCUDA_STUB]
"""
import fnmatch
import json
import os
import re
import subprocess
import sys

# Not in the table, and why. Patterns as fnmatch reads them.
EXCEPTIONS = {
    "__cudaLaunchKernel*": "a bare jump to cudaLaunchKernel (_ptsz), which is traced: a row of its own would "
                           "count each launch of nvcc's stubs twice",
}


def excepted(name):
    return any(fnmatch.fnmatchcase(name, p) for p in EXCEPTIONS)


def exported_functions(library):
    out = subprocess.run(["nm", "-D", "--defined-only", library], check=True, capture_output=True, text=True).stdout
    return {line.split()[2].split("@")[0] for line in out.splitlines()
            if len(line.split()) == 3 and line.split()[1] in "TtWi"}


def declared_functions(include_dir, header, status_type):
    """The functions `header` declares as a program sees them (its macros applied)."""
    text = subprocess.run(["cc", "-E", "-P", "-I", include_dir, "-x", "c", "-"], input=f"#include <{header}>\n",
                          check=True, capture_output=True, text=True).stdout
    flat = " ".join(text.split())
    return set(re.findall(r"(?:^|[;}])\s*(?:extern\s+)?(?:__attribute__\(\([^;]*?\)\)\s*)*" + status_type +
                          r"\s+(cu\w+)\s*\(", flat))


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    cudatrace, include_dir, libcudart = sys.argv[1:4]
    listing = subprocess.run([cudatrace, "-f", "all", "--nvtx", "--list-apis", "--json"], check=True,
                             capture_output=True, text=True).stdout
    rows = {json.loads(line)["api"] for line in listing.splitlines()}

    wanted = {
        "libcudart exports": exported_functions(libcudart),
        "cuda.h declarations": declared_functions(include_dir, "cuda.h", "CUresult"),
        "cuda_runtime_api.h declarations": declared_functions(include_dir, "cuda_runtime_api.h", "cudaError_t"),
    }
    if len(sys.argv) == 5 and os.path.exists(sys.argv[4]):
        wanted["the stub libcuda's exports"] = exported_functions(sys.argv[4])
    failed = False
    for what, names in wanted.items():
        if len(names) < 100:
            print(f"only {len(names)} functions found as {what}: the test cannot read them")
            failed = True
        missing = sorted(n for n in names if n not in rows and not excepted(n))
        for name in missing:
            print(f"{name} ({what}) has no row in the API table")
        failed |= bool(missing)
        print(f"{what}: {len(names)} functions, {len(names & rows)} with a row, "
              f"{sum(1 for n in names - rows if excepted(n))} excepted")
    unused = [p for p in EXCEPTIONS if not any(fnmatch.fnmatchcase(n, p) for s in wanted.values() for n in s - rows)]
    for p in unused:
        print(f"exception {p} matches nothing: remove it")
    if failed or unused:
        sys.exit(1)
    print(f"{len(rows)} APIs in the table")


if __name__ == "__main__":
    main()
