# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""validate's rules that do what the API server does with an object on create.

The JSON schema (unknown fields included), the types of postBuild-substituted fields, the CRDs' CEL rules,
the providers' admission webhooks and the providers' contracts. Each rule is registered in
validate.REGISTRY; a rule is ``check(env)`` and reports through ``env.add``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ansible_collections.krops.platform.plugins.module_utils import admission
from ansible_collections.krops.platform.plugins.module_utils import capi
from ansible_collections.krops.platform.plugins.module_utils import cel as krops_cel
from ansible_collections.krops.platform.plugins.module_utils import contracts
from ansible_collections.krops.platform.plugins.module_utils import validate_common as common
from ansible_collections.krops.platform.plugins.module_utils import validate_schema
from ansible_collections.krops.platform.plugins.module_utils import validate_substitution


def _schema_problems(item, store, allow):
    """The schema messages of one item (the API server's structural validation)."""
    obj = dict(item.obj)
    obj.pop("sops", None)  # SOPS metadata is removed by kustomize-controller before apply
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    group, _version = validate_schema.split_api_version(api_version)
    if not kind or not api_version:
        return ["object has no apiVersion or kind"]
    try:
        errors = store.errors(obj)
    except validate_schema.SchemaMissing as exc:
        if kind in allow or f"{group}/{kind}" in allow or f"{api_version}/{kind}" in allow:
            return []
        return [f"no schema for {kind} {api_version} (looked in {exc}); add {kind} to allow_kinds if it has none"]
    except validate_schema.SchemaUnreachable as exc:
        return [
            f"schema location unreachable: {exc}; pass a local schema folder as schema_location "
            "(or KROPS_SCHEMA_LOCATION) to validate offline"
        ]
    return [f"{path}: {message}" for path, message in errors]


def check_schemas(env):
    """Every rendered object validates against its JSON schema, unknown fields included.

    Enforces the kinds' published schemas (built-in kinds from kubernetes-validate, custom resources from
    the CRDs vendored in schemas/crds, docs/upstream-facts.md "API versions"). Unknown fields are errors
    (krops' rule: at apply time a misspelled field is dropped or refused, never used); a kind without a
    schema is a finding unless allow-listed. SOPS metadata is dropped first, as kustomize-controller does.
    """
    items = [item for item in env.items if not item.fallback]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda item: _schema_problems(item, env.store, env.allow), items))
    for item, problems in zip(items, results):
        for message in problems:
            env.add(item.file, common.label(item), "schema", message)


def check_substitution(env):
    """Every field a Flux postBuild variable fills keeps its schema type under realistic site values.

    Upstream fact: kustomize-controller substitutes on the YAML text and re-reads it as YAML 1.1, so an
    unquoted ``"${VAR}"`` becomes a number or a boolean (validate_substitution.py, docs/upstream-facts.md
    "Flux postBuild substitution").
    """
    validate_substitution.check(env.items, env.store, common.SAMPLE_RUN_TAGS, env.add, common.object_id)


def check_cel(env):
    """Every custom resource passes the x-kubernetes-validations CEL rules of its schema.

    Upstream fact: the API server evaluates a CRD's x-kubernetes-validations on create (transition rules
    need an old object: render_diff runs those). Rules the CEL library cannot evaluate go to
    ``cel_unevaluable``, never passed.
    """
    for item in env.items:
        if item.fallback:
            continue
        label = (
            common.object_id(item.obj)
            if not item.virtual
            else f"{common.object_id(item.obj)} (rendered by ResourceSet)"
        )
        for result in krops_cel.check(item.obj, env.store):
            if result.outcome == krops_cel.UNEVALUABLE:
                env.cel.append({"file": item.file, "object": label, "environment": env.name, "message": result.text()})
            else:
                env.add(item.file, label, "cel", result.text())


def check_admission(env):
    """Every object passes its provider's admission webhooks as the API server runs them on create.

    Upstream fact: mutating (defaulting) webhooks run before validating ones, and an object the schema
    refuses never reaches a validating webhook (module_utils/admission.py, each rule with its source).
    Runs after the schema and cel rules: their findings mark the objects the API server refuses first.
    """
    objects = [i.obj for i in env.items if not i.fallback]
    gates = admission.gates_from(objects)
    refused = {(f.file, f.object) for f in env.findings if f.rule in ("schema", "cel")}
    for item in env.items:
        if item.fallback or (item.file, common.object_id(item.obj)) in refused:
            continue
        denial = admission.review(item.obj, gates)
        if denial is not None:
            common.flag(env, item, "admission", denial.message)


def check_contracts(env):
    """Each operator provider's release implements the core's contract and is on a supported base.

    Upstream fact: each provider's metadata.yaml maps its releases to a Cluster API contract, and
    Cluster API supports only its newest minor lines (module_utils/contracts.py). A stale or listed
    bootstrap.toml ``accepted-end-of-life`` entry is reported; warnings go to ``warnings``.
    """
    items = {}
    for item in env.items:
        if item.group == "operator.cluster.x-k8s.io" and item.kind in capi.PROVIDER_KINDS and not item.fallback:
            items.setdefault((item.kind, item.name), item)
    if not items:
        return
    providers = [(kind, name, (item.spec or {}).get("version")) for (kind, name), item in items.items()]
    accepted = list(env.settings.accepted_end_of_life) if env.settings else []
    problems, warnings = contracts.check(providers, accepted)
    for kind, name, message in problems:
        item = items.get((kind, name))
        if item is None:  # a stale accepted-end-of-life entry
            env.add("bootstrap.toml", f"environments.{env.name}.accepted-end-of-life", "contracts", message)
        else:
            common.flag(env, item, "contracts", message)
    for kind, name, message in warnings:
        item = items[(kind, name)]
        env.warnings.append(
            {"file": item.file, "object": common.object_id(item.obj), "environment": env.name, "message": message}
        )
