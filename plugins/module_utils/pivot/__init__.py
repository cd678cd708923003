# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The pivot: move the management plane from the kind cluster into the self-managed cluster.

One phase table, PHASES, in the order the phases run; each phase is a module of this
package with ``run(state)`` over one declared state object (common.PivotState: the two
clients, bootstrap.toml, the environment's profile, the options, and every field a phase
hands to a later one). Adding a phase is one file and one row (docs/extending.md).

0. preconditions  the source is the kind context; (local-registry platforms) the registry
                  serves; the management Cluster exists (on the source, or already on the target).
1. export         Secret <mgmt>-kubeconfig merged into the target kubeconfig (0600), context
                  renamed, (load-balancer platforms) server rewritten; nodes Ready.
2. prepare        charts, provider manifests, pivot manifests (${VAR} substituted),
                  credentials and SOPS secrets on the target; providers Ready; versions.
3. preflight      every Cluster/Machine on the source movable; all reasons reported together.
4. move           Kustomizations suspended, ``clusterctl move``, verification, Clusters
                  unpaused on the target, move fallbacks; rollback on failure.

Failure semantics: phases 0-3 only read the source. A failure in phase 4 unpauses the
source's Clusters and resumes the Kustomizations the pivot suspended (kept suspended when
objects already left the source, so Flux cannot re-create them on kind), never deletes
anything on the target, and reports the partial object list. Re-running completes the move.

Long waits can be cut into bounded steps (option ``_wait_budget``, set by the action plugin
so that the controller shows progress): a wait whose budget runs out before its own timeout
ends the run with a "pending" result (``_krops_pending``, ``_krops_wait``) instead of an error,
and the next step re-runs the pivot from the start with the time already spent on each wait
(``_wait_spent``). Only the waits are cut, never a command (helm, clusterctl move).

Importable without Ansible; external binaries run through module_utils.cli (secrets only
through the environment or stdin).
"""

from __future__ import annotations

from collections import namedtuple

from ansible_collections.krops.platform.plugins.module_utils import kube
from ansible_collections.krops.platform.plugins.module_utils.pivot import export as _export
from ansible_collections.krops.platform.plugins.module_utils.pivot import move as _move
from ansible_collections.krops.platform.plugins.module_utils.pivot import preconditions as _preconditions
from ansible_collections.krops.platform.plugins.module_utils.pivot import preflight as _preflight
from ansible_collections.krops.platform.plugins.module_utils.pivot import prepare as _prepare
from ansible_collections.krops.platform.plugins.module_utils.pivot.common import (  # noqa: F401 - the package's API
    API_ERRORS,
    CHARTS,
    Pending,
    PivotError,
    PivotState,
    SubstitutionError,
    cli,
    load_documents,
    parse_documents,
    parse_version,
    registry_serves,
    substitute,
)
from ansible_collections.krops.platform.plugins.module_utils.pivot.export import (  # noqa: F401
    lb_port_from_docker,
    render_kubeconfig,
)
from ansible_collections.krops.platform.plugins.module_utils.pivot.steps import merge_steps  # noqa: F401

Phase = namedtuple("Phase", "name run title")

# The phase table: order is execution order; stop_after and the progress lines use the names.
PHASE_TABLE = (
    Phase("preconditions", _preconditions.run, "kind context, registry, management Cluster"),
    Phase("export", _export.run, "management kubeconfig and nodes"),
    Phase("prepare", _prepare.run, "charts, providers, credentials"),
    Phase("preflight", _preflight.run, "movability of every object"),
    Phase("move", _move.run, "clusterctl move"),
)
PHASES = tuple(p.name for p in PHASE_TABLE)


def run(config, options, check_mode=False):
    """Run the phases up to options['stop_after'] (default: move). Returns the result dict; raises PivotError."""
    pv = PivotState(config, options, check_mode)
    stop_after = options.get("stop_after") or "move"
    if stop_after not in PHASES:
        raise PivotError(None, "stop_after must be one of {}, got {!r}".format(", ".join(PHASES), stop_after))
    try:
        for phase in PHASE_TABLE:
            try:
                phase.run(pv)
            except PivotError as exc:
                if exc.phase is None:
                    exc.phase = phase.name
                merged = dict(pv.result)
                merged.update(exc.result or {})
                exc.result = merged
                raise
            except kube.KubeError as exc:
                raise PivotError(phase.name, str(exc), pv.result)
            except API_ERRORS as exc:
                raise PivotError(phase.name, f"Kubernetes API error: {kube.error_text(exc)}", pv.result)
            if pv.pending:  # a wait ran out of the step budget: nothing failed, the next step resumes
                pv.result["_krops_pending"] = True
                info = pv.pending.info
                pv.result["_krops_wait"] = dict(info, phase_number=PHASES.index(info["phase"]))
                return pv.result
            pv.result["phase_reached"] = phase.name
            if phase.name == stop_after:
                break
        pv.result["already_moved"] = pv.already_moved
        if pv.connect_kubeconfig and not check_mode:
            pv.result["target_kubeconfig"] = pv.connect_kubeconfig
        return pv.result
    finally:
        pv.cleanup()
