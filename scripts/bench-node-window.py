#!/usr/bin/env python3
"""What whole-node mode misses right after a process loads a library file
(docs/prometheus.md, "What can be missed").

No process is stopped in --all-processes mode: between the moment a process
maps a CUDA library file cudatrace has not probed yet and the moment it has
attached probes to it, its calls are not seen. Files found at start where
hosts keep CUDA libraries (and those --lib names) are probed ahead, before
any process maps them: no window. This measures both: each run copies the
fake runtime to a file of its own (a new inode), and a fixture dlopen()s it
and calls cudaGetDevice every --us microseconds, N times, under a name of
its own. "new": the copy is made while cudatrace runs (a file never seen);
"ahead": the copies are made before cudatrace starts, which is given them
with --lib. The calls cudatrace's /metrics does not count, times the
pacing, is the window. As root, from the repository:

  python3 scripts/bench-node-window.py --build build [--runs 20] [--us 20] [--files new,ahead]
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


# Loopback, never through a proxy the environment may name.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def metric(port, name, comm):
    body = OPENER.open(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in body.splitlines():
        if line.startswith("cuda_api_calls_total{") and f'api="{name}"' in line and f'comm="{comm}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def start_tracer(tracer, libs):
    """cudatrace --all-processes --prometheus on a free port; (process, port)."""
    argv = [tracer, "-f", "all", "--all-processes", "--prometheus", "127.0.0.1:0"]
    for lib in libs:
        argv += ["--lib", lib]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        m = re.search(r"serving Prometheus metrics on port (\d+)", line)
        if m:
            return proc, int(m.group(1))
    proc.kill()
    sys.exit("bench-node-window: cudatrace did not start")


def stop_tracer(proc):
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def measure(kind, args, tmp, app, lib):
    copies = [os.path.join(tmp, "lib", f"libcudart-{kind}-{run}.so.13") for run in range(args.runs)]
    if kind == "ahead":
        for copy in copies:
            shutil.copy(lib, copy)
    proc, port = start_tracer(os.path.join(args.build, "cudatrace"), copies if kind == "ahead" else [])
    windows = []
    try:
        for run, copy in enumerate(copies):
            if kind == "new":
                shutil.copy(lib, copy)  # a new inode: a library file never probed
            comm = f"ctwin{os.getpid() % 1000}{kind[0]}{run}"
            link = os.path.join(tmp, comm)
            os.symlink(os.path.abspath(app), link)
            subprocess.run([link, "paced", str(args.calls), str(args.us), copy], check=True, stdout=subprocess.DEVNULL,
                           timeout=120)
            time.sleep(1.5)  # the exporter reads the kernel's counts every second
            seen = metric(port, "cudaGetDevice", comm)
            missed = args.calls - seen
            windows.append(missed * args.us / 1000.0)
            print(f"{kind} run {run}: {int(seen)}/{args.calls} calls counted, {int(missed)} missed: "
                  f"window ~{windows[-1]:.2f} ms", flush=True)
    finally:
        stop_tracer(proc)
    what = "a new library file" if kind == "new" else "a file probed ahead"
    print(f"window after {what} is mapped: median {statistics.median(windows):.2f} ms, "
          f"max {max(windows):.2f} ms over {len(windows)} runs ({args.us} us between calls)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--us", type=int, default=20, help="microseconds between calls")
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--files", default="new,ahead", help="new, ahead or both (new,ahead)")
    args = ap.parse_args()
    kinds = args.files.split(",")
    if not kinds or any(k not in ("new", "ahead") for k in kinds):
        sys.exit(f"bench-node-window: --files takes new, ahead or new,ahead, not '{args.files}'")
    app = os.path.join(args.build, "tests/fixtures/dlopen_app")
    lib = os.path.join(args.build, "tests/fixtures/fakecudart/libcudart.so.13")
    tmp = tempfile.mkdtemp(prefix="cudatrace-window-")
    try:
        # The fake runtime finds its driver at $ORIGIN/../fakecuda.
        os.symlink(os.path.abspath(os.path.join(os.path.dirname(lib), "..", "fakecuda")), os.path.join(tmp, "fakecuda"))
        os.mkdir(os.path.join(tmp, "lib"))
        for kind in kinds:
            measure(kind, args, tmp, app, lib)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
