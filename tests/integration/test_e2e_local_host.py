# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The local-host lifecycle on the emulated world, run with ansible-playbook as a user runs it.

The handoff test: a StrictKubeEmulator for the kind cluster, the real docker-registry, the emulated
Flux and CAPI reconciling in a background thread, and the helm stand-in; the handoff part of the
bootstrap (artifact push, Flux Operator, FluxInstance, the whole Kustomization chain) through the real
modules. The lifecycle test: the whole playbooks/local-host.yml on one emulated host
(tests/substrate/lifecycle.py: kind, Docker, CAPD, clusterctl and helm acting on the same world):
converge, an idempotent re-run, teardown, with decoys on the host that must survive.
"""

from __future__ import annotations

import base64
import os
import shutil
import time

import pytest
import yaml
from ansible_collections.krops.platform.plugins.module_utils import capi
from ansible_collections.krops.platform.plugins.module_utils import kube, render

from tests.substrate.capi_world import CapiController
from tests.substrate.fixtures import REPO, task_results
from tests.substrate.flux_world import FluxController, World, condition
from tests.substrate.kube_emulator import ApiError
from tests.substrate.lifecycle import EmulatedWorld, changed_tasks, failed_tasks, install_standin, role_times

KIND_LABEL = "io.x-k8s.kind.cluster"

pytestmark = pytest.mark.slow

KS = "kustomize.toolkit.fluxcd.io/v1"
REVISION = "main@sha1:" + "c" * 40


def test_capi_discovery_sees_crds_installed_after_an_earlier_connection_cached_discovery(strict_cluster):
    """The discovery cache file is shared per API server URL: flux_handoff writes it before Cluster API exists,
    and capi_pivot must still find the Cluster kind afterwards (the full lifecycle failed on this)."""
    api = strict_cluster("kind-mgmt")
    assert capi.cluster_resource(kube.connect(api.kubeconfig_path, "kind-mgmt")) is None
    api.install_bundle("cluster-api")
    found = capi.cluster_resource(kube.connect(api.kubeconfig_path, "kind-mgmt"))
    assert found is not None and found.kind == "Cluster"


def _helm_wrapper(fake_bins):
    return install_standin(fake_bins.dir, "helm")


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


# Things on the host that look like krops' but are not: they must all survive the teardown.
DECOY_CONTAINERS = {
    # another cluster's node, named with our management cluster's name as a prefix
    "local-management-2-control-plane": {KIND_LABEL: "local-management-2", "io.x-k8s.kind.role": "control-plane"},
    "local-workload.backup": {},  # a lookalike name, no label
    "krops-registry-old": {"app.kubernetes.io/managed-by": "krops"},  # not the exact registry name
    "my-postgres": {"com.example": "local-management"},
}
DECOY_VOLUMES = ["local-management-data", "krops-registry"]
DECOY_NETWORKS = {"local-management": {KIND_LABEL: "local-management"}, "kind-other": {}}


def _decoys(world):
    for name, labels in DECOY_CONTAINERS.items():
        world.docker.add_container(
            name,
            labels,
            ["bridge"],
            volumes=["local-management-data"] if name == "my-postgres" else (),
            anonymous_volumes=1 if KIND_LABEL in labels else 0,
        )
    for name in DECOY_VOLUMES:
        world.docker.add_volume(name, {KIND_LABEL: "local-management-2"})
    for name, labels in DECOY_NETWORKS.items():
        world.docker.add_network(name, labels)
    world.docker.add_network("bridge")
    # another kind cluster on the same host, made with kind (it has no krops marker)
    world.kind_create("other", {"kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4"})
    return set(world.docker.volumes)


def _kubeconfig(path):
    return yaml.safe_load(path.read_text()) if path.exists() else None


def _contexts(path):
    return [c["name"] for c in (_kubeconfig(path) or {}).get("contexts") or []]


@pytest.fixture
def host(tmp_path):
    world = EmulatedWorld(tmp_path / "host").start()
    yield world
    assert world.stop() == []  # no reconcile error in the world


def test_local_host_playbook_converge_idempotence_and_teardown(host):
    """ansible-playbook -i inventories/local-host playbooks/local-host.yml, again (changed=0), then --tags teardown."""
    world = host
    decoy_volumes = _decoys(world)
    kube_dir = world.home / ".kube"
    times = {}

    # converge: bootstrap on kind, then the pivot into local-management
    started = time.monotonic()
    rc, out, err = world.playbook("playbooks/local-host.yml", inventory="inventories/local-host")
    times["converge"] = time.monotonic() - started
    assert rc == 0, (failed_tasks(out), err[-2000:])
    times.update(role_times(out))
    changed = changed_tasks(out)
    for task in ("Create or reuse the kind cluster", "Run capi_pivot up to move", "Delete the kind cluster mgmt"):
        assert any(name.endswith(task) for name in changed), (task, changed)

    # what the phases promise: the Flux chain Ready on the management cluster, the workload cluster
    # with Podinfo, kind gone, the registry serving the artifact
    mgmt = world.cluster("local-management")
    chain = mgmt.list(KS, "Kustomization", "flux-system")
    assert chain and all(condition(k)["status"] == "True" for k in chain), [
        (k["metadata"]["name"], condition(k)) for k in chain
    ]
    assert mgmt.exists("fluxcd.controlplane.io/v1", "FluxInstance", "flux", "flux-system")
    assert {c["metadata"]["name"] for c in mgmt.list("cluster.x-k8s.io/v1beta2", "Cluster", "default")} == {
        "local-management",
        "local-workload",
    }
    workload = world.cluster("local-workload")
    assert _ready(workload, "helm.toolkit.fluxcd.io/v2", "HelmRelease", "podinfo", "podinfo")
    assert workload.get("apps/v1", "Deployment", "podinfo", "podinfo")["status"]["availableReplicas"] == 1
    written = _kubeconfig(kube_dir / "krops-local-workload.yaml")
    assert written["clusters"][0]["cluster"]["server"] == workload.url  # rewritten to the published LB port
    assert "mgmt" not in world.kind_clusters and not world.kind_nodes("mgmt")
    assert "kind-mgmt" not in _contexts(kube_dir / "krops-kind.yaml")
    assert _contexts(kube_dir / "krops-mgmt.yaml") == ["krops-mgmt"]
    assert world.docker.containers["krops-registry"]["running"]
    assert not mgmt.exists("v1", "ConfigMap", "krops-bootstrap", "kube-system")  # the marker stayed on kind

    # a second plain run changes nothing
    started = time.monotonic()
    rc, out, err = world.playbook("playbooks/local-host.yml", inventory="inventories/local-host")
    times["re-run"] = time.monotonic() - started
    assert rc == 0, (failed_tasks(out), err[-2000:])
    assert changed_tasks(out) == []

    # teardown, then nothing of krops is left on the host; every decoy survives
    started = time.monotonic()
    rc, out, err = world.playbook("playbooks/local-host.yml", "--tags", "teardown", inventory="inventories/local-host")
    times["teardown"] = time.monotonic() - started
    assert rc == 0, (failed_tasks(out), err[-2000:])
    left = world.leftovers()
    assert left["containers"] == {name: dict(labels) for name, labels in DECOY_CONTAINERS.items()} | {
        "other-control-plane": {KIND_LABEL: "other", "io.x-k8s.kind.role": "control-plane"}
    }
    assert set(left["volumes"]) == decoy_volumes  # the registry's and the nodes' anonymous volumes went with them
    assert set(left["networks"]) == {"kind", "bridge"} | set(DECOY_NETWORKS)  # kind's network is never krops'
    assert left["registry_answers"] is False
    assert left["kind_clusters"] == ["other"] and left["api_servers"] == ["kind-other"]
    assert not (kube_dir / "krops-mgmt.yaml").exists()
    assert not (kube_dir / "krops-local-workload.yaml").exists()
    assert "kind-mgmt" not in _contexts(kube_dir / "krops-kind.yaml")
    print("local-host lifecycle: " + ", ".join(f"{k} {v:.1f}s" for k, v in times.items()))
