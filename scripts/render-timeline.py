#!/usr/bin/env python3
"""Render a cudatrace --perfetto timeline (Chrome trace-event JSON) as a static SVG.

  scripts/render-timeline.py TRACE.json OUT.svg [--start-ms A] [--end-ms B]
                             [--width PX] [--title TEXT]

Draws what the Perfetto UI would show, for the docs: one row per thread and
stream lane, grouped by process, slices as coloured boxes (nested calls in
depth rows), flow arrows between slices and counters as step area charts.
Times are in ms from the trace's zero (when tracing started). Standard library
only; see docs/timeline.md "Rendering a static picture".
"""
import argparse
import json
import math
import re
import sys
import zlib
from bisect import bisect_right
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

# Layout, in px.
LABEL_WIDTH = 240
MARGIN = 12
TITLE_HEIGHT = 28
AXIS_HEIGHT = 26
PROCESS_HEADER_HEIGHT = 22
SLICE_ROW_HEIGHT = 18
TRACK_PADDING = 4
COUNTER_HEIGHT = 40
FONT_SIZE = 11
CHAR_WIDTH = 7.0          # average glyph width at FONT_SIZE, to decide what text fits
STREAM_LANE_TID_BASE = 1 << 30   # cudatrace's stream lanes: pseudo-threads from 2^30
MIN_SLICE_PX = 0.5        # narrower slices are merged into runs of about a pixel

# Material-like palette, picked by a stable hash of the slice's colour key.
PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#3f51b5", "#009688", "#8bc34a", "#ff7043", "#7e57c2", "#26a69a", "#d4a017"]
FLOW_COLOUR = "#37474f"
COUNTER_COLOUR = "#1e88e5"


@dataclass
class Slice:
    start: float              # us
    end: float                # us
    name: str
    category: str = ""
    args: dict = field(default_factory=dict)
    unfinished: bool = False
    depth: int = 0


@dataclass
class Track:
    pid: int
    tid: int
    name: str
    sort_index: int
    slices: list = field(default_factory=list)        # sorted by start
    slice_starts: list = field(default_factory=list)  # for bisecting


@dataclass
class Counter:
    pid: int
    name: str
    samples: list = field(default_factory=list)   # (ts us, value)


@dataclass
class Flow:
    start: tuple = None       # (pid, tid, ts)
    end: tuple = None


@dataclass
class Trace:
    process_names: dict
    tracks: dict              # (pid, tid) -> Track
    counters: dict            # (pid, name) -> Counter
    flows: list
    first_ts: float
    last_ts: float


def load_events(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        # A trace cut short (tracer killed): keep the events up to the last complete one
        # (cudatrace writes one per line, separated by ",\n") and close the array.
        data = json.loads(text[:text.rfind("},\n") + 1] + "\n]}")
    return data["traceEvents"] if isinstance(data, dict) else data


def parse_trace(events):
    process_names, thread_names, sort_indexes = {}, {}, {}
    slices_by_thread, open_begins = {}, {}
    counters, flows = {}, {}
    first_ts, last_ts = math.inf, -math.inf

    for ev in events:
        phase = ev.get("ph")
        pid, tid = ev.get("pid", 0), ev.get("tid", 0)
        ts = float(ev.get("ts", 0))
        if phase == "M":
            args = ev.get("args", {})
            if ev.get("name") == "process_name":
                process_names[pid] = args.get("name", "")
            elif ev.get("name") == "thread_name":
                thread_names[(pid, tid)] = args.get("name", "")
            elif ev.get("name") == "thread_sort_index":
                sort_indexes[(pid, tid)] = args.get("sort_index", tid)
            continue
        first_ts = min(first_ts, ts)
        last_ts = max(last_ts, ts + float(ev.get("dur", 0)))
        thread = slices_by_thread.setdefault((pid, tid), [])
        if phase == "X":
            thread.append(Slice(ts, ts + float(ev.get("dur", 0)), ev.get("name", ""), ev.get("cat", ""),
                                ev.get("args", {})))
        elif phase == "B":
            begun = Slice(ts, math.inf, ev.get("name", ""), ev.get("cat", ""), ev.get("args", {}), True)
            open_begins.setdefault((pid, tid), []).append(begun)
            thread.append(begun)
        elif phase == "E" and open_begins.get((pid, tid)):
            begun = open_begins[(pid, tid)].pop()
            begun.end, begun.unfinished = ts, False
        elif phase == "C":
            value = sum(v for v in ev.get("args", {}).values() if isinstance(v, (int, float)))
            counter = counters.setdefault((pid, ev.get("name", "")), Counter(pid, ev.get("name", "")))
            counter.samples.append((ts, value))
        elif phase in ("s", "f"):
            flow = flows.setdefault((ev.get("cat"), ev.get("name"), ev.get("id")), Flow())
            if phase == "s":
                flow.start = (pid, tid, ts)
            else:
                flow.end = (pid, tid, ts)

    if first_ts == math.inf:
        first_ts, last_ts = 0.0, 1.0
    tracks = {}
    for key, slices in slices_by_thread.items():
        slices = [s for s in slices if s.name or s.end > s.start]
        if not slices:
            continue
        for s in slices:
            if s.end == math.inf:  # still running when tracing stopped
                s.end = last_ts
        assign_depths(slices)
        pid, tid = key
        tracks[key] = Track(pid, tid, thread_names.get(key, f"thread {tid}"), sort_indexes.get(key, tid), slices,
                            [s.start for s in slices])
    for counter in counters.values():
        counter.samples.sort(key=lambda sample: sample[0])
    complete_flows = [f for f in flows.values() if f.start and f.end]
    return Trace(process_names, tracks, counters, complete_flows, first_ts, last_ts)


def assign_depths(slices):
    """Sort a thread's slices and give each its nesting depth (0 = outermost)."""
    slices.sort(key=lambda s: (s.start, -s.end))
    open_ends = []
    for s in slices:
        while open_ends and open_ends[-1] <= s.start:
            open_ends.pop()
        s.depth = len(open_ends)
        open_ends.append(s.end)


class TimeScale:
    def __init__(self, start_us, end_us, x0, x1):
        self.start_us, self.end_us, self.x0 = start_us, end_us, x0
        self.px_per_us = (x1 - x0) / max(end_us - start_us, 1e-9)

    def x(self, ts_us):
        return self.x0 + (ts_us - self.start_us) * self.px_per_us


def colour_key(s):
    # "copy HtoD 4.0 MiB" and "copy HtoD 1.0 KiB" share a colour.
    return re.sub(r"\s+[\d.]+\s*[KMGT]?i?B$", "", s.name)


def colour_for(key):
    return PALETTE[zlib.crc32(key.encode()) % len(PALETTE)]


def text_colour_on(fill):
    r, g, b = (int(fill[i:i + 2], 16) for i in (1, 3, 5))
    return "#000" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#fff"


def fit_text(text, width_px):
    """The text, cut with an ellipsis to fit width_px, or "" if too little fits."""
    max_chars = int((width_px - 4) / CHAR_WIDTH)
    if len(text) <= max_chars:
        return text
    return text[:max_chars - 1] + "\u2026" if max_chars >= 4 else ""


def format_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def format_ms(ms, step_ms):
    decimals = max(0, -math.floor(math.log10(step_ms))) if step_ms < 1 else 0
    return f"{ms:.{decimals}f} ms"


def nice_step(span, target_ticks):
    raw = span / max(target_ticks, 1)
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def slice_tooltip(s):
    lines = [s.name, f"start {s.start / 1e3:.6f} ms, dur {(s.end - s.start) / 1e3:.6f} ms"
             + (" (unfinished)" if s.unfinished else "")]
    lines += [f"{k}: {v}" for k, v in s.args.items()]
    return escape("\n".join(lines))


class TinySliceRun:
    """Neighbouring slices too narrow to draw, drawn as one box of about a pixel or more,
    coloured like the slices that take most of its time."""

    def __init__(self, x_start):
        self.x_start = self.x_end = x_start
        self.count = 0
        self.time_by_key = {}

    def accepts(self, x_start):
        return x_start <= self.x_end + MIN_SLICE_PX and self.x_end - self.x_start < 1

    def add(self, s, x_end):
        self.x_end = max(self.x_end, x_end)
        self.count += 1
        key = colour_key(s)
        self.time_by_key[key] = self.time_by_key.get(key, 0) + (s.end - s.start)

    def dominant_key(self):
        return max(self.time_by_key, key=self.time_by_key.get)


class SvgWriter:
    def __init__(self):
        self.parts = []

    def add(self, text):
        self.parts.append(text)

    def rect(self, x, y, w, h, fill, extra=""):
        self.add(f'<rect x="{x:.2f}" y="{y:.2f}" width="{w:.2f}" height="{h:.2f}" fill="{fill}"{extra}/>')

    def text(self, x, y, content, extra=""):
        self.add(f'<text x="{x:.2f}" y="{y:.2f}"{extra}>{escape(content)}</text>')

    def line(self, x1, y1, x2, y2, stroke, extra=""):
        self.add(f'<line x1="{x1:.2f}" y1="{y1:.2f}" x2="{x2:.2f}" y2="{y2:.2f}" stroke="{stroke}"{extra}/>')


class Renderer:
    def __init__(self, trace, start_us, end_us, width, title):
        self.trace, self.width, self.title = trace, width, title
        self.scale = TimeScale(start_us, end_us, LABEL_WIDTH + MARGIN, width - MARGIN)
        self.svg = SvgWriter()
        self.slice_row_y = {}     # (pid, tid) -> y of its depth-0 row

    def visible(self, s):
        return s.end >= self.scale.start_us and s.start <= self.scale.end_us

    def render(self):
        rows = self.layout_rows()
        top = MARGIN + (TITLE_HEIGHT if self.title else 0)
        plot_top = top + AXIS_HEIGHT
        height = plot_top + sum(r[1] for r in rows) + MARGIN
        x0, x1 = self.scale.x0, self.width - MARGIN
        svg = self.svg
        svg.add(f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{height:.0f}" '
                f'viewBox="0 0 {self.width} {height:.0f}" font-family="Helvetica, Arial, sans-serif" '
                f'font-size="{FONT_SIZE}">')
        svg.add('<defs>'
                f'<clipPath id="plot"><rect x="{x0}" y="{plot_top}" width="{x1 - x0}" height="{height}"/></clipPath>'
                '<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
                f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{FLOW_COLOUR}"/></marker>'
                '</defs>')
        svg.rect(0, 0, self.width, height, "#fff")
        if self.title:
            svg.text(MARGIN, MARGIN + 16, self.title, ' font-size="16" font-weight="bold"')
        self.draw_axis(top, plot_top, height - MARGIN)

        y = plot_top
        for kind, row_height, item in rows:
            if kind == "process":
                self.draw_process_header(item, y, row_height)
            elif kind == "counter":
                self.draw_counter(item, y, row_height)
            else:
                self.draw_track(item, y, row_height)
            svg.line(MARGIN, y + row_height, x1, y + row_height, "#e0e0e0")
            y += row_height
        svg.line(x0, plot_top, x0, height - MARGIN, "#9e9e9e")
        self.draw_flows()
        svg.add("</svg>")
        return "\n".join(svg.parts) + "\n"

    def layout_rows(self):
        """(kind, height, item) per row: a header per process, then its counters and tracks."""
        rows = []
        pids = sorted({pid for pid, _ in self.trace.tracks} | {c.pid for c in self.trace.counters.values()})
        for pid in pids:
            rows.append(("process", PROCESS_HEADER_HEIGHT, pid))
            for counter in sorted((c for c in self.trace.counters.values() if c.pid == pid), key=lambda c: c.name):
                rows.append(("counter", COUNTER_HEIGHT, counter))
            tracks = sorted((t for t in self.trace.tracks.values() if t.pid == pid),
                            key=lambda t: (t.sort_index, t.tid))
            for track in tracks:
                depths = max((s.depth for s in track.slices if self.visible(s)), default=0) + 1
                rows.append(("track", depths * SLICE_ROW_HEIGHT + 2 * TRACK_PADDING, track))
        return rows

    def draw_axis(self, top, plot_top, bottom):
        scale, svg = self.scale, self.svg
        span_ms = (scale.end_us - scale.start_us) / 1e3
        step_ms = nice_step(span_ms, (self.width - LABEL_WIDTH) / 110)
        svg.line(scale.x0, plot_top - 1, self.width - MARGIN, plot_top - 1, "#616161")
        tick_ms = math.ceil(scale.start_us / 1e3 / step_ms) * step_ms
        while tick_ms <= scale.end_us / 1e3 + 1e-9:
            x = scale.x(tick_ms * 1e3)
            svg.line(x, plot_top - 6, x, bottom, "#eeeeee")
            svg.line(x, plot_top - 6, x, plot_top - 1, "#616161")
            label = format_ms(tick_ms, step_ms)
            # The last label would stick out of the image if centred on its tick.
            anchor = "end" if x + len(label) * CHAR_WIDTH / 2 > self.width else "middle"
            svg.text(x, plot_top - 9, label, f' text-anchor="{anchor}" fill="#424242"')
            tick_ms += step_ms

    def draw_process_header(self, pid, y, height):
        name = self.trace.process_names.get(pid, "process")
        self.svg.rect(MARGIN, y, self.width - 2 * MARGIN, height, "#eceff1")
        self.svg.text(MARGIN + 4, y + height - 7, f"{name} {pid}", ' font-weight="bold" fill="#263238"')

    def draw_label(self, text, y, height):
        self.svg.text(MARGIN + 16, y + min(height / 2, SLICE_ROW_HEIGHT / 2 + TRACK_PADDING) + 4,
                      fit_text(text, LABEL_WIDTH - 20), ' fill="#212121"')

    def draw_track(self, track, y, height):
        label = track.name if track.tid >= STREAM_LANE_TID_BASE else f"{track.name} {track.tid}"
        self.draw_label(label, y, height)
        self.slice_row_y[(track.pid, track.tid)] = y + TRACK_PADDING
        svg, scale = self.svg, self.scale
        svg.add('<g clip-path="url(#plot)">')
        runs = {}   # depth -> TinySliceRun being built
        for s in track.slices:
            if not self.visible(s):
                continue
            x_start, x_end = scale.x(s.start), scale.x(s.end)
            if x_end - x_start >= MIN_SLICE_PX:
                self.draw_slice(s, x_start, x_end, y + TRACK_PADDING + s.depth * SLICE_ROW_HEIGHT)
                continue
            run = runs.get(s.depth)
            if run and not run.accepts(x_start):
                self.draw_run(run, y + TRACK_PADDING + s.depth * SLICE_ROW_HEIGHT)
                run = None
            if not run:
                run = runs[s.depth] = TinySliceRun(x_start)
            run.add(s, x_end)
        for depth, run in runs.items():
            self.draw_run(run, y + TRACK_PADDING + depth * SLICE_ROW_HEIGHT)
        svg.add("</g>")

    def draw_slice(self, s, x_start, x_end, row_y):
        # Clip to the plot so that the label is centred on the visible part.
        x_start, x_end = max(x_start, self.scale.x0 - 1), min(x_end, self.width - MARGIN + 1)
        fill = colour_for(colour_key(s))
        outline = ' stroke="#000" stroke-dasharray="3,2"' if s.unfinished else ""
        self.svg.add(f"<g><title>{slice_tooltip(s)}</title>")
        self.svg.rect(x_start, row_y + 1, x_end - x_start, SLICE_ROW_HEIGHT - 2, fill, outline)
        label = fit_text(s.name, x_end - x_start)
        if label:
            self.svg.text((x_start + x_end) / 2, row_y + SLICE_ROW_HEIGHT / 2 + 4, label,
                          f' text-anchor="middle" fill="{text_colour_on(fill)}"')
        self.svg.add("</g>")

    def draw_run(self, run, row_y):
        width = max(run.x_end - run.x_start, MIN_SLICE_PX)
        self.svg.add(f"<g><title>{run.count} short slice{'s' if run.count > 1 else ''}</title>")
        self.svg.rect(run.x_start, row_y + 1, width, SLICE_ROW_HEIGHT - 2, colour_for(run.dominant_key()))
        self.svg.add("</g>")

    def draw_counter(self, counter, y, height):
        svg, scale = self.svg, self.scale
        samples = counter.samples
        times = [ts for ts, _ in samples]
        # The value entering the window: the last sample before it (0 before any).
        before = bisect_right(times, scale.start_us) - 1
        value = samples[before][1] if before >= 0 else 0
        in_window = samples[before + 1:bisect_right(times, scale.end_us)]
        peak = max([value] + [v for _, v in in_window])
        is_bytes = "memory" in counter.name or "bytes" in counter.name
        peak_text = format_bytes(peak) if is_bytes else f"{peak:g}"
        self.draw_label(counter.name, y, SLICE_ROW_HEIGHT)
        svg.text(MARGIN + 16, y + height - 8, f"peak {peak_text}", ' fill="#757575" font-size="10"')

        base_y, top_y = y + height - 3, y + 4
        def value_y(v):
            return base_y - (v / peak) * (base_y - top_y) if peak > 0 else base_y

        # Step outline; samples within one half-pixel column collapse to their peak then their last value.
        points = [(scale.x0, base_y), (scale.x0, value_y(value))]
        column, column_peak = None, value
        for ts, v in in_window:
            x = scale.x(ts)
            if int(x * 2) != column:
                column, column_peak = int(x * 2), v
                points += [(x, value_y(value)), (x, value_y(v))]
            else:
                column_peak = max(column_peak, v)
                points[-1] = (x, value_y(column_peak))
                points.append((x, value_y(v)))
            value = v
        x_end = self.width - MARGIN
        points += [(x_end, value_y(value)), (x_end, base_y)]
        path = " ".join(f"{x:.2f},{py:.2f}" for x, py in points)
        svg.add(f'<polygon points="{path}" fill="{COUNTER_COLOUR}" fill-opacity="0.35" '
                f'stroke="{COUNTER_COLOUR}" stroke-width="1" clip-path="url(#plot)">'
                f"<title>{escape(counter.name)}: peak {peak_text} in this window</title></polygon>")

    def flow_anchor(self, pid, tid, ts, at_end):
        """(x, y) of a flow end: the edge of the deepest slice around ts on that thread."""
        track = self.trace.tracks.get((pid, tid))
        row_y = self.slice_row_y.get((pid, tid))
        if track is None or row_y is None:
            return None
        deepest = None
        # Walk back from ts to the top-level slice that starts before it: the candidates.
        for s in reversed(track.slices[:bisect_right(track.slice_starts, ts)]):
            if s.end >= ts and (deepest is None or s.depth > deepest.depth):
                deepest = s
            if s.depth == 0:
                break
        if deepest is None:
            return self.scale.x(ts), row_y + SLICE_ROW_HEIGHT / 2
        x = self.scale.x(deepest.end if at_end else deepest.start)
        return x, row_y + deepest.depth * SLICE_ROW_HEIGHT + SLICE_ROW_HEIGHT / 2

    def draw_flows(self):
        scale = self.scale
        drawn = []
        for flow in self.trace.flows:
            if max(flow.start[2], flow.end[2]) < scale.start_us or min(flow.start[2], flow.end[2]) > scale.end_us:
                continue
            start = self.flow_anchor(*flow.start, at_end=True)
            end = self.flow_anchor(*flow.end, at_end=False)
            if not start or not end:
                continue
            (x1, y1), (x2, y2) = start, end
            if abs(y1 - y2) < 1:
                # Neighbours on one row: arc from top edge to top edge, over the row.
                bend, lift = abs(x2 - x1) / 2, 10
                y1 = y2 = y1 - SLICE_ROW_HEIGHT / 2 + 2
            else:
                bend, lift = max(abs(x2 - x1) / 2, 12), 0
            drawn.append(f'<path d="M{x1:.2f},{y1:.2f} C{x1 + bend:.2f},{y1 - lift:.2f} {x2 - bend:.2f},'
                         f'{y2 - lift:.2f} {x2:.2f},{y2:.2f}" fill="none" stroke="{FLOW_COLOUR}" stroke-width="1.2" '
                         'marker-end="url(#arrow)"/>')
        if drawn:
            self.svg.add('<g clip-path="url(#plot)">')
            self.svg.parts += drawn
            self.svg.add("</g>")


def main():
    parser = argparse.ArgumentParser(description="Render a cudatrace --perfetto timeline as an SVG image.")
    parser.add_argument("trace", help="the --perfetto JSON file")
    parser.add_argument("output", help="the SVG file to write")
    parser.add_argument("--start-ms", type=float, help="start of the window to draw (default: trace start)")
    parser.add_argument("--end-ms", type=float, help="end of the window to draw (default: trace end)")
    parser.add_argument("--width", type=int, default=1600, help="image width in px (default 1600)")
    parser.add_argument("--title", help="title above the timeline")
    options = parser.parse_args()

    try:
        trace = parse_trace(load_events(options.trace))
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"render-timeline: cannot read {options.trace}: {e}")
    start_us = options.start_ms * 1e3 if options.start_ms is not None else trace.first_ts
    end_us = options.end_ms * 1e3 if options.end_ms is not None else trace.last_ts
    if end_us <= start_us:
        sys.exit("render-timeline: the window is empty (--end-ms must be after --start-ms)")
    if options.width < LABEL_WIDTH + 2 * MARGIN + 100:
        sys.exit(f"render-timeline: --width must be at least {LABEL_WIDTH + 2 * MARGIN + 100}")
    svg = Renderer(trace, start_us, end_us, options.width, options.title).render()
    with open(options.output, "w", encoding="utf-8") as f:
        f.write(svg)


if __name__ == "__main__":
    main()
