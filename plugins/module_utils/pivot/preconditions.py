# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Phase 0, preconditions: the source is the kind context; (a local-registry platform) the registry serves;
the management Cluster exists (on the source, or already on the target)."""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import capi
from ansible_collections.krops.platform.plugins.module_utils import kube
from ansible_collections.krops.platform.plugins.module_utils.pivot.common import (
    API_ERRORS,
    PivotError,
    mgmt_on_target,
    registry_serves,
    registry_url,
)


def run(pv):
    phase = "preconditions"
    context = pv.source_context()
    if context != pv.boot.kind_context:
        raise PivotError(
            phase,
            f"the pivot source must be the kind cluster's context {pv.boot.kind_context}, not {context}; pass source_context={pv.boot.kind_context}",
        )
    try:
        pv.source = pv.connect(pv.source_kubeconfig(), context, source=True)
        pv.source.resources.get(api_version="v1", kind="Namespace").get(name="default")
    except (kube.KubeError,) + API_ERRORS as exc:
        pv.source = None
        if mgmt_on_target(pv):
            pv.already_moved = True
            pv.say(
                f"kind context {context} does not answer and {pv.target_context} already manages Cluster {pv.mgmt}: nothing to move"
            )
            return
        raise PivotError(
            phase,
            f"the kind cluster (context {context}) cannot be reached and {pv.target_kubeconfig} does not list Cluster {pv.mgmt} yet: {kube.error_text(exc)}",
        )
    if pv.profile.local_registry:  # Flux on the management cluster will pull from it
        url = registry_url(pv)
        if not registry_serves(url):
            raise PivotError(
                phase,
                f"the local registry {pv.boot.registry_name} does not serve {url}/v2/; start it (bootstrap role) before pivoting",
            )
    res = capi.cluster_resource(pv.source)
    if res is None:
        raise PivotError(
            phase,
            f"the kind cluster (context {context}) does not serve cluster.x-k8s.io Cluster: "
            "Cluster API is not installed there; run the bootstrap first",
        )
    if kube.get(pv.source, capi.api_version_of(res), "Cluster", pv.mgmt, pv.namespace) is None and mgmt_on_target(pv):
        pv.say(f"Cluster {pv.namespace}/{pv.mgmt} is already on the target")
        return
    timeout = pv.options.get("mgmt_ready_timeout") or pv.env.mgmt_ready_timeout
    pv.say(f">>> waiting up to {timeout}s for Cluster {pv.namespace}/{pv.mgmt} on the kind cluster")
    if pv.check_mode and kube.get(pv.source, capi.api_version_of(res), "Cluster", pv.mgmt, pv.namespace) is None:
        raise PivotError(
            phase,
            f"Cluster {pv.namespace}/{pv.mgmt} does not exist on the kind cluster (check mode does not wait)",
        )
    seconds = pv.wait_left("mgmt", timeout)
    pv.mgmt_deadline = pv.clock() + seconds

    def watch(limit):
        return kube.watch_until(
            pv.source,
            capi.api_version_of(res),
            "Cluster",
            pv.namespace,
            lambda objs: ((pv.namespace, pv.mgmt) in objs, sorted(key[1] for key in objs)),
            limit,
        )

    try:
        pv.budgeted_wait(
            "mgmt",
            phase,
            "management Cluster",
            timeout,
            seconds,
            watch,
            lambda state: "Cluster {}/{} not on the kind cluster yet (Clusters there: {})".format(
                pv.namespace, pv.mgmt, ", ".join(state or []) or "none"
            ),
        )
    except kube.WaitTimeout as exc:
        raise PivotError(
            phase,
            "Cluster {}/{} did not appear on the kind cluster within {}s (mgmt-ready-timeout; Clusters there: {}); "
            "check the Flux Kustomizations on kind".format(
                pv.namespace, pv.mgmt, timeout, ", ".join(exc.state or []) or "none"
            ),
        )
