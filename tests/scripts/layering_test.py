#!/usr/bin/env python3
"""The source tree reads record -> decode -> analysis -> render, and no
include runs back up (docs/architecture.md, "Stages"): each stage's files
(src/STAGE/ and include/cudatrace/STAGE/) include only the stages below it.
The top-level headers (bpf_abi.h, options.h, accounting.h, clock.h, terminal.h,
node_counts.h, json_fields.h) are shared by every stage and include none but
the bottom one, decode (options.h: the API selection).

Usage: layering_test.py SOURCE_DIR
"""
import pathlib
import re
import sys

# What each stage may include besides itself and the top-level headers.
ALLOWED = {
    "decode": set(),
    "target": {"decode"},
    "record": {"decode", "target"},
    "analysis": {"decode"},
    "render": {"decode", "target", "analysis"},
    "drive": {"decode", "target", "record", "analysis", "render"},
    "cli": {"decode", "target", "record", "analysis", "render", "drive"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"cudatrace/([a-z_]+)/', re.M)


def main():
    root = pathlib.Path(sys.argv[1])
    problems, files = [], 0
    for stage, allowed in ALLOWED.items():
        for base in (root / "src" / stage, root / "include" / "cudatrace" / stage):
            for path in sorted(base.glob("*")):
                if path.suffix not in (".cpp", ".c", ".h"):
                    continue
                files += 1
                for used in INCLUDE.findall(path.read_text(encoding="utf-8")):
                    if used != stage and used not in allowed:
                        problems.append(f"{path.relative_to(root)}: {stage} includes {used}")
    for header in sorted((root / "include" / "cudatrace").glob("*.h")):
        files += 1
        for used in INCLUDE.findall(header.read_text(encoding="utf-8")):
            if used != "decode":
                problems.append(f"{header.relative_to(root)}: a shared header includes the {used} stage")
    stages = {p.name for p in (root / "src").iterdir() if p.is_dir()}
    if stages != set(ALLOWED):
        problems.append(f"src/ has stages {sorted(stages)}, this test knows {sorted(ALLOWED)}")
    if files < 100:
        problems.append(f"only {files} files found under {root}: wrong directory?")
    for p in problems:
        print(p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
