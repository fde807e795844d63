#!/usr/bin/env python3
"""Checks --gpu-time (docs/gpu-time.md) against what the GPU measured: CUPTI
kernel activity records, taken by the PyTorch profiler in the traced process.

NOT YET RUN. Written for the H200 machine (issue 29 part 3) and never run
there: its first run may need fixing. It needs root (cudatrace), a CUDA
GPU and PyTorch with CUDA.

  sudo scripts/gpu/gpu_time_oracle.py --cudatrace build/cudatrace --out /tmp/oracle

What it does:
  1. runs WORKLOAD (below) under `cudatrace --json -o trace.jsonl`, the
     workload itself recording CUPTI kernel activity with torch.profiler;
  2. `cudatrace report --gpu-time --json` and `--perfetto` on that trace:
     the per-kernel estimates and every closed window with its bounds;
  3. matches windows to CUPTI kernels on the busiest stream in order (a
     window with k kernels holds the next k kernels of its stream) and checks
     that every window's true GPU time is inside its bounds, and how far each
     kernel estimate is from CUPTI's mean, in standard errors.
Exit status 0 when every bound held; 1 otherwise (the bounds are wrong: a bug).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
from collections import defaultdict

# Varying windows of matmuls on one stream: GPU-bound batches of different
# composition (so the estimator can separate the kernels), then host-bound
# windows (the host sleeps longer than the GPU works).
WORKLOAD = textwrap.dedent("""
    import sys, time, random, torch
    from torch.profiler import profile, ProfilerActivity
    random.seed(1)
    a = torch.randn(2048, 2048, device="cuda"); b = torch.randn(512, 512, device="cuda")
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(400):
            for _ in range(random.randint(0, 4)): a @ a
            for _ in range(random.randint(1, 6)): b @ b
            if i % 4 == 3: time.sleep(0.01)
            torch.cuda.synchronize()
    prof.export_chrome_trace(sys.argv[1])
""")


def run(cmd, **kw):
    print("+", " ".join(cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, **kw)


def cupti_kernels(path):
    """GPU activity per stream, in start order: (name, grid, block, dur_ns)."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    streams = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            args = e.get("args", {})
            streams[args.get("stream")].append((e["ts"], e["name"], args.get("grid"), args.get("block"),
                                                e["dur"] * 1000.0, e["cat"]))
    return {s: sorted(v) for s, v in streams.items()}


def windows_from_timeline(path):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    out = defaultdict(list)
    for e in events:
        if e.get("cat") == "gpu_estimate":
            out[e["args"]["stream"]].append((e["ts"], e["args"]))
    return {s: [a for _, a in sorted(v, key=lambda x: x[0])] for s, v in out.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cudatrace", default="build/cudatrace")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--out", default="/tmp/gpu_time_oracle")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    workload = os.path.join(args.out, "workload.py")
    with open(workload, "w") as f:
        f.write(WORKLOAD)
    trace, cupti = os.path.join(args.out, "trace.jsonl"), os.path.join(args.out, "cupti.json")
    timeline, summary = os.path.join(args.out, "timeline.json"), os.path.join(args.out, "summary.jsonl")
    run([args.cudatrace, "--json", "-o", trace, "--", args.python, workload, cupti])
    with open(summary, "w") as f:
        run([args.cudatrace, "report", "--gpu-time", "--json", "--perfetto", timeline, trace], stdout=f)
    gpu_time = next(json.loads(l) for l in open(summary) if '"type":"summary"' in l)["gpu_time"]

    truth = cupti_kernels(cupti)
    windows = windows_from_timeline(timeline)
    # One stream does the work: the busiest on each side.
    cupti_stream = max(truth, key=lambda s: len(truth[s]))
    traced_stream = max(windows, key=lambda s: len(windows[s]))
    work, inside, outside = truth[cupti_stream], 0, []
    # The profiler's own start-up work comes before the loop: skip CUPTI records
    # until the remaining count matches what the windows hold.
    held = sum(w["kernels"] + w["transfers"] for w in windows[traced_stream])
    position = max(0, len(work) - held)
    for w in windows[traced_stream]:
        n = w["kernels"] + w["transfers"]
        true_ns = sum(x[4] for x in work[position:position + n])
        position += n
        lower, upper = w["lower_bound_us"] * 1e3, w["upper_bound_us"] * 1e3
        if lower - 1 <= true_ns <= upper + 1:
            inside += 1
        else:
            outside.append({"true_ns": true_ns, "lower_ns": lower, "upper_ns": upper, "window": w})

    by_kernel = defaultdict(list)
    for _, name, grid, block, dur, cat in work:
        if cat == "kernel":
            by_kernel[(name, tuple(grid or ()), tuple(block or ()))].append(dur)
    comparisons = []
    for e in gpu_time["estimates"]:
        if not e.get("kernel") or not e["separable"]:
            continue
        key = (e["kernel"], tuple(e["grid"]), tuple(e["block"]))
        if key not in by_kernel:
            comparisons.append({"work": e["work"], "cupti": None})
            continue
        mean = statistics.fmean(by_kernel[key])
        comparisons.append({"work": e["work"], "estimate_ns": e["estimate_ns"], "stderr_ns": e["stderr_ns"],
                            "cupti_mean_ns": mean, "cupti_count": len(by_kernel[key]),
                            "error_in_stderrs": (e["estimate_ns"] - mean) / e["stderr_ns"] if e["stderr_ns"] else None})
    result = {"windows_checked": inside + len(outside), "bounds_held": inside, "bounds_failed": outside[:20],
              "estimates": comparisons, "shares": {k: gpu_time[k] for k in
                                                   ("thread_ns", "gpu_wait_ns", "transfer_wait_ns", "sync_ns", "host_ns")}}
    with open(os.path.join(args.out, "oracle.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))
    return 0 if not outside else 1


if __name__ == "__main__":
    sys.exit(main())
