# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Differential check of the CEL rules: krops' evaluator (plugins/module_utils/cel.py, the Rust-backed
common-expression-language) against an independent path (tests/substrate/cel_independent.py: cel-python and
its own schema walk), on the objects of every tree as kubectl itself renders them (not render.py). A rule both
engines evaluate to a boolean and that they disagree on fails the test, and so does a write to the strict
emulator (strict_api.cel_errors runs the same comparison)."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess

import pytest
import yaml
from ansible_collections.krops.platform.plugins.module_utils import cel as krops_cel

from tests.substrate import cel_independent
from tests.substrate.fixtures import REPO

SCHEMAS = REPO / "schemas" / "crds"
ENVIRONMENTS = ("local-host", "aws", "aws-crossplane", "azure", "gcp", "local-talos")


def _kubectl_kustomize(directory):
    """The directory's objects, rendered by the kubectl binary itself (no KUBECONFIG: no cluster needed)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    proc = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if isinstance(d, dict)]


def _schema(obj):
    group, _sep, version = obj.get("apiVersion", "").rpartition("/")
    path = SCHEMAS / group / f"{obj.get('kind', '').lower()}_{version}.json"
    if not group or not path.is_file():
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _tree_objects():
    found = []
    for env in ENVIRONMENTS:
        for current, dirs, files in os.walk(REPO / "mgmt" / env):
            dirs.sort()
            if "kustomization.yaml" in files:
                found += _kubectl_kustomize(current)
    return found


def test_both_cel_engines_agree_on_every_rule_of_every_tree():
    compared = disagree = 0
    problems = []
    for obj in _tree_objects():
        schema = _schema(obj)
        if schema is None or "x-kubernetes-validations" not in json.dumps(schema):
            continue
        mine = cel_independent.outcomes(obj, schema)
        compared += sum(1 for v in mine.values() if v != cel_independent.ERROR)
        found = cel_independent.disagreements(obj, schema, krops_cel.evaluate(obj, schema))
        disagree += len(found)
        problems += [(obj["kind"], obj["metadata"].get("name"), *f) for f in found]
    assert problems == []
    assert compared >= 50  # the comparison is not vacuous (58 rule runs when written)


@pytest.mark.parametrize(
    "path, kind, mutate, rule_part",
    [
        # test_cel.py's cases: a duplicate extra arg, and chart together with chartRef
        (
            "mgmt/local-host/clusters/local-management/control-plane.yaml",
            "KubeadmControlPlane",
            lambda o: (
                o["spec"]["kubeadmConfigSpec"]
                .setdefault("clusterConfiguration", {})
                .setdefault("apiServer", {})
                .update({"extraArgs": [{"name": "v", "value": "1"}, {"name": "v", "value": "2"}]})
            ),
            "",
        ),
    ],
)
def test_both_engines_see_the_same_violation(path, kind, mutate, rule_part):
    [obj] = [d for d in yaml.safe_load_all((REPO / path).read_text()) if d and d.get("kind") == kind]
    obj = copy.deepcopy(obj)
    mutate(obj)
    schema = _schema(obj)
    product = [r for r in krops_cel.evaluate(obj, schema) if r.outcome == krops_cel.VIOLATED]
    mine = {k: v for k, v in cel_independent.outcomes(obj, schema).items() if v == cel_independent.VIOLATED}
    assert product and {(r.path, r.rule) for r in product} <= set(mine) | {
        k for k, v in cel_independent.outcomes(obj, schema).items() if v == cel_independent.ERROR
    }
    assert cel_independent.disagreements(obj, schema, krops_cel.evaluate(obj, schema)) == []


def test_a_disagreement_is_reported():
    """A product result that claims a violation cel-python does not see is a disagreement (the check can fail)."""
    schema = {
        "type": "object",
        "properties": {"spec": {"type": "object", "x-kubernetes-validations": [{"rule": "self.a > 1"}]}},
    }
    obj = {"apiVersion": "x/v1", "kind": "X", "spec": {"a": 5}}

    class Claimed:
        path, rule, outcome, transition = "spec", "self.a > 1", krops_cel.VIOLATED, False

    assert cel_independent.disagreements(obj, schema, [Claimed()]) == [("spec", "self.a > 1", "violated", "pass")]
    assert cel_independent.disagreements(obj, schema, krops_cel.evaluate(obj, schema)) == []
    obj["spec"]["a"] = 0
    assert cel_independent.outcomes(obj, schema) == {("spec", "self.a > 1"): "violated"}
    assert cel_independent.disagreements(obj, schema, krops_cel.evaluate(obj, schema)) == []


def test_the_emulators_own_core_schema_walk_agrees_with_validate_schema():
    """strict_api validates built-in kinds with tests/substrate/core_schemas.py and compares krops' validator."""
    from ansible_collections.krops.platform.plugins.module_utils import validate_schema

    from tests.substrate import core_schemas

    store = validate_schema.SchemaStore(location=str(SCHEMAS))
    bad = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"id": 12345678901}}
    good = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 1}}
    for obj in (bad, good):
        own = core_schemas.error_paths(obj["apiVersion"], obj["kind"], obj)
        theirs = sorted(
            (tuple(map(str, e.absolute_path)), e.validator)
            for e in store.validator(obj["apiVersion"], obj["kind"]).iter_errors(obj)
        )
        assert own == theirs
    assert core_schemas.error_paths("v1", "ConfigMap", bad) == [(("data", "id"), "type")]
    assert core_schemas.validator("v1", "NoSuchKind") is None


# --- the emulator's verdict is the independent path's ------------------------------------------------


def _schema_with(rule):
    return {
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {"a": {"type": "integer"}}, "x-kubernetes-validations": [rule]}
        },
    }


def test_the_emulator_reports_the_independent_paths_message_from_message_expression():
    """apiextensions prints messageExpression's value; krops' evaluator does not evaluate it, so this message can
    only come from the emulator's own path."""
    from tests.substrate import strict_api

    schema = _schema_with(
        {"rule": "self.a > 1", "message": "a is small", "messageExpression": "'a is ' + string(self.a)"}
    )
    errors = strict_api.cel_errors(schema, {"spec": {"a": 0}})
    assert [str(e) for e in errors] == ['spec: Invalid value: "object": a is 0']


@pytest.mark.parametrize(
    "expression",
    ["''", "'   '", "'two\\nlines'", "self.missing", "1"],
    ids=["empty", "blank", "line-break", "runtime-error", "not-a-string"],
)
def test_a_message_expression_that_gives_no_usable_string_falls_back_to_message(expression):
    from tests.substrate import strict_api

    schema = _schema_with({"rule": "self.a > 1", "message": "a is small", "messageExpression": expression})
    errors = strict_api.cel_errors(schema, {"spec": {"a": 0}})
    assert [str(e) for e in errors] == ['spec: Invalid value: "object": a is small']


def test_a_violation_only_krops_walk_reaches_fails_the_write(monkeypatch):
    """The emulator's verdict walks the schema itself: a rule krops' evaluator reports where the emulator's walk
    never ran one is a disagreement (500), not an error taken on krops' word."""
    from tests.substrate import strict_api

    schema = _schema_with({"rule": "self.a > 1"})
    fake = krops_cel.Result("spec.elsewhere", "self.a > 1", "", krops_cel.VIOLATED, schema_type="object")
    monkeypatch.setattr(strict_api.krops_cel, "evaluate", lambda obj, schema: [fake])
    with pytest.raises(strict_api.ApiError) as caught:
        strict_api.cel_errors(schema, {"spec": {"a": 5}})
    assert "two CEL walks disagree" in str(caught.value)


def test_an_optional_old_self_rule_runs_on_create_through_krops_evaluator():
    """optionalOldSelf rules run on create (oldSelf is an empty optional); the emulator's own path skips oldSelf
    rules, so krops' verdict is taken and listed as such."""
    from tests.substrate import strict_api

    schema = _schema_with({"rule": "oldSelf.hasValue()", "optionalOldSelf": True})
    errors = strict_api.cel_errors(schema, {"spec": {"a": 0}})
    assert [str(e) for e in errors] == ['spec: Invalid value: "object": failed rule: oldSelf.hasValue()']
    assert "oldSelf.hasValue()" in strict_api.PRODUCT_VERDICTS
