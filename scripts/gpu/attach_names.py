"""GPU check of issue 37: `cudatrace -p` on a running service names its
launches, also of kernels whose handles were made before it attached
(cuBLASLt's GEMMs, Triton's kernels, XLA's), and never names one wrongly.

Usage:
  python3 attach_names.py serve KIND          the service (hf, compile or jax):
      runs its step until a line (or EOF) on stdin, printing "warm" once warm
  python3 attach_names.py check KIND CUDATRACE CUPTI_LIB OUTDIR [SECONDS]
      starts the service under the CUPTI counter (libcupti_count.so), attaches
      `CUDATRACE -v --json -p PID` once it is warm, stops the trace after
      SECONDS (default 8), stops the service and checks:
        - at least 99.5 % of the launches traced are named;
        - every name cudatrace gave is a name CUPTI saw run in that process;
      and prints the attach time (start to "tracing process") and the
      tracer's peak RSS. Exit status 1 when a check fails.
"""
import collections
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

WARM_TIMEOUT_S = 240


def serve(kind):
    stop = threading.Event()

    def wait_for_stop():
        sys.stdin.readline()
        stop.set()

    threading.Thread(target=wait_for_stop, daemon=True).start()
    if kind == "jax":
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        import jax
        import jax.numpy as jnp

        f = jax.jit(lambda a: jnp.tanh(a @ a).sum())
        a = jnp.ones((512, 512), dtype=jnp.float32) / 512

        def step():
            f(a).block_until_ready()

        sync = lambda: None
    else:
        import torch

        sync = torch.cuda.synchronize
        if kind == "hf":
            import transformers

            transformers.logging.set_verbosity_error()
            config = transformers.GPT2Config()
            model = transformers.GPT2LMHeadModel(config).half().cuda().eval()
            prompt = torch.randint(0, config.vocab_size, (1, 8), device="cuda")
            mask = torch.ones_like(prompt)

            def step():
                with torch.no_grad():
                    model.generate(prompt, attention_mask=mask, max_new_tokens=16, min_new_tokens=16,
                                   do_sample=False, pad_token_id=0)
        elif kind == "compile":
            compiled = torch.compile(lambda x, w: torch.nn.functional.gelu(x @ w).mul(2.0).add(1.0).sum(dim=1))
            x = torch.randn(256, 512, device="cuda")
            w = torch.randn(512, 512, device="cuda")

            def step():
                compiled(x, w)
        else:
            sys.exit(f"unknown kind {kind}")
    for _ in range(3):
        step()
    sync()
    print("warm", flush=True)
    steps = 0
    while not stop.is_set():
        step()
        steps += 1
    sync()
    print(json.dumps({"kind": kind, "steps": steps}), flush=True)


def mapping_of(maps, address):
    """The /proc/PID/maps line holding `address` (a hex string), as "path+offset perms"."""
    try:
        at = int(address, 16)
    except (TypeError, ValueError):
        return "no address"
    for line in maps:
        fields = line.split()
        start, end = (int(x, 16) for x in fields[0].split("-"))
        if start <= at < end:
            path = fields[5] if len(fields) > 5 else "[anonymous]"
            return f"{path}+{at - start + int(fields[2], 16):#x} {fields[1]}"
    return "no mapping"


def check(kind, cudatrace, cupti_lib, outdir, seconds):
    os.makedirs(outdir, exist_ok=True)
    base = os.path.join(outdir, f"attach_{kind}")
    cupti_out = base + ".cupti.json"
    trace = base + ".trace.jsonl"
    env = dict(os.environ, CUDA_INJECTION64_PATH=cupti_lib, CUPTI_COUNT_OUT=cupti_out)
    service = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve", kind], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=open(base + ".service.err", "w"), text=True, env=env)
    problems, maps = [], []
    try:
        deadline = time.monotonic() + WARM_TIMEOUT_S
        line = ""
        while time.monotonic() < deadline and line != "warm\n":
            line = service.stdout.readline()
            if not line:
                break
        if line != "warm\n":
            print(f"attach {kind}: the service never said it was warm (see {base}.service.err)")
            return 1
        err_path = base + ".err"
        started = time.monotonic()
        tracer = subprocess.Popen([cudatrace, "-v", "--json", "-o", trace, "-p", str(service.pid)],
                                  stdout=subprocess.DEVNULL, stderr=open(err_path, "w"))
        attach_s = None
        while time.monotonic() - started < 60 and tracer.poll() is None:
            if "cudatrace: tracing process" in open(err_path).read():
                attach_s = time.monotonic() - started
                break
            time.sleep(0.02)
        time.sleep(seconds)
        maps = open(f"/proc/{service.pid}/maps").read().splitlines()  # where unnamed handles lie
        tracer.send_signal(signal.SIGINT)
        try:
            rc = tracer.wait(timeout=60)
        except subprocess.TimeoutExpired:
            tracer.kill()
            rc = "killed after 60 s"
        if rc != 0:
            problems.append(f"cudatrace exited {rc}")
        service.stdin.write("stop\n")
        service.stdin.flush()
        print(f"attach {kind}: service: {service.stdout.read().strip()}")
        service.wait(timeout=120)
    finally:
        if service.poll() is None:
            service.kill()
    err = open(base + ".err").read()
    rss = re.search(r"peak RSS ([0-9.]+) MiB", err)
    probes = re.search(r"tracing process \d+ \((\d+) probes\)", err)
    print(f"attach {kind}: attach {attach_s:.2f} s" if attach_s is not None else f"attach {kind}: never attached",
          f"({probes.group(1)} probes)" if probes else "",
          f"peak RSS {rss.group(1)} MiB" if rss else "(no peak RSS line)")
    for l in err.splitlines():
        if "lost" in l or "warning" in l or "kernel handles made before attach" in l:
            print(f"  | {l}")
    cupti = json.load(open(cupti_out)) if os.path.exists(cupti_out) else {}
    ran = set((cupti.get("kernels") or {}).keys())
    launches, named = collections.Counter(), collections.Counter()
    names = collections.Counter()
    unnamed = collections.Counter()
    for text in open(trace):
        r = json.loads(text)
        if r.get("type") != "call" or "kernel" not in r:
            continue
        launches[r["api"]] += 1
        mangled = r.get("kernel_mangled", "?")
        if r["kernel"] != "?":
            named[r["api"]] += 1
            names[mangled] += 1
        else:
            unnamed[(r["api"], (r.get("args") or {}).get("f") or (r.get("args") or {}).get("func"))] += 1
    total, total_named = sum(launches.values()), sum(named.values())
    for api, n in launches.most_common():
        print(f"attach {kind}: {api}: {n} launches, {named[api]} named ({100 * named[api] / n:.2f} %)")
    share = 100 * total_named / total if total else 0
    print(f"attach {kind}: all: {total} launches, {total_named} named ({share:.2f} %), "
          f"{len(names)} kernels named, CUPTI saw {len(ran)} kernels run")
    for (api, handle), n in unnamed.most_common(5):
        print(f"  unnamed: {api} {handle}: {n} launches, in {mapping_of(maps, handle)}")
    unseen = sorted(ran - set(names))
    if unseen:
        print(f"  CUPTI's kernels never named: {', '.join(unseen[:8])}")
    if not total or share < 99.5:
        problems.append(f"{share:.2f} % of {total} launches named (at least 99.5 % wanted)")
    if not ran:
        problems.append("CUPTI saw no kernel (no counter output?)")
    wrong = [n for n in names if n not in ran]
    for n in wrong[:10]:
        problems.append(f"named {n!r} ({names[n]} launches), a name CUPTI never saw run")
    for p in problems:
        print(f"attach {kind}: PROBLEM: {p}")
    print(f"attach {kind}: {'OK' if not problems else 'FAILED'}")
    return 1 if problems else 0


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "serve":
        serve(sys.argv[2])
        return 0
    if len(sys.argv) in (6, 7) and sys.argv[1] == "check":
        return check(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5],
                     float(sys.argv[6]) if len(sys.argv) == 7 else 8.0)
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
