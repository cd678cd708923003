# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The emulator's own loader of the built-in kinds' JSON schemas (independent of validate_schema.py).

The schemas are kubernetes-validate's bundled ``kubernetes-json-schema/v1.37.0-local-strict`` files
(``<kind>-v1.json``, ``<kind>-<group prefix>-<version>.json``), whose ``$ref`` point at
``https://kubernetes.io/api/_definitions.json``: that document is preloaded into a referencing registry.
``validator(api_version, kind)`` gives a jsonschema validator, or None when no file exists.
"""

from __future__ import annotations

import functools
import json
import os

import jsonschema
import kubernetes_validate
import referencing
import referencing.jsonschema

FOLDER = os.path.join(os.path.dirname(kubernetes_validate.__file__), "kubernetes-json-schema", "v1.37.0-local-strict")
DEFINITIONS = "https://kubernetes.io/api/_definitions.json"


@functools.lru_cache(maxsize=1)
def _registry():
    with open(os.path.join(FOLDER, "_definitions.json"), encoding="utf-8") as handle:
        resource = referencing.Resource.from_contents(
            json.load(handle), default_specification=referencing.jsonschema.DRAFT202012
        )
    return referencing.Registry().with_resource(DEFINITIONS, resource)


@functools.lru_cache(maxsize=256)
def validator(api_version, kind):
    group, _sep, version = api_version.rpartition("/")
    name = f"{kind.lower()}-{group.split('.')[0]}-{version}" if group else f"{kind.lower()}-{version}"
    path = os.path.join(FOLDER, name + ".json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as handle:
        schema = json.load(handle)
    schema.setdefault("$id", f"https://kubernetes.io/api/{name}.json")
    return jsonschema.Draft202012Validator(schema, registry=_registry())


def error_paths(api_version, kind, obj):
    """Sorted (path, validator keyword) of the schema errors of ``obj`` (None: no schema)."""
    compiled = validator(api_version, kind)
    if compiled is None:
        return None
    return sorted((tuple(map(str, e.absolute_path)), e.validator) for e in compiled.iter_errors(obj))
