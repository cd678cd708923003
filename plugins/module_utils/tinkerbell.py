# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Teardown of a local-talos host: release the Tinkerbell Hardware CAPT used, so that it returns to the pool.

The Clusters go first (kube_rows.delete_clusters); a Hardware is released when no owner its CAPT marks name is
left, and stale marks (an owner that is gone) are removed. Nothing here touches a Hardware no mark ties to the
environment's clusters.
"""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import kube
from ansible_collections.krops.platform.plugins.module_utils.errors import TeardownError
from ansible_collections.krops.platform.plugins.module_utils.kube_rows import delete_clusters
from ansible_collections.krops.platform.plugins.module_utils.teardown import (
    UnknownState,
    object_name,
    probe_or_abort,
    served_cluster,
)

try:
    import urllib3
    from kubernetes.dynamic.exceptions import ApiException, NotFoundError
except ImportError:  # reported through kube.connect
    urllib3 = None
    ApiException, NotFoundError = kube.ApiException, kube.NotFoundError

HARDWARE = ("tinkerbell.org/v1alpha1", "Hardware")

# Ownership marks CAPT puts on a Hardware it uses (labels, annotation, finalizers),
# across CAPT versions; releasing a Hardware means none of them is left.
HARDWARE_OWNER_LABELS = (
    "v1alpha1.tinkerbell.org/ownerName",
    "v1alpha1.tinkerbell.org/ownerNamespace",
    "v1alpha1.tinkerbell.org/clusterName",
    "v1alpha1.tinkerbell.org/clusterNamespace",
)
HARDWARE_OWNER_ANNOTATIONS = ("v1alpha1.tinkerbell.org/provisioned",)
HARDWARE_FINALIZERS = (
    "infrastructure.cluster.x-k8s.io/tinkerbellmachine",
    "tinkerbellmachine.infrastructure.cluster.x-k8s.io",
    "tinkerbellcluster.infrastructure.cluster.x-k8s.io",
)
TINKERBELL_MACHINE_KINDS = ("TinkerbellMachine", "TinkerbellCluster")


def ownership_marks(hardware):
    """The CAPT ownership labels, annotations and finalizers a Hardware still carries."""
    meta = hardware.get("metadata") or {}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k in HARDWARE_OWNER_LABELS}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k in HARDWARE_OWNER_ANNOTATIONS}
    finalizers = [f for f in meta.get("finalizers") or [] if f in HARDWARE_FINALIZERS]
    return {"labels": labels, "annotations": annotations, "finalizers": finalizers}


def _has_marks(marks):
    return bool(marks["labels"] or marks["annotations"] or marks["finalizers"])


def _owner_exists(client, hardware, marks, owners):
    """True when the object named by the ownership labels (a TinkerbellMachine/Cluster or a Cluster) exists."""
    labels = marks["labels"]
    candidates = []
    if labels.get("v1alpha1.tinkerbell.org/ownerName"):
        candidates.append(
            (
                labels["v1alpha1.tinkerbell.org/ownerNamespace"]
                if labels.get("v1alpha1.tinkerbell.org/ownerNamespace")
                else hardware["metadata"].get("namespace"),
                labels["v1alpha1.tinkerbell.org/ownerName"],
            )
        )
    if labels.get("v1alpha1.tinkerbell.org/clusterName"):
        candidates.append(
            (
                labels.get("v1alpha1.tinkerbell.org/clusterNamespace") or hardware["metadata"].get("namespace"),
                labels["v1alpha1.tinkerbell.org/clusterName"],
            )
        )
    return any(candidate in owners for candidate in candidates)


def _owner_index(client, target):
    """(namespace, name) of every TinkerbellMachine, TinkerbellCluster and Cluster on the host."""
    owners = set()
    for kind in TINKERBELL_MACHINE_KINDS:
        try:
            found = client.resources.search(group="infrastructure.cluster.x-k8s.io", kind=kind)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise UnknownState(f"cannot discover {kind} on {target}: {kube.error_text(exc)}")
        for res in found[:1]:
            for obj in probe_or_abort(client, res.group_version, kind, target=target):
                owners.add((obj["metadata"].get("namespace"), obj["metadata"]["name"]))
    res = served_cluster(client)
    if res is not None:
        for obj in probe_or_abort(client, res.group_version, "Cluster", target=target):
            owners.add((obj["metadata"].get("namespace"), obj["metadata"]["name"]))
    return owners


def release_hardware(
    kubeconfig,
    context,
    namespace="default",
    hardware_namespace=None,
    clusters=(),
    keep=(),
    suspend=True,
    wait_timeout=1200,
    remove_stale=True,
    check_mode=False,
    connect_options=None,
    on_progress=None,
):
    """Give the Hardware back to the Tinkerbell pool by deleting the Clusters that use it.

    Suspends Flux, deletes the named Clusters (bootstrap.toml's, never every Cluster in the
    namespace; keep wins), waits until no Hardware carries their marks, removes marks whose
    owner no longer exists (left by an older CAPT) and reports per Hardware. Hardware whose
    clusterName label names any other Cluster is kept. The Hardware spec, the machine and the
    Tinkerbell stack are never touched.
    """
    target = kube.describe_target(kubeconfig, context)
    client = kube.connect(kubeconfig, context, **(connect_options or {}))
    hardware = probe_or_abort(client, *HARDWARE, namespace=hardware_namespace, what="Hardware", target=target)
    names = [c for c in clusters if c not in set(keep)]
    live = _owner_index(client, target)
    kept_marks = {}
    for hw in hardware:
        marks = ownership_marks(hw)
        cluster = marks["labels"].get("v1alpha1.tinkerbell.org/clusterName")
        cluster_ns = marks["labels"].get("v1alpha1.tinkerbell.org/clusterNamespace") or namespace
        owner = marks["labels"].get("v1alpha1.tinkerbell.org/ownerName", "")
        if _has_marks(marks) and cluster and cluster not in names and (cluster_ns, cluster) in live:
            # another Cluster (not named for this environment) still uses it
            kept_marks[object_name(hw)] = cluster
        elif _has_marks(marks) and any(owner.startswith(k + "-") for k in keep):
            # protective only: a machine name starting with a kept Cluster's name keeps its Hardware
            kept_marks[object_name(hw)] = owner
    deletion = delete_clusters(
        kubeconfig,
        context,
        namespace,
        names=names,
        keep=keep,
        suspend=suspend,
        wait=True,
        wait_timeout=wait_timeout,
        check_mode=check_mode,
        on_progress=on_progress,
    )
    result = {
        "plan": list(deletion["plan"]),
        "clusters_deleted": deletion["deleted"],
        "suspended": deletion["suspended"],
        "hardware": [],
        "changed": deletion["changed"],
        "target": target,
    }
    owners = set() if check_mode else _owner_index(client, target)
    stale = []
    for hw in hardware:
        ident = object_name(hw)
        marks = ownership_marks(hw)
        if ident in kept_marks:
            result["hardware"].append({"name": ident, "outcome": "kept", "owner": kept_marks[ident], "marks": marks})
            continue
        if not _has_marks(marks):
            result["hardware"].append({"name": ident, "outcome": "free", "marks": marks})
            continue
        if check_mode:
            result["plan"].append(f"wait until Hardware {ident} carries no ownership marks ({_marks_text(marks)})")
            result["hardware"].append({"name": ident, "outcome": "would-release", "marks": marks})
            continue
        stale.append(ident)
    if check_mode or not stale:
        return result
    outcomes = _wait_released(client, hardware_namespace, stale, owners, wait_timeout, remove_stale, target, result)
    result["hardware"].extend(outcomes)
    result["changed"] = True
    return result


def _marks_text(marks):
    parts = ["label {}={}".format(*kv) for kv in sorted(marks["labels"].items())]
    parts += [f"annotation {k}" for k in sorted(marks["annotations"])]
    parts += [f"finalizer {f}" for f in marks["finalizers"]]
    return ", ".join(parts) or "none"


def _wait_released(client, hardware_namespace, names, owners, wait_timeout, remove_stale, target, result):
    """Wait (watch) until the named Hardware carry no marks; clear marks whose owner is gone."""
    outcomes = {}
    cleared = set()

    def evaluate(objects):
        pending = {}
        for (dummy, name), hw in objects.items():
            ident = object_name(hw)
            if ident not in names:
                continue
            marks = ownership_marks(hw)
            if not _has_marks(marks):
                outcomes.setdefault(ident, "released")
                continue
            if remove_stale and ident not in cleared and not _owner_exists(client, hw, marks, owners):
                cleared.add(ident)
                _clear_marks(client, hw, marks, target)
                outcomes[ident] = "stale-marks-removed"
            pending[ident] = _marks_text(marks)
        for ident in names:
            if ident not in {object_name(h) for h in objects.values()}:
                outcomes.setdefault(ident, "gone")
        return not pending, pending

    try:
        kube.watch_until(
            client,
            HARDWARE[0],
            HARDWARE[1],
            hardware_namespace,
            evaluate,
            wait_timeout,
            on_progress=result.setdefault("progress", []).append,
        )
    except kube.WaitTimeout as exc:
        result["hardware"].extend(
            {"name": n, "outcome": outcomes.get(n, "released")} for n in names if n not in (exc.state or {})
        )
        result["hardware"].extend(
            {"name": n, "outcome": "not-released", "marks_left": text} for n, text in sorted((exc.state or {}).items())
        )
        raise TeardownError(
            "timed out after {}s waiting for CAPT to release Hardware on {}: {}. The machines were "
            "not touched; check the CAPT controller logs, then run the teardown again".format(
                int(wait_timeout),
                target,
                "; ".join("{} still has {}".format(*kv) for kv in sorted((exc.state or {}).items())),
            ),
            result,
        )
    return [{"name": n, "outcome": outcomes.get(n, "released")} for n in names]


def _clear_marks(client, hw, marks, target):
    """Remove only CAPT's ownership marks (merge patch for labels/annotations, JSON patch for finalizers)."""
    meta = hw["metadata"]
    body = {"metadata": {}}
    if marks["labels"]:
        body["metadata"]["labels"] = {k: None for k in marks["labels"]}
    if marks["annotations"]:
        body["metadata"]["annotations"] = {k: None for k in marks["annotations"]}
    res = kube.resource(client, *HARDWARE)
    try:
        if body["metadata"]:
            res.patch(
                name=meta["name"],
                namespace=meta.get("namespace"),
                body=body,
                content_type="application/merge-patch+json",
            )
        if marks["finalizers"]:
            current = res.get(name=meta["name"], namespace=meta.get("namespace")).to_dict()
            finalizers = current["metadata"].get("finalizers") or []
            ops = [
                {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
                {
                    "op": "replace",
                    "path": "/metadata/finalizers",
                    "value": [f for f in finalizers if f not in HARDWARE_FINALIZERS],
                },
            ]
            res.patch(
                name=meta["name"], namespace=meta.get("namespace"), body=ops, content_type="application/json-patch+json"
            )
    except NotFoundError:
        return
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
        raise TeardownError(
            f"cannot remove stale ownership marks from Hardware {object_name(hw)} on {target}: {kube.error_text(exc)}"
        )
