#!/usr/bin/env bash
# Checks deploy/ (scripts/test.sh runs it): the systemd unit passes
# `systemd-analyze verify` (where systemd-analyze exists; any warning fails),
# the DaemonSet manifest parses and keeps its required shape, and both start
# cudatrace with options that this cudatrace has.
# Usage: scripts/deploy-check.sh CUDATRACE_BINARY
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:?usage: deploy-check.sh CUDATRACE_BINARY}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

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

python3 - "$bin" deploy/cudatrace-daemonset.yaml <<'PY'
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
help_text = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
for arg in c["args"]:
    if arg.startswith("--") and not re.search(r"(^| |,)" + re.escape(arg) + r"( |,|=|$)", help_text, re.M):
        fail(f"{arg} is not a cudatrace option")
port = c["args"][c["args"].index("--prometheus") + 1].rsplit(":", 1)[1]
if int(port) != c["ports"][0]["containerPort"]:
    fail("--prometheus's port is not the container port")
print(f"deploy-check: {path} parsed and checked")
PY
