#!/usr/bin/env python3
"""What whole-node mode misses right after a process loads a library file it
has never seen (docs/prometheus.md, "What can be missed").

No process is stopped in --all-processes mode: between the moment a process
maps a NEW CUDA library file and the moment cudatrace has attached probes to
it, its calls are not seen. This measures that window: each run copies the
fake runtime to a new file (a new inode: never probed before), and a fixture
dlopen()s it and calls cudaGetDevice every --us microseconds, N times, under
a name of its own. The calls cudatrace's /metrics does not count, times the
pacing, is the window. As root, from the repository:

  python3 scripts/bench-node-window.py --build build [--runs 20] [--us 20]
"""
import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request


def metric(port, name, comm):
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in body.splitlines():
        if line.startswith("cuda_api_calls_total{") and f'api="{name}"' in line and f'comm="{comm}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--us", type=int, default=20, help="microseconds between calls")
    ap.add_argument("--calls", type=int, default=5000)
    args = ap.parse_args()
    tracer = os.path.join(args.build, "cudatrace")
    app = os.path.join(args.build, "tests/fixtures/dlopen_app")
    lib = os.path.join(args.build, "tests/fixtures/fakecudart/libcudart.so.13")
    tmp = tempfile.mkdtemp(prefix="cudatrace-window-")
    # The fake runtime finds its driver at $ORIGIN/../fakecuda.
    os.symlink(os.path.abspath(os.path.join(os.path.dirname(lib), "..", "fakecuda")), os.path.join(tmp, "fakecuda"))
    os.mkdir(os.path.join(tmp, "lib"))
    proc = subprocess.Popen([tracer, "-f", "all", "--all-processes", "--prometheus", "127.0.0.1:0"],
                            stderr=subprocess.PIPE, text=True)
    try:
        port = None
        deadline = time.time() + 60
        while port is None and time.time() < deadline:
            line = proc.stderr.readline()
            m = re.search(r"serving Prometheus metrics on port (\d+)", line)
            if m:
                port = int(m.group(1))
        if port is None:
            sys.exit("bench-node-window: cudatrace did not start")
        windows = []
        for run in range(args.runs):
            copy = os.path.join(tmp, "lib", f"libcudart-{run}.so.13")
            shutil.copy(lib, copy)  # a new inode: a library file never probed
            comm = f"ctwin{os.getpid() % 1000}x{run}"
            link = os.path.join(tmp, comm)
            os.symlink(os.path.abspath(app), link)
            subprocess.run([link, "paced", str(args.calls), str(args.us), copy], check=True, stdout=subprocess.DEVNULL,
                           timeout=120)
            time.sleep(1.5)  # the exporter reads the kernel's counts every second
            seen = metric(port, "cudaGetDevice", comm)
            missed = args.calls - seen
            windows.append(missed * args.us / 1000.0)
            print(f"run {run}: {int(seen)}/{args.calls} calls counted, {int(missed)} missed: window ~{windows[-1]:.2f} ms",
                  flush=True)
        print(f"window after a new library file is mapped: median {statistics.median(windows):.2f} ms, "
              f"max {max(windows):.2f} ms over {len(windows)} runs ({args.us} us between calls)")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
