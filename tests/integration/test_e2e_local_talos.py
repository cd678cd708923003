"""local-talos end to end through the real playbook.

The whole lifecycle: ``ansible-playbook -i inventories/local-talos playbooks/local-talos.yml`` (bootstrap
and pivot), then ``--tags teardown --check`` and ``--tags teardown``, on the emulated world of
tests/substrate/lifecycle.py, with this environment's CRDs and providers added to its tables.

The teardown: ``ansible-playbook -i inventories/local-talos playbooks/local-talos.yml --tags teardown``,
``--check`` first, on a kind cluster holding the real tree's objects (site values substituted, schemas
enforced by tests/substrate/strict_api.py) as CAPT leaves them after provisioning the machine. The
Hardware is released, never wiped: no Workflow, Template or BMC Job is created, the Hardware spec is
unchanged; the decoy Cluster of another environment and the Hardware not named survive.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading

import pytest
import yaml

from ansible_collections.krops.platform.plugins.module_utils import render
from tests.integration.test_preflight import TOKEN, github  # noqa: F401  # pylint: disable=unused-import
from tests.substrate import capi_world, flux_world, kind_engine, strict_api
from tests.substrate.fixtures import REPO, VENV_BIN, task_results
from tests.substrate.krops_marks import make_kind_marker
from tests.substrate.lifecycle import EmulatedWorld
from tests.substrate.strict_api import catalog

pytestmark = pytest.mark.slow
R = "krops.platform.teardown : "
LT = REPO / "mgmt" / "local-talos"
CLUSTER = ("cluster.x-k8s.io/v1beta2", "Cluster")
KS = ("kustomize.toolkit.fluxcd.io/v1", "Kustomization")
HW = ("tinkerbell.org/v1alpha1", "Hardware")
TM = ("infrastructure.cluster.x-k8s.io/v1beta1", "TinkerbellMachine")
WORKFLOW = ("tinkerbell.org/v1alpha1", "Workflow")
MGMT = "local-talos-management"
MACHINE = MGMT + "-control-plane-x7k2p"  # CAPT names the TinkerbellMachine after the CAPI Machine
# CAPT v0.7.0 controller/machine/hardware.go: the marks it sets on a Hardware it claims, removes on release.
OWNER, OWNER_NS = "v1alpha1.tinkerbell.org/ownerName", "v1alpha1.tinkerbell.org/ownerNamespace"
PROVISIONED = "v1alpha1.tinkerbell.org/provisioned"
FINALIZER = "infrastructure.cluster.x-k8s.io/tinkerbellmachine"
WRITES = ("POST", "PUT", "PATCH", "DELETE")
# The real kustomize renderer, found before fake_bins puts its recording kubectl first on PATH.
RENDERER = render.find_kustomize()
AGE_KEY = (
    REPO / "tests" / "integration" / "fixtures" / "local-talos.agekey"
)  # the tree's SOPS files are encrypted to it


def tree_objects(directory):
    """The objects of a tree folder as Flux applies them: rendered, site values substituted."""
    site = yaml.safe_load((LT / "site-values.yaml").read_text())["data"]
    return [render.substitute(o, site) for o in render.build(str(directory), RENDERER)]


def install_crds(api):
    api.install_bundle("flux", "cluster-api")
    for group, kind in (
        ("infrastructure.cluster.x-k8s.io", "TinkerbellCluster"),
        ("infrastructure.cluster.x-k8s.io", "TinkerbellMachineTemplate"),
        ("infrastructure.cluster.x-k8s.io", "TinkerbellMachine"),
        ("controlplane.cluster.x-k8s.io", "TalosControlPlane"),
        ("tinkerbell.org", "Workflow"),
        ("tinkerbell.org", "Template"),
        ("bmc.tinkerbell.org", "Job"),
    ):
        api.create(catalog().crd(group, kind))
    # Hardware and BMC Machine: the upstream CRDs the pivot applies (bootstrap.toml pivot-manifests).
    for name in ("tinkerbell.org_hardware.yaml", "bmc.tinkerbell.org_machines.yaml"):
        for doc in render.load_yaml_documents(str(LT / "tinkerbell" / "pivot" / name)):
            api.create(doc)


def namespace(api, name):
    if not api.exists("v1", "Namespace", name):
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def provisioned_world(api):
    """The kind cluster after CAPT provisioned talos-mgmt-01, plus decoys that look like ours."""
    install_crds(api)
    for name in ("flux-system", "tinkerbell"):
        namespace(api, name)
    make_kind_marker(api, "local-talos")
    # The root Kustomization the FluxInstance syncs (sync path mgmt/local-talos), then what it applies:
    # the site ConfigMap and the components' Flux Kustomizations.
    api.create(
        {
            "apiVersion": KS[0],
            "kind": KS[1],
            "metadata": {"name": "flux-system", "namespace": "flux-system"},
            "spec": {
                "interval": "10m",
                "path": "./mgmt/local-talos",
                "prune": True,
                "sourceRef": {"kind": "GitRepository", "name": "flux-system"},
            },
        }
    )
    for obj in tree_objects(LT):
        api.create(obj)
    for obj in tree_objects(LT / "clusters" / "management"):
        if obj["kind"] == "Secret":  # SOPS-encrypted in Git; Flux applies it decrypted
            obj = {k: v for k, v in obj.items() if k != "sops"}
            obj["stringData"] = {"username": "u", "password": "p"}
        if obj["kind"] == "Cluster":
            obj["metadata"]["finalizers"] = ["cluster.cluster.x-k8s.io"]
        api.create(obj)
    api.create(
        {
            "apiVersion": TM[0],
            "kind": TM[1],
            "metadata": {"name": MACHINE, "namespace": "default", "finalizers": [FINALIZER]},
            "spec": {"hardwareName": "talos-mgmt-01"},
        }
    )
    api.apply_object(
        {
            "apiVersion": HW[0],
            "kind": HW[1],
            "metadata": {
                "name": "talos-mgmt-01",
                "namespace": "default",
                "labels": {OWNER: MACHINE, OWNER_NS: "default"},
                "annotations": {PROVISIONED: "true"},
                "finalizers": [FINALIZER],
            },
        }
    )
    # The install Workflow CAPT ran (finished); the teardown must neither re-run nor add one.
    api.create(
        {
            "apiVersion": WORKFLOW[0],
            "kind": WORKFLOW[1],
            "metadata": {"name": MACHINE, "namespace": "default"},
            "spec": {"templateRef": MACHINE, "hardwareRef": "talos-mgmt-01"},
        }
    )
    # Decoys: another environment's Cluster in the same namespace and the Hardware it owns, and a
    # spare Hardware nothing names.
    api.create(
        {
            "apiVersion": CLUSTER[0],
            "kind": CLUSTER[1],
            "metadata": {
                "name": "edge-workload",
                "namespace": "default",
                "labels": {"krops.io/environment": "edge"},
                "finalizers": ["cluster.cluster.x-k8s.io"],
            },
            # Cluster API's Cluster webhook needs a controlPlaneRef, infrastructureRef or topology
            "spec": {
                "controlPlaneEndpoint": {"host": "10.9.0.10", "port": 6443},
                "infrastructureRef": {
                    "apiGroup": "infrastructure.cluster.x-k8s.io",
                    "kind": "TinkerbellCluster",
                    "name": "edge-workload",
                },
            },
        }
    )
    decoy_spec = {"disks": [{"device": "/dev/nvme0n1"}], "interfaces": [{"dhcp": {"mac": "aa:bb:cc:dd:ee:02"}}]}
    api.create(
        {
            "apiVersion": HW[0],
            "kind": HW[1],
            "metadata": {
                "name": "edge-01",
                "namespace": "default",
                "labels": {
                    OWNER: "edge-workload-control-plane-q1w2e",
                    OWNER_NS: "default",
                    "v1alpha1.tinkerbell.org/clusterName": "edge-workload",
                    "v1alpha1.tinkerbell.org/clusterNamespace": "default",
                },
                "annotations": {PROVISIONED: "true"},
                "finalizers": [FINALIZER],
            },
            "spec": decoy_spec,
        }
    )
    api.create(
        {
            "apiVersion": HW[0],
            "kind": HW[1],
            "metadata": {"name": "spare-01", "namespace": "tinkerbell", "labels": {"krops.io/hardware": "spare-01"}},
            "spec": {"disks": [{"device": "/dev/sda"}], "interfaces": [{"dhcp": {"mac": "aa:bb:cc:dd:ee:03"}}]},
        }
    )
    # The tree really is there (the same objects Flux would apply).
    assert sorted(c["metadata"]["name"] for c in api.list(*CLUSTER)) == ["edge-workload", MGMT]
    assert len(api.list(*KS)) == 9 and api.exists("v1", "ConfigMap", "local-talos-site", "flux-system")


class FakeCapt:
    """CAPI and CAPT on a Cluster's deletion, as CAPT v0.7.0 releases a Hardware (hardware.go): the
    TinkerbellMachine goes, the Hardware it owned loses the owner labels, the provisioned annotation
    and the machine finalizer; then the Cluster's finalizer is cleared. Records what Flux looked like."""

    def __init__(self, api):
        self.api = api
        self.seen = []
        self.done = set()
        self.errors = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                self._step()
            except Exception as exc:  # noqa: BLE001 - a controller keeps running; the test reads errors
                self.errors.append(repr(exc))
            self._stop.wait(0.05)

    def _step(self):
        for obj in self.api.list(*CLUSTER):
            name = obj["metadata"]["name"]
            if not obj["metadata"].get("deletionTimestamp") or name in self.done:
                continue
            self.done.add(name)
            suspended = all((k.get("spec") or {}).get("suspend") for k in self.api.list(*KS))
            self.seen.append((name, suspended))
            for machine in self.api.list(*TM):
                if machine["metadata"]["name"].startswith(name + "-"):
                    self.api.clear_finalizers(*TM, machine["metadata"]["name"], "default")
                    self.api.remove(*TM, machine["metadata"]["name"], "default")
            for hw in self.api.list(*HW):
                meta = hw["metadata"]
                if (meta.get("labels") or {}).get(OWNER, "").startswith(name + "-"):
                    self.api.apply_object(
                        {
                            "apiVersion": HW[0],
                            "kind": HW[1],
                            "metadata": {
                                "name": meta["name"],
                                "namespace": meta["namespace"],
                                "labels": {OWNER: None, OWNER_NS: None},
                                "annotations": {PROVISIONED: None},
                                "finalizers": [f for f in meta.get("finalizers") or [] if f != FINALIZER] or None,
                            },
                        }
                    )
            self.api.clear_finalizers(*CLUSTER, name, "default")

    def stop(self):
        self._stop.set()
        self.thread.join(2)


@pytest.fixture
def kind_world(strict_cluster, fake_bins):
    """The kind cluster mgmt (strict emulator) behind the kind stand-in, provisioned as CAPT leaves it."""
    api = strict_cluster("kind-mgmt")
    provisioned_world(api)
    script = kind_engine.SCRIPT.format(python=sys.executable, root=str(REPO))
    fake_bins.install("kind", script)
    (fake_bins.dir / "kind-servers.json").write_text(json.dumps({"mgmt": api.url}))
    (fake_bins.dir / "kind-state.json").write_text(
        json.dumps({"clusters": {"mgmt": {"config": {}, "image": None, "nodes": {"mgmt-control-plane": {}}}}})
    )
    capt = FakeCapt(api)
    api.capt = capt
    yield api
    capt.stop()


def teardown(ansible_playbook, api, tmp_path, *args):
    extra = {"krops_kind_kubeconfig": api.kubeconfig_path, "krops_mgmt_kubeconfig": str(tmp_path / "none.yaml")}
    return ansible_playbook(
        REPO / "playbooks" / "local-talos.yml",
        "--tags",
        "teardown",
        "-e",
        json.dumps(extra),
        *args,
        inventory=REPO / "inventories" / "local-talos",
    )


def snapshot(api):
    return {
        "hardware": {(h["metadata"]["namespace"], h["metadata"]["name"]): h for h in api.list(*HW)},
        "workflows": sorted(w["metadata"]["name"] for w in api.list(*WORKFLOW)),
    }


def kind_clusters(fake_bins):
    return sorted(json.loads((fake_bins.dir / "kind-state.json").read_text())["clusters"])


def test_teardown_releases_the_hardware_never_wipes_and_keeps_the_decoys(
    kind_world, fake_bins, ansible_playbook, tmp_path
):
    api = kind_world
    before = snapshot(api)
    start = len(api.requests)

    rc, out, err = teardown(ansible_playbook, api, tmp_path, "--check")
    assert rc == 0, (out, err)
    results = task_results(out)
    assert results[R + "Show the teardown plan"]["msg"] == [
        "Teardown of local-talos on the kind cluster (context kind-mgmt) [check mode: nothing is deleted]",
        "1. suspend every Flux Kustomization and Flux Operator object on the kind cluster",
        "2. delete the Clusters local-talos-management named by bootstrap.toml so CAPT returns their "
        "Hardware to the Tinkerbell pool; wait until no Hardware carries ownership marks",
        "3. delete the kind cluster mgmt (the controller host; marker kube-system/krops-bootstrap: "
        "environment local-talos, kind cluster mgmt)",
    ]
    report = results[R + "Report per Hardware"]["msg"]
    assert "default/talos-mgmt-01: would-release" in report
    assert "default/edge-01: kept" in report and "tinkerbell/spare-01: free" in report
    assert [r for r in api.requests[start:] if r[0] in WRITES] == []
    assert kind_clusters(fake_bins) == ["mgmt"] and snapshot(api) == before

    start = len(api.requests)
    rc, out, err = teardown(ansible_playbook, api, tmp_path)
    assert api.capt.errors == []
    assert rc == 0, (out, err)
    results = task_results(out)
    report = results[R + "Report per Hardware"]["msg"]
    assert "default/talos-mgmt-01: released" in report and "default/edge-01: kept" in report
    # Flux was suspended before the Cluster was deleted, and only the named Cluster went.
    assert api.capt.seen == [(MGMT, True)] and api.capt.errors == []
    assert [c["metadata"]["name"] for c in api.list(*CLUSTER)] == ["edge-workload"]
    assert all(k["spec"].get("suspend") is True for k in api.list(*KS))
    after = snapshot(api)
    # The machine was never wiped: its Hardware is back in the pool with the spec unchanged (user
    # data, disks, interfaces) and no Workflow, Template or BMC Job was created by the teardown.
    ours = after["hardware"][("default", "talos-mgmt-01")]
    assert ours["spec"] == before["hardware"][("default", "talos-mgmt-01")]["spec"]
    assert OWNER not in ours["metadata"]["labels"] and PROVISIONED not in (ours["metadata"].get("annotations") or {})
    assert not ours["metadata"].get("finalizers")
    assert after["workflows"] == before["workflows"] == [MACHINE]
    krops_writes = [r for r in api.requests[start:] if r[0] in WRITES]
    assert not [r for r in krops_writes if r[0] == "POST"], krops_writes
    assert not [r for r in krops_writes if "tinkerbell.org" in r[1]], krops_writes
    # The decoys are exactly as they were.
    for key in (("default", "edge-01"), ("tinkerbell", "spare-01")):
        assert after["hardware"][key]["metadata"]["labels"] == before["hardware"][key]["metadata"]["labels"]
        assert after["hardware"][key]["spec"] == before["hardware"][key]["spec"]
    assert kind_clusters(fake_bins) == []


def test_teardown_after_the_pivot_keeps_the_management_cluster_and_its_hardware(
    strict_cluster, fake_bins, ansible_playbook, tmp_path
):
    """After the pivot the machine runs the management cluster itself: the teardown deletes no Cluster
    of this environment (bootstrap.toml names only the management one, which stays), keeps the
    Hardware's marks, and never touches the machine."""
    api = strict_cluster("krops-mgmt")
    provisioned_world(api)
    api.remove("v1", "ConfigMap", "krops-bootstrap", "kube-system")  # the marker lives on kind only
    fake_bins.install("kind", kind_engine.SCRIPT.format(python=sys.executable, root=str(REPO)))
    dead = tmp_path / "kind-gone.yaml"  # kind was deleted by the pivot
    dead.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "kind-mgmt",
                "clusters": [{"name": "kind-mgmt", "cluster": {"server": "http://127.0.0.1:9"}}],
                "contexts": [{"name": "kind-mgmt", "context": {"cluster": "kind-mgmt", "user": "kind-mgmt"}}],
                "users": [{"name": "kind-mgmt", "user": {"token": "t"}}],
            }
        )
    )
    capt = FakeCapt(api)
    before = snapshot(api)
    extra = {"krops_kind_kubeconfig": str(dead), "krops_mgmt_kubeconfig": api.kubeconfig_path}
    args = ("--tags", "teardown", "-e", json.dumps(extra))
    inventory = REPO / "inventories" / "local-talos"
    try:
        rc, out, err = ansible_playbook(REPO / "playbooks" / "local-talos.yml", *args, "--check", inventory=inventory)
        assert rc == 0, (out, err)
        plan = task_results(out)[R + "Show the teardown plan"]["msg"]
        assert plan[0] == (
            "Teardown of local-talos on the mgmt cluster (context krops-mgmt) [check mode: nothing is deleted]"
        )
        assert [line.split(". ", 1)[0] for line in plan[1:]] == ["1", "2"]
        assert "delete the Clusters (none) named by bootstrap.toml" in plan[2]
        start = len(api.requests)
        rc, out, err = ansible_playbook(REPO / "playbooks" / "local-talos.yml", *args, inventory=inventory)
        assert rc == 0, (out, err)
        report = task_results(out)[R + "Report per Hardware"]["msg"]
    finally:
        capt.stop()
    assert "default/talos-mgmt-01: kept" in report and "default/edge-01: kept" in report
    assert capt.seen == [] and capt.errors == []
    assert sorted(c["metadata"]["name"] for c in api.list(*CLUSTER)) == ["edge-workload", MGMT]
    after = snapshot(api)
    assert after["hardware"][("default", "talos-mgmt-01")]["metadata"]["labels"][OWNER] == MACHINE
    assert (
        after["hardware"][("default", "talos-mgmt-01")]["spec"]
        == before["hardware"][("default", "talos-mgmt-01")]["spec"]
    )
    assert after["workflows"] == [MACHINE]
    # Only Flux was suspended; nothing was deleted or created.
    writes = [r for r in api.requests[start:] if r[0] in WRITES]
    assert writes and all(r[0] == "PATCH" and "/kustomizations/" in r[1] for r in writes), writes


# --- the whole lifecycle on the emulated world (tests/substrate/lifecycle.py) ----------------------


@pytest.fixture
def talos_tables(monkeypatch):
    """local-talos's rows in the world's tables (the harness files stay as they are): the CRD bundles of
    the Tinkerbell stack, CAPT and the Talos providers, which chart and which providers install them.
    Not emulated: CAPT claiming the Hardware, and clusterctl moving the CRDs labelled
    clusterctl.cluster.x-k8s.io/move (the stand-in moves the *.cluster.x-k8s.io groups only)."""
    monkeypatch.setitem(strict_api.CRD_BUNDLES, "tinkerbell", [("tinkerbell.org", None), ("bmc.tinkerbell.org", None)])
    monkeypatch.setitem(
        strict_api.CRD_BUNDLES,
        "capt",
        [("infrastructure.cluster.x-k8s.io", ["TinkerbellCluster", "TinkerbellMachineTemplate", "TinkerbellMachine"])],
    )
    monkeypatch.setitem(
        strict_api.CRD_BUNDLES,
        "talos-bootstrap",
        [("bootstrap.cluster.x-k8s.io", ["TalosConfig", "TalosConfigTemplate"])],
    )
    monkeypatch.setitem(
        strict_api.CRD_BUNDLES, "talos-control-plane", [("controlplane.cluster.x-k8s.io", ["TalosControlPlane"])]
    )
    monkeypatch.setitem(flux_world.CHART_CRDS, "tinkerbell", ("tinkerbell",))
    monkeypatch.setitem(capi_world.PROVIDER_CRDS, ("InfrastructureProvider", "tinkerbell-tinkerbell"), ("capt",))
    monkeypatch.setitem(capi_world.PROVIDER_CRDS, ("BootstrapProvider", "talos"), ("talos-bootstrap",))
    monkeypatch.setitem(capi_world.PROVIDER_CRDS, ("ControlPlaneProvider", "talos"), ("talos-control-plane",))


def _sops_decrypting_build(original):
    """kustomize-controller hands Flux the decrypted SOPS documents (the emulated one does not): each
    *.sops.yaml of the folder is decrypted with the test key and replaces its object after the build."""

    def build(self, folder):
        plain = {}
        for name in sorted(os.listdir(folder)):
            if name.endswith(".sops.yaml"):
                proc = subprocess.run(
                    [str(VENV_BIN / "sops"), "--decrypt", os.path.join(folder, name)],
                    capture_output=True,
                    text=True,
                    env=dict(os.environ, SOPS_AGE_KEY_FILE=str(AGE_KEY)),
                    check=False,
                )
                if proc.returncode != 0:
                    raise flux_world.Failure("DecryptionFailed", proc.stderr.strip())
                doc = yaml.safe_load(proc.stdout)
                plain[(doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"])] = doc
        out = []
        for obj in original(self, folder):
            meta = obj.get("metadata") or {}
            out.append(plain.get((obj.get("kind"), meta.get("namespace"), meta.get("name")), obj))
        return out

    return build


def test_playbook_bootstraps_pivots_then_tears_down_keeping_the_machine(talos_tables, github, tmp_path, monkeypatch):  # noqa: F811
    """``ansible-playbook -i inventories/local-talos playbooks/local-talos.yml`` on the emulated world
    (kind, helm, clusterctl stand-ins; emulated Flux syncing this commit from Git; emulated CAPI), then
    ``--tags teardown --check`` and ``--tags teardown`` on the self-managed cluster."""
    monkeypatch.setattr(flux_world.FluxController, "_build", _sops_decrypting_build(flux_world.FluxController._build))
    checkout = tmp_path / "gitops"
    subprocess.run(["git", "clone", "-q", str(REPO), str(checkout)], check=True)
    subprocess.run(["git", "-C", str(checkout), "checkout", "-q", "-B", "main"], check=True)
    urls = {"https://github.com/krops/krops": str(checkout)}
    world = EmulatedWorld(
        tmp_path / "host", environment="local-talos", git_checkouts=urls, env={"GITHUB_TOKEN": TOKEN}
    ).start()
    try:
        key = world.home / ".config" / "krops" / "age.agekey"  # bootstrap.toml age-key-file
        key.parent.mkdir(parents=True)
        shutil.copy(AGE_KEY, key)
        key.chmod(0o600)
        extra = ("-e", json.dumps({"preflight_github_api_url": github}))
        rc, out, err = world.playbook("playbooks/local-talos.yml", *extra, inventory="inventories/local-talos")
        assert rc == 0, (failed_tasks(out), err[-2000:])
        done = task_results(out)
        assert done["krops.platform.pivot : Delete the kind cluster mgmt"]["changed"] is True
        assert world.kind_clusters == {}
        mgmt = world.cluster(MGMT)
        # The pivot applied the upstream Tinkerbell CRDs (pivot-manifests: shortName hw, the move label)
        # before the move, and the target's Flux then installed the stack and reconciled the whole tree.
        crd = mgmt.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", "hardware.tinkerbell.org")
        assert crd["spec"]["names"]["shortNames"] == ["hw"]
        assert "clusterctl.cluster.x-k8s.io/move" in crd["metadata"]["labels"]
        assert mgmt.exists("apiextensions.k8s.io/v1", "CustomResourceDefinition", "machines.bmc.tinkerbell.org")
        assert mgmt.exists(*CLUSTER, MGMT, "default")
        kss = {k["metadata"]["name"]: k for k in mgmt.list(*KS)}
        assert "tinkerbell" in kss and all(flux_world.is_ready(k) for k in kss.values()), sorted(kss)
        assert flux_world.is_ready(mgmt.get("helm.toolkit.fluxcd.io/v2", "HelmRelease", "tinkerbell", "tinkerbell"))
        assert not mgmt.list(*WORKFLOW)  # nothing ever asked Tinkerbell to (re)install the machine

        teardown = ("--tags", "teardown") + extra
        rc, out, err = world.playbook(
            "playbooks/local-talos.yml", *teardown, "--check", inventory="inventories/local-talos"
        )
        assert rc == 0, (failed_tasks(out), err[-2000:])
        plan = task_results(out)[R + "Show the teardown plan"]["msg"]
        assert plan[0] == (
            "Teardown of local-talos on the mgmt cluster (context krops-mgmt) [check mode: nothing is deleted]"
        )
        assert "delete the Clusters (none) named by bootstrap.toml" in plan[2]
        rc, out, err = world.playbook("playbooks/local-talos.yml", *teardown, inventory="inventories/local-talos")
        assert rc == 0, (failed_tasks(out), err[-2000:])
        report = task_results(out)[R + "Report per Hardware"]["msg"]
        assert "default/talos-mgmt-01: free" in report or "default/talos-mgmt-01: kept" in report, report
        # The machine runs the management cluster: it stays, with its Hardware, and is never wiped.
        assert mgmt.exists(*CLUSTER, MGMT, "default") and mgmt.exists(*HW, "talos-mgmt-01", "default")
        assert not mgmt.list(*WORKFLOW)
    finally:
        errors = world.stop()
    assert errors == [], errors


def failed_tasks(out):
    return [
        (t["task"]["name"], t["hosts"].get("localhost", {}).get("msg"))
        for p in out.get("plays", [])
        for t in p.get("tasks", [])
        if t["hosts"].get("localhost", {}).get("failed")
    ]
