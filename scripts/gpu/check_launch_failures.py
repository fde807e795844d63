#!/usr/bin/env python3
"""Checks a cudatrace trace of scripts/gpu/launch_failures.cu (issue 35).

  check_launch_failures.py TRACE.jsonl STDERR PROGRAM_STDOUT MODE

TRACE.jsonl  cudatrace --json of the run (default selection, or --errors)
STDERR       cudatrace's standard error of that run
PROGRAM_STDOUT  the program's JSON line: what each launch returned
MODE         wrong-arch | bad-config | errors (a --errors trace of bad-config)

Every launch the program made is in the trace, in order, as cudaLaunchKernel
with the status the program got (failed ones too); the failed ones are told
on stderr, each cause once; the synchronisation waited for the launches that
ran and no other. Exit 0 when all holds, 1 otherwise.
"""
import json
import sys


def main():
    trace, err_path, out_path, mode = sys.argv[1:5]
    program = None
    for line in open(out_path):
        line = line.strip()
        if line.startswith("{"):
            program = json.loads(line)
    if program is None:
        print("no JSON line from the program")
        return 1
    statuses = program["statuses"]["cudaLaunchKernel"]
    records = [json.loads(l) for l in open(trace) if l.strip()]
    calls = [r for r in records if r.get("type") == "call" and r.get("depth", 0) == 0]
    launches = [c for c in calls if c["api"] in ("cudaLaunchKernel", "cudaLaunchKernel_ptsz")]
    ok = True

    def check(cond, what):
        nonlocal ok
        print(("ok: " if cond else "FAILED: ") + what)
        ok &= bool(cond)

    expected = statuses if mode != "errors" else [s for s in statuses if s != 0]
    got = [c.get("ret") for c in launches]
    check(got == expected, f"launches with their statuses: cudatrace {got}, the program {expected}")
    check(all("dur_ns" in c for c in calls), "every call has its latency")
    failed_kinds = sorted({s for s in statuses if s != 0})
    err = open(err_path).read()
    told = [l for l in err.splitlines() if "warning: cudaLaunchKernel" in l and " failed with " in l]
    check(len(told) == len(failed_kinds), f"{len(told)} warnings for {len(failed_kinds)} causes")
    for line in told:
        print("  " + line)
    warnings = [r for r in records if r.get("type") == "warning" and r.get("kind") == "failed_launch"]
    check(len(warnings) == len(failed_kinds), f"{len(warnings)} failed_launch JSON lines")
    if mode == "wrong-arch":
        check(any("NoKernelImageForDevice" in l and "sm_80" in l for l in told),
              "the warning says the program holds sm_80 code only")
    if mode != "errors":
        syncs = [c for c in calls if c["api"] == "cudaDeviceSynchronize"]
        ran = sum(1 for s in statuses if s == 0)
        if syncs:
            work = syncs[-1].get("waited_for", {}).get("work", [])
            waited = sum(w.get("launches", 0) for w in work)
            check(waited == ran, f"the synchronisation waited for {waited} launches; {ran} ran")
        else:
            check(False, "no cudaDeviceSynchronize in the trace")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
