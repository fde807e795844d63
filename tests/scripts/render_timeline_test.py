#!/usr/bin/env python3
"""Checks scripts/render-timeline.py on tests/data/timeline-edges.json (a real
`cudatrace --perfetto` of `streams_app edges`): the SVG parses and shows the
expected tracks, with and without a time window, flows and counters.

  render_timeline_test.py SOURCE_DIR
"""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree

SVG = "{http://www.w3.org/2000/svg}"
EXPECTED_LABELS = {"streams_app", "device memory", "stream s1", "stream s2", "stream s3",
                   "stream per-thread"}


def render(source_dir, trace, out, *options):
    script = os.path.join(source_dir, "scripts", "render-timeline.py")
    subprocess.run([sys.executable, script, trace, out, *options], check=True)
    root = ElementTree.parse(out).getroot()
    texts = [t.text or "" for t in root.iter(SVG + "text")]
    flows = [p for p in root.iter(SVG + "path") if p.get("marker-end")]
    counters = list(root.iter(SVG + "polygon"))
    return texts, flows, counters


def check(condition, what):
    if not condition:
        sys.exit(f"FAIL: {what}")


def main():
    source_dir = sys.argv[1]
    trace = os.path.join(source_dir, "tests", "data", "timeline-edges.json")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.svg")

        texts, flows, counters = render(source_dir, trace, out, "--title", "edges & <test>")
        for label in EXPECTED_LABELS:
            check(any(t.startswith(label) for t in texts), f"no track label {label!r} in {texts}")
        check("edges & <test>" in texts, "title missing")
        check(len(flows) == 3, f"expected 3 flow arrows, got {len(flows)}")
        check(len(counters) == 1, f"expected 1 counter chart, got {len(counters)}")

        # A window around the first launches: slice names are written inside their boxes.
        texts, _, _ = render(source_dir, trace, out, "--start-ms", "70.12", "--end-ms", "70.2", "--width", "900")
        check("kernel_a" in texts and "kernel_b" in texts, f"slice names missing in the window: {texts}")

        # Without flows and counters, and cut short like a trace whose tracer was killed.
        with open(trace, encoding="utf-8") as f:
            events = json.load(f)["traceEvents"]
        bare = [e for e in events if e["ph"] not in ("s", "f", "C")]
        bare_trace = os.path.join(tmp, "bare.json")
        with open(bare_trace, "w", encoding="utf-8") as f:
            f.write('{"traceEvents":[\n' + ",\n".join(json.dumps(e) for e in bare))
        texts, flows, counters = render(source_dir, bare_trace, out)
        check(not flows and not counters, "flows or counters drawn from a trace without them")
        check(any(t.startswith("stream s1") for t in texts), "stream lane missing in the bare trace")
    print("render-timeline: OK")


if __name__ == "__main__":
    main()
