#!/usr/bin/env python3
"""Every output block of README.md, docs/*.md and the man page is true: it
is re-run here and compared, or it says that it is a quoted run (issue 41).

A fenced block (man page: .EX/.EE) is
  - checked when its first line is `$ sudo build/...` or `$ build/...` (more
    `$ ` lines: more commands, run in order, each followed by its output: a
    `jq` of the file the first wrote), or
    when the line before it is `<!-- check: COMMAND -->` (man page:
    `.\\" check: COMMAND`); such a block may begin with a `$ ` line shown to
    the reader, which is not compared;
  - quoted when the line before it is `<!-- quoted: WHERE, DATE, not re-run -->`
    (a GPU run that cannot be repeated here);
  - not output when the line before it is `<!-- not output: WHY -->` (a
    diagram), or its language is one typed by the reader (sh, bash, yaml,
    promql) or a JSON fragment (json, no whole trace line).
Any other block fails the test: nothing shows output that nothing checks.

Checked commands run with bash, without `sudo`, in a scratch directory
where `build` is the build directory and every other name of the source
tree is the source's, so that `-o run.jsonl` writes nothing into the tree.
The block holds the command's standard output, then its standard error.
Before comparing, both sides are masked the same way, for what differs
from run to run and nothing else: times and durations, PIDs and TIDs (as
<PID1>, <PID2>, ... in order of appearance, so which call is whose still
counts), user-space addresses (ASLR: hex of 2^40 or more), the hashes of
NCCL unique ids (random), percentages,
probe hits (they depend on the kernel: uprobe sessions), and the time,
percent and PID columns of tables (their widths follow the numbers, so
table cells are compared without their padding). Latency histograms' rows
are compared by their presence only.

Usage: doc_blocks_test.py [--source DIR] [--build DIR] [--update] [-v] [FILE...]
  --update  rewrite each checked block that differs from a fresh run (then review git diff)
  FILE      only these files (paths relative to the source)
Exit status: 0 every block true, 1 a block is not, 77 skipped (needs root
and a built build/cudatrace; the blocks are still checked for markers).
"""
import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
INPUT_LANGUAGES = {"sh", "bash", "yaml", "promql", "json"}
MARKER = re.compile(r"^(?:<!--|\.\\\")\s*(check|quoted|not output):\s*(.*?)\s*(?:-->)?\s*$")
TIMEOUT_S = 120


class Block:
    def __init__(self, path, line, kind, lang="", marker=None, body=None, start=0, end=0):
        self.path, self.line, self.kind, self.lang, self.marker = path, line, kind, lang, marker
        self.body = body or []       # the lines between the fences, as written (roff: escaped)
        self.start, self.end = start, end  # line indexes of the body in the file: [start, end)

    def where(self):
        return f"{self.path}:{self.line}"


# ---- Finding the blocks

def roff_unescape(line):
    line = line.replace("\\&", "").replace("\\(aq", "'").replace("\\-", "-")
    return line.replace("\\e", "\\").replace("\\\\", "\\")


def roff_escape(line):
    line = line.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + line if line[:1] in (".", "'") else line


def find_blocks(path, text):
    """The fenced blocks of a markdown file or the .EX blocks of a man page."""
    lines = text.split("\n")
    roff = path.endswith(".8")
    blocks, i = [], 0
    while i < len(lines):
        opening = lines[i] in (".EX", ".nf") if roff else re.match(r"^```([\w-]*)\s*$", lines[i])
        if not opening:
            i += 1
            continue
        lang = "" if roff else opening.group(1)
        close = (".EE", ".fi") if roff else ("```",)
        end = i + 1
        while end < len(lines) and lines[end].rstrip() not in close:
            end += 1
        marker = MARKER.match(lines[i - 1]) if i > 0 else None
        body = lines[i + 1:end]
        blocks.append(Block(path, i + 1, classify(lang, marker, body, roff), lang,
                            (marker.group(1), marker.group(2)) if marker else None, body, i + 1, end))
        i = end + 1
    return blocks


def classify(lang, marker, body, roff):
    if marker:
        return {"check": "checked", "quoted": "quoted", "not output": "not output"}[marker.group(1)]
    first = roff_unescape(body[0]) if roff and body else (body[0] if body else "")
    if first.startswith("$ "):
        return "checked" if is_build_command(segments(body, roff)[0][0]) else "unmarked"
    if lang in INPUT_LANGUAGES and not (lang == "json" and any(l.startswith('{"type":') for l in body)):
        return "not output"
    return "unmarked"


def is_build_command(cmd):
    return re.match(r"^(sudo )?build/", cmd) is not None


def segments(body, roff):
    """[(command, output lines)] of a block of `$ ` lines."""
    out = []
    for raw in body:
        line = roff_unescape(raw) if roff else raw
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out:
            out[-1][1].append(line)
    return out


def expected_runs(block):
    """[(command to run, expected output lines)] of a checked block."""
    roff = block.path.endswith(".8")
    if block.marker:  # the marker names the command; a `$ ` line is for the reader
        body = [roff_unescape(l) if roff else l for l in block.body]
        if body and body[0].startswith("$ "):
            body = body[1:]
        return [(block.marker[1], body)]
    return segments(block.body, roff)


# ---- Masking what varies between runs

HEX = re.compile(r"0x[0-9a-fA-F]+")
TIME_UNIT = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:ns|us|µs|ms|s)\b")
PERCENT = re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s?%")
TRACE_LINE = re.compile(r"^(\d+\.\d{6}) +(.+?) +(\d+) +(\d+) (\s*)(\S+) +([\d.]+|-) (.*)$")
# An ncclUniqueId's hash (comm_id): random in every run.
NCCL_ID = re.compile(r"(?<![\w+])[0-9a-f]{16}(?![\w+])")
DASHES = re.compile(r"^ *-+(?: +-+)* *$")
HIST_ROW = re.compile(r"^\s*\d+ -> \d+\s+: \d+\s+\|[* ]*\|$")
BY_RANGE_HEADER = re.compile(r"^\s+Self ms\s+Calls\s+Launches\s+Bytes copied\s+Total ms\s+Total launches\s+Range$")
VARYING_COLUMN = re.compile(r"\((?:ns|us|ms|s|%)\)|GB/s|^PID$|^Address$| ms$")
# Only there on some runs of a virtual machine (text_writer.cpp, append_cost_text).
VOLATILE = re.compile(r"^cudatrace: here a probed call takes ")
# JSON keys whose values vary: times, durations, rates, shares, ids of processes.
# Probe hits too, as in the text: they depend on the kernel (uprobe sessions).
VARYING_KEY = re.compile(r"(?:_ns|_us|_ms|_s|_pct|_ratio|_gbps|_per_s|_hits)$|^(?:pid|tid)$")


class Masker:
    def __init__(self):
        self.pids = {}

    def pid(self, n):
        return f"<PID{self.pids.setdefault(str(n), len(self.pids) + 1)}>"

    def addresses(self, text):
        return HEX.sub(lambda m: "<ADDR>" if int(m.group(0), 16) >= 1 << 40 else m.group(0), text)

    def free_text(self, text):
        text = re.sub(r"(\(PID |\bpid |_pid=|\bPID |\btid |\bprocess )(\d+)", lambda m: m.group(1) + self.pid(m.group(2)), text)
        text = NCCL_ID.sub("<ID>", text)
        text = re.sub(r"\([\d,]+ probe hits\)", "(<N> probe hits)", text)
        text = TIME_UNIT.sub("<TIME>", self.addresses(text))
        return PERCENT.sub("<PCT>", text)

    def json_value(self, key, v):
        if isinstance(v, dict):
            return {k: self.json_value(k, x) for k, x in v.items()}
        if isinstance(v, list):
            return [self.json_value(key, x) for x in v]
        if key in ("pid", "tid") and isinstance(v, int):
            return self.pid(v)
        if VARYING_KEY.search(key) and isinstance(v, (int, float)):
            return "<N>"
        if isinstance(v, str):
            return self.free_text(v)
        return v

    def table(self, header, dashes, rows):
        spans = [m.span() for m in re.finditer(r"-+", dashes)]

        def cells(line):
            out = [line[a:b] if i + 1 < len(spans) else line[a:] for i, (a, b) in enumerate(spans)]
            return [c.strip() for c in out]

        names = cells(header)
        units = []  # a row and the stack frames under it
        for row in rows:
            if re.match(r"^\s+#\d+\s+0x", row) and units:
                units[-1].append(self.free_text(row.strip()))
                continue
            masked = []
            for name, cell in zip(names, cells(row)):
                if VARYING_COLUMN.search(name) and cell not in ("-", "0"):
                    cell = self.pid(cell) if name == "PID" else "<N>"
                masked.append(self.free_text(cell))
            units.append([" | ".join(masked)])
        # Rows are ordered by a time (the API table by total time): their order varies.
        return [" | ".join(names)] + [line for unit in sorted(units) for line in unit]

    def lines(self, lines):
        out, i = [], 0
        lines = [l.rstrip() for l in lines if not VOLATILE.match(l)]
        while lines and not lines[-1]:
            lines.pop()
        while i < len(lines):
            line = lines[i]
            if i + 1 < len(lines) and line.strip() and DASHES.match(lines[i + 1]):
                end = i + 2
                while end < len(lines) and lines[end].strip():
                    end += 1
                out += self.table(line, lines[i + 1], lines[i + 2:end])
                i = end
                continue
            if BY_RANGE_HEADER.match(line):  # --by-range: no dashes; its times vary, its rows are ordered by them
                end = i + 1
                while end < len(lines) and re.match(r"^\s+([\d.]+|-)\s+\d", lines[end]):
                    end += 1
                rows = [re.split(r"\s+", row.strip(), maxsplit=6) for row in lines[i + 1:end]]
                out += [" ".join(line.split())] + sorted(
                    " | ".join("<N>" if k in (0, 4) and f != "-" else f for k, f in enumerate(r)) for r in rows)
                i = end
                continue
            if HIST_ROW.match(line):
                while i + 1 < len(lines) and HIST_ROW.match(lines[i + 1]):
                    i += 1
                out.append("<histogram rows>")
            elif line.startswith("{"):
                try:
                    value = json.loads(line)
                    out.append(json.dumps(self.json_value("", value), ensure_ascii=False, separators=(",", ":")))
                except ValueError:
                    out.append(self.free_text(line))
            elif m := TRACE_LINE.match(line):
                _, comm, pid, tid, indent, api, lat, rest = m.groups()
                lat = "-" if lat == "-" else "<LAT>"
                out.append(f"<TIME> {comm} {self.pid(pid)} {self.pid(tid)} {indent}{api} {lat} {self.free_text(rest)}")
            else:
                out.append(self.free_text(line))
            i += 1
        return out


def same(expected, actual):
    return Masker().lines(expected) == Masker().lines(actual)


# ---- Running

def scratch_tree(source, build):
    """A directory that looks like the source tree with `build` the build directory."""
    tmp = tempfile.mkdtemp(prefix="cudatrace-doc-blocks-")
    for name in os.listdir(source):
        if name != "build" and not name.startswith("."):
            os.symlink(os.path.join(source, name), os.path.join(tmp, name))
    os.symlink(os.path.abspath(build), os.path.join(tmp, "build"))
    return tmp


def run(command, cwd):
    cmd = re.sub(r"(^|[;&|(]\s*)sudo ", r"\1", command)  # root already
    env = dict(os.environ, LC_ALL="C.UTF-8", TZ="UTC")
    env.pop("COLUMNS", None)
    p = subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, env=env, timeout=TIMEOUT_S)
    out = p.stdout.decode("utf-8", "replace")
    if out and not out.endswith("\n"):
        out += "\n"
    out = (out + p.stderr.decode("utf-8", "replace")).rstrip("\n")
    return out.split("\n") if out else []


def rewrite(block, actual_runs):
    """The block's body with its outputs replaced by fresh ones."""
    roff = block.path.endswith(".8")
    esc = roff_escape if roff else (lambda l: l)
    if block.marker:
        shown = block.body[:1] if block.body and (roff_unescape(block.body[0]) if roff else block.body[0]).startswith("$ ") else []
        return shown + [esc(l.rstrip()) for l in actual_runs[0]]
    body = []
    for (command, _), lines in zip(segments(block.body, roff), actual_runs):
        body.append(esc("$ " + command))
        body += [esc(l.rstrip()) for l in lines]
    return body


# ---- Self-test of the masking: what varies passes, a hand edit fails

def self_test():
    a = ["TIME(s)      COMM                 PID     TID API                             LAT(us) RET ARGS",
         "0.197491     real_app_shared    12295   12295 cudaMalloc                        0.429 0 devPtr=0xd000001000 size=1048576 src=0x55cbe69f61a0",
         "0.197495     real_app_shared    12295   12296   cuMemAlloc_v2                       - - dptr=0xd000001000",
         "cudatrace: added ≈ 0.019 ms of CPU time to real_app_shared (PID 12295), 0.8 % of its CPU time while traced (34 probe hits)",
         "",
         " Time (%)  Total Time (ns)  Num Calls  Name",
         " --------  ---------------  ---------  ----------",
         "     92.8        2,099,551          1  cudaMalloc",
         "",
         '{"type":"call","ts_ns":6634232334702,"pid":5270,"tid":5270,"api":"cudaMalloc","dur_ns":377,"ret":35}']
    b = ["TIME(s)      COMM                 PID     TID API                             LAT(us) RET ARGS",
         "0.165941     real_app_shared     5250    5250 cudaMalloc                       94.439 0 devPtr=0xd000001000 size=1048576 src=0x56043d7181a0",
         "0.165945     real_app_shared     5250    5251   cuMemAlloc_v2                       - - dptr=0xd000001000",
         "cudatrace: added ≈ 1.5 ms of CPU time to real_app_shared (PID 5250), 12.0 % of its CPU time while traced (36 probe hits)",
         "",
         " Time (%)  Total Time (ns)  Num Calls  Name",
         " --------  ---------------  ---------  ----------",
         "    100.0              551          1  cudaMalloc",
         "",
         '{"type":"call","ts_ns":1,"pid":4,"tid":4,"api":"cudaMalloc","dur_ns":3,"ret":35}']
    failures = []
    if not same(a, b):
        failures.append("what varies made a difference:\n" + "\n".join(
            difflib.unified_diff(Masker().lines(a), Masker().lines(b), lineterm="")))
    edits = [(1, "cudaMalloc ", "cudaFree   "), (1, "size=1048576", "size=1048577"), (1, " 0 devPtr", " 2 devPtr"),
             (2, "    - -", "0.500 -"), (2, "12296", "12295"), (2, "   cuMem", " cuMem"), (3, "PID 12295", "PID 1"),
             (7, "      1  cuda", "      2  cuda"), (9, '"ret":35', '"ret":0'), (1, "0xd000001000", "0xd000002000")]
    for row, old, new in edits:
        edited = list(a)
        edited[row] = edited[row].replace(old, new, 1)
        if edited[row] == a[row] or same(a, edited):
            failures.append(f"a hand edit passed: line {row}: {old!r} -> {new!r}")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--build", default=None, help="the build directory (default: SOURCE/build)")
    ap.add_argument("--update", action="store_true", help="rewrite the checked blocks from fresh runs")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    source = os.path.abspath(args.source)
    build = os.path.abspath(args.build or os.path.join(source, "build"))

    problems = self_test()
    names = args.files or (["README.md", "docs/cudatrace.8"] +
                           sorted("docs/" + f for f in os.listdir(os.path.join(source, "docs")) if f.endswith(".md")))
    files = {n: open(os.path.join(source, n), encoding="utf-8").read() for n in names}
    blocks = [b for n in names for b in find_blocks(n, files[n])]
    for b in blocks:
        if b.kind == "unmarked":
            problems.append(f"{b.where()}: an output block that is neither checked nor marked quoted or not output "
                            "(see tests/scripts/doc_blocks_test.py)")
    checked = [b for b in blocks if b.kind == "checked"]
    counts = {k: sum(b.kind == k for b in blocks) for k in ("checked", "quoted", "not output")}
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    if os.geteuid() != 0 or not os.access(os.path.join(build, "cudatrace"), os.X_OK):
        print(f"skipped: re-running the {len(checked)} checked blocks needs root and {build}/cudatrace "
              f"(markers are in order: {counts})")
        sys.exit(SKIP)

    tree = scratch_tree(source, build)
    try:
        updated = {}
        for b in checked:
            runs = expected_runs(b)
            actual = [run(cmd, tree) for cmd, _ in runs]
            if args.verbose:
                print(f"{b.where()}: {' ; '.join(c for c, _ in runs)}")
            if args.update:  # only what changed: a block that still holds keeps its numbers (and a quiet diff)
                if not all(same(expected, got) for (_, expected), got in zip(runs, actual)):
                    updated.setdefault(b.path, []).append((b, rewrite(b, actual)))
                continue
            for (cmd, expected), got in zip(runs, actual):
                if not same(expected, got):
                    diff = difflib.unified_diff(Masker().lines(expected), Masker().lines(got), "the block", "a run now",
                                                lineterm="")
                    problems.append(f"{b.where()}: `{cmd}` prints something else (masked; --update rewrites it):\n" +
                                    "\n".join(diff))
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    for path, changes in updated.items():
        lines = files[path].split("\n")
        for b, body in sorted(changes, key=lambda c: -c[0].start):  # from the end: indexes stay valid
            lines[b.start:b.end] = body
        with open(os.path.join(source, path), "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        print(f"updated {len(changes)} blocks of {path}")
    if problems:
        print("\n\n".join(problems))
        sys.exit(1)
    if not args.update:
        print(f"{counts['checked']} checked blocks true, {counts['quoted']} quoted, {counts['not output']} not "
              f"output in {len(names)} files")


if __name__ == "__main__":
    main()
