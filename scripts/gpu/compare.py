#!/usr/bin/env python3
"""Compare a cudatrace JSON Lines trace with CUPTI's counts of the same run.

Usage:
  compare.py TRACE.jsonl CUPTI.json [--expected PROGRAM_STDOUT]
             [--baseline CUPTI_UNTRACED.json] [--layer runtime|driver|all]
             [--apis a,b,c] [--traced FILE] [--no-kernel-check]

TRACE.jsonl   cudatrace --json output: "call" records and a final "end" record.
CUPTI.json    written by libcupti_count.so (CUDA_INJECTION64_PATH) in that run.
--expected    the test program's stdout; its last JSON line with an "expected"
              object gives the API calls (and "kernels") the program made.
--baseline    CUPTI counts of an untraced run, shown for reference only.
--traced      the APIs cudatrace traces: one name per line, or JSON (a list of
              names or of objects with "api"/"name" and optional "layer", or
              an object holding such a list under "apis").
--apis        restrict the comparison to these APIs.

Without --traced/--apis the compared APIs are those cudatrace reported at
least once. Names are compared after removing CUPTI's "_vNNNN" version tags;
"_ptsz"/"_ptds" variants are folded into the base API unless cudatrace reports
that API's variants under their own names. Driver ABI suffixes ("_v2") stay.

A compared API matches when cudatrace's count (all calls, or only its
depth-0 calls) equals the program's expected count where the program has one;
otherwise when it equals CUPTI's count, or CUPTI's top-level count (calls not
made inside another API call, i.e. not by the runtime's internals). CUPTI
cannot see the cuInit during which it attaches; the counter library reports
that call under "driver_at_attach" and it is added here. Nor does it see
calls made before its callbacks began or, reliably, after the program's exit
handlers began (its "visible_from_ns" and "exit_ns", cudatrace's clock): an
API also matches when CUPTI's count lies between cudatrace's calls inside that
window and those plus the calls after it. cuGetExportTable and
cudaGetExportTable get no CUPTI callback at all (NO_CUPTI_CALLBACK), and a
library's own runtime reports no cudaRuntimeGetVersion before it initialised
(UNSEEN_BEFORE_RUNTIME_INIT): listed as explained.

Kernels: a launch is a launch record together with the launch records made
inside it on the same thread (a runtime launch and the driver launch it
makes); it is named by the first kernel_mangled among them. Each kernel must
have as many launches as the program expected, or else as CUPTI saw run.

Exit status: 0 all match, 1 a mismatch, 2 bad input.
"""
import argparse
import json
import re
import sys
from collections import Counter, defaultdict

LAYERS = ("runtime", "driver")
VERSION_RE = re.compile(r"_v\d{4,}$")
PT_RE = re.compile(r"_(?:ptsz|ptds)(?=_|$)")
LAUNCH_RE = re.compile(r"Launch(?:Cooperative)?Kernel")


def die(msg):
    print(f"compare.py: {msg}", file=sys.stderr)
    sys.exit(2)


def layer_of(api):
    return "runtime" if api.startswith(("cuda", "__cuda")) else "driver"


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        die(f"cannot read {path}: {e}")


def json_lines(f):
    """(value, line) per non-blank line of an open file; value is None where
    the line is not JSON. Shared with nccl_compare.py."""
    for line in f:
        line = line.strip()
        if not line:
            continue
        try:
            yield json.loads(line), line
        except ValueError:
            yield None, line


def load_expected(path):
    """Last JSON line of the program's stdout that holds an "expected" object."""
    found = None
    try:
        with open(path) as f:
            for obj, _ in json_lines(f):
                if isinstance(obj, dict) and isinstance(obj.get("expected"), dict):
                    found = obj
    except OSError as e:
        die(f"cannot read {path}: {e}")
    if found is None:
        die(f"no JSON line with an \"expected\" object in {path}")
    return found


def load_traced(path):
    """[(api, layer or None)] from a name-per-line file, a JSON list, or JSON
    Lines of objects with "api"/"name" and optional "layer" (the output of
    cudatrace --list-apis --json)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        die(f"cannot read {path}: {e}")
    try:
        items = json.loads(text)
        if isinstance(items, dict):
            items = items.get("apis", [])
    except ValueError:
        items = []
        for ln in text.splitlines():
            ln = ln.strip()
            if not ln or ln.startswith("#"):
                continue
            try:
                items.append(json.loads(ln) if ln[0] in "{\"" else ln)
            except ValueError:
                die(f"{path}: unparsable line: {ln[:80]}")
    out = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, str):
            out.append((item, None))
        elif isinstance(item, dict) and item.get("probed") is False:
            continue  # recorded by its driver call (--list-apis: "recorded")
        elif isinstance(item, dict) and (item.get("api") or item.get("name")):
            out.append((item.get("api") or item.get("name"), item.get("layer")))
    if not out:
        die(f"no API names found in {path}")
    return out


class Trace:
    def __init__(self, path, pid, window=(None, None)):
        self.calls = Counter()      # (layer, api) -> count
        self.nested = Counter()     # same, depth > 0
        self.before = Counter()     # same, entered before CUPTI's callbacks began
        self.after = Counter()      # same, entered after CUPTI's counts were written at exit
        self.launches = []          # launch call records
        self.end = None
        self.records = 0
        self.other_pids = Counter()
        self.bad_lines = 0
        self.other_types = Counter()
        try:
            f = open(path)
        except OSError as e:
            die(f"cannot read {path}: {e}")
        with f:
            for rec, _ in json_lines(f):
                if rec is None:
                    self.bad_lines += 1
                    continue
                kind = rec.get("type")
                if kind == "end":
                    self.end = rec
                elif kind == "call":
                    self.records += 1
                    if pid is not None and rec.get("pid", pid) != pid:
                        self.other_pids[rec.get("pid")] += 1
                        continue
                    api = rec.get("api", "?")
                    key = (rec.get("layer") or layer_of(api), api)
                    self.calls[key] += 1
                    ts = rec.get("ts_ns")
                    if ts is not None and window[0] and ts < window[0]:
                        self.before[key] += 1
                    elif ts is not None and window[1] and ts > window[1]:
                        self.after[key] += 1
                    if rec.get("depth", 0) > 0:
                        self.nested[key] += 1
                    if "kernel" in rec or "kernel_mangled" in rec or LAUNCH_RE.search(api):
                        self.launches.append(rec)
                else:
                    self.other_types[kind] += 1

    def launch_groups(self):
        """One group per launch: a launch record and the launch records made
        inside it on the same thread (e.g. the driver launch that a runtime
        launch makes), outermost first."""
        by_thread = defaultdict(list)
        for r in self.launches:
            by_thread[(r.get("pid"), r.get("tid"))].append(r)
        groups = []
        for recs in by_thread.values():
            recs.sort(key=lambda r: (r.get("ts_ns", 0), -r.get("dur_ns", 0)))
            open_end = -1
            for r in recs:
                end = r.get("ts_ns", 0) + r.get("dur_ns", 0)
                if groups and end <= open_end:
                    groups[-1].append(r)
                    continue
                groups.append([r])
                open_end = end
        return groups


class Namer:
    """Maps API names of all sources to the keys that are compared."""

    def __init__(self, cudatrace_apis):
        # APIs whose _ptsz/_ptds variants cudatrace reports under their own names.
        self.separate = {PT_RE.sub("", VERSION_RE.sub("", a))
                         for a in cudatrace_apis if PT_RE.search(a)}

    def key(self, api):
        base = VERSION_RE.sub("", api)
        folded = PT_RE.sub("", base)
        return base if folded in self.separate else folded


def fold(counts, namer):
    """{(layer, api): n} -> {(layer, key): n}"""
    out = Counter()
    for (layer, api), n in counts.items():
        out[(layer, namer.key(api))] += n
    return out


def cupti_counts(data, namer, suffix=""):
    out = Counter()
    for layer in LAYERS:
        for api, n in (data.get(layer + suffix) or {}).items():
            out[(layer, namer.key(api))] += n
    return out


def table(headers, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    widths[-1] = len(str(headers[-1]))  # last column: long names, not padded

    def line(cells):
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([line(headers), line("-" * w for w in widths)] + [line(r) for r in rows])


# CUPTI has a callback id for these but delivers no callback (0 in every
# program checked, calls made mid-run included; late_runtime makes one):
# nothing to compare with.
NO_CUPTI_CALLBACK = {"cuGetExportTable", "cudaGetExportTable"}
# A runtime linked into a library (cuDNN's) reports none of these calls to
# CUPTI until it initialised, even when CUDA and CUPTI started long before
# (late_runtime makes one such call of each; CUPTI sees the
# cudaDriverGetVersion and cudaGetErrorString, not the cudaRuntimeGetVersion).
UNSEEN_BEFORE_RUNTIME_INIT = {"cudaRuntimeGetVersion"}


def verdict(total, top, expected, cupti, cupti_top, before=0, after=0):
    """'yes [what cudatrace's count equals]' or 'NO'. The program's own count,
    where it has one, is the truth; CUPTI's otherwise. CUPTI sees no call made
    before its callbacks began (the runtime's start-up before cuInit) and
    may miss those made after the program's exit handlers began (CUDA's
    teardown): its count must lie between the calls inside that window and
    those plus the ones after."""
    if expected is not None:
        if expected not in (total, top):
            return "NO"
        why = "expected" if expected == total else "expected=top-level"
        return f"yes [{why}{'' if cupti == expected else '; CUPTI differs'}]"
    if total == cupti:
        return "yes [cupti]"
    if cupti_top is not None and total == cupti_top:
        return "yes [cupti top-level]"
    inside = total - before - after
    if (before or after) and inside <= cupti <= inside + after:
        return f"yes [cupti, {before} before it attached, {after} in teardown]"
    return "NO"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("cupti")
    ap.add_argument("--expected")
    ap.add_argument("--baseline")
    ap.add_argument("--layer", choices=("runtime", "driver", "all"), default="all")
    ap.add_argument("--apis", help="comma-separated API names")
    ap.add_argument("--traced", metavar="FILE")
    ap.add_argument("--no-kernel-check", action="store_true",
                    help="show the kernel table but ignore it for the exit status")
    args = ap.parse_args()

    cupti = load_json(args.cupti)
    pid = cupti.get("pid")
    trace = Trace(args.trace, pid, (cupti.get("visible_from_ns"), cupti.get("exit_ns")))
    program = load_expected(args.expected) if args.expected else None
    baseline = load_json(args.baseline) if args.baseline else None
    layers = LAYERS if args.layer == "all" else (args.layer,)
    problems = []
    explained = []

    # ---- header --------------------------------------------------------
    print(f"trace: {args.trace}: {trace.records} call records, "
          f"{sum(trace.calls.values())} from pid {pid}")
    if trace.end is None:
        problems.append("trace has no \"end\" record (cudatrace did not finish)")
    else:
        e = trace.end
        print(f"  end: calls={e.get('calls')} lost={e.get('lost')} "
              f"unfinished={e.get('unfinished')}")
        if e.get("calls") is not None and e.get("calls") != trace.records:
            print(f"  WARNING: end.calls={e.get('calls')} but {trace.records} call records read")
        if e.get("lost"):
            print(f"  WARNING: cudatrace lost {e.get('lost')} records")
    if trace.other_pids:
        print(f"  note: {sum(trace.other_pids.values())} records from other pids "
              f"{sorted(trace.other_pids)} not counted")
    if trace.bad_lines:
        print(f"  WARNING: {trace.bad_lines} unparsable lines")
    print(f"cupti: {args.cupti}: pid {pid}, CUPTI version {cupti.get('cupti_version')}, "
          f"{len(cupti.get('kernels') or {})} kernel names, "
          f"activity records dropped {cupti.get('activity_dropped', 0)}")
    if cupti.get("error"):
        print(f"  WARNING: CUPTI counter error: {cupti['error']} (its counts may be incomplete)")
    for layer in LAYERS:
        if cupti.get(layer + "_at_attach"):
            print(f"  note: added to CUPTI's {layer} counts, calls it cannot report "
                  f"(in flight when it attached): {cupti[layer + '_at_attach']}")
    if program:
        extra = {k: v for k, v in program.items() if k not in ("expected", "kernels")}
        print(f"program: {args.expected}: {json.dumps(extra)}")

    # ---- API counts ----------------------------------------------------
    namer = Namer(api for _, api in trace.calls)
    ct = fold(trace.calls, namer)
    ct_nested = fold(trace.nested, namer)
    ct_before = fold(trace.before, namer)
    ct_after = fold(trace.after, namer)
    cu = cupti_counts(cupti, namer) + cupti_counts(cupti, namer, "_at_attach")
    cu_nested = cupti_counts(cupti, namer, "_nested")
    base = (cupti_counts(baseline, namer) + cupti_counts(baseline, namer, "_at_attach")
            if baseline else None)
    exp = Counter()
    if program:
        for api, n in program["expected"].items():
            exp[(layer_of(api), namer.key(api))] += n

    if args.traced:
        compared = {(layer or layer_of(api), namer.key(api))
                    for api, layer in load_traced(args.traced)}
        if args.apis:
            wanted = {namer.key(a.strip()) for a in args.apis.split(",") if a.strip()}
            compared = {k for k in compared if k[1] in wanted}
    elif args.apis:
        compared = {(layer_of(a.strip()), namer.key(a.strip()))
                    for a in args.apis.split(",") if a.strip()}
    else:
        compared = {k for k, n in ct.items() if n}
    compared = {k for k in compared if k[0] in layers}
    # The runtime's registration hooks (__cudaRegisterFunction, __cudaGetKernel)
    # are not API calls: CUPTI has no callback for them, so nothing to compare.
    compared = {k for k in compared if not k[1].startswith("__cuda")}

    headers = ["API", "layer", "cudatrace", "(nested)", "CUPTI", "(nested)", "expected"]
    if base is not None:
        headers.append("CUPTI untraced")
    headers.append("match?")

    def row(k, check):
        c_top = cu[k] - cu_nested[k]
        r = [k[1], k[0], ct[k], ct_nested[k] or "", cu[k], cu_nested[k] or "",
             exp[k] if k in exp else "-"]
        if base is not None:
            r.append(base[k])
        if check:
            v = verdict(ct[k], ct[k] - ct_nested[k], exp[k] if k in exp else None, cu[k],
                        c_top if cu_nested[k] else None, ct_before[k], ct_after[k])
            if v == "NO" and k[1] in NO_CUPTI_CALLBACK and cu[k] == 0:
                v = "explained [no CUPTI callback]"
                explained.append(f"{k[0]} {k[1]}: cudatrace {ct[k]}, CUPTI 0: CUPTI delivers no callback for it")
            if v == "NO" and k[1] in UNSEEN_BEFORE_RUNTIME_INIT and ct[k] > cu[k]:
                v = "explained [before its runtime initialised]"
                explained.append(f"{k[0]} {k[1]}: cudatrace {ct[k]}, CUPTI {cu[k]}: CUPTI misses a library's own "
                                 "runtime's calls before that runtime initialised")
            if v == "NO":
                problems.append(f"{k[0]} {k[1]}: cudatrace {ct[k]}, CUPTI {cu[k]} "
                                f"(top-level {c_top})" +
                                (f", expected {exp[k]}" if k in exp else ""))
            r.append(v)
        else:
            r.append("-")
        return r

    # Traced APIs that nobody saw called match trivially; only count them.
    unused = {k for k in compared if not (ct[k] or cu[k] or exp[k])}
    order = sorted(compared - unused, key=lambda k: (LAYERS.index(k[0]), k[1]))
    print(f"\nAPI calls compared ({len(order)}; {len(unused)} more compared APIs "
          f"were called 0 times by all accounts):")
    print(table(headers, [row(k, True) for k in order]) if order else "  (none)")

    others = sorted({k for k in set(cu) | set(exp) | set(ct) if k[0] in layers} - compared,
                    key=lambda k: (LAYERS.index(k[0]), k[1]))
    if others:
        print(f"\nNot compared (not in the traced set; {len(others)}):")
        print(table(headers, [row(k, False) for k in others]))

    # ---- kernels -------------------------------------------------------
    def is_named(r):
        return r.get("kernel") not in (None, "?")

    def mangled(r):
        return r.get("kernel_mangled") if r.get("kernel_mangled") not in (None, "", "?") else None

    groups = trace.launch_groups()
    named_groups = sum(1 for g in groups if any(is_named(r) for r in g))
    print(f"\nKernel launches: {len(groups)} launches, "
          f"{100.0 * named_groups / len(groups) if groups else 0.0:.1f}% named")
    for layer in LAYERS:
        recs = [r for r in trace.launches if (r.get("layer") or layer_of(r.get("api", ""))) == layer]
        if recs:
            unnamed = [r for r in recs if not is_named(r)]
            print(f"  {layer} launch records: {len(recs)}, "
                  f"{100.0 * (len(recs) - len(unnamed)) / len(recs):.1f}% named")
            if unnamed:
                ex = unnamed[0]
                print(f"  WARNING: {len(unnamed)} unnamed {layer} launch records, e.g. "
                      f"{ex.get('api')} ts_ns={ex.get('ts_ns')} args={json.dumps(ex.get('args'))}")
    # A launch is attributed to the first kernel_mangled found, outermost first.
    # A launch that failed (its outermost record's status) ran nothing: CUPTI
    # counts the kernels that ran.
    failed = [g for g in groups if g[0].get("ret", 0) != 0]
    if failed:
        print(f"  {len(failed)} launches failed (status {sorted({g[0].get('ret') for g in failed})}): "
              "not compared with the kernels that ran")
    ct_k = Counter(next(filter(None, map(mangled, g)), "(unnamed)") for g in groups if g[0].get("ret", 0) == 0)
    recs_k = {layer: Counter(mangled(r) or "(unnamed)" for r in trace.launches
                             if (r.get("layer") or layer_of(r.get("api", ""))) == layer)
              for layer in LAYERS}
    cu_k = Counter(cupti.get("kernels") or {})
    exp_k = Counter((program or {}).get("kernels") or {})
    names = sorted(set(cu_k) | set(ct_k) | set(exp_k))
    krows = []
    for name in names:
        want = exp_k[name] if name in exp_k else cu_k[name]
        ok = ct_k[name] == want
        if not ok and not args.no_kernel_check:
            problems.append(f"kernel {name}: cudatrace {ct_k[name]} launches, "
                            f"CUPTI {cu_k[name]} executed" +
                            (f", expected {exp_k[name]}" if name in exp_k else ""))
        krows.append([ct_k[name], recs_k["runtime"][name], recs_k["driver"][name], cu_k[name],
                      exp_k[name] if name in exp_k else "-", "yes" if ok else "NO", name])
    if krows:
        print(table(["cudatrace", "(runtime recs)", "(driver recs)", "CUPTI", "expected",
                     "match?", "kernel (mangled)"], krows))

    # ---- verdict -------------------------------------------------------
    if explained:
        print(f"\nDifferences explained ({len(explained)}):")
        for e in explained:
            print(f"  - {e}")
    if problems:
        print(f"\nRESULT: MISMATCH ({len(problems)})")
        for p in problems:
            print(f"  - {p}")
        return 1
    print("\nRESULT: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
