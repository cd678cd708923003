"""Benchmark: wall time of the emulated local-host lifecycle, phase by phase, beside issue 15's targets.

The host is tests/substrate/lifecycle.py's (the Docker Engine API double, kind, docker, helm and
clusterctl stand-ins, the real docker-registry, emulated Flux, CAPI and CAPD); the runs are the user's
commands, as extensions/molecule/emulated and test_e2e_local_host run them:

    ansible-playbook -i inventories/local-host playbooks/local-host.yml                   (converge)
    ansible-playbook -i inventories/local-host playbooks/local-host.yml                   (re-run, changed=0)
    ansible-playbook -i inventories/local-host playbooks/local-host.yml --tags teardown

Prints the time of each phase (bootstrap and pivot are the converge's roles, from the JSON callback's
task times; preflight is counted with the bootstrap), the cycle's total and the re-run beside the
targets: whole cycle under 60 s, re-run under 30 s, on 2 cores. Each of ``--repeat N`` cycles runs on a
fresh host; the summary gives the best, median and worst of them. The targets assume the 2 cores are
the benchmark's: the 1-minute load average is printed at the start and the end of each cycle, and the
CPU seconds the cycle used (this process and its children), which other load on the machine does not
inflate much, beside the wall time, which it does.

Run from the repository root: .venv/bin/python tests/benchmarks/e2e_bench.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / ".collections")]

from tests.substrate.lifecycle import EmulatedWorld, changed_tasks, failed_tasks, role_times  # noqa: E402
from tests.substrate import product_differential  # noqa: E402

CYCLE_TARGET = 60.0
RERUN_TARGET = 30.0
INVENTORY = "inventories/local-host"
PLAYBOOK = "playbooks/local-host.yml"


def cpu_seconds():
    """User + system CPU of this process (the emulated world) and of its finished children (ansible, tools)."""
    return sum(
        getattr(resource.getrusage(who), field)
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
        for field in ("ru_utime", "ru_stime")
    )


def load1():
    return os.getloadavg()[0]


def run(world, *args):
    started = time.monotonic()
    rc, output, stderr = world.playbook(PLAYBOOK, *args, inventory=INVENTORY)
    elapsed = time.monotonic() - started
    if rc:
        raise SystemExit(
            f"ansible-playbook {' '.join(args)} failed (rc {rc}): {failed_tasks(output)}\n{stderr[-2000:]}"
        )
    return elapsed, output


def cycle():
    """One cycle on a fresh host: {phase: seconds}, the re-run's changed tasks and the world's errors."""
    tmp = Path(tempfile.mkdtemp(prefix="krops-e2e-bench-"))
    times = {"load at start": load1()}
    cpu = cpu_seconds()
    try:
        started = time.monotonic()
        world = EmulatedWorld(tmp / "host").start()
        times["host up"] = time.monotonic() - started
        try:
            converge, output = run(world)
            # the converge's wall time split at the pivot role's start: preflight and bootstrap before it
            times["pivot"] = role_times(output).get("pivot", 0.0)
            times["bootstrap"] = converge - times["pivot"]
            times["re-run"], output = run(world)
            changed = changed_tasks(output)
            times["teardown"], _output = run(world, "--tags", "teardown")
        finally:
            errors = world.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    times["cycle"] = converge + times["teardown"]
    times["cpu"] = cpu_seconds() - cpu
    times["load at end"] = load1()
    return times, changed, errors


ROWS = (
    ("host up", "host up (Docker double, stand-ins, emulated Flux/CAPI)", "s"),
    ("bootstrap", "bootstrap (preflight, kind, registry, push, Flux handoff, workload)", "s"),
    ("pivot", "pivot (clusterctl move, Flux on the management cluster, kind deleted)", "s"),
    ("re-run", "idempotent re-run", "s"),
    ("teardown", "teardown", "s"),
    ("cycle", "whole cycle (converge + teardown)", "s"),
    ("cpu", "CPU used by the whole run (world + ansible + tools)", "s"),
    ("load at start", "1-minute load average at the start", ""),
    ("load at end", "1-minute load average at the end", ""),
)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="cycles to run, each on a fresh host (default 1)")
    args = parser.parse_args(argv)
    product_differential.install()  # krops' validators beside the emulator's verdicts, as in the test run
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    print(f"{args.repeat} cycle(s) on {os.cpu_count()} CPUs; the targets assume the CPUs are the benchmark's")
    results, failures = [], []
    for number in range(1, args.repeat + 1):
        times, changed, errors = cycle()
        results.append(times)
        width = max(len(label) for _key, label, _unit in ROWS)
        print(f"-- cycle {number}/{args.repeat}")
        for key, label, unit in ROWS:
            note = f"   changed={len(changed)}" if key == "re-run" else ""
            print(f"{label:<{width}}  {times[key]:6.1f} {unit}{note}")
        if changed:
            failures.append(f"cycle {number}: the re-run changed: " + ", ".join(changed))
        if errors:
            failures.append(f"cycle {number}: world errors: " + "; ".join(errors))
    print("-- summary over %d cycle(s): best / median / worst" % len(results))
    for key, target in (("cycle", CYCLE_TARGET), ("re-run", RERUN_TARGET)):
        values = sorted(r[key] for r in results)
        over = sum(v >= target for v in values)
        print(
            f"{key:<8} {values[0]:6.1f} / {statistics.median(values):6.1f} / {values[-1]:6.1f} s   "
            f"target < {target:.0f} s: {'ok' if not over else f'OVER in {over} of {len(values)}'}"
        )
    loads = [r[k] for r in results for k in ("load at start", "load at end")]
    print(f"load     {min(loads):6.1f} .. {max(loads):.1f} (1-minute average at the start and end of each cycle)")
    for failure in failures:
        print(failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
