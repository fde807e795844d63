#!/usr/bin/env python3
"""What cudatrace costs real PyTorch work (issue 11): steps/s of three
workloads untraced, under cudatrace in several modes, and under a CUPTI
callback subscriber on every runtime and driver API (nsys's mechanism) as the
reference. Prints a markdown table for docs/benchmarks.md. Needs root, a GPU,
PyTorch, and cudatrace (default build/cudatrace-static).

Workloads (--workloads, comma-separated):
  inference  6-layer nn.TransformerEncoder (d_model 512, nhead 8, batch 1,
             seq 32) under no_grad: many small launches, launch-bound
  graph      the same forward pass captured once and replayed as a CUDA graph
  mlp        MLP training step: 2 x Linear(4096, 4096), batch 8192, bf16
             autocast, SGD: GPU-bound
  decode     Hugging Face GPT-2 (124M) built from its config (random weights,
             nothing downloaded), fp16, batch 1: one step is a greedy
             generate() of DECODE_TOKENS new tokens with the KV cache and no
             CUDA graph, the launch-bound regime of LLM decoding (issue 24);
             tokens/s = steps/s x DECODE_TOKENS

Modes (--modes, comma-separated; all by default):
  untraced   no tracer
  text       cudatrace -o /dev/null          (the default trace)
  json       cudatrace --json -o FILE
  summary    cudatrace --summary -o /dev/null
  all        cudatrace -f all -o /dev/null   (every API, both layers)
  cupti      a second workload process with libcupti_count.so injected
             (CUDA_INJECTION64_PATH; built by scripts/gpu/build.sh) with
             CUPTI_COUNT_CALLBACKS_ONLY=1: callbacks on every API, no activity
  budget1    cudatrace --summary --max-overhead 1 -o /dev/null (issue 13)
  node       cudatrace --all-processes --prometheus 127.0.0.1:0 (whole node,
             exporter; no -p: every CUDA process of the host is traced)
  node-budget1  the same with --max-overhead 1 (issue 13's always-on target)
  floor      cudatrace --empty-probes -o /dev/null: the default's probes,
             placed and attached alike, with BPF programs that do nothing
  floor-runtime, floor-driver  the same with --layer runtime / driver
  every-layer  cudatrace --every-layer -o /dev/null (each operation at both
             layers with its return: the default before issue 24)
  Not in the default list: budget1, node, node-budget1, the floors and
  every-layer. More modes:
  --add-mode 'NAME=ARGS' (repeatable; ARGS are cudatrace's, and -p PID is
  added unless they contain --all-processes), e.g.
  --add-mode 'budget5=--summary --max-overhead 5 -o /dev/null'.
  Budget modes (--max-overhead) measure over --budget-window seconds
  (default 6) that start --budget-settle seconds (default: --settle) after
  cudatrace is ready: the sampled windows come and go over seconds, and a
  window must span several of them to show the long-run cost; a settle of
  a few seconds leaves out the first look at full cost (what an always-on
  agent pays once, when a process starts).

Method, designed for little GPU time: one long-lived workload process per
workload (and one more with CUPTI injected) that measures steps/s over a
window when asked. cudatrace attaches to it with -p for one window and
detaches (SIGINT) after it, so no process start-up, import or warm-up is paid
per run. Modes are interleaved round-robin (the starting mode rotates each
round), --rounds rounds; a window starts --settle seconds after cudatrace says
it is tracing. The workloads run pinned to --cpus (taskset), cudatrace to
--tracer-cpus. The table gives the median steps/s with min-max per mode, the
loss against untraced in %; the median CPU time per step of the worker's main
thread (where a probe's trap is charged) and the loss it implies (steps per
CPU-second), and the steal time of the workload CPUs: a hypervisor taking the
CPUs away would slow the wall-clock rate but not the CPU time per step (on
the H200 host, whose rate swings by 2x between windows, there was no steal
and the two agree); the lost-record check from cudatrace's end line, and the
cost cudatrace estimated itself (its "added ... % of its CPU time" line, or
the budget's) next to the measured loss. Raw values per round follow.

The host's rate drifts over minutes and swings between windows, so the
table also gives a paired loss: each traced window against the mean of the
untraced windows just before and after it (a linear drift cancels), its
median over the windows and a bootstrap 95 % interval of that median.
--raw FILE appends every window to FILE as a JSON line as soon as it is
measured (a run cut short keeps what it measured); --from-raw FILE...
prints the tables of one or more such files, runs of the same modes pooled
(each window paired within its own run).

  scripts/bench-torch.py                       # everything, ~6 minutes
  scripts/bench-torch.py --workloads inference --rounds 9 --modes untraced,summary
  scripts/bench-torch.py --from-raw a.jsonl b.jsonl   # two runs' windows, one table
  scripts/bench-torch.py --fake LIBCUDART      # no GPU: checks the method on a
      # fake workload that calls LIBCUDART (tests/fixtures fake runtime) from Python
"""
import argparse
import json
import os
import random
import re
import select
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ["untraced", "text", "json", "summary", "all", "cupti"]
EXTRA_MODES = ["budget1", "node", "node-budget1", "floor", "floor-runtime", "floor-driver", "every-layer"]
WORKLOADS = ["inference", "graph", "mlp", "decode"]
DECODE_TOKENS = 16
# Window lengths (s): the GPU-bound and graph workloads are steady, so a
# shorter window keeps the whole run within about six minutes.
DEFAULT_WINDOW = {"inference": 1.5, "graph": 1.0, "mlp": 1.0, "decode": 3.0, "fake": 0.5}
TRACER_ARGS = {
    "text": ["-o", "/dev/null"],
    "json": ["--json", "-o", "{json}"],
    "summary": ["--summary", "-o", "/dev/null"],
    "all": ["-f", "all", "-o", "/dev/null"],
    "budget1": ["--summary", "--max-overhead", "1", "-o", "/dev/null"],
    "node": ["--all-processes", "--prometheus", "127.0.0.1:0"],
    "node-budget1": ["--all-processes", "--prometheus", "127.0.0.1:0", "--max-overhead", "1"],
    # The floor: the default's probes, placed and attached the same way, with
    # BPF programs that do nothing; per layer.
    "floor": ["--empty-probes", "-o", "/dev/null"],
    "floor-runtime": ["--empty-probes", "--layer", "runtime", "-o", "/dev/null"],
    "floor-driver": ["--empty-probes", "--layer", "driver", "-o", "/dev/null"],
    # The earlier default: every operation at both layers, with returns.
    "every-layer": ["--every-layer", "-o", "/dev/null"],
}
# The worker counts its steps in bins of this many seconds.
BIN_S = 0.1
# What cudatrace prints on standard error once it traces.
READY = re.compile(r"tracing process|tracing every process|serving Prometheus metrics")


def whole_node(mode):
    return "--all-processes" in TRACER_ARGS[mode]


def budget_mode(mode):
    return "--max-overhead" in TRACER_ARGS[mode]


def die(msg):
    print(f"bench-torch: {msg}", file=sys.stderr)
    sys.exit(2)


# ---- The workload process ---------------------------------------------------

def make_step(workload, fake_lib):
    """Returns (step, sync): one step of the workload, and a wait for the GPU."""
    if workload == "fake":
        import ctypes
        lib = ctypes.CDLL(fake_lib)
        dev = ctypes.c_int()

        def fake_step():
            # Shaped like the launch-bound model: mostly getters, a few "launches".
            for _ in range(30):
                lib.cudaGetDevice(ctypes.byref(dev))
            lib.cudaDeviceSynchronize()
        return fake_step, lambda: None

    import torch
    torch.backends.cuda.matmul.allow_tf32 = True
    if workload in ("inference", "graph"):
        layer = torch.nn.TransformerEncoderLayer(d_model=512, nhead=8, batch_first=True)
        model = torch.nn.TransformerEncoder(layer, num_layers=6).cuda().eval()
        x = torch.randn(1, 32, 512, device="cuda")
        if workload == "inference":
            def infer():
                with torch.no_grad():
                    model(x)
            return infer, torch.cuda.synchronize
        static_x = x.clone()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(stream):
            for _ in range(3):  # warm-up before capture, on a side stream
                model(static_x)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph):
            model(static_x)
        return graph.replay, torch.cuda.synchronize
    if workload == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                                    torch.nn.Linear(4096, 4096)).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(8192, 4096, device="cuda")
        y = torch.randn(8192, 4096, device="cuda")

        def train():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
        return train, torch.cuda.synchronize
    if workload == "decode":
        import transformers
        transformers.logging.set_verbosity_error()
        config = transformers.GPT2Config()  # GPT-2 small: 12 layers, d 768
        model = transformers.GPT2LMHeadModel(config).half().cuda().eval()
        prompt = torch.randint(0, config.vocab_size, (1, 8), device="cuda")
        mask = torch.ones_like(prompt)

        def decode():
            with torch.no_grad():
                model.generate(prompt, attention_mask=mask, max_new_tokens=DECODE_TOKENS,
                               min_new_tokens=DECODE_TOKENS, do_sample=False, use_cache=True,
                               pad_token_id=config.eos_token_id)
        return decode, torch.cuda.synchronize
    die(f"unknown workload {workload}")


def worker(workload, fake_lib):
    """Serves "measure WARM SECONDS" on stdin with "result STEPS ELAPSED CPU
    START BINS" (CPU: the main thread's CPU time, where probe traps are
    charged; START: CLOCK_MONOTONIC at the window's start; BINS: steps per
    BIN_S seconds)."""
    step, sync = make_step(workload, fake_lib)
    for _ in range(20):
        step()
    sync()
    print(f"ready {os.getpid()}", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        warm, seconds = float(words[1]), float(words[2])
        end = time.monotonic() + warm
        while time.monotonic() < end:
            step()
        sync()
        # A step ends when the GPU is done with it, as for inference that reads its result.
        steps, start, cpu_start = 0, time.monotonic(), time.thread_time()
        bins = [0] * max(1, int(seconds / BIN_S))
        while True:
            now = time.monotonic() - start
            if now >= seconds:
                break
            if now < len(bins) * BIN_S:
                bins[int(now / BIN_S)] += 1
            step()
            sync()
            steps += 1
        # Steps started per BIN_S bin, for a rate that a burst of the host's
        # noise moves less (the median of the bins) and for the rate while the
        # budget's hot probes were attached or not.
        print(f"result {steps} {time.monotonic() - start:.6f} {time.thread_time() - cpu_start:.6f} {start:.6f} "
              f"{','.join(map(str, bins))}", flush=True)


# ---- The controller -----------------------------------------------------------

class Sample:
    """One window: steps/s, the worker's main-thread CPU time per step (µs;
    not slowed by the hypervisor taking the CPU away, which the wall-clock
    rate is), the steal time of the workload CPUs over it (%), its steps per
    BIN_S bin, and under --max-overhead the share of cudatrace's run its hot
    probes were attached (%, from its end report). Of a traced window also
    cudatrace's CPU over it (cores); under --max-overhead the intervals the
    hot probes were attached in it (s from its start), the budget's own
    estimate of the cost over it and what it priced the attached time at (%),
    from CUDATRACE_BUDGET_LOG."""

    def __init__(self, rate, cpu_us, steal):
        self.rate, self.cpu_us, self.steal = rate, cpu_us, steal
        self.attached_pct = None
        self.t0, self.bins = 0.0, []
        self.tracer_cpu = self.hot = self.window_estimate = self.hot_priced = None
        # Set by the round loop: which window this was, and when it started;
        # `run` only by read_raw (which run of the --raw files it came from).
        self.mode, self.round, self.run, self.start_s = None, 0, 0, 0.0
        self.lost = self.estimate = self.attach_s = None

    FIELDS = ("mode", "round", "start_s", "rate", "cpu_us", "steal", "attached_pct", "lost", "estimate", "attach_s",
              "bins", "tracer_cpu", "hot", "window_estimate", "hot_priced")

    def to_json(self, workload):
        return json.dumps(dict({"workload": workload}, **{k: getattr(self, k) for k in self.FIELDS}))

    @classmethod
    def from_json(cls, d, run):
        sample = cls(d["rate"], d["cpu_us"], d["steal"])
        for k in cls.FIELDS:
            if k in d:
                setattr(sample, k, d[k])
        sample.run = run
        return sample


def cpu_list(spec):
    """A taskset CPU list ("2-5,8") as a set of CPU numbers."""
    cpus = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def cpu_times(cpus):
    """The summed /proc/stat times (user ... steal) of these CPUs, in ticks."""
    total = [0] * 8
    with open("/proc/stat") as f:
        for line in f:
            name, *fields = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                total = [t + int(v) for t, v in zip(total, fields[:8])]
    return total


class Workload:
    """A worker process and its line protocol."""

    def __init__(self, args, workload, env_extra=None, tracer=None, stderr=None):
        """tracer: cudatrace's command line up to its `--`, to trace the worker from its start."""
        env = dict(os.environ, **(env_extra or {}))
        cmd = ["taskset", "-c", args.cpus, sys.executable, os.path.abspath(__file__), "--worker", workload]
        if args.fake:
            cmd += ["--fake", args.fake]
        self.proc = subprocess.Popen((tracer or []) + cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=stderr, env=env, text=True)
        line = self.readline(args.start_timeout)
        if not line.startswith("ready "):
            self.close()
            die(f"{workload}: worker did not start (got {line!r})")
        self.pid = int(line.split()[1])
        self.cpus = cpu_list(args.cpus)

    def readline(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return ""
        return self.proc.stdout.readline().strip()

    def measure(self, warm, seconds):
        self.proc.stdin.write(f"measure {warm} {seconds}\n")
        self.proc.stdin.flush()
        before = cpu_times(self.cpus)
        line = self.readline(seconds + warm + 120)
        after = cpu_times(self.cpus)
        m = re.match(r"result (\d+) ([0-9.]+) ([0-9.]+) ([0-9.]+) ([0-9,]+)$", line)
        if not m:
            die(f"worker {self.pid}: no result (got {line!r})")
        steps = int(m.group(1))
        total = sum(a - b for a, b in zip(after, before))
        steal = 100 * (after[7] - before[7]) / total if total else 0.0
        sample = Sample(steps / float(m.group(2)), 1e6 * float(m.group(3)) / max(steps, 1), steal)
        sample.t0 = float(m.group(4))
        sample.bins = [int(b) for b in m.group(5).split(",")]
        return sample

    def close(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


def end_stats(mode, stderr_text, json_path):
    """(lost records, cudatrace's own cost estimate in % or None) from its end line."""
    if mode == "json":
        with open(json_path) as f:
            lines = [json.loads(l) for l in f if l.startswith('{"type":"end"')]
        if not lines:
            return None, None
        end = lines[-1]
        pct = [p.get("added_pct") + (p.get("waited_pct") or 0)
               for p in end.get("overhead", {}).get("processes", []) if p.get("added_pct") is not None]
        return end["lost"], max(pct) if pct else None
    m = re.search(r"cudatrace: (\d+) calls traced, (\d+) lost", stderr_text)
    est = re.findall(r"added \S+ ([0-9.]+) ms of CPU time to .*? \(PID (\d+)\), ([0-9.]+) % of its CPU time", stderr_text)
    # Sharing CPUs with cudatrace: what the process waited for it, by PID.
    waited = dict(re.findall(r"\(PID (\d+)\) also waited \S+ [0-9.]+ ms for the CPUs it shares with cudatrace, "
                             r"([0-9.]+) % of its CPU time", stderr_text))
    est = [(pid, float(p) + float(waited.get(pid, 0))) for _, pid, p in est]
    # --max-overhead: the budget's own estimate (safety factor included) wins.
    budget = re.search(r"--max-overhead \S+ %: estimated cost ([0-9.]+) %", stderr_text)
    estimate = float(budget.group(1)) if budget else (max(p for _, p in est) if est else None)
    return (int(m.group(2)) if m else None), estimate


def traced_window(args, work, mode, window, tmpdir):
    """Attaches cudatrace to the worker, measures one window, detaches."""
    json_path = os.path.join(tmpdir, "trace.json")
    tracer_args = [a.replace("{json}", json_path) for a in TRACER_ARGS[mode]]
    cmd = ["taskset", "-c", args.tracer_cpus, args.cudatrace] + tracer_args
    if not whole_node(mode):
        cmd += ["-p", str(work.pid)]
    err_path = os.path.join(tmpdir, "stderr")
    log_path = os.path.join(tmpdir, "budget.log")
    env = dict(os.environ, CUDATRACE_BUDGET_LOG=log_path) if budget_mode(mode) else None
    with open(err_path, "w") as err:
        tracer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
    attach_start = time.monotonic()
    while True:  # "cudatrace: tracing process PID (N probes); Ctrl-C to stop"
        with open(err_path) as f:
            if READY.search(f.read()):
                break
        if tracer.poll() is not None or time.monotonic() - attach_start > args.start_timeout:
            tracer.kill()
            with open(err_path) as f:
                die(f"{mode}: cudatrace did not attach: {' '.join(cmd)}\n{f.read()[-2000:]}")
        time.sleep(0.02)
    attach_s = time.monotonic() - attach_start
    if whole_node(mode):
        time.sleep(args.node_settle)  # its probes reach the worker when it scans /proc
    cpu_before = process_cpu_s(tracer.pid)
    if budget_mode(mode):
        sample = work.measure(args.budget_settle, args.budget_window)
    else:
        sample = work.measure(args.settle, window)
    cpu_after = process_cpu_s(tracer.pid)
    if cpu_before is not None and cpu_after is not None:
        # Its CPU over the worker's warm-up and window, in cores.
        sample.tracer_cpu = round((cpu_after - cpu_before) / (time.monotonic() - sample.t0 + warm_s(args, mode)), 4)
    tracer.send_signal(signal.SIGINT)
    try:
        tracer.wait(timeout=120)
    except subprocess.TimeoutExpired:
        tracer.kill()
        die(f"{mode}: cudatrace did not stop after SIGINT")
    with open(err_path) as f:
        text = f.read()
    lost, estimate = end_stats(mode, text, json_path)
    sampled = re.search(r"traced in sampled windows, ([0-9.]+) % of the time", text)
    if sampled:
        sample.attached_pct = float(sampled.group(1))
    if tracer.returncode not in (0, 130):
        die(f"{mode}: cudatrace exited with status {tracer.returncode}:\n{text[-2000:]}")
    if budget_mode(mode):
        sample.hot, sample.window_estimate, sample.hot_priced = budget_in_window(log_path, sample)
    if lost is None and not whole_node(mode):  # the exporter counts losses in a metric
        die(f"{mode}: no end line from cudatrace:\n{text[-2000:]}")
    return sample, lost, estimate, attach_s


def warm_s(args, mode):
    return args.budget_settle if budget_mode(mode) else args.settle


def process_cpu_s(pid):
    """A process's user + system CPU time in seconds (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def budget_in_window(log_path, sample):
    """From a CUDATRACE_BUDGET_LOG: the intervals (s from the window's start,
    clipped to it) the hot probes were attached, the budget's estimate of the
    cost over the window (%: each controller window's priced cost for its
    overlap with the measured one, plus the switches that started in it), and
    the cost it priced its attached windows at (%, mean over their overlap)."""
    start_ns, rows = None, []
    try:
        with open(log_path) as f:
            for line in f:
                m = re.match(r"# start_monotonic_ns (\d+)", line)
                if m:
                    start_ns = int(m.group(1))
                elif not line.startswith("#"):
                    rows.append([float(x) for x in line.split()])
    except OSError:
        return None, None, None
    if start_ns is None or not rows:
        return None, None, None
    length = len(sample.bins) * BIN_S
    lo, hi = sample.t0, sample.t0 + length
    hot, added, hot_added, hot_s = [], 0.0, 0.0, 0.0
    for t_s, attached, length_ms, cost_pct, switch_cpu_ms, attach_ms, *_ in rows:
        end = start_ns / 1e9 + t_s
        begin = end - length_ms / 1e3
        added += cost_pct / 100 * max(0.0, min(end, hi) - max(begin, lo))
        if lo <= begin < hi:
            added += switch_cpu_ms / 1e3
        if attached:
            a, b = max(begin + attach_ms / 1e3, lo), min(end, hi)
            if b > a:
                hot.append([round(a - lo, 4), round(b - lo, 4)])
                hot_added += cost_pct * (b - a)
                hot_s += b - a
    return hot, round(100 * added / length, 3), round(hot_added / hot_s, 3) if hot_s else None


def bench_workload(args, workload, tmpdir, raw):
    """Measures every mode's windows, round-robin; returns them in the order measured."""
    window = args.window or DEFAULT_WINDOW[workload]
    modes = args.modes
    plain = Workload(args, workload)
    cupti = None
    if "cupti" in modes:
        cupti = Workload(args, workload, {"CUDA_INJECTION64_PATH": args.cupti, "CUPTI_COUNT_CALLBACKS_ONLY": "1",
                                          "CUPTI_COUNT_OUT": os.path.join(tmpdir, "cupti.json")})
    # --from-start: one worker per traced mode, under cudatrace from its start
    # (a command, not -p), measured in turn as the others are.
    started_traced = {}
    if args.from_start:
        for mode in modes:
            if mode in ("untraced", "cupti") or whole_node(mode) or budget_mode(mode):
                continue
            mode_dir = os.path.join(tmpdir, mode)
            os.makedirs(mode_dir, exist_ok=True)
            tracer_args = [a.replace("{json}", os.path.join(mode_dir, "trace.json")) for a in TRACER_ARGS[mode]]
            err = open(os.path.join(mode_dir, "stderr"), "w")
            started_traced[mode] = (Workload(args, workload, tracer=["taskset", "-c", args.tracer_cpus,
                                                                     args.cudatrace] + tracer_args + ["--"],
                                             stderr=err), err, mode_dir)
    samples = []
    try:
        start = time.monotonic()
        for r in range(args.rounds):
            elapsed = time.monotonic() - start
            if args.max_seconds and r and elapsed / r * (r + 1) > args.max_seconds:
                print(f"bench-torch: {workload}: stopped after {r} rounds (--max-seconds {args.max_seconds:g})",
                      file=sys.stderr)
                break
            order = modes[r % len(modes):] + modes[:r % len(modes)]
            for mode in order:
                started = time.monotonic() - start
                if mode == "untraced":
                    sample = plain.measure(args.settle, window)
                elif mode == "cupti":
                    sample = cupti.measure(args.settle, window)
                elif mode in started_traced:
                    sample = started_traced[mode][0].measure(args.settle, window)
                    sample.lost = sample.estimate = sample.attach_s = None
                else:
                    sample, sample.lost, sample.estimate, sample.attach_s = traced_window(
                        args, plain, mode, window, tmpdir)
                sample.mode, sample.round, sample.start_s = mode, r + 1, round(started, 3)
                samples.append(sample)
                if raw:
                    raw.write(sample.to_json(workload) + "\n")
                    raw.flush()
            elapsed = time.monotonic() - start
            print(f"bench-torch: {workload}: round {r + 1}/{args.rounds} done, about "
                  f"{elapsed / (r + 1) * (args.rounds - r - 1):.0f} s left for this workload", file=sys.stderr)
    finally:
        plain.close()
        if cupti:
            cupti.close()
        for mode, (work, err, mode_dir) in started_traced.items():
            work.close()  # the worker exits, and cudatrace with it: its end line covers every window
            err.close()
            with open(os.path.join(mode_dir, "stderr")) as f:
                text = f.read()
            lost, estimate = end_stats(mode, text, os.path.join(mode_dir, "trace.json"))
            print(f"bench-torch: {workload}: {mode} traced from the start: {lost} records lost in all, "
                  f"cudatrace's estimate {estimate} %; its last lines:\n" + "\n".join(text.splitlines()[-3:]),
                  file=sys.stderr)
            for sample in samples:
                if sample.mode == mode:
                    sample.lost, sample.estimate = lost, estimate
    return samples


def fmt_rate(v):
    return f"{v:,.1f}" if v < 100 else f"{v:,.0f}"


def paired_losses(samples, mode, rate=lambda s: s.rate):
    """Each window of `mode` against the mean rate of the untraced windows
    measured just before and after it in the same run (the one there is at
    either end): its loss in %. `rate` gives a window's rate, None to leave
    it out."""
    losses = []
    for run in sorted({s.run for s in samples}):
        timeline = sorted((s for s in samples if s.run == run and rate(s) is not None), key=lambda s: s.start_s)
        for i, s in enumerate(timeline):
            if s.mode != mode:
                continue
            before = next((u for u in reversed(timeline[:i]) if u.mode == "untraced"), None)
            after = next((u for u in timeline[i + 1:] if u.mode == "untraced"), None)
            refs = [rate(u) for u in (before, after) if u]
            if refs:
                losses.append(100 * (1 - rate(s) / statistics.mean(refs)))
    return losses


# The H200 host runs the same loop in two states, ~850 and ~450-550 steps/s,
# switching every few seconds (the 0.1 s bins of its windows fall in two
# clusters). A window's rate mostly says how long it spent in the slow state;
# the rate of its fast-state bins (at least FAST_SHARE of the untraced bins'
# 90th percentile in its run) is what a tracer's cost of ~1 % moves.
FAST_SHARE = 0.8
MIN_FAST_BINS = 20


def fast_state(samples):
    """Per window (by id): its fast-state bins, each as (rate, the share of
    the bin the hot probes were attached); windows with fewer than
    MIN_FAST_BINS fast bins are left out."""
    out = {}
    for run in {s.run for s in samples}:
        untraced = sorted(b / BIN_S for s in samples if s.run == run and s.mode == "untraced"
                          for b in s.bins)
        if not untraced:
            continue
        threshold = FAST_SHARE * untraced[int(0.9 * (len(untraced) - 1))]
        for s in samples:
            if s.run != run or not s.bins:
                continue
            fast = []
            for i, b in enumerate(s.bins):
                r = b / BIN_S
                if r >= threshold:
                    lo, hi = i * BIN_S, (i + 1) * BIN_S
                    attached = sum(max(0.0, min(hi, z) - max(lo, a)) for a, z in (s.hot or [])) / BIN_S
                    fast.append((r, attached if attached > 1e-6 else 0.0))
            if len(fast) >= MIN_FAST_BINS:
                out[id(s)] = fast
    return out


def attached_slowdown(windows, fast):
    """How much slower the worker ran while the hot probes were attached,
    from bins of the same windows (the host's drift between windows cancels):
    the least-squares c of rate = m * (1 - c * attached share), m being the
    window's mean over its bins with nothing attached. None without such bins."""
    num = den = 0.0
    for s in windows:
        bins = fast.get(id(s), [])
        base = [r for r, a in bins if a == 0]
        if len(base) < MIN_FAST_BINS // 2:
            continue
        m = statistics.mean(base)
        num += sum(a * (1 - r / m) for r, a in bins)
        den += sum(a * a for _, a in bins)
    return num / den if den else None


def print_fast_state(samples):
    """The fast-state table: the paired loss of the fast bins' rate, and for
    budget modes the share of the time the hot probes were attached, the
    slowdown measured while they were and what the budget priced it at, the
    budget's own estimate over the windows, and cudatrace's CPU."""
    if not any(s.bins for s in samples):
        return
    fast = fast_state(samples)
    modes = [m for m in dict.fromkeys(s.mode for s in samples) if m != "untraced"]
    print(f"\nFast-state bins ({BIN_S:g} s bins at ≥ {FAST_SHARE:.0%} of the run's untraced 90th percentile; "
          f"windows with ≥ {MIN_FAST_BINS} of them):\n")
    print("| mode | windows | fast share of bins | paired fast-state loss, median (95 % CI) | mean | "
          "hot probes attached (share of the time) | slowdown while attached: measured, priced | "
          "budget's estimate over the windows (median) | cudatrace CPU (cores, median) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    mean_fast = lambda s: statistics.mean(r for r, _ in fast[id(s)]) if id(s) in fast else None
    for mode in modes:
        windows = [s for s in samples if s.mode == mode]
        bins = sum(len(s.bins) for s in windows)
        fast_bins = [b for s in windows for b in fast.get(id(s), [])]
        losses = paired_losses(samples, mode, mean_fast)
        loss_s = fmt_median_interval(losses)
        mean_s = f"{statistics.mean(losses):+.2f} %" if losses else "–"
        hot_windows = [s for s in windows if s.hot is not None]
        share = (sum(b - a for s in hot_windows for a, b in s.hot) / sum(len(s.bins) * BIN_S for s in hot_windows)
                 if hot_windows else None)
        slowdown = attached_slowdown(windows, fast)
        priced = [s.hot_priced for s in windows if s.hot_priced is not None]
        slow_s = ((f"{100 * slowdown:.1f} %" if slowdown is not None else "–") + ", "
                  + (f"{statistics.median(priced):.1f} %" if priced else "–"))
        est = [s.window_estimate for s in windows if s.window_estimate is not None]
        cpu = [s.tracer_cpu for s in windows if s.tracer_cpu is not None]
        print(f"| {mode} | {len(losses)} | {len(fast_bins) / bins if bins else 0:.0%} | {loss_s} | {mean_s} | "
              f"{f'{share:.2%}' if share is not None else '–'} | {slow_s if hot_windows else '–'} | "
              f"{f'{statistics.median(est):.2f} %' if est else '–'} | {f'{statistics.median(cpu):.4f}' if cpu else '–'} |")


def median_interval(values, resamples=4000, seed=1):
    """A bootstrap 95 % interval of the median (percentile method, fixed seed)."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def fmt_median_interval(losses):
    """"+1.23 % (-0.45 to +2.34)": the median loss and its interval; "–" for none."""
    if not losses:
        return "–"
    lo, hi = median_interval(losses)
    return f"{statistics.median(losses):+.2f} % ({lo:+.2f} to {hi:+.2f})"


def print_table(workload, samples, title):
    """The table: steps/s (what the user sees) and, beside it, the main
    thread's CPU time per step, which the host's noise (steal) leaves alone;
    the paired loss, which a drift of the host's speed leaves alone."""
    results = {}
    for s in samples:
        results.setdefault(s.mode, []).append(s)

    def medians(mode):
        runs = results[mode]
        return statistics.median(r.rate for r in runs), statistics.median(r.cpu_us for r in runs)

    base_rate, base_cpu = medians("untraced") if results.get("untraced") else (None, None)
    print(f"\n### {workload}\n\n{title}\n")
    print("| mode | windows | steps/s median | min–max | loss vs untraced | paired loss, median (95 % CI) "
          "| CPU µs/step median | loss by CPU/step | steal % median | lost records | cudatrace's own estimate |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for mode, runs in results.items():
        rate, cpu = medians(mode)
        rates = [r.rate for r in runs]
        traced = base_rate and mode != "untraced"
        loss = f"{100 * (base_rate - rate) / base_rate:+.1f} %" if traced else "–"
        paired_s = fmt_median_interval(paired_losses(samples, mode) if traced else [])
        # As a throughput loss: steps per CPU-second, against untraced.
        cpu_loss = f"{100 * (1 - base_cpu / cpu):+.1f} %" if traced else "–"
        steal = statistics.median(r.steal for r in runs)
        lost = [r.lost for r in runs if r.lost is not None]
        lost_s = "–" if not lost else ("0" if not any(lost) else ", ".join(str(x) for x in lost))
        estimates = [r.estimate for r in runs if r.estimate is not None]
        est = f"{statistics.median(estimates):.1f} %" if estimates else "–"
        print(f"| {mode} | {len(runs)} | {fmt_rate(rate)} | {fmt_rate(min(rates))}–{fmt_rate(max(rates))} | {loss} | "
              f"{paired_s} | {cpu:,.0f} | {cpu_loss} | {steal:.1f} | {lost_s} | {est} |")
    extra = [m for m in results if m in TRACER_ARGS and (m in EXTRA_MODES or m not in MODES)]
    if extra:
        print("\n" + "; ".join(f"{m}: `cudatrace {shlex.join(TRACER_ARGS[m])}`" for m in extra) + ".")
    print("\nRaw per window, in order measured (steps/s / CPU µs per step / steal %):\n")
    for mode, runs in results.items():
        print(f"- {mode}: {', '.join(f'{fmt_rate(r.rate)}/{r.cpu_us:.0f}/{r.steal:.1f}' for r in runs)}")
    for mode, runs in results.items():
        shares = [r.attached_pct for r in runs if r.attached_pct is not None]
        if shares:
            print(f"\n{mode}: hot probes attached {statistics.median(shares):.1f} % of the time (median; "
                  f"{min(shares):.1f}–{max(shares):.1f} %).")
    attach = [r.attach_s for r in samples if r.attach_s is not None]
    if attach:
        print(f"\ncudatrace attach time: median {statistics.median(attach):.2f} s "
              f"({min(attach):.2f}–{max(attach):.2f} s).")
    print_fast_state(samples)


def read_raw(paths):
    """The windows of --raw files by workload, each header line starting a
    run of its own (a file may hold several appended runs); and the headers
    of the runs that measured something."""
    by_workload, headers, run = {}, [], -1
    for path in paths:
        try:
            with open(path) as f:
                for n, line in enumerate(f, 1):
                    try:
                        d = json.loads(line)
                        if "host" in d:
                            run += 1
                            headers.append(d)
                            TRACER_ARGS.update(d.get("tracer_args", {}))
                        else:
                            by_workload.setdefault(d["workload"], []).append(Sample.from_json(d, run))
                    except (ValueError, KeyError, TypeError) as e:
                        die(f"{path}:{n}: not a line of --raw ({e})")
        except OSError as e:
            die(f"{path}: {e.strerror}")
    measured = {s.run for samples in by_workload.values() for s in samples}
    return by_workload, [h for i, h in enumerate(headers) if i in measured]


def host_line():
    gpu = "no GPU"
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip() or gpu
    except (OSError, subprocess.TimeoutExpired):
        pass
    return f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.uname().nodename}, {gpu}, {os.cpu_count()} CPUs"


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated (default: all three)")
    ap.add_argument("--modes", default=",".join(MODES),
                    help=f"comma-separated (default: {','.join(MODES)}; also {','.join(EXTRA_MODES)})")
    ap.add_argument("--add-mode", action="append", default=[], metavar="NAME=ARGS",
                    help="another mode: cudatrace with ARGS (shell words); appended to --modes")
    ap.add_argument("--budget-window", type=float, default=6,
                    help="seconds per measurement of a --max-overhead mode (default 6)")
    ap.add_argument("--budget-settle", type=float, default=None,
                    help="seconds between attach and window in a --max-overhead mode (default: --settle)")
    ap.add_argument("--node-settle", type=float, default=1.0,
                    help="extra seconds before measuring an --all-processes mode (default 1)")
    ap.add_argument("--rounds", type=int, default=9, help="interleaved rounds (default 9)")
    ap.add_argument("--window", type=float, default=0, help="seconds per measurement (default: per workload)")
    ap.add_argument("--settle", type=float, default=0.3, help="seconds between attach and window (default 0.3)")
    ap.add_argument("--cudatrace", default=os.path.join(ROOT, "build", "cudatrace-static"))
    ap.add_argument("--cupti", default="/tmp/gpucheck/libcupti_count.so",
                    help="CUPTI injection library (scripts/gpu/build.sh)")
    ap.add_argument("--cpus", default="2-5", help="CPUs of the workloads (taskset list, default 2-5)")
    ap.add_argument("--tracer-cpus", default="8-9", help="CPUs of cudatrace (default 8-9)")
    ap.add_argument("--start-timeout", type=float, default=120, help="seconds to wait for a start or attach")
    ap.add_argument("--fake", metavar="LIBCUDART", help="no GPU: a Python loop over this (fake) runtime")
    ap.add_argument("--max-seconds", type=float, default=0,
                    help="start no round that would end after this many seconds of a workload's run")
    ap.add_argument("--raw", metavar="FILE", help="append every window to FILE as a JSON line when measured")
    ap.add_argument("--from-raw", nargs="+", metavar="FILE", help="no measuring: the tables of --raw files")
    ap.add_argument("--from-start", action="store_true",
                    help="trace each mode's own worker from its start (cudatrace -- worker) instead of attaching "
                         "to the untraced worker with -p for each window")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.workloads = ["fake"] if args.fake and not args.worker else args.workloads.split(",")
    args.modes = args.modes.split(",")
    if args.budget_settle is None:
        args.budget_settle = args.settle
    for spec in args.add_mode:
        name, sep, words = spec.partition("=")
        if not sep or not name or name in MODES + EXTRA_MODES:
            ap.error(f"--add-mode {spec!r}: give NAME=ARGS with a new NAME")
        TRACER_ARGS[name] = shlex.split(words)
        args.modes.append(name)
    for m in args.modes:
        if m not in MODES + EXTRA_MODES + [s.partition("=")[0] for s in args.add_mode]:
            ap.error(f"unknown mode {m} (modes: {', '.join(MODES + EXTRA_MODES)})")
    for w in args.workloads:
        if w not in WORKLOADS + ["fake"]:
            ap.error(f"unknown workload {w} (workloads: {', '.join(WORKLOADS)})")
    if args.fake and "cupti" in args.modes:
        args.modes.remove("cupti")  # no CUPTI without a GPU
    if "untraced" not in args.modes:
        args.modes.insert(0, "untraced")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    return args


def main(argv):
    args = parse_args(argv)
    if args.worker:
        worker(args.worker, args.fake)
        return
    if args.from_raw:
        by_workload, headers = read_raw(args.from_raw)
        if not by_workload:
            die("no windows in " + ", ".join(args.from_raw))
        print("## PyTorch workloads under cudatrace\n")
        for h in headers:
            print(f"- {h['host']}: {h['settings']}")
        for workload, samples in by_workload.items():
            runs = len({s.run for s in samples})
            print_table(workload, samples, f"{runs} run{'s' if runs > 1 else ''} pooled, each window paired "
                        "within its own run.")
        return
    if os.geteuid() != 0:
        die("needs root (cudatrace attaches BPF programs)")
    if not os.access(args.cudatrace, os.X_OK):
        die(f"no cudatrace at {args.cudatrace} (--cudatrace)")
    if "cupti" in args.modes and not os.path.exists(args.cupti):
        die(f"no CUPTI library at {args.cupti}: build it with scripts/gpu/build.sh, or leave out mode cupti")
    usage = subprocess.run([args.cudatrace, "--help"], capture_output=True, text=True).stdout
    for mode in args.modes:
        for flag in (a for a in TRACER_ARGS.get(mode, []) if a.startswith("--")):
            if flag not in usage:
                die(f"mode {mode}: this cudatrace has no {flag} (--help)")
    settings = (f"{args.rounds} interleaved rounds"
                + (f" at most, in {args.max_seconds:g} s at most" if args.max_seconds else "") + f"; workloads on CPUs {args.cpus}, cudatrace on {args.tracer_cpus}; "
                f"windows start {args.settle} s after attach"
                + (f", {args.budget_settle} s in --max-overhead modes" if args.budget_settle != args.settle else ""))
    host = host_line()
    raw = None
    if args.raw:
        try:
            raw = open(args.raw, "a")
        except OSError as e:
            die(f"--raw {args.raw}: {e.strerror}")
        raw.write(json.dumps({"host": host, "settings": settings,
                              "tracer_args": {m: TRACER_ARGS[m] for m in args.modes if m in TRACER_ARGS}}) + "\n")
        raw.flush()
    print(f"## PyTorch workloads under cudatrace\n\n{host}; {settings}.")
    with tempfile.TemporaryDirectory(prefix="bench-torch.") as tmpdir:
        for workload in args.workloads:
            samples = bench_workload(args, workload, tmpdir, raw)
            print_table(workload, samples, f"{max(s.round for s in samples)} rounds.")


if __name__ == "__main__":
    main(sys.argv[1:])
