# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""A second CEL path for the emulator, independent of krops' plugins/module_utils/cel.py.

The engine is cel-python (PyPI ``cel-python``, module ``celpy``; pure Python), not the Rust binding krops
uses, with the Kubernetes CEL libraries written for it from upstream's Go sources
(tests/substrate/cel_k8s_library.py); the schema walk is this module's own: a rule of
``x-kubernetes-validations`` runs on every present value of its schema node (each property, each
``additionalProperties`` value, each list item), after the schema's ``default`` values are filled in, as
apiextensions-apiserver does (pkg/apiserver/schema/cel validation.go). Numbers of a ``type: number`` node are
doubles. At the root ``self.metadata`` holds only name and generateName. A transition rule (``oldSelf``) runs
only with ``optionalOldSelf: true``, where ``oldSelf`` is ``optional.none()`` (validationActivationWithOldSelf):
the emulator hands no old object, so every write is judged as a create; other transition rules do not run.

``verdicts(obj, schema)`` gives {(path, rule): Verdict}: its outcome "pass" | "violated" | "error" |
"unsupported", and for a violated or erroring rule the field error an API server reports (message, reason, the
schema node's type). The message is what apiextensions prints: messageExpression's value when it gives a
non-blank one-line string, else message, else "failed rule: <rule>" (ValidationRule's field docs,
k8s.io/apiextensions-apiserver apis/apiextensions/v1); an evaluation error is "<error> evaluating rule: <rule>"
(validation.go; the error's own text is cel-python's, not cel-go's). "unsupported" is a rule cel-python cannot
run: its syntax is beyond cel-python's grammar, it reaches a function neither cel-python nor the library has, or
it reads a ``format: duration/date/date-time/byte`` string (apiextensions hands CEL those as duration,
timestamp and bytes values; this path does not build them). strict_api refuses a write it cannot judge.
krops' evaluator is the differential (``disagreements``).
"""

from __future__ import annotations

import copy
import re
from collections import namedtuple

import celpy
from celpy import celtypes
from celpy.evaluation import CELEvalError

from tests.substrate import cel_k8s_library

PASS, VIOLATED, ERROR, UNSUPPORTED = "pass", "violated", "error", "unsupported"
_FORMATTED = ("duration", "date", "date-time", "byte")

Verdict = namedtuple("Verdict", "outcome message reason schema_type")


class _Evaluator(celpy.evaluation.Evaluator):
    """cel-python's evaluator, less its own ``.min()`` and ``.reduce()`` macros: CEL has none, and ``min`` is the
    Kubernetes lists library's function (an error on an empty list, comparable elements only)."""

    def member_dot_arg(self, tree):
        if tree.children[1].value in ("min", "reduce"):
            return self.method_eval(*self.visit_children(tree))
        return super().member_dot_arg(tree)


class _Runner(celpy.InterpretedRunner):
    def evaluate(self, context):
        return _Evaluator(ast=self.ast, activation=self.new_activation()).evaluate(context)


_ENV = celpy.Environment(runner_class=_Runner)
_PROGRAMS = {}


Unsupported, FormattedString = cel_k8s_library.Unsupported, cel_k8s_library.FormattedString


def _program(rule):
    if rule not in _PROGRAMS:
        try:
            _PROGRAMS[rule] = _ENV.program(_ENV.compile(rule), functions=cel_k8s_library.FUNCTIONS)
        except Exception as exc:  # noqa: BLE001 - a rule cel-python cannot parse is unsupported, never passed
            _PROGRAMS[rule] = Unsupported(f"cel-python cannot parse it: {str(exc).splitlines()[0]}")
    return _PROGRAMS[rule]


def unsupported_reason(rule):
    """Why cel-python cannot run ``rule`` as far as its text tells (syntax, functions nobody provides), or None."""
    program = _program(rule)
    if isinstance(program, Unsupported):
        return str(program)
    known = set(cel_k8s_library.FUNCTIONS) | set(celpy.evaluation.base_functions)
    known |= {"has", "all", "exists", "exists_one", "map", "filter", "dyn"}
    missing = sorted(set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(", _without_strings(rule))) - known)
    return f"no function {', '.join(missing)}" if missing else None


def _without_strings(rule):
    return re.sub(r"'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"", "''", rule)


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
        if schema.get("type") == "string" and schema.get("format") in _FORMATTED:
            return FormattedString(schema["format"])
        return celtypes.StringType(value)
    if isinstance(value, list):
        items = schema.get("items") if isinstance(schema.get("items"), dict) else {}
        return cel_k8s_library.TypedList([_cel(v, items) for v in value], items.get("type"))
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


def _evaluate(expression, value, schema, root, old_self=False):
    """cel-python's value of ``expression`` with ``self`` bound to ``value`` (and ``oldSelf`` to optional.none()
    when ``old_self``): the value, a CELEvalError, or an Unsupported."""
    program = _program(expression)
    if isinstance(program, Unsupported):
        return program
    view = value
    if root and isinstance(value, dict):
        view = dict(value)
        meta = value.get("metadata")
        if isinstance(meta, dict):
            view["metadata"] = {k: meta[k] for k in ("name", "generateName") if k in meta}
    activation = dict(cel_k8s_library.NAMESPACES, self=_cel(view, schema))
    if old_self:
        activation["oldSelf"] = cel_k8s_library.NONE
    try:
        result = program.evaluate(activation)
    except Unsupported as exc:
        return exc
    except CELEvalError as exc:
        return _classified(exc)
    return _classified(result) if isinstance(result, CELEvalError) else result


def _classified(error):
    text = str(error.args[0]) if error.args else str(error)
    if text.startswith("undeclared reference"):
        name = text.split("'")[1] if "'" in text else text
        return Unsupported(f"no function or variable {name} in cel-python or the emulator's library")
    return error


def error_text(error):
    """The text of a CEL evaluation error, as the API server prints it before " evaluating rule: "."""
    return str(error.args[0]) if error.args else str(error)


def _message(entry, rule, value, schema, root, old_self):
    expression = entry.get("messageExpression")
    if expression:
        text = _evaluate(str(expression), value, schema, root, old_self)
        if isinstance(text, str) and text.strip() and "\n" not in text:  # celtypes.StringType is a str
            return str(text)
    return str(entry.get("message") or "").strip() or f"failed rule: {rule.strip()}"


def _verdict(entry, rule, value, schema, root):
    old_self = "oldSelf" in rule
    result = _evaluate(rule, value, schema, root, old_self)
    schema_type = schema.get("type") or "object"
    if isinstance(result, Unsupported):
        return Verdict(UNSUPPORTED, str(result), None, None)
    if not isinstance(result, celtypes.BoolType):
        shown = str(entry.get("message") or "").strip() or rule.strip()
        if isinstance(result, CELEvalError):
            text = error_text(result)
            if text.startswith("no such overload"):
                message = (
                    f"'{text}': call arguments did not match a supported operator, function or macro signature"
                    f" for rule: {shown}"
                )
            else:
                message = f"{text} evaluating rule: {shown}"
        else:
            message = f"no such overload: the rule gave {type(result).__name__}, not a bool, evaluating rule: {shown}"
        return Verdict(ERROR, message, "FieldValueInvalid", schema_type)
    if bool(result):
        return Verdict(PASS, None, None, None)
    message = _message(entry, rule, value, schema, root, old_self)
    return Verdict(VIOLATED, message, str(entry.get("reason") or "FieldValueInvalid"), schema_type)


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
        if "oldSelf" in rule and entry.get("optionalOldSelf") is not True:
            continue  # a transition rule: runs on update with an old value, which the emulator never hands
        where = path + str(entry.get("fieldPath") or "") if entry.get("fieldPath") else path
        verdict = _verdict(entry, rule, value, schema, not path)
        found[(path if verdict.outcome == ERROR else where, rule)] = verdict
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


def disagreements(obj, schema, product_results, mine=None):
    """Rules where krops' evaluator (its results: objects with .path, .rule, .outcome; passed rules absent) and
    this path both ran and differ, in pass / violated / error: [(path, rule, krops', this path's)]. A rule this
    path cannot run ("unsupported") or krops' cannot ("unevaluable") is not compared. ``mine``: the outcomes of
    ``outcomes(obj, schema)`` when the caller has them already."""
    product = {(r.path, r.rule): r.outcome for r in product_results}
    found = []
    for key, own in (outcomes(obj, schema) if mine is None else mine).items():
        theirs = product.get(key, PASS)
        if own == UNSUPPORTED or theirs == "unevaluable":
            continue
        if theirs != own:
            found.append((key[0], key[1], theirs, own))
    return found
