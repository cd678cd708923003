# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""validate: render, schema-check and cross-check the GitOps tree (mgmt/<env>, workload/<overlay>).

Rules (one finding per problem, each naming file, object, rule and message):

- ``render``: every directory with a kustomization file builds with kustomize.
- ``schema``: every rendered object validates against its JSON schema (unknown fields are
  errors; Flux postBuild variables are substituted first); a kind without schema is an
  error unless allow-listed.
- ``flux-graph``: dependsOn names a Kustomization of the environment, no cycle, and every
  sourceRef / chartRef / healthCheck / decryption and kubeConfig secretRef / substituteFrom
  names something the tree defines or the lifecycle creates (per bootstrap.toml).
- ``bootstrap``: bootstrap.toml agrees with the tree (chart pins, provider and pivot
  manifests, pivot-manifest-vars in use, move fallbacks, mgmt-cluster and mgmt-region,
  teardown names, regions and VPCs).
- ``secrets``: every Secret manifest is a SOPS file with encrypted data.
- ``tags``: every cloud resource the tree declares (CAPA control planes and machine pools, ACK
  resources) carries ``krops.io/environment=<env>`` and the run tags (docs/ownership.md).
- ``cel``: every custom resource passes the ``x-kubernetes-validations`` CEL rules of its schema
  (module_utils/cel.py); rules the CEL library cannot evaluate are listed in ``cel_unevaluable``.
- ``yamllint``: yamllint (the repository's .yamllint) over mgmt/ and workload/.
- ``admission``: every object passes its provider's admission webhooks as the API server runs them on
  create (defaulting first, then validation; module_utils/admission.py, the rules ported from upstream
  with their sources), with the feature gates the tree sets on its operator providers.
- ``contracts``: each operator provider's release implements the core's contract (module_utils/contracts.py,
  from the providers' metadata.yaml); one on Cluster API's temporary compatibility bridge is a warning naming
  it; a release built on an end-of-life Cluster API line is a finding unless the environment lists it in
  bootstrap.toml ``accepted-end-of-life`` (then a warning). Warnings are in ``warnings``, never findings.
- ``airgap``: (local-host, when airgap/zarf.yaml exists) every image of zarf.yaml is in airgap/images.txt
  with the same tag and digest, and every image the rendered tree references is listed there.

Importable without Ansible; ``python -m ...validate --help`` runs it standalone.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor

try:
    import yaml

    _YAML_ERRORS = (yaml.YAMLError,)
except ImportError:  # PyYAML comes with ansible-core; only bare sanity environments lack it
    yaml = None
    _YAML_ERRORS = ()

from ansible_collections.krops.platform.plugins.module_utils import admission
from ansible_collections.krops.platform.plugins.module_utils import airgap
from ansible_collections.krops.platform.plugins.module_utils import cel as krops_cel
from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils import contracts
from ansible_collections.krops.platform.plugins.module_utils import errors
from ansible_collections.krops.platform.plugins.module_utils import kube
from ansible_collections.krops.platform.plugins.module_utils import ownership
from ansible_collections.krops.platform.plugins.module_utils import profiles
from ansible_collections.krops.platform.plugins.module_utils import render
from ansible_collections.krops.platform.plugins.module_utils import validate_schema
from ansible_collections.krops.platform.plugins.module_utils import validate_substitution

try:
    from yamllint import config as yamllint_config
    from yamllint import linter as yamllint_linter

    HAS_YAMLLINT = True
except ImportError:  # reported as a finding-free note in the summary
    HAS_YAMLLINT = False

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
FLUX_KS = "kustomize.toolkit.fluxcd.io"
PROVIDER_KINDS = kube.PROVIDER_KINDS
# Chart name in Git -> key of bootstrap.toml [charts].
CHART_PINS = {
    "cert-manager": "cert-manager",
    "cluster-api-operator": "capi-operator",
    "flux-operator": "flux-operator",
    "flux-instance": "flux-operator",
}
_ENC = re.compile(r"^ENC\[[A-Za-z0-9_]+,data:.*\]$", re.S)
_SOPS_KEY_GROUPS = ("age", "pgp", "kms", "gcp_kms", "azure_kv", "hc_vault", "key_groups")
# Cloud resources that take AWS tags: (group, kind) -> where the tags are and their shape. ACK kinds
# not listed use spec.tags as a [{key, value}] list (the ACK convention).
OWNERSHIP_TAG = "krops.io/environment"
RUN_TAGS = ("krops.io/run-id", "krops.io/revision", "krops.io/expires-at", "krops.io/run-kind")
TAGGED_KINDS = {
    ("controlplane.cluster.x-k8s.io", "AWSManagedControlPlane"): (("additionalTags",), "map"),
    ("infrastructure.cluster.x-k8s.io", "AWSManagedMachinePool"): (("additionalTags",), "map"),
    ("infrastructure.cluster.x-k8s.io", "AWSMachinePool"): (("additionalTags",), "map"),
    ("infrastructure.cluster.x-k8s.io", "AWSCluster"): (("additionalTags",), "map"),
    ("s3.services.k8s.aws", "Bucket"): (("tagging", "tagSet"), "list"),
}
_ACK_UNTAGGED = {"AdoptedResource", "FieldExport", "IAMRoleSelector"}
_RS_INPUT = re.compile(r"<<-?\s*inputs\.([A-Za-z_][A-Za-z0-9_]*)\s*-?>>")


class ValidateError(errors.ValidationError):
    """validate could not run (bad path, bad bootstrap.toml, unusable schema location)."""


class Finding:
    __slots__ = ("environment", "file", "message", "object", "rule")

    def __init__(self, file, obj, rule, message, environment):
        self.file = file
        self.object = obj
        self.rule = rule
        self.message = message
        self.environment = environment

    def as_dict(self):
        return {
            "file": self.file,
            "object": self.object,
            "rule": self.rule,
            "message": self.message,
            "environment": self.environment,
        }

    def line(self):
        return f"{self.file}: {self.object}: [{self.rule}] {self.message}"

    def key(self):
        return (self.environment, self.file, self.object, self.rule, self.message)


def object_id(obj):
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return "{}/{}{}".format(obj.get("kind", "?"), f"{ns}/" if ns else "", meta.get("name", "?"))


def _group(api_version):
    return validate_schema.split_api_version(api_version)[0]


# Kinds whose CRD plural is not the English rule below (the CRD's spec.names.plural):
# Hardware -> hardware (tinkerbell/tinkerbell crd/bases/v1alpha1/tinkerbell.org_hardware.yaml @ v0.25.0).
_IRREGULAR_PLURALS = {"hardware": "hardware"}


def _plural(kind):
    lower = kind.lower()
    if lower in _IRREGULAR_PLURALS:
        return _IRREGULAR_PLURALS[lower]
    if lower.endswith(("s", "x", "ch", "sh")):
        return lower + "es"
    if lower.endswith("y") and lower[-2:-1] not in "aeiou":
        return lower[:-1] + "ies"
    return lower + "s"


def _norm_path(path):
    return os.path.normpath(str(path or ".").lstrip("/"))


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
        self.settings = None  # bootstrap.toml table of the environment, or None
        self.files = 0
        self.cel = None  # CEL rules not evaluated (a list when the cel rule runs)
        self.warnings = []  # {file, object, environment, message}: reported, never findings

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
    present = environments_present(root)
    if environments:
        missing = [e for e in environments if e not in present]
        if missing:
            raise ValidateError(
                "environment {} has no folder mgmt/{} (environments in the tree: {})".format(
                    missing[0], missing[0], ", ".join(present) or "none"
                )
            )
        selected = list(environments)
    else:
        selected = present
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
    lint_conf = _yamllint_config(root)

    findings, summary, total_objects, total_dirs, covered, unevaluable, warnings = [], {}, 0, 0, set(), [], []
    for name in selected:
        env = _Env(name, root)
        env.cel = [] if cel else None
        env_started = time.monotonic()
        _check_environment(env, cfg, store, allow, renderer, jobs, lint_conf)
        if collect is not None:
            collect(env)
        unevaluable.extend(env.cel or [])
        warnings.extend(env.warnings)
        unique = {}
        for finding in env.findings:
            unique.setdefault(finding.key(), finding)
        env_findings = sorted(unique.values(), key=lambda f: (f.file, f.object, RULES.index(f.rule), f.message))
        findings.extend(env_findings)
        rendered = sum(1 for item in env.items if not item.virtual)
        per_rule = {rule: sum(1 for f in env_findings if f.rule == rule) for rule in RULES}
        summary[name] = {
            "directories": len(env.directories),
            "objects": rendered,
            "files": env.files,
            "findings": len(env_findings),
            "by_rule": per_rule,
            "cel_unevaluable": len(env.cel or []),
            "warnings": len(env.warnings),
            "seconds": round(time.monotonic() - env_started, 3),
        }
        total_objects += rendered
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


def _check_environment(env, cfg, store, allow, renderer, jobs, lint_conf):
    root = env.root
    env.settings = cfg.data["environments"].get(env.name)
    env.tops = [f"mgmt/{env.name}"]
    workload = (env.settings or {}).get("workload-path") or f"workload/{env.name}"
    if os.path.isdir(os.path.join(root, workload)):
        env.tops.append(_norm_path(workload))
    if env.settings is None:
        env.add(
            "bootstrap.toml",
            f"environments.{env.name}",
            "bootstrap",
            "mgmt/{} has no [environments.{}] table in bootstrap.toml (defined: {})".format(
                env.name, env.name, ", ".join(cfg.environment_names)
            ),
        )

    yaml_files = []
    for top in env.tops:
        env.directories.extend(env.rel(d) for d in render.find_kustomization_dirs(os.path.join(root, top)))
        yaml_files.extend(_yaml_files(os.path.join(root, top)))
    env.files = len(yaml_files)
    _index_files(env, yaml_files)

    # kustomize runs in subprocesses: lint the files while they render.
    with ThreadPoolExecutor(max_workers=1) as pool:
        rendering = pool.submit(
            render.render_directories, [os.path.join(root, d) for d in env.directories], renderer, jobs
        )
        _check_yamllint(env, yaml_files, lint_conf)
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
    _check_schemas(env, store, allow)
    # each substituted field typed against its schema under realistic site values (validate_substitution.py)
    validate_substitution.check(env.items, store, SAMPLE_RUN_TAGS, env.add, object_id)
    if env.cel is not None:
        _check_cel(env, store)
    _check_admission(env)
    _check_contracts(env)
    _check_flux_graph(env)
    if env.settings is not None:
        _check_bootstrap(env, cfg)
    _check_secrets(env)
    _check_tags(env)
    _check_gcp_labels(env)
    if env.name == airgap.ENVIRONMENT and not any(f.rule == "render" for f in env.findings):
        for file, obj, message in airgap.validate_hook(root, renderer):
            env.add(file, obj, "airgap", message)


def _check_other_files(root, covered, lint_conf):
    """Secrets and yamllint for files of mgmt/ and workload/ that belong to no environment."""
    env = _Env("-", root)
    files = []
    for top in ("mgmt", "workload"):
        for path in _yaml_files(os.path.join(root, top)):
            rel = env.rel(path)
            if not any(rel == c or rel.startswith(c.rstrip("/") + "/") for c in covered):
                files.append(path)
    _index_files(env, files)
    _check_secrets(env)
    _check_yamllint(env, files, lint_conf)
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
            docs = render.load_yaml_documents(path)
        except render.YAMLLimitError as exc:
            env.add(rel, "-", "render", str(exc))
            continue
        except _YAML_ERRORS + (OSError, UnicodeDecodeError):
            continue  # yamllint reports the syntax error; kustomize reports it if the file is used
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
    boot = cfg.data["bootstrap"]
    flux_ns = boot["flux-namespace"]
    sync = (env.settings or {}).get("sync", "oci")
    source_kind = "OCIRepository" if sync == "oci" else "GitRepository"
    env.lifecycle.update(
        {
            (source_kind, flux_ns, "flux-system"),
            ("Kustomization", flux_ns, "flux-system"),
            ("FluxInstance", flux_ns, "flux"),
            ("Secret", flux_ns, boot["sops-age-secret"]),
            # flux_handoff writes sops-age into the Flux and the mgmt namespace (remote-apply Kustomizations).
            ("Secret", boot["mgmt-namespace"], boot["sops-age-secret"]),
            ("ConfigMap", flux_ns, boot["run-configmap"]),
        }
    )
    if sync == "git":
        env.lifecycle.add(("Secret", flux_ns, boot["github-pat-secret"]))
    for item in env.items:
        if item.kind == "Cluster" and item.group == "cluster.x-k8s.io":
            env.lifecycle.add(("Secret", item.namespace, f"{item.name}-kubeconfig"))


def _flux_kustomizations(env):
    return [i for i in env.items if i.kind == "Kustomization" and i.group == FLUX_KS]


def _substitute(env):
    """Apply postBuild variables of the Flux Kustomizations that point at each directory."""
    configmaps = {(i.namespace, i.name): i.obj.get("data") or {} for i in env.items if i.kind == "ConfigMap"}
    variables = {}
    for ks in _flux_kustomizations(env):
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


# --- rules -------------------------------------------------------------------------------


def _check_schemas(env, store, allow):
    def check(item):
        obj = dict(item.obj)
        obj.pop("sops", None)  # SOPS metadata is removed by kustomize-controller before apply
        api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
        group, version = validate_schema.split_api_version(api_version)
        if not kind or not api_version:
            return [("object has no apiVersion or kind",)]
        try:
            errors = store.errors(obj)
        except validate_schema.SchemaMissing as exc:
            if kind in allow or f"{group}/{kind}" in allow or f"{api_version}/{kind}" in allow:
                return []
            return [
                (f"no schema for {kind} {api_version} (looked in {exc}); add {kind} to allow_kinds if it has none",)
            ]
        except validate_schema.SchemaUnreachable as exc:
            return [
                (
                    f"schema location unreachable: {exc}; pass a local schema folder as schema_location "
                    "(or KROPS_SCHEMA_LOCATION) to validate offline",
                )
            ]
        return [(f"{path}: {message}",) for path, message in errors]

    items = [item for item in env.items if not item.fallback]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(check, items))
    for item, problems in zip(items, results):
        label = object_id(item.obj) if not item.virtual else f"{object_id(item.obj)} ({item.origin})"
        for (message,) in problems:
            env.add(item.file, label, "schema", message)


def _check_cel(env, store):
    """The schemas' x-kubernetes-validations rules (transition rules need an old object: render_diff)."""
    for item in env.items:
        if item.fallback:
            continue
        label = object_id(item.obj) if not item.virtual else f"{object_id(item.obj)} (rendered by ResourceSet)"
        for result in krops_cel.check(item.obj, store):
            if result.outcome == krops_cel.UNEVALUABLE:
                env.cel.append({"file": item.file, "object": label, "environment": env.name, "message": result.text()})
            else:
                env.add(item.file, label, "cel", result.text())


def _check_admission(env):
    """What the providers' webhooks would deny when Flux creates the object (module_utils/admission.py)."""
    objects = [i.obj for i in env.items if not i.fallback]
    gates = admission.gates_from(objects)
    # The API server refuses a schema-invalid object before any validating webhook sees it.
    refused = {(f.file, f.object) for f in env.findings if f.rule in ("schema", "cel")}
    for item in env.items:
        if item.fallback or (item.file, object_id(item.obj)) in refused:
            continue
        denial = admission.review(item.obj, gates)
        if denial is not None:
            env.add(item.file, object_id(item.obj), "admission", denial.message)


def _check_contracts(env):
    """Provider contracts against the core's, and end-of-life bases (module_utils/contracts.py)."""
    items = {}
    for item in env.items:
        if item.group == "operator.cluster.x-k8s.io" and item.kind in PROVIDER_KINDS and not item.fallback:
            items.setdefault((item.kind, item.name), item)
    if not items:
        return
    providers = [(kind, name, (item.spec or {}).get("version")) for (kind, name), item in items.items()]
    accepted = (env.settings or {}).get("accepted-end-of-life") or []
    problems, warnings = contracts.check(providers, accepted)
    for kind, name, message in problems:
        item = items.get((kind, name))
        if item is None:  # a stale accepted-end-of-life entry
            env.add("bootstrap.toml", f"environments.{env.name}.accepted-end-of-life", "contracts", message)
        else:
            env.add(item.file, object_id(item.obj), "contracts", message)
    for kind, name, message in warnings:
        item = items[(kind, name)]
        env.warnings.append(
            {"file": item.file, "object": object_id(item.obj), "environment": env.name, "message": message}
        )


def _check_flux_graph(env):
    kss = _flux_kustomizations(env)
    known = {(k.namespace, k.name) for k in kss} | {
        (ns, name) for kind, ns, name in env.lifecycle if kind == "Kustomization"
    }
    graph = {}
    for ks in kss:
        label = object_id(ks.obj)
        edges = []
        for dep in ks.spec.get("dependsOn") or []:
            if not isinstance(dep, dict):
                continue
            target = (dep.get("namespace") or ks.namespace, dep.get("name"))
            if target not in known:
                env.add(
                    ks.file,
                    label,
                    "flux-graph",
                    f"dependsOn {target[0]}/{target[1]}: no Kustomization of that name in environment {env.name}",
                )
            else:
                edges.append(target)
        graph[(ks.namespace, ks.name)] = edges
        _check_source_ref(env, ks, ks.spec.get("sourceRef"), "sourceRef")
        path = ks.spec.get("path")
        if path and not os.path.isdir(os.path.join(env.root, _norm_path(path))):
            env.add(ks.file, label, "flux-graph", f"path {path} does not exist in the repository")
        for check in ks.spec.get("healthChecks") or []:
            if isinstance(check, dict):
                _check_health(env, ks, check)
        decryption = ks.spec.get("decryption") or {}
        _check_ref(env, ks, "Secret", (decryption.get("secretRef") or {}).get("name"), "decryption.secretRef")
        _check_ref(
            env,
            ks,
            "Secret",
            ((ks.spec.get("kubeConfig") or {}).get("secretRef") or {}).get("name"),
            "kubeConfig.secretRef",
        )
        for ref in (ks.spec.get("postBuild") or {}).get("substituteFrom") or []:
            if isinstance(ref, dict) and not ref.get("optional"):
                _check_ref(env, ks, ref.get("kind") or "ConfigMap", ref.get("name"), "postBuild.substituteFrom")
    for item in env.items:
        if item.kind == "HelmRelease" and item.group == "helm.toolkit.fluxcd.io":
            chart = (item.spec.get("chart") or {}).get("spec") or {}
            if chart:
                _check_source_ref(env, item, chart.get("sourceRef"), "chart.spec.sourceRef")
            if item.spec.get("chartRef"):
                _check_source_ref(env, item, item.spec.get("chartRef"), "chartRef")
            _check_ref(
                env,
                item,
                "Secret",
                ((item.spec.get("kubeConfig") or {}).get("secretRef") or {}).get("name"),
                "kubeConfig.secretRef",
            )
    for cycle in _cycles(graph):
        first = next(k for k in kss if (k.namespace, k.name) == cycle[0])
        env.add(
            first.file,
            object_id(first.obj),
            "flux-graph",
            "dependsOn cycle: {}".format(" -> ".join("{}/{}".format(*node) for node in cycle + [cycle[0]])),
        )


def _check_source_ref(env, owner, ref, field):
    label = object_id(owner.obj)
    if not isinstance(ref, dict) or not ref.get("name"):
        return  # the schema rule reports a missing required field
    kind, name, ns = ref.get("kind"), ref.get("name"), ref.get("namespace") or owner.namespace
    if not env.defined(kind, ns, name):
        env.add(
            owner.file,
            label,
            "flux-graph",
            f"{field} {kind} {ns}/{name}: not defined in the tree nor created by the lifecycle",
        )


def _check_ref(env, owner, kind, name, field):
    if not name:
        return
    if not env.defined(kind, owner.namespace, name):
        env.add(
            owner.file,
            object_id(owner.obj),
            "flux-graph",
            f"{field} {kind} {owner.namespace}/{name}: not defined in the tree nor created by the lifecycle",
        )


def _check_health(env, ks, check):
    kind, name, ns = check.get("kind"), check.get("name"), check.get("namespace") or ""
    group = _group(check.get("apiVersion", "")) if check.get("apiVersion") else None
    if kind == "CustomResourceDefinition":
        plural, _dot, crd_group = (name or "").partition(".")
        if env.defined(kind, None, name) or any(i.group == crd_group and _plural(i.kind) == plural for i in env.items):
            return
        env.add(
            ks.file,
            object_id(ks.obj),
            "flux-graph",
            f"healthCheck CustomResourceDefinition {name}: no object of that "
            "type in the tree (a health check on a CRD nothing uses is likely a typo)",
        )
        return
    if env.defined(kind, ns, name, group) or (group is None and env.defined(kind, ns, name)):
        return
    env.add(
        ks.file,
        object_id(ks.obj),
        "flux-graph",
        "healthCheck {} {}{}: not defined in the tree nor created by the lifecycle".format(
            kind, f"{ns}/" if ns else "", name
        ),
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


def _check_bootstrap(env, cfg):
    settings, charts = env.settings, cfg.data["charts"]
    boot = cfg.data["bootstrap"]
    key = f"environments.{env.name}"
    for field in ("sync-path", "workload-path"):
        value = settings.get(field)
        if value and not os.path.isdir(os.path.join(env.root, value)):
            env.add("bootstrap.toml", f"{key}.{field}", "bootstrap", f"{value} does not exist in the repository")

    # Chart pins.
    sources = {(i.kind, i.namespace, i.name): i for i in env.items if i.group == "source.toolkit.fluxcd.io"}
    for item in env.items:
        chart = version = None
        if item.kind == "HelmRelease" and item.group == "helm.toolkit.fluxcd.io":
            spec = (item.spec.get("chart") or {}).get("spec") or {}
            chart, version = spec.get("chart"), spec.get("version")
            ref = item.spec.get("chartRef") or {}
            if ref.get("kind") == "OCIRepository":
                source = sources.get(("OCIRepository", ref.get("namespace") or item.namespace, ref.get("name")))
                if source is not None:
                    chart = str(source.spec.get("url", "")).rstrip("/").rsplit("/", 1)[-1]
                    version = (source.spec.get("ref") or {}).get("tag")
        elif item.kind == "HelmChartProxy" and item.group == "addons.cluster.x-k8s.io":
            chart, version = item.spec.get("chartName"), item.spec.get("version")
        pin_key = CHART_PINS.get(chart)
        if pin_key is None:
            continue
        pin = charts[pin_key]
        if str(version or "").lstrip("v") != str(pin).lstrip("v"):
            env.add(
                item.file,
                object_id(item.obj),
                "bootstrap",
                "chart {} version {} differs from bootstrap.toml [charts] {} = {}".format(
                    chart, version or "(unset)", pin_key, pin
                ),
            )

    # Flux version and local registry address: bootstrap.toml is their source (flux_handoff uses the same).
    for item in env.items:
        if item.kind != "FluxInstance" or item.group != "fluxcd.controlplane.io":
            continue
        version = (item.spec.get("distribution") or {}).get("version")
        if version != boot["flux-version"]:
            env.add(
                item.file,
                object_id(item.obj),
                "bootstrap",
                "FluxInstance distribution.version {} differs from "
                "bootstrap.toml bootstrap.flux-version = {} (management and workload run the same Flux)".format(
                    version or "(unset)", boot["flux-version"]
                ),
            )
        sync = item.spec.get("sync") or {}
        if settings.get("sync") == "oci" and sync.get("kind") == "OCIRepository":
            wanted = "oci://{}:{}/{}".format(
                boot["registry-name"], boot["registry-container-port"], boot["oci-repository"]
            )
            if sync.get("url") != wanted:
                env.add(
                    item.file,
                    object_id(item.obj),
                    "bootstrap",
                    "FluxInstance sync.url {} differs from {} "
                    "(bootstrap.toml registry-name, registry-container-port, oci-repository)".format(
                        sync.get("url") or "(unset)", wanted
                    ),
                )
    # CAPD clusters (the local workload) run the Kubernetes version of the pinned kind node image.
    image = boot.get("kind-node-image") or ""
    tag = image.split("@", 1)[0].rpartition(":")[2] if ":" in image.split("@", 1)[0] else ""
    if profiles.of(settings).local_workload and tag:
        for item in env.items:
            if item.kind == "KubeadmControlPlane":
                version = item.spec.get("version")
            elif item.kind == "MachineDeployment" and item.group == "cluster.x-k8s.io":
                version = ((item.spec.get("template") or {}).get("spec") or {}).get("version")
            else:
                continue
            if version != tag:
                env.add(
                    item.file,
                    object_id(item.obj),
                    "bootstrap",
                    "Kubernetes version {} differs from the kind "
                    "node image {} (bootstrap.toml bootstrap.kind-node-image)".format(version or "(unset)", tag),
                )

    # Manifests named by bootstrap.toml.
    infra = (settings["infra-provider-namespace"], settings["infra-provider-name"])
    infra_found = False
    for index, manifest in enumerate(settings.get("provider-manifests") or []):
        docs = _manifest(env, manifest, "%s.provider-manifests[%d]" % (key, index))
        if docs is None:
            continue
        providers = [
            d
            for d in docs
            if d.get("kind") in PROVIDER_KINDS and _group(d.get("apiVersion", "")) == "operator.cluster.x-k8s.io"
        ]
        if not providers:
            env.add(
                manifest,
                "-",
                "bootstrap",
                "%s.provider-manifests[%d]: holds no operator.cluster.x-k8s.io provider "
                "object (%s)" % (key, index, ", ".join(PROVIDER_KINDS[:5])),
            )
        for doc in providers:
            meta = doc.get("metadata") or {}
            if doc.get("kind") == "InfrastructureProvider" and (meta.get("namespace"), meta.get("name")) == infra:
                infra_found = True
            if not env.defined(doc.get("kind"), meta.get("namespace") or "", meta.get("name")):
                env.add(
                    manifest,
                    object_id(doc),
                    "bootstrap",
                    f"provider manifest is not part of the tree rendered for {env.name} (no kustomization lists it)",
                )
    if settings.get("provider-manifests") and not infra_found:
        env.add(
            "bootstrap.toml",
            f"{key}.infra-provider-name",
            "bootstrap",
            "no provider manifest holds "
            "InfrastructureProvider {}/{} (infra-provider-namespace/infra-provider-name)".format(*infra),
        )
    for index, manifest in enumerate(settings.get("pivot-manifests") or []):
        docs = _manifest(env, manifest, "%s.pivot-manifests[%d]" % (key, index))
        if docs is not None and not docs:
            env.add(manifest, "-", "bootstrap", "%s.pivot-manifests[%d]: holds no Kubernetes object" % (key, index))
    texts = []
    for manifest in settings.get("pivot-manifests") or []:
        try:
            with open(os.path.join(env.root, manifest), encoding="utf-8") as handle:
                texts.append(handle.read())
        except (OSError, UnicodeDecodeError):
            pass  # reported above
    # pivot-sops-secrets are substituted too, but their values are encrypted: a variable found in no
    # readable pivot manifest is reported only when there is no encrypted one that could use it.
    opaque = bool(settings.get("pivot-sops-secrets"))
    for name in sorted(settings.get("pivot-manifest-vars") or {}):
        if not opaque and not any(re.search(rf"\$\{{{re.escape(name)}(:?[=-][^}}]*)?\}}", text) for text in texts):
            env.add(
                "bootstrap.toml",
                f"{key}.pivot-manifest-vars.{name}",
                "bootstrap",
                f"{name} is used by no pivot manifest (${{{name}}}); remove it or use it",
            )
    for index, manifest in enumerate(settings.get("pivot-sops-secrets") or []):
        docs = _manifest(env, manifest, "%s.pivot-sops-secrets[%d]" % (key, index))
        if docs is not None and not any(d.get("kind") == "Secret" and isinstance(d.get("sops"), dict) for d in docs):
            env.add(
                manifest, "-", "bootstrap", "%s.pivot-sops-secrets[%d]: holds no SOPS-encrypted Secret" % (key, index)
            )
    for index, fallback in enumerate(settings.get("move-fallbacks") or []):
        field = "%s.move-fallbacks[%d]" % (key, index)
        docs = _manifest(env, fallback["manifest"], field)
        if docs is None:
            continue
        plural, _dot, group = fallback["resource"].partition(".")
        if not any(
            _group(d.get("apiVersion", "")) == group
            and _plural(str(d.get("kind", ""))) == plural
            and (d.get("metadata") or {}).get("name") == fallback["name"]
            for d in docs
        ):
            env.add(
                fallback["manifest"],
                "-",
                "bootstrap",
                "{}: holds no {} named {}".format(field, fallback["resource"], fallback["name"]),
            )

    # Cluster names.
    mgmt_ns = boot["mgmt-namespace"]
    clusters = {
        i.name for i in env.items if i.kind == "Cluster" and i.group == "cluster.x-k8s.io" and i.namespace == mgmt_ns
    }
    where = ", ".join(sorted(clusters)) or "none"
    if settings["mgmt-cluster"] not in clusters:
        env.add(
            "bootstrap.toml",
            f"{key}.mgmt-cluster",
            "bootstrap",
            "mgmt-cluster {} is not a Cluster in namespace {} of the tree (Clusters there: {})".format(
                settings["mgmt-cluster"], mgmt_ns, where
            ),
        )
    teardown = settings.get("teardown") or {}
    for name in teardown.get("capi-workloads") or []:
        if name not in clusters:
            env.add(
                "bootstrap.toml",
                f"{key}.teardown.capi-workloads",
                "bootstrap",
                f"capi-workload {name} is not a Cluster in namespace {mgmt_ns} of the tree (Clusters there: {where})",
            )
        elif name == settings["mgmt-cluster"]:
            env.add(
                "bootstrap.toml",
                f"{key}.teardown.capi-workloads",
                "bootstrap",
                f"capi-workload {name} is the "
                "management cluster; teardown must never delete it through its Cluster object",
            )
    prefix = teardown.get("mgmt-container-prefix")
    if prefix and not settings["mgmt-cluster"].startswith(prefix):
        env.add(
            "bootstrap.toml",
            f"{key}.teardown.mgmt-container-prefix",
            "bootstrap",
            "mgmt-container-prefix {} does not match mgmt-cluster {} (CAPD names containers after the Cluster)".format(
                prefix, settings["mgmt-cluster"]
            ),
        )
    eks_names = {
        str(i.spec.get("eksClusterName"))
        for i in env.items
        if i.kind == "AWSManagedControlPlane" and i.spec.get("eksClusterName")
    }
    rds_names = {
        str(i.spec.get("dbInstanceIdentifier"))
        for i in env.items
        if i.kind == "DBInstance" and i.spec.get("dbInstanceIdentifier")
    }
    for index, workload in enumerate(teardown.get("aws-workloads") or []):
        field = "%s.teardown.aws-workloads[%d]" % (key, index)
        if workload["cluster-name"] not in clusters:
            env.add(
                "bootstrap.toml",
                field,
                "bootstrap",
                "cluster-name {} is not a Cluster in namespace {} of the tree (Clusters there: {})".format(
                    workload["cluster-name"], mgmt_ns, where
                ),
            )
        if eks_names and workload["eks-cluster-name"] not in eks_names:
            env.add(
                "bootstrap.toml",
                field,
                "bootstrap",
                "eks-cluster-name {} matches no AWSManagedControlPlane eksClusterName ({})".format(
                    workload["eks-cluster-name"], ", ".join(sorted(eks_names))
                ),
            )
        if rds_names and workload.get("rds-instance") and workload["rds-instance"] not in rds_names:
            env.add(
                "bootstrap.toml",
                field,
                "bootstrap",
                "rds-instance {} matches no DBInstance dbInstanceIdentifier ({})".format(
                    workload["rds-instance"], ", ".join(sorted(rds_names))
                ),
            )
    _check_regions(env, settings, teardown, key, mgmt_ns)
    _check_networks(env, teardown, key)
    _check_gcp_iam(env, settings, teardown, key)
    groups = {i.name for i in env.items if i.kind == "ResourceGroup"} | {
        str(i.spec.get("azureName")) for i in env.items if i.kind == "ResourceGroup" and i.spec.get("azureName")
    }
    for name in teardown.get("resource-groups") or []:
        if name not in groups:
            env.add(
                "bootstrap.toml",
                f"{key}.teardown.resource-groups",
                "bootstrap",
                "resource group {} is not a ResourceGroup of the tree ({})".format(
                    name, ", ".join(sorted(groups)) or "none"
                ),
            )


def _cluster_regions(env, name, namespace):
    """The regions (spec.region or spec.location) of the objects Cluster <name> refers to."""
    found = set()
    for item in env.items:
        if (
            item.kind == "Cluster"
            and item.group == "cluster.x-k8s.io"
            and item.name == name
            and item.namespace == namespace
        ):
            for ref in (item.spec.get("controlPlaneRef"), item.spec.get("infrastructureRef")):
                for obj in env.items:
                    if (
                        isinstance(ref, dict)
                        and obj.kind == ref.get("kind")
                        and obj.name == ref.get("name")
                        and obj.namespace == namespace
                    ):
                        found.update(str(obj.spec[f]) for f in ("region", "location") if obj.spec.get(f))
    return found


def _check_regions(env, settings, teardown, key, mgmt_ns):
    region = settings.get("mgmt-region")
    found = _cluster_regions(env, settings["mgmt-cluster"], mgmt_ns)
    if region and found and region not in found:
        env.add(
            "bootstrap.toml",
            f"{key}.mgmt-region",
            "bootstrap",
            "mgmt-region {} differs from the region of mgmt-cluster {} in the tree ({})".format(
                region, settings["mgmt-cluster"], ", ".join(sorted(found))
            ),
        )
    for index, workload in enumerate(teardown.get("aws-workloads") or []):
        found = _cluster_regions(env, workload["cluster-name"], mgmt_ns)
        if found and workload["region"] not in found:
            env.add(
                "bootstrap.toml",
                "%s.teardown.aws-workloads[%d]" % (key, index),
                "bootstrap",
                "region {} differs from the region of cluster {} in the tree ({})".format(
                    workload["region"], workload["cluster-name"], ", ".join(sorted(found))
                ),
            )


def _check_networks(env, teardown, key):
    """teardown.networks (gcp) lists exactly the VPCs of the tree."""
    vpcs = {
        str(i.spec["network"]["name"])
        for i in env.items
        if i.kind == "GCPManagedCluster" and isinstance(i.spec.get("network"), dict) and i.spec["network"].get("name")
    } | {str(i.spec.get("resourceID") or i.name) for i in env.items if i.kind == "ComputeNetwork"}
    listed = teardown.get("networks") or []
    for name in listed:
        if name not in vpcs:
            env.add(
                "bootstrap.toml",
                f"{key}.teardown.networks",
                "bootstrap",
                "network {} is not a VPC of the tree "
                "(GCPManagedCluster spec.network.name or ComputeNetwork: {})".format(
                    name, ", ".join(sorted(vpcs)) or "none"
                ),
            )
    for name in sorted(vpcs - set(listed)):
        env.add(
            "bootstrap.toml",
            f"{key}.teardown.networks",
            "bootstrap",
            f"VPC {name} of the tree is not in teardown networks: teardown would leave it and everything in it behind",
        )


def _check_gcp_iam(env, settings, teardown, key):
    """teardown.service-accounts and .workload-identity-providers (gcp) name exactly what krops creates.

    The rules are ownership.gcp_iam_problems, the ones gcp_teardown enforces too (one rule set).
    """
    declared = ownership.gcp_iam_declared([i.obj for i in env.items], settings.get("post-kind-create-hook"))
    listed = (teardown.get("service-accounts") or [], teardown.get("workload-identity-providers") or [])
    for field, dummy, message in ownership.gcp_iam_problems(*listed, declared):
        env.add("bootstrap.toml", f"{key}.teardown.{field}", "bootstrap", message)


def _tags_of(item):
    """{key: value} of a taggable cloud resource, or None when the kind takes no tags."""
    where = TAGGED_KINDS.get((item.group, item.kind))
    if where is None:
        if not item.group.endswith(".services.k8s.aws") or item.kind in _ACK_UNTAGGED:
            return None
        where = (("tags",), "list")
    value = item.spec
    for part in where[0]:
        value = value.get(part) if isinstance(value, dict) else None
    if where[1] == "map":
        return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}
    return (
        {str(t.get("key")): t.get("value") for t in value or [] if isinstance(t, dict)}
        if isinstance(value, list)
        else {}
    )


def _check_tags(env):
    for item in env.items:
        if item.fallback:
            continue
        tags = _tags_of(item)
        if tags is None:
            continue
        field = "spec." + ".".join(TAGGED_KINDS.get((item.group, item.kind), (("tags",),))[0])
        if tags.get(OWNERSHIP_TAG) != env.name:
            env.add(
                item.file,
                object_id(item.obj),
                "tags",
                f"{field} lacks the ownership tag {OWNERSHIP_TAG}={env.name} (teardown finds what it owns by this tag)"
                if OWNERSHIP_TAG not in tags
                else f"{field}: {OWNERSHIP_TAG} is {tags.get(OWNERSHIP_TAG)!r}, expected {env.name!r}",
            )
        missing = [t for t in RUN_TAGS if not tags.get(t)]
        if missing:
            env.add(
                item.file,
                object_id(item.obj),
                "tags",
                "{} lacks the run tags {}: add them from the krops-run ConfigMap "
                '(postBuild substituteFrom, e.g. "${{KROPS_RUN_ID:=unset}}")'.format(field, ", ".join(missing)),
            )


# Objects whose labels become GCP labels: Config Connector copies metadata.labels without the "/"-prefixed
# keys (pkg/label/label.go at v1.155.1); CAPG's additionalLabels reach node pools and load balancers.
GCP_LABELLED = {
    ("infrastructure.cluster.x-k8s.io", "GCPManagedCluster"): ("spec", "additionalLabels"),
    ("infrastructure.cluster.x-k8s.io", "GCPManagedMachinePool"): ("spec", "additionalLabels"),
    ("infrastructure.cluster.x-k8s.io", "GCPCluster"): ("spec", "additionalLabels"),
    ("infrastructure.cluster.x-k8s.io", "GCPMachineTemplate"): ("spec", "template", "spec", "additionalLabels"),
}
# What the krops-run ConfigMap holds during a run (flux_handoff writes it; the defaults in the tree are
# only used without it): the GCP label check substitutes these too, so a value valid only by its
# default is caught.
SAMPLE_RUN_TAGS = {
    "KROPS_RUN_ID": "gcp-20261201-120000",
    "KROPS_REVISION": "main@sha1:0123456789abcdef0123456789abcdef01234567",
    "KROPS_EXPIRES_AT": "2026-12-02T12:00:00Z",
    "KROPS_RUN_KIND": "manual",
}
SAMPLE_RUN_TAGS.update(ownership.gcp_run_labels(SAMPLE_RUN_TAGS))


def _gcp_labels(group, kind, obj):
    """(field, {key: value}) of the labels an object gives its GCP resource, or None."""
    if group.endswith(".cnrm.cloud.google.com"):
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return "metadata.labels", {str(k): v for k, v in labels.items() if "/" not in str(k)}
    path = GCP_LABELLED.get((group, kind))
    if path is None:
        return None
    value = obj
    for part in path:
        value = value.get(part) if isinstance(value, dict) else None
    return ".".join(path), {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}


def _check_gcp_labels(env):
    """Every GCP label key and value is valid for GCP, with the tree's defaults and with a run's values."""
    for item in env.items:
        if item.fallback:
            continue
        found = _gcp_labels(item.group, item.kind, item.obj)
        if found is None:
            continue
        field, labels = found
        at_run = {}
        if item.unsubstituted:
            raw, variables = item.unsubstituted
            try:
                during = render.substitute(raw, dict(variables, **SAMPLE_RUN_TAGS))
                at_run = _gcp_labels(item.group, item.kind, during)[1]
            except _YAML_ERRORS:
                at_run = {}
        for key in sorted(set(labels) | set(at_run)):
            if not ownership.GCP_LABEL_KEY.match(key):
                env.add(
                    item.file,
                    object_id(item.obj),
                    "tags",
                    f"{field}: {key!r} is not a valid GCP label key (a lower-case letter, then at most 62 of "
                    "lower-case letters, digits, _ and -)",
                )
                continue
            for value, when in ((labels.get(key), ""), (at_run.get(key), " during a run (krops-run ConfigMap)")):
                if value is None or ownership.GCP_LABEL_VALUE.match(str(value)):
                    continue
                if hasattr(value, "strftime"):  # YAML read an unquoted RFC 3339 time as a timestamp
                    value = value.strftime("%Y-%m-%dT%H:%M:%SZ")
                env.add(
                    item.file,
                    object_id(item.obj),
                    "tags",
                    f"{field}.{key}: {str(value)!r}{when} is not a valid GCP label value (at most 63 lower-case "
                    "letters, digits, _ and -); take the run tags' label forms (${KROPS_EXPIRES_AT_LABEL} and the "
                    "other KROPS_*_LABEL variables of the krops-run ConfigMap)",
                )
                break


def _manifest(env, manifest, field):
    path = os.path.join(env.root, manifest)
    if not os.path.isfile(path):
        env.add("bootstrap.toml", field, "bootstrap", f"{manifest} does not exist")
        return None
    try:
        return render.load_yaml_documents(path)
    except _YAML_ERRORS + (OSError, UnicodeDecodeError) as exc:
        env.add(manifest, "-", "bootstrap", "{}: cannot be read as YAML: {}".format(field, " ".join(str(exc).split())))
        return None


def _check_secrets(env):
    flagged = set()
    for rel, doc in env.raw_docs:
        is_sops = rel.endswith((".sops.yaml", ".sops.yml"))
        if is_sops:
            problem = _sops_problem(doc)
            if problem:
                env.add(rel, object_id(doc), "secrets", problem)
            continue
        if doc.get("kind") == "Secret":
            flagged.add(((doc.get("metadata") or {}).get("name"), (doc.get("metadata") or {}).get("namespace") or ""))
            env.add(
                rel,
                object_id(doc),
                "secrets",
                "Secret committed unencrypted: encrypt it with sops "
                "(age, --encrypted-regex '^(data|stringData)$') into a *.sops.yaml file",
            )
    for item in env.items:
        if item.kind != "Secret" or item.virtual or isinstance(item.obj.get("sops"), dict):
            continue
        if (item.name, item.namespace) in flagged:
            continue
        if item.obj.get("data") or item.obj.get("stringData"):
            env.add(
                item.file,
                object_id(item.obj),
                "secrets",
                f"Secret rendered in plaintext by {env.rel(render.kustomization_file(os.path.join(env.root, item.directory)))} (secretGenerator?): "
                "commit it as a *.sops.yaml file instead",
            )


def _sops_problem(doc):
    meta = doc.get("sops")
    if not isinstance(meta, dict) or not meta.get("mac") or not any(meta.get(k) for k in _SOPS_KEY_GROUPS):
        return "SOPS file without sops metadata (mac and a key group): encrypt it with sops"
    for field in ("data", "stringData"):
        values = doc.get(field)
        if not isinstance(values, dict):
            continue
        for name, value in values.items():
            if value == "":
                continue  # sops leaves an empty value as it is (sops 3.11: nothing to encrypt)
            if not isinstance(value, str) or not _ENC.match(value):
                return f"{field}.{name} is not encrypted (expected ENC[...]): re-encrypt with --encrypted-regex '^(data|stringData)$'"
    return None


def _yamllint_config(root):
    if not HAS_YAMLLINT:
        return None
    for name in (".yamllint", ".yamllint.yaml", ".yamllint.yml"):
        path = os.path.join(root, name)
        if os.path.isfile(path):
            try:
                with open(path, "rb") as handle:
                    digest = hashlib.sha256(handle.read()).hexdigest()
                conf = yamllint_config.YamlLintConfig(file=path)
                conf.krops_key = digest
                return conf
            except yamllint_config.YamlLintConfigError as exc:
                raise ValidateError(f"{path}: invalid yamllint configuration: {exc}")
    return yamllint_config.YamlLintConfig("extends: default")


# (configuration, file name, content) -> problems; yamllint is pure Python and the slowest check.
_LINT_CACHE = {}


def _check_yamllint(env, yaml_files, conf):
    if conf is None:
        env.add("-", "-", "yamllint", "the yamllint Python package is not installed")
        return
    for path in yaml_files:
        rel = env.rel(path)
        if conf.is_file_ignored(rel):
            continue
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as exc:
            env.add(rel, "-", "yamllint", f"cannot read: {exc}")
            continue
        render.check_deadline(f"linting {rel}")
        try:
            render.check_yaml_text(text, rel)
        except render.YAMLLimitError:
            continue  # reported once by _index_files; linting it would take as long as the bound prevents
        except _YAML_ERRORS:
            pass  # yamllint reports it with its position
        key = (getattr(conf, "krops_key", id(conf)), rel, hashlib.sha256(text.encode("utf-8")).hexdigest())
        problems = _LINT_CACHE.get(key)
        if problems is None:
            problems = [(p.line, p.column, p.level, p.desc, p.rule) for p in yamllint_linter.run(text, conf, rel)]
            if len(_LINT_CACHE) > 20000:
                _LINT_CACHE.clear()
            _LINT_CACHE[key] = problems
        for line, column, level, desc, rule in problems:
            env.add(
                rel,
                "line %d" % line,
                "yamllint",
                "%d:%d %s %s%s" % (line, column, level, desc, f" ({rule})" if rule else ""),
            )


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
