# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The local-host lifecycle on the emulated world, run with ansible-playbook as a user runs it.

The world: a StrictKubeEmulator for the kind cluster, the real docker-registry, the emulated Flux
and CAPI reconciling in a background thread, and a helm stand-in that keeps its releases in the
cluster. The handoff part of the bootstrap (artifact push, Flux Operator, FluxInstance, wait for the
whole Kustomization chain) runs through the real modules; the full playbooks/local-host.yml needs
stand-ins that are not built yet (see the skipped test).
"""

from __future__ import annotations

import base64
import os
import shutil
import sys
import time

import pytest
import yaml
from ansible_collections.krops.platform.plugins.module_utils import kube, render

from tests.substrate.capi_world import CapiController
from tests.substrate.fixtures import REPO, task_results
from tests.substrate.flux_world import FluxController, World, condition
from tests.substrate.kube_emulator import ApiError

pytestmark = pytest.mark.slow

KS = "kustomize.toolkit.fluxcd.io/v1"
HELM = REPO / "tests" / "substrate" / "standins" / "helm.py"
REVISION = "main@sha1:" + "c" * 40


def test_capi_discovery_sees_crds_installed_after_an_earlier_connection_cached_discovery(strict_cluster):
    """The discovery cache file is shared per API server URL: flux_handoff writes it before Cluster API exists,
    and capi_pivot must still find the Cluster kind afterwards (the full lifecycle failed on this)."""
    api = strict_cluster("kind-mgmt")
    assert kube.cluster_resource(kube.connect(api.kubeconfig_path, "kind-mgmt")) is None
    api.install_bundle("cluster-api")
    found = kube.cluster_resource(kube.connect(api.kubeconfig_path, "kind-mgmt"))
    assert found is not None and found.kind == "Cluster"


def _helm_wrapper(fake_bins):
    return fake_bins.install(
        "helm",
        f"#!{sys.executable}\nimport runpy, sys\nsys.argv[0] = {str(HELM)!r}\nrunpy.run_path({str(HELM)!r}, run_name='__main__')\n",
    )


def _ready(api, api_version, kind, name, namespace):
    try:
        return (condition(api.get(api_version, kind, name, namespace)) or {}).get("status") == "True"
    except ApiError:
        return False


def _play(registry, kubeconfig, helm):
    return [
        {
            "name": "Bootstrap handoff on the emulated kind cluster",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Push the GitOps tree",
                    "krops.platform.oci_artifact_push": {
                        "registry": registry,
                        "repository": "krops",
                        "tag": "latest",
                        "root": str(REPO),
                        "paths": ["mgmt/local-host", "workload/local-host"],
                        "insecure": True,
                        "revision": REVISION,
                    },
                },
                {
                    "name": "Hand over to Flux",
                    "krops.platform.flux_handoff": {
                        "config_file": str(REPO / "bootstrap.toml"),
                        "environment": "local-host",
                        "kubeconfig": kubeconfig,
                        "helm_binary": str(helm),
                        "wait_timeout": 90,
                        "progress_interval": 5,
                    },
                },
            ],
        }
    ]


def test_handoff_through_ansible_playbook_reconciles_the_whole_chain(
    strict_cluster, oci_registry, fake_bins, ansible_playbook, tmp_path
):
    kind = strict_cluster("kind-krops-local-host")
    world = World()
    world.add_cluster(kind)
    # the real kubectl renders (fake_bins puts a recording kubectl first on PATH)
    FluxController(
        world,
        tmp_path / "world",
        registry_aliases={"krops-registry:5000": oci_registry},
        renderer=render.find_kustomize(shutil.which("kubectl", path=os.environ["PATH"].split(os.pathsep, 1)[1])),
    )
    CapiController(world, spawn=strict_cluster)
    helm = _helm_wrapper(fake_bins)
    play = tmp_path / "handoff.yml"
    play.write_text(yaml.safe_dump(_play(oci_registry, kind.kubeconfig_path, helm), sort_keys=False))
    world.start()
    try:
        started = time.monotonic()
        rc, output, stderr = ansible_playbook(play, env={"PATH": fake_bins.path_env})
        first = time.monotonic() - started
        assert rc == 0, (stderr[-2000:], str(output)[-3000:])
        results = task_results(output)
        assert results["Push the GitOps tree"]["changed"] is True
        handoff = results["Hand over to Flux"]
        assert handoff["changed"] is True and handoff["ready"] is True
        names = [row["name"] for row in handoff["kustomizations"]]
        assert names[0] == "flux-system" and names.index("cert-manager") < names.index("capi-operator")
        for ks in kind.list(KS, "Kustomization", "flux-system"):
            assert condition(ks)["status"] == "True", (ks["metadata"]["name"], condition(ks))
        secret = kind.get("v1", "Secret", "local-workload-kubeconfig", "default")
        workload = world.cluster_for_kubeconfig(base64.b64decode(secret["data"]["value"]).decode())
        deadline = time.monotonic() + 30  # the handoff does not wait for the workload chain; Flux goes on
        while time.monotonic() < deadline and not _ready(
            workload, "helm.toolkit.fluxcd.io/v2", "HelmRelease", "podinfo", "podinfo"
        ):
            time.sleep(0.1)
        assert _ready(workload, "helm.toolkit.fluxcd.io/v2", "HelmRelease", "podinfo", "podinfo")
        release = kind.get("v1", "Secret", "sh.helm.release.v1.flux-operator.v1", "flux-system")
        assert release["type"] == "helm.sh/release.v1"
        started = time.monotonic()
        rc, output, stderr = ansible_playbook(play, env={"PATH": fake_bins.path_env})
        second = time.monotonic() - started
        assert rc == 0, (stderr[-2000:], str(task_results(output))[-3000:])
        assert [name for name, r in task_results(output).items() if r.get("changed")] == []
        assert not kind.exists("v1", "Secret", "sh.helm.release.v1.flux-operator.v2", "flux-system")
    finally:
        errors = world.stop()
    assert errors == []
    print(f"handoff: first run {first:.1f}s, idempotent re-run {second:.1f}s")


@pytest.mark.skip(
    reason="not built yet: stand-ins acting on the emulated world for the Docker Engine API "
    "(community.docker.docker_container for the registry), kind (kind_cluster) and clusterctl "
    "move (pivot), whose input contracts issues 10 and 12 are rewriting; the handoff part "
    "runs above"
)
def test_local_host_playbook_converge_idempotence_and_teardown():
    """ansible-playbook -i inventories/local-host playbooks/local-host.yml, again (changed=0), then --tags teardown."""
