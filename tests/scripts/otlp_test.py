#!/usr/bin/env python3
"""--otlp end to end (root, real eBPF; docs/otlp.md): what cudatrace sends is
decoded with the official OTLP schema (third_party/opentelemetry-proto,
compiled here by protoc for Python) by a fake Collector on loopback, which
answers as told: 200, 503 then 200, never, gzip expected, or is down.

The traced programs are tests/fixtures/otel_app.c, which publishes OTel
thread context from the executable (otel_app_exe) and from a library
(otel_app_lib), and fake_app for calls under no span.

Usage: otlp_test.py CUDATRACE PROTO_DIR OTEL_APP_EXE OTEL_APP_LIB FAKE_APP
Exit 77 (skipped) when not root.
"""
import gzip
import http.server
import importlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import re
import threading
import time
import urllib.request

TRACE_A, SPAN_A = "0a0102030405060708090a0b0c0d0e0f", "a111121314151617"
TRACE_B, SPAN_B = "0b0102030405060708090a0b0c0d0e0f", "b111121314151617"
# Every wait of this test is bounded: a run of the tracer, a Collector's answer.
RUN_TIMEOUT_S = 60

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what, flush=True)


def compile_schema(proto_dir, out_dir):
    protos = [os.path.join(root, f) for root, _, files in os.walk(proto_dir) for f in files if f.endswith(".proto")]
    try:
        import google.protobuf  # noqa: F401 - the runtime the generated code needs
    except ImportError:
        sys.exit(f"{sys.executable} has no protobuf runtime: install python3-protobuf")
    subprocess.run(["protoc", "--proto_path=" + proto_dir, "--python_out=" + out_dir, *protos], check=True)
    sys.path.insert(0, out_dir)
    trace = importlib.import_module("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
    metrics = importlib.import_module("opentelemetry.proto.collector.metrics.v1.metrics_service_pb2")
    return {"/v1/traces": trace.ExportTraceServiceRequest, "/v1/metrics": metrics.ExportMetricsServiceRequest}


class Collector:
    """An OTLP/HTTP receiver on 127.0.0.1. `answers`: the status of each request in turn
    (the last one repeats), or such a tuple by path; None: read the request and never answer."""

    def __init__(self, request_type, answers=(200,), retry_after=None):
        self.requests = []  # (path, headers, decoded ExportTraceServiceRequest)
        self.arrivals = []  # (path, time.monotonic()) of every request, as it came
        self.errors = []
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                collector.arrivals.append((self.path, time.monotonic()))
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                turns = answers[self.path] if isinstance(answers, dict) else answers
                n = sum(1 for path, _, _ in collector.requests if path == self.path or not isinstance(answers, dict))
                answer = turns[min(n, len(turns) - 1)]
                try:
                    raw = gzip.decompress(body) if self.headers.get("Content-Encoding") == "gzip" else body
                    decoded = request_type[self.path]()
                    decoded.ParseFromString(raw)
                    collector.requests.append((self.path, dict(self.headers), decoded))
                except Exception as e:  # noqa: BLE001 - any undecodable body is the test's failure
                    collector.errors.append(f"{self.path}: {e}")
                if answer is None:
                    collector.hung.wait(RUN_TIMEOUT_S)
                    return
                self.send_response(answer)
                if answer != 200 and retry_after is not None:
                    self.send_header("Retry-After", str(retry_after))
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.hung = threading.Event()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def close(self):
        self.hung.set()
        self.server.shutdown()
        self.server.server_close()

    def spans(self):
        """(resource attributes, span) of every span received on /v1/traces."""
        out = []
        for path, _, req in self.requests:
            if path != "/v1/traces":
                continue
            for rs in req.resource_spans:
                resource = {a.key: value_of(a.value) for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        out.append((resource, span))
        return out


def le_text(bound):
    return "+Inf" if bound == float("inf") else repr(bound)


def exposition(text):
    """{(name, frozenset(labels)): value} of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$', line)
        labels = frozenset((k, le_text(float(v)) if k == "le" else v.encode().decode("unicode_escape"))
                           for k, v in re.findall(r'([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def otlp_points(request):
    """The same keys as exposition() for an ExportMetricsServiceRequest: counters under their
    Prometheus name (+_total), histograms as _bucket (cumulative, le), _sum and _count."""
    out, temporalities = {}, set()
    for rm in request.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                if kind in ("sum", "gauge"):
                    name = m.name + "_total" if kind == "sum" else m.name
                    if kind == "sum":
                        temporalities.add(m.sum.aggregation_temporality)
                    for p in getattr(m, kind).data_points:
                        out[(name, frozenset((a.key, value_of(a.value)) for a in p.attributes))] = p.as_double
                elif kind == "histogram":
                    temporalities.add(m.histogram.aggregation_temporality)
                    for p in m.histogram.data_points:
                        labels = frozenset((a.key, value_of(a.value)) for a in p.attributes)
                        out[(m.name + "_sum", labels)] = p.sum
                        out[(m.name + "_count", labels)] = float(p.count)
                        total = 0
                        bounds = list(p.explicit_bounds) + [float("inf")]
                        for bound, n in zip(bounds, p.bucket_counts):
                            total += n
                            out[(m.name + "_bucket", labels | {("le", le_text(bound))})] = float(total)
    return out, temporalities


def value_of(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def attrs(span):
    return {a.key: value_of(a.value) for a in span.attributes}


def run(cudatrace, args, command, env=None, timeout=RUN_TIMEOUT_S):
    """Runs cudatrace with a --json trace in a file: (exit status, stderr, end line, seconds)."""
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as trace:
        full_env = dict(os.environ, **(env or {}))
        start = time.monotonic()
        p = subprocess.run([cudatrace, *args, "--json", "-o", trace.name, "--", *command], env=full_env,
                           capture_output=True, text=True, timeout=timeout)
        took = time.monotonic() - start
        lines = [json.loads(line) for line in open(trace.name, encoding="utf-8") if line.strip()]
    end = next((line for line in lines if line.get("type") == "end"), {})
    return p.returncode, p.stderr, end, took, lines


def test_spans(cudatrace, request_type, app, label, gzip_on):
    c = Collector(request_type)
    env = {"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"} if gzip_on else {}
    started_ns = time.time_ns()
    status, err, end, _, lines = run(cudatrace, ["--otlp", c.url()], [app], env)
    finished_ns = time.time_ns()
    c.close()
    check(status == 0, f"{label}: exit status {status}: {err}")
    check(not c.errors, f"{label}: undecodable requests: {c.errors}")
    paths = [p for p, _, _ in c.requests]
    check("/v1/traces" in paths and set(paths) <= {"/v1/traces", "/v1/metrics"}, f"{label}: paths {paths}")
    if gzip_on:
        check(c.requests and all(h.get("Content-Encoding") == "gzip" for _, h, _ in c.requests),
              f"{label}: gzip asked, not every request was gzip")
    check(all(h.get("Content-Type") == "application/x-protobuf" for _, h, _ in c.requests), f"{label}: content type")
    spans = c.spans()
    by_size = {}
    for resource, span in spans:
        a = attrs(span)
        if span.name == "cudaMalloc":
            by_size[a.get("cuda.arg.size")] = (resource, span)
    check(set(by_size) == {2, 3}, f"{label}: cudaMalloc spans of sizes {sorted(by_size)}, want 2 and 3 "
                                  "(1, 4, 5, 6 are under no valid span)")
    if 2 in by_size and 3 in by_size:
        _, a2 = by_size[2]
        _, b3 = by_size[3]
        check(a2.trace_id.hex() == TRACE_A and a2.parent_span_id.hex() == SPAN_A,
              f"{label}: call 2 in trace {a2.trace_id.hex()} under {a2.parent_span_id.hex()}")
        check(b3.trace_id.hex() == TRACE_B and b3.parent_span_id.hex() == SPAN_B,
              f"{label}: call 3 in trace {b3.trace_id.hex()} under {b3.parent_span_id.hex()}")
        check(len(a2.span_id) == 8 and a2.span_id.hex() not in (SPAN_A, "0" * 16), f"{label}: span id {a2.span_id.hex()}")
        check(a2.span_id != b3.span_id, f"{label}: two calls got the same span id")
        check(attrs(a2).get("thread.id") != attrs(b3).get("thread.id"), f"{label}: calls 2 and 3 on one thread")
        check(started_ns <= a2.start_time_unix_nano <= a2.end_time_unix_nano <= finished_ns,
              f"{label}: call 2 from {a2.start_time_unix_nano} to {a2.end_time_unix_nano}, run from {started_ns} "
              f"to {finished_ns}")
        check(attrs(a2).get("cuda.api") == "cudaMalloc" and attrs(a2).get("cuda.status") == "cudaSuccess",
              f"{label}: call 2 attributes {attrs(a2)}")
        check(a2.status.code == 0, f"{label}: a call that succeeded has status {a2.status}")
    under_a = sorted(s.name for _, s in spans if s.parent_span_id.hex() == SPAN_A)
    for api in ("cudaMalloc", "cudaLaunchKernel", "cudaDeviceSynchronize"):
        check(api in under_a, f"{label}: no {api} span under span A: {under_a}")
    launches = [s for _, s in spans if s.name == "cudaLaunchKernel"]
    check(len(launches) == 1 and attrs(launches[0]).get("cuda.kernel.name") == "otel_kernel",
          f"{label}: launch spans {[attrs(s) for s in launches]}")
    # Every span is one of the process's calls under a span: no other, none twice.
    traced = [j for j in lines if j.get("type") == "call" and j.get("trace_id")]
    check(len(spans) == len(traced), f"{label}: {len(spans)} spans, {len(traced)} calls of the trace under a span")
    pids = {j["pid"] for j in lines if j.get("type") == "call"}
    for resource, _ in spans[:1]:
        check(resource.get("service.name") == "otel-app" and resource.get("service.namespace") == "tests" and
              resource.get("deployment.environment.name") == "ci", f"{label}: resource {resource}")
        check(resource.get("process.pid") in pids, f"{label}: process.pid {resource.get('process.pid')} not {pids}")
        check(resource.get("host.name") == socket.gethostname(), f"{label}: host.name {resource.get('host.name')}")
    check(end.get("lost_detail", {}).get("otlp_spans") == 0, f"{label}: end line {end}")


def test_no_span_and_environment(cudatrace, request_type, fake_app):
    """Calls under no span: none sent, unless --otlp-all-calls; then as roots, with the
    process's own OTEL_SERVICE_NAME, else its executable's name, and failed calls ERROR."""
    c = Collector(request_type)
    status, err, _, _, _ = run(cudatrace, ["--otlp", c.url()], [fake_app, "basic"])
    check(status == 0 and not c.spans(), f"no span: exit {status}, {len(c.spans())} spans sent: {err}")
    c.close()
    for env, want in (({"OTEL_SERVICE_NAME": "svc", "OTEL_RESOURCE_ATTRIBUTES": "team=gpu,service.name=no"}, "svc"),
                      ({}, os.path.basename(fake_app))):
        c = Collector(request_type)
        # The resource is read from the process at its first call's span: it waits (stdin) until
        # the spans arrived, as a service outlives its first calls.
        p = subprocess.Popen([cudatrace, "--otlp", c.url(), "--otlp-all-calls", "--", fake_app, "basic-then-wait"],
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, **env))
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline and not any(s.name == "cudaMemcpy" for _, s in c.spans()):
            time.sleep(0.1)
        p.stdin.close()
        try:
            err = p.stderr.read()
            status = p.wait(timeout=RUN_TIMEOUT_S)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        c.close()
        spans = c.spans()
        check(status == 0 and spans, f"all calls: exit {status}, {len(spans)} spans: {err}")
        if not spans:
            continue
        resource = spans[0][0]
        check(resource.get("service.name") == want, f"all calls, env {env}: service.name {resource.get('service.name')}")
        check(resource.get("process.executable.name") == os.path.basename(fake_app), f"all calls: resource {resource}")
        if env:
            check(resource.get("team") == "gpu", f"all calls: resource {resource}")
        check(all(not s.parent_span_id and len(s.trace_id) == 16 for _, s in spans), "all calls: spans with parents")
        failed = {s.name: s.status for _, s in spans if s.status.code == 2}
        check(failed.get("cudaSetDevice") and failed["cudaSetDevice"].message == "cudaErrorInvalidDevice",
              f"all calls: failed spans {failed}")
        copies = [attrs(s) for _, s in spans if s.name == "cudaMemcpy" and attrs(s).get("cuda.status") == "cudaSuccess"]
        check(copies and copies[0].get("cuda.bytes") == 4096 and copies[0].get("cuda.copy.direction") == "HtoD",
              f"all calls: copies {copies}")


def test_selection(cudatrace, request_type, fake_app):
    """The selection options choose the spans as they choose a trace's lines: --errors."""
    c = Collector(request_type)
    status, err, _, _, lines = run(cudatrace, ["--otlp", c.url(), "--otlp-all-calls", "--errors"], [fake_app, "basic"])
    c.close()
    spans = c.spans()
    traced = sorted(j["api"] for j in lines if j.get("type") == "call")
    check(status == 0 and sorted(s.name for _, s in spans) == traced and len(traced) >= 3,
          f"--errors: exit {status}, spans {sorted(s.name for _, s in spans)}, trace {traced}: {err}")
    check(all(s.status.code == 2 for _, s in spans), f"--errors: spans not in error: {spans}")


def test_pid_mode(cudatrace, request_type, fake_app):
    """-p: a running process's calls, sent as they are in command mode."""
    c = Collector(request_type)
    app = subprocess.Popen([fake_app, "wait-then-basic"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    tracer = None
    try:
        pid = int(app.stdout.readline().split()[1])  # "ready PID"
        tracer = subprocess.Popen([cudatrace, "--otlp", c.url(), "--otlp-all-calls", "-p", str(pid)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        attached = threading.Event()
        err_lines = []

        def read_stderr():
            for line in tracer.stderr:
                err_lines.append(line)
                if "tracing process" in line:
                    attached.set()

        reader = threading.Thread(target=read_stderr, daemon=True)
        reader.start()
        check(attached.wait(RUN_TIMEOUT_S), "-p: cudatrace did not say it was tracing")
        app.stdin.write("go\n")
        app.stdin.close()
        app.wait(timeout=RUN_TIMEOUT_S)
        status = tracer.wait(timeout=RUN_TIMEOUT_S)
        reader.join(timeout=RUN_TIMEOUT_S)
        spans = c.spans()
        names = {s.name for _, s in spans}
        check(status == 0 and {"cudaMalloc", "cudaMemcpy", "cudaLaunchKernel"} <= names,
              f"-p: exit {status}, spans {sorted(names)}: {''.join(err_lines)}")
        check(all(r.get("process.pid") == pid for r, _ in spans), f"-p: resources {[r for r, _ in spans[:1]]}")
    finally:
        for p in (app, tracer):
            if p and p.poll() is None:
                p.kill()
                p.wait()
        c.close()


def test_retry(cudatrace, request_type, app):
    """Spans answered 503 with Retry-After, then 200: everything arrives, once."""
    c = Collector(request_type, answers={"/v1/traces": (503, 200), "/v1/metrics": (200,)}, retry_after=1)
    status, err, end, took, lines = run(cudatrace, ["--otlp", c.url()], [app])
    c.close()
    traced = [j for j in lines if j.get("type") == "call" and j.get("trace_id")]
    requests = [req for path, _, req in c.requests if path == "/v1/traces"]
    check(status == 0, f"503 then 200: exit {status}: {err}")
    check(len(requests) >= 2, f"503 then 200: {len(requests)} trace requests")
    span_ids = lambda reqs: sorted(s.span_id for req in reqs for rs in req.resource_spans for ss in rs.scope_spans
                                   for s in ss.spans)
    # The first request was refused: what the Collector kept are the later ones, the same spans again.
    kept = span_ids(requests[1:])
    check(len(kept) == len(traced) and traced, f"503 then 200: {len(kept)} spans accepted, {len(traced)} calls")
    check(kept == span_ids(requests[:1]), "503 then 200: the retry did not send the refused spans again")
    check(end.get("lost_detail", {}).get("otlp_spans") == 0, f"503 then 200: end line {end}")
    # Retry-After: 1 said when: not the first backoff's 0.5 s.
    times = [t for path, t in c.arrivals if path == "/v1/traces"]
    check(len(times) >= 2 and times[1] - times[0] >= 0.95, f"503 then 200: retried after {times[1:2]} - {times[:1]}")


def test_unreachable(cudatrace, request_type, app, label, answers, url=None):
    """A Collector that never answers, or none at all: the program is not held up, cudatrace exits
    within the timeout, and every span not sent is counted."""
    c = Collector(request_type, answers=answers) if answers else None
    timeout_ms = 1500
    env = {"OTEL_EXPORTER_OTLP_TIMEOUT": str(timeout_ms)}
    status, err, end, took, lines = run(cudatrace, ["--otlp", c.url() if c else url], [app], env)
    if c:
        c.close()
    traced = [j for j in lines if j.get("type") == "call" and j.get("trace_id")]
    check(status == 0, f"{label}: exit {status}: {err}")
    check(end.get("lost_detail", {}).get("otlp_spans") == len(traced) and traced,
          f"{label}: {len(traced)} spans, end line {end}")
    check("OTLP spans not sent" in err, f"{label}: stderr does not say what was not sent: {err}")
    # A run is about 1 s here; the export adds at most its timeout (and the last batch's wait).
    check(took < 8, f"{label}: took {took:.1f} s")


def test_queue_bound(cudatrace, request_type, app):
    """More spans than the queue holds, with a Collector that never answers: the excess is
    dropped and counted, the traced program runs at its pace."""
    c = Collector(request_type, answers=(None,))
    n = 60000
    status, err, end, took, lines = run(cudatrace, ["--otlp", c.url(), "-f", "launch"], [app, "loop", str(n)],
                                        {"OTEL_EXPORTER_OTLP_TIMEOUT": "1000"})
    c.close()
    lost = end.get("lost_detail", {}).get("otlp_spans")
    launches = sum(1 for j in lines if j.get("type") == "call" and j.get("api") == "cudaLaunchKernel")
    check(status == 0, f"queue: exit {status}: {err}")
    check(launches == n, f"queue: {launches} launches traced of {n}")
    check(lost == launches, f"queue: {lost} spans not sent of {launches}: {end}")
    check("queue full: " in err and "queue full: 0," not in err, f"queue: nothing dropped for a full queue: {err}")


def test_metrics(cudatrace, request_type, fake_app):
    """--prometheus with --otlp: the metrics sent every --otlp-interval say what /metrics says."""
    c = Collector(request_type)
    command = ["sh", "-c", f"sleep 1; {fake_app} basic; sleep 6"]
    p = subprocess.Popen([cudatrace, "--prometheus", "127.0.0.1:0", "--otlp", c.url(), "--otlp-interval", "1", "--",
                          *command], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port = None
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while port is None and time.monotonic() < deadline:
            line = p.stderr.readline()
            m = re.search(r"serving Prometheus metrics on port (\d+)", line)
            port = int(m.group(1)) if m else None
            if not line:
                break
        check(port, "metrics: no port said")
        if not port:
            return
        scrape = lambda: exposition(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())
        mallocs = lambda e: [v for (n, l), v in e.items() if n == "cuda_api_calls_total" and ("api", "cudaMalloc") in l]
        while time.monotonic() < deadline and not mallocs(scrape()):
            time.sleep(0.2)
        time.sleep(1.5)  # the counts are read once a second: fake_app's are all in now
        before = scrape()
        sent = sum(1 for path, _, _ in c.requests if path == "/v1/metrics")
        while time.monotonic() < deadline and sum(1 for path, _, _ in c.requests if path == "/v1/metrics") <= sent:
            time.sleep(0.1)
        after = scrape()
        request = [r for path, _, r in c.requests if path == "/v1/metrics"][-1]
        points, temporalities = otlp_points(request)
        check(temporalities == {2}, f"metrics: temporalities {temporalities}, want cumulative (2) only")
        compared = 0
        for key, value in before.items():
            name = key[0]
            if not name.startswith("cuda_") or after.get(key) != value:
                continue  # only what stood still around the export
            compared += 1
            check(points.get(key) == value, f"metrics: {key}: OTLP {points.get(key)}, /metrics {value}")
        check(compared >= 20 and mallocs(before), f"metrics: only {compared} series compared")
        resource = {a.key: value_of(a.value) for a in request.resource_metrics[0].resource.attributes}
        check(resource.get("service.name") == "cudatrace" and resource.get("host.name") == socket.gethostname(),
              f"metrics: resource {resource}")
        p.wait(timeout=RUN_TIMEOUT_S)
        check(p.returncode == 0, f"metrics: exit {p.returncode}")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        c.close()


def test_spans_metrics(cudatrace, request_type, app):
    """Without --prometheus, the spans' own counts go to /v1/metrics every --otlp-interval, the
    spans dropped by a full queue among them: a Collector that refuses spans (503) takes metrics."""
    c = Collector(request_type, answers={"/v1/traces": (503,), "/v1/metrics": (200,)})
    status, err, end, _, _ = run(cudatrace, ["--otlp", c.url(), "--otlp-interval", "1", "-f", "launch"],
                                 [app, "loop", "60000"], {"OTEL_EXPORTER_OTLP_TIMEOUT": "1000"})
    c.close()
    check(status == 0, f"spans' metrics: exit {status}: {err}")
    requests = [r for path, _, r in c.requests if path == "/v1/metrics"]
    check(len(requests) >= 2, f"spans' metrics: {len(requests)} metrics requests")
    if not requests:
        return
    points, temporalities = otlp_points(requests[-1])
    dropped = points.get(("cudatrace_otlp_spans_total", frozenset({("outcome", "dropped_queue_full")})))
    m = re.search(r"queue full: (\d+)", err)
    check(m and dropped == float(m.group(1)) and dropped > 0,
          f"spans' metrics: dropped {dropped}, stderr says {m.group(0) if m else err}")
    check(points.get(("cudatrace_otlp_spans_total", frozenset({("outcome", "sent")}))) == 0,
          f"spans' metrics: sent {points}")
    check(temporalities == {2}, f"spans' metrics: temporalities {temporalities}")


# The node exporter's series that a run of `fake_app basic` makes the same in every run.
STEADY_FAMILIES = ("cuda_api_calls_total", "cuda_kernel_launches_total", "cuda_transfer_bytes_total",
                   "cuda_api_duration_seconds_count", "cuda_device_memory_bytes", "cuda_device_memory_peak_bytes")
MEMORY_FAMILIES = ("cuda_device_memory_bytes", "cuda_device_memory_peak_bytes")


def steady(series, families=STEADY_FAMILIES):
    return {key: value for key, value in series.items() if key[0] in families}


def stop_process(p):
    if p and p.poll() is None:
        p.kill()
        p.wait()


def prometheus_reference(cudatrace, fake_app):
    """What /metrics says of `fake_app basic`, scraped while the program waits after its calls."""
    tracer = subprocess.Popen([cudatrace, "--prometheus", "127.0.0.1:0", "--", fake_app, "basic-then-wait"],
                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        port = None
        while port is None and time.monotonic() < deadline:
            line = tracer.stderr.readline()
            if not line:
                break
            m = re.search(r"serving Prometheus metrics on port (\d+)", line)
            port = int(m.group(1)) if m else None
        check(port, "reference /metrics: no port said")
        if not port:
            return {}
        scrape = lambda: exposition(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())
        failed = lambda e: [v for (n, l), v in e.items() if n == "cuda_api_calls_total" and ("api", "cudaMemcpy") in l
                            and ("error", "cudaErrorInvalidMemcpyDirection") in l]
        while time.monotonic() < deadline and not failed(scrape()):  # basic's last call
            time.sleep(0.2)
        time.sleep(1.5)  # the counts are read once a second: all of basic's are in now
        reference = scrape()
        tracer.stdin.close()
        tracer.wait(timeout=RUN_TIMEOUT_S)
        return steady(reference)
    finally:
        stop_process(tracer)


def last_metrics(collector):
    requests = [r for path, _, r in collector.requests if path == "/v1/metrics"]
    return otlp_points(requests[-1])[0] if requests else {}


def test_node_metrics(cudatrace, request_type, fake_app):
    """Without --prometheus, --otlp sends the node exporter's metrics, beside spans alone, a trace,
    a summary, and a trace narrowed by --errors (which selects lines, not counts): the values
    /metrics says for the same program."""
    reference = prometheus_reference(cudatrace, fake_app)
    calls = [k for k in reference if k[0] == "cuda_api_calls_total"]
    check(len(calls) >= 10 and any(k[0] == "cuda_transfer_bytes_total" for k in reference),
          f"node metrics: reference /metrics has {len(calls)} call series: {sorted(reference)}")
    for label, args in (("spans alone", []), ("trace", ["--json"]), ("summary", ["--summary", "--json"]),
                        ("--errors", ["--errors", "--json"])):
        c = Collector(request_type)
        with tempfile.NamedTemporaryFile(suffix=".out") as out:
            p = subprocess.run([cudatrace, "--otlp", c.url(), *args, *(["-o", out.name] if args else []), "--",
                                fake_app, "basic"], capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        c.close()
        check(p.returncode == 0 and not c.errors, f"node metrics, {label}: exit {p.returncode}, {c.errors}: {p.stderr}")
        points = last_metrics(c)
        # --errors: the kernel sends no allocation's record, so device memory is not known.
        families = [f for f in STEADY_FAMILIES if label != "--errors" or f not in MEMORY_FAMILIES]
        want = steady(reference, families)
        got = steady(points, families)
        check(got == want and want, f"node metrics, {label}: OTLP {sorted(got.items())}\n/metrics {sorted(want.items())}")
        check(("cudatrace_otlp_spans_total", frozenset({("outcome", "sent")})) in points,
              f"node metrics, {label}: no spans' counts beside: {sorted(points)}")


def test_spans_and_metrics(cudatrace, request_type, otel_exe):
    """One run, --otlp alone: the spans of the calls under a span, and the metrics of every call."""
    c = Collector(request_type)
    p = subprocess.run([cudatrace, "--otlp", c.url(), "--", otel_exe], capture_output=True, text=True,
                       timeout=RUN_TIMEOUT_S)
    c.close()
    check(p.returncode == 0 and not c.errors, f"spans and metrics: exit {p.returncode}, {c.errors}: {p.stderr}")
    mallocs = sorted(attrs(s).get("cuda.arg.size") for _, s in c.spans() if s.name == "cudaMalloc")
    check(mallocs == [2, 3], f"spans and metrics: cudaMalloc spans of sizes {mallocs}")
    counted = sum(v for (n, l), v in last_metrics(c).items() if n == "cuda_api_calls_total" and ("api", "cudaMalloc") in l)
    check(counted == 6, f"spans and metrics: {counted} cudaMalloc calls in the metrics, want 6 (under a span or not)")


def test_spans_beside_prometheus(cudatrace, request_type, otel_exe):
    """--prometheus with --otlp: the exporter counts every call in the kernel and records only the
    calls made under a span, which go out as spans; the metrics pushed count all of them."""
    c = Collector(request_type)
    p = subprocess.run([cudatrace, "--prometheus", "127.0.0.1:0", "--otlp", c.url(), "--", otel_exe],
                       capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    c.close()
    check(p.returncode == 0 and not c.errors, f"beside --prometheus: exit {p.returncode}, {c.errors}: {p.stderr}")
    spans = [s for _, s in c.spans()]
    mallocs = sorted(attrs(s).get("cuda.arg.size") for s in spans if s.name == "cudaMalloc")
    check(mallocs == [2, 3], f"beside --prometheus: cudaMalloc spans of sizes {mallocs}")
    check(all(s.parent_span_id for s in spans), f"beside --prometheus: a span without a parent: {spans}")
    counted = sum(v for (n, l), v in last_metrics(c).items() if n == "cuda_api_calls_total" and ("api", "cudaMalloc") in l)
    check(counted == 6, f"beside --prometheus: {counted} cudaMalloc calls in the metrics, want 6 (under a span or not)")


def test_all_processes(cudatrace, request_type, fake_app):
    """--all-processes: the spans of two processes, each under a resource of its own. Only the event
    group is probed: the other processes of this host (other tests' loops) add few calls if any."""
    c = Collector(request_type)
    tracer = subprocess.Popen([cudatrace, "--all-processes", "--otlp", c.url(), "--otlp-all-calls", "-f", "event",
                               "-v"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    apps = []
    try:
        err_lines = []
        said = threading.Condition()

        def read_stderr():
            for line in tracer.stderr:
                with said:
                    err_lines.append(line)
                    said.notify_all()

        def wait_for(text):
            with said:
                return said.wait_for(lambda: any(text in line for line in err_lines), RUN_TIMEOUT_S)

        def start(name):
            app = subprocess.Popen([fake_app, "basic-then-wait"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                   env=dict(os.environ, OTEL_SERVICE_NAME=name), text=True)
            apps.append(app)
            return app

        reader = threading.Thread(target=read_stderr, daemon=True)
        reader.start()
        check(wait_for("tracing every process"), "--all-processes: cudatrace did not say it was tracing")
        # The fixtures' runtime is probed when a process first maps it, which that process does not
        # wait for: a first one has it probed (-v says so), then the two below are traced from their first call.
        warm_up = start("otlp-test-warm-up")
        check(wait_for(f"pid {warm_up.pid}: {os.path.dirname(fake_app)}"), "--all-processes: the fixtures not probed")
        names = {start(name).pid: name for name in ("otlp-test-one", "otlp-test-two")}
        timed = lambda: {r.get("process.pid") for r, s in c.spans() if s.name == "cudaEventElapsedTime"}
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline and not set(names) <= timed():
            time.sleep(0.1)
        for app in apps:
            app.stdin.close()
            app.wait(timeout=RUN_TIMEOUT_S)
        tracer.send_signal(2)  # SIGINT, as Ctrl-C
        status = tracer.wait(timeout=RUN_TIMEOUT_S)
        reader.join(timeout=RUN_TIMEOUT_S)
        check(status == 0, f"--all-processes: exit {status}: {''.join(err_lines[-5:])}")
        ours = [(r, s) for r, s in c.spans() if r.get("process.pid") in names]
        for pid in names:
            spans = sorted(s.name for r, s in ours if r.get("process.pid") == pid)
            check(spans == ["cudaEventCreate", "cudaEventCreate", "cudaEventElapsedTime", "cudaEventRecord",
                            "cudaEventRecord"], f"--all-processes: process {pid}'s spans {spans}")
        services = {(r.get("process.pid"), r.get("service.name")) for r, _ in ours}
        check(services == set(names.items()), f"--all-processes: resources {services}, want {names}")
        # One resource per process in a request: none holds the spans of two.
        for path, _, req in c.requests:
            if path == "/v1/traces":
                named = [a.value.int_value for rs in req.resource_spans for a in rs.resource.attributes
                         if a.key == "process.pid"]
                check(len(named) == len(set(named)) == len(req.resource_spans),
                      f"--all-processes: resources of one request name pids {named}")
    finally:
        for app in apps:
            stop_process(app)
        stop_process(tracer)
        c.close()

def test_bad_settings(cudatrace, app):
    for env, args, words in (({"OTEL_EXPORTER_OTLP_COMPRESSION": "zip"}, ["--otlp"], "OTEL_EXPORTER_OTLP_COMPRESSION"),
                             ({"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}, ["--otlp"], "OTEL_EXPORTER_OTLP_TIMEOUT"),
                             ({}, ["--otlp", "ftp://x"], "http:// or https://"),
                             ({}, ["--otlp-all-calls"], "needs --otlp")):
        p = subprocess.run([cudatrace, *args, "--", app], env=dict(os.environ, **env), capture_output=True, text=True,
                           timeout=RUN_TIMEOUT_S)
        lines = p.stderr.strip().splitlines()
        check(p.returncode == 2 and len(lines) == 1 and words in lines[0],
              f"bad setting {env} {args}: exit {p.returncode}, stderr {p.stderr!r}")


def main():
    if os.geteuid() != 0:
        print("skipped: needs root")
        sys.exit(77)
    cudatrace, proto_dir, otel_exe, otel_lib, fake_app = sys.argv[1:6]
    with tempfile.TemporaryDirectory() as schema_dir:
        request_type = compile_schema(proto_dir, schema_dir)
        test_bad_settings(cudatrace, otel_exe)
        for app, label in ((otel_exe, "context in the executable"), (otel_lib, "context in a library")):
            test_spans(cudatrace, request_type, app, label, gzip_on=False)
        test_spans(cudatrace, request_type, otel_exe, "gzip", gzip_on=True)
        test_no_span_and_environment(cudatrace, request_type, fake_app)
        test_selection(cudatrace, request_type, fake_app)
        test_pid_mode(cudatrace, request_type, fake_app)
        test_retry(cudatrace, request_type, otel_exe)
        test_unreachable(cudatrace, request_type, otel_exe, "never answers", answers=(None,))
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            down = f"http://127.0.0.1:{s.getsockname()[1]}"
        test_unreachable(cudatrace, request_type, otel_exe, "down", answers=None, url=down)
        test_queue_bound(cudatrace, request_type, otel_exe)
        test_metrics(cudatrace, request_type, fake_app)
        test_spans_metrics(cudatrace, request_type, otel_exe)
        test_node_metrics(cudatrace, request_type, fake_app)
        test_spans_and_metrics(cudatrace, request_type, otel_exe)
        test_spans_beside_prometheus(cudatrace, request_type, otel_exe)
        test_all_processes(cudatrace, request_type, fake_app)
    if failures:
        print(f"{len(failures)} checks failed")
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
