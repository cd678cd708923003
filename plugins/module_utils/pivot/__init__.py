# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The pivot: move the management plane from the kind cluster into the self-managed cluster.

One phase table, PHASE_TABLE, in the order the phases run, which the steps engine runs
(steps.Sequence: order, stop_after, the budgeted waits, partial results); each phase is a
steps.Phase whose ``run(state)`` is in a module of this package, over one declared state object
(common.PivotState: the two clients, bootstrap.toml, the environment's profile, the options,
and every field a phase hands to a later one). Adding a phase is one file and one row
(docs/extending.md).

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

Long waits can be cut into bounded steps (the engine's resume protocol, steps.STEP_STATE:
``_wait_budget`` and ``_resume``, set by the action plugin so that the controller shows progress):
a wait whose budget runs out before its own timeout ends the run with a pending result
(``_krops_pending``, and ``_krops_resume``: the time spent on each wait and the wait that was cut)
instead of an error, and the next step re-runs the pivot from the start (every phase is a
``redo`` step) with the time already spent on each wait counted. Only the waits are cut, never a
command (helm, clusterctl move). An error a phase raises is not translated into PivotError: the
engine names the phase in it (``step``) and adds the result so far; a Kubernetes API error no
phase expected becomes a KubeError at the phase's boundary.

Importable without Ansible; external binaries run through module_utils.cli (secrets only
through the environment or stdin).
"""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import kube, steps
from ansible_collections.krops.platform.plugins.module_utils.pivot import export as _export
from ansible_collections.krops.platform.plugins.module_utils.pivot import move as _move
from ansible_collections.krops.platform.plugins.module_utils.pivot import preconditions as _preconditions
from ansible_collections.krops.platform.plugins.module_utils.pivot import preflight as _preflight
from ansible_collections.krops.platform.plugins.module_utils.pivot import prepare as _prepare
from ansible_collections.krops.platform.plugins.module_utils.pivot.common import (  # noqa: F401 - the package's API
    API_ERRORS,
    CHARTS,
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
from ansible_collections.krops.platform.plugins.module_utils.pivot.merge import merge_steps  # noqa: F401
from ansible_collections.krops.platform.plugins.module_utils.steps import Pending  # noqa: F401 - a cut wait: a value
from ansible_collections.krops.platform.plugins.module_utils.steps import Phase

# The phase table, run by the steps engine (steps.Sequence): order is execution order; stop_after, the progress
# lines and the action plugin's phase numbers use the names. A phase is a steps.Phase: name, run(state), title.
PHASE_TABLE = (
    Phase("preconditions", _preconditions.run, "kind context, registry, management Cluster"),
    Phase("export", _export.run, "management kubeconfig and nodes"),
    Phase("prepare", _prepare.run, "charts, providers, credentials"),
    Phase("preflight", _preflight.run, "movability of every object"),
    Phase("move", _move.run, "clusterctl move"),
)
PHASES = tuple(p.name for p in PHASE_TABLE)


def _api_error(exc):
    """A Kubernetes API error no phase expected: the kubernetes area's error (the engine names the phase)."""
    return kube.KubeError(f"Kubernetes API error: {kube.error_text(exc)}")


def run(config, options, check_mode=False):
    """Run the phases up to options['stop_after'] (default: move). Returns the result dict (pending when a wait ran
    out of the step budget); raises PivotError, or the errors.KropsError a phase raised, naming the phase (``step``)
    and carrying the result so far."""
    pv = PivotState(config, options, check_mode)
    stop_after = options.get("stop_after") or "move"
    if stop_after not in PHASES:
        raise PivotError(None, "stop_after must be one of {}, got {!r}".format(", ".join(PHASES), stop_after))
    phases = steps.Sequence(
        PHASE_TABLE, pv, pv.result, pv.waits, stop_after, reached="phase_reached", translate=(API_ERRORS, _api_error)
    )
    try:
        result = phases.execute()
        if result.get(steps.PENDING_KEY):
            return result
        result["already_moved"] = pv.already_moved
        if pv.connect_kubeconfig and not check_mode:
            result["target_kubeconfig"] = pv.connect_kubeconfig
        return result
    finally:
        pv.cleanup()
