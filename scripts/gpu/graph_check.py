#!/usr/bin/env python3
"""CUDA graphs: what cudatrace says a graph launch runs, against what ran.

  graph_check.py run REPLAYS          the workload (run under cudatrace and the
                                      CUPTI counter): a torch.cuda.graph capture
                                      replayed REPLAYS times, then a
                                      torch.compile(mode="reduce-overhead") model
                                      called REPLAYS times
  graph_check.py compare TRACE.jsonl CUPTI.json

compare: CUPTI's kernel activity records carry the id of the graph that ran
them and the correlation id of the launch call; per graph, the kernels of one
replay are its kernels divided by its launches. Each CUPTI graph must match a
cudatrace graph (gN of the cudaGraphLaunch/cuGraphLaunch records) with the same
number of launches and the same kernels per launch, by name and count.
Exit 0 when every CUPTI graph matches; 1 otherwise.
"""
import collections
import json
import sys


def workload(replays):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 512),
                                torch.nn.LayerNorm(512)).cuda()
    x = torch.randn(64, 512, device="cuda")

    # torch.cuda.graph: warm up on a side stream (as PyTorch's docs do), capture, replay.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        y = model(x)
    for _ in range(replays):
        graph.replay()
    torch.cuda.synchronize()
    print(f"torch.cuda.graph: {replays} replays, checksum {float(y.sum()):.3f}")

    # torch.compile's CUDA graph trees: the first calls record, the rest replay.
    compiled = torch.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(replays):
            out = compiled(x)
            torch.cuda.synchronize()
    print(f"torch.compile reduce-overhead: {replays} calls, checksum {float(out.sum()):.3f}")


def traced_graphs(path):
    """gN -> (launches, Counter of kernels one launch runs), from the launch records."""
    launches = collections.defaultdict(collections.Counter)  # gN -> api -> launches
    runs, unknown = {}, collections.Counter()
    for line in open(path):
        r = json.loads(line)
        if r.get("type") != "call" or "GraphLaunch" not in r.get("api", "") or "graph" not in r:
            continue
        if r.get("ret", 0) not in (0, "cudaSuccess", "CUDA_SUCCESS"):
            continue
        g = r["graph"]
        if not g.get("known"):
            unknown[g.get("id")] += 1
            continue
        launches[g["id"]][r["api"]] += 1
        runs[g["id"]] = collections.Counter({k["kernel"]: k["count"] for k in g["runs"]["kernels"]})
        if g["runs"].get("unlisted_launches"):
            runs[g["id"]]["(unlisted)"] = g["runs"]["unlisted_launches"]
    # One layer's records count the launches (the runtime's call and the driver's under it are one launch).
    return {gid: (max(by_api.values()), runs[gid]) for gid, by_api in launches.items()}, unknown


def cupti_graphs(path):
    """CUPTI graph id -> (launches, Counter of kernels one launch runs, problem or None)."""
    out = {}
    for gid, g in (json.load(open(path)).get("graphs") or {}).items():
        n = g["launches"]
        per_launch, problem = collections.Counter(), None
        if g["node_runs_min"] != g["node_runs_max"] or g["node_runs_max"] != n:
            problem = f"nodes ran {g['node_runs_min']}..{g['node_runs_max']} times for {n} launches"
        for name, count in g["kernels"].items():
            if count % n:
                problem = problem or f"{name} ran {count} times in {n} launches"
            per_launch[name] = count // n
        out[gid] = (n, per_launch, problem)
    return out


def compare(trace, cupti):
    traced, unknown = traced_graphs(trace)
    truth = cupti_graphs(cupti)
    print(f"graphs: CUPTI {len(truth)}, cudatrace {len(traced)} known"
          + (f", {sum(unknown.values())} launches of graphs with unknown contents ({dict(unknown)})" if unknown else ""))
    failed = not truth
    if not truth:
        print("FAILED: CUPTI saw no kernel run by a graph")
    used = set()
    for gid, (n, kernels, problem) in sorted(truth.items(), key=lambda kv: int(kv[0])):
        match = next((t for t, (tn, tk) in traced.items() if t not in used and tn == n and tk == kernels), None)
        total = sum(kernels.values())
        if match:
            used.add(match)
            print(f"  CUPTI graph {gid}: {n} launches x {total} kernels ({len(kernels)} names) = cudatrace {match}: equal")
            continue
        failed = True
        print(f"  CUPTI graph {gid}: {n} launches x {total} kernels ({len(kernels)} names): NO cudatrace graph equal"
              + (f" ({problem})" if problem else ""))
        for t, (tn, tk) in traced.items():
            if t in used:
                continue
            missing, extra = kernels - tk, tk - kernels
            print(f"    vs {t} ({tn} launches, {sum(tk.values())} kernels): "
                  f"missing {dict(missing) or '-'}, extra {dict(extra) or '-'}")
    for t, (tn, tk) in traced.items():
        if t not in used:
            print(f"  cudatrace {t}: {tn} launches x {sum(tk.values())} kernels: no CUPTI graph")
    print("graphs: ok" if not failed else "graphs: FAILED")
    return 1 if failed else 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "run":
        workload(int(sys.argv[2]))
        return 0
    if len(sys.argv) == 4 and sys.argv[1] == "compare":
        return compare(sys.argv[2], sys.argv[3])
    print(__doc__.strip().splitlines()[2], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
