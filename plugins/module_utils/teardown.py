# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Teardown on the Kubernetes side: controller-host discovery, probes, Flux suspension,
Cluster deletion with an event-driven wait, Tinkerbell Hardware release and the ordered
per-environment plan that roles/teardown follows.

Every function takes the cluster it acts on explicitly (kubeconfig and context); nothing
here uses the operator's current context. Probes classify present / absent / unknown
(module_utils.kube.probe); an unknown state aborts before anything is destroyed.
"""

from __future__ import annotations

import fnmatch
import os
import time

from ansible_collections.krops.platform.plugins.module_utils.errors import TeardownError  # the error teardown raises
from ansible_collections.krops.platform.plugins.module_utils import kube
from ansible_collections.krops.platform.plugins.module_utils import ownership
from ansible_collections.krops.platform.plugins.module_utils import profiles

try:
    import urllib3
    from kubernetes import config as kube_config
    from kubernetes.client import VersionApi
    from kubernetes.dynamic.exceptions import ApiException, NotFoundError
except ImportError:  # reported through kube.connect
    urllib3 = kube_config = VersionApi = None

    # kube's stand-ins, so that the except clauses stay valid without the kubernetes library.
    ApiException, NotFoundError = kube.ApiException, kube.NotFoundError

CLUSTER_GROUP = "cluster.x-k8s.io"
KUSTOMIZATION = ("kustomize.toolkit.fluxcd.io/v1", "Kustomization")
FLUX_OPERATOR_KINDS = (("fluxcd.controlplane.io/v1", "FluxInstance"), ("fluxcd.controlplane.io/v1", "ResourceSet"))
FLUX_OPERATOR_RECONCILE = "fluxcd.controlplane.io/reconcile"
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

# CAPI operator provider kinds, in the order they are deleted (kube.PROVIDER_DELETE_ORDER).
PROVIDER_KINDS = tuple(row[0] for row in kube.PROVIDER_DELETE_ORDER)
PROVIDER_API = "operator.cluster.x-k8s.io/v1alpha2"

HOST_KIND, HOST_MGMT, HOST_UNREACHABLE = "kind", "mgmt", "unreachable"


class UnknownState(TeardownError):
    """A probe could not tell present from absent: nothing may be destroyed."""


# --- controller host ------------------------------------------------------------------


def answers(kubeconfig, context, timeout=10.0):
    """(True, None) when the API server of kubeconfig/context answers /version within timeout."""
    if kube_config is None:
        return False, "the Python library 'kubernetes' is required"
    path = os.path.expanduser(kubeconfig) if kubeconfig else None
    if path and not os.path.exists(path):
        return False, f"kubeconfig {path} does not exist"
    try:
        api_client = kube_config.new_client_from_config(config_file=path, context=context)
    except (kube_config.ConfigException, OSError, ValueError, TypeError) as exc:
        return False, "cannot load context {} from {}: {}".format(context or "(current)", path or "~/.kube/config", exc)
    try:
        # Raw response: strict models reject the minimal /version some servers (and emulators) send.
        VersionApi(api_client).get_code_with_http_info(_preload_content=False, _request_timeout=timeout)
        return True, None
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
        return False, f"{api_client.configuration.host} does not answer: {kube.error_text(exc)}"
    finally:
        api_client.close()


def served_cluster(client):
    """kube.cluster_resource, a discovery that does not answer being an unknown state (nothing may be destroyed)."""
    try:
        return kube.cluster_resource(client)
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
        raise UnknownState(f"cannot discover Cluster API resources: {kube.error_text(exc)}")


def cluster_api_version(client):
    res = served_cluster(client)
    return res.group_version if res is not None else f"{CLUSTER_GROUP}/v1beta2"


def read_kind_marker(client, environment, kind_cluster, target):
    """{'owned': bool, 'reason': str} from the marker ConfigMap on the kind cluster (ownership.py).

    An unknown answer aborts: whether krops created the cluster must be known before it is deleted.
    """
    state, objects, error = kube.probe(
        client, "v1", "ConfigMap", ownership.MARKER_NAMESPACE, name=ownership.MARKER_NAME
    )
    if state == kube.UNKNOWN:
        raise UnknownState(
            f"cannot read ConfigMap {ownership.MARKER_NAMESPACE}/{ownership.MARKER_NAME} on {target}: {error}; nothing was changed, fix access and run again"
        )
    owned, reason = ownership.kind_marker_verdict(objects[0] if objects else None, environment, kind_cluster)
    return {"owned": owned, "reason": reason}


def find_host(
    kind_kubeconfig,
    kind_context,
    mgmt_kubeconfig,
    mgmt_context,
    mgmt_cluster,
    mgmt_namespace,
    timeout=10.0,
    environment=None,
    kind_cluster=None,
):
    """Find the cluster that holds the Cluster objects (the controller host).

    The kind context when it answers and still holds the management Cluster (or the exported
    management kubeconfig does not answer); else the self-managed management cluster; else
    unreachable. ``pivoted`` is true when the host is the management cluster.
    """
    result = {
        "host": HOST_UNREACHABLE,
        "kubeconfig": None,
        "context": None,
        "pivoted": False,
        "kind_reachable": False,
        "mgmt_reachable": False,
        "errors": {},
        "kind_marker": {"owned": False, "reason": "the kind cluster did not answer"},
    }
    kind_ok, kind_error = answers(kind_kubeconfig, kind_context, timeout)
    result["kind_reachable"] = kind_ok
    if kind_error:
        result["errors"]["kind"] = kind_error
    mgmt_on_kind = None
    if kind_ok:
        client = kube.connect(kind_kubeconfig, kind_context)
        api = cluster_api_version(client)
        state, dummy, error = kube.probe(client, api, "Cluster", mgmt_namespace, name=mgmt_cluster)
        if state == kube.UNKNOWN:
            raise UnknownState(
                f"cannot tell whether Cluster {mgmt_namespace}/{mgmt_cluster} exists on the kind cluster (context {kind_context}): {error}; "
                "nothing was changed, fix access to the kind cluster and run again",
                result,
            )
        mgmt_on_kind = state == kube.PRESENT
        if kind_cluster:
            result["kind_marker"] = read_kind_marker(client, environment, kind_cluster, f"context {kind_context}")
    mgmt_ok = False
    if not (kind_ok and mgmt_on_kind):
        mgmt_ok, mgmt_error = answers(mgmt_kubeconfig, mgmt_context, timeout)
        if mgmt_error:
            result["errors"]["mgmt"] = mgmt_error
    result["mgmt_reachable"] = mgmt_ok
    if kind_ok and (mgmt_on_kind or not mgmt_ok):
        result.update(host=HOST_KIND, kubeconfig=kind_kubeconfig, context=kind_context, pivoted=False)
    elif mgmt_ok:
        result.update(host=HOST_MGMT, kubeconfig=mgmt_kubeconfig, context=mgmt_context, pivoted=True)
    return result


# --- probes ---------------------------------------------------------------------------


def on_disk(path):
    """Whether a file krops writes (a kubeconfig it exported, ``~`` expanded) is on disk."""
    return os.path.isfile(os.path.expanduser(path))


def probe_or_abort(client, api_version, kind, namespace=None, what=None, target=None):
    """Objects of a kind (empty when absent); UnknownState when the API cannot tell."""
    state, objects, error = kube.probe(client, api_version, kind, namespace)
    if state == kube.UNKNOWN:
        raise UnknownState(
            "cannot list {} {}{} on {}: {}; nothing was deleted, fix access and run the teardown again".format(
                what or kind,
                api_version,
                f" in namespace {namespace}" if namespace else "",
                target or "the controller host",
                error,
            )
        )
    return objects


def _name(obj):
    meta = obj.get("metadata") or {}
    return "{}/{}".format(meta.get("namespace"), meta.get("name")) if meta.get("namespace") else meta.get("name")


# --- Flux -----------------------------------------------------------------------------


def _matches(obj, patterns):
    meta = obj.get("metadata") or {}
    names = (meta.get("name", ""), _name(obj))
    return any(fnmatch.fnmatchcase(n, p) for p in patterns for n in names)


def plan_suspend(client, patterns, target=None):
    """What suspending Flux would change: Kustomizations (spec.suspend) and Flux Operator objects."""
    planned = {"kustomizations": [], "already_suspended": [], "flux_operator": []}
    for obj in probe_or_abort(client, *KUSTOMIZATION, target=target):
        if not _matches(obj, patterns):
            continue
        key = "already_suspended" if (obj.get("spec") or {}).get("suspend") else "kustomizations"
        planned[key].append(_name(obj))
    for api_version, kind in FLUX_OPERATOR_KINDS:
        for obj in probe_or_abort(client, api_version, kind, target=target):
            annotations = (obj.get("metadata") or {}).get("annotations") or {}
            if annotations.get(FLUX_OPERATOR_RECONCILE) != "disabled":
                planned["flux_operator"].append({"kind": kind, "name": _name(obj)})
    return planned


def apply_suspend(client, planned):
    """Suspend what plan_suspend found: Flux stops recreating what the teardown deletes."""
    for api_version, kind in FLUX_OPERATOR_KINDS:
        for item in planned["flux_operator"]:
            if item["kind"] == kind:
                namespace, name = item["name"].split("/", 1)
                _patch(
                    client,
                    api_version,
                    kind,
                    name,
                    namespace,
                    {"metadata": {"annotations": {FLUX_OPERATOR_RECONCILE: "disabled"}}},
                )
    for ident in planned["kustomizations"]:
        namespace, name = ident.split("/", 1)
        _patch(client, KUSTOMIZATION[0], KUSTOMIZATION[1], name, namespace, {"spec": {"suspend": True}})


def _patch(client, api_version, kind, name, namespace, body):
    try:
        kube.resource(client, api_version, kind).patch(
            name=name, namespace=namespace, body=body, content_type="application/merge-patch+json"
        )
    except NotFoundError:
        return
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
        raise TeardownError(f"cannot patch {kind} {namespace}/{name}: {kube.error_text(exc)}")


# --- Clusters -------------------------------------------------------------------------


def select_clusters(clusters, names, keep):
    """(to delete, missing names): exactly the named Clusters (ownership.py), never those in keep."""
    existing = {c["metadata"]["name"]: c for c in clusters}
    chosen = [n for n in names if n in existing and n not in keep]
    missing = [n for n in names if n not in existing]
    return chosen, missing


def _cluster_state(obj):
    if obj is None:
        return "gone"
    status = obj.get("status") or {}
    phase = status.get("phase") or "Unknown"
    deleting = kube.condition(obj, "Deleting") or kube.condition(obj, "Ready")
    detail = ""
    if deleting and deleting.get("message"):
        detail = ": {}".format(deleting["message"])
    finalizers = (obj.get("metadata") or {}).get("finalizers") or []
    if finalizers:
        detail += " (finalizers {})".format(", ".join(finalizers))
    return f"{phase}{detail}"


def delete_clusters(
    kubeconfig,
    context,
    namespace="default",
    names=(),
    keep=(),
    suspend=True,
    kustomizations=("*",),
    wait=True,
    wait_timeout=1200,
    check_mode=False,
    connect_options=None,
    on_progress=None,
):
    """Suspend Flux, delete Cluster objects through their provider and wait until they are gone.

    Probes run first; an unknown state aborts before anything changes. Returns a result dict
    with plan, suspended, deleted, already_absent and changed; WaitTimeout-style failures raise
    TeardownError whose result lists the Clusters still present and why.
    """
    target = kube.describe_target(kubeconfig, context)
    client = kube.connect(kubeconfig, context, **(connect_options or {}))
    res = served_cluster(client)
    api = res.group_version if res is not None else f"{CLUSTER_GROUP}/v1beta2"
    clusters = probe_or_abort(client, api, "Cluster", namespace, "Clusters", target) if res is not None else []
    planned = (
        plan_suspend(client, list(kustomizations), target)
        if suspend
        else {"kustomizations": [], "already_suspended": [], "flux_operator": []}
    )
    chosen, missing = select_clusters(clusters, list(names), set(keep))
    refused = [n for n in names if n in set(keep)]
    if refused:
        raise TeardownError(
            "refusing to delete Cluster {} in {} on {}: it is the management cluster that runs "
            "the providers (remove it from the cloud side instead)".format(", ".join(refused), namespace, target)
        )
    plan = [f"suspend Kustomization {k}" for k in planned["kustomizations"]]
    plan += ["disable reconciliation of {} {}".format(i["kind"], i["name"]) for i in planned["flux_operator"]]
    # A Cluster clusterctl paused during a pivot move that died is never reconciled, its deletion included; the
    # pivot's mark on the Kustomizations proves the pause is krops' (issue 30). A pause without it is the user's.
    by_name = {c["metadata"]["name"]: c for c in clusters}
    paused = [n for n in chosen if (by_name[n].get("spec") or {}).get("paused")]
    if paused and not any(kube.held_by_pivot(o) for o in probe_or_abort(client, *KUSTOMIZATION, target=target)):
        paused = []
    plan += [f"unpause Cluster {namespace}/{n} (paused by an interrupted pivot move)" for n in paused]
    plan += [f"delete Cluster {namespace}/{n} and wait until it is gone" for n in chosen]
    result = {
        "plan": plan,
        "target": target,
        "namespace": namespace,
        "api_version": api,
        "suspended": planned["kustomizations"],
        "already_suspended": planned["already_suspended"],
        "flux_operator_disabled": [i["name"] for i in planned["flux_operator"]],
        "deleted": chosen,
        "already_absent": missing,
        "remaining": [],
        "progress": [],
        "changed": bool(plan),
    }
    if check_mode or not plan:
        return result
    apply_suspend(client, planned)
    for name in paused:
        _patch(client, api, "Cluster", name, namespace, {"spec": {"paused": None}})
    for name in chosen:
        try:
            kube.resource(client, api, "Cluster").delete(name=name, namespace=namespace)
        except NotFoundError:
            continue
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise TeardownError(f"cannot delete Cluster {namespace}/{name} on {target}: {kube.error_text(exc)}", result)
    if not wait or not chosen:
        return result
    wanted = set(chosen)

    def evaluate(objects):
        left = {name: _cluster_state(obj) for (dummy, name), obj in objects.items() if name in wanted}
        return not left, left

    def progress(state):
        result["progress"].append(state)
        if on_progress is not None:
            on_progress(state)

    try:
        kube.watch_until(client, api, "Cluster", namespace, evaluate, wait_timeout, on_progress=progress)
    except kube.WaitTimeout as exc:
        result["remaining"] = sorted(exc.state or {})
        raise TeardownError(
            "timed out after {}s waiting for Cluster deletion in {} on {}; still present: {}. "
            "Nothing after this step ran (the controller host is left running); check the "
            "provider's logs and run the teardown again".format(
                int(wait_timeout),
                namespace,
                target,
                "; ".join(f"{k} ({v})" for k, v in sorted((exc.state or {}).items())),
            ),
            result,
        )
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
        raise TeardownError(f"lost the watch on Clusters in {namespace} on {target}: {kube.error_text(exc)}", result)
    return result


# --- cluster-api-operator providers ---------------------------------------------------


def delete_providers(
    kubeconfig,
    context,
    api_version=PROVIDER_API,
    kinds=PROVIDER_KINDS,
    wait=True,
    wait_timeout=600,
    check_mode=False,
    connect_options=None,
    on_progress=None,
    clock=None,
):
    """Delete every provider object of ``kinds`` in kube.PROVIDER_DELETE_ORDER (add-on first, core last), and
    wait until each kind's objects are gone before the next kind: a provider never outlives one it needs.

    Every kind is listed before anything is deleted; a listing the API cannot answer (any error but an unserved
    kind) aborts with nothing deleted. Check mode sends each delete as a server-side dry run (what
    kubernetes.core.k8s does), so admission and RBAC still answer. ``wait_timeout`` is the budget of the whole
    step. Returns plan, deleted ({kind, namespace, name}), remaining and changed; a timeout raises TeardownError
    naming the providers still present.
    """
    clock = clock or time.monotonic
    deadline = clock() + wait_timeout
    target = kube.describe_target(kubeconfig, context)
    client = kube.connect(kubeconfig, context, **(connect_options or {}))
    wanted = set(kinds)
    listed = [
        (kind, sorted(probe_or_abort(client, api_version, kind, None, f"{kind} objects", target), key=_provider))
        for kind, _label in kube.PROVIDER_DELETE_ORDER
        if kind in wanted
    ]
    result = {
        "plan": [f"delete {_provider(o)} and wait until it is gone" for _kind, objs in listed for o in objs],
        "target": target,
        "api_version": api_version,
        "deleted": [kube.identity(o) for _kind, objs in listed for o in objs],
        "remaining": [],
        "progress": [],
        "changed": any(objs for _kind, objs in listed),
    }
    for kind, objs in listed:
        if not objs:
            continue
        res = kube.resource(client, api_version, kind)
        for obj in objs:
            meta = obj["metadata"]
            try:
                res.delete(name=meta["name"], namespace=meta.get("namespace"), dry_run="All" if check_mode else None)
            except NotFoundError:
                continue
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
                raise TeardownError(f"cannot delete {_provider(obj)} on {target}: {kube.error_text(exc)}", result)
        if check_mode or not wait:
            continue
        _wait_gone(client, api_version, kind, objs, deadline - clock(), target, result, on_progress)
    return result


def _provider(obj):
    meta = obj["metadata"]
    return "{} {}/{}".format(obj["kind"], meta.get("namespace") or "", meta["name"])


def _wait_gone(client, api_version, kind, objs, budget, target, result, on_progress):
    """Watch ``kind`` until none of ``objs`` is left; TeardownError naming those left when ``budget`` runs out."""
    waiting = {(o["metadata"].get("namespace") or "", o["metadata"]["name"]) for o in objs}

    def evaluate(objects):
        left = {
            f"{kind} {ns}/{name}": _cluster_state(obj) for (ns, name), obj in objects.items() if (ns, name) in waiting
        }
        return not left, left

    def progress(state):
        result["progress"].append(state)
        if on_progress is not None:
            on_progress(state)

    try:
        kube.watch_until(client, api_version, kind, None, evaluate, max(budget, 0.001), on_progress=progress)
    except kube.WaitTimeout as exc:
        result["remaining"] = sorted(exc.state or {})
        raise TeardownError(
            "timed out waiting for the providers to be deleted on {}; still present: {}. The providers after "
            "them were not deleted and nothing after this step ran; check the cluster-api-operator's logs and "
            "run the teardown again".format(
                target, "; ".join(f"{k} ({v})" for k, v in sorted((exc.state or {}).items()))
            ),
            result,
        )
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
        raise TeardownError(f"lost the watch on {kind} objects on {target}: {kube.error_text(exc)}", result)


# --- Tinkerbell Hardware --------------------------------------------------------------


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
            kept_marks[_name(hw)] = cluster
        elif _has_marks(marks) and any(owner.startswith(k + "-") for k in keep):
            # protective only: a machine name starting with a kept Cluster's name keeps its Hardware
            kept_marks[_name(hw)] = owner
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
        ident = _name(hw)
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
            ident = _name(hw)
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
            if ident not in {_name(h) for h in objects.values()}:
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
            f"cannot remove stale ownership marks from Hardware {_name(hw)} on {target}: {kube.error_text(exc)}"
        )


# --- ordered plans --------------------------------------------------------------------


def _step(action, description, **params):
    return dict(action=action, description=description, **params)


def _kind_step(boot, host, kept, description):
    """delete-kind only when the kind cluster answered and its marker proves krops created it for this environment."""
    if host["kind_reachable"] and host["kind_marker"]["owned"]:
        return [_step("delete-kind", description, name=boot["kind-cluster"], proof=host["kind_marker"]["reason"])]
    kept.append(
        {
            "what": "kind cluster {}".format(boot["kind-cluster"]),
            "reason": host["kind_marker"]["reason"]
            if host["kind_reachable"]
            else "the kind cluster did not answer, so nothing proves krops created it",
        }
    )
    return []


def build_plan(config_data, environment, host, local_cluster_timeout=300, kept=None):
    """The ordered teardown steps for an environment, given find_host's result.

    Plain data: roles/teardown walks it step by step and check mode prints it. What the teardown
    leaves because krops cannot prove it owns it is appended to ``kept`` ({what, reason}).
    """
    kept = [] if kept is None else kept
    boot = config_data["bootstrap"]
    env = config_data["environments"][environment]
    profile = profiles.of(env)
    down = env.get("teardown") or {}
    mgmt = env["mgmt-cluster"]
    namespace = boot["mgmt-namespace"]
    pivoted = host["pivoted"]
    workloads = list(down.get("capi-workloads") or [])
    reachable = host["host"] != HOST_UNREACHABLE
    steps = []
    if reachable:
        steps.append(
            _step(
                "suspend-flux",
                "suspend every Flux Kustomization and Flux Operator object on the %s cluster"
                % ("management" if pivoted else "kind"),
            )
        )
    if not reachable and profile.cloud_teardown_step:
        # forced: nothing answers, so only the cloud side can be removed
        return _number(
            [
                _step(
                    profile.cloud_teardown_step,
                    f"remove the {profile.cloud} resources this environment created, the management cluster "
                    "included (ownership-filtered; forced: no controller host answers)",
                )
            ]
        )
    if not reachable and profile.hardware_release:
        return []
    if reachable and profile.hardware_release:
        names = ownership.owned_cluster_names(env, pivoted)
        steps.append(
            _step(
                "tinkerbell-release",
                "delete the Clusters %s named by bootstrap.toml so CAPT returns their "
                "Hardware to the Tinkerbell pool; wait until no Hardware carries ownership marks"
                % (", ".join(names) or "(none)"),
                namespace=namespace,
                clusters=names,
                keep=[mgmt] if pivoted else [],
                timeout=boot["cluster-delete-timeout"],
            )
        )
    elif reachable and workloads:
        # workload Clusters made of local containers get the local timeout
        timeout = local_cluster_timeout if profile.local_containers else boot["cluster-delete-timeout"]
        if profile.cloud_teardown_before_clusters:
            steps.append(
                _step(
                    profile.cloud_teardown_step,
                    f"remove the {profile.cloud} resources the workload Clusters' deletion waits for "
                    f"({profile.cloud_teardown_before_clusters}; ownership-filtered)",
                    phase="before-clusters",
                    timeout=boot["cluster-delete-timeout"],
                )
            )
        steps.append(
            _step(
                "delete-clusters",
                "delete the workload Clusters {} through the provider and wait ({}s)".format(
                    ", ".join(workloads), timeout
                ),
                namespace=namespace,
                clusters=workloads,
                keep=[mgmt],
                timeout=timeout,
            )
        )
    if profile.local_containers:
        if not pivoted:
            steps += _kind_step(
                boot,
                host,
                kept,
                "delete the kind cluster {} (the controller host; {})".format(
                    boot["kind-cluster"], host["kind_marker"]["reason"]
                ),
            )
        clusters = [mgmt] + workloads
        steps.append(
            _step(
                "remove-containers",
                "remove the Docker containers labelled {}={} and their anonymous volumes".format(
                    ownership.KIND_CLUSTER_LABEL, "|".join(clusters)
                ),
                label_key=ownership.KIND_CLUSTER_LABEL,
                clusters=clusters,
                filters=[ownership.docker_label_filter(c) for c in clusters],
            )
        )
        if pivoted:
            steps += _kind_step(
                boot,
                host,
                kept,
                "delete the leftover kind cluster {} ({})".format(boot["kind-cluster"], host["kind_marker"]["reason"]),
            )
        kept.append(
            {
                "what": "Docker network {}".format(boot["kind-network"]),
                "reason": "kind creates it without a label for every kind cluster on the host and never "
                "deletes it; nothing proves krops owns it",
            }
        )
        if profile.local_registry:
            steps.append(
                _step(
                    "remove-registry",
                    "remove the registry container {} (exact name from bootstrap.toml)".format(boot["registry-name"]),
                    name=boot["registry-name"],
                )
            )
        if profile.local_workload:
            # the bootstrap wrote each workload's kubeconfig (roles/bootstrap/tasks/workload.yml) with its
            # context, cluster and user named krops-<cluster>; its cluster is gone now
            for cluster in workloads:
                path, context = WORKLOAD_KUBECONFIG.format(cluster=cluster), f"krops-{cluster}"
                steps.append(
                    _step(
                        "remove-kubeconfig",
                        f"remove the context {context} (and the cluster and user only it uses) from {path}; "
                        "the file goes only when nothing else is left",
                        path=path,
                        context=context,
                    )
                )
    elif profile.cloud_teardown_step:
        steps.append(
            _step(
                "capi-providers",
                "delete the CAPI providers ({}) so nothing recreates cloud resources".format(
                    ", ".join(row[1] for row in kube.PROVIDER_DELETE_ORDER)
                ),
                kinds=list(PROVIDER_KINDS),
                timeout=boot["provider-delete-timeout"],
            )
        )
        steps.append(
            _step(
                "flux-uninstall",
                "helm uninstall flux and flux-operator in {}".format(boot["flux-namespace"]),
                namespace=boot["flux-namespace"],
                releases=["flux", "flux-operator"],
            )
        )
        steps.append(
            _step(
                "bootstrap-secrets",
                "delete the bootstrap secrets and run tags in {}".format(boot["flux-namespace"]),
                namespace=boot["flux-namespace"],
                secrets=[boot["github-pat-secret"], boot["sops-age-secret"]],
                configmaps=[boot["run-configmap"]],
            )
        )
        steps.append(
            _step(
                profile.cloud_teardown_step,
                f"remove the {profile.cloud} resources this environment created, the management cluster "
                "included (ownership-filtered)",
                timeout=boot["cluster-delete-timeout"],
            )
        )
        steps += _kind_step(
            boot,
            host,
            kept,
            "delete the kind cluster {} ({})".format(boot["kind-cluster"], host["kind_marker"]["reason"]),
        )
    elif profile.hardware_release and not pivoted:
        steps += _kind_step(
            boot,
            host,
            kept,
            "delete the kind cluster {} (the controller host; {})".format(
                boot["kind-cluster"], host["kind_marker"]["reason"]
            ),
        )
    # a management cluster on bare-metal Hardware stays after the teardown, and so does its context. Elsewhere the
    # steps above remove the management cluster, pivoted or not: a pivot that died after its export phase left the
    # kubeconfig with kind still the host, and a teardown that kept it would exit 0 with krops' file on disk (issue 30).
    if not profile.hardware_release and (pivoted or host.get("mgmt_kubeconfig_present")):
        steps.append(
            _step(
                "remove-kubeconfig",
                "remove krops' context {} (and the cluster and user only it uses) "
                "from {}; the file goes only when nothing else is left".format(
                    boot["mgmt-context"], boot["mgmt-kubeconfig"]
                ),
                path=boot["mgmt-kubeconfig"],
                context=boot["mgmt-context"],
            )
        )
    return _number(steps)


# The workload kubeconfig the bootstrap writes for a local workload cluster (roles/bootstrap/defaults).
WORKLOAD_KUBECONFIG = "~/.kube/krops-{cluster}.yaml"

# Executables the steps of a plan need.
STEP_TOOLS = {"delete-kind": ("kind",), "flux-uninstall": ("helm",)}


def plan_tools(plan):
    tools = []
    for step in plan:
        for tool in STEP_TOOLS.get(step["action"], ()):
            if tool not in tools:
                tools.append(tool)
    return tools


def _number(steps):
    for number, step in enumerate(steps, 1):
        step["step"] = number
    return steps


# --- kubeconfig -----------------------------------------------------------------------


def remove_kubeconfig_entries(path, context, check_mode=False):
    """Remove krops' context (and the cluster and user only it uses) from a kubeconfig file.

    The file is deleted only when nothing else is left in it; a file holding other contexts keeps
    them untouched. Returns {path, removed, file_removed, changed}; TeardownError on unreadable input.
    """
    import yaml  # PyYAML ships with ansible-core

    path = os.path.expanduser(path)
    result = {
        "path": path,
        "removed": {"contexts": [], "clusters": [], "users": []},
        "file_removed": False,
        "changed": False,
    }
    if not os.path.exists(path):
        return result
    try:
        with open(path, encoding="utf-8") as handle:
            doc = yaml.safe_load(handle) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise TeardownError(f"cannot read kubeconfig {path}: {exc}; nothing was changed", result)
    if not isinstance(doc, dict):
        raise TeardownError(f"{path} is not a kubeconfig (a YAML mapping); nothing was changed", result)
    remaining, removed = ownership.kubeconfig_without(doc, context)
    result["removed"] = removed
    result["changed"] = bool(removed["contexts"] or removed["clusters"] or removed["users"]) or remaining is None
    result["file_removed"] = remaining is None
    if check_mode or not result["changed"]:
        return result
    try:
        if remaining is None:
            os.remove(path)
        else:
            tmp = f"{path}.krops-tmp"
            with open(tmp, "w", encoding="utf-8") as handle:
                yaml.safe_dump(remaining, handle, default_flow_style=False, sort_keys=False)
            os.chmod(tmp, os.stat(path).st_mode & 0o777)
            os.replace(tmp, path)
    except OSError as exc:
        raise TeardownError(f"cannot update kubeconfig {path}: {exc.strerror or exc}", result)
    return result
