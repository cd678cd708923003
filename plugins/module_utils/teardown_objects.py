# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Teardown steps on named Kubernetes objects, each one module process for the whole step:

- ``quiesce_releases``: before the AWS sweep, suspend the ACK controllers' Flux HelmReleases (so helm-controller
  does not bring them back) and scale the Deployments Helm made for those releases to zero (so no controller
  recreates what the sweep deletes);
- ``delete_named``: the bootstrap secrets and the run tags, by exact name.

Each lists or reads everything it will change before its first write, so an API that cannot answer changes
nothing. ``quiesce_releases`` is two rows of the step engine (steps.py, kube_rows.py). Check mode sends every
write as a server-side dry run (what kubernetes.core.k8s does in check mode), so admission and RBAC still answer.
"""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import kube, kube_rows, steps
from ansible_collections.krops.platform.plugins.module_utils.teardown import probe_or_abort, write

HELM_RELEASE = ("helm.toolkit.fluxcd.io/v2", "HelmRelease")
DEPLOYMENT = ("apps/v1", "Deployment")
# Helm's mark on every object of a release (helm/helm pkg/action: the release-name annotation)
HELM_RELEASE_ANNOTATION = "meta.helm.sh/release-name"
# Crossplane's label on the Deployment of a Provider package, in its selector: the Provider's name
# (crossplane/crossplane v2.3.4 apis/pkg/v1/interfaces.go LabelProvider; internal/controller/pkg/runtime/migration.go
# reads it from spec.selector.matchLabels)
CROSSPLANE_PROVIDER_LABEL = "pkg.crossplane.io/provider"
# What delete_named deletes: option name -> (apiVersion, kind)
NAMED_KINDS = {"secrets": ("v1", "Secret"), "configmaps": ("v1", "ConfigMap")}


def _providers_deployment(obj, providers):
    """True when the Deployment runs one of the Crossplane Providers named in ``providers``."""
    selector = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return selector.get(CROSSPLANE_PROVIDER_LABEL) in providers


def _releases(ctx):
    found = probe_or_abort(ctx.client, *HELM_RELEASE, ctx.opts["namespace"], "the HelmReleases", ctx.target)
    wanted = set(ctx.opts["releases"])
    running = [o for o in found if o["metadata"]["name"] in wanted and not (o.get("spec") or {}).get("suspend")]
    return [kube_rows.row_item("helm-release", o, *HELM_RELEASE) for o in sorted(running, key=_name)]


def _deployments(ctx):
    found = probe_or_abort(ctx.client, *DEPLOYMENT, ctx.opts["namespace"], "the Deployments", ctx.target)
    wanted, providers = set(ctx.opts["releases"]), set(ctx.opts["providers"])
    running = [
        o
        for o in found
        if (
            (o["metadata"].get("annotations") or {}).get(HELM_RELEASE_ANNOTATION) in wanted
            or _providers_deployment(o, providers)
        )
        and (o.get("spec") or {}).get("replicas", 1) != 0
    ]
    return [kube_rows.row_item("deployment", o, *DEPLOYMENT) for o in sorted(running, key=_name)]


def _name(obj):
    return obj["metadata"]["name"]


# The HelmReleases first, so that helm-controller does not scale the Deployments back up, then their Deployments.
QUIESCE_ROWS = (
    steps.Row(
        "helm-release",
        _releases,
        kube_rows.patch_act(lambda item: kube.suspend_patch(True, by=kube.TEARDOWN_SUSPENDER)),
        plan="suspend HelmRelease {namespace}/{name}",
    ),
    steps.Row(
        "deployment",
        _deployments,
        kube_rows.patch_act(lambda item: {"spec": {"replicas": 0}}),
        plan="scale Deployment {namespace}/{name} to 0 replicas",
        after=("helm-release",),
    ),
)


def _quiesced(run, result):
    shown = kube_rows.module_keys(result)
    for key, row in (("suspended", "helm-release"), ("scaled", "deployment")):
        shown[key] = [e["name"] for e in result["results"] if e["row"] == row and e["outcome"] == kube_rows.PATCHED]
    return shown


def quiesce_releases(kubeconfig, context, namespace, releases, check_mode=False, connect_options=None, providers=()):
    """Suspend the HelmReleases named in ``releases`` and scale their Deployments to zero, in ``namespace``
    (QUIESCE_ROWS, on the step engine).

    A Deployment is a release's when Helm's release-name annotation names it; it is a Crossplane Provider's (named
    in ``providers``) when its selector carries Crossplane's provider label with that name. Nothing else is
    touched. A HelmRelease already suspended and a Deployment already at zero replicas are left as they are, so a
    second run changes nothing; once done, both are listed again, and one that is running again fails the step.
    Returns plan, suspended, scaled, target and changed.
    """
    ctx = kube_rows.Kube(kubeconfig, context, connect_options, dry_run=check_mode, namespace=namespace)
    ctx.opts.update(releases=list(releases), providers=list(providers))
    run = steps.Run(
        QUIESCE_ROWS,
        ctx,
        lambda: ctx,
        facts=lambda scan: {"target": ctx.target},
        label=kube_rows.label,
        wait=not check_mode,  # a dry run changes nothing to list again
    )
    return kube_rows.execute(run, _quiesced)


def delete_named(kubeconfig, context, namespace, check_mode=False, connect_options=None, **names):
    """Delete the objects named in ``names`` (``secrets=[...]``, ``configmaps=[...]``: NAMED_KINDS) in
    ``namespace``; an object already gone is reported as absent. Returns plan, deleted, absent, target, changed."""
    target = kube.describe_target(kubeconfig, context)
    client = kube.connect(kubeconfig, context, **(connect_options or {}))
    result = {"plan": [], "deleted": [], "absent": [], "target": target, "changed": False}
    present = []
    for option, (api_version, kind) in NAMED_KINDS.items():
        wanted = set(names.get(option) or ())
        if not wanted:
            continue
        listed = {o["metadata"]["name"] for o in probe_or_abort(client, api_version, kind, namespace, None, target)}
        for name in sorted(wanted):
            if name in listed:
                present.append((api_version, kind, name))
                result["plan"].append(f"delete {kind} {namespace}/{name}")
            else:
                result["absent"].append(f"{kind} {namespace}/{name}")
    for api_version, kind, name in present:
        res = kube.resource(client, api_version, kind)
        label = f"{kind} {namespace}/{name}"
        if write(
            lambda dry_run, res=res, name=name: res.delete(name=name, namespace=namespace, dry_run=dry_run),
            f"delete {label}",
            target,
            result,
            check_mode,
        ):
            result["deleted"].append(label)
            result["changed"] = True  # by the write, not the listing: one deleted meanwhile is absent, no change
        else:
            result["absent"].append(label)
    return result
