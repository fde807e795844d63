#!/usr/bin/env python3
"""Probe hits per generated token of Hugging Face GPT-2 decoding
(decode_loop.py) in each cudatrace mode (issue 35): each mode traces the
program from its start twice, with G1 and G2 generates of T tokens; the
difference of the probe hits cudatrace counted (its JSON end line) over the
difference of tokens leaves out start-up, imports and the warm-up. With a
price per hit (--entry-ns, --return-ns: the ns-per-operation measurement,
bench-ops.py) it predicts what the trace costs one token. (--empty-probes
counts no hits: it traps where the default does.)

  sudo python3 scripts/gpu/hits_per_token.py [--modes default,summary,every-layer]
      [--generates 2,6] [--tokens 16] [--entry-ns 650 --return-ns 450]
Env: CUDATRACE (default build/cudatrace-static), PYTHON (default python3).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = {
    "default": [],
    "summary": ["--summary"],
    "every-layer": ["--every-layer"],
    "all": ["-f", "all"],
}


def hits(cudatrace, python, mode, generates, tokens):
    """(entry hits, return hits) of the Python process, from the JSON end line."""
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as out:
        cmd = [cudatrace, *MODES[mode], "--json", "-o", out.name, "--", python, os.path.join(HERE, "decode_loop.py"),
               str(generates), str(tokens)]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
        ends = [json.loads(l) for l in open(out.name) if '"type":"end"' in l]
    if p.returncode != 0 or not ends:
        sys.exit(f"{mode}: exit {p.returncode}, no end line:\n{p.stderr[-2000:]}")
    procs = ends[-1].get("overhead", {}).get("processes", [])
    if not procs:
        sys.exit(f"{mode}: no probe hits in the end line: {ends[-1]}")
    busiest = max(procs, key=lambda q: q["entry_hits"])
    return busiest["entry_hits"], busiest["return_hits"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="default,summary,every-layer")
    ap.add_argument("--generates", default="2,6")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--entry-ns", type=float)
    ap.add_argument("--return-ns", type=float)
    args = ap.parse_args()
    cudatrace = os.environ.get("CUDATRACE", "build/cudatrace-static")
    python = os.environ.get("PYTHON", "python3")
    g1, g2 = (int(x) for x in args.generates.split(","))
    tokens = (g2 - g1) * args.tokens
    print(f"# GPT-2 decode, probe hits per token: ({g2} - {g1}) generates x {args.tokens} tokens")
    print("| mode | hits per token | entry hits per token | return hits per token | predicted µs per token |")
    print("| --- | --- | --- | --- | --- |")
    for mode in args.modes.split(","):
        ea, ra = hits(cudatrace, python, mode, g1, args.tokens)
        eb, rb = hits(cudatrace, python, mode, g2, args.tokens)
        entry, ret = (eb - ea) / tokens, (rb - ra) / tokens
        predicted = "–"
        if args.entry_ns and args.return_ns:
            predicted = f"{(entry * args.entry_ns + ret * args.return_ns) / 1000:.1f}"
        print(f"| {mode} | {entry + ret:.1f} | {entry:.1f} | {ret:.1f} | {predicted} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
