#!/usr/bin/env python3
"""Checks `cudatrace --nvtx` range attribution against nvtx_check.py on a GPU.

Usage: check_nvtx.py TRACE_JSONL PROGRAM_STDOUT

TRACE_JSONL is `cudatrace --nvtx --json` output of nvtx_check.py, whose
stdout (PROGRAM_STDOUT) says how many kernels it launched inside each range.
A launch is an outermost call (depth 0) of a launch API; its range is the
"nvtx" stack of its record, innermost last. Passes when at least 99 % of the
launches the program made inside ranges are attributed to their innermost
range (and its enclosing ones), and at most 1 % of in-range launches land in
a range where the program made none. Prints the counts; exits 1 otherwise.
"""
import json
import re
import sys

LAUNCH = re.compile(r"^(cudaLaunchKernel|cudaLaunchKernelExC|cudaLaunchCooperativeKernel|cuLaunchKernel|"
                    r"cuLaunchKernelEx|cuLaunchCooperativeKernel)(_ptsz)?$")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    program = None
    with open(sys.argv[2]) as f:
        for line in f:
            if line.startswith("{"):
                program = json.loads(line)
    if program is None:
        sys.exit("check_nvtx.py: no JSON line from the program")
    expect = program["expect"]
    patterns = [[re.compile(p) for p in e["path"]] for e in expect]
    observed = [0] * len(expect)
    unexpected = {}
    in_range = outside = 0
    lost = None
    with open(sys.argv[1]) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("type") == "end":
                lost = rec.get("lost")
            if rec.get("type") != "call" or rec.get("depth") != 0 or not LAUNCH.match(rec.get("api", "")):
                continue
            stack = rec.get("nvtx", [])
            if not stack:
                outside += 1
                continue
            in_range += 1
            for i, pats in enumerate(patterns):
                if len(pats) == len(stack) and all(p.fullmatch(s) for p, s in zip(pats, stack)):
                    observed[i] += 1
                    break
            else:
                key = " / ".join(stack)
                unexpected[key] = unexpected.get(key, 0) + 1

    print(f"torch {program.get('torch')}, {program.get('steps')} steps; "
          f"NVTX_INJECTION64_PATH={program.get('nvtx_injection')}")
    print(f"launches: {in_range} inside ranges, {outside} outside; records lost: {lost}")
    ok = True
    made = right = 0
    for e, n in zip(expect, observed):
        made += e["launches"]
        right += min(n, e["launches"])
        mark = "ok" if n == e["launches"] else "DIFFERS"
        print(f"  {' / '.join(e['path']):40} program {e['launches']:6}  cudatrace {n:6}  {mark}")
    wrong = sum(unexpected.values())
    for key, n in sorted(unexpected.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  unexpected range: {key[:100]}: {n} launches")
    share = right / made if made else 0.0
    print(f"attributed to the innermost range: {right} of {made} ({100 * share:.2f} %); "
          f"in ranges where the program launched nothing: {wrong}")
    if share < 0.99:
        print("FAILED: fewer than 99 % of the launches inside ranges are attributed to their innermost range")
        ok = False
    if in_range and wrong > 0.01 * in_range:
        print("FAILED: more than 1 % of the in-range launches are in ranges where the program made none")
        ok = False
    if not program.get("nvtx_injection"):
        print("FAILED: the program ran without NVTX_INJECTION64_PATH")
        ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
