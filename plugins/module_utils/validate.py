# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""validate: render, schema-check and cross-check the GitOps tree (mgmt/<env>, workload/<overlay>).

One finding per problem, each naming file, object, rule (its category, one of RULES) and message;
docs/architecture.md "validate" lists what each category checks. Categories: render (kustomize builds),
schema, substitution, cel, admission, contracts (the API server's and the providers' checks), flux-graph
(references and dependsOn), bootstrap (bootstrap.toml agrees with the tree), secrets (SOPS only), tags
(ownership and run tags, GCP labels), yamllint, airgap (local-host's image lists). Contract warnings are
in ``warnings``, CEL rules that cannot be evaluated in ``cel_unevaluable``: never findings.

The engine is here (run: index the files, render, expand, then the rules; Finding, _Env and _Item); the
rules are a registry, REGISTRY, an ordered table of ValidateRule rows (id, finding category, function,
phase, condition), each function in the file of its area: validate_api.py (schema, substitution, cel,
admission, contracts), validate_flux.py, validate_bootstrap.py, validate_secrets.py, validate_tags.py,
validate_yamllint.py and validate_airgap.py; validate_common.py holds what they share.

Importable without Ansible; ``python -m ...validate --help`` runs it standalone.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils import render
from ansible_collections.krops.platform.plugins.module_utils import validate_ack
from ansible_collections.krops.platform.plugins.module_utils import validate_airgap
from ansible_collections.krops.platform.plugins.module_utils import validate_api
from ansible_collections.krops.platform.plugins.module_utils import validate_bootstrap
from ansible_collections.krops.platform.plugins.module_utils import validate_common
from ansible_collections.krops.platform.plugins.module_utils import validate_flux
from ansible_collections.krops.platform.plugins.module_utils import validate_schema
from ansible_collections.krops.platform.plugins.module_utils import validate_secrets
from ansible_collections.krops.platform.plugins.module_utils import validate_tags
from ansible_collections.krops.platform.plugins.module_utils import validate_yamllint

yaml = validate_common.yaml
_YAML_ERRORS = validate_common.YAML_ERRORS
HAS_YAMLLINT = validate_yamllint.HAS_YAMLLINT

# The finding categories (a finding's ``rule``), in the order findings of one object are listed.
RULES = (
    "render",
    "schema",
    "flux-graph",
    "bootstrap",
    "secrets",
    "tags",
    "yamllint",
    "cel",
    "admission",
    "contracts",
    "airgap",
    "substitution",
)
FLUX_KS = validate_common.FLUX_KS
SAMPLE_RUN_TAGS = validate_common.SAMPLE_RUN_TAGS
ValidateError = validate_common.ValidateError
object_id = validate_common.object_id
_group = validate_common.group_of
_plural = validate_common.plural
_norm_path = validate_common.norm_path
_RS_INPUT = re.compile(r"<<-?\s*inputs\.([A-Za-z_][A-Za-z0-9_]*)\s*-?>>")


@dataclasses.dataclass(eq=False, slots=True)
class Finding:
    file: str
    object: str
    rule: str
    message: str
    environment: str

    def as_dict(self):
        return dataclasses.asdict(self)

    def line(self):
        return f"{self.file}: {self.object}: [{self.rule}] {self.message}"

    def key(self):
        return (self.environment, self.file, self.object, self.rule, self.message)


class _Item:
    """A rendered (or ResourceSet-expanded) object and where it comes from."""

    __slots__ = ("directory", "fallback", "file", "obj", "origin", "unsubstituted", "virtual")

    def __init__(self, obj, directory, file, virtual=False, fallback=False, origin="rendered by ResourceSet"):
        self.obj = obj
        self.directory = directory
        self.file = file
        self.virtual = virtual  # not rendered by kustomize (ResourceSet expansion or fallback)
        self.fallback = fallback  # raw manifest of a directory that failed to render
        self.origin = origin  # how a virtual object came about (for finding labels)
        self.unsubstituted = None  # (object before postBuild substitution, its variables)

    @property
    def kind(self):
        return self.obj.get("kind", "")

    @property
    def group(self):
        return _group(self.obj.get("apiVersion", ""))

    @property
    def name(self):
        return (self.obj.get("metadata") or {}).get("name", "")

    @property
    def namespace(self):
        return (self.obj.get("metadata") or {}).get("namespace", "") or ""

    @property
    def spec(self):
        spec = self.obj.get("spec")
        return spec if isinstance(spec, dict) else {}


class _Env:
    """Everything validate learns about one environment."""

    def __init__(self, name, root):
        self.name = name
        self.root = root
        self.tops = []  # mgmt/<env>, workload/<overlay> (relative)
        self.directories = []  # relative dirs with a kustomization
        self.items = []
        self.findings = []
        self.file_index = {}  # (kind, name, ns) and (kind, name) -> relative file
        self.raw_docs = []  # (relative file, doc)
        self.lifecycle = set()  # (kind, namespace, name)
        self.settings = None  # the environment's bootstrap.toml table (a config_types.Environment), or None
        self.files = 0
        self.cel = None  # CEL rules not evaluated (a list when the cel rule runs)
        self.warnings = []  # {file, object, environment, message}: reported, never findings
        self.yaml_files = []  # absolute paths of the YAML files (the file rules read them)
        self.texts, self.over_bounds = {}, set()  # path -> text within the YAML bounds; paths over one
        self.finish = []  # what a rule left running (yamllint's worker processes): called after the object rules
        self.memo = {}  # what several rules derive once (validate_bootstrap: the manifests)
        # The run's inputs the rules read (None for the files outside every environment):
        self.cfg = None  # config.Config of bootstrap.toml
        self.store = None  # validate_schema.SchemaStore
        self.allow = set()  # kinds allowed without schema
        self.renderer = None  # the kustomize command
        self.lint_conf = None  # yamllint configuration (None: yamllint is not installed)

    def add(self, file, obj, rule, message):
        self.findings.append(Finding(file, obj, rule, message, self.name))

    def rel(self, path):
        return os.path.relpath(path, self.root)

    def locate(self, kind, name, namespace, directory):
        return (
            self.file_index.get((kind, name, namespace))
            or self.file_index.get((kind, name))
            or self.rel(render.kustomization_file(os.path.join(self.root, directory)))
        )

    def defined(self, kind, namespace, name, group=None):
        for item in self.items:
            if item.kind == kind and item.name == name and (namespace is None or item.namespace == (namespace or "")):
                if group is None or item.group == group:
                    return True
        return (kind, namespace or "", name) in self.lifecycle


# --- the rules ---------------------------------------------------------------------------


@dataclasses.dataclass(eq=False, slots=True)
class ValidateRule:
    """One rule of the registry: ``check(env)`` reports findings of ``category`` through ``env.add``.

    ``id`` names the rule (<area>.<what>); ``category`` is the finding's ``rule`` field (one of RULES);
    ``phase`` is "files" (reads the files as committed: runs while kustomize renders, and on the files of
    no environment) or "objects" (reads the rendered objects); ``when(env)``, if given, says whether the
    rule applies to the environment. ``doc`` is the function's docstring: the fact the rule enforces.
    """

    id: str
    category: str
    check: object
    phase: str = "objects"
    when: object = None

    def __post_init__(self):
        if self.category not in RULES:
            raise ValueError(f"rule {self.id}: category {self.category!r} is not one of RULES")

    @property
    def doc(self):
        return (self.check.__doc__ or "").strip()

    def applies(self, env):
        return self.when is None or bool(self.when(env))


def _table(env):
    """The environment has an [environments.<env>] table in bootstrap.toml."""
    return env.settings is not None


def _no_table(env):
    return env.settings is None


def _cel_on(env):
    return env.cel is not None


_B, _F = validate_bootstrap, validate_flux
# The rules in the order they run: admission reads the schema and cel findings, airgap the render ones.
REGISTRY = (
    ValidateRule("secrets.sops-file", "secrets", validate_secrets.check_sops_files, phase="files"),
    ValidateRule("secrets.committed-plaintext", "secrets", validate_secrets.check_committed_plaintext, phase="files"),
    ValidateRule("yamllint.file", "yamllint", validate_yamllint.check, phase="files"),
    ValidateRule("schema.object", "schema", validate_api.check_schemas),
    ValidateRule("substitution.field-type", "substitution", validate_api.check_substitution),
    ValidateRule("cel.rule", "cel", validate_api.check_cel, when=_cel_on),
    ValidateRule("admission.webhook", "admission", validate_api.check_admission),
    ValidateRule("contracts.provider", "contracts", validate_api.check_contracts),
    ValidateRule("contracts.ack-carm", "contracts", validate_ack.check_carm),
    ValidateRule("flux-graph.depends-on", "flux-graph", _F.check_depends_on),
    ValidateRule("flux-graph.cycle", "flux-graph", _F.check_cycles),
    ValidateRule("flux-graph.source-ref", "flux-graph", _F.check_source_refs),
    ValidateRule("flux-graph.path", "flux-graph", _F.check_paths),
    ValidateRule("flux-graph.health-check", "flux-graph", _F.check_health_checks),
    ValidateRule("flux-graph.secret-ref", "flux-graph", _F.check_secret_refs),
    ValidateRule("flux-graph.substitute-from", "flux-graph", _F.check_substitute_from),
    ValidateRule("bootstrap.environment", "bootstrap", _B.check_environment, when=_no_table),
    ValidateRule("bootstrap.paths", "bootstrap", _B.check_paths, when=_table),
    ValidateRule("bootstrap.chart-pin", "bootstrap", _B.check_chart_pins, when=_table),
    ValidateRule("bootstrap.flux-version", "bootstrap", _B.check_flux_version, when=_table),
    ValidateRule("bootstrap.flux-sync-url", "bootstrap", _B.check_flux_sync_url, when=_table),
    ValidateRule("bootstrap.kind-node-version", "bootstrap", _B.check_kind_node_version, when=_table),
    ValidateRule("bootstrap.manifest-files", "bootstrap", _B.check_manifest_files, when=_table),
    ValidateRule("bootstrap.provider-manifest-kind", "bootstrap", _B.check_provider_manifest_kinds, when=_table),
    ValidateRule("bootstrap.provider-manifest-in-tree", "bootstrap", _B.check_provider_manifests_in_tree, when=_table),
    ValidateRule("bootstrap.infra-provider", "bootstrap", _B.check_infra_provider, when=_table),
    ValidateRule("bootstrap.pivot-manifest", "bootstrap", _B.check_pivot_manifests, when=_table),
    ValidateRule("bootstrap.pivot-manifest-vars", "bootstrap", _B.check_pivot_manifest_vars, when=_table),
    ValidateRule("bootstrap.pivot-sops-secret", "bootstrap", _B.check_pivot_sops_secrets, when=_table),
    ValidateRule("bootstrap.move-fallback", "bootstrap", _B.check_move_fallbacks, when=_table),
    ValidateRule("bootstrap.mgmt-cluster", "bootstrap", _B.check_mgmt_cluster, when=_table),
    ValidateRule("bootstrap.capi-workloads", "bootstrap", _B.check_capi_workloads, when=_table),
    ValidateRule("bootstrap.mgmt-container-prefix", "bootstrap", _B.check_mgmt_container_prefix, when=_table),
    ValidateRule("bootstrap.aws-workload-cluster", "bootstrap", _B.check_aws_workload_clusters, when=_table),
    ValidateRule("bootstrap.aws-workload-eks", "bootstrap", _B.check_aws_workload_eks, when=_table),
    ValidateRule("bootstrap.aws-workload-rds", "bootstrap", _B.check_aws_workload_rds, when=_table),
    ValidateRule("bootstrap.mgmt-region", "bootstrap", _B.check_mgmt_region, when=_table),
    ValidateRule("bootstrap.aws-workload-region", "bootstrap", _B.check_aws_workload_regions, when=_table),
    ValidateRule("bootstrap.networks", "bootstrap", _B.check_networks, when=_table),
    ValidateRule("bootstrap.gcp-iam", "bootstrap", _B.check_gcp_iam, when=_table),
    ValidateRule("bootstrap.resource-groups", "bootstrap", _B.check_resource_groups, when=_table),
    ValidateRule("bootstrap.ack-accounts", "bootstrap", validate_ack.check_accounts, when=_table),
    ValidateRule("secrets.rendered-plaintext", "secrets", validate_secrets.check_rendered_plaintext),
    ValidateRule("tags.ownership", "tags", validate_tags.check_ownership_tag),
    ValidateRule("tags.run-tags", "tags", validate_tags.check_run_tags),
    ValidateRule("tags.gcp-label-key", "tags", validate_tags.check_gcp_label_keys),
    ValidateRule("tags.gcp-label-value", "tags", validate_tags.check_gcp_label_values),
    ValidateRule("airgap.images", "airgap", validate_airgap.check, when=validate_airgap.applies),
)


def rules(phase=None):
    """The registered rules (of one phase), in the order they run."""
    return [rule for rule in REGISTRY if phase is None or rule.phase == phase]


def _run_rules(env, phase, last=False):
    """The rules of a phase; ``last``: then collect what they left running (env.finish: yamllint's workers)."""
    for rule in rules(phase):
        if rule.applies(env):
            rule.check(env)
    for finish in env.finish if last else ():
        finish()


# --- entry point -------------------------------------------------------------------------


def environments_present(root):
    mgmt = os.path.join(root, "mgmt")
    if not os.path.isdir(mgmt):
        return []
    return sorted(d for d in os.listdir(mgmt) if os.path.isdir(os.path.join(mgmt, d)) and not d.startswith("."))


def run(
    path=None,
    environments=None,
    schema_location=None,
    allow_kinds=None,
    config_file=None,
    renderer=None,
    jobs=None,
    environ=None,
    cel=True,
    collect=None,
    deadline=None,
    memory=None,
):
    """Validate the tree at ``path``. Returns a dict: findings, summary, objects, directories, seconds.

    ``cel``: evaluate the CEL rules of the schemas. ``collect``: called with each environment's
    state after its checks (render_diff reads the rendered objects from it). ``deadline`` (s, default
    300) and ``memory`` (bytes per kustomize run, default 2 GiB) bound the run (render.bounded).
    """
    try:
        with render.bounded("validate", deadline, memory):
            return _run(
                path, environments, schema_location, allow_kinds, config_file, renderer, jobs, environ, cel, collect
            )
    except render.DeadlineExceeded as exc:
        raise ValidateError(str(exc)) from None


def _run(path, environments, schema_location, allow_kinds, config_file, renderer, jobs, environ, cel, collect):
    environ = os.environ if environ is None else environ
    if yaml is None:
        raise ValidateError("the PyYAML Python library is required")
    started = time.monotonic()
    root = os.path.abspath(os.path.expanduser(path or os.getcwd()))
    if not os.path.isdir(os.path.join(root, "mgmt")):
        raise ValidateError(f"{root} has no mgmt/ folder: point path at the root of the krops repository")
    try:
        cfg = krops_config.load(path=config_file or os.path.join(root, krops_config.DEFAULT_FILE), environ={})
    except krops_config.ConfigKeyError as exc:
        raise ValidateError(str(exc))
    selected = _select(root, environments)
    location = schema_location or environ.get("KROPS_SCHEMA_LOCATION") or validate_schema.DEFAULT_SCHEMA_LOCATION
    try:
        store = validate_schema.SchemaStore(location, base_dir=root)
    except validate_schema.SchemaError as exc:
        raise ValidateError(str(exc))
    try:
        renderer = renderer or render.find_kustomize(environ=environ)
    except render.RenderError as exc:
        raise ValidateError(exc.reason)
    allow = set(allow_kinds or [])
    lint_conf = validate_yamllint.load_config(root)

    findings, summary, total_objects, total_dirs, covered, unevaluable, warnings = [], {}, 0, 0, set(), [], []
    for name in selected:
        env = _Env(name, root)
        env.cel = [] if cel else None
        env.cfg, env.store, env.allow, env.renderer, env.lint_conf = cfg, store, allow, renderer, lint_conf
        env_started = time.monotonic()
        _check_environment(env, cfg, jobs)
        if collect is not None:
            collect(env)
        unevaluable.extend(env.cel or [])
        warnings.extend(env.warnings)
        env_findings, summary[name] = _summarise(env, time.monotonic() - env_started)
        findings.extend(env_findings)
        total_objects += summary[name]["objects"]
        total_dirs += len(env.directories)
        covered.update(env.tops)
    if not environments:
        findings.extend(_check_other_files(root, covered, lint_conf))
    return {
        "findings": [f.as_dict() for f in findings],
        "summary": summary,
        "objects": total_objects,
        "directories": total_dirs,
        "environments": selected,
        "schema_location": location,
        "cel_unevaluable": unevaluable,
        "warnings": warnings,
        "seconds": round(time.monotonic() - started, 3),
    }


def _select(root, environments):
    """The environments to check: those asked for (each must have its mgmt/<env> folder), else all."""
    present = environments_present(root)
    if not environments:
        return present
    missing = [e for e in environments if e not in present]
    if missing:
        raise ValidateError(
            "environment {} has no folder mgmt/{} (environments in the tree: {})".format(
                missing[0], missing[0], ", ".join(present) or "none"
            )
        )
    return list(environments)


def _summarise(env, seconds):
    """(the environment's findings, each once and sorted, its summary)."""
    unique = {}
    for finding in env.findings:
        unique.setdefault(finding.key(), finding)
    env_findings = sorted(unique.values(), key=lambda f: (f.file, f.object, RULES.index(f.rule), f.message))
    return env_findings, {
        "directories": len(env.directories),
        "objects": sum(1 for item in env.items if not item.virtual),
        "files": env.files,
        "findings": len(env_findings),
        "by_rule": {rule: sum(1 for f in env_findings if f.rule == rule) for rule in RULES},
        "cel_unevaluable": len(env.cel or []),
        "warnings": len(env.warnings),
        "seconds": round(seconds, 3),
    }


def format_text(result):
    lines = ["{}: {}: [{}] {}".format(f["file"], f["object"], f["rule"], f["message"]) for f in result["findings"]]
    for name, summary in result["summary"].items():
        lines.append(
            "%s: %d directories, %d objects, %d findings%s"
            % (
                name,
                summary["directories"],
                summary["objects"],
                summary["findings"],
                ""
                if not summary["findings"]
                else " ({})".format(
                    ", ".join("%s %d" % (rule, count) for rule, count in summary["by_rule"].items() if count)
                ),
            )
        )
    lines.extend(
        "{}: {}: [cel] NOT EVALUATED {}".format(u["file"], u["object"], u["message"])
        for u in result.get("cel_unevaluable") or []
    )
    lines.extend(
        "{}: {}: [contracts] WARNING {}".format(w["file"], w["object"], w["message"])
        for w in result.get("warnings") or []
    )
    return lines


# --- one environment ---------------------------------------------------------------------


def _check_environment(env, cfg, jobs):
    root = env.root
    env.settings = cfg.environments.get(env.name)
    env.tops = [f"mgmt/{env.name}"]
    workload = (env.settings.workload_path if env.settings else "") or f"workload/{env.name}"
    if os.path.isdir(os.path.join(root, workload)):
        env.tops.append(_norm_path(workload))

    yaml_files = []
    for top in env.tops:
        env.directories.extend(env.rel(d) for d in render.find_kustomization_dirs(os.path.join(root, top)))
        yaml_files.extend(_yaml_files(os.path.join(root, top)))
    env.files = len(yaml_files)
    env.yaml_files = yaml_files
    _index_files(env, yaml_files)

    # kustomize runs in subprocesses: the file rules (yamllint, secrets) run while the tree renders.
    with ThreadPoolExecutor(max_workers=1) as pool:
        rendering = pool.submit(
            render.render_directories, [os.path.join(root, d) for d in env.directories], env.renderer, jobs
        )
        _run_rules(env, "files")
        built = rendering.result()
    seen = set()
    for directory in env.directories:
        result = built[os.path.join(root, directory)]
        if isinstance(result, render.RenderError):
            env.add(
                env.rel(render.kustomization_file(os.path.join(root, directory))),
                "-",
                "render",
                f"kustomize build {directory} failed: {result.reason}",
            )
            # Keep the directory's own manifests for the cross-checks (not schema-checked), so one
            # broken kustomization does not turn into a cascade of "not defined" findings.
            prefix = directory.rstrip("/") + "/"
            for rel, doc in env.raw_docs:
                if (
                    rel.startswith(prefix)
                    and "/" not in rel[len(prefix) :]
                    and doc.get("kind")
                    and doc.get("apiVersion")
                    and not doc.get("apiVersion", "").startswith("kustomize.config.k8s.io/")
                ):
                    env.items.append(_Item(doc, directory, rel, virtual=True, fallback=True))
            continue
        for obj in result:
            meta = obj.get("metadata") or {}
            ident = (obj.get("apiVersion"), obj.get("kind"), meta.get("namespace"), meta.get("name"))
            if ident in seen:
                continue
            seen.add(ident)
            file = env.locate(obj.get("kind"), meta.get("name"), meta.get("namespace") or "", directory)
            env.items.append(_Item(obj, directory, file))

    _expand_resourcesets(env)
    _lifecycle(env, cfg)
    _substitute(env)
    _expand_embedded(env)
    _run_rules(env, "objects", last=True)


def _check_other_files(root, covered, lint_conf):
    """Secrets and yamllint for files of mgmt/ and workload/ that belong to no environment."""
    env = _Env("-", root)
    files = []
    for top in ("mgmt", "workload"):
        for path in _yaml_files(os.path.join(root, top)):
            rel = env.rel(path)
            if not any(rel == c or rel.startswith(c.rstrip("/") + "/") for c in covered):
                files.append(path)
    env.yaml_files, env.lint_conf = files, lint_conf
    _index_files(env, files)
    _run_rules(env, "files", last=True)
    return sorted(env.findings, key=lambda f: (f.file, f.object, RULES.index(f.rule), f.message))


def _yaml_files(top):
    found = []
    for current, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d not in render.SKIP_DIRS)
        found.extend(os.path.join(current, f) for f in sorted(files) if f.endswith((".yaml", ".yml")))
    return found


def _index_files(env, yaml_files):
    for path in yaml_files:
        rel = env.rel(path)
        try:
            text = render.check_yaml_file(path)
        except render.YAMLLimitError as exc:
            env.add(rel, "-", "render", str(exc))
            env.over_bounds.add(path)
            continue
        except _YAML_ERRORS + (OSError, UnicodeDecodeError):
            continue  # yamllint reports the syntax error; kustomize reports it if the file is used
        env.texts[path] = text  # read and bounded once: the file rules (yamllint) take it from here
        try:
            docs = render.load_yaml_text(text)
        except _YAML_ERRORS:
            continue
        for doc in docs:
            env.raw_docs.append((rel, doc))
            meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
            kind, name = doc.get("kind"), meta.get("name")
            if not kind or not name or not isinstance(name, str):
                continue
            env.file_index.setdefault((kind, name, meta.get("namespace") or ""), rel)
            env.file_index.setdefault((kind, name), rel)


def _expand_resourcesets(env):
    """Render Flux Operator ResourceSets (inputs x resources) into virtual objects for the checks."""
    for item in list(env.items):
        if item.kind != "ResourceSet" or item.group != "fluxcd.controlplane.io" or item.fallback:
            continue
        inputs = item.spec.get("inputs") or []
        templates = item.spec.get("resources") or []
        if not isinstance(inputs, list) or not isinstance(templates, list):
            continue
        text = json.dumps(templates)
        for values in inputs:
            if not isinstance(values, dict):
                continue
            rendered = _RS_INPUT.sub(lambda m, v=values: str(v.get(m.group(1), "")).replace('"', '\\"'), text)
            try:
                objects = json.loads(rendered)
            except ValueError:
                continue
            for obj in objects:
                if isinstance(obj, dict):
                    meta = obj.setdefault("metadata", {})
                    if isinstance(meta, dict) and not meta.get("namespace"):
                        meta["namespace"] = item.namespace
                    env.items.append(_Item(obj, item.directory, item.file, virtual=True))


# Kinds whose spec.resources are literal objects the provider creates (CAPZ's ASO-managed
# AKS API embeds ASO resources: the resource group, ManagedCluster, agent pools).
EMBEDDING_KINDS = {
    ("infrastructure.cluster.x-k8s.io", k)
    for k in ("AzureASOManagedCluster", "AzureASOManagedControlPlane", "AzureASOManagedMachinePool")
}


def _expand_embedded(env):
    """Embedded resources become virtual objects: schema-checked and seen by the cross-checks."""
    for item in list(env.items):
        if (item.group, item.kind) not in EMBEDDING_KINDS or item.fallback:
            continue
        resources = item.spec.get("resources")
        for obj in resources if isinstance(resources, list) else []:
            if isinstance(obj, dict):
                obj = json.loads(json.dumps(obj))
                meta = obj.setdefault("metadata", {})
                if isinstance(meta, dict) and not meta.get("namespace"):
                    meta["namespace"] = item.namespace  # CAPZ creates them in the owner's namespace
                env.items.append(
                    _Item(obj, item.directory, item.file, virtual=True, origin=f"embedded in {object_id(item.obj)}")
                )


def _lifecycle(env, cfg):
    """Objects that bootstrap and CAPI create, which the tree may reference."""
    boot = cfg.bootstrap
    flux_ns = boot.flux_namespace
    sync = env.settings.sync if env.settings else "oci"
    source_kind = "OCIRepository" if sync == "oci" else "GitRepository"
    env.lifecycle.update(
        {
            (source_kind, flux_ns, "flux-system"),
            ("Kustomization", flux_ns, "flux-system"),
            ("FluxInstance", flux_ns, "flux"),
            ("Secret", flux_ns, boot.sops_age_secret),
            # flux_handoff writes sops-age into the Flux and the mgmt namespace (remote-apply Kustomizations).
            ("Secret", boot.mgmt_namespace, boot.sops_age_secret),
            ("ConfigMap", flux_ns, boot.run_configmap),
        }
    )
    if sync == "git":
        env.lifecycle.add(("Secret", flux_ns, boot.github_pat_secret))
    for item in env.items:
        if item.kind == "Cluster" and item.group == "cluster.x-k8s.io":
            env.lifecycle.add(("Secret", item.namespace, f"{item.name}-kubeconfig"))


def _substitute(env):
    """Apply postBuild variables of the Flux Kustomizations that point at each directory."""
    configmaps = {(i.namespace, i.name): i.obj.get("data") or {} for i in env.items if i.kind == "ConfigMap"}
    variables = {}
    for ks in validate_common.flux_kustomizations(env):
        post = ks.spec.get("postBuild") or {}
        merged = {}
        for ref in post.get("substituteFrom") or []:
            if isinstance(ref, dict) and ref.get("kind") == "ConfigMap":
                merged.update(configmaps.get((ks.namespace, ref.get("name")), {}))
        merged.update({k: str(v) for k, v in (post.get("substitute") or {}).items()})
        directory = _norm_path(ks.spec.get("path"))
        variables.setdefault(directory, {}).update(merged)
    for item in env.items:
        if item.virtual:
            continue
        item.unsubstituted = (item.obj, variables.get(item.directory, {}))
        try:
            item.obj = render.substitute(item.obj, variables.get(item.directory, {}))
        except _YAML_ERRORS as exc:
            env.add(item.file, object_id(item.obj), "schema", f"postBuild substitution produced invalid YAML: {exc}")


# --- command line ------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(prog="krops-validate", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--path", default=os.getcwd(), help="repository root (default: current directory)")
    parser.add_argument(
        "--environment", "-e", action="append", dest="environments", help="environment (repeatable; default: all)"
    )
    parser.add_argument(
        "--schema-location",
        help="folder or https URL template (default: $KROPS_SCHEMA_LOCATION, else the CRDs catalog)",
    )
    parser.add_argument(
        "--allow-kind", action="append", dest="allow_kinds", default=[], help="kind allowed without schema"
    )
    parser.add_argument("--config-file", help="bootstrap.toml (default: <path>/bootstrap.toml)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--no-cel", dest="cel", action="store_false", help="skip the CRDs' CEL validation rules")
    args = parser.parse_args(argv)
    try:
        result = run(
            args.path, args.environments, args.schema_location, args.allow_kinds, args.config_file, cel=args.cel
        )
    except ValidateError as exc:
        sys.stderr.write(f"ERROR: {exc}\n")
        return 2
    if args.format == "json":
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    else:
        sys.stdout.write("\n".join(format_text(result)) + "\n")
    return 1 if result["findings"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
