# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""SchemaStore.variant_errors gives exactly SchemaStore.errors of the variant (issue 26: validate at 50 clusters).

The substitution rule validates each object under each realistic site value; variant_errors validates only
what the changed values reach. The reference is the whole validation (``errors``, jsonschema over the whole
object). The corpus: every object of every shipped environment under every value set the rule tries, the
same objects with planted type errors (a quote variable dropped, so a site value re-types the field), and
schemas with the keywords that make variant_errors validate the whole object.
"""

from __future__ import annotations

import json
import re

import pytest

from ansible_collections.krops.platform.plugins.module_utils import validate, validate_schema
from ansible_collections.krops.platform.plugins.module_utils import validate_common as common
from ansible_collections.krops.platform.plugins.module_utils import validate_substitution as subst
from tests.substrate.fixtures import REPO

pytestmark = pytest.mark.slow  # validate of every environment, then every value set twice (about a minute)

SCHEMAS = str(REPO / "schemas" / "crds")


@pytest.fixture(scope="module")
def environments():
    found = []
    validate.run(str(REPO), None, SCHEMAS, collect=found.append)
    return found


def _variants(item, drop_quotes=False):
    raw, variables = item.unsubstituted
    if drop_quotes:  # the planted defect: "${quote}${X}${quote}" written as "${X}"
        raw = json.loads(re.sub(r"\$\{quote\}(\$\{[A-Z_]+(?::?[=-][^}]*)?\})\$\{quote\}", r"\1", json.dumps(raw)))
    text = subst.unsubstituted_text(raw)
    base = dict(common.SAMPLE_RUN_TAGS, **variables)
    for name in sorted(set(re.findall(r"\$\{([_a-zA-Z][_a-zA-Z0-9]*)", text))):
        for value in subst.SITE_VALUES.get(name, ()):
            yield text, base, dict(base, **{name: value})


def _compare(store, items, drop_quotes=False):
    """Each variant three ways: the whole validation (the reference), variant_errors on the objects, and the
    rule's own path (value_set_errors: the changed nodes of the composed YAML)."""
    compared = differing = 0
    for item in items:
        if not item.unsubstituted or item.fallback:
            continue
        try:
            for text, base_vars, variant_vars in list(_variants(item, drop_quotes)):
                base, variant = (
                    subst.flux_substitute(None, base_vars, text),
                    subst.flux_substitute(None, variant_vars, text),
                )
                parts = store.error_parts(base)
                reference = store.errors(variant)
                assert store.variant_errors(base, parts, variant) == reference, common.object_id(item.obj)
                base_node = subst.yaml.compose(subst.render.substitute_text(text, base_vars), Loader=subst._SafeLoader)
                by_nodes = subst.value_set_errors(store, text, base_node, base, parts, variant_vars)
                assert by_nodes == reference, common.object_id(item.obj)
                compared += 1
                differing += reference != validate_schema.first_errors(parts[0] + parts[1])
        except validate_schema.SchemaError:
            continue
    return compared, differing


def test_every_object_of_every_environment_under_every_site_value(environments, monkeypatch):
    walked = []
    original = validate_schema.nodes_at
    monkeypatch.setattr(validate_schema, "nodes_at", lambda *a: walked.append(original(*a)) or walked[-1])
    compared = 0
    for env in environments:
        compared += _compare(env.store, env.items)[0]
    assert compared > 300
    # most changed values are reached without validating the whole object again (and some are not)
    assert sum(nodes is not None for nodes in walked) > 300 and None in walked


def test_planted_type_errors_are_found_the_same_way(environments):
    compared = differing = 0
    for env in environments:
        done, changed = _compare(env.store, env.items, drop_quotes=True)
        compared, differing = compared + done, differing + changed
    assert compared > 300 and differing > 50  # the variants do add errors, and variant_errors finds the same


SCHEMA = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["name"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "maxLength": 5},
                "tags": {"type": "array", "items": {"type": "object", "properties": {"value": {"type": "string"}}}},
                "port": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                "mode": {"type": "object", "properties": {"on": {"type": "boolean"}}, "oneOf": [{"required": ["on"]}]},
                "extra": {"additionalProperties": {"type": "integer"}},
                "pattern": {"patternProperties": {"^x-": {"type": "string"}}, "allOf": [{"properties": {"x-a": {"minLength": 3}}}]},
            },
        },
    },
}  # fmt: skip


@pytest.mark.parametrize(
    ("base", "variant"),
    [
        ({"name": "ab", "tags": [{"value": "v"}]}, {"name": "ab", "tags": [{"value": 1}]}),
        ({"name": "ab"}, {"name": "abcdefgh"}),
        ({"name": "ab", "port": 1}, {"name": "ab", "port": True}),
        ({"name": "ab", "mode": {"on": True}}, {"name": "ab", "mode": {"on": "on"}}),
        ({"name": "ab", "extra": {"a": 1}}, {"name": "ab", "extra": {"a": "1"}}),
        ({"name": "ab", "pattern": {"x-a": "abc"}}, {"name": "ab", "pattern": {"x-a": 1}}),
        ({"name": "ab", "pattern": {"x-a": "abc"}}, {"name": "ab", "pattern": {"x-a": "a"}}),
        ({"name": "ab", "bogus": 1}, {"name": "abcdefg", "bogus": "1"}),
        ({"tags": [{"value": "a"}]}, {"tags": [{"value": "a"}, {"value": 2}]}),
    ],
)
def test_keywords_above_a_changed_value_and_changed_shapes(tmp_path, base, variant):
    (tmp_path / "example.com").mkdir()
    (tmp_path / "example.com" / "thing_v1.json").write_text(json.dumps(SCHEMA))
    store = validate_schema.SchemaStore(str(tmp_path))

    def obj(spec):
        return {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"}, "spec": spec}

    parts = store.error_parts(obj(base))
    assert store.variant_errors(obj(base), parts, obj(variant)) == store.errors(obj(variant))
    assert store.errors(obj(variant)) != store.errors(obj(base))
