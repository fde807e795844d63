#!/usr/bin/env python3
"""Per-API call counts of a `cudatrace --summary --json` run against a full
`cudatrace --json` trace of the same program (two runs of a deterministic
program, so the counts must be equal).

  compare_summary.py TRACE.jsonl SUMMARY.jsonl
Exit 0 when every API has the same count in both, 1 otherwise.
"""
import collections
import json
import sys


def trace_counts(path):
    counts = collections.Counter()
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("type") in ("call", "unfinished"):
                counts[rec["api"]] += 1
    return counts


def summary_counts(path):
    final = None
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("type") == "summary" and rec.get("final"):
                final = rec
    if final is None:
        sys.exit(f"{path}: no final summary line")
    return collections.Counter({row["name"]: row["calls"] for row in final["apis"]})


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    trace, summary = trace_counts(sys.argv[1]), summary_counts(sys.argv[2])
    names = sorted(set(trace) | set(summary))
    bad = [n for n in names if trace[n] != summary[n]]
    print(f"{'API':<36} {'trace':>10} {'summary':>10}")
    for n in names:
        print(f"{n:<36} {trace[n]:>10} {summary[n]:>10}{'   <-- differs' if n in bad else ''}")
    print(f"{len(names)} APIs, {sum(trace.values())} calls in the trace, {sum(summary.values())} in the summary: "
          + ("all equal" if not bad else f"{len(bad)} differ"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
