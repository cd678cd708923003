# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Cluster API vocabulary written once: the served versions of the cluster.x-k8s.io family, the Cluster
resource, and the cluster-api-operator provider kinds with the order teardown deletes them in (capi_pivot,
teardown, validate and admission read them here).
"""

from __future__ import annotations

try:
    from kubernetes.dynamic.resource import ResourceList as _ResourceList
except ImportError:  # reported by the module through missing_required_lib (module_utils/kube.py)
    _ResourceList = ()


CAPI_GROUP_SUFFIX = "cluster.x-k8s.io"
# Groups of the cluster.x-k8s.io family that clusterctl move never moves.
NOT_MOVED_GROUPS = ("operator.cluster.x-k8s.io", "clusterctl.cluster.x-k8s.io", "runtime.cluster.x-k8s.io")
PROVIDER_GROUP = "operator.cluster.x-k8s.io"
PROVIDER_KINDS = (
    "CoreProvider",
    "BootstrapProvider",
    "ControlPlaneProvider",
    "InfrastructureProvider",
    "AddonProvider",
    "IPAMProvider",
    "RuntimeExtensionProvider",
)
# The order teardown deletes them in: add-ons first and core last, so no provider outlives one it
# needs; every kind above is in it (an IPAM or runtime-extension provider would otherwise stay).
PROVIDER_DELETE_ORDER = (
    ("AddonProvider", "add-on"),
    ("RuntimeExtensionProvider", "runtime extension"),
    ("IPAMProvider", "IPAM"),
    ("ControlPlaneProvider", "control plane"),
    ("BootstrapProvider", "bootstrap"),
    ("InfrastructureProvider", "infrastructure"),
    ("CoreProvider", "core"),
)


def capi_resources(client, namespaced=True):
    """Served resources of the cluster.x-k8s.io family that clusterctl moves, one per kind (preferred version)."""
    chosen = {}
    # An unfiltered search never refreshes the discovery cache file, which another module may have
    # written before Cluster API's CRDs existed (it is shared per API server URL): read it afresh.
    client.resources.invalidate_cache()
    for res in client.resources.search():
        if isinstance(res, _ResourceList) or "/" in (res.name or "") or not res.group:
            continue
        if not res.group.endswith(CAPI_GROUP_SUFFIX) or res.group in NOT_MOVED_GROUPS:
            continue
        if bool(res.namespaced) != namespaced or "list" not in (res.verbs or []):
            continue
        key = (res.group, res.kind)
        if key not in chosen or (res.preferred and not chosen[key].preferred):
            chosen[key] = res
    return [chosen[k] for k in sorted(chosen)]


# Cluster API versions, newest first: the choice when discovery marks none of the served ones preferred.
CLUSTER_VERSIONS = ("v1beta2", "v1beta1", "v1alpha4", "v1alpha3")


def cluster_resource(client):
    """The served cluster.x-k8s.io Cluster resource at the group's preferred version (else the newest of
    CLUSTER_VERSIONS); None when Cluster API is not installed. The one lookup of capi_pivot, teardown and
    teardown_host; an API error propagates (teardown.served_cluster turns it into an unknown state).

    A search by group and kind reads discovery afresh when the cached one has no such resource (the
    kubernetes client's LazyDiscoverer.search), as when Cluster API was installed after the cache was written.
    """
    found = [
        res
        for res in client.resources.search(group="cluster.x-k8s.io", kind="Cluster")
        if not isinstance(res, _ResourceList) and not getattr(res, "subresource", None) and "/" not in (res.name or "")
    ]
    if not found:
        return None

    def rank(res):
        version = res.api_version
        return (
            not res.preferred,
            CLUSTER_VERSIONS.index(version) if version in CLUSTER_VERSIONS else len(CLUSTER_VERSIONS),
        )

    return min(found, key=rank)


def api_version_of(res):
    return f"{res.group}/{res.api_version}" if "/" not in res.api_version else res.api_version


def provider_resources(client, kinds=PROVIDER_KINDS):
    """{kind: preferred served resource} of the cluster-api-operator provider kinds in ``kinds``."""
    return {
        r.kind: r
        for r in client.resources.search(group=PROVIDER_GROUP)
        if not isinstance(r, _ResourceList) and r.kind in kinds and r.preferred
    }


def is_provider(obj):
    return obj.get("apiVersion", "").startswith(PROVIDER_GROUP + "/") and obj.get("kind") in PROVIDER_KINDS
