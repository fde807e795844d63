#!/usr/bin/env bash
# Checks deploy/ (scripts/test.sh runs it) with the binary that both run,
# BUILD/install/cudatrace (cudatrace-static, stripped: what the Debian package
# installs as /usr/bin/cudatrace and the image carries): it has every exporter
# (no "built without" in its --version); the systemd unit passes
# `systemd-analyze verify` (where systemd-analyze exists; any warning fails);
# the DaemonSet manifest parses and keeps its required shape; both start
# cudatrace with options that it has; deploy/Containerfile builds, with
# podman, the image that the DaemonSet names, whose entrypoint and user are
# the DaemonSet's; and the binary taken out of the image's filesystem (not
# run by podman: a runtime may refuse its limits where this runs) is that
# binary, and serves a scrape of --all-processes --prometheus.
# Usage: scripts/deploy-check.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:?usage: deploy-check.sh BUILD_DIR}")/install/cudatrace
[ -x "$bin" ] || { echo "deploy-check: no $bin (build the cudatrace-static target)" >&2; exit 1; }
tmp=$(mktemp -d)
image=""
tracer=""
cleanup() {
  [ -z "$tracer" ] || kill "$tracer" 2>/dev/null || true
  [ -z "$image" ] || podman rmi -f "$image" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

if without=$("$bin" --version | grep '^built without:'); then
  echo "deploy-check: $bin lacks an exporter: $without" >&2
  exit 1
fi

unit=deploy/cudatrace.service
# The options the unit passes must be options of this cudatrace.
exec_args=$(sed -n 's|^ExecStart=/usr/bin/cudatrace ||p' "$unit")
[ -n "$exec_args" ] || { echo "deploy-check: $unit: no ExecStart=/usr/bin/cudatrace line" >&2; exit 1; }
help=$("$bin" --help)
for flag in $exec_args; do
  case $flag in
    --*) grep -qE -- "(^| |,)$flag( |,|=|$)" <<<"$help" || { echo "deploy-check: $unit: $flag is not a cudatrace option" >&2; exit 1; } ;;
  esac
done

if command -v systemd-analyze >/dev/null; then
  # The unit as installed, but starting the binary under test; the man page
  # it names comes from docs/.
  mkdir -p "$tmp/man/man8"
  cp docs/cudatrace.8 "$tmp/man/man8/"
  sed "s|^ExecStart=/usr/bin/cudatrace|ExecStart=$bin|" "$unit" >"$tmp/cudatrace.service"
  if ! out=$(MANPATH="$tmp/man" systemd-analyze verify "$tmp/cudatrace.service" 2>&1) || [ -n "$out" ]; then
    echo "deploy-check: systemd-analyze verify $unit:" >&2
    echo "$out" >&2
    exit 1
  fi
  echo "deploy-check: $unit verified"
else
  echo "deploy-check: no systemd-analyze here: $unit not verified"
fi

python3 - "$bin" deploy/cudatrace-daemonset.yaml "$tmp/image" <<'PY'
import re, subprocess, sys, yaml
binary, path = sys.argv[1], sys.argv[2]
docs = [d for d in yaml.safe_load_all(open(path)) if d]
def fail(msg):
    sys.exit(f"deploy-check: {path}: {msg}")
if len(docs) != 1 or docs[0].get("kind") != "DaemonSet" or docs[0].get("apiVersion") != "apps/v1":
    fail("expected one apps/v1 DaemonSet")
ds = docs[0]
pod = ds["spec"]["template"]["spec"]
if ds["spec"]["selector"]["matchLabels"].items() - ds["spec"]["template"]["metadata"]["labels"].items():
    fail("the selector does not match the pod template's labels")
if pod.get("hostPID") is not True:
    fail("hostPID must be true (whole-node mode sees the node's processes)")
(c,) = pod["containers"]
sc = c["securityContext"]
if sc.get("privileged") or sc.get("allowPrivilegeEscalation") is not False:
    fail("the container must not be privileged nor escalate")
caps = sc["capabilities"]
if caps.get("drop") != ["ALL"]:
    fail("capabilities must drop ALL")
if set(caps["add"]) != {"BPF", "PERFMON", "SYS_PTRACE", "CHECKPOINT_RESTORE"}:
    fail(f"unexpected capabilities {caps['add']}")
mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
for needed in ("/sys/kernel/btf", "/host/proc"):
    if needed not in mounts or mounts[needed].get("readOnly") is not True:
        fail(f"{needed} must be mounted read-only")
volumes = {v["name"] for v in pod["volumes"]}
if {m["name"] for m in c["volumeMounts"]} - volumes:
    fail("a volume mount names no volume")
if c.get("command"):
    fail("the image's entrypoint runs cudatrace: the container gives args only")
help_text = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
for arg in c["args"]:
    if arg.startswith("--") and not re.search(r"(^| |,)" + re.escape(arg) + r"( |,|=|$)", help_text, re.M):
        fail(f"{arg} is not a cudatrace option")
port = c["args"][c["args"].index("--prometheus") + 1].rsplit(":", 1)[1]
if int(port) != c["ports"][0]["containerPort"]:
    fail("--prometheus's port is not the container port")
print(f"deploy-check: {path} parsed and checked")
print(c["image"], file=open(sys.argv[3], "w"))
PY

# The image, under the DaemonSet's name plus a tag of this check's own (so
# that an image of that name already here is neither used nor replaced).
ds_image=$(cat "$tmp/image")
version=$("$bin" --version | sed -n '1s/^cudatrace //p')
[ "${ds_image##*:}" = "$version" ] ||
  { echo "deploy-check: deploy/cudatrace-daemonset.yaml: image $ds_image is not of version $version" >&2; exit 1; }
image="${ds_image%:*}:deploy-check-$$"
mkdir "$tmp/context"
cp "$bin" "$tmp/context/cudatrace"
podman build -q -f deploy/Containerfile -t "$image" "$tmp/context" >/dev/null
config=$(podman image inspect --format '{{json .Config.Entrypoint}} {{.Config.User}}' "$image")
[ "$config" = '["/cudatrace"] 0:0' ] ||
  { echo "deploy-check: deploy/Containerfile: entrypoint and user are $config, not [\"/cudatrace\"] 0:0" >&2; exit 1; }
root=$(podman image mount "$image")
cp "$root/cudatrace" "$tmp/from-image"
podman image unmount "$image" >/dev/null
cmp -s "$bin" "$tmp/from-image" || { echo "deploy-check: the image's /cudatrace is not $bin" >&2; exit 1; }

# The image's binary as the DaemonSet runs it, on a port it picks, scraped.
: >"$tmp/tracer.err"  # before the child opens it: the loop below reads it at once
"$tmp/from-image" --all-processes --prometheus 127.0.0.1:0 2>"$tmp/tracer.err" &
tracer=$!
port=""
deadline=$((SECONDS + 60))  # to start tracing
while [ "$SECONDS" -lt "$deadline" ]; do
  port=$(sed -n 's/.*serving Prometheus metrics on port \([0-9]*\).*/\1/p' "$tmp/tracer.err")
  # /metrics answers 503 until tracing has started.
  [ -z "$port" ] || ! curl -sf -m 5 -o "$tmp/metrics" "http://127.0.0.1:$port/metrics" || break
  kill -0 "$tracer" 2>/dev/null || break
  sleep 0.1
done
if [ ! -s "$tmp/metrics" ] || ! grep -qE '^cudatrace_tracing_since_seconds [0-9]' "$tmp/metrics"; then
  if kill -0 "$tracer" 2>/dev/null; then why="within 60 s"; else why="and exited"; fi
  echo "deploy-check: the image's cudatrace served no metrics $why; its stderr:" >&2
  cat "$tmp/tracer.err" >&2
  exit 1
fi
kill -INT "$tracer"
deadline=$((SECONDS + 10))  # to stop
while [ "$SECONDS" -lt "$deadline" ] && kill -0 "$tracer" 2>/dev/null; do sleep 0.1; done
if kill -0 "$tracer" 2>/dev/null; then
  echo "deploy-check: the image's cudatrace did not stop within 10 s of SIGINT" >&2
  exit 1
fi
wait "$tracer" || { echo "deploy-check: the image's cudatrace exited with status $? on SIGINT" >&2; exit 1; }
tracer=""
echo "deploy-check: deploy/Containerfile built $ds_image; its binary served $(grep -c '^[a-z]' "$tmp/metrics") samples"
