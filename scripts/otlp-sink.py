#!/usr/bin/env python3
"""A stand-in for an OpenTelemetry Collector: receives OTLP/HTTP protobuf
requests on 127.0.0.1:PORT and prints each one as `protoc --decode` reads it
with the vendored schema (third_party/opentelemetry-proto), ids as hex.
See what `cudatrace --otlp` sends without running a Collector (docs/otlp.md).

Usage: otlp-sink.py [--port 4318] [--requests N]   (N: exit after N requests)
"""
import argparse
import gzip
import http.server
import os
import re
import subprocess
import sys

SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "third_party", "opentelemetry-proto")
MESSAGES = {
    "/v1/traces": ("opentelemetry/proto/collector/trace/v1/trace_service.proto",
                   "opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest"),
    "/v1/metrics": ("opentelemetry/proto/collector/metrics/v1/metrics_service.proto",
                    "opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest"),
}


def octal_bytes(escaped):
    """The bytes of a protobuf text-format string literal ("\\n\\001...")."""
    return escaped.encode("latin-1").decode("unicode_escape").encode("latin-1")


def with_hex_ids(text):
    return re.sub(r'((?:trace_id|span_id|parent_span_id): )"((?:[^"\\]|\\.)*)"',
                  lambda m: m.group(1) + octal_bytes(m.group(2)).hex(), text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=4318)
    ap.add_argument("--requests", type=int, default=0)
    args = ap.parse_args()
    received = 0

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            nonlocal received
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            proto, message = MESSAGES.get(self.path, (None, None))
            if proto is None:
                self.send_response(404)
                self.end_headers()
                return
            decoded = subprocess.run(["protoc", "--proto_path=" + SCHEMA, "--decode=" + message, proto], input=body,
                                     capture_output=True, check=False)
            print(f"POST {self.path}")
            print(with_hex_ids(decoded.stdout.decode()) if decoded.returncode == 0 else decoded.stderr.decode(),
                  flush=True)
            self.send_response(200 if decoded.returncode == 0 else 400)
            self.send_header("Content-Length", "0")
            self.end_headers()
            received += 1

    server = http.server.HTTPServer(("127.0.0.1", args.port), Handler)
    print(f"listening on http://127.0.0.1:{args.port}", file=sys.stderr, flush=True)
    while not args.requests or received < args.requests:
        server.handle_request()


if __name__ == "__main__":
    main()
