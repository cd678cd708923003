# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""CEL rules in validate: violations of real rules of the vendored CAPI and Flux schemas planted in
a copy of the local-host tree, transition rules, defaults, errors, and rules krops cannot evaluate.
"""

from __future__ import annotations

import glob
import json
import shutil

import pytest

from ansible_collections.krops.platform.plugins.module_utils import cel
from ansible_collections.krops.platform.plugins.module_utils import validate
from tests.substrate.trees import SCHEMAS, copy_repo, edit, findings

KCP = "mgmt/local-host/clusters/local-management/control-plane.yaml"
FLUXINSTANCE = "mgmt/local-host/flux-apps/workload-flux/fluxinstance.yaml"


@pytest.fixture
def tree(tmp_path):
    return copy_repo(tmp_path, ("mgmt/local-host", "workload/local-host"))


def check(root, **kwargs):
    return validate.run(str(root), environments=["local-host"], schema_location=str(SCHEMAS), **kwargs)


def schema(group, kind, version):
    with open(SCHEMAS / group / (f"{kind}_{version}.json"), encoding="utf-8") as handle:
        return json.load(handle)


def test_the_real_tree_passes_every_rule_and_every_vendored_rule_is_evaluable(tree):
    result = check(tree)
    assert result["findings"] == [] and result["cel_unevaluable"] == []
    rules = set()
    for path in glob.glob(str(SCHEMAS / "*" / "*.json")):
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        if "x-kubernetes-validations" not in text:
            continue
        stack = [json.loads(text)]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                entries = node.get("x-kubernetes-validations")
                if isinstance(entries, list):
                    rules.update(r["rule"] for r in entries)
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
    assert len(rules) > 100
    assert [r for r in sorted(rules) if cel.compiled(r).unsupported] == []


def test_capi_kubeadm_control_plane_duplicate_extra_args_violates_its_rule(tree):
    # controlplane.cluster.x-k8s.io/v1beta2 KubeadmControlPlane: extraArgs names must be unique.
    edit(
        tree,
        KCP,
        "        certSANs: [localhost, 127.0.0.1, 0.0.0.0, host.docker.internal]\n",
        "        certSANs: [localhost, 127.0.0.1, 0.0.0.0, host.docker.internal]\n        extraArgs:\n"
        '          - {name: audit-log-maxage, value: "3"}\n          - {name: audit-log-maxage, value: "7"}\n',
    )
    assert findings(check(tree)) == [
        (
            KCP,
            "KubeadmControlPlane/default/local-management-control-plane",
            "cel",
            "spec.kubeadmConfigSpec.clusterConfiguration.apiServer.extraArgs: extraArgs name must "
            "be unique (rule: self.all(x, self.exists_one(y, x.name == y.name)))",
        )
    ]
    assert findings(check(tree, cel=False)) == []  # the JSON schema alone accepts it


def test_flux_instance_name_rule_at_the_root_uses_metadata_name(tree):
    # fluxcd.controlplane.io/v1 FluxInstance: self.metadata.name == 'flux'.
    edit(tree, FLUXINSTANCE, "  name: flux\n", "  name: flux-workload\n")
    assert findings(check(tree)) == [
        (
            FLUXINSTANCE,
            "FluxInstance/flux-system/flux-workload",
            "cel",
            "(root): the only accepted name for a FluxInstance is 'flux' (rule: self.metadata.name == 'flux')",
        )
    ]


def test_flux_helmrelease_chart_and_chartref_together_violate_its_rule(tree):
    # helm.toolkit.fluxcd.io/v2 HelmRelease: either chart or chartRef must be set.
    edit(
        tree,
        "workload/local-host/podinfo.yaml",
        "  chartRef:\n",
        "  chart:\n    spec:\n      chart: podinfo\n      sourceRef:\n        kind: OCIRepository\n"
        "        name: podinfo\n  chartRef:\n",
    )
    cel_findings = [f for f in findings(check(tree)) if f[2] == "cel"]
    assert cel_findings == [
        (
            "workload/local-host/podinfo.yaml",
            "HelmRelease/podinfo/podinfo",
            "cel",
            "spec: either chart or chartRef must be set (rule: (has(self.chart) && !has(self.chartRef)) "
            "|| (!has(self.chart) && has(self.chartRef)))",
        )
    ]


def test_transition_rule_runs_only_with_the_old_object():
    # fluxcd.controlplane.io/v1 FluxInstance: spec.sync.name is immutable (self == oldSelf).
    fluxinstance = schema("fluxcd.controlplane.io", "fluxinstance", "v1")
    old = {
        "apiVersion": "fluxcd.controlplane.io/v1",
        "kind": "FluxInstance",
        "metadata": {"name": "flux"},
        "spec": {
            "distribution": {"version": "2.7.x", "registry": "ghcr.io/fluxcd"},
            "sync": {"kind": "OCIRepository", "url": "oci://r/x", "ref": "latest", "path": "p", "name": "a"},
        },
    }
    new = json.loads(json.dumps(old))
    new["spec"]["sync"]["name"] = "b"
    assert cel.evaluate(new, fluxinstance) == []  # create: transition rules are skipped
    results = cel.evaluate(new, fluxinstance, old=old, transition_only=True)
    assert [r.as_dict() for r in results] == [
        {
            "path": "spec.sync.name",
            "rule": "self == oldSelf",
            "message": "Sync name is immutable",
            "outcome": "violated",
            "detail": "",
            "transition": True,
        }
    ]
    assert cel.evaluate(old, fluxinstance, old=old) == []
    # No old value at that place (sync added): the server skips the rule.
    del old["spec"]["sync"]["name"]
    assert cel.evaluate(new, fluxinstance, old=old, transition_only=True) == []


ITEM = {
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "x-kubernetes-validations": [{"rule": "self.name.lowerAscii() == self.name", "message": "lower case"}],
}
SCHEMA = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "size": {"type": "string"},
                "mode": {"type": "string", "default": "auto"},
                "ratio": {"type": "number"},
                "items": {"type": "array", "items": ITEM},
            },
            "x-kubernetes-validations": [
                {"rule": "self.mode == 'auto' || has(self.size)", "message": "size is required unless mode is auto"},
                {"rule": "!has(self.ratio) || self.ratio > 0.5", "message": "ratio above 0.5"},
                {"rule": "!has(self.size) || quantity(self.size).isLessThan(quantity('1Gi'))", "message": "below 1Gi"},
                {"rule": "!has(self.size) || semver(self.size).major() < 2", "message": "needs semver"},
                {"rule": "self.size.split('i').size() <= 2", "message": "one i"},
            ],
        }
    },
}


def test_defaults_typing_extensions_errors_and_unevaluable_rules():
    results = cel.evaluate({"spec": {"ratio": 1, "items": [{"name": "ok"}, {"name": "NotOk"}]}}, SCHEMA)
    assert [(r.path, r.outcome, r.message, r.detail) for r in results] == [
        # mode defaults to auto, so the first rule passes; ratio 1 is a double (1.0 > 0.5) and passes.
        ("spec", "unevaluable", "needs semver", "uses major(), semver(), which krops cannot evaluate"),
        ("spec", "error", "one i", "no such key: size"),
        ("spec.items[1]", "violated", "lower case", ""),
    ]
    assert results[1].text() == "spec: no such key: size evaluating rule: self.size.split('i').size() <= 2"
    assert results[0].text() == (
        "spec: rule not evaluated, uses major(), semver(), which krops cannot evaluate: "
        "!has(self.size) || semver(self.size).major() < 2"
    )
    results = cel.evaluate({"spec": {"mode": "manual", "size": "1Gi", "ratio": 0.25}}, SCHEMA)
    assert [(r.message, r.outcome) for r in results] == [
        ("ratio above 0.5", "violated"),
        ("below 1Gi", "violated"),
        ("needs semver", "unevaluable"),
    ]
    results = cel.evaluate({"spec": {"mode": "manual", "size": "1 Gi"}}, SCHEMA)
    assert [(r.message, r.outcome) for r in results] == [("below 1Gi", "error"), ("needs semver", "unevaluable")]
    assert results[0].detail.startswith(
        "Function 'quantity' error: Python function call failed: ValueError: invalid quantity '1 Gi'"
    )


def test_unevaluable_rule_of_a_schema_is_listed_by_validate_never_passed(tree, tmp_path):
    schemas = tmp_path / "schemas"
    shutil.copytree(SCHEMAS, schemas, symlinks=True, ignore=shutil.ignore_patterns("kustomize.toolkit.fluxcd.io"))
    shutil.copytree(SCHEMAS / "kustomize.toolkit.fluxcd.io", schemas / "kustomize.toolkit.fluxcd.io")
    path = schemas / "kustomize.toolkit.fluxcd.io" / "kustomization_v1.json"
    data = json.loads(path.read_text())
    data["properties"]["spec"]["properties"]["interval"]["x-kubernetes-validations"] = [
        {"rule": "ip('10.0.0.1').family() == 4", "message": "needs the ip library"}
    ]
    path.write_text(json.dumps(data))
    result = validate.run(str(tree), environments=["local-host"], schema_location=str(schemas))
    assert result["findings"] == []
    unevaluable = result["cel_unevaluable"]
    assert len(unevaluable) == 10  # nine Flux Kustomizations and the one the ResourceSet renders
    assert unevaluable[0] == {
        "file": "mgmt/local-host/caaph-system/flux-ks.yaml",
        "object": "Kustomization/flux-system/caaph-system",
        "environment": "local-host",
        "message": "spec.interval: rule not evaluated, uses family(), ip(), which krops cannot "
        "evaluate: ip('10.0.0.1').family() == 4",
    }
    assert result["summary"]["local-host"]["cel_unevaluable"] == 10
    lines = validate.format_text(result)
    assert sum("[cel] NOT EVALUATED" in line for line in lines) == 10


@pytest.mark.parametrize("name", sorted(cel.BUILTINS))
def test_every_builtin_the_static_check_trusts_exists_in_the_engine(name):
    """Called as a function or as a method, the engine knows the name (a wrong argument type is fine)."""
    unknown = []
    for form in ("%s(x)", "x.%s()", "x.%s(x)", "t.%s()", "optional.%s()", "optional.%s(x)"):
        try:
            cel._cel.evaluate(
                form % name, {"x": "2024-01-01T00:00:00Z", "t": cel._cel.evaluate("timestamp('2024-01-01T00:00:00Z')")}
            )
        except RuntimeError as exc:
            unknown.append("Undefined variable or function" in str(exc))
            continue
        except Exception:  # pylint: disable=broad-except
            pass
        unknown.append(False)
    assert not all(unknown), name


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("'a,b'.split(',')", ["a", "b"]),
        ("'AbC'.lowerAscii()", "abc"),
        ("[1, 2, 3].isSorted()", True),
        ("[3, 1].isSorted()", False),
        ("[1, 2].sum()", 3),
        ("[4, 2].min()", 2),
        ("['a', 'b'].indexOf('b')", 1),
        ("'abcb'.lastIndexOf('b')", 3),
        ("'abc123'.find('[0-9]+')", "123"),
        ("'1a2b'.findAll('[0-9]')", ["1", "2"]),
        ("isQuantity('1.5Gi')", True),
        ("isQuantity('1.5 Gi')", False),
        ("isQuantity('1KB')", False),
        ("quantity('1Gi') == quantity('1024Mi')", True),
        ("quantity('1Gi').isGreaterThan(quantity('500Mi'))", True),
        ("quantity('500m').compareTo(quantity('0.5'))", 0),
        ("quantity('1.5').isInteger()", False),
        ("quantity('2k').asInteger()", 2000),
        ("quantity('1Gi').add(quantity('1Gi')) == quantity('2Gi')", True),
        ("quantity('1').sub(1).sign()", 0),
        ("quantity('1e3').asApproximateFloat()", 1000.0),
        ("isURL('https://example.com/x')", True),
        ("isURL('not a url')", False),
        ("isURL('relative/path')", False),
        ("isURL('https://a b/')", False),
        ("url('https://u@example.com:8443/a?x=1&x=2').getHost()", "example.com:8443"),
        ("url('https://[::1]:80/p').getHostname()", "::1"),
        ("url('https://[::1]:80/p').getPort()", "80"),
        ("url('https://example.com/a?x=1&x=2').getQuery()", {"x": ["1", "2"]}),
        ("url('/abs/path').getEscapedPath()", "/abs/path"),
        ("url('https://example.com').getScheme()", "https"),
        ("isIP('10.0.0.1')", True),
        ("isIP('2001:db8::1')", True),
        ("isIP('10.0.0.01')", False),
        ("isIP('::ffff:1.2.3.4')", False),
        ("isIP('fe80::1%eth0')", False),
        ("isIP('10.0.0.0/8')", False),
        ("isCIDR('10.0.0.0/8')", True),
        ("isCIDR('10.0.0.1/24')", True),
        ("isCIDR('2001:db8::/64')", True),
        ("isCIDR('10.0.0.0/33')", False),
        ("isCIDR('10.0.0.0/08')", False),
        ("isCIDR('10.0.0.1')", False),
        ("['10.0.0.1', '10.0.0.0/8'].all(i, isIP(i) || isCIDR(i))", True),
        ("!format.dns1123Label().validate('my-name').hasValue()", True),
        ("format.dns1123Label().validate('My_Name').hasValue()", True),
        ("format.named('dns1035Label').value().validate('1abc').hasValue()", True),
        ("format.named('nope').hasValue()", False),
        ("format.dns1123LabelPrefix().validate('abc-').hasValue()", False),
        ("format.dns1123Label().validate('abc-').hasValue()", True),
        ("format.qualifiedName().validate('example.com/my.name').hasValue()", False),
        ("format.qualifiedName().validate('/x').value()", ["prefix part must be non-empty"]),
        ("format.labelValue().validate('').hasValue()", False),
        ("format.labelValue().validate('-a').hasValue()", True),
        ("format.uuid().validate('123e4567-e89b-12d3-a456-426614174000').hasValue()", False),
        ("format.byte().validate('aGk=').hasValue()", False),
        ("format.byte().validate('a!').hasValue()", True),
        ("format.date().validate('2024-02-30').hasValue()", True),
        ("format.date().validate('2024-02-29').hasValue()", False),
        ("format.datetime().validate('2024-02-29T10:00:00Z').hasValue()", False),
        ("format.datetime().validate('2024-02-29').hasValue()", True),
        ("format.uri().validate('https://x/y').hasValue()", False),
        ("format.uri().validate('x y').hasValue()", True),
        ("optional.of(1).orValue(2)", 1),
        # found by the emulator's own CEL path against upstream (tests/integration/test_cel_upstream_cases.py)
        ("'tacocat'.indexOf('a', 30)", -1),
        ("'tacocat'.lastIndexOf('a', 30)", -1),
        ("url('https://example.com/with space/').getEscapedPath()", "/with%20space/"),
        ("url('https://x/p?k=a#frag').getQuery()", {"k": ["a"]}),
        ("format.dns1123SubdomainPrefix().validate('a-.-').hasValue()", False),
        ("format.qualifiedName().validate('x/').value().size()", 2),
        ("format.uuid().validate('123e4567e89b-12d3-a456-426614174000').hasValue()", False),
        ("format.byte().validate('').hasValue()", True),
        ("format.datetime().validate('2021-01-01 00:00:00Z').hasValue()", True),
        (
            "format.dns1123Label().validate('a b').value()",
            [
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must"
                " start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for"
                " validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ],
        ),
    ],
)
def test_kubernetes_extensions(expression, expected):
    program = cel.compiled(expression)
    assert program.unsupported is None
    assert program.program.execute(cel._cel.Context(functions=program.functions)) == expected


def test_rule_options_escaped_names_optional_old_self_message_expression_field_path():
    node = {
        "type": "object",
        "properties": {"a-b": {"type": "string"}, "n": {"type": "string"}},
        "x-kubernetes-validations": [
            {"rule": "self.a__dash__b == 'x'", "message": "escaped"},
            {
                "rule": "!oldSelf.hasValue() || oldSelf.value().n == self.n",
                "optionalOldSelf": True,
                "message": "n is immutable",
            },
            {"rule": "self.n == 'x'", "messageExpression": "'n is ' + self.n", "fieldPath": ".n"},
        ],
    }
    results = cel.evaluate({"a-b": "y", "n": "y"}, node)
    assert [(r.path, r.outcome, r.message, r.detail) for r in results] == [
        ("", "unevaluable", "escaped", "uses an escaped property name (__dash__), which krops does not map"),
        (".n", "violated", "(messageExpression not evaluated: 'n is ' + self.n)", ""),
    ]
    # optionalOldSelf: runs on create too (oldSelf is optional.none()), and on update with the old value.
    results = cel.evaluate({"a-b": "y", "n": "x"}, node, old={"a-b": "y", "n": "z"}, transition_only=True)
    assert [(r.outcome, r.message) for r in results] == [("violated", "n is immutable")]
    assert cel.evaluate({"a-b": "y", "n": "x"}, node, old={"a-b": "y", "n": "x"}, transition_only=True) == []


def test_syntax_and_type_gaps_of_the_engine_are_unevaluable():
    node = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "x-kubernetes-validations": [
            {"rule": "self.?a.orValue('') == ''", "message": "optional syntax"},
            {"rule": "self.a + 1 == 2", "message": "type gap"},
        ],
    }
    results = cel.evaluate({"a": "x"}, node)
    assert [(r.outcome, r.message) for r in results] == [
        ("unevaluable", "optional syntax"),
        ("unevaluable", "type gap"),
    ]
    assert results[0].detail.startswith("the CEL library cannot parse it: Failed to parse expression")
    assert results[1].detail.startswith("the CEL library failed (TypeError: Unsupported operation: string + int.")


def test_validate_module_and_command_line_cel_switch(tree, run_module):
    import io
    from contextlib import redirect_stdout

    from ansible_collections.krops.platform.plugins.modules import validate as validate_module

    edit(tree, FLUXINSTANCE, "  name: flux\n", "  name: flux-workload\n")
    args = {"path": str(tree), "environments": ["local-host"], "schema_location": str(SCHEMAS)}
    result = run_module(validate_module, args)
    assert result.failed and [(f["rule"], f["object"]) for f in result["findings"]] == [
        ("cel", "FluxInstance/flux-system/flux-workload")
    ]
    assert result["cel_unevaluable"] == [] and result["summary"]["local-host"]["by_rule"]["cel"] == 1
    result = run_module(validate_module, dict(args, cel=False))
    assert not result.failed and result["findings"] == []
    argv = ["--path", str(tree), "--schema-location", str(SCHEMAS)]
    with redirect_stdout(io.StringIO()) as out:
        assert validate.main(argv) == 1
    assert out.getvalue().splitlines()[0] == (
        f"{FLUXINSTANCE}: FluxInstance/flux-system/flux-workload: [cel] (root): the only accepted name for a FluxInstance is "
        "'flux' (rule: self.metadata.name == 'flux')"
    )
    with redirect_stdout(io.StringIO()):
        assert validate.main(argv + ["--no-cel"]) == 0
