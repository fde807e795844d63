#!/usr/bin/env python3
"""What tracing adds to one operation, in ns (issue 35; method: the
project's measuring notes): a tight loop of one operation of
tests/bench/bench_app.cu (an empty-kernel launch, a 4-byte async copy, an
event record), pinned to one CPU, with cudatrace pinned to others; the
minimum of interleaved rounds per mode, so that a host that runs at
different speeds from minute to minute compares like with like.

For each mode it prints the ns per operation of every round, the minimum
and median, what the minimum adds over the untraced minimum, the probe hits
per operation (from cudatrace's exit line) and cudatrace's own estimate of
what it added per operation (the exit line's "added ≈"), and that estimate
against the measurement.

  sudo python3 scripts/bench-ops.py [--build DIR] [--ops launch,copy,event]
      [--modes untraced,floor,summary,default,json,every-layer] [--calls N]
      [--rounds R] [--cpu C] [--tracer-cpus LIST]

Without a GPU driver every call fails fast inside the runtime: the numbers
are then what the probes cost on a failing call, not on a GPU's.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODES = {
    "untraced": None,
    "floor": ["--empty-probes", "-o", "/dev/null"],
    "summary": ["--summary", "-o", "/dev/null"],
    "default": ["-o", "/dev/null"],
    "json": ["--json", "-o", "{tmp}/trace.jsonl"],
    "every-layer": ["--every-layer", "-o", "/dev/null"],
}


def die(msg):
    print(f"bench-ops: {msg}", file=sys.stderr)
    sys.exit(2)


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def measure(args, tmp, op, mode):
    app = ["taskset", "-c", str(args.cpu), args.app, op, str(args.calls)]
    if MODES[mode] is None:
        cmd = app
    else:
        opts = [o.format(tmp=tmp) for o in MODES[mode]]
        cmd = ["taskset", "-c", args.tracer_cpus, args.cudatrace, "-f", "launch,xfer,event,stream", *opts, "--"] + app
    rc, text = run(cmd)
    m = re.search(r"ns_per_call=([0-9.]+)", text)
    if rc != 0 or not m:
        die(f"{mode} {op}: exit {rc}, no result:\n{text[-2000:]}")
    hits = est = None
    h = re.search(r"added \u2248 ([0-9.]+) ms of CPU time to \S+ \(PID \d+\), [0-9.]+ % of its CPU time while traced "
                  r"\(([0-9,]+) probe hits\)", text)
    if h:
        est = float(h.group(1)) * 1e6 / args.calls
        hits = int(h.group(2).replace(",", "")) / args.calls
        # Sharing a CPU with cudatrace: what the program waited for it.
        w = re.search(r"also waited \u2248 ([0-9.]+) ms for the CPUs it shares with cudatrace", text)
        if w:
            est += float(w.group(1)) * 1e6 / args.calls
    return float(m.group(1)), hits, est


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--ops", default="launch,copy,event")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--calls", type=int, default=200000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cpu", type=int, default=2, help="the program's CPU")
    ap.add_argument("--tracer-cpus", default="8,9", help="cudatrace's CPUs")
    args = ap.parse_args()
    if os.geteuid() != 0:
        die("needs root (BPF)")
    args.cudatrace = os.environ.get("CUDATRACE") or next(
        (p for p in (os.path.join(args.build, n) for n in ("cudatrace", "cudatrace-static")) if os.access(p, os.X_OK)),
        None)
    args.app = os.environ.get("BENCH_APP") or os.path.join(args.build, "bench_app_static")
    if not args.cudatrace or not os.access(args.app, os.X_OK):
        die(f"no cudatrace or bench_app under {args.build} (set CUDATRACE, BENCH_APP)")
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            die(f"unknown mode {m} (modes: {', '.join(MODES)})")
    if "untraced" not in modes:
        modes.insert(0, "untraced")
    ncpu = os.cpu_count() or 1
    if args.cpu >= ncpu or any(int(c) >= ncpu for c in args.tracer_cpus.split(",")):
        die(f"this host has {ncpu} CPUs: choose --cpu and --tracer-cpus below that")
    print(f"# bench-ops: {os.uname().nodename}, kernel {os.uname().release}, {ncpu} CPUs; "
          f"{args.calls} operations a run, {args.rounds} interleaved rounds; program on CPU {args.cpu}, "
          f"cudatrace on {args.tracer_cpus}; {args.app}")
    with tempfile.TemporaryDirectory() as tmp:
        for op in args.ops.split(","):
            results = {m: [] for m in modes}
            for _ in range(args.rounds):
                for m in modes:
                    results[m].append(measure(args, tmp, op, m))
            base = min(r[0] for r in results["untraced"])
            print(f"\n### {op}\n")
            print("| mode | ns per operation, each round | min | median | added (min) | probe hits per op "
                  "| cudatrace's estimate per op | estimate / added |")
            print("| --- | --- | --- | --- | --- | --- | --- | --- |")
            for m in modes:
                ns = [r[0] for r in results[m]]
                lo, med = min(ns), statistics.median(ns)
                added = lo - base
                hits = [r[1] for r in results[m] if r[1] is not None]
                ests = [r[2] for r in results[m] if r[2] is not None]
                hit_s = f"{statistics.median(hits):.2f}" if hits else "–"
                est = statistics.median(ests) if ests else None
                est_s = f"{est:.0f}" if est is not None else "–"
                ratio_s = f"{est / added:.2f}" if est is not None and added > 0 else "–"
                print(f"| {m} | {', '.join(f'{x:.0f}' for x in ns)} | {lo:.0f} | {med:.0f} | "
                      f"{'–' if m == 'untraced' else f'{added:+.0f}'} | {hit_s} | {est_s} | {ratio_s} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
