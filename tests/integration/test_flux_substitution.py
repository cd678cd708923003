# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""kustomize-controller's postBuild substitution as the emulated Flux runs it (tests/substrate/flux_varsub.py).

Cases ported from fluxcd/pkg kustomize v1.35.4 ``kustomize/kustomize_varsub_test.go`` and its testdata
(``resources/``, ``varsubstrict/``, ``varsubalways/``, ``varsubstrictempty/``), plus the re-typing of
sigs.k8s.io/yaml v1.6.0 (go-yaml v2, YAML 1.1) and the trees under realistic site values.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.substrate import flux_varsub as varsub
from tests.substrate.fixtures import REPO
from tests.substrate.flux_world import FluxController, World, condition

# testdata/resources/deployment.yaml and config.yaml @ kustomize/v1.35.4 (namespace apps from kustomization.yml)
DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {
        "name": "app",
        "namespace": "apps",
        "labels": {"environment": "${cluster_env:=dev}", "region": "${cluster_region}"},
    },
    "spec": {
        "selector": {"matchLabels": {"app": "app"}},
        "template": {
            "metadata": {
                "annotations": {
                    "prometheus.io/scrape": "${prometheus_scrape:=false}",
                    "prometheus.io/port": "${prometheus_port}",
                },
                "labels": {"app": "app"},
            },
            "spec": {"containers": [{"name": "nginx", "image": "${image}", "imagePullPolicy": "IfNotPresent"}]},
        },
    },
}
CONFIG = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {
        "name": "app-vars",
        "namespace": "apps",
        "labels": {
            "kustomize.toolkit.fluxcd.io/substitute": "disabled",
            "environment": "${cluster_env:=dev}",
            "region": "${cluster_region}",
        },
    },
    "data": {
        "prometheus_scrape": "${prometheus_scrape:=false}",
        "prometheus_port": "${prometheus_port}",
        "image": "${image}",
    },
}
# testdata/kustomization_varsub.yaml (inline) and configmap.yaml (substituteFrom app-vars)
INLINE = {"cluster_env": "prod", "cluster_region": "eu-central-1"}
APP_VARS = {"prometheus_scrape": '"true"', "prometheus_port": '"9797"', "image": "nginx:1.21.4"}


def test_upstream_varsub_case_substitutes_the_deployment_and_skips_the_disabled_configmap():
    variables = varsub.merge_variables([APP_VARS], INLINE)
    out = varsub.substitute(DEPLOYMENT, variables)
    # testdata/kustomization_varsub_expected.yaml
    assert out["metadata"]["labels"] == {"environment": "prod", "region": "eu-central-1"}
    assert out["spec"]["template"]["metadata"]["annotations"] == {
        "prometheus.io/port": "9797",
        "prometheus.io/scrape": "true",
    }
    assert out["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.21.4"
    assert varsub.substitute(CONFIG, variables) == CONFIG


def test_upstream_strict_mode_refuses_a_missing_variable_and_non_strict_leaves_it_empty():
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "app-vars-strict",
            "namespace": "apps",
            "labels": {"environment": "${cluster_env:=dev}", "region": "${cluster_region}"},
        },
        "data": {"missing": "${missing}"},
    }
    variables = varsub.merge_variables([APP_VARS], INLINE)
    with pytest.raises(varsub.SubstitutionError) as err:
        varsub.substitute(config, variables, strict=True)
    assert str(err.value) == (
        "post build failed for 'ConfigMap.v1.[noGrp]/app-vars-strict': envsubst error: "
        'variable substitution failed: variable not set (strict mode): "missing"'
    )
    assert "variable not set" in str(err.value)  # what the upstream test asserts
    assert varsub.substitute(config, variables)["data"] == {"missing": None}


def test_upstream_always_strategy_applies_defaults_without_variables():
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "app-vars-always", "namespace": "apps", "labels": {"environment": "${cluster_env:=dev}"}},
        "data": {"region": "${cluster_region:=eu-central-1}"},
    }
    assert varsub.substitute(config, {}) == config  # WithVariables (the default): no variable, no substitution
    out = varsub.substitute(config, {}, always=True)
    assert (out["metadata"]["labels"], out["data"]) == ({"environment": "dev"}, {"region": "eu-central-1"})


def test_upstream_empty_values_render_as_null_because_quotes_are_gone():
    """varsubstrictempty/config.yaml writes "${empty_inline}" in quotes; the expected output is null."""
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "app-vars-strict-empty",
            "namespace": "apps",
            "labels": {
                "from-inline": "${empty_inline}",
                "from-configmap": "${empty_cm}",
                "from-secret": "${empty_secret}",
            },
        },
    }
    variables = varsub.merge_variables([{"empty_cm": ""}, {"empty_secret": ""}], {"empty_inline": ""})
    out = varsub.substitute(config, variables, strict=True)
    assert out["metadata"]["labels"] == {"from-inline": None, "from-configmap": None, "from-secret": None}
    assert "from-inline: ${empty_inline}" in varsub.as_yaml(config)  # AsYAML wrote no quotes


def test_var_names_are_checked_against_upstream_regex():
    with pytest.raises(varsub.SubstitutionError) as err:
        varsub.substitute(DEPLOYMENT, {"cluster-env": "prod"})
    assert str(err.value) == (
        "post build failed for 'Deployment.v1.apps/app': envsubst error: "
        "'cluster-env' var name is invalid, must match '^[_[:alpha:]][_[:alpha:][:digit:]]*$'"
    )
    for bad in ("1abc", "a.b", "é"):
        with pytest.raises(varsub.SubstitutionError):
            varsub.substitute(DEPLOYMENT, {bad: "x"})
    assert varsub.substitute(DEPLOYMENT, {"_ok9": "x"})["metadata"]["labels"]["environment"] == "dev"


def test_inline_substitute_wins_and_later_sources_overwrite_earlier_ones_newlines_removed():
    merged = varsub.merge_variables([{"a": "first", "b": "one\ntwo\n"}, {"a": "second"}], {"c": "x\ny"})
    assert merged == {"a": "second", "b": "onetwo", "c": "xy"}
    assert varsub.merge_variables([{"a": "from-configmap"}], {"a": "inline"}) == {"a": "inline"}


@pytest.mark.parametrize("key", ["labels", "annotations"])
def test_the_disabled_marker_works_as_a_label_or_an_annotation_and_is_case_sensitive(key):
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", key: {}}, "data": {"a": "${A}"}}
    obj["metadata"][key][varsub.SUBSTITUTE_KEY] = "disabled"
    assert varsub.substitute(obj, {"A": "x"}) == obj
    obj["metadata"][key][varsub.SUBSTITUTE_KEY] = "Disabled"  # kustomize_varsub.go compares with ==
    assert varsub.substitute(obj, {"A": "x"})["data"]["a"] == "x"


@pytest.mark.parametrize(
    "value, typed",
    [
        ("123456789012", 123456789012),  # a 12-digit account id
        ("012345678901", 12345678901),  # leading zero: not octal (8, 9), so go-yaml v2 reads a float
        ("000000000000", 0),  # octal zero
        ("0123", 83),  # octal
        ("true", True),
        ("on", True),  # YAML 1.1 booleans (resolve.go)
        ("yes", True),
        ("off", False),
        ("1.30", 1.3),  # a version
        ("1.0", 1),  # encoding/json writes an integral float without a fraction
        ("", None),
        ("~", None),
        ("2026-12-02T12:00:00Z", "2026-12-02T12:00:00Z"),  # timestamps stay strings (decode.go)
        ("v1.30", "v1.30"),
        ("12:30", "12:30"),  # base 60 is not resolved by go-yaml v2
        ("eu-north-1", "eu-north-1"),
    ],
)
def test_a_substituted_plain_value_is_retyped_as_yaml_1_1(value, typed):
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "${V}"}}
    out = varsub.substitute(obj, {"V": value})["data"]["k"]
    assert out == typed and type(out) is type(typed)
    # the quote variable of the Flux docs ("Post build substitution of numbers and booleans") keeps it a string
    obj["data"]["k"] = "${quote}${V}${quote}"
    assert varsub.substitute(obj, {"V": value, "quote": '"'})["data"]["k"] == value


def test_escapes_and_embedded_values():
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}
    obj["data"] = {"lit": "$${A}", "dollar": "a$b", "arn": "arn:aws:iam::${A}:root", "two": "${A}-${B:-d}"}
    out = varsub.substitute(obj, {"A": "012345678901"})["data"]
    assert out == {"lit": "${A}", "dollar": "a$b", "arn": "arn:aws:iam::012345678901:root", "two": "012345678901-d"}


# --- through the emulated kustomize-controller ------------------------------------------------


def _git_source(tmp_path, files):
    repo = tmp_path / "src"
    for rel, docs in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump_all(docs))
    for argv in (
        ["git", "init", "-q", "-b", "main"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "x"],
    ):
        subprocess.run(argv, cwd=repo, check=True)
    return repo


def _reconcile(strict_cluster, tmp_path, substitute, data):
    api = strict_cluster("varsub", bundles=("flux",))
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "flux-system"}})
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ids", "namespace": "flux-system"}}
    repo = _git_source(tmp_path, {"apps/cm.yaml": [dict(configmap, data=data)]})
    api.create(
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "GitRepository",
            "metadata": {"name": "flux-system", "namespace": "flux-system"},
            "spec": {"interval": "1m", "url": "https://example.test/repo.git", "ref": {"branch": "main"}},
        }
    )
    api.create(
        {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "flux-system"},
            "spec": {
                "interval": "5m",
                "prune": True,
                "path": "./apps",
                "sourceRef": {"kind": "GitRepository", "name": "flux-system"},
                "postBuild": {"substitute": substitute},
            },
        }
    )
    world = World()
    world.add_cluster(api)
    FluxController(world, tmp_path / "work", git_checkouts={"https://example.test/repo.git": str(repo)})
    world.settle()
    return api, condition(api.get("kustomize.toolkit.fluxcd.io/v1", "Kustomization", "apps", "flux-system"))


def test_an_account_id_in_a_configmap_is_refused_by_the_api_server_unless_quoted(strict_cluster, tmp_path):
    # written "${AWS_ACCOUNT_ID}" in quotes, as the aws tree did: kustomize drops them
    api, ready = _reconcile(strict_cluster, tmp_path, {"AWS_ACCOUNT_ID": "012345678901"}, {"id": "${AWS_ACCOUNT_ID}"})
    assert ready["status"] == "False" and ready["reason"] == "ReconciliationFailed", ready
    assert ready["message"].startswith("ConfigMap/flux-system/ids dry-run failed (Invalid): ")
    assert "data.id" in ready["message"]


def test_the_quote_variable_keeps_the_account_id_a_string_on_the_api_server(strict_cluster, tmp_path):
    api, ready = _reconcile(
        strict_cluster,
        tmp_path,
        {"AWS_ACCOUNT_ID": "012345678901", "quote": '"'},
        {"id": "${quote}${AWS_ACCOUNT_ID}${quote}"},
    )
    assert ready["status"] == "True", ready
    assert api.get("v1", "ConfigMap", "ids", "flux-system")["data"] == {"id": "012345678901"}


def test_repo_is_the_checkout():
    assert (REPO / "mgmt").is_dir()


# --- validate's substitution rule (plugins/module_utils/validate_substitution.py) ---------------------


def test_validate_types_each_substituted_field_with_realistic_site_values(tmp_path):
    from ansible_collections.krops.platform.plugins.module_utils import validate, validate_substitution

    from tests.substrate.trees import SCHEMAS, copy_repo, edit, findings

    root = copy_repo(tmp_path, ("mgmt/aws", "workload/aws"))
    rel = "mgmt/aws/flux-apps/workload-flux/cluster-vars.yaml"
    edit(root, rel, "AWS_ACCOUNT_ID: ${quote}${AWS_ACCOUNT_ID}${quote}", 'AWS_ACCOUNT_ID: "${AWS_ACCOUNT_ID}"')
    rel_tags = "mgmt/aws/workload-resources/eu-west-1-workload.yaml"
    edit(root, rel_tags, "value: ${quote}${KROPS_REVISION:=unknown}${quote}", 'value: "${KROPS_REVISION:=unknown}"')
    result = validate.run(str(root), environments=["aws"], schema_location=str(SCHEMAS), cel=False)
    rule = [f for f in findings(result) if f[2] == validate_substitution.RULE]
    # one finding per field and variable: the first realistic value that breaks it
    assert [(f[0], f[1], f[3].split(" (")[0]) for f in rule if f[0] == rel] == [
        (
            rel,
            "ConfigMap/flux-system/cluster-vars",
            "data.AWS_ACCOUNT_ID: 123456789012 is not of type 'string', 'null' when AWS_ACCOUNT_ID=123456789012",
        )
    ], rule
    assert any(f[0] == rel_tags and "KROPS_REVISION=1.30" in f[3] for f in rule), rule
    assert all("${quote}" in f[3] for f in rule)


@pytest.mark.parametrize(
    "text, value",
    [("012345678901", 12345678901), ("0123", 83), ("on", True), ("1.30", 1.3), ("1.0", 1), ("v1", "v1"), ("", None)],
)
def test_validate_and_the_emulator_retype_alike(text, value):
    """Two implementations (product: validate_substitution, emulator: flux_varsub) of go-yaml v2's resolution."""
    from ansible_collections.krops.platform.plugins.module_utils import validate_substitution

    assert validate_substitution.go_yaml_v2_value(text) == value == varsub.yaml_to_json_value(f"k: {text}")["k"]


# Strings whose quoting, folding or re-typing a port of the emitter or parser could get wrong.
_TRICKY = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "tricky", "namespace": "flux-system", "labels": {"krops.io/run-id": "${KROPS_RUN_ID}"}},
    "data": {
        "account": "${AWS_ACCOUNT_ID}",
        "quoted": "${quote}${AWS_ACCOUNT_ID}${quote}",
        "revision": "${KROPS_REVISION:=unknown}",
        "flag": "${KROPS_RUN_KIND}",
        "long": "x " * 90 + "${KROPS_RUN_ID}",
        "multi": "line one\nline two ${KROPS_RUN_ID}\n",
        "looks-typed": "0123",
        "yes": "yes",
        "colon": "a: b",
        "unicode": "région ${KROPS_RUN_ID}",
        "empty": "",
    },
    "list": [1, 2.5, True, None, "${KROPS_REVISION}"],
}


@pytest.mark.parametrize(
    "name, value",
    [
        (None, None),
        ("AWS_ACCOUNT_ID", "012345678901"),
        ("KROPS_REVISION", "1.30"),
        ("KROPS_RUN_KIND", "on"),
        ("KROPS_RUN_ID", "a: b"),
    ],
)
def test_substitution_rule_on_libyaml_reads_as_the_pure_python_reference(name, value):
    """The rule emits and parses with libyaml (validate's cost at scale, docs/scale.md); PyYAML's pure-Python pair is the reference."""
    import yaml

    from ansible_collections.krops.platform.plugins.module_utils import render, validate_substitution

    # the accelerated path is the one tested: libyaml, with the base resolver (_construct types the scalars itself)
    assert validate_substitution._SafeLoader is yaml.CBaseLoader  # noqa: SLF001
    variables = {"quote": '"', "AWS_ACCOUNT_ID": "123456789012", "KROPS_RUN_ID": "20261201", "KROPS_RUN_KIND": "manual"}
    if name:
        variables[name] = value

    class Reference(yaml.SafeDumper):
        pass

    Reference.add_representer(str, validate_substitution._str)  # noqa: SLF001
    reference_text = yaml.dump(_TRICKY, Dumper=Reference, default_flow_style=False, width=1 << 30)
    text = validate_substitution.unsubstituted_text(_TRICKY)
    assert text == reference_text
    substituted = render.substitute_text(reference_text, variables)
    try:
        expected = validate_substitution._construct(yaml.compose(substituted, Loader=yaml.SafeLoader))  # noqa: SLF001
    except yaml.YAMLError:
        with pytest.raises(yaml.YAMLError):
            validate_substitution.flux_substitute(_TRICKY, variables, text)
        return
    assert validate_substitution.flux_substitute(_TRICKY, variables, text) == expected
    assert validate_substitution.flux_substitute(_TRICKY, variables) == expected
