#!/usr/bin/env python3
"""The measurements behind docs/fleet.md (issue 13, part 4): for each workload,
the calls per second of every API, the bytes per call of a JSON Lines trace
(raw, zstd -3, zstd -19), cudatrace's own CPU time per second in each mode,
and, where cudatrace has --prometheus, the series one scrape returns. Writes
one JSON file that scripts/fleet-cost.py turns into the tables. Needs root.

Workloads (--workloads, comma-separated):
  GPU (PyTorch, scripts/bench-torch.py's workers):
    inference  launch-bound TransformerEncoder forward passes
    graph      the same as a CUDA graph replay
    mlp        MLP training step (bf16 autocast, SGD)
    nccl       2 ranks: the MLP step plus an all_reduce of its gradients
               (skipped with fewer than 2 GPUs)
  No GPU (the build VM):
    fixture    tests/fixtures budget_app: a launch-bound loop over the fake
               runtime (--fixture-dir, default build/tests/fixtures)
    libcudart  real_app_shared launch-loop: the toolkit's real libcudart,
               each call failing without a driver

Per workload, each a fresh cudatrace attached with -p for --window seconds
(every rank of nccl gets its own):
  rates     -f all --summary --json: calls/s per API (the tables say which
            are traced by default)
  json      --json -o FILE (default selection): bytes per call, compressed
            with the zstd command at -3 and -19 (its first 32 MiB; null
            where zstd is missing)
  summary   --summary -o /dev/null: CPU only
  exporter  --all-processes --prometheus 127.0.0.1:0, if this cudatrace has
            it: CPU, and the series and bytes of one scrape of /metrics
cudatrace's CPU is its user + system time over the window (wait4 rusage),
divided by the window: cores used.

  sudo scripts/fleet-measure.py --out /tmp/fleet.json                   # GPU host
  sudo scripts/fleet-measure.py --workloads fixture,libcudart --label "build VM" --out docs/fleet-build-vm.json
"""
import argparse
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPU_WORKLOADS = ["inference", "graph", "mlp", "nccl"]
VM_WORKLOADS = ["fixture", "libcudart"]
READY = re.compile(r"tracing process|tracing every process|serving Prometheus metrics on port (\d+)")


def die(msg):
    print(f"fleet-measure: {msg}", file=sys.stderr)
    sys.exit(2)


def note(msg):
    print(f"fleet-measure: {msg}", file=sys.stderr, flush=True)


def load_bench_torch():
    spec = importlib.util.spec_from_file_location("bench_torch", os.path.join(ROOT, "scripts", "bench-torch.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---- Workloads: processes that run until closed --------------------------------

class CommandWorkload:
    """A program that runs long enough; closed by SIGKILL."""

    def __init__(self, cmd):
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.pids = [self.proc.pid]
        time.sleep(0.5)  # past its start-up
        if self.proc.poll() is not None:
            die(f"{' '.join(cmd)} exited with status {self.proc.returncode}")

    def during(self, seconds):
        time.sleep(seconds)
        return None  # no step count

    def close(self):
        self.proc.kill()
        self.proc.wait()


class TorchWorkload:
    """bench-torch.py's worker: steps/s over a window when asked."""

    def __init__(self, bench, args, name):
        ns = argparse.Namespace(cpus=args.cpus, fake=None, start_timeout=args.start_timeout)
        self.work = bench.Workload(ns, name)
        self.pids = [self.work.pid]

    def during(self, seconds):
        return self.work.measure(0.0, seconds)

    def close(self):
        self.work.close()


NCCL_RANK = r"""
import os, sys, time, torch, torch.distributed as dist
rank, port, seconds = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
torch.cuda.set_device(rank)
dist.init_process_group("nccl", rank=rank, world_size=2)
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(8192, 4096, device="cuda"); y = torch.randn(8192, 4096, device="cuda")
def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    opt.step()
for _ in range(5): step()
torch.cuda.synchronize()
print(f"ready {os.getpid()}", flush=True)
end = time.monotonic() + seconds
steps = 0
while time.monotonic() < end:
    step(); steps += 1
torch.cuda.synchronize()
print(f"steps {steps}", flush=True)
dist.destroy_process_group()
"""


class NcclWorkload:
    """Two ranks of a data-parallel MLP step; they run for a fixed time."""

    def __init__(self, args, run_for):
        port = str(29500 + os.getpid() % 1000)
        self.procs = [subprocess.Popen([sys.executable, "-c", NCCL_RANK, str(r), port, str(run_for)],
                                       stdout=subprocess.PIPE, text=True) for r in range(2)]
        self.pids = []
        for p in self.procs:
            line = p.stdout.readline().strip()
            if not line.startswith("ready "):
                self.close()
                die(f"nccl rank did not start (got {line!r})")
            self.pids.append(int(line.split()[1]))

    def during(self, seconds):
        time.sleep(seconds)
        return None

    def close(self):
        for p in self.procs:
            try:
                p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


# ---- cudatrace runs -------------------------------------------------------------

def traced(args, work, tracer_args, tmpdir, tag, per_pid=True):
    """Starts cudatrace (one per pid, or one for the node), keeps the workload
    busy for the window, stops it. Returns (steps/s, its CPU s, the seconds
    from tracing to stopping it, one scrape of its /metrics or None)."""
    runs = []
    targets = [["-p", str(pid)] for pid in work.pids] if per_pid else [[]]
    for i, target in enumerate(targets):
        err = os.path.join(tmpdir, f"{tag}.{i}.err")
        with open(err, "w") as f:
            proc = subprocess.Popen([args.cudatrace] + tracer_args + target, stdout=subprocess.DEVNULL, stderr=f)
        runs.append((proc, err))
    port = None
    deadline = time.monotonic() + args.start_timeout
    for proc, err in runs:
        while True:
            with open(err) as f:
                m = READY.search(f.read())
            if m:
                port = m.group(1) or port
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                with open(err) as f:
                    die(f"{tag}: cudatrace did not start: {f.read()[-1500:]}")
            time.sleep(0.02)
    if not per_pid:
        time.sleep(args.node_settle)
    scrape = None
    traced_from = time.monotonic()
    rate = work.during(args.window)
    if port:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            scrape = r.read().decode()
    cpu = 0.0
    traced_s = time.monotonic() - traced_from
    for proc, err in runs:
        proc.send_signal(signal.SIGINT)
        _, status, usage = os.wait4(proc.pid, 0)
        cpu += usage.ru_utime + usage.ru_stime
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) not in (0, 130):
            with open(err) as f:
                die(f"{tag}: cudatrace ended with status {status}: {f.read()[-1500:]}")
    return rate, cpu, traced_s, scrape


# zstd -19 takes minutes on a trace of hundreds of MB: the first 32 MiB (whole
# lines) are compressed, and the trace is counted at their ratio.
SAMPLE_BYTES = 32 << 20


def zstd_sizes(path):
    """Compressed sizes of the trace at -3 and -19 (None without zstd)."""
    if not shutil.which("zstd"):
        return None, None
    with open(path, "rb") as f:
        sample = f.read(SAMPLE_BYTES)
    if len(sample) == SAMPLE_BYTES:
        sample = sample[:sample.rfind(b"\n") + 1]
    scale = os.path.getsize(path) / max(1, len(sample))
    sizes = []
    for level in (3, 19):
        out = subprocess.run(["zstd", f"-{level}", "-T1", "-c"], input=sample, capture_output=True, check=True).stdout
        sizes.append(round(len(out) * scale))
    return sizes


def series_of(scrape):
    """Series (sample lines) of one exposition, cudatrace's own and in all."""
    lines = [l for l in scrape.splitlines() if l and not l.startswith("#")]
    cuda = [l for l in lines if l.startswith(("cuda_", "cudatrace_"))]
    return {"all": len(lines), "cuda": len(cuda), "bytes": len(scrape.encode())}


def measure(args, name, make_work, tmpdir, has_exporter):
    result = {"window_s": args.window}
    note(f"{name}: rates")
    work = make_work()
    try:
        summary_path = os.path.join(tmpdir, f"{name}.summary.json")
        rate, cpu, traced_s, _ = traced(args, work, ["-f", "all", "--summary", "--json", "-o", summary_path], tmpdir,
                                        f"{name}-rates")
        calls = {}
        with open(summary_path) as f:
            for line in f:
                rec = json.loads(line)
                if rec.get("type") == "summary" and rec.get("final"):
                    for api in rec.get("apis", []):
                        calls[api["name"]] = calls.get(api["name"], 0) + api["calls"]
        result["processes"] = len(work.pids)
        # Over the time traced (the workload is busy for the window within
        # it); per GPU process: the ranks of nccl are averaged.
        result["traced_s"] = traced_s
        result["calls_per_s"] = {k: v / traced_s / len(work.pids) for k, v in sorted(calls.items())}
        result["steps_per_s"] = rate
        result["cpu_cores"] = {"summary_all_apis": cpu / args.window}

        note(f"{name}: json")
        trace_path = os.path.join(tmpdir, f"{name}.jsonl")
        _, cpu, _, _ = traced(args, work, ["--json", "-o", trace_path], tmpdir, f"{name}-json")
        n_calls = 0
        with open(trace_path) as f:
            for line in f:
                n_calls += line.startswith('{"type":"call"')
        size = os.path.getsize(trace_path)
        zstd3, zstd19 = zstd_sizes(trace_path)
        result["json"] = {"calls": n_calls, "bytes": size, "zstd3_bytes": zstd3, "zstd19_bytes": zstd19,
                          "compressed_sample_bytes": min(size, SAMPLE_BYTES)}
        os.remove(trace_path)
        result["cpu_cores"]["json"] = cpu / args.window

        note(f"{name}: summary")
        _, cpu, _, _ = traced(args, work, ["--summary", "-o", "/dev/null"], tmpdir, f"{name}-summary")
        result["cpu_cores"]["summary"] = cpu / args.window

        if has_exporter:
            note(f"{name}: exporter")
            _, cpu, _, scrape = traced(args, work, ["--all-processes", "--prometheus", "127.0.0.1:0"], tmpdir,
                                       f"{name}-exporter", per_pid=False)
            result["cpu_cores"]["exporter"] = cpu / args.window
            if scrape:
                result["exporter_scrape"] = series_of(scrape)
    finally:
        work.close()
    return result


def host_info():
    gpu = None
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20).stdout.strip().splitlines() or None
    except (OSError, subprocess.TimeoutExpired):
        pass
    return {"node": os.uname().nodename, "kernel": os.uname().release, "cpus": os.cpu_count(), "gpus": gpu,
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default=",".join(GPU_WORKLOADS))
    ap.add_argument("--label", default="H200", help="what fleet-cost.py calls these rows (default H200)")
    ap.add_argument("--out", required=True, help="the JSON file to write")
    default_bin = os.path.join(ROOT, ".devtmp", "cudatrace-static")
    if not os.path.exists(default_bin):
        default_bin = os.path.join(ROOT, "build", "cudatrace-static")
    ap.add_argument("--cudatrace", default=os.environ.get("CUDATRACE", default_bin))
    ap.add_argument("--window", type=float, default=8, help="seconds per traced window (default 8)")
    ap.add_argument("--node-settle", type=float, default=1.0, help="seconds for --all-processes to find the workload")
    ap.add_argument("--cpus", default="2-5", help="CPUs of the PyTorch workloads (taskset list)")
    ap.add_argument("--start-timeout", type=float, default=120)
    ap.add_argument("--fixture-dir", default=os.path.join(ROOT, "build", "tests", "fixtures"))
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        die("needs root (cudatrace attaches BPF programs)")
    if not os.access(args.cudatrace, os.X_OK):
        die(f"no cudatrace at {args.cudatrace} (--cudatrace or CUDATRACE)")
    usage = subprocess.run([args.cudatrace, "--help"], capture_output=True, text=True).stdout
    has_exporter = "--prometheus" in usage and "--all-processes" in usage
    workloads = args.workloads.split(",")
    for w in workloads:
        if w not in GPU_WORKLOADS + VM_WORKLOADS:
            ap.error(f"unknown workload {w}")
    out = {"label": args.label, "host": host_info(), "cudatrace": args.cudatrace, "exporter": has_exporter,
           "workloads": {}}
    # Which API is in which group (fleet-cost.py: the default selection).
    listing = subprocess.run([args.cudatrace, "-f", "all", "--list-apis", "--json"], capture_output=True, text=True)
    out["groups"] = {}
    for line in listing.stdout.splitlines():  # one JSON object per API
        api = json.loads(line)
        out["groups"][api["api"]] = api["group"]
    bench = None
    total = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fleet-measure.") as tmpdir:
        for w in workloads:
            start = time.monotonic()
            if w == "fixture":
                make = lambda: CommandWorkload([os.path.join(args.fixture_dir, "budget_app"), "600000", "10"])
            elif w == "libcudart":
                make = lambda: CommandWorkload([os.path.join(args.fixture_dir, "real_app_shared"), "launch-loop",
                                                "1000000000"])
            elif w == "nccl":
                gpus = len(out["host"]["gpus"] or [])
                if gpus < 2:
                    note(f"nccl: skipped ({gpus} GPU)")
                    continue
                runs = 4 if has_exporter else 3
                make = lambda: NcclWorkload(args, runs * (args.window + 3) + 30)
            else:
                bench = bench or load_bench_torch()
                make = lambda w=w: TorchWorkload(bench, args, w)
            out["workloads"][w] = measure(args, w, make, tmpdir, has_exporter)
            note(f"{w}: {time.monotonic() - start:.0f} s")
    out["elapsed_s"] = round(time.monotonic() - total, 1)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    note(f"wrote {args.out} in {out['elapsed_s']} s")


if __name__ == "__main__":
    main(sys.argv[1:])
