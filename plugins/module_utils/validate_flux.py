# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""validate's ``flux-graph`` rules: every reference of a Flux object resolves, and dependsOn has no cycle.

A reference resolves to an object of the environment's rendered tree or to one the lifecycle creates
(validate._lifecycle: the sync source, sops-age, krops-run, each Cluster's kubeconfig Secret). Each rule
is registered in validate.REGISTRY; a rule is ``check(env)`` and reports through ``env.add``.
"""

from __future__ import annotations

import os

from ansible_collections.krops.platform.plugins.module_utils import validate_common as common

RULE = "flux-graph"
HELM_RELEASE = ("helm.toolkit.fluxcd.io", "HelmRelease")


def _known(env):
    """(namespace, name) of every Kustomization of the environment, the lifecycle's included."""
    return {(k.namespace, k.name) for k in common.flux_kustomizations(env)} | {
        (ns, name) for kind, ns, name in env.lifecycle if kind == "Kustomization"
    }


def _depends_on(ks):
    """(namespace, name) of each dependsOn entry of a Kustomization (its own namespace by default)."""
    return [
        (dep.get("namespace") or ks.namespace, dep.get("name"))
        for dep in ks.spec.get("dependsOn") or []
        if isinstance(dep, dict)
    ]


def _helm_releases(env):
    return [i for i in env.items if (i.group, i.kind) == HELM_RELEASE]


def check_depends_on(env):
    """Every dependsOn of a Flux Kustomization names a Kustomization of the environment.

    Upstream fact: kustomize-controller waits for each dependsOn Kustomization to be ready and never
    applies one whose dependency does not exist (Flux Kustomization API, spec.dependsOn).
    """
    known = _known(env)
    for ks in common.flux_kustomizations(env):
        for target in _depends_on(ks):
            if target not in known:
                env.add(
                    ks.file,
                    common.object_id(ks.obj),
                    RULE,
                    f"dependsOn {target[0]}/{target[1]}: no Kustomization of that name in environment {env.name}",
                )


def _cycles(graph):
    """Each elementary cycle once (rotated to start at its smallest node)."""
    found, state = [], {}

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt) :]
                low = cycle.index(min(cycle))
                cycle = cycle[low:] + cycle[:low]
                if cycle not in found:
                    found.append(cycle)
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return found


def check_cycles(env):
    """The dependsOn graph of the environment's Kustomizations has no cycle.

    Upstream fact: a Kustomization is applied only after all its dependsOn are ready, so Kustomizations
    on a cycle wait for each other for ever.
    """
    kss = common.flux_kustomizations(env)
    known = _known(env)
    graph = {(ks.namespace, ks.name): [t for t in _depends_on(ks) if t in known] for ks in kss}
    for cycle in _cycles(graph):
        first = next(k for k in kss if (k.namespace, k.name) == cycle[0])
        env.add(
            first.file,
            common.object_id(first.obj),
            RULE,
            "dependsOn cycle: {}".format(" -> ".join("{}/{}".format(*node) for node in cycle + [cycle[0]])),
        )


def _source_ref(env, owner, ref, field):
    if not isinstance(ref, dict) or not ref.get("name"):
        return  # the schema rule reports a missing required field
    kind, name, ns = ref.get("kind"), ref.get("name"), ref.get("namespace") or owner.namespace
    if not env.defined(kind, ns, name):
        env.add(
            owner.file,
            common.object_id(owner.obj),
            RULE,
            f"{field} {kind} {ns}/{name}: not defined in the tree nor created by the lifecycle",
        )


def check_source_refs(env):
    """Kustomization sourceRef, HelmRelease chart.spec.sourceRef and chartRef name a source that exists.

    Upstream fact: kustomize-controller and helm-controller resolve these references in the owner's
    namespace unless the reference names one, and report the object not ready while the source is missing.
    """
    for ks in common.flux_kustomizations(env):
        _source_ref(env, ks, ks.spec.get("sourceRef"), "sourceRef")
    for item in _helm_releases(env):
        chart = (item.spec.get("chart") or {}).get("spec") or {}
        if chart:
            _source_ref(env, item, chart.get("sourceRef"), "chart.spec.sourceRef")
        if item.spec.get("chartRef"):
            _source_ref(env, item, item.spec.get("chartRef"), "chartRef")


def check_paths(env):
    """The spec.path of every Flux Kustomization exists in the repository.

    Upstream fact: kustomize-controller builds spec.path of the source artifact (relative to its root)
    and fails the Kustomization when the path is not there.
    """
    for ks in common.flux_kustomizations(env):
        path = ks.spec.get("path")
        if path and not os.path.isdir(os.path.join(env.root, common.norm_path(path))):
            env.add(ks.file, common.object_id(ks.obj), RULE, f"path {path} does not exist in the repository")


def _health_check(env, ks, check):
    kind, name, ns = check.get("kind"), check.get("name"), check.get("namespace") or ""
    group = common.group_of(check.get("apiVersion", "")) if check.get("apiVersion") else None
    if kind == "CustomResourceDefinition":
        plural, _dot, crd_group = (name or "").partition(".")
        if env.defined(kind, None, name) or any(
            i.group == crd_group and common.plural(i.kind) == plural for i in env.items
        ):
            return
        env.add(
            ks.file,
            common.object_id(ks.obj),
            RULE,
            f"healthCheck CustomResourceDefinition {name}: no object of that "
            "type in the tree (a health check on a CRD nothing uses is likely a typo)",
        )
        return
    if env.defined(kind, ns, name, group) or (group is None and env.defined(kind, ns, name)):
        return
    env.add(
        ks.file,
        common.object_id(ks.obj),
        RULE,
        "healthCheck {} {}{}: not defined in the tree nor created by the lifecycle".format(
            kind, f"{ns}/" if ns else "", name
        ),
    )


def check_health_checks(env):
    """Every healthChecks entry of a Flux Kustomization names an object (or a used CRD) of the tree.

    Upstream fact: kustomize-controller waits for each health-checked object to be ready and times the
    Kustomization out when one never appears; a CRD is named <plural>.<group> (its metadata.name).
    """
    for ks in common.flux_kustomizations(env):
        for check in ks.spec.get("healthChecks") or []:
            if isinstance(check, dict):
                _health_check(env, ks, check)


def _ref(env, owner, kind, name, field):
    if name and not env.defined(kind, owner.namespace, name):
        env.add(
            owner.file,
            common.object_id(owner.obj),
            RULE,
            f"{field} {kind} {owner.namespace}/{name}: not defined in the tree nor created by the lifecycle",
        )


def _kubeconfig_secret(item):
    return ((item.spec.get("kubeConfig") or {}).get("secretRef") or {}).get("name")


def check_secret_refs(env):
    """decryption.secretRef and kubeConfig.secretRef (Kustomization, HelmRelease) name a Secret that exists.

    Upstream fact: these Secrets are read from the owner's own namespace (Flux Kustomization and
    HelmRelease APIs); without them decryption or the remote apply fails.
    """
    for ks in common.flux_kustomizations(env):
        decryption = ks.spec.get("decryption") or {}
        _ref(env, ks, "Secret", (decryption.get("secretRef") or {}).get("name"), "decryption.secretRef")
        _ref(env, ks, "Secret", _kubeconfig_secret(ks), "kubeConfig.secretRef")
    for item in _helm_releases(env):
        _ref(env, item, "Secret", _kubeconfig_secret(item), "kubeConfig.secretRef")


def check_substitute_from(env):
    """Every postBuild.substituteFrom that is not optional names a ConfigMap or Secret that exists.

    Upstream fact: kustomize-controller fails the build when a substituteFrom object is missing, unless
    the entry says optional: true (Flux Kustomization API, spec.postBuild.substituteFrom).
    """
    for ks in common.flux_kustomizations(env):
        for ref in (ks.spec.get("postBuild") or {}).get("substituteFrom") or []:
            if isinstance(ref, dict) and not ref.get("optional"):
                _ref(env, ks, ref.get("kind") or "ConfigMap", ref.get("name"), "postBuild.substituteFrom")
