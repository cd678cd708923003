"""Benchmark: how long the test tiers take, beside the figures of the last recorded run (issue 28).

Tiers (docs/testing.md says which to run when):

    check       `make check` in this checkout (set up): units, ruff, the tests not marked slow
    integration `make integration` in this checkout: the whole pytest suite (pytest-xdist)
    fresh       `make test` in a fresh clone of HEAD in an empty temporary folder, set-up included

Targets: check under 120 s, fresh under 600 s, on 2 cores. The machine's other load inflates wall
time, so the 1-minute load average at the start and the end of each tier is printed too. Each line
also gives the pytest summary of the tier (how many tests passed).

    --count         tests collected (all, and not slow) and `assert` statements in the test files
                    (AST), the honesty figures: they must not go down when the suite gets faster
    --profile FILE  a per-file table (tests, seconds, slowest test) from a pytest --junitxml file
    --tasks DIR     the slowest playbook tasks of a run with KROPS_PLAYBOOK_LOG=DIR (tests/substrate/
                    fixtures.py keeps each ansible_playbook run's JSON output there): seconds summed
                    per task name over every run, with how many runs and loop items it took
    --record        store this run's figures in tests/benchmarks/suite_time.json (committed)
    --durations-from FILE  the seconds of the playbook and lifecycle tests of a whole-suite pytest --junitxml
                    file into tests/benchmarks/durations.json, which `make durations` (the other tests, on an
                    idle machine) leaves out: conftest then orders the files by measured cost, not by estimate

Run from the repository root: .venv/bin/python tests/benchmarks/suite_time.py [--tier check] [--count]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIGURES = REPO / "tests" / "benchmarks" / "suite_time.json"
TARGETS = {"check": 120.0, "integration": None, "fresh": 600.0}
SUMMARY = re.compile(r"^=+ (.*(passed|failed).*) =+$")


def load():
    return os.getloadavg()[0]


def summary_of(text):
    lines = [m.group(1) for m in map(SUMMARY.match, text.splitlines()) if m]
    return lines[-1] if lines else ""


def run_tier(tier):
    if tier == "fresh":
        folder = Path(tempfile.mkdtemp(prefix="krops-fresh-"))
        clone = folder / "x"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        argv, cwd = ["make", "test"], clone
    else:
        argv, cwd = ["make", "check" if tier == "check" else "integration"], REPO
    start_load, start = load(), time.monotonic()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    return {
        "seconds": round(seconds, 1),
        "rc": proc.returncode,
        "load": [round(start_load, 2), round(load(), 2)],
        "pytest": summary_of(proc.stdout),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tail": proc.stdout[-2000:] + proc.stderr[-2000:] if proc.returncode else "",
    }


def count():
    asserts, files = 0, 0
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        files += 1
        asserts += sum(isinstance(n, ast.Assert) for n in ast.walk(ast.parse(path.read_text())))
    collected = {}
    for name, marks in (("all", []), ("not slow", ["-m", "not slow"])):
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", *marks],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        found = re.search(r"(\d+)(?:/\d+)? tests? collected", proc.stdout)
        collected[name] = int(found.group(1)) if found else None
    return {
        "test files": files,
        "assert statements": asserts,
        "tests": collected["all"],
        "quick": collected["not slow"],
    }


def profile(junit):
    per_file = defaultdict(lambda: [0, 0.0, ("", 0.0)])
    for case in ET.parse(junit).iter("testcase"):
        if not case.get("classname"):
            continue  # a run interrupted mid-test records it without one
        name = case.get("classname").replace(".", "/") + ".py"
        seconds = float(case.get("time") or 0)
        row = per_file[name]
        row[0] += 1
        row[1] += seconds
        if seconds > row[2][1]:
            row[2] = (case.get("name"), seconds)
    print("| file | tests | seconds | slowest test (s) |")
    print("|---|---:|---:|---|")
    for name, (tests, seconds, slowest) in sorted(per_file.items(), key=lambda kv: -kv[1][1]):
        print(f"| `{Path(name).name}` | {tests} | {seconds:.0f} | `{slowest[0]}` ({slowest[1]:.0f}) |")
    total = sum(r[1] for r in per_file.values())
    print(f"| total | {sum(r[0] for r in per_file.values())} | {total:.0f} | |")


def _nodeid(case):
    """The pytest node id of a junit testcase (the suite has no test classes: classname is the module)."""
    return case.get("classname").replace(".", "/") + ".py::" + case.get("name")


def durations_from(junit):
    """Record the playbook and lifecycle tests' seconds from a whole-suite junit file (see the docstring)."""
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "playbook or lifecycle",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    wanted = {line for line in listed if "::" in line}
    measured = {
        _nodeid(case): round(float(case.get("time") or 0), 2)
        for case in ET.parse(junit).iter("testcase")
        if case.get("classname") and _nodeid(case) in wanted
    }
    path = REPO / "tests" / "benchmarks" / "durations.json"
    recorded = json.loads(path.read_text())
    recorded["seconds"] = dict(sorted({**recorded["seconds"], **measured}.items()))
    path.write_text(json.dumps(recorded, indent=0) + "\n")
    print(f"durations: {len(measured)} of {len(wanted)} playbook and lifecycle tests recorded from {junit}")


def _seconds(duration):
    start, end = (datetime.fromisoformat(duration[k].replace("Z", "+00:00")) for k in ("start", "end"))
    return (end - start).total_seconds()


def tasks(folder, top=30):
    """Print the tasks that cost most over every playbook run kept in folder."""
    spent, runs, items, total = defaultdict(float), defaultdict(int), defaultdict(int), 0.0
    for path in sorted(Path(folder).glob("*.json")):
        try:
            output = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            continue
        for play in output.get("plays", []):
            for task in play.get("tasks", []):
                duration = task["task"].get("duration") or {}
                if "start" not in duration or "end" not in duration:
                    continue
                name, seconds = task["task"]["name"], _seconds(duration)
                spent[name] += seconds
                runs[name] += 1
                items[name] += max((len(h.get("results") or [None]) for h in task["hosts"].values()), default=1)
                total += seconds
    print(f"{total:.1f} s in {sum(runs.values())} task runs; the slowest task names:")
    print("| seconds | runs | items | task |\n|---:|---:|---:|---|")
    for name in sorted(spent, key=spent.get, reverse=True)[:top]:
        print(f"| {spent[name]:.1f} | {runs[name]} | {items[name]} | {name} |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", action="append", choices=sorted(TARGETS), help="default: all three")
    parser.add_argument("--count", action="store_true")
    parser.add_argument("--profile", metavar="JUNIT_XML")
    parser.add_argument("--tasks", metavar="DIR")
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--durations-from", metavar="JUNIT_XML")
    args = parser.parse_args(argv)
    if args.durations_from:
        durations_from(args.durations_from)
        return 0
    if args.profile:
        profile(args.profile)
        return 0
    if args.tasks:
        tasks(args.tasks)
        return 0
    last = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    now = {}
    if args.count:
        now["count"] = count()
        before = last.get("count", {})
        for key, value in now["count"].items():
            print(f"{key:>18}: {value}   (last recorded: {before.get(key, '-')})")
    failed = False
    for tier in [] if args.count and not args.tier else (args.tier or ["check", "integration", "fresh"]):
        result = now[tier] = run_tier(tier)
        previous = last.get(tier, {})
        target = TARGETS[tier]
        verdict = (
            ""
            if target is None
            else (" under" if result["seconds"] < target else " OVER") + f" the {target:.0f} s target"
        )
        print(
            f"{tier:>12}: {result['seconds']:7.1f} s{verdict}; rc {result['rc']}; load {result['load'][0]} -> "
            f"{result['load'][1]}; {result['pytest'] or 'no pytest summary'}   "
            f"(last: {previous.get('seconds', '-')} s, load {previous.get('load', '-')}, {previous.get('pytest', '-')}, "
            f"{previous.get('when', '-')})"
        )
        if result["rc"]:
            failed = True
            print(result["tail"])
    if args.record:
        merged = dict(last)
        for key, value in now.items():
            merged[key] = {k: v for k, v in value.items() if k != "tail"}
        FIGURES.write_text(json.dumps(merged, indent=2, sort_keys=True) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
