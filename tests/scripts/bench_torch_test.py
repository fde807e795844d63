#!/usr/bin/env python3
"""Checks scripts/bench-torch.py's analysis without a GPU: on windows made up
like the H200 host's (a fast and a slow state that switch every few seconds,
and a tracer with a known cost), the fast-state loss finds the planted cost
and the slowdown while the hot probes are attached its own; a budget log is turned
into the attached intervals and the estimate over a window; --from-raw prints
both tables.

  bench_torch_test.py SOURCE_DIR
"""
import importlib.util
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile

FAST, SLOW = 850.0, 480.0  # steps/s of the two host states
FLOOR_COST, HOT_COST = 0.01, 0.08  # planted: always, and in the bins with hot probes attached
HOT = [[2.0, 2.2], [6.5, 6.7]]  # attached intervals of every traced window (s from its start)


def load(source_dir):
    path = os.path.join(source_dir, "scripts", "bench-torch.py")
    spec = importlib.util.spec_from_file_location("bench_torch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check(condition, what):
    if not condition:
        sys.exit(f"FAIL: {what}")


def windows(bench, rounds, rng):
    """Interleaved untraced and traced windows of 100 bins; the host's state
    is a Markov chain over bins (a switch every ~3 s on average)."""
    samples, fast, t = [], True, 0.0
    for r in range(rounds):
        for mode in ("untraced", "node-budget1") if r % 2 == 0 else ("node-budget1", "untraced"):
            bins = []
            for i in range(100):
                if rng.random() < 1 / 30:
                    fast = not fast
                rate = (FAST if fast else SLOW) * rng.gauss(1, 0.03)
                if mode != "untraced":
                    hot = any(a < (i + 1) * 0.1 and b > i * 0.1 for a, b in HOT)
                    rate *= 1 - (HOT_COST if hot else FLOOR_COST)
                bins.append(round(rate * bench.BIN_S))
            s = bench.Sample(sum(bins) / 10.0, 1e6 / (sum(bins) / 10.0), 0.0)
            s.bins, s.mode, s.round, s.start_s = bins, mode, r + 1, t
            if mode != "untraced":
                s.hot, s.window_estimate, s.hot_priced, s.tracer_cpu = HOT, 0.7, 16.0, 0.005
            samples.append(s)
            t += 20
    return samples


def check_fast_state(bench):
    samples = windows(bench, 200, random.Random(7))
    fast = bench.fast_state(samples)
    mean_fast = lambda s: statistics.mean(r for r, _ in fast[id(s)]) if id(s) in fast else None
    losses = bench.paired_losses(samples, "node-budget1", mean_fast)
    check(len(losses) > 100, f"windows with enough fast bins: {len(losses)}")
    # The planted cost over a window: the floor, and the hot cost in 4 % of its bins.
    planted = 100 * (0.96 * FLOOR_COST + 0.04 * HOT_COST)
    check(abs(statistics.mean(losses) - planted) < 0.3,
          f"fast-state loss {statistics.mean(losses):.2f} %, planted {planted:.2f} %")
    whole = bench.paired_losses(samples, "node-budget1")
    check(statistics.pstdev(losses) < statistics.pstdev(whole) / 3,
          f"fast-state losses spread {statistics.pstdev(losses):.2f}, whole windows {statistics.pstdev(whole):.2f}")
    slowdown = bench.attached_slowdown([s for s in samples if s.mode != "untraced"], fast)
    expected = 1 - (1 - HOT_COST) / (1 - FLOOR_COST)
    check(abs(slowdown - expected) < 0.005, f"slowdown while attached {100 * slowdown:.2f} %, planted {100 * expected:.2f} %")
    return samples


def check_budget_log(bench, tmp):
    """A controller that started at 100 s (monotonic): attached 1.0-1.2 s
    (0.05 s of it attaching) at 15 %, detached until 3.0 s at 0.3 % with a
    2 ms switch, attached again 3.0-3.1 s; the window is 1.0-2.0 s."""
    log = os.path.join(tmp, "budget.log")
    with open(log, "w") as f:
        f.write("# start_monotonic_ns 100000000000\n# t_s window_attached length_ms cost_pct switch_cpu_ms attach_ms "
                "next_attached next_ms cost_so_far_pct attached_pct\n"
                "1.200 1 200.0 15.000 0.000 50.000 0 1800.0 1.0 50.0\n"
                "3.000 0 1800.0 0.300 2.000 0.000 1 100.0 1.0 10.0\n"
                "3.100 1 100.0 15.000 2.000 10.000 0 1000.0 1.0 12.0\n")
    sample = bench.Sample(0, 0, 0)
    sample.t0, sample.bins = 101.0, [0] * 10
    hot, estimate, priced = bench.budget_in_window(log, sample)
    check(hot == [[0.05, 0.2]], f"attached intervals {hot}")
    check(priced == 15.0, f"attached time priced at {priced} %")
    # 0.2 s at 15 % + 0.8 s at 0.3 % + the 2 ms switch at 1.2 s, over 1 s.
    check(abs(estimate - (100 * (0.2 * 0.15 + 0.8 * 0.003 + 0.002))) < 1e-6, f"estimate {estimate}")


def main():
    source_dir = sys.argv[1]
    bench = load(source_dir)
    samples = check_fast_state(bench)
    with tempfile.TemporaryDirectory() as tmp:
        check_budget_log(bench, tmp)
        raw = os.path.join(tmp, "raw.jsonl")
        with open(raw, "w") as f:
            f.write(json.dumps({"host": "test", "settings": "made up",
                                "tracer_args": {"node-budget1": ["--all-processes", "--max-overhead", "1"]}}) + "\n")
            for s in samples[:40]:
                f.write(s.to_json("inference") + "\n")
        out = subprocess.run([sys.executable, os.path.join(source_dir, "scripts", "bench-torch.py"), "--from-raw", raw],
                             capture_output=True, text=True, check=True).stdout
        check("| node-budget1 | 20 | " in out, "the main table's row:\n" + out)
        check(re.search(r"Fast-state bins.*\n\| node-budget1 \| \d+ \| \d+% \| .* \| 4\.00% \| [0-9.]+ %, 16\.0 % "
                        r"\| 0\.70 % \| 0\.0050 \|", out, re.S), "the fast-state table:\n" + out)
    print("ok")


if __name__ == "__main__":
    main()
