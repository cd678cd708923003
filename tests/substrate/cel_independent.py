# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""A second CEL path for the emulator, independent of krops' plugins/module_utils/cel.py.

The engine is cel-python (PyPI ``cel-python``, module ``celpy``; pure Python), not the Rust binding krops
uses; the schema walk is this module's own: a rule of ``x-kubernetes-validations`` runs on every present
value of its schema node (each property, each ``additionalProperties`` value, each list item), after the
schema's ``default`` values are filled in, as apiextensions-apiserver does (pkg/apiserver/schema/cel
validation.go). Numbers of a ``type: number`` node are doubles. At the root ``self.metadata`` holds only
name and generateName. Transition rules (``oldSelf``) are not run (creates only).

``outcomes(obj, schema)`` gives {(path, rule): "pass" | "violated" | "error"}; "error" covers everything
cel-python cannot run (the Kubernetes CEL libraries it lacks, evaluation errors), which the differential
(``disagreements``) leaves out: only a rule both engines evaluate to a boolean is compared.
"""

from __future__ import annotations

import copy

import celpy
from celpy import celtypes

PASS, VIOLATED, ERROR = "pass", "violated", "error"

_ENV = celpy.Environment()
_PROGRAMS = {}


def _program(rule):
    if rule not in _PROGRAMS:
        try:
            _PROGRAMS[rule] = _ENV.program(_ENV.compile(rule))
        except Exception:  # noqa: BLE001 - a rule cel-python cannot parse is not compared
            _PROGRAMS[rule] = None
    return _PROGRAMS[rule]


def _with_defaults(value, schema):
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key not in value and isinstance(sub, dict) and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = _with_defaults(value[key], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in value:
                if key not in (schema.get("properties") or {}):
                    value[key] = _with_defaults(value[key], extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        value[:] = [_with_defaults(item, schema["items"]) for item in value]
    return value


def _cel(value, schema):
    """The CEL value of a JSON value, typed by its schema node."""
    schema = schema if isinstance(schema, dict) else {}
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.DoubleType(value) if schema.get("type") == "number" else celtypes.IntType(value)
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    if isinstance(value, list):
        return celtypes.ListType([_cel(v, schema.get("items")) for v in value])
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        return celtypes.MapType(
            {
                celtypes.StringType(k): _cel(v, props.get(k, extra if isinstance(extra, dict) else {}))
                for k, v in value.items()
            }
        )
    return None


def _run(rule, value, schema, root):
    program = _program(rule)
    if program is None:
        return ERROR
    view = value
    if root and isinstance(value, dict):
        view = dict(value)
        meta = value.get("metadata")
        if isinstance(meta, dict):
            view["metadata"] = {k: meta[k] for k in ("name", "generateName") if k in meta}
    try:
        result = program.evaluate({"self": _cel(view, schema)})
    except Exception:  # noqa: BLE001 - CELEvalError and the like: not compared
        return ERROR
    if isinstance(result, celtypes.BoolType):
        return PASS if bool(result) else VIOLATED
    return ERROR


def outcomes(obj, schema):
    found = {}
    _walk(_with_defaults(copy.deepcopy(obj), schema), schema, "", found)
    return found


def _walk(value, schema, path, found):
    if not isinstance(schema, dict) or value is None:
        return
    for entry in schema.get("x-kubernetes-validations") or []:
        rule = str(entry.get("rule"))
        if "oldSelf" in rule:
            continue
        where = path + str(entry.get("fieldPath") or "") if entry.get("fieldPath") else path
        found[(where, rule)] = _run(rule, value, schema, not path)
    for sub in schema.get("allOf") or []:
        _walk(value, sub, path, found)
    if isinstance(value, dict):
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        for key, sub in props.items():
            if key in value:
                _walk(value[key], sub, f"{path}.{key}" if path else key, found)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, item in value.items():
                if key not in props:
                    _walk(item, extra, f"{path}[{key}]", found)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            _walk(item, schema["items"], "%s[%d]" % (path, index), found)


def disagreements(obj, schema, product_results, violated="violated", not_run=("error", "unevaluable")):
    """Rules where krops' evaluator (its results: objects with .path, .rule, .outcome; passed rules absent)
    and cel-python both give a boolean and differ: [(path, rule, krops', cel-python's)]."""
    product = {(r.path, r.rule): r.outcome for r in product_results if not getattr(r, "transition", False)}
    found = []
    for key, mine in outcomes(obj, schema).items():
        theirs = product.get(key, PASS)
        if mine == ERROR or theirs in not_run:
            continue
        if (theirs == violated) != (mine == VIOLATED):
            found.append((key[0], key[1], theirs, mine))
    return found
