#!/usr/bin/env python3
"""The README's first two commands work as written both as root on a fresh
Debian machine (no sudo there) and as a user with sudo: the scripts that need
root source scripts/as-root.sh first, which does nothing as root, runs the
script again through sudo otherwise, and says in one line that it needs root
when there is no sudo.

Usage: as_root_test.py SOURCE_DIR
"""
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

failures = []
SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def run(script, args, path, as_nobody):
    cmd = ["/bin/bash", script, *args]
    if as_nobody:
        cmd = [SETPRIV, "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={"PATH": path}, cwd="/")


def main():
    source = sys.argv[1]
    helper = os.path.join(source, "scripts", "as-root.sh")
    tmp = tempfile.mkdtemp(prefix="cudatrace-as-root-")
    try:
        os.chmod(tmp, 0o755)  # nobody runs the scripts in here
        shutil.copy(helper, os.path.join(tmp, "as-root.sh"))
        script = os.path.join(tmp, "needs-root.sh")
        with open(script, "w") as f:
            f.write('set -eu\n. "$(dirname "$0")/as-root.sh"\necho "ran as $(id -u): $*"\n')
        # A PATH of the tools the helper uses and nothing else (no real sudo).
        bare = os.path.join(tmp, "bin")
        os.mkdir(bare)
        for tool in ("id", "basename", "dirname"):
            os.symlink(shutil.which(tool), os.path.join(bare, tool))
        # A sudo that only says how it was called.
        with_sudo = os.path.join(tmp, "sudo-bin")
        shutil.copytree(bare, with_sudo, symlinks=True)
        fake_sudo = os.path.join(with_sudo, "sudo")
        with open(fake_sudo, "w") as f:
            f.write('#!/bin/bash\necho "sudo called with: $*"\n')
        os.chmod(fake_sudo, 0o755)
        for p in (tmp, bare, with_sudo):
            os.chmod(p, os.stat(p).st_mode | stat.S_IROTH | stat.S_IXOTH)

        as_nobody = os.geteuid() == 0  # not root already: the test user is the non-root one
        if os.geteuid() == 0:
            for path in (bare, with_sudo):
                r = run(script, ["a", "b"], path, False)
                check(r.returncode == 0 and r.stdout == "ran as 0: a b\n" and r.stderr == "",
                      f"as root (PATH {os.path.basename(path)}): runs itself, no sudo: {r}")
        r = run(script, ["a", "b c"], with_sudo, as_nobody)
        check(r.returncode == 0 and r.stdout == f"sudo called with: -- bash {script} a b c\n",
              f"not root, sudo there: runs itself again through sudo: {r}")
        r = run(script, ["a"], bare, as_nobody)
        check(r.returncode == 1 and r.stdout == "" and
              r.stderr == "needs-root.sh: needs root: run it as root (sudo is not installed)\n",
              f"not root, no sudo: one line, status 1: {r}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    # The README's commands are these scripts, without sudo, and each script
    # sources the helper before doing anything.
    readme = open(os.path.join(source, "README.md"), encoding="utf-8").read()
    block = re.search(r"```sh\n(.*?)```", readme, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines()]
    check(commands == ["bash scripts/demo.sh", "bash scripts/test.sh"], f"README's first commands: {commands}")
    for name in ("demo.sh", "test.sh", "install-deps.sh"):
        lines = [l for l in open(os.path.join(source, "scripts", name)).read().splitlines()
                 if l and not l.startswith("#")]
        check(lines[:2] == ["set -euo pipefail", '. "$(dirname "$0")/as-root.sh"'],
              f"scripts/{name} starts with the helper: {lines[:2]}")
    ci = open(os.path.join(source, ".ci", "run")).read()
    check("bash scripts/install-deps.sh\nbash scripts/test.sh\n" in ci, ".ci/run runs the README's way")
    if failures:
        sys.exit(f"{len(failures)} failed")
    print("as-root: all checks passed")


if __name__ == "__main__":
    main()
