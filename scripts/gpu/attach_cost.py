#!/usr/bin/env python3
"""What probing every function costs at attach time (issue 28): cudatrace -p
on a running PyTorch process (CUDA initialised, cuBLAS loaded), with the
default selection and with -f all. Per run: seconds from cudatrace's start to
its "tracing process" line (probes attached), seconds to detach after SIGINT,
cudatrace's peak resident memory (VmHWM) and the probes attached (-v).
Runs are interleaved, ROUNDS rounds; medians and ranges printed as markdown.

  sudo python3 scripts/gpu/attach_cost.py --cudatrace build/cudatrace-static [--rounds 3]
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time

PROGRAM = """
import sys, time, torch
x = torch.randn(256, 256, device="cuda")
(x @ x).sum().item()
print("ready", flush=True)
while True:
    (x @ x).sum().item()
    time.sleep(0.01)
"""

MODES = {"default": [], "all": ["-f", "all"]}


def vm_hwm_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def one_run(cudatrace, pid, extra, timeout):
    start = time.monotonic()
    tracer = subprocess.Popen([cudatrace, "-v", *extra, "--summary", "-o", "/dev/null", "-p", str(pid)],
                              stderr=subprocess.PIPE)
    os.set_blocking(tracer.stderr.fileno(), False)
    err, ready, peak = "", None, 0
    while time.monotonic() - start < timeout and tracer.poll() is None:
        err += (tracer.stderr.read() or b"").decode(errors="replace")
        peak = max(peak, vm_hwm_kib(tracer.pid))
        if ready is None and "tracing process" in err:
            ready = time.monotonic() - start
            break
        time.sleep(0.02)
    if ready is None:
        tracer.kill()
        raise RuntimeError(f"cudatrace {' '.join(extra)} not ready in {timeout} s: {err[-500:]}")
    time.sleep(1.0)  # a second of tracing
    peak = max(peak, vm_hwm_kib(tracer.pid))
    stop = time.monotonic()
    tracer.send_signal(signal.SIGINT)
    os.set_blocking(tracer.stderr.fileno(), True)
    err += tracer.communicate(timeout=timeout)[1].decode(errors="replace")
    detach = time.monotonic() - stop
    if tracer.returncode != 0:
        raise RuntimeError(f"cudatrace {' '.join(extra)} exited {tracer.returncode}: {err[-500:]}")
    # -v: a line per probed file, "  libcuda.so.1: 88 probes, ..."
    probes = sum(int(n) for n in re.findall(r"^cudatrace:\s+\S+: (\d+) probes,", err, re.M))
    return ready, detach, peak, probes, err


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cudatrace", default="build/cudatrace-static")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=180)
    args = ap.parse_args()
    prog = subprocess.Popen([args.python, "-c", PROGRAM], stdout=subprocess.PIPE, text=True)
    try:
        if prog.stdout.readline().strip() != "ready":
            print("the PyTorch program did not start", file=sys.stderr)
            return 1
        results = {m: [] for m in MODES}
        for r in range(args.rounds):
            for m in (list(MODES) if r % 2 == 0 else list(reversed(MODES))):
                ready, detach, peak, probes, err = one_run(args.cudatrace, prog.pid, MODES[m], args.timeout)
                results[m].append((ready, detach, peak, probes))
                print(f"round {r} {m}: {probes} probes, ready {ready:.2f} s, detach {detach:.2f} s, "
                      f"peak RSS {peak / 1024:.1f} MiB", flush=True)
                if r == 0:
                    print("\n".join("  " + l for l in err.splitlines() if "probes" in l or "tracer used" in l))
        print("\n| selection | probes | attach (s): median [min-max] | detach (s) | cudatrace peak RSS (MiB) |")
        print("| --- | --- | --- | --- | --- |")
        for m, rows in results.items():
            col = lambda i, scale=1: (f"{statistics.median(x[i] for x in rows) / scale:.2f} "
                                      f"[{min(x[i] for x in rows) / scale:.2f}-{max(x[i] for x in rows) / scale:.2f}]")
            print(f"| {m} | {rows[0][3]} | {col(0)} | {col(1)} | {col(2, 1024)} |")
    finally:
        prog.kill()
        prog.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
