# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The emulated Flux (tests/substrate/flux_world.py) reconciling the real mgmt/local-host tree.

The tree is pushed as the lifecycle pushes it (krops' oci module, to the real docker-registry);
the FluxInstance is the one flux_handoff writes; CAPI and its providers are capi_world.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time

import pytest
import yaml
from ansible_collections.krops.platform.plugins.module_utils import flux, oci

from tests.substrate.capi_world import CapiController
from tests.substrate.fixtures import REPO
from tests.substrate.flux_world import FluxController, World, condition
from tests.substrate import prewarm

KS = "kustomize.toolkit.fluxcd.io/v1"
REVISION = "main@sha1:" + "b" * 40
SYNC = {
    "kind": "OCIRepository",
    "url": "oci://krops-registry:5000/krops",
    "ref": "latest",
    "path": "mgmt/local-host",
    "pull_secret": None,
    "insecure": True,
    "flux_version": "2.9.x",
}


def build_world(strict_cluster, registry, workdir):
    mgmt = strict_cluster("kind-mgmt", bundles=("flux-operator",))  # the flux-operator chart's CRDs
    mgmt.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "flux-system"}})
    mgmt.create(flux.fluxinstance_manifest("flux-system", SYNC))
    world = World()
    world.add_cluster(mgmt)
    FluxController(world, workdir, registry_aliases={"krops-registry:5000": registry})
    CapiController(world, spawn=strict_cluster)
    return world, mgmt


def ready_order(api):
    """Kustomization names in the order they first became Ready (from the watch events)."""
    order = []
    for _rv, _type, group, plural, obj in api.events:
        if plural == "kustomizations" and (condition(obj) or {}).get("status") == "True":
            if obj["metadata"]["name"] not in order:
                order.append(obj["metadata"]["name"])
    return order


def states(api, namespace="flux-system"):
    return {k["metadata"]["name"]: (condition(k) or {}) for k in api.list(KS, "Kustomization", namespace)}


def test_local_host_tree_becomes_ready_in_depends_on_order(strict_cluster, oci_registry, tmp_path):
    oci.push_artifact(
        oci_registry,
        ["mgmt/local-host", "workload/local-host"],
        repository="krops",
        root=str(REPO),
        revision=REVISION,
        insecure=True,
    )
    world, mgmt = build_world(strict_cluster, oci_registry, tmp_path)
    world.settle()
    found = states(mgmt)
    assert set(found) == {
        "flux-system",
        "cert-manager",
        "capi-operator",
        "capi-system",
        "capd-system",
        "caaph-system",
        "cni",
        "flux-apps",
        "cluster-local-management",
        "cluster-local-workload",
    }
    not_ready = {n: c.get("message") for n, c in found.items() if c.get("status") != "True"}
    assert not not_ready
    revision = mgmt.get("source.toolkit.fluxcd.io/v1", "OCIRepository", "flux-system", "flux-system")["status"][
        "artifact"
    ]["revision"]
    assert revision.startswith("latest@sha256:")
    assert found["capi-system"]["message"] == f"Applied revision: {revision}"
    order = ready_order(mgmt)
    for ks in mgmt.list(KS, "Kustomization", "flux-system"):
        for dep in ks["spec"].get("dependsOn") or []:
            assert order.index(dep["name"]) < order.index(ks["metadata"]["name"]), (dep, ks["metadata"]["name"])
    # the workload cluster: provisioned by CAPI, Flux installed by the HelmChartProxy, synced by the ResourceSet
    secret = mgmt.get("v1", "Secret", "local-workload-kubeconfig", "default")
    workload = world.cluster_for_kubeconfig(__import__("base64").b64decode(secret["data"]["value"]).decode())
    assert workload is not mgmt
    assert condition(mgmt.get(KS, "Kustomization", "flux-apps-local-workload", "default"))["status"] == "True"
    fi = workload.get("fluxcd.controlplane.io/v1", "FluxInstance", "flux", "flux-system")
    assert fi["spec"]["commonMetadata"]["labels"]["krops.io/cluster"] == "local-workload"  # postBuild CLUSTER_NAME
    podinfo = workload.get("helm.toolkit.fluxcd.io/v2", "HelmRelease", "podinfo", "podinfo")
    assert condition(podinfo)["status"] == "True"
    assert workload.exists("apps/v1", "DaemonSet", "kindnet", "kube-system")  # the ClusterResourceSet
    # a second settle changes nothing (idempotent reconciliation)
    before = mgmt._last_rv
    assert world.settle() == 1 and mgmt._last_rv == before
    # and a controller acting again on a settled object sends no status write, where the schema prunes part of the
    # status it writes too (a FluxInstance has no status.observedGeneration, a CAPI condition none of its own)
    writes = []
    for api in (mgmt, workload):
        patch = api.patch

        def counted(res, namespace, name, *args, patch=patch, **kwargs):
            if (args[2:3] or [kwargs.get("subresource")])[0] == "status":
                writes.append((res.kind, name))
            return patch(res, namespace, name, *args, **kwargs)

        api.patch = counted
    flux_controller = next(c for c in world.controllers if isinstance(c, FluxController))
    capi_controller = next(c for c in world.controllers if isinstance(c, CapiController))
    for _ in range(2):
        flux_controller.fluxinstance(
            workload, workload.get("fluxcd.controlplane.io/v1", "FluxInstance", "flux", "flux-system")
        )
        capi_controller.helm_chart_proxy(
            mgmt, mgmt.get("addons.cluster.x-k8s.io/v1alpha1", "HelmChartProxy", "flux-operator", "default")
        )
    assert writes == []


def plant(root, rel, edit):
    path = root / rel
    docs = list(yaml.safe_load_all(path.read_text()))
    edit(docs)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


def test_planted_defects_show_as_not_ready_with_the_reason(strict_cluster, oci_registry, tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(REPO / "mgmt" / "local-host", root / "mgmt" / "local-host")
    shutil.copytree(REPO / "workload" / "local-host", root / "workload" / "local-host")
    plant(
        root,
        "mgmt/local-host/clusters/local-workload/flux-ks.yaml",
        lambda d: d[0]["spec"].update(path="./mgmt/local-host/clusters/local-workloads"),
    )
    plant(
        root,
        "mgmt/local-host/clusters/local-management/flux-ks.yaml",
        lambda d: d[0]["spec"]["dependsOn"].append({"name": "nope"}),
    )
    plant(root, "mgmt/local-host/caaph-system/addon-provider.yaml", lambda d: d[0]["spec"].update(version=0.4))
    oci.push_artifact(
        oci_registry, ["mgmt/local-host", "workload/local-host"], root=str(root), revision=REVISION, insecure=True
    )
    world, mgmt = build_world(strict_cluster, oci_registry, tmp_path / "work")
    world.settle()
    found = states(mgmt)
    wrong = found["cluster-local-workload"]
    assert wrong["reason"] == "ArtifactFailed"
    assert wrong["message"].startswith("kustomization path not found: stat ")
    assert wrong["message"].endswith("/mgmt/local-host/clusters/local-workloads: no such file or directory")
    assert not mgmt.exists("cluster.x-k8s.io/v1beta2", "Cluster", "local-workload", "default")
    assert (found["cluster-local-management"]["reason"], found["cluster-local-management"]["message"]) == (
        "DependencyNotReady",
        "dependency 'flux-system/nope' not found: kustomizations.kustomize.toolkit.fluxcd.io \"nope\" not found",
    )
    assert not mgmt.exists("cluster.x-k8s.io/v1beta2", "Cluster", "local-management", "default")
    assert found["caaph-system"]["reason"] == "ReconciliationFailed"
    assert found["caaph-system"]["message"] == (
        'AddonProvider/caaph-system/helm dry-run failed (Invalid): AddonProvider.operator.cluster.x-k8s.io "helm" is '
        'invalid: spec.version: Invalid value: "number": spec.version in body must be of type string: "number"'
    )
    assert not mgmt.exists("operator.cluster.x-k8s.io/v1alpha2", "AddonProvider", "helm", "caaph-system")
    assert mgmt.exists("v1", "Namespace", "caaph-system")  # stage 1 (Namespaces, CRDs) went in before stage 2 failed
    assert (found["cni"]["reason"], found["cni"]["message"]) == (
        "DependencyNotReady",
        "dependency 'flux-system/caaph-system' is not ready",
    )
    assert found["capd-system"]["status"] == "True"  # independent branches still converge


def git(cwd, *args):
    subprocess.run(
        ["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@example.com"] + list(args),
        check=True,
        capture_output=True,
    )


def test_git_source_postbuild_prune_and_suspend(strict_cluster, tmp_path):
    repo = tmp_path / "git"
    (repo / "apps").mkdir(parents=True)
    (repo / "apps" / "a.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "a", "namespace": "default"},
                "data": {"run": "${KROPS_RUN_ID}", "kept": "$${LITERAL}"},
            }
        )
    )
    (repo / "apps" / "b.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": "default"}})
    )
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    api = strict_cluster("git-world", bundles=("flux",))
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "flux-system"}})
    api.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "krops-run", "namespace": "flux-system"},
            "data": {"KROPS_RUN_ID": "run-42"},
        }
    )
    api.create(
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "GitRepository",
            "metadata": {"name": "flux-system", "namespace": "flux-system"},
            "spec": {"interval": "1m", "url": "https://github.com/example/krops.git", "ref": {"branch": "main"}},
        }
    )
    api.create(
        {
            "apiVersion": KS,
            "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "flux-system"},
            "spec": {
                "interval": "5m",
                "prune": True,
                "path": "./apps",
                "wait": True,
                "sourceRef": {"kind": "GitRepository", "name": "flux-system"},
                "postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": "krops-run"}]},
            },
        }
    )
    world = World()
    world.add_cluster(api)
    FluxController(world, tmp_path / "work", git_checkouts={"https://github.com/example/krops.git": str(repo)})
    world.settle()
    assert condition(api.get(KS, "Kustomization", "apps", "flux-system"))["status"] == "True", api.get(
        KS, "Kustomization", "apps", "flux-system"
    )["status"]
    a = api.get("v1", "ConfigMap", "a", "default")
    assert a["data"] == {"run": "run-42", "kept": "${LITERAL}"}
    assert a["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"] == "apps"
    assert condition(api.get(KS, "Kustomization", "apps", "flux-system"))["message"].startswith(
        "Applied revision: main@sha1:"
    )
    # a running world leaves the Ready, unchanged Kustomization alone within its resync window (5 idle ticks, as
    # kustomize-controller waits for spec.interval); a settle() after the run acts at once again
    world.start(interval=0.01, idle=1.0)
    try:
        api.remove("v1", "ConfigMap", "a", "default")
        time.sleep(0.3)
        assert not api.exists("v1", "ConfigMap", "a", "default")
    finally:
        assert world.stop() == []
    world.settle()
    assert api.get("v1", "ConfigMap", "a", "default")["data"] == {"run": "run-42", "kept": "${LITERAL}"}
    # b leaves the tree: pruned; a decoy with the same labels but not in the inventory survives
    api.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "decoy",
                "namespace": "default",
                "labels": {
                    "kustomize.toolkit.fluxcd.io/name": "apps",
                    "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
                },
            },
        }
    )
    (repo / "apps" / "b.yaml").unlink()
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "two")
    world.settle()
    assert not api.exists("v1", "ConfigMap", "b", "default")
    assert api.exists("v1", "ConfigMap", "decoy", "default")
    # suspended: a new commit is not applied
    res = api.resource_for(KS, "Kustomization")
    api.patch(res, "flux-system", "apps", "merge", {"spec": {"suspend": True}})
    (repo / "apps" / "c.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}})
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "three")
    world.settle()
    assert not api.exists("v1", "ConfigMap", "c", "default")
    api.patch(res, "flux-system", "apps", "merge", {"spec": {"suspend": False}})
    world.settle()
    assert api.exists("v1", "ConfigMap", "c", "default")
    # deleting the Kustomization (prune: true) deletes what it applied, not the decoy
    assert "finalizers.fluxcd.io" in api.get(KS, "Kustomization", "apps", "flux-system")["metadata"]["finalizers"]
    api.remove(KS, "Kustomization", "apps", "flux-system")
    world.settle()
    assert not api.exists(KS, "Kustomization", "apps", "flux-system")
    assert not api.exists("v1", "ConfigMap", "a", "default") and not api.exists("v1", "ConfigMap", "c", "default")
    assert api.exists("v1", "ConfigMap", "decoy", "default")


def test_missing_substitute_source_and_unreachable_git(strict_cluster, tmp_path):
    api = strict_cluster("bad-world", bundles=("flux",))
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "flux-system"}})
    api.create(
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "GitRepository",
            "metadata": {"name": "flux-system", "namespace": "flux-system"},
            "spec": {"interval": "1m", "url": "https://github.com/example/elsewhere.git"},
        }
    )
    api.create(
        {
            "apiVersion": KS,
            "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "flux-system"},
            "spec": {
                "interval": "5m",
                "prune": True,
                "path": "./apps",
                "sourceRef": {"kind": "GitRepository", "name": "flux-system"},
            },
        }
    )
    world = World()
    world.add_cluster(api)
    FluxController(world, tmp_path)
    world.settle()
    source = condition(api.get("source.toolkit.fluxcd.io/v1", "GitRepository", "flux-system", "flux-system"))
    assert source["reason"] == "GitOperationFailed"
    ks = condition(api.get(KS, "Kustomization", "apps", "flux-system"))
    assert (ks["reason"], ks["message"]) == (
        "ArtifactFailed",
        "Source is not ready, artifact not found, retrying in 30s",
    )


@pytest.mark.parametrize("missing", ["registry-tag"])
def test_oci_source_with_no_artifact_is_not_ready(strict_cluster, oci_registry, tmp_path, missing):
    world, mgmt = build_world(strict_cluster, oci_registry, tmp_path)
    world.settle()
    source = condition(mgmt.get("source.toolkit.fluxcd.io/v1", "OCIRepository", "flux-system", "flux-system"))
    assert source["reason"] == "OCIArtifactPullFailed" and "MANIFEST_UNKNOWN" in source["message"]
    assert states(mgmt)["flux-system"]["reason"] == "ArtifactFailed"


def test_a_ready_source_pulls_again_when_the_tag_moves(strict_cluster, oci_registry, tmp_path):
    """A Ready OCIRepository polls the tag's digest (the cheap HEAD); a new push is pulled and applied."""
    tree = tmp_path / "tree" / "mgmt" / "local-host"
    tree.mkdir(parents=True)

    def push(value):
        (tree / "settings.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "settings", "namespace": "flux-system"},
                    "data": {"value": value},
                }
            )
        )
        return oci.push_artifact(
            oci_registry, ["mgmt/local-host"], root=str(tmp_path / "tree"), revision=REVISION, insecure=True
        )["digest"]

    first = push("one")
    world, mgmt = build_world(strict_cluster, oci_registry, tmp_path / "work")
    controller = world.controllers[0]
    world.settle()

    def artifact():
        source = mgmt.get("source.toolkit.fluxcd.io/v1", "OCIRepository", "flux-system", "flux-system")
        return source["status"]["artifact"]["revision"]

    assert artifact() == f"latest@{first}"
    assert mgmt.get("v1", "ConfigMap", "settings", "flux-system")["data"] == {"value": "one"}
    controller._polled.clear()  # the poll interval passes
    world.settle()
    assert artifact() == f"latest@{first}"  # same digest: nothing pulled, nothing changes
    second = push("two")
    assert second != first
    controller._polled.clear()
    world.settle()
    assert artifact() == f"latest@{second}"
    assert mgmt.get("v1", "ConfigMap", "settings", "flux-system")["data"] == {"value": "two"}
    assert condition(mgmt.get(KS, "Kustomization", "flux-system", "flux-system"))["message"] == (
        f"Applied revision: latest@{second}"
    )


def test_a_tree_is_built_once_per_content_in_a_test_process_and_again_when_a_byte_changes(tmp_path, monkeypatch):
    """The rendered-tree cache (flux_world._BUILDS) is keyed by the artifact's content: two worlds serving the same
    tree share one kustomize build, and an artifact that differs in one byte is built anew."""
    from tests.substrate import flux_world

    calls = []
    monkeypatch.setattr(flux_world, "_BUILDS", {})
    monkeypatch.setattr(flux_world, "_kustomize_build", lambda renderer, d: calls.append(d) or [{"kind": d}])
    monkeypatch.setenv(prewarm.CACHES_ENV, str(tmp_path / "run-caches"))  # the run's folder, this test's own
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}}
    artifacts = []
    for n, value in enumerate(["v", "v", "w"]):
        folder = tmp_path / f"artifact-{n}" / "apps"
        folder.mkdir(parents=True)
        (folder / "cm.yaml").write_text(yaml.safe_dump(dict(config_map, data={"k": value})))
        (folder / "kustomization.yaml").write_text("resources: [cm.yaml]\n")
        artifacts.append(folder.parent)
    controllers = []
    for dummy in range(3):
        controller = object.__new__(FluxController)
        controller.renderer, controller._digests = ["kubectl", "kustomize"], {}
        controllers.append(controller)
    built = [c._built(str(a), str(a / "apps")) for c, a in zip(controllers, artifacts)]
    assert calls == [str(artifacts[0] / "apps"), str(artifacts[2] / "apps")]
    assert built[0] is built[1] and built[2] == [{"kind": str(artifacts[2] / "apps")}]
    # another test process of the run (an empty _BUILDS) takes the build from the run's folder, kustomize not run
    monkeypatch.setattr(flux_world, "_BUILDS", {})
    again = object.__new__(FluxController)
    again.renderer, again._digests = ["kubectl", "kustomize"], {}
    assert again._built(str(artifacts[1]), str(artifacts[1] / "apps")) == built[0]
    assert len(calls) == 2


class _Blocking:
    """A controller whose reconcile hangs until released (a step stuck on a lock or a socket)."""

    def __init__(self, world):
        self.entered, self.release = threading.Event(), threading.Event()
        world.controllers.append(self)

    def reconcile(self, api):
        self.entered.set()
        self.release.wait(30)


def test_stop_reports_a_reconcile_thread_that_did_not_end(strict_cluster):
    """stop() joins the thread for ``timeout`` seconds at most, and a thread still running is an error naming the
    step it is in: otherwise a hung controller goes on writing into the next test's clusters unseen."""
    world = World()
    world.add_cluster(strict_cluster("stuck"))
    blocking = _Blocking(world)
    world.start(interval=0.01, idle=0.01)
    thread = world._thread
    try:
        assert blocking.entered.wait(5)
        began = time.monotonic()
        errors = world.stop(timeout=0.2)
        assert time.monotonic() - began < 2
        assert len(errors) == 1, errors
        assert "did not stop within 0.2s" in errors[0] and "_Blocking.reconcile(stuck)" in errors[0], errors
    finally:
        blocking.release.set()
        thread.join(5)
    assert not thread.is_alive()


def test_a_thread_that_ended_late_does_not_run_on_in_the_restarted_world(strict_cluster):
    """A thread released after stop() gave up on it ends: it waits on its own run's stop event, not on the one
    a start() since made (it would reconcile on beside the new thread)."""
    world = World()
    world.add_cluster(strict_cluster("late"))
    blocking = _Blocking(world)
    world.start(interval=0.01, idle=0.01)
    old = world._thread
    assert blocking.entered.wait(5)
    assert world.stop(timeout=0.05)
    world.controllers.remove(blocking)
    world.start(interval=0.01, idle=0.01)
    try:
        blocking.release.set()
        old.join(5)
        assert not old.is_alive()
    finally:
        blocking.release.set()
        assert world.stop() == []
