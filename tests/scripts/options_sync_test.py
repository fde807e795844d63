#!/usr/bin/env python3
"""The man page and the bash completion name exactly the long options that
`cudatrace --help` and `cudatrace report --help` list.

Usage: options_sync_test.py CUDATRACE MAN_PAGE COMPLETION
"""
import re
import subprocess
import sys


def help_options(binary, *args):
    out = subprocess.run([binary, *args, "--help"], check=True, capture_output=True, text=True).stdout
    # Option lines: "  -p,--pid PID   Trace ..." or "  --json   JSON ...": names before the description.
    return {m for line in out.splitlines() if re.match(r"\s+-", line)
            for m in re.findall(r"--[a-z][a-z0-9-]*", line.strip().split("  ")[0])}


def main():
    binary, man_page, completion = sys.argv[1:4]
    live = help_options(binary)
    report = help_options(binary, "report")
    wanted = live | report
    if len(live) < 10 or len(report) < 5:
        sys.exit(f"too few options in --help: {sorted(live)} / {sorted(report)}")

    man = open(man_page, encoding="utf-8").read()
    in_man = set(re.findall(r"\\-\\-([a-z](?:[a-z0-9]|\\-)*)", man))  # roff: \-\-min\-us
    in_man = {"--" + o.replace("\\-", "-") for o in in_man}
    text = open(completion, encoding="utf-8").read()
    in_completion = set(re.findall(r"--[a-z][a-z0-9-]*", text))

    failed = False
    for name, found in (("the man page", in_man), ("the bash completion", in_completion)):
        for missing in sorted(wanted - found):
            print(f"{missing} is in --help but not in {name}")
            failed = True
        for extra in sorted(found - wanted):
            print(f"{extra} is in {name} but not in --help")
            failed = True
    # The report subcommand's own list in the completion.
    report_words = re.search(r"report_opts=\"([^\"]*)\"", text)
    if not report_words or set(re.findall(r"--[a-z][a-z0-9-]*", report_words.group(1))) != report:
        print(f"the completion's report_opts are not {sorted(report)}")
        failed = True
    # The groups of -f: --help writes them from the API table.
    help_text = " ".join(subprocess.run([binary, "--help"], check=True, capture_output=True, text=True).stdout.split())
    m = re.search(r"GROUPS: traced without -f: (.*?)\. Off by default, traced with -f \(comma-separated\): (.*?); all:",
                  help_text)
    groups = set(re.findall(r"[a-z]+", m.group(1) + " " + m.group(2))) | {"all"} if m else set()
    completion_groups = re.search(r"groups=\"([^\"]*)\"", text)
    if not groups or not completion_groups or set(completion_groups.group(1).split()) != groups:
        print(f"the completion's groups are not --help's {sorted(groups)}")
        failed = True
    filter_paragraph = man[man.find("\\-\\-filter"):man.find(".TP", man.find("\\-\\-filter"))]
    man_groups = set(re.findall(r"\\fB([a-z]+)\\fR", filter_paragraph))
    if groups and not groups <= man_groups:
        print(f"the man page's -f paragraph lacks the groups {sorted(groups - man_groups)}")
        failed = True
    if failed:
        sys.exit(1)
    print(f"{len(wanted)} long options in --help, the man page and the completion; {len(groups)} groups")


if __name__ == "__main__":
    main()
