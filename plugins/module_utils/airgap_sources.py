# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The Flux sources and HelmChartProxies of the local-host tree that the disconnected host cannot reach: the
problems airgap.derive reports for them (pin check only)."""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils.airgap_tables import (
    OFFLINE_HELM_REPOSITORIES,
    PACKED_INDEXES,
    PROXIED_CHARTS,
    WORKLOAD_SOURCES,
    _ident,
)


def proxy_problem(inv, boot, directory, obj, spec):
    """CAAPH's controller pulls a HelmChartProxy's chart itself and the Zarf agent has no hook for it: a problem
    unless the offline configuration installs the chart with Flux (PROXIED_CHARTS) or it is in the local registry."""
    if spec.get("chartName") in PROXIED_CHARTS or _local(boot, spec.get("repoURL")):
        return
    inv.problems.append(
        (
            directory,
            _ident(obj),
            "HelmChartProxy chart {}/{} is pulled by the CAAPH controller, "
            "which the Zarf agent does not rewrite: point repoURL at the local registry {}".format(
                spec.get("repoURL"), spec.get("chartName"), boot.registry_name
            ),
        )
    )


def _local(boot, url):
    """Whether an oci:// URL names the local registry (served on the host and on the kind network)."""
    url = str(url or "")
    return url.startswith(f"oci://{boot.registry_name}:") or url.startswith(f"oci://{boot.registry_name}/")


def offline_source(inv, boot, directory, obj, spec):
    """A Flux source the disconnected host cannot reach is a problem of the bundle (pin check only).

    The Zarf agent rewrites OCIRepository and type: oci HelmRepository objects to the internal registry
    (src/internal/agent/hooks/flux-ocirepo.go, flux-helmrepo.go @ v0.84.0: other HelmRepository types are
    skipped), and only in the cluster Zarf is initialised in: workload/ is applied into the CAPD workload
    clusters, which reach nothing but the local registry.
    """
    url = str(spec.get("url", ""))
    served = obj.get("kind") == "OCIRepository" and url.rstrip("/") in WORKLOAD_SOURCES
    if directory.startswith("workload/") and not _local(boot, url) and not served:
        inv.problems.append(
            (
                directory,
                _ident(obj),
                "{} {} is applied in a workload cluster, where no Zarf agent "
                "rewrites it and nothing outside the local registry {} is reachable offline".format(
                    obj.get("kind"), url, boot.registry_name
                ),
            )
        )
    elif (
        obj.get("kind") == "HelmRepository"
        and str(spec.get("type", "default")) != "oci"
        and url.rstrip("/") not in OFFLINE_HELM_REPOSITORIES
        and url.rstrip("/") not in PACKED_INDEXES
    ):
        inv.problems.append(
            (
                directory,
                _ident(obj),
                f"HelmRepository {url} is an HTTP index: the Zarf agent rewrites only "
                "type: oci HelmRepositories, so Flux cannot fetch it offline; use the chart's OCI "
                "repository",
            )
        )
    elif obj.get("kind") == "GitRepository":
        inv.problems.append((directory, _ident(obj), f"GitRepository {url}: the bundle carries no Git server"))
