"""Benchmark: wall time of the emulated local-host lifecycle, phase by phase, beside issue 15's targets.

The host is tests/substrate/lifecycle.py's (the Docker Engine API double, kind, docker, helm and
clusterctl stand-ins, the real docker-registry, emulated Flux, CAPI and CAPD); the runs are the user's
commands, as extensions/molecule/emulated and test_e2e_local_host run them:

    ansible-playbook -i inventories/local-host playbooks/local-host.yml                   (converge)
    ansible-playbook -i inventories/local-host playbooks/local-host.yml                   (re-run, changed=0)
    ansible-playbook -i inventories/local-host playbooks/local-host.yml --tags teardown

Prints the time of each phase (bootstrap and pivot are the converge's roles, from the JSON callback's
task times; preflight is counted with the bootstrap), the cycle's total and the re-run beside the
targets: whole cycle under 60 s, re-run under 30 s, on 2 cores. Also prints the machine's load
average: the targets assume the 2 cores are the benchmark's.

Run from the repository root: .venv/bin/python tests/benchmarks/e2e_bench.py
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / ".collections")]

from tests.substrate.lifecycle import EmulatedWorld, changed_tasks, failed_tasks, role_times  # noqa: E402

CYCLE_TARGET = 60.0
RERUN_TARGET = 30.0
INVENTORY = "inventories/local-host"
PLAYBOOK = "playbooks/local-host.yml"


def run(world, *args):
    started = time.monotonic()
    rc, output, stderr = world.playbook(PLAYBOOK, *args, inventory=INVENTORY)
    elapsed = time.monotonic() - started
    if rc:
        raise SystemExit(
            f"ansible-playbook {' '.join(args)} failed (rc {rc}): {failed_tasks(output)}\n{stderr[-2000:]}"
        )
    return elapsed, output


def main():
    tmp = Path(tempfile.mkdtemp(prefix="krops-e2e-bench-"))
    phases = []
    try:
        started = time.monotonic()
        world = EmulatedWorld(tmp / "host").start()
        phases.append(("host up (Docker double, stand-ins, emulated Flux/CAPI)", time.monotonic() - started))
        try:
            converge, output = run(world)
            roles = role_times(output)
            # the converge's wall time split at the pivot role's start: preflight and bootstrap before it
            pivot = roles.get("pivot", 0.0)
            phases.append(("bootstrap (preflight, kind, registry, push, Flux handoff, workload)", converge - pivot))
            phases.append(("pivot (clusterctl move, Flux on the management cluster, kind deleted)", pivot))
            rerun, output = run(world)
            changed = changed_tasks(output)
            phases.append((f"idempotent re-run (changed={len(changed)})", rerun))
            teardown, _output = run(world, "--tags", "teardown")
            phases.append(("teardown", teardown))
        finally:
            errors = world.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    width = max(len(name) for name, _elapsed in phases)
    for name, elapsed in phases:
        print(f"{name:<{width}}  {elapsed:6.1f} s")
    cycle = converge + teardown
    print(
        f"{'whole cycle (converge + teardown)':<{width}}  {cycle:6.1f} s   target < {CYCLE_TARGET:.0f} s  "
        f"{'ok' if cycle < CYCLE_TARGET else 'OVER'}"
    )
    print(
        f"{'re-run':<{width}}  {rerun:6.1f} s   target < {RERUN_TARGET:.0f} s  "
        f"{'ok' if rerun < RERUN_TARGET else 'OVER'}"
    )
    print("load average (1, 5, 15 min): {:.1f} {:.1f} {:.1f} on {} CPUs".format(*os.getloadavg(), os.cpu_count()))
    if changed:
        print("re-run changed: " + ", ".join(changed))
    if errors:
        print("world errors: " + "; ".join(errors))
    return 1 if changed or errors else 0


if __name__ == "__main__":
    sys.exit(main())
