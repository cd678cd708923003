# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Teardown on the Kubernetes side: controller-host discovery, probes, Flux suspension,
Cluster deletion with an event-driven wait and the provider deletion. The ordered per-environment
plan that roles/teardown follows is in teardown_plan.py, the Tinkerbell Hardware release in
tinkerbell.py.

Every function takes the cluster it acts on explicitly (kubeconfig and context); nothing
here uses the operator's current context. Probes classify present / absent / unknown
(module_utils.kube.probe); an unknown state aborts before anything is destroyed.
"""

from __future__ import annotations

import fnmatch
import os
import time

from ansible_collections.krops.platform.plugins.module_utils.errors import TeardownError  # the error teardown raises
from ansible_collections.krops.platform.plugins.module_utils import capi
from ansible_collections.krops.platform.plugins.module_utils import kube
from ansible_collections.krops.platform.plugins.module_utils import ownership

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

# CAPI operator provider kinds, in the order they are deleted (capi.PROVIDER_DELETE_ORDER).
PROVIDER_KINDS = tuple(row[0] for row in capi.PROVIDER_DELETE_ORDER)
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
    """capi.cluster_resource, a discovery that does not answer being an unknown state (nothing may be destroyed)."""
    try:
        return capi.cluster_resource(client)
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


def object_name(obj):
    meta = obj.get("metadata") or {}
    return "{}/{}".format(meta.get("namespace"), meta.get("name")) if meta.get("namespace") else meta.get("name")


# --- Flux -----------------------------------------------------------------------------


def _matches(obj, patterns):
    meta = obj.get("metadata") or {}
    names = (meta.get("name", ""), object_name(obj))
    return any(fnmatch.fnmatchcase(n, p) for p in patterns for n in names)


def plan_suspend(client, patterns, target=None):
    """What suspending Flux would change: Kustomizations (spec.suspend) and Flux Operator objects."""
    planned = {"kustomizations": [], "already_suspended": [], "flux_operator": []}
    for obj in probe_or_abort(client, *KUSTOMIZATION, target=target):
        if not _matches(obj, patterns):
            continue
        key = "already_suspended" if (obj.get("spec") or {}).get("suspend") else "kustomizations"
        planned[key].append(object_name(obj))
    for api_version, kind in FLUX_OPERATOR_KINDS:
        for obj in probe_or_abort(client, api_version, kind, target=target):
            annotations = (obj.get("metadata") or {}).get("annotations") or {}
            if annotations.get(FLUX_OPERATOR_RECONCILE) != "disabled":
                planned["flux_operator"].append({"kind": kind, "name": object_name(obj)})
    return planned


def apply_suspend(client, planned, target=None):
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
                    target,
                )
    for ident in planned["kustomizations"]:
        namespace, name = ident.split("/", 1)
        body = kube.suspend_patch(True, by=kube.TEARDOWN_SUSPENDER)
        _patch(client, KUSTOMIZATION[0], KUSTOMIZATION[1], name, namespace, body, target)


def write(call, what, target=None, result=None, check_mode=False):
    """One teardown write (a patch or a delete): ``call(dry_run)`` sends it, as a server-side dry run in check
    mode. False when the object is gone already; any other API error is a TeardownError naming ``what`` and
    the target, carrying the partial ``result``."""
    try:
        call("All" if check_mode else None)
    except NotFoundError:
        return False
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
        where = f" on {target}" if target else ""
        raise TeardownError(f"cannot {what}{where}: {kube.error_text(exc)}", result)
    return True


def _patch(client, api_version, kind, name, namespace, body, target=None):
    res = kube.resource(client, api_version, kind)
    write(
        lambda dry_run: kube.merge_patch(client, api_version, kind, name, namespace, body, res=res, dry_run=dry_run),
        f"patch {kind} {namespace}/{name}",
        target,
    )


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
    paused = _paused_by_pivot(client, clusters, chosen, target)
    plan = [f"suspend Kustomization {k}" for k in planned["kustomizations"]]
    plan += ["disable reconciliation of {} {}".format(i["kind"], i["name"]) for i in planned["flux_operator"]]
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
    apply_suspend(client, planned, target)
    for name in paused:
        _patch(client, api, "Cluster", name, namespace, {"spec": {"paused": None}}, target)
    res = kube.resource(client, api, "Cluster") if chosen else None
    for name in chosen:
        write(
            lambda dry_run, name=name: res.delete(name=name, namespace=namespace, dry_run=dry_run),
            f"delete Cluster {namespace}/{name}",
            target,
            result,
        )
    if wait and chosen:
        _watch_gone(
            client,
            (api, "Cluster", namespace),
            {(namespace, name): name for name in chosen},
            wait_timeout,
            result,
            on_progress,
            lambda left: (
                f"timed out after {int(wait_timeout)}s waiting for Cluster deletion in {namespace} on {target}; still present: {left}. "
                "Nothing after this step ran (the controller host is left running); check the "
                "provider's logs and run the teardown again"
            ),
            f"lost the watch on Clusters in {namespace} on {target}",
        )
    return result


def _paused_by_pivot(client, clusters, chosen, target):
    """The chosen Clusters a pivot move that died left paused. CAPI never reconciles a paused Cluster, its deletion
    included; the pivot's mark on the Kustomizations proves the pause is krops' (issue 30). A pause without it is
    the user's, and stays."""
    by_name = {c["metadata"]["name"]: c for c in clusters}
    paused = [n for n in chosen if (by_name[n].get("spec") or {}).get("paused")]
    if paused and any(kube.held_by_pivot(o) for o in probe_or_abort(client, *KUSTOMIZATION, target=target)):
        return paused
    return []


def _watch_gone(client, watched, labels, budget, result, on_progress, timed_out, lost):
    """Watch ``watched`` (api_version, kind, namespace or None for every namespace) until none of ``labels``
    {(namespace or "", name): label} is left. On timeout, result["remaining"] lists the labels still there and the
    TeardownError says ``timed_out(what is left, with its state)``; a lost watch raises ``lost: <error>``."""

    def evaluate(objects):
        left = {labels[key]: _cluster_state(obj) for key, obj in objects.items() if key in labels}
        return not left, left

    def progress(state):
        result["progress"].append(state)
        if on_progress is not None:
            on_progress(state)

    try:
        kube.watch_until(client, *watched, evaluate, max(budget, 0.001), on_progress=progress)
    except kube.WaitTimeout as exc:
        result["remaining"] = sorted(exc.state or {})
        left = "; ".join(f"{k} ({v})" for k, v in sorted((exc.state or {}).items()))
        raise TeardownError(timed_out(left), result)
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
        raise TeardownError(f"{lost}: {kube.error_text(exc)}", result)


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
    """Delete every provider object of ``kinds`` in capi.PROVIDER_DELETE_ORDER (add-on first, core last), and
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
        for kind, _label in capi.PROVIDER_DELETE_ORDER
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
            write(
                lambda dry_run, meta=meta, res=res: res.delete(
                    name=meta["name"], namespace=meta.get("namespace"), dry_run=dry_run
                ),
                f"delete {_provider(obj)}",
                target,
                result,
                check_mode,
            )
        if check_mode or not wait:
            continue
        _watch_gone(
            client,
            (api_version, kind, None),
            {(o["metadata"].get("namespace") or "", o["metadata"]["name"]): _provider(o) for o in objs},
            deadline - clock(),
            result,
            on_progress,
            lambda left: (
                f"timed out waiting for the providers to be deleted on {target}; still present: {left}. "
                "The providers after them were not deleted and nothing after this step ran; check the "
                "cluster-api-operator's logs and run the teardown again"
            ),
            f"lost the watch on {kind} objects on {target}",
        )
    return result


def _provider(obj):
    meta = obj["metadata"]
    return "{} {}/{}".format(obj["kind"], meta.get("namespace") or "", meta["name"])


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
