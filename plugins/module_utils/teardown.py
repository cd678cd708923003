# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Teardown on the Kubernetes side: controller-host discovery, probes, the one write of a teardown step (a patch
or a delete) and the kubeconfig cleanup. The Flux suspension, the Cluster deletion and the provider deletion are
rows of the step engine (kube_rows.py, steps.py); the ordered per-environment plan that roles/teardown follows is
in teardown_plan.py, the Tinkerbell Hardware release in tinkerbell.py.

Every function takes the cluster it acts on explicitly (kubeconfig and context); nothing
here uses the operator's current context. Probes classify present / absent / unknown
(module_utils.kube.probe); an unknown state aborts before anything is destroyed.
"""

from __future__ import annotations

import os

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


# --- the one write of a teardown step -------------------------------------------------------------------------


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
