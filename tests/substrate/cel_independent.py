# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""A second CEL path for the emulator, independent of krops' plugins/module_utils/cel.py.

The engine is cel-python (PyPI ``cel-python``, module ``celpy``; pure Python), not the Rust binding krops
uses; the schema walk is this module's own: a rule of ``x-kubernetes-validations`` runs on every present
value of its schema node (each property, each ``additionalProperties`` value, each list item), after the
schema's ``default`` values are filled in, as apiextensions-apiserver does (pkg/apiserver/schema/cel
validation.go). Numbers of a ``type: number`` node are doubles. At the root ``self.metadata`` holds only
name and generateName. Transition rules (``oldSelf``) are not run (creates only).

``verdicts(obj, schema)`` gives {(path, rule): Verdict}: its outcome "pass" | "violated" | "error", and for a
violated rule the field error an API server reports (message, reason, the schema node's type). The message is
what apiextensions prints: messageExpression's value when it gives a non-blank one-line string, else message,
else "failed rule: <rule>" (ValidationRule's field docs, k8s.io/apiextensions-apiserver apis/apiextensions/v1).
"error" covers everything cel-python cannot run (the Kubernetes CEL libraries it lacks, evaluation errors).
strict_api takes the emulator's verdict from here; krops' evaluator is the differential (``disagreements``),
which compares only a rule both engines evaluate to a boolean.
"""

from __future__ import annotations

import copy
from collections import namedtuple

import celpy
from celpy import celtypes

PASS, VIOLATED, ERROR = "pass", "violated", "error"

Verdict = namedtuple("Verdict", "outcome message reason schema_type")

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


def _evaluate(expression, value, schema, root):
    """cel-python's value of ``expression`` with ``self`` bound to ``value``; None when it cannot run."""
    program = _program(expression)
    if program is None:
        return None
    view = value
    if root and isinstance(value, dict):
        view = dict(value)
        meta = value.get("metadata")
        if isinstance(meta, dict):
            view["metadata"] = {k: meta[k] for k in ("name", "generateName") if k in meta}
    try:
        return program.evaluate({"self": _cel(view, schema)})
    except Exception:  # noqa: BLE001 - CELEvalError and the like: not compared
        return None


def _message(entry, rule, value, schema, root):
    expression = entry.get("messageExpression")
    if expression:
        text = _evaluate(str(expression), value, schema, root)
        if isinstance(text, str) and text.strip() and "\n" not in text:  # celtypes.StringType is a str
            return str(text)
    return str(entry.get("message") or "").strip() or f"failed rule: {rule.strip()}"


def _verdict(entry, rule, value, schema, root):
    result = _evaluate(rule, value, schema, root)
    if not isinstance(result, celtypes.BoolType):
        return Verdict(ERROR, None, None, None)
    if bool(result):
        return Verdict(PASS, None, None, None)
    message = _message(entry, rule, value, schema, root)
    return Verdict(VIOLATED, message, str(entry.get("reason") or "FieldValueInvalid"), schema.get("type") or "object")


def verdicts(obj, schema):
    found = {}
    _walk(_with_defaults(copy.deepcopy(obj), schema), schema, "", found)
    return found


def outcomes(obj, schema):
    return {key: verdict.outcome for key, verdict in verdicts(obj, schema).items()}


def _walk(value, schema, path, found):
    if not isinstance(schema, dict) or value is None:
        return
    for entry in schema.get("x-kubernetes-validations") or []:
        rule = str(entry.get("rule"))
        if "oldSelf" in rule:
            continue
        where = path + str(entry.get("fieldPath") or "") if entry.get("fieldPath") else path
        found[(where, rule)] = _verdict(entry, rule, value, schema, not path)
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


def disagreements(obj, schema, product_results, violated="violated", not_run=("error", "unevaluable"), mine=None):
    """Rules where krops' evaluator (its results: objects with .path, .rule, .outcome; passed rules absent)
    and cel-python both give a boolean and differ: [(path, rule, krops', cel-python's)]. ``mine``: the
    outcomes of ``outcomes(obj, schema)`` when the caller has them already."""
    product = {(r.path, r.rule): r.outcome for r in product_results if not getattr(r, "transition", False)}
    found = []
    for key, own in (outcomes(obj, schema) if mine is None else mine).items():
        theirs = product.get(key, PASS)
        if own == ERROR or theirs in not_run:
            continue
        if (theirs == violated) != (own == VIOLATED):
            found.append((key[0], key[1], theirs, own))
    return found
