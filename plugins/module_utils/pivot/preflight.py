# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Phase 3, preflight: every Cluster/Machine on the source movable; all reasons reported together."""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import kube
from ansible_collections.krops.platform.plugins.module_utils.pivot.common import (
    BLOCK_MOVE,
    PAUSED_ANNOTATION,
    PivotError,
    capi_objects,
)


def _cluster_problems(obj):
    status = obj.get("status") or {}
    init = status.get("initialization") or {}
    name = obj["metadata"]["name"]
    problems = []
    infra = (
        init.get("infrastructureProvisioned")
        or status.get("infrastructureReady")
        or (kube.condition(obj, "InfrastructureReady") or {}).get("status") == "True"
    )
    if not infra:
        problems.append(f"Cluster {name}: infrastructure is still provisioning")
    control = (
        init.get("controlPlaneInitialized")
        or status.get("controlPlaneReady")
        or (kube.condition(obj, "ControlPlaneInitialized") or {}).get("status") == "True"
    )
    if not control:
        problems.append(f"Cluster {name}: control plane is not initialised")
    if (obj.get("spec") or {}).get("paused") or PAUSED_ANNOTATION in ((obj["metadata"].get("annotations")) or {}):
        problems.append(f"Cluster {name}: already paused (unpause it or finish the earlier move first)")
    return problems


def run(pv):
    if pv.source is None:
        return
    objects = capi_objects(pv.source, pv.namespace, phase="preflight")
    problems = []
    for key, obj in sorted(objects.items(), key=lambda kv: kv[0]):
        group, kind, _ns, name = key
        if group == "cluster.x-k8s.io" and kind == "Cluster":
            problems += _cluster_problems(obj)
        elif (
            group == "cluster.x-k8s.io"
            and kind == "Machine"
            and not ((obj.get("status") or {}).get("nodeRef") or {}).get("name")
        ):
            problems.append(f"Machine {name}: no nodeRef yet (the node is still provisioning)")
        if BLOCK_MOVE in ((obj["metadata"].get("annotations")) or {}):
            problems.append(
                f"{kube.key_label(key)}: carries the {BLOCK_MOVE} annotation (a provider is still working on it)"
            )
    if problems:
        raise PivotError(
            "preflight",
            "the move cannot start; nothing was paused or suspended: " + "; ".join(problems),
            {"refusals": problems},
        )
    pv.objects = objects or None  # the move carries what the preflight checked (an empty set is listed again)
