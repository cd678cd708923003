"""tinkerbell_release on the emulator: Clusters deleted, Hardware released to the pool, nothing else touched."""

from __future__ import annotations

import copy
import threading

from ansible_collections.krops.platform.plugins.modules import tinkerbell_release

CLUSTER = ("cluster.x-k8s.io/v1beta2", "Cluster")
HW = ("tinkerbell.org/v1alpha1", "Hardware")
KS = ("kustomize.toolkit.fluxcd.io/v1", "Kustomization")
OWNER = "v1alpha1.tinkerbell.org/ownerName"
OWNER_NS = "v1alpha1.tinkerbell.org/ownerNamespace"
FINALIZER = "infrastructure.cluster.x-k8s.io/tinkerbellmachine"
SPEC = {
    "disks": [{"device": "/dev/sda"}],
    "userData": "#cloud-config\n",
    "interfaces": [{"dhcp": {"mac": "52:54:00:00:00:01", "ip": {"address": "10.0.0.11"}}}],
}


def ns(api, name):
    if not api.exists("v1", "Namespace", name):
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def hardware(api, name, owner=None, extra_labels=None, finalizers=(), annotations=None):
    ns(api, "tinkerbell")
    labels = {"type": "worker"}
    labels.update(extra_labels or {})
    if owner:
        labels.update({OWNER: owner, OWNER_NS: "default"})
    api.create(
        {
            "apiVersion": HW[0],
            "kind": HW[1],
            "metadata": {
                "name": name,
                "namespace": "tinkerbell",
                "labels": labels,
                "annotations": annotations or {"note": "keep me"},
                "finalizers": list(finalizers),
            },
            "spec": copy.deepcopy(SPEC),
        }
    )


def cluster(api, name):
    api.create(
        {
            "apiVersion": CLUSTER[0],
            "kind": CLUSTER[1],
            "metadata": {"name": name, "namespace": "default", "finalizers": ["cluster.cluster.x-k8s.io"]},
        }
    )


class FakeCapt:
    """On Cluster deletion: release that cluster's Hardware (labels, annotation, finalizer), then drop the Cluster."""

    def __init__(self, api, skip=()):
        self.api = api
        self.skip = set(skip)
        self.order = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        done = set()
        while not self._stop.is_set():
            for obj in self.api.list(*CLUSTER):
                name = obj["metadata"]["name"]
                if obj["metadata"].get("deletionTimestamp") and name not in done:
                    done.add(name)
                    suspended = all((k.get("spec") or {}).get("suspend") for k in self.api.list(*KS))
                    self.order.append(("delete-seen", name, suspended))
                    for hw in self.api.list(*HW):
                        labels = hw["metadata"].get("labels") or {}
                        if labels.get(OWNER, "").startswith(name + "-") and hw["metadata"]["name"] not in self.skip:
                            self.api.apply_object(
                                {
                                    "apiVersion": HW[0],
                                    "kind": HW[1],
                                    "metadata": {
                                        "name": hw["metadata"]["name"],
                                        "namespace": "tinkerbell",
                                        "labels": {OWNER: None, OWNER_NS: None},
                                        "annotations": {"v1alpha1.tinkerbell.org/provisioned": None},
                                        "finalizers": [
                                            f for f in hw["metadata"].get("finalizers") or [] if f != FINALIZER
                                        ]
                                        or None,
                                    },
                                }
                            )
                    threading.Timer(0.2, self.api.clear_finalizers, args=(*CLUSTER, name, "default")).start()
            self._stop.wait(0.05)

    def stop(self):
        self._stop.set()
        self.thread.join(2)


def args(api, **extra):
    base = {
        "kubeconfig": api.kubeconfig_path,
        "context": "kind-mgmt",
        "hardware_namespace": "tinkerbell",
        "wait_timeout": 10,
        "clusters": ["talos-workload", "w", "local-talos-management"],
    }
    base.update(extra)
    return base


def test_release_returns_hardware_and_removes_stale_marks_only(kind_api, run_module):
    ns(kind_api, "flux-system")
    kind_api.create(
        {
            "apiVersion": KS[0],
            "kind": KS[1],
            "metadata": {"name": "clusters", "namespace": "flux-system"},
            "spec": {
                "interval": "10m",
                "path": "./c",
                "prune": True,
                "sourceRef": {"kind": "GitRepository", "name": "flux-system"},
            },
        }
    )
    cluster(kind_api, "talos-workload")
    hardware(
        kind_api,
        "node-1",
        owner="talos-workload-cp-abcde",
        finalizers=[FINALIZER],
        annotations={"note": "keep me", "v1alpha1.tinkerbell.org/provisioned": "true"},
    )
    hardware(kind_api, "node-2", owner="talos-workload-md-fghij", finalizers=[FINALIZER, "example.com/other"])
    # an older CAPT left cluster labels and its legacy finalizer on node-3; nothing owns it any more
    hardware(
        kind_api,
        "node-3",
        extra_labels={
            "v1alpha1.tinkerbell.org/clusterName": "old-cluster",
            "v1alpha1.tinkerbell.org/clusterNamespace": "default",
        },
        finalizers=["tinkerbellcluster.infrastructure.cluster.x-k8s.io"],
    )
    hardware(kind_api, "node-4")
    capt = FakeCapt(kind_api)
    try:
        planned = run_module(tinkerbell_release, args(kind_api), check_mode=True)
        assert planned["plan"][:2] == [
            "suspend Kustomization flux-system/clusters",
            "delete Cluster default/talos-workload and wait until it is gone",
        ]
        assert {h["name"]: h["outcome"] for h in planned["hardware"]} == {
            "tinkerbell/node-1": "would-release",
            "tinkerbell/node-2": "would-release",
            "tinkerbell/node-3": "would-release",
            "tinkerbell/node-4": "free",
        }
        assert kind_api.exists(*CLUSTER, "talos-workload", "default") and not capt.order
        result = run_module(tinkerbell_release, args(kind_api))
    finally:
        capt.stop()
    assert not result.failed, result
    assert capt.order == [("delete-seen", "talos-workload", True)]
    assert result["clusters_deleted"] == ["talos-workload"]
    assert {h["name"]: h["outcome"] for h in result["hardware"]} == {
        "tinkerbell/node-1": "released",
        "tinkerbell/node-2": "released",
        "tinkerbell/node-3": "stale-marks-removed",
        "tinkerbell/node-4": "free",
    }
    assert not kind_api.list(*CLUSTER)
    for name in ("node-1", "node-2", "node-3", "node-4"):
        hw = kind_api.get(*HW, name, "tinkerbell")
        assert hw["spec"] == SPEC, name  # the machine description (user data included) is untouched
        assert hw["metadata"]["labels"] == {"type": "worker"}, name
        assert hw["metadata"]["annotations"] == {"note": "keep me"}, name
    assert kind_api.get(*HW, "node-2", "tinkerbell")["metadata"]["finalizers"] == ["example.com/other"]
    assert not kind_api.get(*HW, "node-3", "tinkerbell")["metadata"].get("finalizers")
    again = run_module(tinkerbell_release, args(kind_api))
    assert again["changed"] is False
    assert {h["outcome"] for h in again["hardware"]} == {"free"}


def test_release_keeps_the_management_cluster_hardware(kind_api, run_module):
    cluster(kind_api, "local-talos-management")
    cluster(kind_api, "w")
    hardware(kind_api, "mgmt-node", owner="local-talos-management-cp-x1", finalizers=[FINALIZER])
    hardware(kind_api, "w-node", owner="w-cp-x2", finalizers=[FINALIZER])
    capt = FakeCapt(kind_api)
    try:
        result = run_module(tinkerbell_release, args(kind_api, keep=["local-talos-management"]))
    finally:
        capt.stop()
    assert not result.failed, result
    assert {h["name"]: h["outcome"] for h in result["hardware"]} == {
        "tinkerbell/mgmt-node": "kept",
        "tinkerbell/w-node": "released",
    }
    assert kind_api.exists(*CLUSTER, "local-talos-management", "default")
    assert kind_api.get(*HW, "mgmt-node", "tinkerbell")["metadata"]["labels"][OWNER] == "local-talos-management-cp-x1"


def test_hardware_still_owned_by_a_live_machine_times_out_and_reports(kind_api, run_module):
    kind_api.add_resource("infrastructure.cluster.x-k8s.io", "v1beta1", "TinkerbellMachine", "tinkerbellmachines")
    cluster(kind_api, "w")
    hardware(kind_api, "busy", owner="w-md-zzz", finalizers=[FINALIZER])
    # CAPT is broken: the machine stays and nobody releases the Hardware
    kind_api.create(
        {
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "TinkerbellMachine",
            "metadata": {"name": "w-md-zzz", "namespace": "default"},
        }
    )
    capt = FakeCapt(kind_api, skip={"busy"})
    try:
        result = run_module(tinkerbell_release, args(kind_api, wait_timeout=2))
    finally:
        capt.stop()
    assert result.failed
    assert result["msg"].startswith("timed out after 2s waiting for CAPT to release Hardware on context kind-mgmt")
    assert (
        "tinkerbell/busy still has label v1alpha1.tinkerbell.org/ownerName=w-md-zzz, label "
        f"v1alpha1.tinkerbell.org/ownerNamespace=default, finalizer {FINALIZER}"
    ) in result["msg"]
    assert result["hardware"] == [
        {
            "name": "tinkerbell/busy",
            "outcome": "not-released",
            "marks_left": "label v1alpha1.tinkerbell.org/ownerName=w-md-zzz, label "
            f"v1alpha1.tinkerbell.org/ownerNamespace=default, finalizer {FINALIZER}",
        }
    ]
    # the marks of a live owner were not removed by the module
    assert kind_api.get(*HW, "busy", "tinkerbell")["metadata"]["labels"][OWNER] == "w-md-zzz"


def test_only_the_named_clusters_are_deleted_and_other_clusters_hardware_is_kept(kind_api, run_module):
    """local-talos teardown once deleted every Cluster in the namespace, other environments' included."""
    cluster(kind_api, "w")
    cluster(kind_api, "other-env-workload")
    cluster(kind_api, "w-2")  # shares a prefix with a named Cluster
    hardware(kind_api, "w-node", owner="w-cp-x2", finalizers=[FINALIZER])
    hardware(
        kind_api,
        "other-node",
        owner="other-env-workload-cp-1",
        finalizers=[FINALIZER],
        extra_labels={
            "v1alpha1.tinkerbell.org/clusterName": "other-env-workload",
            "v1alpha1.tinkerbell.org/clusterNamespace": "default",
        },
    )
    capt = FakeCapt(kind_api)
    try:
        planned = run_module(tinkerbell_release, args(kind_api, clusters=["w"]), check_mode=True)
        assert [p for p in planned["plan"] if p.startswith("delete Cluster")] == [
            "delete Cluster default/w and wait until it is gone"
        ]
        result = run_module(tinkerbell_release, args(kind_api, clusters=["w"]))
    finally:
        capt.stop()
    assert not result.failed, result
    assert result["clusters_deleted"] == ["w"]
    assert sorted(c["metadata"]["name"] for c in kind_api.list(*CLUSTER)) == ["other-env-workload", "w-2"]
    assert {h["name"]: h["outcome"] for h in result["hardware"]} == {
        "tinkerbell/w-node": "released",
        "tinkerbell/other-node": "kept",
    }
    assert kind_api.get(*HW, "other-node", "tinkerbell")["metadata"]["labels"][OWNER] == "other-env-workload-cp-1"


def test_unknown_hardware_listing_aborts_before_any_deletion(kind_api, run_module):
    cluster(kind_api, "w")
    ns(kind_api, "tinkerbell")
    kind_api.inject_failure("GET", r"/hardware$", 403, "hardware is forbidden for this user")
    result = run_module(tinkerbell_release, args(kind_api))
    assert result.failed
    assert result["msg"].startswith(
        "cannot list Hardware tinkerbell.org/v1alpha1 in namespace tinkerbell on context kind-mgmt"
    )
    assert "hardware is forbidden for this user; nothing was deleted" in result["msg"]
    assert "deletionTimestamp" not in kind_api.get(*CLUSTER, "w", "default")["metadata"]
