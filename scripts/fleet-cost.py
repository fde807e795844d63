#!/usr/bin/env python3
"""Rebuilds the tables of docs/fleet.md from measurement files written by
scripts/fleet-measure.py (docs/fleet-build-vm.json, the GPU host's file):
what a full JSON Lines trace and what metrics only cost in storage, per GPU
hour and per 1,000-GPU cluster day, and what cudatrace costs in CPU.

  scripts/fleet-cost.py docs/fleet-build-vm.json docs/fleet-h200.json

Assumptions (flags; docs/fleet.md says why):
  --scrape-interval  15 s between Prometheus scrapes
  --bytes-per-sample 2 bytes per stored sample (Prometheus's TSDB: 1-2)
  series per GPU process, where no scrape was measured: from the
    exporter's documented labels (docs/prometheus.md): per API called,
    calls_total with one status, plus a histogram of 23 buckets, _sum and
    _count (26 series); plus 10 per process identity (launches, 5 copy
    directions, live and peak memory, probe hits, added seconds)
Bytes per call of a workload without its own JSON measurement (none of the
GPU rows lacks one unless zstd was missing there) come from the first file
that has them, named in the table.
"""
import argparse
import json
import sys

DEFAULT_GROUPS = {"mem", "xfer", "launch", "stream", "event", "device", "coll"}  # -f without a list
SERIES_PER_API = 1 + 23 + 2
SERIES_PER_PROCESS = 10
GPUS_PER_CLUSTER = 1000


def fmt_bytes(n):
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def fmt_rate(v):
    return f"{v:,.0f}" if v >= 10 else f"{v:,.1f}"


def rows_of(paths):
    rows = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        groups = data.get("groups", {})
        for name, w in data["workloads"].items():
            rates = w.get("calls_per_s", {})
            default = sum(r for api, r in rates.items() if groups.get(api) in DEFAULT_GROUPS)
            rows.append({"label": data["label"], "workload": name, "rates": rates, "default": default,
                         "all": sum(rates.values()), "json": w.get("json"), "cpu": w.get("cpu_cores", {}),
                         "scrape": w.get("exporter_scrape"), "steps": w.get("steps_per_s"),
                         "processes": w.get("processes", 1),
                         "active_default": sum(1 for api, r in rates.items()
                                               if r > 0 and groups.get(api) in DEFAULT_GROUPS)})
    return rows


def per_call(js, key):
    if not js or not js.get("calls") or js.get(key) is None:
        return None
    return js[key] / js["calls"]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--scrape-interval", type=float, default=15)
    ap.add_argument("--bytes-per-sample", type=float, default=2)
    args = ap.parse_args(argv)
    rows = rows_of(args.files)
    if not rows:
        sys.exit("fleet-cost: no workloads in the files")
    fallback = next((r for r in rows if per_call(r["json"], "zstd19_bytes") is not None), None)

    print("### Calls and bytes per call (measured)\n")
    print("| where | workload | calls/s per GPU process, default set | all APIs | steps/s | "
          "JSON bytes/call | zstd -3 | zstd -19 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        sizes = []
        for key in ("bytes", "zstd3_bytes", "zstd19_bytes"):
            v = per_call(r["json"], key)
            sizes.append(f"{v:,.1f}" if v is not None else "–")
        steps = fmt_rate(r["steps"]) if r["steps"] else "–"
        print(f"| {r['label']} | {r['workload']} | {fmt_rate(r['default'])} | {fmt_rate(r['all'])} | {steps} | "
              + " | ".join(sizes) + " |")

    samples_per_hour = 3600 / args.scrape_interval
    print(f"\n### Storage: full trace against metrics only\n")
    print(f"Full trace: default set, JSON Lines. Metrics: one scrape every {args.scrape_interval:g} s, "
          f"{args.bytes_per_sample:g} bytes per stored sample. Cluster: {GPUS_PER_CLUSTER:,} GPUs, one "
          "process each, for a day.\n")
    print("| where | workload | trace per GPU-hour: raw | zstd -3 | zstd -19 | per cluster-day: raw | zstd -3 "
          "| zstd -19 | metric series per GPU process | metrics per GPU-hour | per cluster-day |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        source = r if per_call(r["json"], "bytes") is not None else fallback
        hour = []
        for key in ("bytes", "zstd3_bytes", "zstd19_bytes"):
            v = per_call(source["json"], key) if source else None
            if v is None and fallback:
                # Compressed sizes missing here (no zstd on that host): the fallback's ratio.
                raw = per_call(source["json"], "bytes")
                v = raw * per_call(fallback["json"], key) / per_call(fallback["json"], "bytes") if raw else None
            hour.append(r["default"] * 3600 * v if v is not None else None)
        if r["scrape"]:
            series = r["scrape"]["cuda"] / r["processes"]
            series_note = f"{series:,.0f} (scraped)"
        else:
            series = SERIES_PER_API * r["active_default"] + SERIES_PER_PROCESS
            series_note = f"{series:,.0f} ({r['active_default']} APIs)"
        metrics_hour = series * samples_per_hour * args.bytes_per_sample
        cells = [fmt_bytes(h) if h is not None else "–" for h in hour]
        cells += [fmt_bytes(h * 24 * GPUS_PER_CLUSTER) if h is not None else "–" for h in hour]
        cells += [series_note, fmt_bytes(metrics_hour), fmt_bytes(metrics_hour * 24 * GPUS_PER_CLUSTER)]
        mark = "" if source is r else f" (bytes/call: {source['label']} {source['workload']})"
        print(f"| {r['label']} | {r['workload']}{mark} | " + " | ".join(cells) + " |")

    print("\n### cudatrace's CPU (cores: CPU seconds per second, user + system)\n")
    modes = ["json", "summary", "summary_all_apis", "exporter"]
    print("| where | workload | " + " | ".join(modes) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in modes) + " |")
    for r in rows:
        cells = [f"{r['cpu'][m]:.3f}" if m in r["cpu"] else "–" for m in modes]
        print(f"| {r['label']} | {r['workload']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
