# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The bad-input classes of issue 12, table-driven: every case must end in a clear ConfigError.

Each case is a mutation of the repository's bootstrap.toml (or raw text). The outcome is
classified as a clear error (ConfigError naming the file, the key and what was expected),
a traceback (any other exception) or silently accepted; the summary test asserts the counts.
A hypothesis fuzz seeded with the same classes checks that whatever the loader accepts
satisfies the name, path, pattern and range rules.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
import re
import string
import tomllib

import pytest
import tomli_w
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ansible_collections.krops.platform.plugins.module_utils import config, errors, profiles

REPO_FILE = os.path.join(os.path.dirname(__file__), *([os.pardir] * 4), "bootstrap.toml")
PATH = "bad/bootstrap.toml"


@functools.cache
def _parsed():
    with open(REPO_FILE, "rb") as handle:
        return tomllib.load(handle)


def real_data():
    """A copy of one parse of the repository's bootstrap.toml (each caller may change its own)."""
    return copy.deepcopy(_parsed())


def real_text():
    with open(REPO_FILE, encoding="utf-8") as handle:
        return handle.read()


def _set(path, value):
    def mutate(data):
        node = data
        parts = path.split("/")
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        last = parts[-1]
        if value is _DELETE:
            del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
        return data

    return mutate


_DELETE = object()
LONG = "a" * 10000
DEEP = "[" * 1000 + "]" * 1000

# (id, mutation of the parsed file | raw TOML text, key the message must name)
CASES = [
    # --- syntax and encoding
    ("syntax-unclosed-table", "[bootstrap\n", "(top level)"),
    ("syntax-bad-value", real_text().replace('oci-tag = "latest"', "oci-tag = latest"), "(top level)"),
    ("syntax-duplicate-key", real_text().replace('oci-tag = "latest"', 'oci-tag = "a"\noci-tag = "b"'), "(top level)"),
    ("nul-in-string", real_text().replace('oci-tag = "latest"', 'oci-tag = "lat\x00est"'), "(top level)"),
    ("nul-escaped", real_text().replace('oci-tag = "latest"', 'oci-tag = "lat\\u0000est"'), "bootstrap.oci-tag"),
    (
        "newline-escaped-in-name",
        real_text().replace('kind-cluster = "mgmt"', 'kind-cluster = "mg\\nmt"'),
        "bootstrap.kind-cluster",
    ),
    ("deep-array", real_text().replace('oci-tag = "latest"', "oci-tag = " + DEEP), "(top level)"),
    (
        "deep-inline-table",
        real_text().replace('oci-tag = "latest"', "oci-tag = " + "{a=" * 600 + "1" + "}" * 600),
        "(top level)",
    ),
    ("empty-file", "", "bootstrap"),
    ("only-comment", "# nothing\n", "bootstrap"),
    ("unknown-top-level", real_text() + "\n[extra]\na = 1\n", "extra"),
    # --- types: a list, table, number or boolean where a string is expected, and the reverse
    ("list-for-kind-cluster", _set("bootstrap/kind-cluster", ["a", "b"]), "bootstrap.kind-cluster"),
    ("list-for-git-branch", _set("bootstrap/git-branch", ["main"]), "bootstrap.git-branch"),
    ("table-for-oci-tag", _set("bootstrap/oci-tag", {"a": "b"}), "bootstrap.oci-tag"),
    ("int-for-mgmt-cluster", _set("environments/aws/mgmt-cluster", 5), "environments.aws.mgmt-cluster"),
    ("bool-for-sync-path", _set("environments/aws/sync-path", True), "environments.aws.sync-path"),
    ("string-for-port", _set("bootstrap/registry-port", "5001"), "bootstrap.registry-port"),
    ("float-for-port", _set("bootstrap/registry-port", 5001.0), "bootstrap.registry-port"),
    ("bool-for-port", _set("bootstrap/registry-port", True), "bootstrap.registry-port"),
    (
        "string-for-list",
        _set("environments/aws/provider-manifests", "mgmt/aws/x.yaml"),
        "environments.aws.provider-manifests",
    ),
    ("int-in-list", _set("environments/aws/provider-manifests/0", 7), "environments.aws.provider-manifests[0]"),
    (
        "list-for-hardware-release",
        _set("environments/local-talos/teardown/hardware-release", [True]),
        "environments.local-talos.teardown.hardware-release",
    ),
    (
        "string-for-bool",
        _set("environments/local-talos/teardown/hardware-release", "true"),
        "environments.local-talos.teardown.hardware-release",
    ),
    ("list-for-run-ttl", _set("bootstrap/run-ttl", ["24h"]), "bootstrap.run-ttl"),
    ("table-for-environment", _set("environments/aws", "aws"), "environments.aws"),
    (
        "list-for-var",
        _set("environments/gcp/pivot-manifest-vars/GCP_WIF_PROVIDER", ["a"]),
        "environments.gcp.pivot-manifest-vars.GCP_WIF_PROVIDER",
    ),
    # --- missing and unknown keys, environments
    ("missing-git-url", _set("bootstrap/git-url", _DELETE), "bootstrap.git-url"),
    ("missing-sync-path", _set("environments/aws/sync-path", _DELETE), "environments.aws.sync-path"),
    ("missing-platform", _set("environments/aws/kind", _DELETE), "environments.aws.platform"),
    ("unknown-platform", _set("environments/aws/kind", "openstack"), "environments.aws.kind"),
    (
        "platform-and-kind-disagree",
        lambda d: (d["environments"]["aws"].update(platform="gcp"), d)[1],
        "environments.aws.platform",
    ),
    ("unknown-env-key", _set("environments/aws/mgmt-clustr", "x"), "environments.aws.mgmt-clustr"),
    ("unknown-bootstrap-key", _set("bootstrap/registry-prot", 1), "bootstrap.registry-prot"),
    ("default-env-undefined", _set("bootstrap/default-environment", "prod"), "bootstrap.default-environment"),
    (
        "env-name-uppercase",
        lambda d: (d["environments"].update(AWS=d["environments"].pop("aws")), d)[1],
        "environments.AWS",
    ),
    (
        "env-name-long",
        lambda d: (d["environments"].update({LONG: d["environments"].pop("aws")}), d)[1],
        "environments.aaaa",
    ),
    (
        "env-name-unicode",
        lambda d: (d["environments"].update({"prød": d["environments"].pop("aws")}), d)[1],
        "environments.prød",
    ),
    # --- Kubernetes names (DNS-1123)
    ("mgmt-cluster-uppercase", _set("environments/aws/mgmt-cluster", "EU-North"), "environments.aws.mgmt-cluster"),
    ("mgmt-cluster-underscore", _set("environments/aws/mgmt-cluster", "eu_north"), "environments.aws.mgmt-cluster"),
    ("mgmt-cluster-leading-dash", _set("environments/aws/mgmt-cluster", "-eu"), "environments.aws.mgmt-cluster"),
    ("mgmt-cluster-trailing-dash", _set("environments/aws/mgmt-cluster", "eu-"), "environments.aws.mgmt-cluster"),
    ("mgmt-cluster-64", _set("environments/aws/mgmt-cluster", "a" * 64), "environments.aws.mgmt-cluster"),
    ("mgmt-cluster-10000", _set("environments/aws/mgmt-cluster", LONG), "environments.aws.mgmt-cluster"),
    ("mgmt-cluster-dot", _set("environments/aws/mgmt-cluster", "eu.north"), "environments.aws.mgmt-cluster"),
    ("mgmt-cluster-slash", _set("environments/aws/mgmt-cluster", "../../tmp/x"), "environments.aws.mgmt-cluster"),
    ("mgmt-cluster-unicode", _set("environments/aws/mgmt-cluster", "mgmt-é"), "environments.aws.mgmt-cluster"),
    ("mgmt-cluster-space", _set("environments/aws/mgmt-cluster", "a b"), "environments.aws.mgmt-cluster"),
    ("mgmt-cluster-empty", _set("environments/aws/mgmt-cluster", ""), "environments.aws.mgmt-cluster"),
    ("mgmt-namespace-bad", _set("bootstrap/mgmt-namespace", "Default"), "bootstrap.mgmt-namespace"),
    ("flux-namespace-dot", _set("bootstrap/flux-namespace", "flux.system"), "bootstrap.flux-namespace"),
    ("secret-name-bad", _set("bootstrap/github-pat-secret", "PAT_secret"), "bootstrap.github-pat-secret"),
    ("configmap-name-long", _set("bootstrap/run-configmap", "a" * 254), "bootstrap.run-configmap"),
    (
        "infra-namespace-bad",
        _set("environments/aws/infra-provider-namespace", "capa system"),
        "environments.aws.infra-provider-namespace",
    ),
    (
        "capi-workload-bad",
        _set("environments/aws/teardown/capi-workloads/0", "Eu_West"),
        "environments.aws.teardown.capi-workloads[0]",
    ),
    (
        "fallback-name-bad",
        _set("environments/aws/move-fallbacks/0/name", "De fault"),
        "environments.aws.move-fallbacks[0].name",
    ),
    # --- kind's cluster-name rule and context
    ("kind-cluster-uppercase", _set("bootstrap/kind-cluster", "Mgmt"), "bootstrap.kind-cluster"),
    ("kind-cluster-51", _set("bootstrap/kind-cluster", "a" * 51), "bootstrap.kind-cluster"),
    ("kind-cluster-10000", _set("bootstrap/kind-cluster", LONG), "bootstrap.kind-cluster"),
    ("kind-cluster-traversal", _set("bootstrap/kind-cluster", "../../etc"), "bootstrap.kind-cluster"),
    ("kind-cluster-underscore", _set("bootstrap/kind-cluster", "my_mgmt"), "bootstrap.kind-cluster"),
    ("kind-context-mismatch", _set("bootstrap/kind-context", "kind-other"), "bootstrap.kind-context"),
    ("kind-network-bad", _set("bootstrap/kind-network", "-kind"), "bootstrap.kind-network"),
    ("registry-name-slash", _set("bootstrap/registry-name", "a/b"), "bootstrap.registry-name"),
    ("oci-repository-upper", _set("bootstrap/oci-repository", "Krops"), "bootstrap.oci-repository"),
    ("oci-tag-129", _set("bootstrap/oci-tag", "a" * 129), "bootstrap.oci-tag"),
    ("oci-tag-leading-dot", _set("bootstrap/oci-tag", ".x"), "bootstrap.oci-tag"),
    ("git-branch-dotdot", _set("bootstrap/git-branch", "feature..x"), "bootstrap.git-branch"),
    ("git-branch-space", _set("bootstrap/git-branch", "my branch"), "bootstrap.git-branch"),
    ("git-branch-dash", _set("bootstrap/git-branch", "-f"), "bootstrap.git-branch"),
    ("git-url-scheme", _set("bootstrap/git-url", "file:///etc"), "bootstrap.git-url"),
    ("git-url-space", _set("bootstrap/git-url", "https://example.com/a b"), "bootstrap.git-url"),
    ("chart-version-bad", _set("charts/cert-manager", "latest"), "charts.cert-manager"),
    # --- AWS names
    (
        "eks-name-101",
        _set("environments/aws/teardown/aws-workloads/0/eks-cluster-name", "a" * 101),
        "environments.aws.teardown.aws-workloads[0].eks-cluster-name",
    ),
    (
        "eks-name-dot",
        _set("environments/aws/teardown/aws-workloads/0/eks-cluster-name", "a.b"),
        "environments.aws.teardown.aws-workloads[0].eks-cluster-name",
    ),
    (
        "mgmt-eks-name-leading-dash",
        _set("environments/aws/teardown/mgmt-eks-cluster-name", "-a"),
        "environments.aws.teardown.mgmt-eks-cluster-name",
    ),
    (
        "rds-digit-first",
        _set("environments/aws/teardown/aws-workloads/0/rds-instance", "1db"),
        "environments.aws.teardown.aws-workloads[0].rds-instance",
    ),
    (
        "rds-double-hyphen",
        _set("environments/aws/teardown/aws-workloads/0/rds-instance", "db--x"),
        "environments.aws.teardown.aws-workloads[0].rds-instance",
    ),
    (
        "rds-trailing-hyphen",
        _set("environments/aws/teardown/aws-workloads/0/rds-instance", "db-"),
        "environments.aws.teardown.aws-workloads[0].rds-instance",
    ),
    (
        "rds-64",
        _set("environments/aws/teardown/aws-workloads/0/rds-instance", "d" * 64),
        "environments.aws.teardown.aws-workloads[0].rds-instance",
    ),
    ("iam-user-space", _set("teardown/global-iam-users/0", "krops reader"), "teardown.global-iam-users[0]"),
    ("iam-user-65", _set("teardown/global-iam-users/0", "u" * 65), "teardown.global-iam-users[0]"),
    (
        "iam-role-prefix-bad",
        _set("environments/aws/teardown/mgmt-iam-role-prefix", "a/b"),
        "environments.aws.teardown.mgmt-iam-role-prefix",
    ),
    ("cfn-stack-bad", _set("teardown/cfn-stack-name", "1stack"), "teardown.cfn-stack-name"),
    (
        "region-bad",
        _set("environments/aws/teardown/aws-workloads/0/region", "europe"),
        "environments.aws.teardown.aws-workloads[0].region",
    ),
    (
        "azure-rg-trailing-dot",
        _set("environments/azure/teardown/resource-groups/0", "rg."),
        "environments.azure.teardown.resource-groups[0]",
    ),
    ("gcp-network-upper", _set("environments/gcp/teardown/networks/0", "Net"), "environments.gcp.teardown.networks[0]"),
    # --- placeholders
    (
        "s3-unknown-placeholder",
        _set("teardown/s3-bucket-pattern", "krops-{account}-{cluster_name}"),
        "teardown.s3-bucket-pattern",
    ),
    (
        "s3-attribute-access",
        _set("teardown/s3-bucket-pattern", "krops-{cluster_name.__class__}"),
        "teardown.s3-bucket-pattern",
    ),
    ("s3-positional", _set("teardown/s3-bucket-pattern", "krops-{}-{0}"), "teardown.s3-bucket-pattern"),
    ("s3-unbalanced", _set("teardown/s3-bucket-pattern", "krops-{account_id"), "teardown.s3-bucket-pattern"),
    ("s3-format-spec", _set("teardown/s3-bucket-pattern", "krops-{account_id:>99}"), "teardown.s3-bucket-pattern"),
    ("s3-uppercase", _set("teardown/s3-bucket-pattern", "Krops-{account_id}"), "teardown.s3-bucket-pattern"),
    (
        "s3-too-long-rendered",
        _set("teardown/s3-bucket-pattern", "krops-{account_id}-{cluster_name}-" + "d" * 40),
        "teardown.s3-bucket-pattern",
    ),
    (
        "iam-role-unknown-placeholder",
        _set("teardown/global-iam-roles/0", "krops-{account_id}-reader"),
        "teardown.global-iam-roles[0]",
    ),
    # --- paths
    (
        "provider-manifest-traversal",
        _set("environments/aws/provider-manifests/0", "../../etc/passwd"),
        "environments.aws.provider-manifests[0]",
    ),
    (
        "provider-manifest-absolute",
        _set("environments/aws/provider-manifests/0", "/etc/passwd"),
        "environments.aws.provider-manifests[0]",
    ),
    ("sync-path-traversal", _set("environments/aws/sync-path", "../../etc"), "environments.aws.sync-path"),
    ("sync-path-inner-traversal", _set("environments/aws/sync-path", "mgmt/../../etc"), "environments.aws.sync-path"),
    (
        "workload-path-home",
        _set("environments/local-host/workload-path", "~/x"),
        "environments.local-host.workload-path",
    ),
    (
        "pivot-manifest-backslash",
        _set("environments/gcp/pivot-manifests/0", "..\\..\\x"),
        "environments.gcp.pivot-manifests[0]",
    ),
    (
        "sops-secret-traversal",
        _set("environments/aws/pivot-sops-secrets/0", "../secret.yaml"),
        "environments.aws.pivot-sops-secrets[0]",
    ),
    (
        "fallback-manifest-absolute",
        _set("environments/aws/move-fallbacks/0/manifest", "/tmp/x.yaml"),
        "environments.aws.move-fallbacks[0].manifest",
    ),
    ("age-key-traversal", _set("bootstrap/age-key-file", "../age.agekey"), "bootstrap.age-key-file"),
    # --- durations and numbers: range and sign
    ("duration-superscript", _set("environments/aws/mgmt-ready-timeout", "²"), "environments.aws.mgmt-ready-timeout"),
    ("duration-arabic-indic", _set("environments/aws/mgmt-ready-timeout", "٣٠"), "environments.aws.mgmt-ready-timeout"),
    ("duration-negative-int", _set("environments/aws/mgmt-ready-timeout", -5), "environments.aws.mgmt-ready-timeout"),
    ("duration-negative-text", _set("bootstrap/cluster-delete-timeout", "-5m"), "bootstrap.cluster-delete-timeout"),
    ("duration-zero", _set("bootstrap/provider-delete-timeout", 0), "bootstrap.provider-delete-timeout"),
    ("duration-zero-text", _set("bootstrap/local-reconcile-timeout", "0s"), "bootstrap.local-reconcile-timeout"),
    ("duration-float", _set("bootstrap/mgmt-poll-interval", 1.5), "bootstrap.mgmt-poll-interval"),
    ("duration-huge", _set("environments/aws/mgmt-ready-timeout", 10**30), "environments.aws.mgmt-ready-timeout"),
    (
        "duration-over-a-week",
        _set("environments/aws/mgmt-ready-timeout", "169h"),
        "environments.aws.mgmt-ready-timeout",
    ),
    (
        "duration-words",
        _set("environments/aws/mgmt-ready-timeout", "40 minutes"),
        "environments.aws.mgmt-ready-timeout",
    ),
    ("run-ttl-empty", _set("bootstrap/run-ttl", ""), "bootstrap.run-ttl"),
    ("run-ttl-zero", _set("bootstrap/run-ttl", "0s"), "bootstrap.run-ttl"),
    ("run-ttl-bare-number", _set("bootstrap/run-ttl", "24"), "bootstrap.run-ttl"),
    ("port-zero", _set("bootstrap/registry-port", 0), "bootstrap.registry-port"),
    ("port-negative", _set("bootstrap/registry-port", -1), "bootstrap.registry-port"),
    ("port-too-big", _set("bootstrap/registry-port", 65536), "bootstrap.registry-port"),
    ("retries-negative", _set("bootstrap/registry-ready-retries", -3), "bootstrap.registry-ready-retries"),
    # --- sizes
    (
        "list-too-long",
        _set("environments/aws/provider-manifests", ["mgmt/a.yaml"] * 300),
        "environments.aws.provider-manifests",
    ),
    ("string-10000", _set("bootstrap/github-user", LONG), "bootstrap.github-user"),
    # --- mgmt-region (docs/ownership.md)
    ("aws-region-missing", _set("environments/aws/mgmt-region", _DELETE), "environments.aws.mgmt-region"),
    ("azure-region-missing", _set("environments/azure/mgmt-region", _DELETE), "environments.azure.mgmt-region"),
    ("gcp-region-missing", _set("environments/gcp/mgmt-region", _DELETE), "environments.gcp.mgmt-region"),
    ("aws-region-azure-style", _set("environments/aws/mgmt-region", "swedencentral"), "environments.aws.mgmt-region"),
    ("gcp-region-aws-style", _set("environments/gcp/mgmt-region", "eu-north-1"), "environments.gcp.mgmt-region"),
    (
        "local-region-given",
        _set("environments/local-host/mgmt-region", "eu-north-1"),
        "environments.local-host.mgmt-region",
    ),
    # --- capability mismatches
    (
        "hook-of-other-platform",
        _set("environments/aws/post-kind-create-hook", "wif-federate"),
        "environments.aws.post-kind-create-hook",
    ),
    ("oci-sync-without-registry", _set("environments/aws/sync", "oci"), "environments.aws.sync"),
]


def _run(case):
    """'clear', 'traceback: ...' or 'accepted' for one case."""
    _id, change, _key = case
    try:
        text = change if isinstance(change, str) else tomli_w.dumps(change(real_data()))
        config.loads(text, path=PATH)
    except config.ConfigError as exc:
        return "clear", str(exc)
    except Exception as exc:
        return "traceback", f"{type(exc).__name__}: {exc}"
    return "accepted", None


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_a_clear_error(case):
    outcome, message = _run(case)
    assert outcome == "clear", (outcome, message)
    assert message.startswith(PATH + ": " + case[2][:40]), message
    assert ": expected " in message
    assert "\n" not in message and len(message) < 2000


def test_bad_input_table_counts():
    outcomes = [_run(case)[0] for case in CASES]
    counts = {name: outcomes.count(name) for name in ("clear", "traceback", "accepted")}
    print(
        "bad-input table: %d cases, %d clear errors, %d tracebacks, %d silently accepted"
        % (len(CASES), counts["clear"], counts["traceback"], counts["accepted"])
    )
    assert len(CASES) >= 109
    assert counts == {"clear": len(CASES), "traceback": 0, "accepted": 0}


def test_a_list_where_a_string_is_expected_is_named():
    data = real_data()
    data["bootstrap"]["kind-cluster"] = ["a", "b"]
    with pytest.raises(config.ConfigError) as err:
        config.loads(tomli_w.dumps(data), path=PATH)
    assert str(err.value).startswith(
        PATH + ": bootstrap.kind-cluster: expected a kind cluster name: at most 50 "
        "characters of a-z, 0-9, '.' and '-', got an array (valid environments: "
    )


def test_config_error_is_a_krops_error_with_a_result():
    with pytest.raises(errors.KropsError) as err:
        config.loads("[bootstrap\n", path=PATH)
    assert isinstance(err.value, errors.ConfigError)
    assert err.value.result == {}
    assert err.value.message == str(err.value)


def test_bom_and_platform_spelling_are_accepted(tmp_path):
    text = real_text().replace('[environments.gcp]\nkind = "gcp"', '[environments.gcp]\nplatform = "gcp"')
    loaded = config.loads("\ufeff" + text, path=PATH)
    assert loaded.environment("gcp").platform == "gcp"
    # the roles read the older name too (the lookup's plain data keeps it)
    assert loaded.lookup("environments.gcp.platform") == loaded.lookup("environments.gcp.kind") == "gcp"
    assert loaded.profile("gcp").post_kind_hooks == ("wif-federate",)
    assert loaded.lookup("profiles.local-host.local-registry") is True
    assert loaded.lookup("profile")["platform"] == "local-host"


def test_invalid_utf8_is_a_clear_error(tmp_path):
    path = tmp_path / "bootstrap.toml"
    path.write_bytes(real_text().encode() + b"\n# \xff\xfe\n")
    with pytest.raises(config.ConfigError) as err:
        config.load(str(path), environ={})
    assert str(err.value) == "%s: (top level): expected UTF-8 text; invalid byte at offset %d" % (
        path,
        len(real_text().encode()) + 3,
    )


def test_symlink_escape_is_refused(tmp_path):
    repo = tmp_path / "repo"
    (repo / "mgmt").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", repo / "mgmt" / "escape")
    data = real_data()
    data["environments"]["aws"]["sync-path"] = "mgmt/escape"
    (repo / "bootstrap.toml").write_text(tomli_w.dumps(data))
    with pytest.raises(config.ConfigError) as err:
        config.load(str(repo / "bootstrap.toml"), environ={})
    assert (
        "environments.aws.sync-path: expected a repository path inside the repository, got 'mgmt/escape'; "
        "it resolves to {} through a symbolic link".format(os.path.realpath(tmp_path / "outside"))
        in str(err.value)
    )


def test_load_reads_once_per_process(tmp_path, monkeypatch):
    path = tmp_path / "bootstrap.toml"
    path.write_text(real_text())
    config.clear_cache()
    calls = []
    real = config.loads
    monkeypatch.setattr(config, "loads", lambda *a, **k: calls.append(1) or real(*a, **k))
    first = config.load(str(path), environ={})
    second = config.load(str(path), environ={})
    assert len(calls) == 1
    # callers share one Config, which nothing can change: its tables are frozen and its arrays tuples
    with pytest.raises(dataclasses.FrozenInstanceError):
        second.bootstrap.oci_tag = "changed"
    with pytest.raises(TypeError):
        second.environments["aws"] = second.environment("gcp")
    assert isinstance(second.environment("aws").provider_manifests, tuple)
    with pytest.raises(TypeError):
        second.environment("gcp").pivot_manifest_vars["GCP_WIF_PROVIDER"] = "other"
    assert config.load(str(path), environ={}).bootstrap.oci_tag == first.bootstrap.oci_tag == "latest"
    path.write_text(real_text().replace('oci-tag = "latest"', 'oci-tag = "v2"'))
    assert config.load(str(path), environ={}).bootstrap.oci_tag == "v2"
    assert config.load(str(path), environ={"OCI_TAG": "v3"}).bootstrap.oci_tag == "v3"
    assert len(calls) == 3


def test_one_resolver(tmp_path):
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    (tmp_path / "bootstrap.toml").write_text("")
    assert config.resolve_path(environ={}, playbook_dir=str(playbooks)) == str(tmp_path / "bootstrap.toml")
    assert config.resolve_path(environ={"BOOTSTRAP_CONFIG": "/x.toml"}, playbook_dir=str(playbooks)) == "/x.toml"
    assert config.resolve_path("/y.toml", environ={"BOOTSTRAP_CONFIG": "/x.toml"}) == "/y.toml"
    assert config.resolve_path(environ={}, base_dir=str(tmp_path / "elsewhere")) == str(
        tmp_path / "elsewhere" / "bootstrap.toml"
    )


# --- fuzz: an accepted configuration satisfies the rules ------------------------------------

_K8S = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SEEDS = [
    LONG,
    "²",
    "-5",
    "0",
    "",
    "../../etc/passwd",
    "/etc/passwd",
    "~/x",
    "a\x00b",
    "\ufeffx",
    "Ünïcödé",
    "a b",
    "{account}",
    "{cluster_name.__class__}",
    "{",
    "}",
    "x" * 64,
    "none",
    "24h",
    "eu-north-1",
    "mgmt",
    ["a", "b"],
    {"a": 1},
    True,
    -1,
    0,
    10**12,
    1.5,
]
_KEYS = [
    "bootstrap/kind-cluster",
    "bootstrap/kind-context",
    "bootstrap/mgmt-namespace",
    "bootstrap/run-ttl",
    "bootstrap/registry-port",
    "bootstrap/age-key-file",
    "bootstrap/oci-tag",
    "bootstrap/git-branch",
    "environments/aws/mgmt-cluster",
    "environments/aws/sync-path",
    "environments/aws/mgmt-ready-timeout",
    "environments/aws/provider-manifests/0",
    "environments/aws/mgmt-region",
    "environments/aws/teardown/aws-workloads/0/rds-instance",
    "environments/aws/teardown/aws-workloads/0/eks-cluster-name",
    "environments/aws/teardown/aws-workloads/0/cluster-name",
    "teardown/s3-bucket-pattern",
    "teardown/global-iam-roles/0",
    "environments/local-host/workload-path",
]


def _rules_hold(loaded):
    boot = loaded.bootstrap
    assert re.match(r"^[a-z0-9.-]{1,50}$", boot.kind_cluster)
    assert boot.kind_context == "kind-" + boot.kind_cluster
    for value in (boot.mgmt_namespace, boot.flux_namespace):
        assert _K8S.match(value) and len(value) <= 63
    assert 1 <= boot.registry_port <= 65535
    assert boot.run_ttl == "none" or 0 < config.parse_duration(boot.run_ttl) <= config.MAX_TTL
    down = loaded.teardown
    fields = {f for _t, f, _s, _c in string.Formatter().parse(down.s3_bucket_pattern) if f is not None}
    assert fields <= {"account_id", "cluster_name"}
    for name, env in loaded.environments.items():
        assert _K8S.match(name) and len(name) <= 63
        assert _K8S.match(env.mgmt_cluster) and len(env.mgmt_cluster) <= 63
        assert 0 < env.mgmt_ready_timeout <= config.MAX_TIMEOUT
        profile = profiles.of(env)
        assert bool(env.mgmt_region) == (profile.region_pattern is not None)
        for path in (env.sync_path, env.workload_path) + env.provider_manifests + env.pivot_manifests:
            assert not path.startswith(("/", "~")) and ".." not in path.split("/") and "\\" not in path
        for workload in env.teardown.aws_workloads:
            bucket = down.s3_bucket_pattern.format(account_id="123456789012", cluster_name=workload.cluster_name)
            assert 3 <= len(bucket) <= 63 and re.match(r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$", bucket)
            rds = workload.rds_instance
            assert rds == "" or (
                re.match(r"^[A-Za-z][A-Za-z0-9-]{0,62}$", rds) and "--" not in rds and not rds.endswith("-")
            )
            assert re.match(r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$", workload.eks_cluster_name)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(_KEYS),
            st.one_of(st.sampled_from(_SEEDS), st.text(max_size=70), st.integers(min_value=-10, max_value=10**7)),
        ),
        min_size=1,
        max_size=3,
    )
)
@example([("bootstrap/kind-cluster", "²")])
@example([("teardown/s3-bucket-pattern", "{cluster_name}")])
def test_fuzz_accepted_values_satisfy_the_rules(changes):
    data = real_data()
    for key, value in changes:
        _set(key, value)(data)
    try:
        text = tomli_w.dumps(data)
    except (TypeError, ValueError):
        return
    try:
        loaded = config.loads(text, path=PATH)
    except config.ConfigError as exc:
        assert str(exc).startswith(PATH + ": ") and ": expected " in str(exc)
        return
    _rules_hold(loaded)


@pytest.mark.parametrize("limit", [None, 5000], ids=["default-recursion-limit", "raised-recursion-limit"])
@pytest.mark.parametrize("levels", [40, 600])
def test_nesting_past_the_bound_is_refused_whatever_the_recursion_limit(levels, limit):
    """The depth bound is the loader's own (config_schema.MAX_DEPTH), not the interpreter's recursion limit: a library
    that raises the limit (cel-python sets 2500 when imported) must not turn the depth error into a type error."""
    import sys

    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(limit or previous)
    try:
        text = real_text().replace('oci-tag = "latest"', "oci-tag = " + "[" * levels + "1" + "]" * levels)
        outcome, message = _run(("deep", text, "(top level)"))
    finally:
        sys.setrecursionlimit(previous)
    assert outcome == "clear", message
    assert message.startswith(PATH + ": (top level): expected valid TOML of bounded depth"), message
