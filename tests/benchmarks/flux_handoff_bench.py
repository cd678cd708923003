"""Benchmark: delay from the last Kustomization turning Ready to the waiting task returning.

Compares, in one run and on the same Kubernetes emulator:
- krops.platform.flux_handoff (scope=wait: event-driven watch, steps of progress_interval), and
- the usual baseline, kubernetes.core.k8s_info in an until/retries loop with delay 10.

Each sample runs a real ansible-playbook; the Kustomization is flipped to Ready at a random moment
after the task has started waiting, and the delay is the task's end time (json callback) minus the
flip time. Prints every sample, the medians and their ratio. Targets: flux_handoff median under 1 s, and at
most 0.1 s (issue 24).

Run from the repository root: .venv/bin/python tests/benchmarks/flux_handoff_bench.py [samples]
"""

from __future__ import annotations

import datetime
import json
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / ".collections")]

import yaml  # noqa: E402

from tests.substrate.fixtures import VENV_BIN, localhost_inventory, playbook_env  # noqa: E402
from tests.substrate.kube_emulator import KubeEmulator  # noqa: E402

NS = "flux-system"
KS = ("kustomize.toolkit.fluxcd.io/v1", "Kustomization")
FI = ("fluxcd.controlplane.io/v1", "FluxInstance")
KS_PATH = "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/flux-system/kustomizations"


def prepare(api):
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    api.create({"apiVersion": FI[0], "kind": FI[1], "metadata": {"name": "flux", "namespace": NS}, "spec": {}})
    api.set_condition(*FI, "flux", NS)
    for name, deps in (("flux-system", []), ("infra", []), ("apps", ["infra"])):
        api.create(
            {
                "apiVersion": KS[0],
                "kind": KS[1],
                "metadata": {"name": name, "namespace": NS},
                "spec": {"dependsOn": [{"name": d} for d in deps]},
            }
        )
        api.set_condition(
            *KS,
            name,
            NS,
            status="True" if name != "apps" else "False",
            reason="ReconciliationSucceeded" if name != "apps" else "Progressing",
        )


def handoff_task(kubeconfig):
    return {
        "name": "wait",
        "krops.platform.flux_handoff": {
            "kubeconfig": kubeconfig,
            "environment": "local-host",
            "config_file": str(REPO / "bootstrap.toml"),
            "scope": "wait",
            "wait_timeout": 120,
            "progress_interval": 30,
        },
    }


def k8s_info_task(kubeconfig):
    return {
        "name": "wait",
        "register": "ks",
        "kubernetes.core.k8s_info": {
            "kubeconfig": kubeconfig,
            "api_version": KS[0],
            "kind": KS[1],
            "name": "apps",
            "namespace": NS,
        },
        "until": "ks.resources | length > 0 and (ks.resources[0].status.conditions | selectattr('type', 'equalto', 'Ready')"
        " | map(attribute='status') | first) == 'True'",
        "retries": 30,
        "delay": 10,
    }


def sample(api, tmp, task, spread):
    """One run: flip apps Ready at a random moment in [0, spread) s after the task first asks; return the delay."""
    api.set_condition(*KS, "apps", NS, status="False", reason="Progressing")
    play = tmp / "play.yml"
    play.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [task]}], sort_keys=False))
    inventory = localhost_inventory(tmp / "hosts.yml")
    seen = len(api.requests)
    flipped = {}

    def flipper():
        while not any(path.startswith(KS_PATH) for _m, path in api.requests[seen:]):
            time.sleep(0.02)
        time.sleep(0.5 + random.uniform(0, spread))
        flipped["at"] = time.time()
        api.set_condition(*KS, "apps", NS, reason="ReconciliationSucceeded")

    thread = threading.Thread(target=flipper, daemon=True)
    thread.start()
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), str(play), "-i", str(inventory)],
        cwd=REPO,
        env=playbook_env(tmp),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = json.loads(proc.stdout)
    task_result = output["plays"][0]["tasks"][0]
    if proc.returncode != 0:
        raise SystemExit("benchmark run failed: {}".format(json.dumps(task_result["hosts"])[:2000]))
    end = datetime.datetime.fromisoformat(task_result["task"]["duration"]["end"].replace("Z", "+00:00")).timestamp()
    return end - flipped["at"]


def main():
    samples = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    tmp = Path(tempfile.mkdtemp(prefix="flux-bench-"))
    api = KubeEmulator("bench").load_krops_crds().start()
    try:
        kubeconfig = api.write_kubeconfig(tmp / "kubeconfig", context="bench")
        prepare(api)
        results = {}
        for label, task, spread in (
            ("flux_handoff (watch)", handoff_task(kubeconfig), 3.0),
            ("k8s_info until/delay 10", k8s_info_task(kubeconfig), 10.0),
        ):
            delays = []
            for index in range(samples):
                delay = sample(api, tmp, task, spread)
                delays.append(delay)
                print("%-26s sample %d: %.3f s" % (label, index + 1, delay), flush=True)
            results[label] = delays
        print()
        print("%-26s %8s %8s %8s" % ("delay after last Ready", "median", "min", "max"))
        for label, delays in results.items():
            print("%-26s %7.3fs %7.3fs %7.3fs" % (label, statistics.median(delays), min(delays), max(delays)))
        ours, base = (statistics.median(d) for d in results.values())
        print(
            "baseline / flux_handoff median ratio: {:.1f}x (targets: flux_handoff median < 1 s: {}; "
            "at most 0.1 s, issue 24: {})".format(
                base / ours if ours > 0 else float("inf"),
                "met" if ours < 1 else "NOT met",
                "met" if ours <= 0.1 else "NOT met",
            )
        )
    finally:
        api.stop()


if __name__ == "__main__":
    main()
