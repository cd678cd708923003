"""Benchmark: wall time of the emulated local-host handoff, phase by phase, and of its idempotent re-run.

The world is tests/substrate's (strict API emulator, the real docker-registry, emulated Flux and CAPI
in a background thread, the helm stand-in); the run is a real ansible-playbook of the real modules
(oci_artifact_push, flux_handoff) against it, as extensions/molecule/emulated runs it. Prints the time of each
phase and checks changed=0 on the re-run. Targets (issue 15): whole cycle under 60 s, re-run under 30 s.
The kind creation, pivot and teardown phases are not emulated yet and are reported as such.

Run from the repository root: .venv/bin/python tests/benchmarks/e2e_bench.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / ".collections")]

import yaml  # noqa: E402

from tests.substrate.capi_world import CapiController  # noqa: E402
from tests.substrate.fixtures import VENV_BIN, playbook_env  # noqa: E402
from tests.substrate.flux_world import FluxController, World, condition  # noqa: E402
from tests.substrate.strict_api import StrictKubeEmulator  # noqa: E402
from tests.substrate.world_server import start_registry  # noqa: E402


def playbook(tmp, play):
    path = tmp / "play.yml"
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    inventory = tmp / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
                    }
                }
            }
        )
    )
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), str(path), "-i", str(inventory)],
        cwd=REPO,
        env=playbook_env(tmp),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = json.loads(proc.stdout) if proc.stdout.startswith("{") else {}
    if proc.returncode:
        raise SystemExit(
            "ansible-playbook failed (rc %d):\n%s\n%s" % (proc.returncode, proc.stdout[-3000:], proc.stderr[-2000:])
        )
    tasks = {}
    for play_out in output.get("plays", []):
        for task in play_out["tasks"]:
            result = task["hosts"]["localhost"]
            tasks[task["task"]["name"]] = (result.get("changed", False), task["task"]["duration"])
    return tasks


def seconds(duration):
    from datetime import datetime

    start = datetime.fromisoformat(duration["start"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(duration["end"].replace("Z", "+00:00"))
    return (end - start).total_seconds()


def main():
    tmp = Path(tempfile.mkdtemp(prefix="krops-e2e-bench-"))
    phases = []
    clock = time.monotonic()
    registry_process, registry = start_registry(tmp)
    kind = StrictKubeEmulator("kind-krops-local-host").start()
    spawned = []
    world = World()
    world.add_cluster(kind)
    FluxController(world, tmp / "work", registry_aliases={"krops-registry:5000": registry})
    CapiController(world, spawn=lambda name: spawned.append(StrictKubeEmulator(name).start()) or spawned[-1])
    world.start()
    phases.append(("world up (API emulator, registry, emulated Flux/CAPI)", time.monotonic() - clock))
    helm = tmp / "helm"
    helm.write_text(
        "#!{}\nimport runpy, sys\nsys.argv[0] = 'helm'\nrunpy.run_path({!r}, run_name='__main__')\n".format(
            sys.executable, str(REPO / "tests/substrate/standins/helm.py")
        )
    )
    helm.chmod(0o755)
    play = [
        {
            "name": "handoff",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "oci push",
                    "krops.platform.oci_artifact_push": {
                        "registry": registry,
                        "repository": "krops",
                        "tag": "latest",
                        "root": str(REPO),
                        "paths": ["mgmt/local-host", "workload/local-host"],
                        "insecure": True,
                    },
                },
                {
                    "name": "flux handoff",
                    "krops.platform.flux_handoff": {
                        "config_file": str(REPO / "bootstrap.toml"),
                        "environment": "local-host",
                        "kubeconfig": kind.write_kubeconfig(tmp / "kind.kubeconfig"),
                        "helm_binary": str(helm),
                        "wait_timeout": 120,
                    },
                },
            ],
        }
    ]
    try:
        for label in ("converge", "idempotent re-run"):
            clock = time.monotonic()
            tasks = playbook(tmp, play)
            total = time.monotonic() - clock
            for name, (changed, duration) in tasks.items():
                phases.append((f"{label}: {name} (changed={changed})", seconds(duration)))
            phases.append((f"{label}: ansible-playbook wall time", total))
            if label != "converge" and any(changed for changed, _d in tasks.values()):
                raise SystemExit(f"the re-run changed something: {tasks}")
        ready = [
            k["metadata"]["name"]
            for k in kind.list("kustomize.toolkit.fluxcd.io/v1", "Kustomization", "flux-system")
            if (condition(k) or {}).get("status") == "True"
        ]
    finally:
        errors = world.stop()
        for api in [kind] + spawned:
            api.stop()
        registry_process.stop()
    for name, took in phases:
        print("%-70s %7.2f s" % (name, took))
    for phase in ("kind create", "pivot (clusterctl move)", "teardown"):
        print("%-70s %9s" % (phase, "not emulated yet"))
    print("Kustomizations Ready: %d (%s)" % (len(ready), ", ".join(sorted(ready))))
    if errors:
        print(f"world errors: {errors}")
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("ANSIBLE_NOCOLOR", "1")
    sys.exit(main())
