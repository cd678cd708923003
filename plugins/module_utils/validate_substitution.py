# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""validate's ``substitution`` rule: every substituted field keeps its schema type under realistic site values.

kustomize-controller substitutes postBuild variables on the text of each object and reads the result back as
YAML 1.1 (fluxcd/pkg kustomize v1.35.4 ``kustomize_varsub.go``: ``res.AsYAML()``, ``envsubst``,
sigs.k8s.io/yaml ``YAMLToJSON`` on go-yaml v2). kustomize writes ``"${VAR}"`` without its quotes, so a
site value such as an account id ``012345678901`` becomes a number, ``on`` becomes true, ``1.30`` becomes
1.3. This rule substitutes each object with the run's values (the tree's own ConfigMaps and inline
variables, the sample run tags) and then with each realistic value of :data:`SITE_VALUES`, re-types the
result as go-yaml v2 does and checks it against the schema. A type error that appears only after
substitution is a finding naming the variable and the value, with the fix (the Flux docs' quote variable).

Importable without Ansible.
"""

from __future__ import annotations

import functools
import math
import re

try:
    import yaml
except ImportError:  # PyYAML comes with ansible-core
    yaml = None

from ansible_collections.krops.platform.plugins.module_utils import render
from ansible_collections.krops.platform.plugins.module_utils.validate_schema import first_errors

RULE = "substitution"

# Realistic values a site (or a run) may give these variables: why each one matters.
SITE_VALUES = {
    "AWS_ACCOUNT_ID": ("123456789012", "012345678901"),  # 12 digits; leading zeros are allowed
    "GCP_PROJECT_NUMBER": ("123456789012",),  # project numbers are all digits
    "KROPS_RUN_ID": ("20261201",),  # a run id the caller forces (bootstrap krops_run_tags)
    "KROPS_REVISION": ("1.30", "0123456"),  # a release tag, a short commit of digits
    "KROPS_RUN_KIND": ("true", "on"),  # a flag-like run kind
}

_BOOL = {
    **dict.fromkeys("y Y yes Yes YES true True TRUE on On ON".split(), True),
    **dict.fromkeys("n N no No NO false False FALSE off Off OFF".split(), False),
}
_INT = re.compile(r"^[-+]?(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)$")
_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_DATE = re.compile(r"^\d{4}-\d{1,2}-\d{1,2}([Tt ].*)?$")


@functools.lru_cache(maxsize=1 << 16)
def go_yaml_v2_value(text):
    """The value go-yaml v2 (go.yaml.in/yaml/v2 v2.4.3 resolve.go) gives a plain scalar, after encoding/json."""
    if text in _BOOL:
        return _BOOL[text]
    if text in ("", "~", "null", "Null", "NULL"):
        return None
    if text in (".inf", ".Inf", ".INF", "+.inf", "-.inf", ".nan", ".NaN", ".NAN"):
        return float(text.replace(".", "", 1)) if "inf" in text.lower() else math.nan
    if text[:1] not in ".+-0123456789":
        return text
    if _DATE.match(text):
        return text  # timestamps decoded into interface{} stay strings
    plain = text.replace("_", "")
    if _INT.match(plain):
        body = plain.lstrip("+-")
        base = {"0x": 16, "0o": 8, "0b": 2}.get(body[:2].lower())
        value = int(body[2:], base) if base else (int(body, 8) if len(body) > 1 and body[0] == "0" else int(body))
        return -value if plain.startswith("-") else value
    if _FLOAT.match(plain):
        value = float(plain)
        return int(value) if value == int(value) and abs(value) < 1e21 else value  # JSON has no 1.0
    return text


def _construct(node):
    if isinstance(node, yaml.MappingNode):
        return {str(_construct(k)): _construct(v) for k, v in node.value}
    if isinstance(node, yaml.SequenceNode):
        return [_construct(v) for v in node.value]
    return node.value if node.style else go_yaml_v2_value(node.value)


# libyaml's emitter and parser when PyYAML has them (as render.py reads the builds): the pure-Python
# ones cost most of validate's time on a large tree (docs/scale.md), for the same text and nodes.
_SafeDumper = getattr(yaml, "CSafeDumper", getattr(yaml, "SafeDumper", object))
# _construct types each scalar itself (go-yaml v2's rules) and never reads a node's tag, so the nodes are composed
# with the base resolver: the safe resolver's regular expressions would tag every scalar for nothing.
_SafeLoader = getattr(yaml, "CBaseLoader", getattr(yaml, "BaseLoader", None))


def unsubstituted_text(obj):
    """``obj`` as kustomize writes it before substitution (strings quoted only where go-yaml v2 needs it)."""
    return yaml.dump(obj, Dumper=_Dumper, default_flow_style=False, width=1 << 30)


def flux_substitute(obj, variables, text=None):
    """``obj`` as kustomize-controller applies it with ``variables`` (raises yaml.YAMLError, ValueError).

    ``text``: ``unsubstituted_text(obj)`` when the caller has it already (one object, many value sets).
    """
    text = unsubstituted_text(obj) if text is None else text
    return _construct(yaml.compose(render.substitute_text(text, variables), Loader=_SafeLoader))


class _Dumper(_SafeDumper):  # pylint: disable=too-many-ancestors
    """Quotes exactly the strings go-yaml v2 would read back as another type (as JSONToYAML writes them)."""


def _str(dumper, value):
    quoted = go_yaml_v2_value(value) != value or "\n" in value
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"' if quoted else None)


if yaml is not None:
    _Dumper.add_representer(str, _str)


def _compose(text, variables):
    return yaml.compose(render.substitute_text(text, variables), Loader=_SafeLoader)


def changed_nodes(base, node):
    """[(path, node)] of the scalar nodes of ``node`` whose value or plainness differs from ``base``'s (what
    _construct types differently; a scalar typed the same all the same may be among them), or None when the two
    differ in shape (a node kind, a length, a key). The text both come from is one object's dump (unique keys), so
    equal keys give the same paths as _construct's dictionaries."""
    scalar, sequence = yaml.ScalarNode, yaml.SequenceNode
    found, links = [], [None]  # links[i]: (parent link, step node or index) of the i-th visited container child
    stack = [(base, node, 0)]
    while stack:
        b, n, link = stack.pop()
        kind = type(n)
        if not isinstance(b, kind):  # the three node classes do not subclass one another
            return None
        if kind is scalar:
            if b.value != n.value or (not b.style) != (not n.style):
                found.append((link, n))
            continue
        bv, nv = b.value, n.value
        if len(bv) != len(nv):
            return None
        if kind is sequence:
            for index, (bi, ni) in enumerate(zip(bv, nv)):
                links.append((link, index))
                stack.append((bi, ni, len(links) - 1))
            continue
        for (bk, bval), (nk, nval) in zip(bv, nv):
            if (
                not isinstance(nk, scalar)
                or not isinstance(bk, scalar)
                or bk.value != nk.value
                or (not bk.style) != (not nk.style)
            ):
                return None
            links.append((link, nk))
            stack.append((bval, nval, len(links) - 1))
    return [(_path_of(links, link), n) for link, n in found]


def _path_of(links, link):
    steps = []
    while link:
        link, step = links[link]
        steps.append(step if isinstance(step, int) else str(_construct(step)))
    return tuple(reversed(steps))


def value_set_errors(store, text, base_node, base_obj, parts, variables):
    """``store.errors`` of the object ``text`` gives with ``variables``, validating only what they change from
    ``base_node`` (SchemaStore.variant_errors_at; the whole object when its shape changes). Raises yaml.YAMLError,
    ValueError."""
    node = _compose(text, variables)
    changed = changed_nodes(base_node, node)
    if changed is None:
        return store.errors(_construct(node))
    return store.variant_errors_at(base_obj, parts, {path: _construct(n) for path, n in changed})


def check(items, store, run_values, add, object_id):
    """Findings (via ``add(file, object, rule, message)``) for items with ``unsubstituted`` (object, variables)."""
    for item in items:
        if not item.unsubstituted or item.fallback:
            continue
        raw, variables = item.unsubstituted
        if not render.mentions_variables(raw):
            continue  # its text holds no "${": nothing to substitute
        text = unsubstituted_text(raw)  # once per object: each value set below substitutes the same text
        used = sorted(set(re.findall(r"\$\{([_a-zA-Z][_a-zA-Z0-9]*)", text)))
        if not used:
            continue
        base = dict(run_values, **variables)
        try:
            base_node = _compose(text, base)
            base_obj = _construct(base_node)
            parts = store.error_parts(base_obj)
        except Exception:  # noqa: BLE001 - no schema or invalid YAML: the schema rule reports it
            continue
        baseline = set(first_errors(parts[0] + parts[1]))
        seen = set()
        for name in used:
            for value in SITE_VALUES.get(name, ()):
                try:
                    errors = value_set_errors(store, text, base_node, base_obj, parts, dict(base, **{name: value}))
                except (yaml.YAMLError, ValueError) as exc:
                    errors = [("-", f"the substituted YAML is invalid: {exc}")]
                for path, message in errors:
                    if (path, message) in baseline or (path, name) in seen:
                        continue
                    seen.add((path, name))
                    add(
                        item.file,
                        object_id(item.obj),
                        RULE,
                        f"{path}: {message} when {name}={value} (Flux re-types the substituted YAML and kustomize drops the quotes "
                        f'of "${{{name}}}"; write ${{quote}}${{{name}}}${{quote}} with quote: \'"\' among the '
                        "Kustomization's variables)",
                    )
