# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Teardown steps on named Kubernetes objects, each one module process for the whole step:

- ``quiesce_releases``: before the AWS sweep, suspend the ACK controllers' Flux HelmReleases (so helm-controller
  does not bring them back) and scale the Deployments Helm made for those releases to zero (so no controller
  recreates what the sweep deletes);
- ``delete_named``: the bootstrap secrets and the run tags, by exact name.

Each lists or reads everything it will change before its first write, so an API that cannot answer changes
nothing. Check mode sends every write as a server-side dry run (what kubernetes.core.k8s does in check mode), so
admission and RBAC still answer.
"""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import kube
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


def quiesce_releases(kubeconfig, context, namespace, releases, check_mode=False, connect_options=None, providers=()):
    """Suspend the HelmReleases named in ``releases`` and scale their Deployments to zero, in ``namespace``.

    A Deployment is a release's when Helm's release-name annotation names it; it is a Crossplane Provider's (named
    in ``providers``) when its selector carries Crossplane's provider label with that name. Nothing else is
    touched. A
    HelmRelease already suspended and a Deployment already at zero replicas are left as they are, so a second
    run changes nothing. Returns plan, suspended, scaled, target and changed.
    """
    target = kube.describe_target(kubeconfig, context)
    client = kube.connect(kubeconfig, context, **(connect_options or {}))
    wanted = set(releases)
    found = probe_or_abort(client, *HELM_RELEASE, namespace, "the HelmReleases", target)
    to_suspend = sorted(
        o["metadata"]["name"]
        for o in found
        if o["metadata"]["name"] in wanted and not (o.get("spec") or {}).get("suspend")
    )
    deployments = probe_or_abort(client, *DEPLOYMENT, namespace, "the Deployments", target)
    to_scale = sorted(
        o["metadata"]["name"]
        for o in deployments
        if (
            (o["metadata"].get("annotations") or {}).get(HELM_RELEASE_ANNOTATION) in wanted
            or _providers_deployment(o, set(providers))
        )
        and (o.get("spec") or {}).get("replicas", 1) != 0
    )
    result = {
        "plan": [f"suspend HelmRelease {namespace}/{name}" for name in to_suspend]
        + [f"scale Deployment {namespace}/{name} to 0 replicas" for name in to_scale],
        "suspended": [],
        "scaled": [],
        "target": target,
        "changed": bool(to_suspend or to_scale),
    }
    for (api_version, kind), names, body, key in (
        (HELM_RELEASE, to_suspend, kube.suspend_patch(True, by=kube.TEARDOWN_SUSPENDER), "suspended"),
        (DEPLOYMENT, to_scale, {"spec": {"replicas": 0}}, "scaled"),
    ):
        res = kube.resource(client, api_version, kind) if names else None
        for name in names:
            if write(
                lambda dry_run, name=name, res=res, body=body, api=(api_version, kind): kube.merge_patch(
                    client, *api, name, namespace, body, res=res, dry_run=dry_run
                ),
                f"patch {kind} {namespace}/{name}",
                target,
                result,
                check_mode,
            ):
                result[key].append(name)
    return result


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
