# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""kustomize-controller's postBuild substitution, as the emulated Flux runs it (independent of krops' render).

What upstream does (fluxcd/kustomize-controller v1.9.4 ``internal/controller/kustomization_controller.go``
``build``, fluxcd/pkg kustomize v1.35.4 ``kustomize/kustomize_varsub.go`` ``SubstituteVariables``):

1. the built resource is serialised with ``res.AsYAML()`` (kustomize api v0.21.1 ``resource.go``: JSON, then
   sigs.k8s.io/yaml ``JSONToYAML``, i.e. go-yaml v2 ``Marshal``). Quotes written in the source are gone: a
   string is quoted only when go-yaml v2 would otherwise read it as another type, so ``"${VAR}"`` is emitted
   as the plain scalar ``${VAR}``;
2. a resource with the label or the annotation ``kustomize.toolkit.fluxcd.io/substitute: disabled`` is left
   alone;
3. variables: each ``substituteFrom`` ConfigMap/Secret in list order (later ones overwrite earlier ones;
   ``optional`` ones may be missing), then the inline ``substitute`` map over them; every value has its
   newlines removed;
4. nothing happens unless there is at least one variable (or ``substituteStrategy: Always``);
5. every variable name must match ``^[_[:alpha:]][_[:alpha:][:digit:]]*$``;
6. fluxcd/pkg envsubst v1.7.0 ``Eval`` on the text, then sigs.k8s.io/yaml v1.6.0 ``YAMLToJSON`` (go-yaml v2,
   YAML 1.1): a plain ``012345678901`` becomes a number, ``on``/``yes`` become true, ``1.30`` becomes 1.3.

This module re-implements those steps from the sources above; it never calls krops' ``render`` (the
code under test).
"""

from __future__ import annotations

import math
import re

import yaml

SUBSTITUTE_KEY = "kustomize.toolkit.fluxcd.io/substitute"
VARSUB_REGEX = "^[_[:alpha:]][_[:alpha:][:digit:]]*$"  # as kustomize_varsub.go prints it
_VAR_NAME = re.compile(r"^[_A-Za-z][_A-Za-z0-9]*$")  # RE2's [:alpha:] / [:digit:] are ASCII classes


class SubstitutionError(Exception):
    """The text of one of kustomize-controller's substitution errors."""


# --- go-yaml v2 (go.yaml.in/yaml/v2 v2.4.3 resolve.go) ------------------------------------------

_BOOLS = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False),
}
_NULLS = ("", "~", "null", "Null", "NULL")
_SPECIAL_FLOATS = {
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}
_YAML_STYLE_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_GO_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^[-+]?(inf|infinity|nan)$", re.I)
_TIMESTAMP = re.compile(  # the forms of resolve.go allowedTimestampFormats
    r"^\d{4}-\d{1,2}-\d{1,2}([Tt]\d{1,2}:\d{1,2}:\d{1,2}(\.\d+)?(Z|[+-]\d{2}:\d{2})|"
    r" \d{1,2}:\d{1,2}:\d{1,2}(\.\d+)?)?$"
)
_BASE60 = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")  # encode.go isBase60Float
_INT64 = (-(1 << 63), (1 << 63) - 1)


_GO_INTS = (
    (re.compile(r"^[+-]?0[xX][0-9a-fA-F]+$"), 16, 2),
    (re.compile(r"^[+-]?0[oO][0-7]+$"), 8, 2),
    (re.compile(r"^[+-]?0[bB][01]+$"), 2, 2),
    (re.compile(r"^[+-]?0[0-7]+$"), 8, 1),
    (re.compile(r"^[+-]?(0|[1-9][0-9]*)$"), 10, 0),
)


def _go_parse_int(text):
    """strconv.ParseInt(text, 0, 64), then ParseUint: prefixes 0x, 0o, 0b and a leading 0 (octal)."""
    for pattern, base, prefix in _GO_INTS:
        if pattern.match(text):
            sign = -1 if text.startswith("-") else 1
            body = text.lstrip("+-")
            value = sign * int(body[prefix:], base)
            if _INT64[0] <= value <= _INT64[1] or (not text.startswith(("+", "-")) and value < (1 << 64)):
                return value
            return None
    return None


def go_resolve(text):
    """(tag, value) go-yaml v2 gives an untagged plain scalar: 'str', 'bool', 'null', 'int', 'float', 'timestamp'."""
    if text in _BOOLS:
        return "bool", _BOOLS[text]
    if text in _NULLS:
        return "null", None
    if text in _SPECIAL_FLOATS:
        return "float", _SPECIAL_FLOATS[text]
    hint = text[:1]
    if hint == ".":
        if _GO_FLOAT.match(text):
            return "float", float(text)
    elif hint and (hint.isdigit() and hint.isascii() or hint in "+-"):
        if _TIMESTAMP.match(text):
            return "timestamp", text  # decoded into interface{} it stays a string (decode.go)
        plain = text.replace("_", "")
        value = _go_parse_int(plain)
        if value is not None:
            return "int", value
        if _YAML_STYLE_FLOAT.match(plain):
            return "float", float(plain)
        if plain.startswith(("0b", "-0b")):
            try:
                return "int", int(plain.replace("0b", "", 1), 2)
            except ValueError:
                pass
    return "str", text


class _GoLikeDumper(yaml.SafeDumper):
    """PyYAML's emitter (a libyaml port, as go-yaml v2's is) with go-yaml v2's choice of quoting."""


def _represent_str(dumper, value):
    style = None
    if "\n" in value:
        style = "|"
    elif go_resolve(value)[0] != "str" or _BASE60.match(value):
        style = '"'  # encode.go stringv: double-quoted when plain would read back as another type
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_GoLikeDumper.add_representer(str, _represent_str)


def as_yaml(obj):
    """kustomize's Resource.AsYAML(): the object as go-yaml v2 marshals it."""
    return yaml.dump(obj, Dumper=_GoLikeDumper, default_flow_style=False, sort_keys=True, width=1 << 30)


def _construct(node):
    if isinstance(node, yaml.MappingNode):
        out = {}
        for key_node, value_node in node.value:
            key = _construct(key_node)
            if isinstance(key, bool):
                key = "true" if key else "false"
            elif key is None:
                raise SubstitutionError(f"YAMLToJSON: unsupported map key of type: <nil>, value: {value_node.value!r}")
            out[str(key)] = _construct(value_node)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_construct(item) for item in node.value]
    if node.style is not None:
        return node.value  # quoted or block scalar (explicit tags are not emulated)
    _tag, value = go_resolve(node.value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise SubstitutionError(f"YAMLToJSON: json: unsupported value: {value}")
        if value == int(value) and abs(value) < 1e21:
            return int(value)  # encoding/json writes an integral float64 without a fraction: JSON reads it back as int
    return value


def yaml_to_json_value(text):
    """sigs.k8s.io/yaml YAMLToJSON of one document, as the Python value of its JSON."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise SubstitutionError(f"YAMLToJSON: {exc}")
    return None if node is None else _construct(node)


# --- fluxcd/pkg envsubst v1.7.0 (the forms the trees use) ---------------------------------------

_DEFAULT_OPS = (":=", ":-", "=", "-")


def envsubst(text, variables, strict=False):
    """``Eval``: ``$$`` is a literal ``$``; ``${var}`` and ``${var:=d}``/``${var:-d}``/``${var=d}``/``${var-d}``
    (every default op gives the default when the value is empty). Other bash operators are not emulated."""
    out = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char != "$":
            out.append(char)
            i += 1
            continue
        nxt = text[i + 1 : i + 2]
        if nxt == "$":
            out.append("$")
            i += 2
            continue
        if nxt != "{":
            out.append("$")
            i += 1
            continue
        end = text.find("}", i + 2)
        if end < 0:
            raise SubstitutionError("variable substitution failed: missing closing brace")
        body = text[i + 2 : end]
        match = re.match(r"^(\w+)(.*)$", body, re.S)
        if not match:
            raise SubstitutionError("variable substitution failed: unable to parse variable name")
        name, rest = match.groups()
        op = next((o for o in _DEFAULT_OPS if rest.startswith(o)), None)
        if rest and op is None:
            raise SubstitutionError(f"the emulated envsubst does not implement ${{{body}}}")
        default = rest[len(op) :] if op else None
        if default is not None and "${" in default:
            raise SubstitutionError(f"the emulated envsubst does not implement nested defaults: ${{{body}}}")
        if strict and op is None and name not in variables:
            raise SubstitutionError(f'variable substitution failed: variable not set (strict mode): "{name}"')
        value = variables.get(name, "")
        out.append(default if value == "" and default is not None else value)
        i = end + 1
    return "".join(out)


# --- SubstituteVariables ---------------------------------------------------------------------


def gvk_name(obj):
    """kyaml resid Gvk.String() and the name, as 'post build failed for ...' prints them."""
    group, _sep, version = obj.get("apiVersion", "").rpartition("/")
    kind = obj.get("kind") or "[noKind]"
    return "{}.{}.{}/{}".format(kind, version or "[noVer]", group or "[noGrp]", (obj.get("metadata") or {}).get("name"))


def disabled(obj):
    meta = obj.get("metadata") or {}
    return "disabled" in (
        (meta.get("labels") or {}).get(SUBSTITUTE_KEY),
        (meta.get("annotations") or {}).get(SUBSTITUTE_KEY),
    )


def merge_variables(from_sources, inline):
    """substituteFrom data in order, then inline substitute over it; newlines removed from every value."""
    merged = {}
    for data in from_sources:
        merged.update({k: str(v).replace("\n", "") for k, v in data.items()})
    merged.update({k: str(v).replace("\n", "") for k, v in (inline or {}).items()})
    return merged


def substitute(obj, variables, always=False, strict=False):
    """The object kustomize-controller applies for ``obj`` (raises SubstitutionError with upstream's text)."""
    text = as_yaml(obj)
    if disabled(obj):
        return obj
    if not variables and not always:
        return obj
    try:
        for name in variables:
            if not _VAR_NAME.match(name):
                raise SubstitutionError(f"'{name}' var name is invalid, must match '{VARSUB_REGEX}'")
        result = yaml_to_json_value(envsubst(text, variables, strict))
    except SubstitutionError as exc:
        raise SubstitutionError(f"post build failed for '{gvk_name(obj)}': envsubst error: {exc}")
    return result
