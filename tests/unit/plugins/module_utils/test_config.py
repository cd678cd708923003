# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""bootstrap.toml loader: exact messages for each kind of mistake, overrides, and a fuzz test."""

from __future__ import annotations

import copy
import functools
import os
import tomllib

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.krops.platform.plugins.module_utils import config

REPO_FILE = os.path.join(os.path.dirname(__file__), *([os.pardir] * 4), "bootstrap.toml")
ENVS = "(valid environments: local-host, aws, aws-crossplane, azure, gcp, local-talos)"


@functools.cache
def real_text():
    with open(REPO_FILE, encoding="utf-8") as handle:
        return handle.read()


@functools.cache
def _parsed():
    return tomllib.loads(real_text())


def real_data():
    """The repository's bootstrap.toml as data: a copy of one parse, each caller may change its own (the fuzz tests
    take one per example, and parsing it each time was half of their time)."""
    return copy.deepcopy(_parsed())


def load(data, **kwargs):
    return config.loads(tomli_w.dumps(data), path="bootstrap.toml", **kwargs)


def test_repository_file_is_valid_and_normalised():
    loaded = config.load(REPO_FILE, environ={})
    assert loaded.environment_names == ["local-host", "aws", "aws-crossplane", "azure", "gcp", "local-talos"]
    assert loaded.selected == "local-host"
    assert loaded.lookup("environments.aws.mgmt-cluster") == "eu-north-1-management"
    assert loaded.lookup("environments.aws.mgmt-ready-timeout") == 2400
    assert loaded.lookup("environments.local-talos.mgmt-ready-timeout") == 1800
    assert loaded.lookup("charts") == {"flux-operator": "0.58.1", "cert-manager": "v1.21.1", "capi-operator": "0.28.0"}
    assert loaded.lookup("environments.aws.teardown.aws-workloads")[1]["rds-instance"] == "krops-eu-west-1-workload-db"
    assert loaded.lookup("environment") == "local-host"
    assert loaded.lookup("current.mgmt-cluster") == "local-management"


@pytest.mark.parametrize(
    "text,seconds",
    [
        ("40m", 2400),
        ("2h", 7200),
        ("90s", 90),
        ("1h30m", 5400),
        ("90", 90),
        (90, 90),
        ("", None),
        ("0s", None),
        ("forty", None),
        ("40 m", None),
        ("-5", None),
        (True, None),
        (1.5, None),
        (0, None),
    ],
)
def test_parse_duration(text, seconds):
    assert config.parse_duration(text) == seconds


def test_unknown_key_names_file_path_and_known_keys():
    data = real_data()
    data["environments"]["aws"]["mgmt-clustr"] = "x"
    with pytest.raises(config.ConfigError) as err:
        load(data)
    assert str(err.value).startswith(
        "bootstrap.toml: environments.aws.mgmt-clustr: expected one of the known keys: accepted-end-of-life, accounts, infra-provider-name,"
    )
    assert str(err.value).endswith("; unknown key 'mgmt-clustr' " + ENVS)


def _misspell(path, wrong):
    """Rename the key at ``path`` (a/b/0/c) of the real file to ``wrong``."""

    def mutate(data):
        node = data
        parts = path.split("/")
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[wrong] = node.pop(parts[-1])

    return mutate


def _add_account(data):
    data["environments"]["aws"]["accounts"] = [{"account-id": "123456789012", "role-name": "r", "region": ["x"]}]


_KNOWN = {
    "bootstrap": "age-key-file, cluster-delete-timeout, default-environment, flux-namespace, flux-version, git-branch, "
    "git-url, github-pat-secret, github-user, kind-cluster, kind-context, kind-network, kind-node-image, "
    "local-reconcile-timeout, mgmt-context, mgmt-kubeconfig, mgmt-namespace, mgmt-poll-interval, oci-repository, "
    "oci-tag, provider-delete-timeout, registry-container-port, registry-name, registry-port, registry-ready-retries, "
    "run-configmap, run-ttl, sops-age-secret",
    "environment": "accepted-end-of-life, accounts, infra-provider-name, infra-provider-namespace, kind, mgmt-cluster, "
    "mgmt-ready-timeout, mgmt-region, move-fallbacks, pivot-manifest-vars, pivot-manifests, pivot-sops-secrets, "
    "pivot-wait-kustomizations, platform, post-kind-create-hook, provider-manifests, resource-plane, sync, sync-path, "
    "teardown, workload-path",
    "environment teardown": "aws-workloads, capi-workloads, cfn-stack-name, disable-deletion-protection, "
    "global-iam-users, hardware-release, mgmt-container-prefix, mgmt-eks-cluster-name, mgmt-iam-role-prefix, "
    "networks, resource-groups, service-accounts, workload-identity-providers",
}


@pytest.mark.parametrize(
    "mutate,message",
    [
        (
            _misspell("teardown", "teardwon"),
            "teardwon: expected one of the known tables: bootstrap, charts, teardown, environments; "
            "unknown key 'teardwon'",
        ),
        (
            _misspell("bootstrap/kind-cluster", "kind-clustre"),
            "bootstrap.kind-clustre: expected one of the known keys: %s; unknown key 'kind-clustre'"
            % _KNOWN["bootstrap"],
        ),
        (
            _misspell("charts/cert-manager", "cert-manger"),
            "charts.cert-manger: expected one of the known keys: capi-operator, cert-manager, flux-operator; "
            "unknown key 'cert-manger'",
        ),
        (
            _misspell("teardown/s3-bucket-pattern", "s3-bucket-patern"),
            "teardown.s3-bucket-patern: expected one of the known keys: cfn-stack-name, global-iam-roles, "
            "global-iam-users, s3-bucket-pattern; unknown key 's3-bucket-patern'",
        ),
        (
            _misspell("environments/gcp/mgmt-region", "mgmt-regoin"),
            "environments.gcp.mgmt-regoin: expected one of the known keys: %s; unknown key 'mgmt-regoin'"
            % _KNOWN["environment"],
        ),
        (
            _misspell("environments/azure/teardown/resource-groups", "resource-group"),
            "environments.azure.teardown.resource-group: expected one of the known keys: %s; "
            "unknown key 'resource-group'" % _KNOWN["environment teardown"],
        ),
        (
            _misspell("environments/aws/teardown/aws-workloads/1/rds-instance", "rds-instanse"),
            "environments.aws.teardown.aws-workloads[1].rds-instanse: expected one of the known keys: cluster-name, "
            "eks-cluster-name, rds-instance, region; unknown key 'rds-instanse'",
        ),
        (
            _misspell("environments/aws/move-fallbacks/0/manifest", "manfest"),
            "environments.aws.move-fallbacks[0].manfest: expected one of the known keys: manifest, name, resource; "
            "unknown key 'manfest'",
        ),
        (
            _add_account,
            "environments.aws.accounts[0].region: expected one of the known keys: account-id, ack-role-arn, clusters, duration, "
            "external-id, regions, role-arn, role-name, session-name; unknown key 'region'",
        ),
    ],
    ids=[
        "top level",
        "bootstrap",
        "charts",
        "teardown",
        "environment",
        "environment teardown",
        "aws-workloads",
        "move-fallbacks",
        "accounts",
    ],
)
def test_a_misspelt_key_of_each_table_fails_at_load_listing_the_valid_keys(mutate, message):
    data = real_data()
    mutate(data)
    with pytest.raises(config.ConfigError) as err:
        load(data)
    assert str(err.value) == "bootstrap.toml: " + message + " " + ENVS


def test_wrong_type():
    data = real_data()
    data["bootstrap"]["registry-port"] = "5001"
    with pytest.raises(config.ConfigError) as err:
        load(data)
    assert str(err.value) == (
        "bootstrap.toml: bootstrap.registry-port: expected an integer from 1 to 65535, got '5001' " + ENVS
    )


def test_bad_duration():
    data = real_data()
    data["environments"]["gcp"]["mgmt-ready-timeout"] = "40 minutes"
    with pytest.raises(config.ConfigError) as err:
        load(data)
    assert str(err.value) == (
        "bootstrap.toml: environments.gcp.mgmt-ready-timeout: expected a positive duration such as "
        '"40m", "2h", "90s" or bare seconds, got \'40 minutes\' ' + ENVS
    )


def test_nested_array_of_tables_error_has_index():
    data = real_data()
    data["environments"]["aws"]["teardown"]["aws-workloads"][1]["region"] = "mars"
    with pytest.raises(config.ConfigError) as err:
        load(data)
    assert str(err.value) == (
        "bootstrap.toml: environments.aws.teardown.aws-workloads[1].region: expected an AWS region "
        "name such as eu-north-1, got 'mars' " + ENVS
    )


def test_missing_required_key():
    data = real_data()
    del data["environments"]["azure"]["mgmt-cluster"]
    with pytest.raises(config.ConfigError) as err:
        load(data)
    assert str(err.value) == (
        "bootstrap.toml: environments.azure.mgmt-cluster: expected a value (the key is required) " + ENVS
    )


def test_no_environment_at_all():
    data = real_data()
    del data["environments"]
    with pytest.raises(config.ConfigError) as err:
        load(data)
    assert str(err.value) == "bootstrap.toml: environments: expected at least one [environments.<name>] table"


def test_default_environment_must_exist():
    data = real_data()
    data["bootstrap"]["default-environment"] = "staging"
    with pytest.raises(config.ConfigError) as err:
        load(data)
    assert str(err.value) == (
        "bootstrap.toml: bootstrap.default-environment: expected the name of a defined environment, "
        "got 'staging' " + ENVS
    )


def test_unknown_profile_lists_valid_environments():
    with pytest.raises(config.ConfigError) as err:
        load(real_data(), environ={"KROPS_PROFILE": "prod"})
    assert str(err.value) == (
        "bootstrap.toml: environments.prod: expected a defined environment (KROPS_PROFILE); "
        "unknown environment 'prod' " + ENVS
    )
    assert load(real_data(), environ={"KROPS_PROFILE": "gcp"}).selected == "gcp"


def test_unknown_environment_in_lookup():
    with pytest.raises(config.ConfigError) as err:
        load(real_data()).lookup("environments.prod.mgmt-cluster")
    assert str(err.value) == (
        "bootstrap.toml: environments.prod: expected a defined environment; unknown environment 'prod' " + ENVS
    )


def test_missing_key_in_lookup_lists_available_keys():
    with pytest.raises(config.ConfigError) as err:
        load(real_data()).lookup("charts.flux")
    assert str(err.value) == (
        "bootstrap.toml: charts.flux: expected an existing key; available here: capi-operator, "
        "cert-manager, flux-operator " + ENVS
    )


def test_invalid_toml():
    with pytest.raises(config.ConfigError) as err:
        config.loads("[bootstrap\n", path="x/bootstrap.toml")
    assert str(err.value).startswith("x/bootstrap.toml: (top level): expected valid TOML; ")


def test_missing_file_names_it(tmp_path):
    with pytest.raises(config.ConfigError) as err:
        config.load(str(tmp_path / "nope.toml"), environ={})
    assert str(err.value) == (
        "%s: (top level): expected a readable bootstrap.toml; No such file or directory; "
        "set BOOTSTRAP_CONFIG or run from the repository root" % (tmp_path / "nope.toml")
    )


def test_environment_variables_override_values():
    loaded = load(
        real_data(),
        environ={
            "REGISTRY_PORT": "5055",
            "GIT_REPO_URL": "https://github.com/me/fork",
            "AGE_KEY_FILE": "/keys/a.agekey",
            "MGMT_READY_TIMEOUT": "1h",
            "CLUSTER_DELETE_TIMEOUT": "30m",
            "OCI_TAG": "",
            "LOCAL_RECONCILE_TIMEOUT": "600",
        },
    )
    assert loaded.lookup("bootstrap.registry-port") == 5055
    assert loaded.lookup("bootstrap.git-url") == "https://github.com/me/fork"
    assert loaded.lookup("bootstrap.age-key-file") == "/keys/a.agekey"
    assert {loaded.lookup(f"environments.{e}.mgmt-ready-timeout") for e in loaded.environment_names} == {3600}
    assert loaded.lookup("bootstrap.cluster-delete-timeout") == 1800
    assert loaded.lookup("bootstrap.local-reconcile-timeout") == 600
    assert loaded.lookup("bootstrap.oci-tag") == "latest"  # empty means unset


def test_bad_override_names_the_variable():
    with pytest.raises(config.ConfigError) as err:
        load(real_data(), environ={"REGISTRY_PORT": "70000"})
    assert str(err.value) == (
        "environment variable REGISTRY_PORT (overrides bootstrap.registry-port in bootstrap.toml): "
        "bootstrap.registry-port: expected an integer from 1 to 65535, got 70000 " + ENVS
    )


def test_bootstrap_config_env_selects_the_file(tmp_path):
    other = tmp_path / "other.toml"
    data = real_data()
    data["bootstrap"]["kind-cluster"] = "elsewhere"
    data["bootstrap"]["kind-context"] = "kind-elsewhere"
    other.write_text(tomli_w.dumps(data))
    assert config.load(environ={"BOOTSTRAP_CONFIG": str(other)}).lookup("bootstrap.kind-cluster") == "elsewhere"


# --- property-based: any mutation yields a valid config or a clear ConfigError ------------

_scalars = st.one_of(
    st.text(max_size=12),
    st.integers(min_value=-10, max_value=100000),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from(
        [
            "40m",
            "2h",
            "90s",
            "0s",
            "x",
            "",
            "oci",
            "git",
            "aws",
            "local-host",
            "arc-federate",
            "eu-north-1",
            "https://example.com/r",
            "UPPER",
            "a.b.c",
            "none",
        ]
    ),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(min_size=1, max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, prefix + (index,))


_MUTATIONS = st.lists(
    st.tuples(
        st.sampled_from(["delete", "replace", "add", "rename"]),
        st.integers(min_value=0, max_value=10**6),
        _values,
        st.text(min_size=1, max_size=10),
    ),
    min_size=1,
    max_size=3,
)


def _mutate(data, mutations):
    for kind, pick, value, name in mutations:
        paths = [p for p in _paths(data) if p]
        if not paths:
            return data
        path = paths[pick % len(paths)]
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        last = path[-1]
        if kind == "delete":
            del parent[last]
        elif kind == "replace":
            parent[last] = value
        elif kind == "add" and isinstance(parent, dict):
            parent[name] = value
        elif kind == "rename" and isinstance(parent, dict) and name not in parent:
            parent[name] = parent.pop(last)
    return data


def _check(text, environ=None):
    try:
        loaded = config.loads(text, path="fuzz/bootstrap.toml", environ=environ or {})
    except config.ConfigError as exc:
        message = str(exc)
        assert message.startswith(("fuzz/bootstrap.toml: ", "environment variable ")), message
        assert ": expected " in message, message
        return None
    assert loaded.selected in loaded.environment_names
    for name in loaded.environment_names:
        assert loaded.environment(name).mgmt_ready_timeout > 0
    return loaded


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _MUTATIONS,
    st.dictionaries(st.sampled_from(sorted(config.OVERRIDES) + ["KROPS_PROFILE"]), st.text(max_size=8), max_size=2),
)
def test_fuzz_structural_mutations(mutations, environ):
    data = _mutate(real_data(), mutations)
    try:
        text = tomli_w.dumps(data)
    except (TypeError, ValueError):
        return  # not representable as TOML (e.g. a non-table at the top level)
    _check(text, environ)


@settings(max_examples=500, deadline=None)
@given(st.integers(min_value=0, max_value=10**6), st.text(max_size=20))
def test_fuzz_text_splices(position, insert):
    text = real_text()
    position %= len(text)
    _check(text[:position] + insert + text[position:])
