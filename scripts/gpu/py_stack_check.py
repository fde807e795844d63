#!/usr/bin/env python3
"""--py-stack on a GPU host (issue 39, docs/python.md): an HF GPT-2 decode
built from GPT2Config() (random weights, nothing downloaded) plus a few
pageable torch.randn(...).to("cuda") copies, under `--py-stack --summary` and
`--py-stack --json`. Prints the summary's Python-site tables, the pageable
warnings' lines, the fraction of the main thread's records that carry a
py_stack, and PASS/FAIL checks: transformers' modeling_gpt2.py lines appear,
the pageable copies name this script's own lines.

  sudo python3 scripts/gpu/py_stack_check.py --cudatrace build/install/cudatrace --python python3
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

PROGRAM = r'''
import torch
from transformers import GPT2Config, GPT2LMHeadModel

def pageable_copies():
    for i in range(4):
        x = torch.randn(1024, 1024).to("cuda", non_blocking=True)  # PAGEABLE_LINE
    torch.cuda.synchronize()

def decode():
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).cuda().eval()
    ids = torch.randint(0, 50257, (1, 16), device="cuda")
    with torch.no_grad():
        model.generate(ids, max_new_tokens=16, do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()

pageable_copies()
decode()
'''


def run(cmd, timeout):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"FAIL: timed out after {timeout} s: {' '.join(cmd)}")
        sys.exit(1)
    return p


def section(text, title):
    start = text.find(title)
    if start < 0:
        return ""
    table = text.find("\n\n", start)  # the title, a blank line, the table, a blank line
    end = text.find("\n\n", table + 2) if table >= 0 else -1
    return text[start:end if end >= 0 else None]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cudatrace", default="build/install/cudatrace")
    ap.add_argument("--python", default="python3")
    ap.add_argument("--timeout", type=int, default=600)
    args = ap.parse_args()
    checks = []

    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "py_stack_gpt2.py")
        with open(script, "w") as f:
            f.write(PROGRAM)
        pageable_line = next(i + 1 for i, l in enumerate(open(script).read().splitlines()) if "PAGEABLE_LINE" in l)

        # 1. --summary: the Python-site tables and the pageable warnings.
        p = run([args.cudatrace, "--py-stack", "--summary", "--", args.python, script], args.timeout)
        out = p.stdout + p.stderr
        print(f"== cudatrace --py-stack --summary (exit {p.returncode})")
        for title in ("Synchronisation by Python call site", "Device allocations by Python call site",
                      "Host-to-device copies by Python call site", "Kernel launches by Python call site"):
            print(section(out, title) or f"(no table: {title})")
            print()
        warnings = [l for l in out.splitlines() if "pageable host memory" in l]
        print("== pageable warnings")
        print("\n".join(warnings) or "(none)")
        print("\n== py_unreadable, py_unnamed / interpreter lines")
        print("\n".join(l for l in out.splitlines() if "py-stack" in l or "Python" in l and "cudatrace:" in l) or "(none)")
        checks.append(("summary exits 0", p.returncode == 0))
        checks.append(("the tables name modeling_gpt2.py", "modeling_gpt2.py:" in out))
        own = f"py_stack_gpt2.py:{pageable_line} pageable_copies"
        checks.append((f"a pageable warning names {own}", any(own in w for w in warnings)))
        checks.append((f"the host-to-device table names {own}",
                       own in section(out, "Host-to-device copies by Python call site")))

        # 2. --json: the fraction of the main thread's records with a py_stack.
        trace = os.path.join(tmp, "trace.jsonl")
        p = run([args.cudatrace, "--py-stack", "--json", "-o", trace, "--", args.python, script], args.timeout)
        calls, main_tid, with_stack, gpt2 = [], None, 0, 0
        with open(trace) as f:
            for line in f:
                j = json.loads(line)
                if j.get("type") != "call":
                    continue
                calls.append(j)
                if main_tid is None:
                    main_tid = j["pid"]  # the main thread's tid is the pid
        main = [c for c in calls if c["tid"] == main_tid]
        with_stack = sum(1 for c in main if c.get("py_stack"))
        # An unnamed frame (its code object freed or replaced before it was read) has null fields.
        gpt2 = sum(1 for c in calls if any("modeling_gpt2.py" in (fr["file"] or "") for fr in c.get("py_stack", [])))
        unnamed = sum(1 for c in calls for fr in c.get("py_stack", []) if fr["func"] is None)
        other = [c for c in calls if c["tid"] != main_tid]
        print(f"\n== cudatrace --py-stack --json (exit {p.returncode}): {len(calls)} calls, main thread {len(main)}, "
              f"{with_stack} of them with a py_stack ({100.0 * with_stack / max(1, len(main)):.2f} %); "
              f"{gpt2} calls with a modeling_gpt2.py frame; other threads: {len(other)} calls, "
              f"{sum(1 for c in other if c.get('py_stack'))} with a py_stack; {unnamed} unnamed frames")
        sites = {}
        for c in main:
            if c.get("py_stack"):
                fr = c["py_stack"][0]
                key = "?" if fr["func"] is None else f"{os.path.basename(fr['file'])}:{fr['line']} {fr['func']}"
                sites[key] = sites.get(key, 0) + 1
        print("top innermost sites:")
        for key, n in sorted(sites.items(), key=lambda kv: -kv[1])[:10]:
            print(f"  {n:8} {key}")
        checks.append(("json exits 0", p.returncode == 0))
        checks.append(("most main-thread records carry a py_stack", with_stack >= 0.9 * max(1, len(main))))
        checks.append(("json frames name modeling_gpt2.py", gpt2 > 0))
        checks.append(("named frames carry lines",
                       all(fr["line"] > 0 for c in main for fr in c.get("py_stack", [])[:1] if fr["func"] is not None)))

    print("\n== checks")
    for name, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}: {name}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
