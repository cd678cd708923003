# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Evaluation of CRD ``x-kubernetes-validations`` CEL rules, as the API server does at apply time.

The CEL engine is the PyPI package ``common-expression-language`` (module ``cel``; a binding of
the Rust ``cel`` crate). Kubernetes adds libraries to CEL; the ones registered here are listed in
:data:`EXTENSIONS` (strings, lists, regex, quantity, URL, isIP/isCIDR, format; quantity, URL and IP are in
cel_libraries.py). A rule that calls anything
else (``ip()``, ``cidr()``, ``semver()``, ``authorizer``...) is *unevaluable*: it is
reported as such, never counted as passed.

How a rule is applied follows the apiextensions-apiserver:

- a rule sits on a schema node and runs once per value at that node (each list item, each map
  value), only when the value is present; ``self`` is that value;
- schema ``default`` values are applied first (the server defaults before it validates), and
  numbers are typed by the schema (``number`` is a double even when written as ``1``);
- a rule that mentions ``oldSelf`` is a *transition rule*: it runs only on update, only where the
  old object has a value at the same place (object properties, map keys, and items of
  ``x-kubernetes-list-type: map`` lists matched by their keys). :func:`evaluate` runs them when
  given ``old``;
- a rule that evaluates to false is a violation reported with the rule's own ``message``; a rule
  whose evaluation fails (no such key, index out of bounds, bad duration...) is an error, which
  the API server rejects as well.

Importable without Ansible.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import logging
import re
import threading

from ansible_collections.krops.platform.plugins.module_utils import cel_formats
from ansible_collections.krops.platform.plugins.module_utils.cel_libraries import (
    IP_FUNCTIONS,
    QUANTITY_FUNCTIONS,
    URL_FUNCTIONS,
    parse_url,
)

try:
    import cel as _cel
    from cel import stdlib as _cel_stdlib

    HAS_CEL = True
    CEL_IMPORT_ERROR = None
    # The engine logs every failing Python function as a warning; the failure is already the
    # rule's result (an error finding), so keep it off the user's terminal.
    logging.getLogger("cel").setLevel(logging.ERROR)
except ImportError as exc:  # reported by the caller (validate lists every rule as unevaluable)
    _cel = None
    _cel_stdlib = None
    HAS_CEL = False
    CEL_IMPORT_ERROR = exc

LIBRARY = "common-expression-language"

VIOLATED = "violated"
ERROR = "error"
UNEVALUABLE = "unevaluable"

# Functions of the CEL core that the Rust engine implements (macros like has/all/exists are
# expanded by its parser and never show up as function references).
BUILTINS = frozenset(
    (
        "size",
        "contains",
        "startsWith",
        "endsWith",
        "matches",
        "duration",
        "timestamp",
        "int",
        "uint",
        "double",
        "string",
        "bytes",
        "dyn",
        "type",
        "getFullYear",
        "getMonth",
        "getDayOfYear",
        "getDayOfMonth",
        "getDate",
        "getDayOfWeek",
        "getHours",
        "getMinutes",
        "getSeconds",
        "getMilliseconds",
        "hasValue",
        "value",
        "orValue",
        "or",
        "none",
        "of",  # optionals (optional.of, optional.none)
    )
)


def _index_of(target, item, offset=None):
    if isinstance(target, str) and item and offset is not None and offset >= len(target):
        return -1  # cel-go ext/strings.go indexOfOffset: an offset past the end finds nothing (no error)
    if isinstance(target, str):
        return _cel_stdlib.index_of(target, item, 0 if offset is None else offset)
    for index, value in enumerate(target):
        if value == item:
            return index
    return -1


def _last_index_of(target, item, offset=None):
    if isinstance(target, str) and item and offset is not None and offset >= len(target):
        return -1  # lastIndexOfOffset likewise
    if isinstance(target, str):
        return _cel_stdlib.last_index_of(target, item, offset)
    for index in range(len(target) - 1, -1, -1):
        if target[index] == item:
            return index
    return -1


def _is_sorted(values):
    return all(values[i] <= values[i + 1] for i in range(len(values) - 1))


def _find(text, pattern):
    match = re.search(pattern, text)
    return match.group(0) if match else ""


def _find_all(text, pattern, limit=-1):
    found = [m.group(0) for m in re.finditer(pattern, text)]
    return found if limit is None or limit < 0 else found[:limit]


# --- Kubernetes format library ----------------------------------------------------------------
# format.<name>() / format.named(name) give a Format ({_FMT: name}); <format>.validate(s) is
# optional.none() when s is valid, else optional.of([messages]): the validators and their messages are
# upstream's (cel_formats.py says which).
_FMT = "__krops_format__"


def _request_uri(value):
    try:
        parse_url(value)
    except ValueError:
        raise ValueError("invalid URI for request") from None


FORMATS = cel_formats.validators(_request_uri)


def _format_validate(fmt, value):
    if not (isinstance(fmt, dict) and fmt.get(_FMT) in FORMATS) or not isinstance(value, str):
        raise TypeError("validate() needs a format and a string")
    problems = FORMATS[fmt[_FMT]](value)
    return _cel.OptionalValue.of(problems) if problems else _cel.OptionalValue.none()


FORMAT_FUNCTIONS = {f"format.{name}": (lambda name=name: {_FMT: name}) for name in FORMATS}
FORMAT_FUNCTIONS.update(
    {
        "format.named": lambda name: (
            _cel.OptionalValue.of({_FMT: name}) if name in FORMATS else _cel.OptionalValue.none()
        ),
        "validate": _format_validate,
    }
)


def _extensions():
    if not HAS_CEL:
        return {}
    table = {}
    table.update(_cel_stdlib.EXTENSIONS["core"])  # min, max, sum (Kubernetes lists library spellings)
    table.update(_cel_stdlib.EXTENSIONS["strings"])  # charAt, lowerAscii, split, join, trim, ...
    table.update(
        {
            "indexOf": _index_of,
            "lastIndexOf": _last_index_of,  # strings and lists
            "isSorted": _is_sorted,
            "find": _find,
            "findAll": _find_all,
        }
    )
    table.update(QUANTITY_FUNCTIONS)
    table.update(URL_FUNCTIONS)
    table.update(IP_FUNCTIONS)
    table.update(FORMAT_FUNCTIONS)
    return table


EXTENSIONS = _extensions()
# The engine reports a namespaced call (format.dns1123Label()) by its last part.
_BY_SHORT = {}
for _name in EXTENSIONS:
    _BY_SHORT.setdefault(_name.rsplit(".", 1)[-1], []).append(_name)
SUPPORTED = BUILTINS | frozenset(EXTENSIONS) | frozenset(_BY_SHORT)


class Compiled:
    """One rule compiled once: program, or why it cannot be evaluated."""

    __slots__ = ("functions", "program", "rule", "transition", "unsupported")

    def __init__(self, rule):
        self.rule = rule
        self.program = None
        self.unsupported = None
        self.transition = bool(re.search(r"\boldSelf\b", rule))
        self.functions = {}
        if not HAS_CEL:
            self.unsupported = f"the {LIBRARY} Python package is not installed ({CEL_IMPORT_ERROR})"
            return
        try:
            program = _cel.compile(rule)
        except (ValueError, RuntimeError) as exc:  # syntax the engine lacks (e.g. optional field selection .?)
            self.unsupported = f"the CEL library cannot parse it: {_short(exc)}"
            return
        missing = sorted(name for name in program.functions() if not _is_operator(name) and name not in SUPPORTED)
        if missing:
            self.unsupported = "uses {}, which krops cannot evaluate".format(", ".join(f"{m}()" for m in missing))
            return
        if _ESCAPED.search(rule):
            # The server escapes property names (__dash__, __dot__, __namespace__...); krops does not.
            self.unsupported = (
                f"uses an escaped property name ({_ESCAPED.search(rule).group(0)}), which krops does not map"
            )
            return
        self.program = program
        # Only the extensions the rule calls: building a context with all of them costs more than the rule.
        self.functions = {full: EXTENSIONS[full] for name in program.functions() for full in _BY_SHORT.get(name, ())}


_ESCAPED = re.compile(r"__[A-Za-z0-9]+__")
_COMPILED = {}
_LOCK = threading.Lock()


def compiled(rule):
    with _LOCK:
        found = _COMPILED.get(rule)
    if found is None:
        found = Compiled(rule)
        with _LOCK:
            _COMPILED[rule] = found
    return found


def _is_operator(name):
    return name.startswith(("_", "@", "!")) or not name[:1].isalpha()


def _short(exc):
    return " ".join(str(exc).split())[:300] or type(exc).__name__


@dataclasses.dataclass(eq=False, slots=True)
class Result:
    """A rule that did not pass: violated, errored or could not be evaluated. ``reason`` (FieldValueInvalid,
    FieldValueForbidden, ...) is the rule's own and ``schema_type`` the schema type of the node it sits on: what
    an API server's field error carries."""

    path: str
    rule: str
    message: str
    outcome: str
    detail: str = ""
    transition: bool = False
    reason: str = ""
    schema_type: str | None = None

    def text(self):
        where = self.path or "(root)"
        if self.outcome == VIOLATED:
            return "{}: {} (rule: {})".format(where, self.message or "failed rule", self.rule)
        if self.outcome == ERROR:
            return f"{where}: {self.detail} evaluating rule: {self.rule}"
        return f"{where}: rule not evaluated, {self.detail}: {self.rule}"

    def as_dict(self):
        return {
            "path": self.path or "(root)",
            "rule": self.rule,
            "message": self.message,
            "outcome": self.outcome,
            "detail": self.detail,
            "transition": self.transition,
        }


def has_rules(schema):
    """True when any node of ``schema`` carries x-kubernetes-validations (cached per schema object)."""
    key = id(schema)
    with _LOCK:
        cached = _HAS_RULES.get(key)
    if cached is None or cached[0] is not schema:
        cached = (schema, count_rules(schema)[0] > 0)
        with _LOCK:
            _HAS_RULES[key] = cached
    return cached[1]


_HAS_RULES = {}


def _rules_at(node):
    """The rules of one schema node (a schema may also have a *property* named x-kubernetes-validations)."""
    rules = node.get("x-kubernetes-validations")
    return [r for r in rules if isinstance(r, dict) and r.get("rule")] if isinstance(rules, list) else []


def count_rules(schema):
    """(rules, transition rules) declared in ``schema``."""
    total = transition = 0
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for rule in _rules_at(node):
                total += 1
                transition += bool(re.search(r"\boldSelf\b", str(rule.get("rule", ""))))
            stack.extend(v for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend(node)
    return total, transition


def evaluate(obj, schema, old=None, transition_only=False):
    """Results (not-passed rules) of ``obj`` against the CEL rules of ``schema``.

    ``old``: the object before the change; transition rules (``oldSelf``) run only with it.
    ``transition_only``: run only transition rules (render_diff, when validate ran the others).
    """
    results = []
    value = _typed(copy.deepcopy(obj), schema)
    old_value = _typed(copy.deepcopy(old), schema) if old is not None else None
    _walk(value, old_value, old is not None, schema, "", results, transition_only)
    return results


def _walk(value, old, has_old, schema, path, results, transition_only):
    if not isinstance(schema, dict) or value is None:
        return
    for entry in _rules_at(schema):
        result = _run_rule(entry, value, old, has_old, schema, path, transition_only)
        if result is not None:
            results.append(result)
    for sub in schema.get("allOf") or []:  # the server runs the rules of allOf branches at the same node
        _walk(value, old, has_old, sub, path, results, transition_only)
    for item, old_item, has, sub, where in _children(value, old, has_old, schema, path):
        _walk(item, old_item, has, sub, where, results, transition_only)


def _run_rule(entry, value, old, has_old, schema, path, transition_only):
    """The Result of one rule entry at this node, or None when it passed or does not run here."""
    rule = compiled(str(entry["rule"]))
    optional_old = bool(entry.get("optionalOldSelf"))  # such rules run on create too
    if rule.transition and not has_old and not optional_old:
        return None  # as on CREATE: no old value, the server skips transition rules
    if transition_only and not rule.transition:
        return None
    message = str(entry.get("message") or "")
    if not message and entry.get("messageExpression"):
        message = "(messageExpression not evaluated: {})".format(entry["messageExpression"])
    where = path + str(entry.get("fieldPath") or "") if entry.get("fieldPath") else path
    if rule.program is None:
        return Result(where, rule.rule, message, UNEVALUABLE, rule.unsupported, rule.transition)
    variables = {"self": _root_view(value) if not path else value}
    if rule.transition:
        old_view = _root_view(old) if not path else old
        if optional_old:  # oldSelf is a CEL optional: none on create or where no old value exists
            old_view = _cel.OptionalValue.of(old_view) if has_old else _cel.OptionalValue.none()
        variables["oldSelf"] = old_view
    context = _cel.Context(variables=variables, functions=rule.functions)
    try:
        passed = rule.program.execute(context)
    except (KeyError, IndexError, ZeroDivisionError, OverflowError, RuntimeError, TypeError, ValueError) as exc:
        outcome, detail = _failure(exc)
        return Result(where, rule.rule, message, outcome, detail, rule.transition)
    if passed is not True:
        reason = str(entry.get("reason") or "")
        return Result(where, rule.rule, message, VIOLATED, "", rule.transition, reason, schema.get("type"))
    return None


def _failure(exc):
    """(outcome, detail) of a rule whose evaluation raised ``exc``."""
    if isinstance(exc, KeyError):
        return ERROR, f"no such key: {exc.args[0]}"
    if isinstance(exc, (IndexError, ZeroDivisionError, OverflowError)):
        return ERROR, _short(exc)
    if isinstance(exc, RuntimeError):
        text = _short(exc)
        if text.startswith("Undefined variable or function"):
            return UNEVALUABLE, text
        return ERROR, text  # a function failed on its argument (bad duration, bad regex): the server fails too
    # TypeError, ValueError ("no such overload"): likely a typing gap of krops, listed
    return UNEVALUABLE, f"the CEL library failed ({type(exc).__name__}: {_short(exc)})"


def _children(value, old, has_old, schema, path):
    """(value, old value, has old, schema, path) of each child node the rules descend to: object properties,
    additionalProperties values, and list items (matched to their old items by the list-map keys)."""
    if isinstance(value, dict):
        properties = schema.get("properties")
        if isinstance(properties, dict):
            for key, sub in properties.items():
                if key in value:
                    has = has_old and isinstance(old, dict) and key in old
                    yield value[key], old.get(key) if has else None, has, sub, f"{path}.{key}" if path else key
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, item in value.items():
                if isinstance(properties, dict) and key in properties:
                    continue
                has = has_old and isinstance(old, dict) and key in old
                yield item, old.get(key) if has else None, has, extra, f"{path}[{key}]"
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            yield from _list_children(value, old, has_old, schema, items, path)


def _list_children(value, old, has_old, schema, items, path):
    keys = schema.get("x-kubernetes-list-map-keys") if schema.get("x-kubernetes-list-type") == "map" else None
    olds = {}
    if keys and has_old and isinstance(old, list):
        olds = {_map_key(item, keys): item for item in old if isinstance(item, dict)}
    for index, item in enumerate(value):
        key = _map_key(item, keys) if keys and isinstance(item, dict) else None
        has = key is not None and key in olds
        yield item, olds.get(key) if has else None, has, items, "%s[%d]" % (path, index)


def _map_key(item, keys):
    return tuple(repr(item.get(k)) for k in keys)


def _root_view(obj):
    """At the root the server exposes only apiVersion, kind, metadata.name/generateName, spec, status..."""
    if not isinstance(obj, dict):
        return obj
    view = dict(obj)
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        view["metadata"] = {k: meta[k] for k in ("name", "generateName") if k in meta}
    return view


def _typed(value, schema):
    """Defaults applied and values typed as the schema says (what the server validates)."""
    if not isinstance(schema, dict):
        return _plain(value)
    kind = schema.get("type")
    if isinstance(value, dict):
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        for key, sub in properties.items():
            if key not in value and isinstance(sub, dict) and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
        extra = schema.get("additionalProperties")
        for key in list(value):
            sub = properties.get(key, extra if isinstance(extra, dict) else None)
            value[key] = _typed(value[key], sub)
        return value
    if isinstance(value, list):
        items = schema.get("items")
        return [_typed(item, items) for item in value]
    if kind == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    return _plain(value)


def _plain(value):
    """YAML scalars that JSON does not have (timestamps) become the strings the server would see."""
    if isinstance(value, (datetime.datetime, datetime.date)):
        text = value.isoformat()
        return text.replace("+00:00", "Z")
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def schema_of(store, obj):
    """The JSON schema of ``obj`` in a validate_schema.SchemaStore when it has CEL rules, else None.

    Built-in kinds carry no rules in the kubernetes-validate schemas; a missing or unreachable
    schema is reported by validate's schema rule, not here.
    """
    from ansible_collections.krops.platform.plugins.module_utils import validate_schema

    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    if not kind or validate_schema.is_builtin_group(validate_schema.split_api_version(api_version)[0]):
        return None
    try:
        schema = store.validator(api_version, kind).schema
    except (validate_schema.SchemaMissing, validate_schema.SchemaUnreachable):
        return None
    return schema if has_rules(schema) else None


def check(obj, store, old=None, transition_only=False):
    """Results of ``obj`` (SOPS metadata removed, as kustomize-controller does) against its schema's rules."""
    schema = schema_of(store, obj)
    if schema is None:
        return []
    obj = {k: v for k, v in obj.items() if k != "sops"}
    if old is not None:
        old = {k: v for k, v in old.items() if k != "sops"}
    return evaluate(obj, schema, old=old, transition_only=transition_only)
