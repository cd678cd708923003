# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The rows of the Kubernetes-side teardown: one ``steps.Row`` per kind, run by the one engine (steps.py).

``delete_clusters`` (capi_cluster_delete): Flux stops, then the Clusters go.

- ``flux-operator``: disable the reconciliation of the Flux Operator's FluxInstance and ResourceSet objects
  (annotation fluxcd.controlplane.io/reconcile: disabled), first, so the operator does not undo the next row;
- ``kustomization``: suspend the Kustomizations whose name or namespace/name matches (kube.suspend_patch, marked
  as the teardown's);
- ``unpause``: unpause the Clusters to delete that an interrupted pivot move left paused (issue 30): CAPI never
  reconciles a paused Cluster, its deletion included. The pivot's mark on the Kustomizations proves the pause is
  krops'; a pause without it is the user's and stays;
- ``cluster``: exactly the named Clusters, never one in ``keep``, after the three rows above.

``delete_providers`` (capi_provider_delete): a row per cluster-api-operator provider kind, in
capi.PROVIDER_DELETE_ORDER (add-on first, core last), each after the one before, so that no provider outlives one
it needs. ``wait_timeout`` is the whole step's: each kind's wait gets what is left of it.

The engine owns the order, the check-mode plan, the waits, the stops (a row whose dependency left anything does not
run) and the verification pass (every row discovers again once the waits ended: what it still finds fails the
step). A deletion is a ``steps.WatchedRow``: one event-driven watch per kind (kube.watch_until) follows it, not a
poll. What stays here is Kubernetes: the listings, every one made before the first write (an answer the API cannot
give aborts with nothing changed: teardown.probe_or_abort), the writes (teardown.write), and the modules' results,
whose keys and messages are the ones these modules always returned.
"""

from __future__ import annotations

import fnmatch
import time

from ansible_collections.krops.platform.plugins.module_utils import capi, errors, kube, ownership, steps
from ansible_collections.krops.platform.plugins.module_utils.errors import TeardownError
from ansible_collections.krops.platform.plugins.module_utils.teardown import (
    CLUSTER_GROUP,
    FLUX_OPERATOR_KINDS,
    FLUX_OPERATOR_RECONCILE,
    KUSTOMIZATION,
    PROVIDER_API,
    PROVIDER_KINDS,
    ApiException,
    object_name,
    probe_or_abort,
    served_cluster,
    urllib3,
    write,
)

ENGINE_KEYS = ("results", "leftovers", "stopped_at", "resume")  # the engine's bookkeeping, not these modules' keys


class Kube:
    """What the rows act through (the run's ``ctx``): the client and target, the options, and what the waits saw:
    ``remaining`` {label: state} of what a watch left when its time ran out, ``progress`` its snapshots."""

    def __init__(self, kubeconfig, context, connect_options, on_progress=None, deadline=None, dry_run=False, **opts):
        self.target = kube.describe_target(kubeconfig, context)
        self.client = kube.connect(kubeconfig, context, **(connect_options or {}))
        self.on_progress, self.deadline, self.dry_run, self.opts = on_progress, deadline, dry_run, opts
        self.remaining, self.progress = {}, []

    def snapshot(self, state):
        self.progress.append(state)
        if self.on_progress is not None:
            self.on_progress(state)


def object_state(obj):
    """How an object being deleted stands: its phase, its Deleting (else Ready) condition's message, its finalizers."""
    if obj is None:
        return "gone"
    phase = (obj.get("status") or {}).get("phase") or "Unknown"
    deleting = kube.condition(obj, "Deleting") or kube.condition(obj, "Ready")
    detail = ": {}".format(deleting["message"]) if deleting and deleting.get("message") else ""
    finalizers = (obj.get("metadata") or {}).get("finalizers") or []
    if finalizers:
        detail += " (finalizers {})".format(", ".join(finalizers))
    return f"{phase}{detail}"


def row_item(row, obj, api_version, kind, shown=None):
    """A row's item: kind (``type``: a listing's items need not say it), namespace, name, API version, the row, and
    ``shown``, its name in the module's result."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    item = {"type": kind, "namespace": namespace, "name": meta["name"], "api": api_version, "row": row}
    item["shown"] = shown or "{} {}/{}".format(kind, namespace, meta["name"])
    return item


# --- the writes: a patch is final, a deletion is followed by a watch ----------------------------------------------


PATCHED = "patched"  # the outcome of a patch (a deletion's is ownership.DELETED)


def patch_act(body):
    """A row's act that merge-patches the item with ``body(item)``: PATCHED, or ABSENT when it is gone already."""

    def act(run, item):
        ctx, api = run.ctx, (item["api"], item["type"])
        sent = write(
            lambda dry_run: kube.merge_patch(
                ctx.client, *api, item["name"], item["namespace"], body(item), dry_run=dry_run
            ),
            "patch {} {}/{}".format(item["type"], item["namespace"], item["name"]),
            ctx.target,
            None,
            ctx.dry_run,
        )
        return (PATCHED if sent else ownership.ABSENT), None

    return act


def delete_act(run, item):
    """Delete the item; the handle its row's watch follows, None when it was gone already or in a dry run."""
    ctx = run.ctx
    res = kube.resource(ctx.client, item["api"], item["type"])
    sent = write(
        lambda dry_run: res.delete(name=item["name"], namespace=item["namespace"] or None, dry_run=dry_run),
        "delete {} {}/{}".format(item["type"], item["namespace"], item["name"]),
        ctx.target,
        None,
        ctx.dry_run,
    )
    if not sent:
        return ownership.ABSENT, None
    handle = [item["api"], item["type"], item["namespace"], item["name"], item["shown"]]
    return ownership.DELETED, None if ctx.dry_run else handle


def watch_gone(every_namespace, watched):
    """A WatchedRow's watch: one kube.watch_until over the row's kind (in the handles' namespace, or in every
    namespace) until none of the handles' objects is left. ``watched`` names the watch when it is lost."""

    def watch(run, handles, seconds):
        ctx = run.ctx
        api_version, kind, namespace = handles[0][:3]  # one row, one kind (and one namespace unless every_namespace)
        labels = {(h[2], h[3]): h[4] for h in handles}
        if ctx.deadline is not None:  # the step's wait_timeout is shared by its rows
            seconds = min(seconds, ctx.deadline - run.clock())

        def evaluate(objects):
            left = {labels[key]: object_state(obj) for key, obj in objects.items() if key in labels}
            return not left, left

        where = None if every_namespace else namespace
        try:
            left = {}
            kube.watch_until(ctx.client, api_version, kind, where, evaluate, max(seconds, 0.001), ctx.snapshot)
        except kube.WaitTimeout as exc:
            left = exc.state if exc.state is not None else {h[4]: None for h in handles}
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            what = watched.format(kind=kind, namespace=namespace)
            raise TeardownError(f"lost the watch on {what} on {ctx.target}: {kube.error_text(exc)}")
        ctx.remaining.update(left)
        return [(steps.PENDING, left[h[4]]) if h[4] in left else (steps.DONE, None) for h in handles]

    return watch


# --- what the modules return -------------------------------------------------------------------------------------


def label(item):
    """An item's identity in the run (the unpause row and the cluster row hold the same Cluster)."""
    return "{} {}/{} ({})".format(item["type"], item["namespace"], item["name"], item["row"])


def module_keys(result):
    return {k: v for k, v in result.items() if k not in ENGINE_KEYS}


def execute(run, shape, timed_out=None):
    """Run the rows: the module's result (``shape(run, engine result)``). Whatever is left fails the step, with
    the first write the API refused, else ``timed_out(what a watch left, with its state)``, else what the
    verification pass still found; the error carries the partial result, in the module's keys too."""
    try:
        result = run.execute()
    except errors.KropsError as exc:  # the same error, its partial result in the module's keys
        exc.result = shape(run, exc.result) if exc.result else exc.result
        raise
    shaped = shape(run, result)
    if not result["leftovers"]:
        return shaped
    ctx = run.ctx
    refused = [e for e in result["results"] if e["outcome"] == ownership.FAILED and e["shown"] not in ctx.remaining]
    if refused:
        raise TeardownError(refused[0]["error"], shaped)
    if ctx.remaining:
        shaped["remaining"] = sorted(ctx.remaining)
        raise TeardownError(timed_out("; ".join(f"{k} ({v})" for k, v in sorted(ctx.remaining.items()))), shaped)
    raise TeardownError(
        "the teardown left {} on {}: listed again once it was done, they are there still (or again: a controller "
        "recreated or resumed them); run the teardown again".format(", ".join(result["leftovers"]), ctx.target),
        shaped,
    )


# --- capi_cluster_delete: Flux stops, then the named Clusters go ------------------------------------------------


class ClusterScan:
    """One discovery on the controller host: the served Cluster API version, the Clusters of the namespace, the
    ones to delete (``chosen``) and, listed once when a row needs them, the Kustomizations."""

    def __init__(self, ctx):
        self.ctx = ctx
        res = served_cluster(ctx.client)
        self.api = res.group_version if res is not None else f"{CLUSTER_GROUP}/v1beta2"
        namespace, names, keep = ctx.opts["namespace"], ctx.opts["names"], set(ctx.opts["keep"])
        listed = probe_or_abort(ctx.client, self.api, "Cluster", namespace, "Clusters", ctx.target) if res else []
        self.clusters = {c["metadata"]["name"]: c for c in listed}
        self.chosen = [n for n in names if n in self.clusters and n not in keep]  # exactly the named (ownership.md)
        self.missing = [n for n in names if n not in self.clusters]
        self._kustomizations = None
        refused = [n for n in names if n in keep]
        if refused:
            raise TeardownError(
                "refusing to delete Cluster {} in {} on {}: it is the management cluster that runs "
                "the providers (remove it from the cloud side instead)".format(
                    ", ".join(refused), namespace, ctx.target
                )
            )

    def kustomizations(self):
        if self._kustomizations is None:
            self._kustomizations = probe_or_abort(self.ctx.client, *KUSTOMIZATION, target=self.ctx.target)
        return self._kustomizations

    def matching(self):
        """The Kustomizations the patterns name (by name or namespace/name): none without ``suspend``."""
        if not self.ctx.opts["suspend"]:
            return []
        patterns = self.ctx.opts["patterns"]
        return [
            k
            for k in self.kustomizations()
            if any(fnmatch.fnmatchcase(n, p) for p in patterns for n in (k["metadata"]["name"], object_name(k)))
        ]


def _flux_operator(scan):
    if not scan.ctx.opts["suspend"]:
        return []
    found = []
    for api_version, kind in FLUX_OPERATOR_KINDS:
        for obj in probe_or_abort(scan.ctx.client, api_version, kind, target=scan.ctx.target):
            if ((obj.get("metadata") or {}).get("annotations") or {}).get(FLUX_OPERATOR_RECONCILE) != "disabled":
                found.append(row_item("flux-operator", obj, api_version, kind, object_name(obj)))
    return found


def _kustomizations(scan):
    matching = [k for k in scan.matching() if not (k.get("spec") or {}).get("suspend")]
    return [row_item("kustomization", k, *KUSTOMIZATION, object_name(k)) for k in matching]


def _paused_by_pivot(scan):
    paused = [n for n in scan.chosen if (scan.clusters[n].get("spec") or {}).get("paused")]
    if paused and any(kube.held_by_pivot(k) for k in scan.kustomizations()):
        return [row_item("unpause", scan.clusters[n], scan.api, "Cluster", n) for n in paused]
    return []


def _clusters(scan):
    return [row_item("cluster", scan.clusters[n], scan.api, "Cluster", n) for n in scan.chosen]


CLUSTER_ROWS = (
    steps.Row(
        "flux-operator",
        _flux_operator,
        patch_act(lambda item: {"metadata": {"annotations": {FLUX_OPERATOR_RECONCILE: "disabled"}}}),
        plan="disable reconciliation of {type} {shown}",
    ),
    steps.Row(
        "kustomization",
        _kustomizations,
        patch_act(lambda item: kube.suspend_patch(True, by=kube.TEARDOWN_SUSPENDER)),
        plan="suspend Kustomization {shown}",
    ),
    steps.Row(
        "unpause",
        _paused_by_pivot,
        patch_act(lambda item: {"spec": {"paused": None}}),
        plan="unpause Cluster {namespace}/{name} (paused by an interrupted pivot move)",
    ),
    steps.WatchedRow(
        "cluster",
        _clusters,
        delete_act,
        watch_gone(False, "Clusters in {namespace}"),
        plan="delete Cluster {namespace}/{name} and wait until it is gone",
        after=("flux-operator", "kustomization", "unpause"),
    ),
)


def _cluster_facts(scan):
    already = [object_name(k) for k in scan.matching() if (k.get("spec") or {}).get("suspend")]
    facts = {"target": scan.ctx.target, "namespace": scan.ctx.opts["namespace"], "api_version": scan.api}
    return dict(facts, already_suspended=already, already_absent=scan.missing)


def _planned(run, row):
    """The items of ``row`` the run discovered (none before the first discovery)."""
    return run.plan.get(row) or ()


def _cluster_result(run, result):
    shown = module_keys(result)
    shown.update(
        suspended=[i["shown"] for i in _planned(run, "kustomization")],
        flux_operator_disabled=[i["shown"] for i in _planned(run, "flux-operator")],
        remaining=[],
        progress=run.ctx.progress,
    )
    if run.check_mode or "cluster" in run.acted:  # the Clusters whose deletion was asked for (or would be)
        shown["deleted"] = [i["name"] for i in _planned(run, "cluster")]
    return shown


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
    """Suspend Flux, delete the named Cluster objects through their provider and wait until they are gone
    (CLUSTER_ROWS). Check mode lists and plans only. Returns plan, target, namespace, api_version, suspended,
    already_suspended, flux_operator_disabled, deleted, already_absent, remaining, progress and changed; a timeout
    raises TeardownError naming the Clusters still present and why."""
    ctx = Kube(kubeconfig, context, connect_options, on_progress, namespace=namespace, names=list(names))
    ctx.opts.update(keep=list(keep), suspend=suspend, patterns=list(kustomizations))
    run = steps.Run(
        CLUSTER_ROWS,
        ctx,
        lambda: ClusterScan(ctx),
        facts=_cluster_facts,
        label=label,
        check_mode=check_mode,
        wait=wait,
        timeout=wait_timeout,
    )
    return execute(
        run,
        _cluster_result,
        lambda left: (
            f"timed out after {int(wait_timeout)}s waiting for Cluster deletion in {namespace} on {ctx.target}; "
            f"still present: {left}. Nothing after this step ran (the controller host is left running); check the "
            "provider's logs and run the teardown again"
        ),
    )


# --- capi_provider_delete: add-on first, core last, each kind gone before the next --------------------------------


def _provider_rows(api_version, kinds):
    """One WatchedRow per kind of ``kinds``, in capi.PROVIDER_DELETE_ORDER, each after the one before it."""
    rows, before = [], ()
    for kind in (k for k, _label in capi.PROVIDER_DELETE_ORDER if k in set(kinds)):

        def discover(scan, kind=kind):
            objs = probe_or_abort(scan.client, api_version, kind, None, f"{kind} objects", scan.target)
            return sorted((row_item(kind, o, api_version, kind) for o in objs), key=lambda item: item["shown"])

        watch = watch_gone(True, "{kind} objects")
        plan = "delete {shown} and wait until it is gone"
        rows.append(steps.WatchedRow(kind, discover, delete_act, watch, plan=plan, after=before))
        before = (kind,)
    return rows


def _provider_result(run, result):
    shown = module_keys(result)
    items = [i for kind in run.plan for i in run.plan[kind]]
    shown.update(deleted=[{"kind": i["type"], "namespace": i["namespace"], "name": i["name"]} for i in items])
    shown.update(remaining=[], progress=run.ctx.progress)
    return shown


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
    """Delete every provider object of ``kinds``, add-on first and core last, each kind gone before the next
    (_provider_rows). Every kind is listed before anything is deleted; a listing the API cannot answer (any error
    but an unserved kind) aborts with nothing deleted. Check mode sends each delete as a server-side dry run (what
    kubernetes.core.k8s does), so admission and RBAC still answer, and waits for nothing. ``wait_timeout`` is the
    budget of the whole step. Returns plan, target, api_version, deleted ({kind, namespace, name}), remaining,
    progress and changed; a timeout raises TeardownError naming the providers still present."""
    clock = clock or time.monotonic
    deadline = clock() + wait_timeout
    ctx = Kube(kubeconfig, context, connect_options, on_progress, deadline, dry_run=check_mode)
    run = steps.Run(
        _provider_rows(api_version, kinds),
        ctx,
        lambda: ctx,
        facts=lambda scan: {"target": ctx.target, "api_version": api_version},
        label=label,
        wait=wait and not check_mode,  # a dry run leaves nothing to wait for
        timeout=wait_timeout,
        clock=clock,
    )
    return execute(
        run,
        _provider_result,
        lambda left: (
            f"timed out waiting for the providers to be deleted on {ctx.target}; still present: {left}. "
            "The providers after them were not deleted and nothing after this step ran; check the "
            "cluster-api-operator's logs and run the teardown again"
        ),
    )
