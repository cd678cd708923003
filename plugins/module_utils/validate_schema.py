# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""JSON-schema lookup and validation of Kubernetes objects, kubeconform-style.

- Built-in kinds: the strict schemas bundled in the ``kubernetes-validate`` package.
  Their ``$ref`` point at https://kubernetes.io/api/_definitions.json, which is
  preloaded from the package into a ``referencing`` registry (never fetched).
- Custom resources: a folder or an HTTPS URL template in kubeconform's
  ``{group}/{kind}_{version}.json`` layout (kubeconform's ``{{.Group}}``,
  ``{{.ResourceKind}}``, ``{{.ResourceAPIVersion}}`` placeholders work too).
  HTTPS fetches use a timeout and are cached for the run.
"""

from __future__ import annotations

import copy
import json
import os
import re
import threading
import urllib.error

from ansible_collections.krops.platform.plugins.module_utils import errors

try:
    from ansible.module_utils.urls import ConnectionError as UrlConnectionError
    from ansible.module_utils.urls import Request, make_context
except ImportError:  # pragma: no cover - ansible-core is always there where krops runs
    Request = None

    class UrlConnectionError(Exception):
        pass


try:
    import jsonschema
    import referencing
    import referencing.jsonschema

    HAS_JSONSCHEMA = True
    JSONSCHEMA_IMPORT_ERROR = None
except ImportError as exc:  # reported by the caller
    HAS_JSONSCHEMA = False
    JSONSCHEMA_IMPORT_ERROR = exc

# The schemas vendored in the GitOps repository (schemas/crds/README.md), relative to its root:
# validate works offline by default. The public catalog is one option away:
# PUBLIC_CATALOG below, or any folder or https template in kubeconform's layout.
DEFAULT_SCHEMA_LOCATION = "schemas/crds"
PUBLIC_CATALOG = "https://raw.githubusercontent.com/datreeio/CRDs-catalog/main/{group}/{kind}_{version}.json"
CORE_SCHEMA_VERSION = "v1.37.0-local-strict"
_DEFINITIONS_URI = "https://kubernetes.io/api/_definitions.json"
_KUBECONFORM = {
    "{{.Group}}": "{group}",
    "{{ .Group }}": "{group}",
    "{{.ResourceKind}}": "{kind}",
    "{{ .ResourceKind }}": "{kind}",
    "{{.ResourceAPIVersion}}": "{version}",
    "{{ .ResourceAPIVersion }}": "{version}",
}


# Compiled validators of schema files, shared by every run of the process (keyed by file and mtime).
_SHARED = {}


class SchemaError(errors.ValidationError):
    """The schema location cannot be used at all (not a folder, not an https template, libraries missing)."""


class SchemaMissing(errors.ValidationError):
    """No schema for this group/kind/version at the location."""


class SchemaUnreachable(errors.ValidationError):
    """The HTTPS schema location did not answer."""


def _core_dir():
    try:
        import kubernetes_validate
    except ImportError:
        return None
    return os.path.join(os.path.dirname(kubernetes_validate.__file__), "kubernetes-json-schema", CORE_SCHEMA_VERSION)


def is_builtin_group(group):
    return group == "" or "." not in group or group.endswith(".k8s.io")


def split_api_version(api_version):
    if "/" in (api_version or ""):
        group, version = api_version.split("/", 1)
        return group, version
    return "", api_version or ""


class SchemaStore:
    """Finds and compiles validators; thread-safe, one instance per validation run."""

    def __init__(self, location=None, base_dir=None, timeout=10.0):
        if not HAS_JSONSCHEMA:
            raise SchemaError(
                f"the jsonschema and referencing Python libraries are required: {JSONSCHEMA_IMPORT_ERROR}"
            )
        self.location = location or DEFAULT_SCHEMA_LOCATION
        self.timeout = timeout
        self._lock = threading.Lock()
        self._validators = {}
        self._core = _core_dir()
        if self._core is None or not os.path.isdir(self._core):
            raise SchemaError(
                f"the kubernetes-validate Python package (schemas {CORE_SCHEMA_VERSION}) is required for built-in kinds"
            )
        self._registry = None
        self._client = None
        template = self.location
        for old, new in _KUBECONFORM.items():
            template = template.replace(old, new)
        if template.startswith("https://") or template.startswith("http://"):
            if "{kind}" not in template:
                raise SchemaError(
                    f"schema location {self.location}: an URL template needs {{group}}, {{kind}} and {{version}} "
                    "(or kubeconform's {{.Group}}/{{.ResourceKind}}_{{.ResourceAPIVersion}})"
                )
            self.template = template
            self.folder = None
        else:
            folder = template
            if not os.path.isabs(folder) and base_dir and not os.path.isdir(folder):
                folder = os.path.join(base_dir, folder)
            if not os.path.isdir(folder):
                raise SchemaError(f"schema location {self.location} is neither a folder nor an https:// URL template")
            self.folder = os.path.abspath(folder)
            self.template = None

    # -- registry of the built-in definitions ---------------------------------------
    def _core_registry(self):
        if self._registry is None:
            with open(os.path.join(self._core, "_definitions.json"), encoding="utf-8") as handle:
                definitions = json.load(handle)
            resource = referencing.Resource.from_contents(
                definitions, default_specification=referencing.jsonschema.DRAFT202012
            )
            self._registry = referencing.Registry().with_resource(_DEFINITIONS_URI, resource)
        return self._registry

    def where(self, group, kind, version):
        """Human-readable place where the schema of group/kind/version is looked for."""
        if is_builtin_group(group):
            return f"kubernetes-validate {CORE_SCHEMA_VERSION}"
        name = {"group": group, "kind": kind.lower(), "version": version}
        if self.folder:
            return os.path.join(self.folder, group, f"{kind.lower()}_{version}.json")
        return self.template.format(**name)

    def _load_core(self, group, kind, version):
        prefix = group.split(".")[0]
        stem = f"{kind.lower()}-{prefix}-{version}" if group else f"{kind.lower()}-{version}"
        path = os.path.join(self._core, stem + ".json")
        if not os.path.isfile(path):
            raise SchemaMissing(self.where(group, kind, version))
        with open(path, encoding="utf-8") as handle:
            schema = json.load(handle)
        schema.setdefault("$id", f"https://kubernetes.io/api/{stem}.json")
        return schema

    def _load_custom(self, group, kind, version):
        where = self.where(group, kind, version)
        if self.folder:
            if not os.path.isfile(where):
                raise SchemaMissing(where)
            with open(where, encoding="utf-8") as handle:
                return json.load(handle)
        try:
            if Request is None:
                raise SchemaUnreachable(f"GET {where}: ansible-core (ansible.module_utils.urls) is not importable")
            response = self._http().open("GET", where)
            try:
                return json.loads(response.read().decode("utf-8"))
            finally:
                response.close()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise SchemaMissing(where)
            raise SchemaUnreachable("GET %s answered HTTP %d" % (where, exc.code))
        except (urllib.error.URLError, UrlConnectionError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SchemaUnreachable(f"GET {where} failed within {self.timeout:g}s: {reason}")
        except ValueError as exc:
            raise SchemaUnreachable(f"GET {where} did not return JSON: {exc}")

    def _http(self):
        """One Request, with one TLS context, for every schema this store fetches (open_url makes a context, loading
        every CA certificate of the system, for each call); open_url's settings otherwise."""
        if self._client is None:  # two threads may both make one: either serves
            self._client = Request(
                timeout=self.timeout, validate_certs=True, http_agent="krops-validate", context=make_context()
            )
        return self._client

    def _shared_key(self, api_version, kind):
        """Key of the process-wide cache: only for files (built-in or folder), with their mtime."""
        group, version = split_api_version(api_version)
        if is_builtin_group(group):
            return ("core", api_version, kind)
        if self.folder:
            path = self.where(group, kind, version)
            try:
                return (path, os.stat(path).st_mtime_ns)
            except OSError:
                return None
        return None

    def validator(self, api_version, kind):
        """A compiled validator for apiVersion/kind; raises SchemaMissing or SchemaUnreachable (cached)."""
        key = (api_version, kind)
        cached = self._validators.get(key)  # this store's own: no stat of the schema file again
        shared = None
        if cached is None:
            shared = self._shared_key(api_version, kind)
            with self._lock:
                cached = self._validators.get(key)
                if cached is None and shared is not None:
                    cached = _SHARED.get(shared)
                    if cached is not None:
                        self._validators[key] = cached
        if cached is not None:
            if isinstance(cached, Exception):
                raise cached
            return cached
        group, version = split_api_version(api_version)
        try:
            if is_builtin_group(group):
                schema = self._load_core(group, kind, version)
                registry = self._core_registry()
            else:
                schema = self._load_custom(group, kind, version)
                registry = referencing.Registry()
            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            compiled = cls(schema, registry=registry)
        except (SchemaMissing, SchemaUnreachable) as exc:
            with self._lock:
                self._validators[key] = exc
            raise
        with self._lock:
            self._validators[key] = compiled
            if shared is not None:
                _SHARED[shared] = compiled
        return compiled

    def _metadata_validator(self):
        """ObjectMeta of the built-in definitions: CRD schemas leave metadata unchecked."""
        with self._lock:
            compiled = _SHARED.get("object-meta")
        if compiled is None:
            schema = {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "$ref": _DEFINITIONS_URI + "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            }
            compiled = jsonschema.Draft202012Validator(schema, registry=self._core_registry())
            with self._lock:
                _SHARED["object-meta"] = compiled
        return compiled

    def error_parts(self, obj):
        """([(path parts, message)] of the kind's schema, the same of ObjectMeta): every violation of ``obj``."""
        compiled = self.validator(obj.get("apiVersion", ""), obj.get("kind", ""))
        own = [(tuple(error.absolute_path), _message(error)) for error in compiled.iter_errors(obj)]
        meta = []
        group = split_api_version(obj.get("apiVersion", ""))[0]
        if not is_builtin_group(group) and isinstance(obj.get("metadata"), dict):
            meta = [
                (("metadata",) + tuple(error.absolute_path), _message(error))
                for error in self._metadata_validator().iter_errors(obj["metadata"])
            ]
        return own, meta

    def errors(self, obj, limit=10):
        """[(path, message)] of schema violations of ``obj`` (sorted, at most ``limit``)."""
        own, meta = self.error_parts(obj)
        return first_errors(own + meta, limit)

    def variant_errors(self, base, parts, variant, limit=10):
        """``errors(variant)`` for an object that differs from ``base`` (whose ``error_parts`` are ``parts``) only
        in scalar values, validating only what those values reach.

        jsonschema reports an error at the place whose keyword fails. With the same keys, lengths and container
        types, a keyword above a changed scalar gives the same errors unless it looks at values (anyOf, oneOf,
        not, enum, const, uniqueItems, ...): when no schema node on the way down to a changed scalar has one (and
        no $ref or $id changes the schema's base on the way), the variant's errors are the base's, minus those at
        the changed scalars, plus the changed scalars' own against the nodes that apply there (descend, as
        properties, patternProperties, additionalProperties and items do). Any other variant is validated whole.
        """
        changed = changed_scalars(base, variant)
        if changed is None:
            return self.errors(variant, limit)
        return self.variant_errors_at(base, parts, {path: _at(variant, path) for path in changed}, limit)

    def variant_errors_at(self, base, parts, values, limit=10):
        """variant_errors for the variant that is ``base`` with ``values`` ({path of a scalar: its value}) put in."""
        if not values:
            return first_errors(parts[0] + parts[1], limit)
        if ("apiVersion",) in values or ("kind",) in values or any(path[:1] == ("metadata",) for path in values):
            return self.errors(_with(base, values), limit)  # another schema, or ObjectMeta's (all $ref): whole
        compiled = self.validator(base.get("apiVersion", ""), base.get("kind", ""))
        found = [(path, message) for path, message in parts[0] if path not in values]
        for path, value in values.items():
            nodes = nodes_at(compiled.schema, path)
            if nodes is None:
                return self.errors(_with(base, values), limit)
            for node in nodes:
                found.extend(
                    (path + tuple(error.absolute_path), _message(error)) for error in compiled.descend(value, node)
                )
        return first_errors(found + parts[1], limit)


def first_errors(parts, limit=10):
    """The (path, message) of errors as ``errors`` reports them: sorted, the first ``limit``."""
    return sorted((_path(path), message) for path, message in parts)[:limit]


def changed_scalars(base, variant, path=()):
    """The paths of the scalars that differ between two objects (a different type counts: 1, 1.0 and True differ),
    or None when their shapes differ (a key, a length or a container type)."""
    if isinstance(base, dict):
        if not isinstance(variant, dict) or base.keys() != variant.keys():
            return None
        found = []
        for key, value in base.items():
            below = changed_scalars(value, variant[key], path + (key,))
            if below is None:
                return None
            found.extend(below)
        return found
    if isinstance(base, list):
        if not isinstance(variant, list) or len(base) != len(variant):
            return None
        found = []
        for index, (value, other) in enumerate(zip(base, variant)):
            below = changed_scalars(value, other, path + (index,))
            if below is None:
                return None
            found.extend(below)
        return found
    if isinstance(variant, (dict, list)):
        return None
    return [] if type(base) is type(variant) and base == variant else [path]


# Keywords whose errors above a changed scalar can depend on its value, or that move the schema's base or
# apply subschemas by position (prefixItems, additionalItems, a list of items): nodes_at gives up on them.
_VALUE_KEYWORDS = frozenset(
    (
        "anyOf", "oneOf", "not", "if", "then", "else", "enum", "const", "uniqueItems", "contains", "minContains",
        "maxContains", "dependencies", "dependentSchemas", "unevaluatedProperties", "unevaluatedItems", "$ref",
        "$dynamicRef", "$recursiveRef", "$id", "id", "prefixItems", "additionalItems",
    )
)  # fmt: skip


def nodes_at(schema, path):
    """The schema nodes that apply to the value at ``path`` (one per way of reaching it, as jsonschema applies
    them), or None when a node above it has a keyword of _VALUE_KEYWORDS."""
    current = [schema]
    for step in path:
        below = []
        for node in _in_place(current):
            if node is None:
                return None
            if isinstance(step, int):
                items = node.get("items")
                if isinstance(items, list):
                    return None
                if isinstance(items, (dict, bool)):
                    below.append(items)
                continue
            matched = False
            properties = node.get("properties")
            if isinstance(properties, dict) and step in properties:
                below.append(properties[step])
                matched = True
            for pattern, sub in (node.get("patternProperties") or {}).items():
                if re.search(pattern, step):
                    below.append(sub)
                    matched = True
            extra = node.get("additionalProperties")
            if not matched and isinstance(extra, dict):
                below.append(extra)
        current = below
    return current


def _in_place(nodes):
    """The nodes with their allOf subschemas (applied at the same place); None for one with a value keyword.
    true and false apply nothing below them (false's error is at its own place)."""
    found = []
    for node in nodes:
        if not isinstance(node, dict):
            continue
        if _VALUE_KEYWORDS.intersection(node):
            return [None]
        found.append(node)
        if "allOf" in node:
            below = _in_place(node["allOf"])
            if None in below:
                return [None]
            found.extend(below)
    return found


def _at(obj, path):
    for step in path:
        obj = obj[step]
    return obj


def _with(obj, values):
    """A copy of ``obj`` with the scalars at the paths of ``values`` replaced."""
    obj = copy.deepcopy(obj)
    for path, value in values.items():
        _at(obj, path[:-1])[path[-1]] = value
    return obj


def _path(parts):
    text = ""
    for part in parts:
        text += "[%d]" % part if isinstance(part, int) else ("." if text else "") + str(part)
    return text or "(root)"


def _message(error):
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set((error.schema.get("properties") or {}).keys())
        unknown = sorted(k for k in error.instance if k not in allowed)
        if unknown:
            return "unknown field{} {}".format("s" if len(unknown) > 1 else "", ", ".join(repr(u) for u in unknown))
    if error.validator == "enum":
        return "{!r} is not one of {}".format(error.instance, ", ".join(repr(v) for v in error.validator_value))
    return re.sub(r"\s+", " ", error.message)
