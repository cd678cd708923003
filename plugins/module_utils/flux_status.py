# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""What Flux reports: the FluxInstance and Kustomization readiness, the table, the wait and its messages.

The handoff (flux.py) writes; this module reads. The Kustomizations are reported in dependsOn
order (root first), a Ready=False reason from FAILURE_REASONS is shown as failing, and only
Stalled=True ends the wait before its deadline: Flux retries everything else.
"""

from __future__ import annotations

import time

from ansible_collections.krops.platform.plugins.module_utils.errors import FluxError  # the error the wait raises
from ansible_collections.krops.platform.plugins.module_utils import kube

FLUX_API = "fluxcd.controlplane.io/v1"
FLUX_KIND = "FluxInstance"
FLUX_NAME = "flux"
KS_API = "kustomize.toolkit.fluxcd.io/v1"
KS_KIND = "Kustomization"

# Ready=False reasons that mean "failing" (shown as such) rather than "still progressing".
# Flux retries them, so only Stalled=True ends the wait early.
FAILURE_REASONS = frozenset(
    (
        "BuildFailed",
        "ReconciliationFailed",
        "HealthCheckFailed",
        "ArtifactFailed",
        "PruneFailed",
        "DecryptionFailed",
        "VarsSubstitutionFailed",
        "InvalidPath",
        "InstallFailed",
        "UpgradeFailed",
    )
)


def depends_on(obj, namespace):
    """Names of the Kustomizations obj depends on in namespace (other namespaces ignored)."""
    names = []
    for ref in ((obj or {}).get("spec") or {}).get("dependsOn") or []:
        if isinstance(ref, dict) and ref.get("name") and (ref.get("namespace") or namespace) == namespace:
            names.append(ref["name"])
    return names


def order_kustomizations(objects, namespace, root=None):
    """Names in dependsOn order (Kahn's algorithm; root first, ties by name, cycles last).

    objects: {name: object}. Names that are depended on but do not exist are included.
    """
    deps = {name: [d for d in depends_on(obj, namespace) if d != name] for name, obj in objects.items()}
    for name in [d for ds in list(deps.values()) for d in ds]:
        deps.setdefault(name, [])
    if root in deps:
        for name in deps:
            if name != root and root not in deps[name]:
                deps[name] = deps[name] + [root]
    order, done = [], set()
    remaining = set(deps)
    while remaining:
        ready = sorted(n for n in remaining if all(d in done for d in deps[n]))
        if not ready:  # a cycle: keep going by name so every object is listed
            ready = [sorted(remaining)[0]]
        for name in ready:
            order.append(name)
            done.add(name)
            remaining.discard(name)
    return order


def kustomization_row(name, obj, namespace):
    if obj is None:
        return {
            "name": name,
            "ready": False,
            "reason": "NotFound",
            "message": f"Kustomization {namespace}/{name} does not exist yet",
            "depends_on": [],
            "stalled": False,
        }
    ready, reason, message = kube.readiness(obj)
    stalled = kube.is_stalled(obj)
    if stalled and not ready:
        cond = kube.condition(obj, "Stalled") or {}
        reason = cond.get("reason") or reason
        message = cond.get("message") or message
    held = kube.held_by_pivot(obj)
    if held:
        message = ("(suspended by the pivot) " + message).strip()
    elif (obj.get("spec") or {}).get("suspend"):
        message = ("(suspended) " + message).strip()
    return {
        "name": name,
        "ready": bool(ready),
        "reason": reason,
        "message": message,
        "depends_on": depends_on(obj, namespace),
        "stalled": bool(stalled and not ready),
        "held": held,
    }


def kustomization_rows(objects, namespace, root):
    """Rows {name, ready, reason, message, depends_on, stalled} in dependsOn order."""
    by_name = dict(objects)
    return [
        kustomization_row(name, by_name.get(name), namespace) for name in order_kustomizations(by_name, namespace, root)
    ]


def is_failing(row):
    return bool(row.get("stalled")) or (not row["ready"] and row.get("reason") in FAILURE_REASONS)


def format_table(rows, width=100):
    """A plain-text table: NAME READY REASON MESSAGE (messages cut to width)."""
    if not rows:
        return "  (no Kustomizations yet)"
    name_w = max(len("KUSTOMIZATION"), max(len(r["name"]) for r in rows))
    reason_w = max(len("REASON"), max(len(r.get("reason") or "") for r in rows))
    lines = ["  %-*s  %-7s  %-*s  %s" % (name_w, "KUSTOMIZATION", "READY", reason_w, "REASON", "MESSAGE")]
    for row in rows:
        state = "True" if row["ready"] else ("Stalled" if row.get("stalled") else "False")
        message = " ".join((row.get("message") or "").split())
        if len(message) > width:
            message = message[: width - 3] + "..."
        lines.append(
            "  %-*s  %-7s  %-*s  %s" % (name_w, row["name"], state, reason_w, row.get("reason") or "", message)
        )
    return "\n".join(lines)


def summary(result):
    """One progress line plus the table, for the controller display."""
    fi = result.get("fluxinstance") or {}
    rows = result.get("kustomizations") or []
    ready = sum(1 for r in rows if r["ready"])
    head = "FluxInstance {} {}".format(
        fi.get("name", FLUX_NAME),
        "Ready"
        if fi.get("ready")
        else "not Ready ({}: {})".format(fi.get("reason") or "Pending", fi.get("message") or "no status yet"),
    )
    if fi.get("ready"):
        head += "; Kustomizations Ready: %d of %d" % (ready, len(rows))
        pending = [r["name"] for r in rows if not r["ready"]]
        if pending:
            head += "; pending: {}".format(", ".join(pending))
        return head + "\n" + format_table(rows)
    return head


def failure_details(rows):
    """'name: reason: message' for every failing row."""
    return [
        "{}: {}: {}".format(r["name"], r.get("reason") or "", r.get("message") or "") for r in rows if is_failing(r)
    ]


# --- wait ---------------------------------------------------------------------------


def fluxinstance_state(obj):
    ready, reason, message = kube.readiness(obj)
    return {
        "name": FLUX_NAME,
        "ready": bool(ready),
        "reason": reason,
        "message": message,
        "stalled": bool(obj is not None and kube.is_stalled(obj) and not ready),
    }


def wait_ready(client, namespace, timeout, result, on_progress=None, progress_every=30.0, clock=time.monotonic):
    """Wait for the FluxInstance then every Kustomization of namespace; fill result as it goes.

    Returns True when everything is Ready; raises kube.WaitTimeout when timeout passes, and
    FluxError at once when an object reports Stalled=True.
    """
    deadline = clock() + timeout
    root = namespace  # FluxInstance sync.name defaults to the namespace name

    def on_fi(objects):
        state = fluxinstance_state(objects.get((namespace, FLUX_NAME)))
        result["fluxinstance"] = {k: v for k, v in state.items() if k != "stalled"}
        if state["stalled"]:
            raise FluxError(
                "FluxInstance {}/{} is stalled: {}: {}".format(namespace, FLUX_NAME, state["reason"], state["message"])
            )
        return state["ready"], result

    def on_ks(objects):
        rows = kustomization_rows({name: obj for (_ns, name), obj in objects.items()}, namespace, root)
        if root not in [r["name"] for r in rows]:
            rows.insert(0, kustomization_row(root, None, namespace))
        result["kustomizations"] = rows
        stalled = [r for r in rows if r["stalled"]]
        if stalled:
            raise FluxError(
                "Kustomization {} is stalled (Flux will not retry it): {}: {}".format(
                    ", ".join("{}/{}".format(namespace, r["name"]) for r in stalled),
                    stalled[0]["reason"],
                    stalled[0]["message"],
                )
            )
        # A Kustomization the pivot suspended (a pivot run died during the move) is the pivot's: nothing
        # here resumes it, so it is not waited for; the pivot's re-run resumes it or completes the move.
        return all(r["ready"] or r.get("held") for r in rows), result

    for api_version, kind, on_change in ((FLUX_API, FLUX_KIND, on_fi), (KS_API, KS_KIND, on_ks)):
        kube.watch_until(
            client,
            api_version,
            kind,
            namespace,
            on_change,
            max(deadline - clock(), 0.001),
            on_progress=on_progress,
            progress_every=progress_every,
            clock=clock,
        )
    return True


def public_rows(rows):
    return [{k: r[k] for k in ("name", "ready", "reason", "message", "depends_on")} for r in rows or []]


# --- what the handoff reports ---------------------------------------------------------


def observe(client, namespace, result):
    """Fill the current readiness without waiting (wait=false)."""
    try:
        fi = kube.get(client, FLUX_API, FLUX_KIND, FLUX_NAME, namespace)
        result["fluxinstance"] = {k: v for k, v in fluxinstance_state(fi).items() if k != "stalled"}
        objects = {o["metadata"]["name"]: o for o in kube.list_objects(client, KS_API, KS_KIND, namespace)}
    except (kube.KubeError, kube.ApiException):
        return
    rows = kustomization_rows(objects, namespace, namespace) if objects else []
    result["kustomizations"] = public_rows(rows)
    result["ready"] = bool(result["fluxinstance"]["ready"] and rows and all(r["ready"] for r in rows))


def advice(namespace):
    return (
        f"Inspect with `kubectl -n {namespace} get fluxinstance,kustomizations` and "
        f"`kubectl -n {namespace} describe kustomization <name>`; fix the tree or the cluster and run the play again "
        "(it reuses what exists)."
    )


def timeout_message(result, total, target, namespace):
    fi = result.get("fluxinstance") or {}
    rows = result.get("kustomizations") or []
    if not fi.get("ready"):
        head = "timed out after {}s waiting for FluxInstance {}/{} to be Ready on {}: {}: {}".format(
            total,
            namespace,
            FLUX_NAME,
            target,
            fi.get("reason") or "Pending",
            fi.get("message") or "no status",
        )
    else:
        ready = sum(1 for r in rows if r["ready"])
        head = "timed out after %ss waiting for the Flux Kustomizations on %s: %d of %d Ready" % (
            total,
            target,
            ready,
            len(rows),
        )
    return failed_wait_message(head, result, namespace, failing=failure_details(rows))


def stalled_message(error, result, target, namespace):
    """The message of a wait that an object reporting Stalled=True ended (``error``: wait_ready's FluxError)."""
    return failed_wait_message(str(error), result, namespace, before_advice=f"on {target}. ")


def failed_wait_message(head, result, namespace, failing=(), before_advice=""):
    """What a failed wait tells the user, whether it timed out or stalled: ``head``, the state of Flux, the failing
    Kustomizations and what to do next."""
    parts = [head, summary(result)]
    if failing:
        parts.append("Failing:\n" + "\n".join("  " + line for line in failing))
    parts.append(before_advice + advice(namespace))
    return "\n".join(parts)
