#!/usr/bin/env python3
"""Checks cudatrace's stream model against stream_events.cu on a GPU.

Usage: check_streams.py TRACE_TXT TRACER_STDERR PROGRAM_STDOUT TIMELINE_JSON

TRACE_TXT is cudatrace's text output (-o), PROGRAM_STDOUT the program's JSON
line saying what cudatrace should print, TIMELINE_JSON the --perfetto file.
Prints what it compared; exits 1 on any mismatch.
"""
import json
import re
import sys

API = re.compile(r"\s(cu[A-Za-z0-9_]+)\s")


def annotations(trace_text):
    out = []
    for line in trace_text.splitlines():
        for marker in (" waited: ", " waits: "):
            at = line.find(marker)
            if at < 0:
                continue
            api = API.search(line)
            out.append("%s |%s" % (api.group(1) if api else "?", line[at:]))
    return out


def check_timeline(path, problems):
    with open(path) as f:
        doc = json.load(f)  # the whole point: it must parse
    events = doc["traceEvents"]
    lanes = sorted(e["args"]["name"] for e in events
                   if e.get("ph") == "M" and e.get("name") == "thread_name"
                   and e["args"]["name"].startswith("stream "))
    print("timeline: %d events, stream lanes: %s" % (len(events), ", ".join(lanes)))
    for lane in ("stream s1", "stream s2", "stream s3"):
        if lane not in lanes:
            problems.append("timeline: no lane %r" % lane)
    starts = {e["id"]: e["name"] for e in events if e.get("ph") == "s"}
    ends = [e for e in events if e.get("ph") == "f"]
    consumed = sorted(starts.get(e["id"], "?") for e in ends)
    print("timeline: flows from event records: %s" % consumed)
    if consumed != ["e1", "e2", "e2"]:
        problems.append("timeline: flows %s, expected e1, e2, e2" % consumed)
    counter = [e["args"]["bytes"] for e in events if e.get("ph") == "C" and e.get("name") == "device memory"]
    print("timeline: device memory counter: max %s, last %s" % (max(counter, default=None), counter[-1:]))
    if not counter or max(counter) != 8 << 20 or counter[-1] != 0:
        problems.append("timeline: device memory counter %s, expected a peak of 8 MiB ending at 0" % counter)


def main():
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    trace_path, err_path, program_path, timeline_path = sys.argv[1:]
    with open(program_path) as f:
        expected = json.loads(f.read().strip().splitlines()[-1])
    with open(trace_path) as f:
        got = annotations(f.read())
    with open(err_path) as f:
        stderr = f.read()
    problems = []

    print("annotations, expected (program) vs printed (cudatrace):")
    for i in range(max(len(expected["annotations"]), len(got))):
        want = expected["annotations"][i] if i < len(expected["annotations"]) else "-"
        have = got[i] if i < len(got) else "-"
        print("  %s %s\n  %s %s" % ("ok  " if want == have else "DIFF", want, "    ", have))
        if want != have:
            problems.append("annotation %d differs" % i)

    warnings = [l for l in stderr.splitlines() if "pageable host memory" in l]
    print("pageable warnings: %d (expected %d)" % (len(warnings), expected["pageable_warnings"]))
    for w in warnings:
        print("  " + w)
    if len(warnings) != expected["pageable_warnings"]:
        problems.append("pageable warnings: %d" % len(warnings))
    elif not all("(%s+" % expected["pageable_function"] in w for w in warnings):
        problems.append("pageable warning does not name %s" % expected["pageable_function"])

    try:
        check_timeline(timeline_path, problems)
    except (OSError, ValueError, KeyError) as e:
        problems.append("timeline %s: %s" % (timeline_path, e))

    for p in problems:
        print("FAILED: " + p)
    print("streams: " + ("ok" if not problems else "%d problem(s)" % len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
