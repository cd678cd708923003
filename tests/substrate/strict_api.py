# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""A Kubernetes API emulator as strict as a real API server.

``StrictKubeEmulator`` extends ``KubeEmulator`` (which stays lenient for the existing tests):

- A custom resource is served only once its CustomResourceDefinition exists. The CRDs are built
  from the schemas the project vendors (schemas/crds, the same files ``validate`` uses), grouped
  in ``CRD_BUNDLES`` by what installs them (a chart, a provider); deleting a CRD deletes its objects.
- Every write is validated against the schema: the CRD's openAPIV3Schema for custom resources, the
  kubernetes-validate strict schemas for built-in kinds. Wrong types, missing required fields and
  enum violations answer 422 Invalid with one cause per field (apimachinery NewInvalid). Unknown
  fields follow the request's ``fieldValidation``: Strict answers 400 BadRequest ("strict decoding
  error: unknown field ..."), Warn (the server's default) and Ignore drop them, as CRD pruning does.
  Server-side apply refuses unknown fields whatever the directive ("field not declared in schema").
- Server-side apply keeps ``metadata.managedFields`` per field manager: another manager's field
  with a different value is a 409 conflict unless ``force=true``; fields a manager stops applying
  are removed. Apply without ``fieldManager`` is 422.
- Updates of custom resources must carry a resourceVersion; a stale one is 409 Conflict.
- Finalizers cannot be added to an object being deleted; namespaces must exist and a terminating
  namespace takes no new objects.
- Admission webhooks of the providers (tests/substrate/webhooks.py, ported separately from the product's
  module_utils/admission.py): a denied create (and, for kinds whose ValidateUpdate reruns the create checks,
  update) answers the apiserver's ``admission webhook "<name>" denied the request: ...`` with the webhook's
  code (422 Invalid for NewInvalid, 403 Forbidden otherwise); ``feature_gates`` overrides the defaults.
- ownerReferences: deleting an owner deletes its dependents (propagationPolicy Background, the
  default, or Foreground) or strips the reference (Orphan), synchronously.

Error texts follow the upstream formats, checked at k8s.io/apimachinery v0.34.10
(pkg/api/errors/errors.go NewInvalid/NewConflict/NewApplyConflict, pkg/util/validation/field/errors.go,
pkg/util/managedfields/internal/conflict.go, structuredmerge.go, pkg/apis/meta/v1/validation),
k8s.io/apiserver v0.34.10 (pkg/endpoints/handlers/rest.go transformDecodeError and the default
directive Warn, pkg/registry/generic/registry/store.go), k8s.io/apiextensions-apiserver v0.34.10
(pkg/apiserver/validation/validation.go) and kube-openapi (pkg/validation/errors/schema.go).
CEL rules (x-kubernetes-validations) are judged by the emulator's own path (tests/substrate/cel_independent.py,
cel-python with tests/substrate/cel_k8s_library.py); a rule the own path cannot run refuses the write.
Transition rules (oldSelf) run only with optionalOldSelf, oldSelf being optional.none().
Built-in kinds are judged by tests/substrate/core_schemas.py.
This file imports none of krops' code: its verdicts are its own. The test run adds krops' validators beside them
as differentials (CORE_SCHEMA_CHECKS, CEL_CHECKS: tests/substrate/product_differential.py, installed by
tests/conftest.py), which refuse a write the two judge differently and never decide one.
Simplifications: lists are atomic for field ownership; a CRD's versions share one store, read in the
version asked for (strategy None); GC is synchronous.
"""

from __future__ import annotations

import base64
import copy
import datetime
import ipaddress
import itertools
import json
import os
import re
import ssl
import sys
import tempfile
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

from tests.substrate import webhooks
from tests.substrate.kube_emulator import (
    clone,
    KROPS_RESOURCES,
    ApiError,
    KubeEmulator,
    _Handler,
    _now,
    json_patch,
    merge_patch,
)

REPO = Path(__file__).resolve().parents[2]
SCHEMA_DIR = REPO / "schemas" / "crds"

# What installs which CRDs in the lifecycle: (group, kinds or None for the whole group).
CRD_BUNDLES = {
    "flux-operator": [("fluxcd.controlplane.io", None)],
    "flux": [
        ("source.toolkit.fluxcd.io", None),
        ("kustomize.toolkit.fluxcd.io", None),
        ("helm.toolkit.fluxcd.io", None),
        ("notification.toolkit.fluxcd.io", None),
    ],
    "cert-manager": [("cert-manager.io", None), ("acme.cert-manager.io", None)],
    "capi-operator": [("operator.cluster.x-k8s.io", None)],
    "cluster-api": [
        ("cluster.x-k8s.io", None),
        ("ipam.cluster.x-k8s.io", None),
        ("runtime.cluster.x-k8s.io", None),
        ("addons.cluster.x-k8s.io", ["ClusterResourceSet", "ClusterResourceSetBinding"]),
        ("clusterctl.cluster.x-k8s.io", None),
    ],
    "kubeadm-bootstrap": [("bootstrap.cluster.x-k8s.io", ["KubeadmConfig", "KubeadmConfigTemplate"])],
    "kubeadm-control-plane": [
        ("controlplane.cluster.x-k8s.io", ["KubeadmControlPlane", "KubeadmControlPlaneTemplate"])
    ],
    "docker": [
        (
            "infrastructure.cluster.x-k8s.io",
            [
                "DevCluster",
                "DevClusterTemplate",
                "DevMachine",
                "DevMachineTemplate",
                "DevMachinePool",
                "DevMachinePoolTemplate",
                "DockerCluster",
                "DockerClusterTemplate",
                "DockerMachine",
                "DockerMachineTemplate",
                "DockerMachinePool",
                "DockerMachinePoolTemplate",
            ],
        )
    ],
    "helm-addon": [("addons.cluster.x-k8s.io", ["HelmChartProxy", "HelmReleaseProxy"])],
}

# Kinds whose CRD is cluster-scoped (the JSON schemas do not say; the upstream CRDs do).
CLUSTER_SCOPED = {
    ("cert-manager.io", "ClusterIssuer"),
    ("infrastructure.cluster.x-k8s.io", "AWSClusterControllerIdentity"),
    ("infrastructure.cluster.x-k8s.io", "AWSClusterRoleIdentity"),
    ("infrastructure.cluster.x-k8s.io", "AWSClusterStaticIdentity"),
    ("infrastructure.cluster.x-k8s.io", "AzureClusterIdentity"),
    ("runtime.cluster.x-k8s.io", "ExtensionConfig"),
    # crossplane v2.3.4 cluster/crds/pkg.crossplane.io_{providers,deploymentruntimeconfigs}.yaml (scope: Cluster);
    # provider-upjet-aws v2.6.0 package/crds/aws.m.upbound.io_clusterproviderconfigs.yaml
    ("pkg.crossplane.io", "Provider"),
    ("pkg.crossplane.io", "DeploymentRuntimeConfig"),
    ("aws.m.upbound.io", "ClusterProviderConfig"),
}
# Plurals that are not kind + "s" (known ones from the emulator's table first).
_PLURALS = {(g, k): p for g, _v, k, p, _n in KROPS_RESOURCES}

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)
# metadata fields a client may send (ObjectMeta); anything else is an unknown field.
_OBJECT_META = {
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
}
# Metadata owned by the server, never by a field manager.
_SERVER_META = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "name",
    "namespace",
    "generateName",
)


def plural_of(group, kind):
    if (group, kind) in _PLURALS:
        return _PLURALS[(group, kind)]
    low = kind.lower()
    if low.endswith(("s", "x", "ch", "sh")):
        return low + "es"
    if low.endswith("y") and low[-2:-1] not in "aeiou":
        return low[:-1] + "ies"
    return low + "s"


def _version_key(version):
    """Kubernetes version priority: GA > beta > alpha, then by number."""
    match = re.match(r"^v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not match:
        return (-1, 0, 0, version)
    major, stage, minor = match.groups()
    return ({"alpha": 0, "beta": 1, None: 2}[stage], int(major), int(minor or 0), version)


class SchemaCatalog:
    """The vendored JSON schemas, indexed as (group, kind) -> {version: path}; CRD objects built from them."""

    def __init__(self, folder=SCHEMA_DIR):
        self.folder = Path(folder)
        self.index = {}
        for group_dir in sorted(p for p in self.folder.iterdir() if p.is_dir()):
            for path in sorted(group_dir.glob("*.json")):
                stem, _sep, version = path.stem.rpartition("_")
                self.index.setdefault((group_dir.name, stem), {})[version] = path
        self._kinds = {}
        self._group_kinds = {}  # (group, only) -> kinds

    def _kind_name(self, group, stem):
        """The CamelCase kind of a file stem, from the schema's own apiVersion/kind description or known tables."""
        key = (group, stem)
        if key not in self._kinds:
            known = {k.lower(): k for g, k in list(_PLURALS) + list(CLUSTER_SCOPED) if g == group}
            for bundle in CRD_BUNDLES.values():
                for g, kinds in bundle:
                    if g == group and kinds:
                        known.update({k.lower(): k for k in kinds})
            kind = known.get(stem)
            if kind is None:
                text = self.index[key][max(self.index[key], key=_version_key)].read_text(encoding="utf-8")
                found = re.search(r'"description":\s*"([A-Z][A-Za-z0-9]*) is ', text)
                kind = found.group(1) if found and found.group(1).lower() == stem else stem.capitalize()
            self._kinds[key] = kind
        return self._kinds[key]

    def kinds(self, group, only=None):
        """The kinds of group with a vendored schema (only: those, each required); remembered, the index is fixed."""
        key = (group, None if only is None else tuple(only))
        if key not in self._group_kinds:
            self._group_kinds[key] = self._find_kinds(group, only)
        return list(self._group_kinds[key])

    def _find_kinds(self, group, only):
        stems = sorted(s for g, s in self.index if g == group)
        kinds = [self._kind_name(group, s) for s in stems]
        if only is not None:
            missing = sorted(set(only) - set(kinds))
            if missing:
                raise KeyError("no vendored schema for {} in {} (schemas/crds)".format(", ".join(missing), group))
            kinds = [k for k in kinds if k in only]
        return kinds

    def crd(self, group, kind, versions=None):
        """A CustomResourceDefinition (apiextensions.k8s.io/v1) for group/kind from the vendored schemas."""
        available = self.index.get((group, kind.lower()))
        if not available:
            raise KeyError(f"no vendored schema for {group}/{kind} under {self.folder}")
        chosen = sorted(versions or available, key=_version_key)
        storage = chosen[-1]
        plural = plural_of(group, kind)
        entries = []
        for version in chosen:
            schema = json.loads(available[version].read_text(encoding="utf-8"))
            entry = {
                "name": version,
                "served": True,
                "storage": version == storage,
                "schema": {"openAPIV3Schema": schema},
            }
            if "status" in (schema.get("properties") or {}):
                entry["subresources"] = {"status": {}}
            entries.append(entry)
        return {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {
                "group": group,
                "scope": "Cluster" if (group, kind) in CLUSTER_SCOPED else "Namespaced",
                "names": {"kind": kind, "listKind": kind + "List", "plural": plural, "singular": kind.lower()},
                "versions": entries,
            },
        }

    def bundle(self, name):
        """CRD objects of a bundle in CRD_BUNDLES."""
        crds = []
        for group, kinds in CRD_BUNDLES[name]:
            for kind in self.kinds(group, kinds):
                crds.append(self.crd(group, kind))
        return crds


_CATALOG = None
_VALIDATORS = {}  # id(openAPIV3Schema) -> compiled validator


def catalog():
    global _CATALOG  # one index per process: it only reads files
    if _CATALOG is None:
        _CATALOG = SchemaCatalog()
    return _CATALOG


# --- field errors in apimachinery's format ------------------------------------------


def field_path(parts):
    text = ""
    for part in parts:
        text += "[%d]" % part if isinstance(part, int) else ("." if text else "") + str(part)
    return text


def _go_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _type_name(value):
    for kind, name in (
        (bool, "boolean"),
        (int, "integer"),
        (float, "number"),
        (str, "string"),
        (list, "array"),
        (dict, "object"),
        (type(None), "null"),
    ):
        if isinstance(value, kind):
            return name
    return type(value).__name__


class FieldError:
    """One field.Error: Type (cause reason), Field, BadValue, Detail."""

    TEXT = {
        "FieldValueRequired": "Required value",
        "FieldValueInvalid": "Invalid value",
        "FieldValueTypeInvalid": "Invalid value",
        "FieldValueNotSupported": "Unsupported value",
        "FieldValueForbidden": "Forbidden",
        "FieldValueDuplicate": "Duplicate value",
    }

    def __init__(self, type_, field, bad_value=None, detail=""):
        self.type, self.field, self.bad_value, self.detail = type_, field, bad_value, detail

    def body(self):
        text = self.TEXT[self.type]
        if self.type in ("FieldValueInvalid", "FieldValueTypeInvalid", "FieldValueNotSupported", "FieldValueDuplicate"):
            text += ": " + _go_value(self.bad_value)
        if self.detail:
            text += ": " + self.detail
        return text

    def __str__(self):
        return f"{self.field}: {self.body()}"


def invalid(qualified_kind, group, kind, name, errors):
    """apierrors.NewInvalid: 422, reason Invalid, one cause per field error."""
    messages = []
    for error in errors:
        if str(error) not in messages:
            messages.append(str(error))
    aggregate = messages[0] if len(messages) == 1 else "[{}]".format(", ".join(messages))
    exc = ApiError(422, "Invalid", f"{qualified_kind} {json.dumps(name)} is invalid: {aggregate}")
    exc.details = {
        "name": name,
        "group": group,
        "kind": kind,
        "causes": [{"reason": e.type, "message": e.body(), "field": e.field} for e in errors],
    }
    return exc


def _status_with_details(exc):
    body = exc.status()
    details = getattr(exc, "details", None)
    if details is not None:
        body["details"] = details
    return body


# --- the strict emulator -------------------------------------------------------------


def _secret_string_data(res, obj):
    """A v1 Secret's stringData is write-only: merged into data (base64) on write, overwriting, never output
    (core/v1 Secret API reference, field stringData)."""
    if res.group or res.plural != "secrets" or "stringData" not in obj:
        return obj
    obj = clone(obj)
    data = dict(obj.get("data") or {})
    for key, value in (obj.pop("stringData") or {}).items():
        data[key] = base64.b64encode(str(value).encode()).decode()
    if data:
        obj["data"] = data
    return obj


class StrictKubeEmulator(KubeEmulator):
    """KubeEmulator with schema validation, CRD-gated resources, field managers and garbage collection."""

    def __init__(self, name="emulator", kubernetes_version="v1.34.0", default_field_validation="Warn"):
        self.default_field_validation = default_field_validation
        self.warnings = []  # (path, warning) of Warn-directive writes, for assertions
        self._crd_schemas = {}  # (group, plural, version) -> openAPIV3Schema
        self._served = {}  # (group, plural) -> [versions]
        # (object key, manager, subresource, force) -> (schema epoch, patch, object it produced): see patch()
        self._applied = {}
        self._schema_epoch = 0  # bumped whenever the CRD schemas change (register, unregister, rollback)
        self.feature_gates = {}  # "<owner>/<gate>" -> bool over webhooks.DEFAULT_GATES
        super().__init__(name, kubernetes_version)

    # ---- CRDs ------------------------------------------------------------------------
    def install_bundle(self, *names):
        """Create the CRDs of CRD_BUNDLES entries (as their chart or provider would); returns their names."""
        created = []
        for name in names:
            for group, kinds in CRD_BUNDLES[name]:
                for kind in catalog().kinds(group, kinds):
                    crd_name = f"{plural_of(group, kind)}.{group}"
                    if ("apiextensions.k8s.io", "customresourcedefinitions", "", crd_name) not in self.objects:
                        self.create(catalog().crd(group, kind))
                    created.append(crd_name)
        return created

    def load_krops_crds(self):
        raise RuntimeError(
            "StrictKubeEmulator serves a custom resource only after its CRD exists: "
            "use install_bundle(...) or create the CustomResourceDefinition"
        )

    def _register_crd(self, crd):
        spec = crd.get("spec", {})
        group, plural = spec.get("group"), (spec.get("names") or {}).get("plural")
        served = [v for v in spec.get("versions", []) if v.get("served", True)]
        super()._register_crd(crd)
        self._schema_epoch += 1
        if served:
            storage = next((v["name"] for v in served if v.get("storage")), served[-1]["name"])
            res = self.resources[(group, plural)]
            res.version = storage
            res.subresources = tuple((next(v for v in served if v["name"] == storage).get("subresources") or {}).keys())
            self._served[(group, plural)] = [v["name"] for v in served]
            for version in served:
                schema = (version.get("schema") or {}).get("openAPIV3Schema")
                if schema is not None:
                    self._crd_schemas[(group, plural, version["name"])] = schema

    def _unregister_crd(self, crd):
        spec = crd.get("spec", {})
        group, plural = spec.get("group"), (spec.get("names") or {}).get("plural")
        res = self.resources.get((group, plural))
        if res is None:
            return
        self._schema_epoch += 1
        for key in [k for k in self.objects if k[:2] == (group, plural)]:
            gone = self.objects.pop(key)
            self._bump(gone)
            self._record("DELETED", res, gone)
        del self.resources[(group, plural)]
        self._served.pop((group, plural), None)
        for key in [k for k in self._crd_schemas if k[:2] == (group, plural)]:
            del self._crd_schemas[key]

    def _resource(self, group, version, plural):
        res = self.resources.get((group, plural))
        if res is not None and version != res.version and version in self._served.get((group, plural), ()):
            view = copy.copy(res)
            view.version = version
            return view
        return super()._resource(group, version, plural)

    def resource_for(self, api_version, kind):
        group, _sep, version = api_version.rpartition("/")
        for res in tuple(self.resources.values()):  # a snapshot: a request thread may register a CRD meanwhile
            if res.group == group and res.kind == kind:
                return (
                    self._resource(group, version, res.plural)
                    if version in self._served.get((group, res.plural), (res.version,))
                    else self._no_match(api_version, kind)
                )
        return self._no_match(api_version, kind)

    @staticmethod
    def _no_match(api_version, kind):
        group, _sep, version = api_version.rpartition("/")
        raise ApiError(
            404,
            "NotFound",
            'no matches for kind "{}" in version "{}"'.format(kind, f"{group}/{version}" if group else version),
        )

    def discovery(self, path):
        parts = path.strip("/").split("/")
        served_here = (
            parts[0] == "apis"
            and len(parts) == 3
            and any(g == parts[1] and parts[2] in vs for (g, _p), vs in self._served.items())
        )
        found = None if served_here else super().discovery(path)
        if served_here:
            group, version = parts[1], parts[2]
            entries = []
            for (g, plural), versions in sorted(self._served.items()):
                if g == group and version in versions:
                    view = self._resource(g, version, plural)
                    entries.append(view.describe())
                    entries += [
                        {
                            "name": f"{plural}/{s}",
                            "singularName": "",
                            "namespaced": view.namespaced,
                            "kind": view.kind,
                            "verbs": ["get", "patch", "update"],
                        }
                        for s in view.subresources
                    ]
            if entries:
                return {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": f"{group}/{version}",
                    "resources": entries,
                }
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if path == "/apis" and found:
            for entry in found["groups"]:
                extra = {v for (g, _p), vs in self._served.items() if g == entry["name"] for v in vs}
                known = {v["version"] for v in entry["versions"]}
                for version in sorted(extra - known, key=_version_key):
                    entry["versions"].append(
                        {"groupVersion": "{}/{}".format(entry["name"], version), "version": version}
                    )
                entry["versions"].sort(key=lambda v: _version_key(v["version"]), reverse=True)
        return found

    # ---- validation ------------------------------------------------------------------
    @staticmethod
    def _core_errors(api_version, kind, obj):
        """The schema errors of a built-in kind by the emulator's own validator (core_schemas.py; None: no bundled
        schema, the object is accepted as is), after the run's CORE_SCHEMA_CHECKS have seen them."""
        from tests.substrate import core_schemas

        validator = core_schemas.validator(api_version, kind)
        errors = None if validator is None else list(validator.iter_errors(obj))
        for check in CORE_SCHEMA_CHECKS:
            check(api_version, kind, obj, errors)
        return errors or []

    def _qualified(self, res):
        return f"{res.kind}.{res.group}" if res.group else res.kind

    def validate(self, res, obj, directive="Strict", apply=False):
        """The object as stored (unknown fields dropped unless refused); raises ApiError like the server."""
        obj = clone(obj)
        if "status" in obj and obj["status"] is None:  # the emulator's placeholder for "no status yet"
            del obj["status"]
        name = (obj.get("metadata") or {}).get("name") or ""
        schema = self._crd_schemas.get((res.group, res.plural, res.version))
        unknown = []
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            unknown += ["metadata." + k for k in sorted(meta) if k not in _OBJECT_META]
        errors = []
        if schema is not None:
            top = set((schema.get("properties") or {}).keys()) | {"apiVersion", "kind", "metadata"}
            unknown += sorted(k for k in obj if k not in top)
            unknown += self._unknown_in(schema, obj, [])
            pruned = self._prune(obj, unknown)
            errors = self._schema_errors(schema, pruned)
            if not errors:
                errors = cel_errors(schema, pruned)
        else:
            # CRDs themselves are trusted (they come from the vendored schemas); other built-in kinds are checked.
            pruned = obj
            if res.kind != "CustomResourceDefinition":
                for error in self._core_errors(res.api_version, res.kind, obj):
                    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
                        allowed = set((error.schema.get("properties") or {}).keys())
                        base = list(error.absolute_path)
                        unknown += [field_path(base + [k]) for k in sorted(error.instance) if k not in allowed]
                    else:
                        errors += self._convert(error)
                pruned = self._prune(obj, unknown)
        if (
            schema is not None
            and isinstance(meta, dict)
            and meta.get("name")
            and not _DNS_SUBDOMAIN.match(meta["name"])
        ):
            errors.append(FieldError("FieldValueInvalid", "metadata.name", meta["name"], _DNS_SUBDOMAIN_MSG))
        unknown = sorted(set(unknown))
        if unknown and apply:
            exc = ApiError(
                500,
                "InternalError",
                "failed to create typed patch object ({}/{}; {}, Kind={}): {}".format(
                    meta.get("namespace", "") if isinstance(meta, dict) else "",
                    name,
                    res.api_version,
                    res.kind,
                    "; ".join(f".{u}: field not declared in schema" for u in unknown),
                ),
            )
            raise exc
        if unknown and directive == "Strict":
            raise ApiError(
                400,
                "BadRequest",
                '{} in version "{}" cannot be handled as a {}: strict decoding error: {}'.format(
                    res.kind, res.version, res.kind, ", ".join(f'unknown field "{u}"' for u in unknown)
                ),
            )
        if unknown and directive == "Warn":
            self.warnings += [f'unknown field "{u}"' for u in unknown]
        if errors:
            raise invalid(self._qualified(res), res.group, res.kind, name, errors)
        return pruned

    def _unknown_in(self, schema, value, path):
        found = []
        if not isinstance(schema, dict) or schema.get("x-kubernetes-preserve-unknown-fields"):
            return found
        if isinstance(value, dict) and schema.get("type", "object") == "object":
            props = schema.get("properties")
            extra = schema.get("additionalProperties")
            for key, item in value.items():
                if path == [] and key in ("apiVersion", "kind", "metadata"):
                    continue
                if props is not None and key in props:
                    found += self._unknown_in(props[key], item, path + [key])
                elif isinstance(extra, dict):
                    found += self._unknown_in(extra, item, path + [key])
                elif props is not None and path and extra is not True:
                    found.append(field_path(path + [key]))
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            for index, item in enumerate(value):
                found += self._unknown_in(schema["items"], item, path + [index])
        return found

    @staticmethod
    def _prune(obj, unknown):
        pruned = clone(obj)
        for dotted in unknown:
            parts = re.findall(r"[^.\[\]]+|\[\d+\]", dotted)
            node = pruned
            for part in parts[:-1]:
                node = node[int(part[1:-1])] if part.startswith("[") else node.get(part, {})
            if isinstance(node, dict):
                node.pop(parts[-1], None)
        return pruned

    def _schema_errors(self, schema, obj):
        import jsonschema

        body = {k: v for k, v in obj.items() if k != "metadata"}
        validator = _VALIDATORS.get(id(schema))
        if validator is None or validator.schema is not schema:
            validator = _VALIDATORS[id(schema)] = jsonschema.Draft7Validator(schema)
        errors = []
        for error in sorted(validator.iter_errors(body), key=lambda e: list(map(str, e.absolute_path))):
            if error.validator == "additionalProperties":
                continue  # reported as unknown fields
            errors += self._convert(error)
        return errors

    @staticmethod
    def _convert(error):
        path = list(error.absolute_path)
        where = field_path(path)
        if error.validator == "required" and isinstance(error.instance, dict):
            return [
                FieldError("FieldValueRequired", field_path(path + [k]))
                for k in error.validator_value
                if k not in error.instance
            ]
        if error.validator == "type":
            wanted = (
                error.validator_value if isinstance(error.validator_value, str) else ",".join(error.validator_value)
            )
            actual = _type_name(error.instance)
            return [
                FieldError(
                    "FieldValueTypeInvalid",
                    where,
                    actual,
                    f'{where} in body must be of type {wanted}: "{actual}"',
                )
            ]
        if error.validator == "enum":
            values = ", ".join(json.dumps(v if isinstance(v, str) else json.dumps(v)) for v in error.validator_value)
            return [FieldError("FieldValueNotSupported", where, error.instance, "supported values: " + values)]
        return [
            FieldError(
                "FieldValueInvalid",
                where,
                error.instance,
                "{} in body {}".format(where, re.sub(r"^.*? (is|does|should) ", r"\1 ", error.message)),
            )
        ]

    # ---- writes ----------------------------------------------------------------------
    def _admit(self, res, obj, operation):
        """The validating webhooks run after the schema (apiserver: admission after the strategy's validation)."""
        answer = webhooks.denial(res.group, res.kind, obj, operation, self.feature_gates)
        if answer is not None:
            code, reason, message, details = answer
            exc = ApiError(code, reason, message)
            if details is not None:
                exc.details = details
            raise exc

    def _check_namespace(self, res, namespace):
        super()._check_namespace(res, namespace)
        if res.namespaced:
            ns = self.objects.get(("", "namespaces", "", namespace))
            if ns and ns["metadata"].get("deletionTimestamp"):
                raise ApiError(
                    403,
                    "Forbidden",
                    f"unable to create new content in namespace {namespace} because it is being terminated",
                )

    def create(self, obj, namespace=None, res=None, directive=None, manager=None, operation="Update"):
        with self._cond:
            res = res or self.resource_for(obj.get("apiVersion", ""), obj.get("kind", ""))
            obj = _secret_string_data(res, self.validate(res, obj, directive or "Ignore", apply=operation == "Apply"))
            self._admit(res, obj, "CREATE")
            created = super().create(obj, namespace, res)
            stored = self.objects[self._key(res, created["metadata"].get("namespace"), created["metadata"]["name"])]
            if manager:
                stored["metadata"]["managedFields"] = [self._entry(manager, operation, res, _leaves(obj))]
            return clone(stored)

    def replace(self, res, namespace, name, body, subresource=None, directive=None, manager=None):
        with self._cond:
            current = self._get(res, namespace, name)
            if (
                not (body.get("metadata") or {}).get("resourceVersion")
                and res.group
                and (res.group, res.plural) in self._served
            ):
                raise invalid(
                    f"{res.plural}.{res.group}",
                    res.group,
                    res.plural,
                    name,
                    [FieldError("FieldValueInvalid", "metadata.resourceVersion", 0, "must be specified for an update")],
                )
            sent_rv = (body.get("metadata") or {}).get("resourceVersion")
            if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
                raise self._conflict(res, name)
            body = self._checked(res, current, body, subresource, directive or "Ignore")
            return self._owned_update(
                res, current, super().replace(res, namespace, name, body, subresource), manager, subresource
            )

    def patch(
        self, res, namespace, name, patch_type, patch, subresource=None, field_manager=None, directive=None, force=False
    ):
        with self._cond:
            key = self._key(res, namespace if res.namespaced else "", name)
            if patch_type == "apply":
                if not field_manager:
                    raise invalid(
                        "PatchOptions.meta.k8s.io",
                        "meta.k8s.io",
                        "PatchOptions",
                        "",
                        [FieldError("FieldValueRequired", "fieldManager", detail="is required for apply patch")],
                    )
                if key not in self.objects:
                    body = clone(patch)
                    body.setdefault("metadata", {})["name"] = name
                    if subresource:
                        raise ApiError(404, "NotFound", f'{res.plural}.{res.group} "{name}" not found')
                    return self.create(body, namespace, res, directive, field_manager, "Apply")
                if self.reapplies(key, patch, field_manager, subresource, force):
                    return clone(self.objects[key])
                result = self._apply(res, self.objects[key], patch, field_manager, force, subresource)
                if key in self.objects:
                    self._applied[(key, field_manager, subresource, bool(force))] = (
                        self._schema_epoch,
                        json.dumps(patch, sort_keys=True),
                        clone(self.objects[key]),
                    )
                return result
            current = self._get(res, namespace, name)
            sent_rv = (patch.get("metadata") or {}).get("resourceVersion") if isinstance(patch, dict) else None
            if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
                raise self._conflict(res, name)
            updated = json_patch(current, patch) if patch_type == "json" else merge_patch(current, patch)
            updated = self._checked(res, current, updated, subresource, directive or "Ignore")
            stored = self._store(res, current, updated, subresource)
            return self._owned_update(res, current, stored, field_manager, subresource)

    def reapplies(self, key, patch, manager, subresource=None, force=False):
        """True when this apply is the last one again: same configuration and manager, on the object that apply
        produced (unchanged since) under the same CRD schemas. Apply is a function of those and idempotent, so
        a server changes nothing; patch() answers it without redoing validation and field management."""
        if (patch.get("metadata") or {}).get("resourceVersion"):
            return False  # a precondition: _apply checks it against the live object (409 when it moved)
        seen = self._applied.get((key, manager, subresource, bool(force)))
        # the JSON text, not ==: True == 1 in Python, but a boolean field refuses 1
        return (
            bool(seen)
            and seen[0] == self._schema_epoch
            and seen[1] == json.dumps(patch, sort_keys=True)
            and seen[2] == self.objects.get(key)
        )

    def _conflict(self, res, name):
        qualified = f"{res.plural}.{res.group}" if res.group else res.plural
        exc = ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {qualified} "{name}": the object has been modified; '
            "please apply your changes to the latest version and try again",
        )
        exc.details = {"name": name, "group": res.group, "kind": res.plural}
        return exc

    def _checked(self, res, current, body, subresource, directive):
        """Validate the object that would result from a write (status writes check the status schema)."""
        candidate = clone(current)
        if subresource == "status":
            candidate["status"] = clone(body.get("status"))
        else:
            candidate.update({k: v for k, v in body.items() if k != "status"})
        checked = self.validate(res, candidate, directive)
        if subresource is None:
            self._admit(res, checked, "UPDATE")
        new_finalizers = set((body.get("metadata") or {}).get("finalizers") or []) - set(
            current["metadata"].get("finalizers") or []
        )
        if current["metadata"].get("deletionTimestamp") and new_finalizers and subresource != "status":
            raise invalid(
                self._qualified(res),
                res.group,
                res.kind,
                current["metadata"]["name"],
                [
                    FieldError(
                        "FieldValueForbidden",
                        "metadata.finalizers",
                        detail="no new finalizers can be added if the object is being deleted, found new finalizers "
                        + _go_string_slice(sorted(new_finalizers)),
                    )
                ],
            )
        result = clone(body)
        if subresource == "status":
            result["status"] = checked.get("status")
        else:
            for key in list(result):
                if key != "status" and key not in checked:
                    del result[key]
                elif key != "status":
                    result[key] = checked[key]
        return result

    # ---- field managers --------------------------------------------------------------
    def _entry(self, manager, operation, res, leaves, subresource=None):
        entry = {
            "manager": manager,
            "operation": operation,
            "apiVersion": res.api_version,
            "time": _now(),
            "fieldsType": "FieldsV1",
            "fieldsV1": _fields_v1(leaves),
        }
        if subresource:
            entry["subresource"] = subresource
        return entry

    def _owned_update(self, res, before, stored, manager, subresource):
        """Fields changed by a non-apply write become the manager's (operation Update)."""
        key = self._key(res, stored["metadata"].get("namespace"), stored["metadata"]["name"])
        live = self.objects.get(key)
        if live is None or live["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]:
            return stored
        manager = manager or "unknown"
        changed = {p for p in _leaves(live) ^ _leaves(before) if p in _leaves(live)} | {
            p for p in _leaves(live) if _get_path(live, p) != _get_path(before, p)
        }
        entries = []
        for entry in live["metadata"].get("managedFields") or []:
            owned = _from_fields_v1(entry.get("fieldsV1") or {}) - changed
            if (
                entry["manager"] == manager
                and entry["operation"] == "Update"
                and entry.get("subresource") == subresource
            ):
                changed |= owned
                continue
            if owned:
                entries.append(dict(entry, fieldsV1=_fields_v1(owned)))
        if changed:
            entries.append(self._entry(manager, "Update", res, changed, subresource))
        live["metadata"]["managedFields"] = _in_upstream_order(entries)
        return clone(live)

    def _apply(self, res, current, patch, manager, force, subresource):
        patch = clone(patch)
        merged = self.validate(
            res, dict(current, **{k: v for k, v in patch.items() if k != "metadata"}), "Strict", apply=True
        )
        if subresource is None:
            self._admit(res, merged, "UPDATE")
        sent_rv = (patch.get("metadata") or {}).get("resourceVersion")
        if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
            raise self._conflict(res, current["metadata"]["name"])
        if subresource == "status":
            patch = {"status": patch.get("status") or {}}
        else:
            patch.pop("status", None) if "status" in res.subresources else None
        applied = _leaves(patch)
        entries = clone(current["metadata"].get("managedFields") or [])
        mine = next(
            (
                e
                for e in entries
                if e["manager"] == manager and e["operation"] == "Apply" and e.get("subresource") == subresource
            ),
            None,
        )
        previously = _from_fields_v1(mine["fieldsV1"]) if mine else set()
        conflicts = []
        for entry in entries:
            if entry is mine:
                continue
            owned = _from_fields_v1(entry.get("fieldsV1") or {})
            for path in sorted(applied & owned):
                if _get_path(current, path) != _get_path(patch, path):
                    conflicts.append((entry, path))
        if conflicts and not force:
            causes = [
                {
                    "reason": "FieldManagerConflict",
                    "message": f"conflict with {_print_manager(e)}",
                    "field": _smd_path(p),
                }
                for e, p in conflicts
            ]
            if len(conflicts) == 1:
                message = f"Apply failed with 1 conflict: conflict with {_print_manager(conflicts[0][0])}: {_smd_path(conflicts[0][1])}"
            else:
                lines = []
                for entry in sorted({id(e): e for e, _field in conflicts}.values(), key=lambda e: e["manager"]):
                    lines.append(f"conflicts with {_print_manager(entry)}:")
                    lines += [f"- {_smd_path(p)}" for e, p in conflicts if e is entry]
                message = "Apply failed with %d conflicts: %s" % (len(conflicts), "\n".join(lines))
            exc = ApiError(409, "Conflict", message)
            exc.details = {"causes": causes}
            raise exc
        others = set()
        for entry in entries:
            if entry is not mine:
                if force:  # forcing takes the conflicting fields only; equal values stay shared
                    taken = {p for e, p in conflicts if e is entry}
                    entry["fieldsV1"] = _fields_v1(_from_fields_v1(entry.get("fieldsV1") or {}) - taken)
                others |= _from_fields_v1(entry.get("fieldsV1") or {})
        new = clone(current)
        for path in sorted(previously - applied - others, key=len, reverse=True):
            _del_path(new, path)
        new = merge_patch(new, _strip_nulls(patch))
        entry = self._entry(manager, "Apply", res, applied, subresource)
        if mine and mine.get("fieldsV1") == entry["fieldsV1"]:
            entry["time"] = mine.get("time")  # the same apply again changes nothing, not even the time
        new["metadata"]["managedFields"] = _in_upstream_order(
            [e for e in entries if e is not mine and e.get("fieldsV1")] + [entry]
        )
        if new["metadata"].get("deletionTimestamp"):
            added = set(new["metadata"].get("finalizers") or []) - set(current["metadata"].get("finalizers") or [])
            if added:
                self._checked(res, current, new, None, "Ignore")
        stored = self._store(res, current, new, subresource)
        live = self.objects.get(self._key(res, stored["metadata"].get("namespace"), stored["metadata"]["name"]))
        if live is not None and live["metadata"].get("managedFields") != new["metadata"]["managedFields"]:
            live["metadata"]["managedFields"] = new["metadata"]["managedFields"]
        return clone(live if live is not None else stored)

    # ---- deletion and garbage collection ------------------------------------------------
    def delete(self, res, namespace, name, propagation=None, preconditions=None):
        with self._cond:
            current = self._get(res, namespace, name)
            if preconditions:
                for field in ("uid", "resourceVersion"):
                    if preconditions.get(field) and preconditions[field] != current["metadata"].get(field):
                        raise ApiError(
                            409,
                            "Conflict",
                            "Precondition failed: {} in precondition: {}, {} in object meta: {}".format(
                                "UID" if field == "uid" else "ResourceVersion",
                                preconditions[field],
                                "UID" if field == "uid" else "ResourceVersion",
                                current["metadata"].get(field),
                            ),
                        )
            uid = current["metadata"]["uid"]
            if res.plural == "namespaces" and not res.group:
                return self._delete_namespace(res, current)
            if propagation == "Foreground" and self._dependents(uid):
                key = self._key(res, namespace, name)
                meta = self.objects[key]["metadata"]
                meta.setdefault("finalizers", [])
                if "foregroundDeletion" not in meta["finalizers"]:
                    meta["finalizers"].append("foregroundDeletion")
                meta.setdefault("deletionTimestamp", _now())
                self._bump(self.objects[key])
                self._record("MODIFIED", res, self.objects[key])
                self._collect(uid, "Foreground")  # finishes the owner once its dependents are gone
                obj = self.objects.get(key)
                return (
                    clone(obj) if obj else dict(current, metadata=dict(current["metadata"], deletionTimestamp=_now()))
                )
            if propagation == "Orphan":
                self._orphan(uid)
            gone = super().delete(res, namespace, name)
            if self._key(res, namespace, name) not in self.objects:
                self._gone(res, gone, propagation)
            return gone

    def _gone(self, res, gone, propagation=None):
        """After an object left the store: CRD cleanup, garbage collection, a terminating namespace finishing."""
        if res.group == "apiextensions.k8s.io" and res.kind == "CustomResourceDefinition":
            self._unregister_crd(gone)
        self._collect(gone["metadata"]["uid"], propagation or "Background")
        namespace = gone["metadata"].get("namespace")
        ns = self.objects.get(("", "namespaces", "", namespace)) if namespace else None
        if (
            ns
            and ns["metadata"].get("deletionTimestamp")
            and not any(k[2] == namespace and self.resources[k[:2]].namespaced for k in self.objects)
        ):
            self._finish(self.resources[("", "namespaces")], ("", "namespaces", "", namespace))

    def _finish(self, res, key):
        obj = self.objects[key]
        if obj["metadata"].get("finalizers"):
            self._bump(obj)
            self._record("MODIFIED", res, obj)
            return clone(obj)
        del self.objects[key]
        self._bump(obj)
        self._record("DELETED", res, obj)
        return clone(obj)

    def _delete_namespace(self, res, current):
        """Namespace deletion: terminating while its content goes, then removed (namespace controller)."""
        name = current["metadata"]["name"]
        key = self._key(res, None, name)
        ns = self.objects[key]
        if not ns["metadata"].get("deletionTimestamp"):
            ns["metadata"]["deletionTimestamp"] = _now()
            ns.setdefault("status", {})["phase"] = "Terminating"
            self._bump(ns)
            self._record("MODIFIED", res, ns)
        for obj_key in [k for k in self.objects if k[2] == name and self.resources[(k[0], k[1])].namespaced]:
            if obj_key in self.objects:
                inner = self.resources[(obj_key[0], obj_key[1])]
                self.delete(inner, name, obj_key[3])
        left = [k for k in self.objects if k[2] == name and self.resources[(k[0], k[1])].namespaced]
        if left:
            return clone(ns)
        return self._finish(res, key)

    def _dependents(self, uid):
        return [
            k
            for k, o in self.objects.items()
            if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])
        ]

    def _orphan(self, uid):
        for key in self._dependents(uid):
            obj = self.objects[key]
            obj["metadata"]["ownerReferences"] = [r for r in obj["metadata"]["ownerReferences"] if r.get("uid") != uid]
            if not obj["metadata"]["ownerReferences"]:
                del obj["metadata"]["ownerReferences"]
            self._bump(obj)
            self._record("MODIFIED", self.resources[key[:2]], obj)

    def _collect(self, uid, propagation):
        """The garbage collector: dependents whose every owner is gone are deleted; others lose the reference."""
        live_uids = {o["metadata"]["uid"] for o in self.objects.values()}
        for key in self._dependents(uid):
            obj = self.objects.get(key)
            if obj is None:
                continue
            refs = obj["metadata"].get("ownerReferences") or []
            if any(r.get("uid") in live_uids and r.get("uid") != uid for r in refs):
                self._orphan_one(key, uid)
                continue
            res = self.resources[key[:2]]
            self.delete(res, key[2] or None, key[3], propagation)
        # A foreground owner waiting on its dependents finishes when they are gone.
        for key, obj in list(self.objects.items()):
            meta = obj["metadata"]
            if "foregroundDeletion" in (meta.get("finalizers") or []) and not self._dependents(meta["uid"]):
                meta["finalizers"].remove("foregroundDeletion")
                self._finish(self.resources[key[:2]], key)

    def _orphan_one(self, key, uid):
        obj = self.objects[key]
        obj["metadata"]["ownerReferences"] = [r for r in obj["metadata"]["ownerReferences"] if r.get("uid") != uid]
        self._bump(obj)
        self._record("MODIFIED", self.resources[key[:2]], obj)

    def _store(self, res, current, body, subresource):
        stored = super()._store(res, current, _secret_string_data(res, body), subresource)
        key = self._key(res, stored["metadata"].get("namespace"), stored["metadata"]["name"])
        if key not in self.objects:  # the last finalizer went: the object is gone, so are its dependents
            self._gone(res, stored)
        return stored

    def remove(self, api_version, kind, name, namespace=None, propagation=None):
        res = self.resource_for(api_version, kind)
        return self.delete(res, namespace, name, propagation)

    # ---- all-or-nothing writes (Flux's dry-run of a stage) ------------------------------
    def savepoint(self):
        """A cheap restore point: the caller copies an object into ``point["objects"]`` before changing it."""
        return {
            "objects": {},
            "rv": self._last_rv,
            "resources": dict(self.resources),
            "served": dict(self._served),
            "schemas": dict(self._crd_schemas),
            "keys": set(self.objects),
        }

    def rollback(self, point):
        for key in set(self.objects) - point["keys"]:
            del self.objects[key]
        self.objects.update(point["objects"])
        self.resources, self._served, self._crd_schemas = point["resources"], point["served"], point["schemas"]
        # the events after the savepoint are the ones above its resourceVersion; not a cut at the history's length
        # then: the history may have been trimmed or replaced since (``_restore``). In place: watchers read this list.
        cut = len(self.events)  # the history is in resourceVersion order: walk back only over what came after
        while cut and self.events[cut - 1][0] > point["rv"]:
            cut -= 1
        del self.events[cut:]
        self._last_rv = point["rv"]
        self._rv = itertools.count(point["rv"] + 1)
        self._schema_epoch += 1

    # ---- HTTP ------------------------------------------------------------------------
    def start(self, host="127.0.0.1", port=0, tls=False):
        """Serve on host:port; with ``tls`` over HTTPS (a test CA, in the kubeconfig as certificate-authority-data)."""
        handler = type("StrictHandler", (_StrictHandler,), {"emulator": self})
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self.tls = bool(tls)
        if self.tls:
            # the handshake happens on the handler's first read, in its own thread, not in accept()
            self._server.socket = tls_context().wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )
            default = self._server.handle_error

            def quiet(request, address):  # a client hanging up on a watch is not an error
                if not isinstance(sys.exc_info()[1], (ssl.SSLError, ConnectionError)):
                    default(request, address)

            self._server.handle_error = quiet
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"kube-{self.name}", daemon=True)
        self._thread.start()
        return self

    @property
    def url(self):
        host, port = self._server.server_address[:2]
        return "%s://%s:%d" % ("https" if getattr(self, "tls", False) else "http", host, port)

    def kubeconfig(self, context=None, cluster=None, user=None, namespace=None):
        config = super().kubeconfig(context, cluster, user, namespace)
        if getattr(self, "tls", False):
            config["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(
                tls_material()[0]
            ).decode()
        return config


_TLS = {}


def tls_material():
    """(certificate PEM, key PEM, folder): one self-signed CA certificate for 127.0.0.1 per process."""
    if "pem" not in _TLS:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "krops emulated API server")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(key, hashes.SHA256())
        )
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        folder = tempfile.mkdtemp(prefix="krops-emulator-tls-")
        for file_name, data in (("ca.crt", cert_pem), ("server.key", key_pem)):
            path = os.path.join(folder, file_name)
            with open(path, "wb") as handle:
                handle.write(data)
            os.chmod(path, 0o600)
        _TLS["pem"] = (cert_pem, key_pem, folder)
    return _TLS["pem"]


def tls_context():
    if "context" not in _TLS:
        cert_pem, _key, folder = tls_material()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(os.path.join(folder, "ca.crt"), os.path.join(folder, "server.key"))
        _TLS["context"] = context
    return _TLS["context"]


def _go_string_slice(values):
    return "[]string{{{}}}".format(", ".join(json.dumps(v) for v in values))


# --- the run's differentials --------------------------------------------------------------
# Checks the test run adds beside the emulator's own verdicts (tests/substrate/product_differential.py, installed by
# tests/conftest.py): each sees a verdict and may refuse the write (ApiError 500) when krops' code judges the object
# otherwise; none changes a verdict. Empty here: the emulator judges alone.
CORE_SCHEMA_CHECKS = []  # check(api_version, kind, obj, errors): the own validator's errors, None without a schema
CEL_CHECKS = []  # check(obj, schema, verdicts): cel_independent.verdicts of the object

# --- CEL rules (x-kubernetes-validations) ------------------------------------------------
# The verdict is the emulator's own CEL path (tests/substrate/cel_independent.py: cel-python, the Kubernetes CEL
# libraries written for it from upstream's Go sources in tests/substrate/cel_k8s_library.py, and its own schema
# walk). A rule the emulator's path cannot run is listed in UNEVALUATED and the write is refused (500), never
# guessed and never taken on krops' word.

UNEVALUATED = set()  # rules the emulator's own path could not run: every write that reached one was refused


def cel_errors(schema, obj):
    """Field errors of the CEL rules of a CRD schema, as apiextensions reports them.

    A failing rule is ``<path>: Invalid value: "<type>": <message or 'failed rule: <rule>'>`` (the root
    path prints as ``<nil>``), or Forbidden/Required when the rule names that reason; a rule whose evaluation
    fails is ``<path>: Invalid value: "<type>": <error> evaluating rule: <rule>``
    (apiextensions-apiserver v0.34.10 pkg/apiserver/schema/cel/validation.go). Transition rules (``oldSelf``)
    run only with ``optionalOldSelf``, with oldSelf = optional.none(): the emulator hands no old object.
    """
    from tests.substrate import cel_independent

    verdicts = cel_independent.verdicts(obj, schema)
    for check in CEL_CHECKS:
        check(obj, schema, verdicts)
    refused = sorted((key[1], v.message) for key, v in verdicts.items() if v.outcome == cel_independent.UNSUPPORTED)
    if refused:
        UNEVALUATED.update(rule for rule, _why in refused)
        raise ApiError(
            500, "InternalError", f"the emulator cannot evaluate these CEL rules, so it judges nothing: {refused}"
        )
    failed = [
        (key[0], v.message, v.reason, v.schema_type)
        for key, v in verdicts.items()
        if v.outcome in (cel_independent.VIOLATED, cel_independent.ERROR)
    ]
    return [
        FieldError(reason, path or "<nil>", schema_type, message)
        if reason == "FieldValueInvalid"
        else FieldError(reason, path or "<nil>", None, message)
        for path, message, reason, schema_type in failed
    ]


# --- field sets ------------------------------------------------------------------------


def _leaves(obj, prefix=()):
    """Paths (tuples) of the fields an object sets; lists are atomic, server metadata excluded."""
    found = set()
    if not isinstance(obj, dict):
        return found
    for key, value in obj.items():
        path = prefix + (key,)
        if not prefix and key in ("apiVersion", "kind"):
            continue
        if prefix == ("metadata",) and key in _SERVER_META:
            continue
        if isinstance(value, dict) and value:
            found |= _leaves(value, path)
        else:
            found.add(path)
    return found


def _fields_v1(leaves):
    tree = {}
    for path in sorted(leaves):
        node = tree
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return tree


def _in_upstream_order(entries):
    """managedFields as kube-apiserver stores them: by operation (Apply before Update), time, manager, apiVersion,
    subresource (k8s.io/apimachinery pkg/util/managedfields/internal/managedfields.go sortEncodedManagedFields).
    So the same apply again stores the same list: a no-op, with no new resourceVersion."""
    return sorted(
        entries,
        key=lambda e: (
            e.get("operation") or "",
            e.get("time") or "",
            e.get("manager") or "",
            e.get("apiVersion") or "",
            e.get("subresource") or "",
        ),
    )


def _from_fields_v1(tree, prefix=()):
    found = set()
    for key, value in tree.items():
        path = prefix + (key[2:],)
        if value:
            found |= _from_fields_v1(value, path)
        else:
            found.add(path)
    return found


_MISSING = object()


def _get_path(obj, path):
    node = obj
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _del_path(obj, path):
    parents = [obj]
    for part in path[:-1]:
        node = parents[-1].get(part) if isinstance(parents[-1], dict) else None
        if not isinstance(node, dict):
            return
        parents.append(node)
    parents[-1].pop(path[-1], None)
    for depth in range(len(path) - 1, 0, -1):  # drop maps left empty by the removal
        if parents[depth] == {}:
            parents[depth - 1].pop(path[depth - 1], None)


def _strip_nulls(value):
    if isinstance(value, dict):
        return {k: _strip_nulls(v) for k, v in value.items() if v is not None}
    return value


def _smd_path(path):
    return "".join(f".{p}" for p in path)


def _print_manager(entry):
    text = json.dumps(entry["manager"])
    if entry.get("subresource"):
        text += " with subresource {}".format(json.dumps(entry["subresource"]))
    if entry.get("operation") == "Update":
        stamp = entry.get("time")
        text += " using {}".format(entry.get("apiVersion")) + (f" at {stamp}" if stamp else "")
    return text


class _StrictHandler(_Handler):
    """Reads fieldValidation, fieldManager, force and DeleteOptions; answers errors with their details."""

    def _send_error(self, exc):
        return self._send(exc.code, _status_with_details(exc))

    def _dispatch(self, method, path, query):
        emulator = self.emulator
        directive = query.get("fieldValidation") or emulator.default_field_validation
        if directive not in ("Strict", "Warn", "Ignore"):
            return self._send_error(
                ApiError(
                    400,
                    "BadRequest",
                    f'fieldValidation: Unsupported value: "{directive}": supported values: "Ignore", "Strict", "Warn"',
                )
            )
        manager = query.get("fieldManager") or (self.headers.get("User-Agent") or "unknown").split("/")[0]
        if method == "GET":
            try:
                with emulator._cond:
                    routed = emulator.discovery(path) is None and emulator.route(path)
            except ApiError:
                routed = None
            if routed and routed[2] and not routed[3] and query.get("watch") not in ("true", "1"):
                if self._faulted(method, path):
                    return None
                injected = emulator._injected(method, path)
                if injected:
                    return self._send_error(injected)
                res, namespace, name, _sub = routed
                try:  # conversion strategy None: the object in the version asked for
                    with emulator._cond:
                        obj = clone(emulator._get(res, namespace, name))
                except ApiError as exc:
                    return self._send_error(exc)
                obj["apiVersion"] = res.api_version
                return self._send(200, obj)
            return super()._dispatch(method, path, query)
        try:
            res, namespace, name, sub = emulator.route(path)
            if method == "DELETE" and name is None:  # deletecollection
                return super()._dispatch(method, path, query)
            if self._faulted(method, path):  # the writes answered here: a reset or stall armed for them applies
                return None
            injected = emulator._injected(method, path)
            if injected:
                raise injected
            if method == "POST" and name is None:
                return self._send(201, emulator.create(self._body(), namespace, res, directive, manager))
            if method == "PUT" and name:
                return self._send(200, emulator.replace(res, namespace, name, self._body(), sub, directive, manager))
            if method == "PATCH" and name:
                ctype = (self.headers.get("Content-Type") or "").strip()
                patch_type = {
                    "application/merge-patch+json": "merge",
                    "application/json-patch+json": "json",
                    "application/strategic-merge-patch+json": "strategic",
                    "application/apply-patch+yaml": "apply",
                }.get(ctype.split(";")[0].strip())
                if patch_type is None:
                    raise ApiError(
                        415,
                        "UnsupportedMediaType",
                        "the body of the request was in an unknown format - "
                        "accepted media types include: application/json-patch+json, "
                        "application/merge-patch+json, application/apply-patch+yaml",
                    )
                if patch_type != "apply" and query.get("force"):
                    raise invalid(
                        "PatchOptions.meta.k8s.io",
                        "meta.k8s.io",
                        "PatchOptions",
                        "",
                        [FieldError("FieldValueForbidden", "force", detail="may not be specified for non-apply patch")],
                    )
                body = self._body()
                return self._send(
                    200,
                    emulator.patch(
                        res,
                        namespace,
                        name,
                        patch_type,
                        body,
                        sub,
                        query.get("fieldManager") if patch_type == "apply" else manager,
                        directive,
                        query.get("force") in ("true", "1"),
                    ),
                )
            if method == "DELETE" and name:
                options = self._body() or {}
                propagation = query.get("propagationPolicy") or options.get("propagationPolicy")
                if options.get("orphanDependents") is True:
                    propagation = "Orphan"
                return self._send(200, emulator.delete(res, namespace, name, propagation, options.get("preconditions")))
            return super()._dispatch(method, path, query)
        except ApiError as exc:
            return self._send_error(exc)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            return self._send_error(ApiError(400, "BadRequest", f"bad request: {exc}"))

    def _list_body(self, res, namespace, query):
        body = super()._list_body(res, namespace, query)
        for item in body["items"]:
            item["apiVersion"] = res.api_version
        return body

    def _send(self, code, body):
        warnings, self.emulator.warnings[:] = list(self.emulator.warnings), []
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for warning in warnings:  # RFC 7234 warning headers, as the API server sends them
            self.send_header("Warning", f"299 - {json.dumps(warning)}")
        self.end_headers()
        self.wfile.write(data)


__all__ = [
    "CRD_BUNDLES",
    "FieldError",
    "SchemaCatalog",
    "StrictKubeEmulator",
    "catalog",
    "field_path",
    "invalid",
    "plural_of",
]
