#!/usr/bin/env python3
"""cudatrace benchmarks (issue 5); results go to docs/benchmarks.md by hand.

  a. per-call overhead of a cheap CUDA call (cudaGetDevice) and of an empty
     kernel launch: untraced / floor (empty BPF programs on the same symbols) /
     cudatrace / cudatrace --summary / bpftrace / a naive two-records design,
     interleaved repetitions, medians, each added cost as a ratio to the floor's
     (workload "nested": a runtime launch that makes a driver launch, on the
     fake libraries of tests/fixtures: entry/return pairs against uprobe
     sessions that leave the nested call's return unprobed); also the floor
     and cudatrace with perf-event uprobes (--attach perf, the fallback for
     kernels before 6.6), as ratios to the uprobe_multi floor
  b. throughput: 1, 4 and 16 threads calling as fast as they can
  c. time to load the BPF object and attach every probe of libcudart + libcuda,
     with uprobe_multi links and with perf-event uprobes (--attach perf)
  d. tracer peak RSS and CPU time
  e. --py-stack (docs/python.md): added ns per recorded call of a Python loop
     calling cudaGetDevice through ctypes (the fake libcudart of
     tests/fixtures) at Python stack depths 5, 20 and 50, with --py-stack
     and with the default trace, and their ratio: the loop pinned to CPU 0
     and cudatrace to CPU 1, the minimum of interleaved runs; with
     kernel.bpf_stats_enabled=1 also the BPF programs' run time per call
  g. work per record (issue 46), on the fake runtime's launch loop (each
     cudaLaunchKernel nests a cuLaunchKernel), app on CPU 0 and cudatrace on
     CPU 1, per mode (--empty-probes, default, --summary, --prometheus, --json,
     -f all, --otlp beside the trace):
     the BPF programs' run time per run (kernel.bpf_stats_enabled=1), and
     cudatrace's own CPU time per record (-v; a 1-call run's start-up time
     subtracted), the minimum of the runs (scripts/bench.py --only g)
  f. OpenTelemetry context (docs/correlation.md): what reading each call's
     span adds per call, on the fake runtime's launch loop (tests/fixtures/
     otel_app.c, the variable in a TLS-descriptor library linked at start):
     with a published span, with the variable but no span published (null
     pointer), and --no-otel. Measured as the BPF programs' own run time
     (kernel.bpf_stats_enabled), which a VM's noisy trap cost does
     not blur. Needs only the build's fixtures (scripts/bench.py --only f).

Runs against the toolkit's real runtime (without a GPU driver every call fails
fast, but the probes fire on the real code) or on a GPU host. Needs root.

  scripts/bench.py [--build DIR] [--calls N] [--reps R] [--only a,b,c,d,e,f,g]
  scripts/bench.py --guard RATIO   # CI: short (a) on cudaGetDevice; exit 1 if
                                   # cudatrace's added cost > RATIO x the floor's
"""
import argparse
import ctypes
import json
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# cudaGetDevice is in the query group, off by default: select every group so
# the micro-benchmarks keep probing it.
CT_ALL = ["-f", "all"]


def die(msg):
    print(f"bench: {msg}", file=sys.stderr)
    sys.exit(2)


class Tools:
    def __init__(self, build, need_all=True):
        self.build = build

        def find(*names):
            for n in names:
                p = os.path.join(build, n)
                if os.access(p, os.X_OK):
                    return p
            return None
        self.cudatrace = os.environ.get("CUDATRACE") or find("cudatrace", "cudatrace-static")
        self.probe_bench = os.environ.get("PROBE_BENCH") or find("probe_bench", "probe_bench-static")
        self.app = os.environ.get("BENCH_APP") or find("bench_app_static")
        self.bpftrace = shutil.which("bpftrace")
        if not self.cudatrace or need_all and not (self.probe_bench and self.app):
            die(f"cudatrace, probe_bench and bench_app_static must be built in {build}")
        self.libcudart, self.libcuda = find_cuda_libraries()


def find_cuda_libraries():
    """The runtime of the toolkit and the driver library (the toolkit's stub without a driver)."""
    cudart = None
    for d in ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"):
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if re.fullmatch(r"libcudart\.so\.\d+", name):
                cudart = os.path.join(d, name)
    cuda = None
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
        m = re.search(r"libcuda\.so\.1 .*=> (\S+)", out)
        cuda = m.group(1) if m else None
    except OSError:
        pass
    if not cuda and os.path.exists("/usr/local/cuda/lib64/stubs/libcuda.so"):
        cuda = "/usr/local/cuda/lib64/stubs/libcuda.so"
    return cudart, cuda


def wait_keeper_gone(limit_s=600):
    """Seconds until no ct-uprobes process is left: it keeps the perf-event
    uprobes of earlier --attach perf runs (src/record/uprobe_keeper.cpp), and
    until it has destroyed them they still trap on the same symbols."""
    start = time.monotonic()
    while subprocess.run(["pgrep", "-x", "ct-uprobes"], capture_output=True).returncode == 0:
        if time.monotonic() - start > limit_s:
            die(f"ct-uprobes still holds perf-event uprobes after {limit_s} s")
        time.sleep(0.1)
    return time.monotonic() - start


def run(cmd, env=None):
    """Runs cmd once no earlier run's perf-event uprobes are left; returns
    (stdout+stderr, rusage of the process)."""
    wait_keeper_gone()
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode(errors="replace")
    return text, usage


def field(text, name, cast=float):
    m = re.search(rf"{name}=([0-9.]+)", text)
    return cast(m.group(1)) if m else None


def traced_counts(text):
    """(calls traced, lost) from cudatrace's end line on stderr."""
    m = re.search(r"cudatrace: (\d+) calls traced, (\d+) lost", text)
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


BPFTRACE_SCRIPT = """
uprobe:{bin}:{sym} {{ @start[tid] = nsecs; @arg0[tid] = arg0; }}
uretprobe:{bin}:{sym} /@start[tid]/ {{
  printf("%d %d %s {sym} %d %d 0x%lx\\n", pid, tid, comm, nsecs - @start[tid], retval, @arg0[tid]);
  delete(@start[tid]); delete(@arg0[tid]);
}}
"""


def overhead_configs(t, workload):
    app = [t.app] + workload
    sym = "cudaGetDevice" if workload[0] == "getdevice" else "cudaLaunchKernel"
    # The reference programs go on the same files cudatrace probes: the workload
    # (static runtime) and the driver it loads (its cuLaunchKernel is traced too).
    libs = ["--lib", t.app] + (["--lib", t.libcuda] if t.libcuda else [])
    configs = {
        "untraced": app,
        "floor": [t.probe_bench, "floor"] + libs + ["--"] + app,
        "cudatrace": [t.cudatrace, *CT_ALL, "-o", "/dev/null", "--"] + app,
        "cudatrace --summary": [t.cudatrace, *CT_ALL, "--summary", "-o", "/dev/null", "--"] + app,
        "naive": [t.probe_bench, "naive"] + libs + ["--"] + app,
        # The fallback for kernels without uprobe_multi (before 6.6).
        "floor (perf-event uprobes)": [t.probe_bench, "floor-perf"] + libs + ["--"] + app,
        "cudatrace --attach perf": [t.cudatrace, *CT_ALL, "--attach", "perf", "-o", "/dev/null", "--"] + app,
    }
    if t.bpftrace:
        configs["bpftrace"] = [t.bpftrace, "-q", "-o", "/dev/null", "-e",
                               BPFTRACE_SCRIPT.format(bin=t.app, sym=sym), "-c", " ".join(app)]
    return configs


def nested_configs(t, calls):
    """A runtime launch nesting a driver launch (fake libraries): pairs vs sessions."""
    fixtures = os.path.join(t.build, "tests", "fixtures")
    app = [os.path.join(fixtures, "fake_app"), "launch-loop", str(calls)]
    libs = ["--lib", os.path.join(fixtures, "fakecudart", "libcudart.so.13"),
            "--lib", os.path.join(fixtures, "fakecuda", "libcuda.so.1")]
    return {
        "untraced": app,
        "floor": [t.probe_bench, "floor"] + libs + ["--"] + app,
        "floor-session (keeps returns)": [t.probe_bench, "floor-session"] + libs + ["--"] + app,
        "floor-session-entry (no returns)": [t.probe_bench, "floor-session-entry"] + libs + ["--"] + app,
        "cudatrace (pairs)": ["env", "CUDATRACE_NO_UPROBE_SESSIONS=1", t.cudatrace, "-o", "/dev/null", "--"] + app,
        "cudatrace --every-layer": [t.cudatrace, "--every-layer", "-o", "/dev/null", "--"] + app,
        "cudatrace": [t.cudatrace, "-o", "/dev/null", "--"] + app,
    }


def bench_overhead(t, workload, reps, only=None):
    configs = nested_configs(t, int(workload[1])) if workload[0] == "nested" else overhead_configs(t, workload)
    if only:
        configs = {k: v for k, v in configs.items() if k in only}
    samples = {k: [] for k in configs}
    losses = {k: [] for k in configs}
    for _ in range(reps):
        for name, cmd in configs.items():
            text, _ = run(cmd)
            ns = field(text, "ns_per_call")
            if ns is None:
                die(f"{name}: no result from {' '.join(cmd)}:\n{text[-2000:]}")
            samples[name].append(ns)
            if "cudatrace" in name:
                losses[name].append(traced_counts(text)[1])
            elif name == "naive":
                losses[name].append(field(text, "lost", int))
    med = {k: statistics.median(v) for k, v in samples.items()}
    base = med["untraced"]
    floor_added = med["floor"] - base  # every ratio is to the uprobe_multi floor
    rows = []
    for name in configs:
        added = med[name] - base
        ratio = added / floor_added if name != "untraced" and floor_added > 0 else None
        rows.append((name, samples[name], med[name], added, ratio, losses[name]))
    return rows


def print_overhead(title, rows):
    print(f"\n### {title}\n")
    print("| setup | ns/call (each run) | median ns/call | added ns/call | added / floor's | lost |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, runs, med, added, ratio, lost in rows:
        runs_s = ", ".join(f"{x:.0f}" for x in runs)
        ratio_s = f"{ratio:.2f}" if ratio is not None else "–"
        lost_s = ", ".join(str(x) for x in lost) if lost else "–"
        added_s = f"{added:.0f}" if name != "untraced" else "–"
        print(f"| {name} | {runs_s} | {med:.1f} | {added_s} | {ratio_s} | {lost_s} |")


def bench_threads(t, total_calls):
    print("\n### Throughput (cudaGetDevice from T threads, cudatrace default settings)\n")
    print("| threads | calls | traced | lost | loop time (s) | records/s | untraced loop (s) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for threads in (1, 4, 16):
        per_thread = total_calls // threads
        app = [t.app, "threads", str(threads), str(per_thread)]
        plain, _ = run(app)
        text, _ = run([t.cudatrace, *CT_ALL, "-o", "/dev/null", "--"] + app)
        elapsed = field(text, "elapsed_s")
        traced, lost = traced_counts(text)
        rate = traced / elapsed if traced and elapsed else 0
        print(f"| {threads} | {threads * per_thread} | {traced} | {lost} | {elapsed:.3f} | {rate:,.0f} | "
              f"{field(plain, 'elapsed_s'):.3f} |")


def bench_attach(t, reps):
    print("\n### Time to load the BPF object and attach every probe\n")
    libs = [l for l in (t.libcudart, t.libcuda) if l]
    if not libs:
        print("(no libcudart or libcuda found)")
        return
    print(f"{' + '.join(libs)}; cudatrace -v --lib ... -- /bin/true. perf, new: no ct-uprobes running "
          "(every event made); perf, reused: the run after (the events of the run before)\n")
    print("| attach | probes | load + attach (ms) | whole run (s) |")
    print("| --- | --- | --- | --- |")
    for mode in ("multi", "perf, new", "perf, reused"):
        times, runs, probes = [], [], None
        for _ in range(reps):
            cmd = [t.cudatrace, *CT_ALL, "-v", "--attach", mode.split(",")[0], "-o", "/dev/null"]
            for lib in libs:
                cmd += ["--lib", lib]
            if mode == "perf, reused":
                run(cmd + ["--", "/bin/true"])  # leaves its events with the keeper
            else:
                wait_keeper_gone()
            start = time.monotonic()
            with tempfile.TemporaryFile() as out:  # not run(): that waits for the keeper
                subprocess.run(cmd + ["--", "/bin/true"], stdout=out, stderr=subprocess.STDOUT)
                runs.append(time.monotonic() - start)
                out.seek(0)
                text = out.read().decode(errors="replace")
            m = re.search(r"BPF loaded and (\d+) probes attached in ([0-9.]+) ms", text)
            if not m:
                die(f"no attach time in:\n{text[-2000:]}")
            probes = int(m.group(1))
            times.append(float(m.group(2)))
        print(f"| {mode} | {probes} | {', '.join(f'{x:.0f}' for x in times)} (median {statistics.median(times):.0f}) "
              f"| {', '.join(f'{x:.2f}' for x in runs)} |")


def bench_resources(t, calls):
    print("\n### Tracer resources (cudatrace default, cudaGetDevice loop, output to /dev/null)\n")
    print("| calls | tracer peak RSS (MiB) | tracer CPU user+sys (s) | workload loop (s) |")
    print("| --- | --- | --- | --- |")
    text, _ = run([t.cudatrace, *CT_ALL, "-v", "-o", "/dev/null", "--", t.app, "getdevice", str(calls)])
    m = re.search(r"tracer used ([0-9.]+) s CPU, peak RSS ([0-9.]+) MiB", text)
    if not m:
        die(f"no resource line in:\n{text[-2000:]}")
    print(f"| {calls} | {m.group(2)} | {m.group(1)} | {field(text, 'elapsed_s'):.3f} |")


def bpf_programs():
    """The BPF programs loaded now: [{"id", "name", "run_time_ns"}], read with
    the bpf() system call (GPU hosts have no bpftool)."""
    libc = ctypes.CDLL(None, use_errno=True)
    sys_bpf = 321  # x86-64

    def bpf(cmd, attr):
        buf = ctypes.create_string_buffer(attr, 128)
        return libc.syscall(sys_bpf, cmd, buf, 128), buf.raw

    found, prog_id = [], 0
    while True:
        rc, attr = bpf(11, struct.pack("<I", prog_id))  # BPF_PROG_GET_NEXT_ID
        if rc < 0:
            return found
        prog_id = struct.unpack_from("<I", attr, 4)[0]
        fd, _ = bpf(13, struct.pack("<I", prog_id))  # BPF_PROG_GET_FD_BY_ID
        if fd < 0:
            continue  # unloaded meanwhile
        info = ctypes.create_string_buffer(256)  # struct bpf_prog_info
        rc, _ = bpf(15, struct.pack("<IIQ", fd, len(info), ctypes.addressof(info)))  # BPF_OBJ_GET_INFO_BY_FD
        os.close(fd)
        if rc == 0:
            found.append({"id": prog_id, "name": info.raw[64:80].split(b"\0")[0].decode(errors="replace"),
                          "run_time_ns": struct.unpack_from("<Q", info.raw, 192)[0],
                          "run_cnt": struct.unpack_from("<Q", info.raw, 200)[0]})


def bpf_ns(cmd):
    """Runs cudatrace's command line `cmd`; returns (its output, the run time in
    ns of its BPF programs, from the kernel's BPF statistics, sampled while it
    runs: what its programs cost the traced threads)."""
    wait_keeper_gone()
    # This run's programs: cudatrace's (ct_*), loaded after it started (run
    # no other cudatrace meanwhile).
    before = max([q.get("id", 0) for q in bpf_programs()] + [0])
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        last = 0
        while p.poll() is None:
            mine = [q for q in bpf_programs() if q.get("id", 0) > before and q.get("name", "").startswith("ct_")]
            if mine:
                last = max(last, sum(q.get("run_time_ns", 0) for q in mine))
            time.sleep(0.05)
        out.seek(0)
        return out.read().decode(errors="replace"), last


def bench_otel(build, calls, reps):
    cudatrace = os.environ.get("CUDATRACE") or os.path.join(build, "cudatrace")
    app = os.path.join(build, "tests", "fixtures", "otel_app_lib")
    if not (os.access(cudatrace, os.X_OK) and os.access(app, os.X_OK)):
        die(f"cudatrace and tests/fixtures/otel_app_lib must be built in {build}")
    if open("/proc/sys/kernel/bpf_stats_enabled").read().strip() != "1":
        die("needs kernel.bpf_stats_enabled=1 (the BPF programs' run time)")
    # Every call is a cudaLaunchKernel (the fake runtime's, no driver call nested).
    configs = {
        "--no-otel, span published": [cudatrace, "--no-otel", "-o", "/dev/null", "--", app, "loop", str(calls)],
        "variable, no span published (null pointer)": [cudatrace, "-o", "/dev/null", "--", app, "loop0", str(calls)],
        "span published (read, sent)": [cudatrace, "-o", "/dev/null", "--", app, "loop", str(calls)],
    }
    per_call = {k: [] for k in configs}
    wall = {k: [] for k in configs}
    for _ in range(reps):
        for name, cmd in configs.items():
            text, ns = bpf_ns(cmd)
            if not ns or field(text, "ns_per_call") is None:
                die(f"{name}: no result from {' '.join(cmd)}:\n{text[-2000:]}")
            per_call[name].append(ns / calls)
            wall[name].append(field(text, "ns_per_call"))
    med = {k: statistics.median(v) for k, v in per_call.items()}
    base = med["--no-otel, span published"]
    print(f"\n### OpenTelemetry context: cudaLaunchKernel (fake runtime) x {calls}, {reps} interleaved runs\n")
    print("BPF run time per call (kernel BPF statistics, every cudatrace program of the run / calls), and the")
    print("loop's wall time per call (a VM's trap cost dominates it):\n")
    print("| cudatrace | BPF ns/call (each run) | median BPF ns/call | added vs --no-otel | loop ns/call, median |")
    print("| --- | --- | --- | --- | --- |")
    for name in configs:
        runs_s = ", ".join(f"{x:.0f}" for x in per_call[name])
        added = f"{med[name] - base:+.0f}" if name != "--no-otel, span published" else "–"
        print(f"| {name} | {runs_s} | {med[name]:.0f} | {added} | {statistics.median(wall[name]):.0f} |")
def prog_ids_of(pid):
    """The ids of the BPF programs process `pid` holds open (its fdinfo)."""
    ids = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        return ids
    for fd in fds:
        try:
            m = re.search(r"^prog_id:\s*(\d+)", open(f"/proc/{pid}/fdinfo/{fd}").read(), re.M)
        except OSError:
            continue
        if m:
            ids.add(int(m.group(1)))
    return ids


def bpf_runs(cmd, names=("ct_session", "ct_enter", "ct_exit")):
    """Runs cudatrace's command line `cmd` (cudatrace itself, or taskset
    execing it); returns (its output, {program name: (run_time_ns, run_cnt)}
    of its probes' BPF programs, the last sample taken while it ran). Its
    programs: those it holds open, so other tracers running meanwhile do not
    count."""
    wait_keeper_gone()
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        last = {}
        while p.poll() is None:
            ids = prog_ids_of(p.pid)
            mine = {q["name"]: (q["run_time_ns"], q["run_cnt"]) for q in bpf_programs()
                    if q.get("id") in ids and q.get("name") in names and q.get("run_cnt")}
            if sum(n for _, n in mine.values()) >= sum(n for _, n in last.values()):
                last = mine
            time.sleep(0.05)
        out.seek(0)
        return out.read().decode(errors="replace"), last


def bench_work_per_record(build, calls, reps):
    """(g) BPF ns per program run and cudatrace's CPU ns per record, per mode."""
    cudatrace = os.environ.get("CUDATRACE") or os.path.join(build, "cudatrace")
    app = os.path.join(build, "tests", "fixtures", "fake_app")
    if not (os.access(cudatrace, os.X_OK) and os.access(app, os.X_OK)):
        die(f"cudatrace and tests/fixtures/fake_app must be built in {build}")
    if open("/proc/sys/kernel/bpf_stats_enabled").read().strip() != "1":
        die("needs kernel.bpf_stats_enabled=1 (the BPF programs' run time)")
    to_null = ["-o", "/dev/null"]  # --prometheus writes no trace: it takes no -o
    modes = {"--empty-probes": ["--empty-probes", *to_null], "default": to_null, "--summary": ["--summary", *to_null],
             "--prometheus": ["--prometheus", "127.0.0.1:0"], "--json": ["--json", *to_null],
             "-f all": ["-f", "all", *to_null],
             # The trace and the node's counts for --otlp's metrics (a down Collector: nothing is sent).
             "--otlp": ["--otlp", "http://127.0.0.1:9", *to_null]}
    print(f"\n### Work per record: cudaLaunchKernel (fake runtime, nesting cuLaunchKernel) x {calls}, "
          f"{reps} interleaved runs, minimum\n")
    print("BPF: each program's run time / its runs (kernel BPF statistics); per call: all of them / calls.")
    print("Reader: cudatrace's CPU time (-v: reader, writer thread, everything) minus a 1-call run's, / records.\n")
    print("| mode | BPF ns per run (runs per call) | BPF ns per call | records | reader CPU ns per record | lost |")
    print("| --- | --- | --- | --- | --- | --- |")
    cpu = re.compile(r"tracer used ([0-9.]+) s CPU")
    results = {m: {"bpf": {}, "cpu": [], "start": [], "records": 0, "lost": 0} for m in modes}
    for _ in range(reps):
        for name, flags in modes.items():
            r = results[name]
            for n, key in ((1, "start"), (calls, "cpu")):
                cmd = pinned([app, "launch-loop", str(n)], [cudatrace, *flags, "-v", "--"])
                text, progs = bpf_runs(cmd) if n == calls else (run(cmd)[0], {})
                m = cpu.search(text)
                if not m:
                    die(f"{name}: no CPU time from {' '.join(cmd)}:\n{text[-2000:]}")
                r[key].append(float(m.group(1)))
                if n == calls:
                    read = re.search(r"read (\d+) call records", text)
                    r["records"] = int(read.group(1)) if read else 0
                    lost = re.search(r"(\d+) lost", text)  # --json: in the output, and told on stderr when not 0
                    r["lost"] = max(r["lost"], int(lost.group(1)) if lost else 0)
                    for prog, (t, cnt) in progs.items():
                        if cnt >= calls / 2:  # the loop's, not the start-up cost measurement's
                            r["bpf"].setdefault(prog, []).append((t / cnt, cnt / calls, t / calls))
    for name, r in results.items():
        per_run = ", ".join(f"{p} {min(v)[0]:.0f} ({min(v)[1]:.1f})" for p, v in sorted(r["bpf"].items()))
        per_call = sum(min(x[2] for x in v) for v in r["bpf"].values())
        reader = (min(r["cpu"]) - min(r["start"])) * 1e9 / r["records"] if r["records"] else None
        reader_s = f"{reader:.0f}" if reader is not None else "– (no record per launch)"
        print(f"| {name} | {per_run} | {per_call:.0f} | {r['records']} | {reader_s} | {r['lost']} |")


PY_LOOP = r'''
import ctypes, sys, time
lib = ctypes.CDLL(sys.argv[1])
calls, depth = int(sys.argv[2]), int(sys.argv[3])
get = lib.cudaGetDevice
dev = ctypes.c_int()
ref = ctypes.byref(dev)
def loop():
    for _ in range(1000):
        get(ref)
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        get(ref)
    print(f"ns_per_call={(time.perf_counter_ns() - t0) / calls:.1f}")
# The module's frame, these, and loop's: `depth` frames, each level a function
# of its own (a code object of its own, as in a real program's stack).
exec("def down0():\n    return loop()\n" +
     "".join(f"def down{k}():\n    return down{k - 1}()\n" for k in range(1, depth - 2)))
globals()[f"down{depth - 3}"]()
'''


def pinned(app, tracer=()):
    """The command line with the traced loop on CPU 0 and cudatrace on CPU 1:
    a probe's price per operation, not the scheduler's (../measuring method:
    pinned, the minimum of interleaved runs)."""
    if (os.cpu_count() or 1) < 2 or not shutil.which("taskset"):
        return list(tracer) + list(app)
    return (["taskset", "-c", "1"] + list(tracer) if tracer else []) + ["taskset", "-c", "0"] + list(app)


def bench_py_stack(t, calls, reps, python="/usr/bin/python3"):
    """(e) Added ns per recorded call with --py-stack against the default trace:
    the loop's wall time per call (minimum of the interleaved runs) and, with
    kernel.bpf_stats_enabled=1, the BPF programs' own run time per call."""
    lib = os.path.join(t.build, "tests", "fixtures", "fakecudart", "libcudart.so.13")
    with_bpf = open("/proc/sys/kernel/bpf_stats_enabled").read().strip() == "1"
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(PY_LOOP)
        script = f.name
    print(f"\n### --py-stack: cudaGetDevice x {calls} from a Python loop ({python}), {reps} interleaved runs\n")
    print("Wall: the loop's ns per call, the minimum of the runs, pinned (loop on CPU 0, cudatrace on CPU 1);")
    print("added = traced - untraced. BPF: the BPF programs' run time per call (kernel BPF statistics)"
          + ("." if with_bpf else ": not measured (kernel.bpf_stats_enabled=0).") + "\n")
    print("| depth | untraced ns/call | default: added ns | --py-stack: added ns | ratio | "
          "default: BPF ns | --py-stack: BPF ns | BPF added by --py-stack | lost |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    try:
        for depth in (5, 20, 50):
            app = [python, script, lib, str(calls), str(depth)]
            configs = {
                "untraced": pinned(app),
                "default": pinned(app, [t.cudatrace, "-f", "all", "-o", "/dev/null", "--"]),
                "py": pinned(app, [t.cudatrace, "-f", "all", "--py-stack", "-o", "/dev/null", "--"]),
            }
            wall = {k: [] for k in configs}
            bpf = {k: [] for k in configs}
            lost = []
            for _ in range(reps):
                for name, cmd in configs.items():
                    if with_bpf and name != "untraced":
                        text, ns = bpf_ns(cmd)
                        bpf[name].append(ns / calls)
                    else:
                        text, _ = run(cmd)
                    ns = field(text, "ns_per_call")
                    if ns is None:
                        die(f"{name}: no result from {' '.join(cmd)}:\n{text[-2000:]}")
                    wall[name].append(ns)
                    if name != "untraced":
                        lost.append(traced_counts(text)[1])
            best = {k: min(v) for k, v in wall.items()}
            d_added, p_added = best["default"] - best["untraced"], best["py"] - best["untraced"]
            b = {k: f"{min(v):.0f}" if v else "–" for k, v in bpf.items()}
            b_added = f"{min(bpf['py']) - min(bpf['default']):+.0f}" if with_bpf else "–"
            print(f"| {depth} | {best['untraced']:.0f} | {d_added:.0f} | {p_added:.0f} | "
                  f"{p_added / d_added if d_added > 0 else float('nan'):.2f} | {b['default']} | {b['py']} | "
                  f"{b_added} | {max(lost)} |")
    finally:
        os.unlink(script)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--calls", type=int, default=1000000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default="a,b,c,d")
    ap.add_argument("--workloads", default="getdevice,launch,nested", help="for (a)")
    ap.add_argument("--setups", help="for (a): only these setups, comma-separated (untraced and floor always run)")
    ap.add_argument("--guard", type=float, help="CI guard: fail if cudatrace's added cost exceeds this x the floor's")
    args = ap.parse_args()
    if os.geteuid() != 0:
        die("needs root (BPF)")
    only = set(args.only.split(","))
    # (e), (f) and (g) need cudatrace and the build's fixtures only
    t = Tools(args.build, need_all=args.guard or not only <= {"e", "f", "g"})

    if args.guard:
        rows = bench_overhead(t, ["getdevice", str(args.calls)], args.reps, only={"untraced", "floor", "cudatrace"})
        print_overhead(f"Guard: cudaGetDevice x {args.calls}, {args.reps} interleaved runs", rows)
        ratio = next(r[4] for r in rows if r[0] == "cudatrace")
        lost = next(r[5] for r in rows if r[0] == "cudatrace")
        if any(lost):
            print(f"bench: FAIL: cudatrace lost records: {lost}", file=sys.stderr)
            return 1
        if ratio > args.guard:
            print(f"bench: FAIL: cudatrace adds {ratio:.2f}x the floor's cost (limit {args.guard})", file=sys.stderr)
            return 1
        print(f"\nbench: ok: cudatrace adds {ratio:.2f}x the floor's cost (limit {args.guard})")
        return 0

    print(f"# cudatrace benchmarks, {time.strftime('%Y-%m-%d %H:%M %Z')}")
    print(f"\nmachine: {os.uname().nodename}, kernel {os.uname().release}, {os.cpu_count()} CPUs; "
          f"workload {t.app}; bpftrace: {t.bpftrace or 'not installed'}")
    workloads = args.workloads.split(",")
    setups = set(args.setups.split(",")) | {"untraced", "floor"} if args.setups else None
    if "a" in only and "getdevice" in workloads:
        print_overhead(f"cudaGetDevice x {args.calls}, {args.reps} interleaved runs",
                       bench_overhead(t, ["getdevice", str(args.calls)], args.reps, setups))
    if "a" in only and "launch" in workloads:
        launches = args.calls // 4
        print_overhead(f"empty kernel launch x {launches}, {args.reps} interleaved runs",
                       bench_overhead(t, ["launch", str(launches)], args.reps, setups))
    if "a" in only and "nested" in workloads:
        print_overhead(f"runtime launch nesting a driver launch (fake libraries) x {args.calls // 4}, "
                       f"{args.reps} interleaved runs",
                       bench_overhead(t, ["nested", str(args.calls // 4)], args.reps))
    if "b" in only:
        bench_threads(t, 2 * args.calls)
    if "c" in only:
        bench_attach(t, args.reps)
    if "d" in only:
        bench_resources(t, args.calls)
    if "e" in only:
        bench_py_stack(t, args.calls // 5, args.reps, os.environ.get("PYTHON", "/usr/bin/python3"))
    if "f" in only:
        bench_otel(args.build, args.calls, args.reps)
    if "g" in only:
        bench_work_per_record(args.build, args.calls, args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
