# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Phase 3, preflight: the Kustomizations bootstrap.toml lists in pivot-wait-kustomizations are Ready on the
source (waited for: azure's aso-workload-identity federates the management cluster's issuer, without which
CAPZ and ASO there cannot authenticate after the move); every Cluster/Machine on the source movable; all
reasons reported together."""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import kube
from ansible_collections.krops.platform.plugins.module_utils.pivot.common import (
    BLOCK_MOVE,
    PAUSED_ANNOTATION,
    PivotError,
    capi_objects,
)

KS_API = kube.KUSTOMIZATION[0]


def _cluster_problems(obj, earlier_move=False):
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
    paused_spec = (obj.get("spec") or {}).get("paused")
    if earlier_move and paused_spec and PAUSED_ANNOTATION not in ((obj["metadata"].get("annotations")) or {}):
        pass  # paused by the clusterctl move of an interrupted pivot run: this move finishes it
    elif paused_spec or PAUSED_ANNOTATION in ((obj["metadata"].get("annotations")) or {}):
        problems.append(f"Cluster {name}: already paused (unpause it or finish the earlier move first)")
    return problems


def _gate_state(names, objects):
    """(all Ready, [name: reason] of those not Ready yet) over {(namespace, name): Kustomization}."""
    waiting = []
    for name in names:
        ready, reason, message = kube.readiness(objects.get(("flux-system", name)))
        if not ready:
            waiting.append(f"{name}: {reason or 'not Ready'}" + (f" ({message})" if message else ""))
    return not waiting, waiting


def wait_kustomizations(pv):
    """Wait until every Kustomization of pivot-wait-kustomizations is Ready on the source (check mode: look once)."""
    names = list(pv.env.pivot_wait_kustomizations)
    if not names:
        return
    if pv.check_mode:
        objects = {("flux-system", n): kube.get(pv.source, KS_API, "Kustomization", n, "flux-system") for n in names}
        done, waiting = _gate_state(names, objects)
        if not done:
            raise PivotError(
                "preflight",
                "the move cannot start: Kustomizations not Ready on the kind cluster: {} (check mode does not wait)".format(
                    "; ".join(waiting)
                ),
            )
        return
    timeout = pv.options.get("mgmt_ready_timeout") or pv.env.mgmt_ready_timeout
    pv.say(">>> waiting up to {}s for Kustomizations {} on the kind cluster".format(timeout, ", ".join(names)))
    seconds = pv.wait_left("gates", timeout)

    def watch(limit):
        return kube.watch_until(
            pv.source, KS_API, "Kustomization", "flux-system", lambda objs: _gate_state(names, objs), limit
        )

    try:
        pv.budgeted_wait(
            "gates",
            "preflight",
            "Kustomizations the move waits for",
            timeout,
            seconds,
            watch,
            lambda state: "not Ready yet: " + "; ".join(state or names),
        )
    except kube.WaitTimeout as exc:
        raise PivotError(
            "preflight",
            "the move cannot start: Kustomizations not Ready on the kind cluster within {}s (mgmt-ready-timeout; "
            "bootstrap.toml pivot-wait-kustomizations): {}; nothing was paused or suspended. Check them with "
            "`flux get kustomizations` on kind".format(timeout, "; ".join(exc.state or names)),
        )


def _earlier_move(pv):
    """True when Kustomizations on the source carry the pivot's suspension mark: an earlier run reached the move
    (it suspends first, then clusterctl pauses the Clusters) and died before it finished or rolled back (issue 30)."""
    state, found, _error = kube.probe(pv.source, *kube.KUSTOMIZATION)
    return state != kube.UNKNOWN and any(kube.held_by_pivot(o) for o in found or [])


def run(pv):
    if pv.source is None:
        return
    wait_kustomizations(pv)
    if pv.pending:
        return
    objects = capi_objects(pv.source, pv.namespace, phase="preflight")
    earlier_move = _earlier_move(pv)
    if earlier_move:
        pv.say(
            "an earlier pivot run reached the move on the kind cluster (its Kustomizations carry %s): "
            "Clusters it paused are moved as they are" % kube.SUSPENDED_BY
        )
    problems = []
    for key, obj in sorted(objects.items(), key=lambda kv: kv[0]):
        group, kind, _ns, name = key
        if group == "cluster.x-k8s.io" and kind == "Cluster":
            problems += _cluster_problems(obj, earlier_move)
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
