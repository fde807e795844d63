"""Checks a cudatrace --json trace of scripts/gpu/nccl_check.py.

Usage: python3 nccl_compare.py TRACE.jsonl RANKDIR EXPECTED.json

RANKDIR holds nccl_check.py's rank<R>.json files (rank -> pid); EXPECTED is
the JSON line nccl_check.py printed. Prints a comparison table and one
"PASS: ..." or "FAIL: ..." line per check; exits 1 if any check failed.
"""
import collections
import json
import os
import sys

from compare import json_lines  # this directory

failures = []


def check(ok, what):
    print(("PASS: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def load_trace(path):
    calls, bad = [], 0
    with open(path) as f:
        for rec, line in json_lines(f):
            if not line.startswith("{"):
                continue
            if rec is None:
                bad += 1
                continue
            if rec.get("type") == "call" and rec.get("layer") == "nccl":
                calls.append(rec)
            elif rec.get("type") == "end":
                print(f"trace end record: calls={rec.get('calls')} lost={rec.get('lost')} "
                      f"unfinished={rec.get('unfinished')}")
                check(rec.get("lost") == 0, "no lost records")
    check(bad == 0, f"every trace line is JSON ({bad} bad)")
    return calls


def count_of(rec):
    args = rec["args"]
    return args.get("count", args.get("sendcount", args.get("recvcount")))


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: nccl_compare.py TRACE.jsonl RANKDIR EXPECTED.json")
    trace, rankdir, expected_path = sys.argv[1:]
    with open(expected_path) as f:
        expected = json.loads(f.read().strip().splitlines()[-1])
    print(f"program: torch {expected['torch']}, NCCL {expected['nccl']}, {expected['world']} ranks, "
          f"{expected['iterations']} iterations")
    pid_rank = {}
    for r in range(expected["world"]):
        with open(os.path.join(rankdir, f"rank{r}.json")) as f:
            info = json.load(f)
        pid_rank[info["pid"]] = r
        check(info["values_ok"], f"rank {r} (pid {info['pid']}, {info['device']}): collective results are right")
    calls = load_trace(trace)
    by_pid = collections.defaultdict(list)
    for c in calls:
        by_pid[c["pid"]].append(c)
    print(f"NCCL calls traced per pid: { {p: len(v) for p, v in sorted(by_pid.items())} }")
    missing = [p for p in pid_rank if p not in by_pid]
    check(not missing, f"both ranks' processes traced (missing pids: {missing})")
    if missing:
        return

    # 1. The program's calls (told apart by their element counts): counts, bytes, rank, nranks.
    print()
    print(f"{'API':<16}{'count':>8}{'expected/rank':>15}" + "".join(f"{'rank ' + str(r):>10}" for r in sorted(pid_rank.values()))
          + f"{'bytes ok':>10}{'key ok':>8}")
    for api, exp in sorted(expected["expected"].items()):
        seen, bytes_ok, keys_ok, rank_ok, unknown_rank = {}, True, True, True, 0
        for pid, rank in pid_rank.items():
            mine = [c for c in by_pid[pid] if c["api"] == api and count_of(c) == exp["count"] and c.get("ret") == 0]
            seen[rank] = len(mine)
            for c in mine:
                n = c.get("nccl") or {}
                bytes_ok &= n.get("bytes") == exp["bytes"]
                keys_ok &= n.get("comm_id") is not None and n.get("seq") is not None
                # A communicator made by ncclCommSplit has rank/nranks null until the program asks
                # ncclCommUserRank/ncclCommCount (docs/correlation.md); known values must be right.
                rank_ok &= n.get("rank") in (None, rank) and n.get("nranks") in (None, expected["world"])
                unknown_rank += n.get("rank") is None
        print(f"{api:<16}{exp['count']:>8}{exp['calls_per_rank']:>15}" + "".join(f"{seen[r]:>10}" for r in sorted(seen))
              + f"{str(bytes_ok):>10}{str(keys_ok):>8}")
        check(all(v == exp["calls_per_rank"] for v in seen.values()),
              f"{api}: {exp['calls_per_rank']} calls of {exp['count']} elements per rank (seen {seen})")
        check(bytes_ok, f"{api}: bytes = {exp['bytes']} on every call")
        check(keys_ok, f"{api}: comm_id and seq on every call")
        check(rank_ok, f"{api}: rank and nranks right where known ({unknown_rank} calls on communicators "
              f"whose rank is unknown)")

    # 2. (comm_id, seq) agreement across the ranks, over every numbered call.
    keys = {}
    for pid, rank in pid_rank.items():
        keys[rank] = {}
        for c in by_pid[pid]:
            n = c.get("nccl") or {}
            if n.get("comm_id") is None or n.get("seq") is None:
                continue
            key = (n["comm_id"], n["seq"])
            if key in keys[rank]:
                check(False, f"rank {rank}: duplicate key {key}")
            keys[rank][key] = (c["api"], count_of(c))
    ranks = sorted(keys)
    comms = [set(k[0] for k in keys[r]) for r in ranks]
    shared = set.intersection(*comms)
    print(f"\ncommunicators: " + ", ".join(f"rank {r}: {sorted(c)}" for r, c in zip(ranks, comms)))
    check(bool(shared), f"the ranks share communicator ids ({len(shared)} shared)")
    for comm in sorted(shared):
        per_rank = [{k[1]: v for k, v in keys[r].items() if k[0] == comm} for r in ranks]
        seqs = [sorted(p) for p in per_rank]
        check(all(s == list(range(len(s))) for s in seqs), f"comm {comm}: seq consecutive from 0 on every rank "
              f"({[len(s) for s in seqs]} calls)")
        check(seqs[0] == seqs[1], f"comm {comm}: the same seq set on both ranks")
        mismatched = []
        for seq in set(per_rank[0]) & set(per_rank[1]):
            (a0, n0), (a1, n1) = per_rank[0][seq], per_rank[1][seq]
            p2p_pair = {a0, a1} == {"ncclSend", "ncclRecv"}
            if n0 != n1 or (a0 != a1 and not p2p_pair):
                mismatched.append((seq, per_rank[0][seq], per_rank[1][seq]))
        check(not mismatched, f"comm {comm}: (comm_id, seq) names the same operation on both ranks "
              f"(mismatches: {mismatched[:5]})")
        example = sorted(set(per_rank[0]) & set(per_rank[1]))[:6]
        print(f"  comm {comm} first keys: " + "; ".join(f"seq {s}: {per_rank[0][s][0]}/{per_rank[1][s][0]} "
                                                        f"count {per_rank[0][s][1]}" for s in example))
    print()
    print("RESULT: " + ("PASS" if not failures else f"FAIL ({len(failures)} checks failed)"))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
