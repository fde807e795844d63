#!/usr/bin/env python3
"""Checks --gpu-time (docs/gpu-time.md) against what the GPU measured: CUPTI
kernel, copy and memset activity records, taken by the PyTorch profiler in
the traced process itself.

  sudo python3 scripts/gpu/gpu_time_oracle.py --cudatrace build/cudatrace-static \\
      --out /tmp/oracle [--workloads matmul,inference,mlp,decode,copy] [--steps N]

Per workload (below):
  1. the workload runs under `cudatrace --json -o trace.jsonl`; after a
     warm-up it runs its steps inside torch.profiler (CUPTI activity);
  2. `cudatrace report --gpu-time --json --perfetto` on that trace gives the
     per-kernel estimates and every closed window with its bounds;
  3. windows are matched to CUPTI's records of the busiest stream by order,
     from the end (the profiler records only the steps; a window of k kernels
     and t copies/memsets holds the k + t records before the next window's);
     a window whose records are not k kernels and t transfers is counted as
     misaligned and not judged;
  4. per window: the true GPU time (sum of its records' durations) must lie
     inside [lower, upper] (a bound that fails is a bug in the rules); the
     width of the bounds; the GPU's busy fraction (true time / upper bound,
     the window's span) against the window's class (gpu-bound should be busy,
     host-bound idle: agreement = class gpu <=> busy >= 50 %);
  5. per kernel shape: the estimate against CUPTI's mean duration (relative
     error and in standard errors).
Prints one JSON object per workload and a markdown table; exit status 0
when every judged window's bounds held and no workload failed to run.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
from collections import defaultdict

# Each workload defines setup() and step(i); the harness warms up, then runs
# the steps under the profiler. Every step ends in a synchronisation of the
# workload's own kind.
WORKLOADS = {
    # Varying windows of matmuls on one stream: GPU-bound batches of different
    # composition (the estimator can separate the kernels), then host-bound
    # windows (the host sleeps longer than the GPU works).
    "matmul": """
        import random, time
        def setup():
            global a, b
            random.seed(1)
            a = torch.randn(2048, 2048, device="cuda"); b = torch.randn(512, 512, device="cuda")
        def step(i):
            for _ in range(random.randint(0, 4)): a @ a
            for _ in range(random.randint(1, 6)): b @ b
            if i % 4 == 3: time.sleep(0.01)
            torch.cuda.synchronize()
    """,
    # Launch-bound: a 6-layer transformer encoder, batch 1, sequence 32.
    "inference": """
        def setup():
            global model, x
            layer = torch.nn.TransformerEncoderLayer(d_model=512, nhead=8, batch_first=True)
            model = torch.nn.TransformerEncoder(layer, num_layers=6).cuda().eval()
            x = torch.randn(1, 32, 512, device="cuda")
        def step(i):
            with torch.no_grad():
                model(x)
            torch.cuda.synchronize()
    """,
    # GPU-bound: an MLP training step in bf16 autocast; loss.item() waits.
    "mlp": """
        def setup():
            global model, opt, x
            model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                                        torch.nn.Linear(4096, 4096)).cuda()
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)
            x = torch.randn(8192, 4096, device="cuda")
        def step(i):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x).float().pow(2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss.item()
    """,
    # LLM decoding: Hugging Face GPT-2 from its config, fp16, greedy generate()
    # of 16 tokens with the KV cache (its own synchronisations).
    "decode": """
        import transformers
        transformers.logging.set_verbosity_error()
        def setup():
            global model, ids
            cfg = transformers.GPT2Config()
            model = transformers.GPT2LMHeadModel(cfg).cuda().half().eval()
            ids = torch.randint(0, cfg.vocab_size, (1, 16), device="cuda")
        def step(i):
            with torch.no_grad():
                model.generate(ids, max_new_tokens=16, min_new_tokens=16, do_sample=False,
                               pad_token_id=0, use_cache=True)
            torch.cuda.synchronize()
    """,
    # Copy-heavy: pinned and pageable copies both ways, a memset, a kernel.
    "copy": """
        def setup():
            global pinned, pageable, dev, small
            pinned = torch.empty(16 << 20, dtype=torch.uint8).pin_memory()
            pageable = torch.empty(4 << 20, dtype=torch.uint8)
            dev = torch.empty(16 << 20, dtype=torch.uint8, device="cuda")
            small = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
        def step(i):
            n = (1 + i % 4) << 22
            dev[:n].copy_(pinned[:n], non_blocking=True)
            dev.add_(1)
            pinned[:n].copy_(dev[:n], non_blocking=True)
            torch.cuda.synchronize()
            small.zero_()
            small.copy_(pageable[:1 << 20])
            pageable[:1 << 20].copy_(small)
    """,
}

HARNESS = """
import sys, torch
from torch.profiler import profile, ProfilerActivity
{body}
setup()
for i in range(5):
    step(i)
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for i in range(int(sys.argv[2])):
        step(i)
    torch.cuda.synchronize()
prof.export_chrome_trace(sys.argv[1])
"""

STEPS = {"matmul": 400, "inference": 300, "mlp": 60, "decode": 20, "copy": 300}


def run(cmd, **kw):
    print("+", " ".join(cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, **kw)


def cupti_work(path):
    """GPU activity per stream, in start order: (start_us, name, grid, block, dur_ns, cat)."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    streams = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            args = e.get("args", {})
            streams[args.get("stream")].append((e["ts"], e["name"], args.get("grid"), args.get("block"),
                                                e["dur"] * 1000.0, e["cat"]))
    return {s: sorted(v, key=lambda x: x[0]) for s, v in streams.items()}


def timeline_windows(path):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    out = defaultdict(list)
    for e in events:
        if e.get("cat") == "gpu_estimate":
            out[e["args"]["stream"]].append((e["ts"], e["args"]))
    return {s: [a for _, a in sorted(v, key=lambda x: x[0])] for s, v in out.items()}


def judge(name, truth, windows, gpu_time):
    """The checks of one workload (module docstring, steps 3-5)."""
    cupti_stream = max(truth, key=lambda s: len(truth[s]))
    traced_stream = max(windows, key=lambda s: len(windows[s]))
    work = truth[cupti_stream]
    end = len(work)
    judged, held, misaligned, failures = 0, 0, 0, []
    widths, classes = [], defaultdict(list)
    for w in reversed(windows[traced_stream]):
        n = w["kernels"] + w["transfers"]
        if w["host_functions"] or n > end:
            break  # before the profiled steps (or work CUPTI does not record)
        pieces = work[end - n:end]
        end -= n
        if sum(p[5] == "kernel" for p in pieces) != w["kernels"]:
            misaligned += 1
            continue
        judged += 1
        true_ns = sum(p[4] for p in pieces)
        lower, upper = w["lower_bound_us"] * 1e3, w["upper_bound_us"] * 1e3
        if lower - 1 <= true_ns <= upper + 1:
            held += 1
        else:
            failures.append({"true_ns": true_ns, "lower_ns": lower, "upper_ns": upper, "window": w})
        if upper > 0:
            widths.append((upper - lower) / upper)
            classes[w["bound"]].append(true_ns / upper)

    by_kernel = defaultdict(list)
    for _, kname, grid, block, dur, cat in work[end:]:
        if cat == "kernel":
            by_kernel[(kname, tuple(grid or ()), tuple(block or ()))].append(dur)
    estimates = []
    for e in gpu_time["estimates"]:
        if not e.get("kernel") or not e["separable"]:
            continue
        key = (e["kernel"], tuple(e["grid"]), tuple(e["block"]))
        if key not in by_kernel:
            estimates.append({"work": e["work"], "cupti": None})
            continue
        mean = statistics.fmean(by_kernel[key])
        estimates.append({"work": e["work"], "estimate_ns": e["estimate_ns"], "stderr_ns": e["stderr_ns"],
                          "cupti_mean_ns": mean, "cupti_count": len(by_kernel[key]),
                          "relative_error": (e["estimate_ns"] - mean) / mean if mean else None,
                          "error_in_stderrs": (e["estimate_ns"] - mean) / e["stderr_ns"] if e["stderr_ns"] else None})
    agree = sum(f >= 0.5 for f in classes["gpu"]) + sum(f < 0.5 for f in classes["host"])
    classified = len(classes["gpu"]) + len(classes["host"])
    compared = [e for e in estimates if e.get("relative_error") is not None]
    return {
        "workload": name, "cupti_records": len(work), "windows": len(windows[traced_stream]),
        "windows_judged": judged, "bounds_held": held, "misaligned": misaligned, "bounds_failed": failures[:10],
        "median_relative_width": statistics.median(widths) if widths else None,
        "gpu_bound": len(classes["gpu"]), "host_bound": len(classes["host"]),
        "median_busy_gpu_bound": statistics.median(classes["gpu"]) if classes["gpu"] else None,
        "median_busy_host_bound": statistics.median(classes["host"]) if classes["host"] else None,
        "class_agreement": agree / classified if classified else None,
        "estimates_compared": len(compared),
        "median_abs_relative_error": statistics.median(abs(e["relative_error"]) for e in compared) if compared else None,
        "within_2_stderr": sum(abs(e["error_in_stderrs"] or 0) <= 2 for e in compared),
        "estimates": estimates,
        "shares": {k: gpu_time[k] for k in ("thread_ns", "gpu_wait_ns", "transfer_wait_ns", "sync_ns", "host_ns")},
    }


def run_workload(args, name):
    out = os.path.join(args.out, name)
    os.makedirs(out, exist_ok=True)
    program = os.path.join(out, "workload.py")
    with open(program, "w") as f:
        f.write(HARNESS.format(body=textwrap.dedent(WORKLOADS[name])))
    trace, cupti = os.path.join(out, "trace.jsonl"), os.path.join(out, "cupti.json")
    timeline, summary = os.path.join(out, "timeline.json"), os.path.join(out, "summary.jsonl")
    steps = args.steps or STEPS[name]
    run([args.cudatrace, "--json", "-o", trace, "--", args.python, program, cupti, str(steps)], timeout=args.timeout)
    with open(summary, "w") as f:
        run([args.cudatrace, "report", "--gpu-time", "--json", "--perfetto", timeline, trace], stdout=f,
            timeout=args.timeout)
    gpu_time = next(json.loads(l) for l in open(summary) if '"type":"summary"' in l)["gpu_time"]
    result = judge(name, cupti_work(cupti), timeline_windows(timeline), gpu_time)
    with open(os.path.join(out, "oracle.json"), "w") as f:
        json.dump(result, f, indent=1)
    return result


def pct(x):
    return "-" if x is None else f"{100 * x:.0f} %"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cudatrace", default="build/cudatrace-static")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--out", default="/tmp/gpu_time_oracle")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--steps", type=int, default=0, help="steps per workload (default: per workload)")
    p.add_argument("--timeout", type=float, default=240, help="seconds per cudatrace run")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    results, ok = [], True
    for name in args.workloads.split(","):
        try:
            r = run_workload(args, name)
        except (subprocess.SubprocessError, OSError, ValueError, KeyError, StopIteration) as e:
            print(f"{name}: FAILED to run: {e!r}")
            ok = False
            continue
        print(json.dumps({k: v for k, v in r.items() if k != "estimates"}))
        ok &= not r["bounds_failed"] and r["windows_judged"] > 0
        results.append(r)
    print("\n| workload | windows judged (misaligned) | bounds held | median width (upper-lower)/upper "
          "| gpu-/host-bound | median busy: gpu-bound / host-bound | class agrees | kernel estimates: "
          "median abs error, within 2 SE |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(f"| {r['workload']} | {r['windows_judged']} ({r['misaligned']}) | {r['bounds_held']}/{r['windows_judged']} "
              f"| {pct(r['median_relative_width'])} | {r['gpu_bound']}/{r['host_bound']} "
              f"| {pct(r['median_busy_gpu_bound'])} / {pct(r['median_busy_host_bound'])} | {pct(r['class_agreement'])} "
              f"| {pct(r['median_abs_relative_error'])}, {r['within_2_stderr']}/{r['estimates_compared']} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
