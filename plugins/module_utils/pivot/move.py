# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Phase 4, move: Kustomizations suspended, ``clusterctl move``, verification, Clusters unpaused on the
target, move fallbacks; rollback on failure."""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import capi
from ansible_collections.krops.platform.plugins.module_utils import kube
from ansible_collections.krops.platform.plugins.module_utils.pivot.common import (
    API_ERRORS,
    PivotError,
    apply_object,
    capi_objects,
    command_failed,
    find_binary,
    load_documents,
    mgmt_on_target,
    run_command,
)


def suspend_kustomizations(pv):
    state, objects, error = kube.probe(pv.source, *kube.KUSTOMIZATION)
    if state == kube.UNKNOWN:
        raise PivotError(
            "move", f"cannot list the Flux Kustomizations on the kind cluster: {error}; nothing was suspended"
        )
    active = [o for o in objects if not (o.get("spec") or {}).get("suspend")]
    # Suspended by an earlier run of the pivot that died before it resumed them (its annotation proves it):
    # they are this pivot's to resume on rollback, as if it had suspended them now.
    suspended = [
        {"namespace": o["metadata"]["namespace"], "name": o["metadata"]["name"]}
        for o in objects
        if kube.held_by_pivot(o)
    ]
    if suspended:
        pv.say("%d Kustomizations were still suspended by an earlier pivot run on the kind cluster" % len(suspended))
    fresh = 0
    for obj in active:
        item = {"namespace": obj["metadata"]["namespace"], "name": obj["metadata"]["name"]}
        if not pv.check_mode:
            try:
                kube.set_suspend(
                    pv.source, obj["metadata"]["namespace"], obj["metadata"]["name"], True, by=kube.PIVOT_SUSPENDER
                )
            except API_ERRORS as exc:
                pv.suspended = suspended
                raise PivotError(
                    "move",
                    "cannot suspend Kustomization {}/{} on the kind cluster: {}".format(
                        item["namespace"], item["name"], kube.error_text(exc)
                    ),
                )
        suspended.append(item)
        fresh += 1
    pv.suspended = suspended
    pv.result["suspended"] = suspended
    if fresh:
        pv.changed()
        pv.say("suspended %d Kustomizations on the kind cluster" % fresh)


def _set_paused(client, res, name, namespace, paused):
    kube.merge_patch(client, None, None, name, namespace, {"spec": {"paused": True if paused else None}}, res=res)


def rollback(pv, before, error):
    """Make the source authoritative again; never delete anything on the target."""
    notes = []
    after = None
    try:
        after = capi_objects(pv.source, pv.namespace, phase="move")
        res = capi.cluster_resource(pv.source)
    except PivotError as exc:
        notes.append(f"could not re-list the kind cluster ({exc})")
    left = [k for k in before if k not in after] if after is not None else list(before)
    after = after or {}
    for key, obj in after.items():
        if key[0] == "cluster.x-k8s.io" and key[1] == "Cluster" and (obj.get("spec") or {}).get("paused"):
            try:
                _set_paused(pv.source, res, key[3], key[2], False)
                notes.append(f"unpaused Cluster {key[3]} on the kind cluster")
            except API_ERRORS as exc:
                notes.append(f"could NOT unpause Cluster {key[3]} on the kind cluster: {kube.error_text(exc)}")
    suspended = pv.suspended
    if left and suspended:
        notes.append(
            "kept %d Kustomizations suspended on the kind cluster because %d objects already left it "
            "(resuming Flux there would re-create them)" % (len(suspended), len(left))
        )
    elif not left:
        for item in suspended:
            try:
                kube.set_suspend(pv.source, item["namespace"], item["name"], False)
            except API_ERRORS as exc:
                notes.append(
                    "could NOT resume Kustomization {}/{}: {}".format(
                        item["namespace"], item["name"], kube.error_text(exc)
                    )
                )
        if suspended:
            notes.append("resumed %d Kustomizations on the kind cluster" % len(suspended))
    target_now = {}
    if pv.target is not None:
        try:
            target_now = capi_objects(pv.target, pv.namespace, where="target")
        except PivotError:
            pass
    partial = [kube.identity(before[k]) for k in sorted(before) if k in target_now]
    moved = [kube.identity(before[k]) for k in sorted(left) if k in target_now]
    pv.result["moved"] = moved
    pv.result["partial"] = partial
    pv.result["rollback"] = notes
    message = (
        "%s. Rolled back: %s. Nothing was deleted on the management cluster (%d of %d objects are there, %d left the kind cluster); "
        "fix the cause and re-run the pivot to complete the move"
        % (error, "; ".join(notes) or "nothing to undo", len(partial), len(before), len(left))
    )
    return PivotError("move", message, pv.result)


def _clusterctl_argv(pv, dry_run):
    clusterctl = find_binary("clusterctl", pv.options.get("clusterctl_binary"))
    argv = [
        clusterctl,
        "move",
        "--kubeconfig",
        pv.source_kubeconfig(),
        "--kubeconfig-context",
        pv.source_context(),
        "--to-kubeconfig",
        pv.connect_kubeconfig,
        "--to-kubeconfig-context",
        pv.target_context,
        "-n",
        pv.namespace,
    ]
    return argv + (["--dry-run"] if dry_run else [])


def apply_fallbacks(pv):
    for fb in pv.env.move_fallbacks:
        plural, dummy, group = fb.resource.partition(".")
        entry = {"resource": fb.resource, "name": fb.name, "manifest": fb.manifest, "state": "present"}
        docs = load_documents(pv.path(fb.manifest), None, phase="move")
        if not any(d["metadata"]["name"] == fb.name and d["apiVersion"].startswith(group + "/") for d in docs):
            raise PivotError(
                "move",
                "move fallback {}: manifest {} does not declare {} {}".format(
                    fb["resource"], fb["manifest"], plural, fb["name"]
                ),
            )
        missing = [
            d
            for d in docs
            if kube.get(pv.target, d["apiVersion"], d["kind"], d["metadata"]["name"], d["metadata"].get("namespace"))
            is None
        ]
        if missing:
            entry["state"] = "applied"
            for doc in missing:
                try:
                    apply_object(pv.target, doc, pv.check_mode)
                except PivotError as exc:
                    raise PivotError("move", str(exc))
            pv.changed()
        pv.result["fallbacks"].append(entry)


def unpause_target(pv):
    res = capi.cluster_resource(pv.target)
    if res is None:
        return
    for obj in kube.list_objects(pv.target, capi.api_version_of(res), "Cluster", pv.namespace):
        if (obj.get("spec") or {}).get("paused"):
            pv.changed()
            if not pv.check_mode:
                _set_paused(pv.target, res, obj["metadata"]["name"], pv.namespace, False)
            pv.say("unpaused Cluster {} on the management cluster".format(obj["metadata"]["name"]))


def _excluded(pv):
    """Cluster-scoped CAPI objects on the source: `clusterctl move -n` does not cover them (fallbacks do)."""
    excluded = []
    try:
        for res in capi.capi_resources(pv.source, namespaced=False):
            for item in res.get().items:
                excluded.append(kube.identity(item.to_dict()))
    except API_ERRORS:
        pass
    return excluded


def run(pv):
    if pv.source is None:
        unpause_target(pv)
        return
    before = capi_objects(pv.source, pv.namespace) if pv.objects is None else pv.objects
    pv.result["excluded"] = _excluded(pv)
    if not before:
        on_target = (
            pv.target is not None
            and capi.cluster_resource(pv.target) is not None
            and kube.get(
                pv.target, capi.api_version_of(capi.cluster_resource(pv.target)), "Cluster", pv.mgmt, pv.namespace
            )
            is not None
        )
        if on_target or mgmt_on_target(pv):
            pv.already_moved = True
            pv.say(f"the kind cluster holds no CAPI object in {pv.namespace}: already moved")
            unpause_target(pv)
            apply_fallbacks(pv)
            return
        raise PivotError(
            "move",
            f"namespace {pv.namespace} on the kind cluster holds no CAPI object and the management cluster lists no Cluster {pv.mgmt}",
        )
    if pv.check_mode:
        argv = _clusterctl_argv(pv, dry_run=True)
        rc, out, err = run_command(argv, timeout=600)
        if rc != 0:
            raise command_failed("move", argv, rc, out, err, "clusterctl move --dry-run")
        pv.result["dry_run_output"] = out
        pv.result["moved"] = [kube.identity(before[k]) for k in sorted(before)]
        suspend_kustomizations(pv)
        pv.changed()
        apply_fallbacks(pv)
        return
    argv = _clusterctl_argv(pv, dry_run=False)
    try:
        suspend_kustomizations(pv)
    except PivotError as exc:
        raise rollback(pv, before, str(exc))
    pv.say(">>> clusterctl move -n %s (%d objects)" % (pv.namespace, len(before)))
    rc, out, err = run_command(argv, timeout=pv.timeout("move"))
    if rc != 0:
        raise rollback(pv, before, str(command_failed("move", argv, rc, out, err, "clusterctl move")))
    pv.changed()
    try:
        after = capi_objects(pv.source, pv.namespace)
        target_now = capi_objects(pv.target, pv.namespace, where="target")
    except PivotError as exc:
        raise rollback(pv, before, f"clusterctl move exited 0 but the result cannot be verified: {exc}")
    missing = [k for k in before if k not in after and k not in target_now]
    if after or missing:
        parts = []
        if after:
            parts.append(
                "the kind cluster still holds %d CAPI objects in %s (%s)"
                % (len(after), pv.namespace, ", ".join(kube.key_label(k) for k in sorted(after)[:10]))
            )
        if missing:
            parts.append(
                "%d objects left the kind cluster but are not on the management cluster (%s)"
                % (len(missing), ", ".join(kube.key_label(k) for k in sorted(missing)[:10]))
            )
        raise rollback(pv, before, "clusterctl move exited 0 but verification failed: " + "; ".join(parts))
    pv.result["moved"] = [kube.identity(before[k]) for k in sorted(before)]
    try:
        unpause_target(pv)
        apply_fallbacks(pv)
    except API_ERRORS as exc:
        raise PivotError(
            "move",
            f"the move completed but finishing on the management cluster failed: {kube.error_text(exc)}; re-run the pivot",
            pv.result,
        )
