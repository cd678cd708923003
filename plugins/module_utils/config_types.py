# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The tables of bootstrap.toml as frozen dataclasses: what every consumer reads, by attribute.

One class per table: :class:`Bootstrap` (``[bootstrap]``), :class:`Charts` (``[charts]``), :class:`Teardown`
(``[teardown]``), :class:`Environment` (``[environments.<name>]``, whose ``platform`` names its profile in
module_utils.profiles) with its :class:`EnvironmentTeardown`, :class:`AwsWorkload`, :class:`AwsAccount` and
:class:`MoveFallback` tables.

Each field is one key, declared once: its attribute is the TOML key with ``_`` for ``-``
(``mgmt_ready_timeout`` is ``mgmt-ready-timeout``), and ``key(checker, default)`` gives the checker the
loader validates it with (module_utils.config_schema, config_names) and its default (``REQUIRED``: the key
must be set). The loader derives each table's known keys from these fields (:func:`fields_of`), so a
misspelt key fails at load with the valid keys listed, and builds the objects from the checked tables
(:func:`build`). Arrays are tuples, the variable map a read-only mapping: nothing can change a loaded
configuration.

:func:`as_toml_dict` is the one way back to plain data with the TOML keys, for the Ansible side: the
lookup plugin (through ``Config.lookup``) uses it, nothing else (tests/unit/plugins/module_utils/
test_config_reads.py checks both that and that no consumer reads the configuration by a dashed key).
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping

from ansible_collections.krops.platform.plugins.module_utils import config_names as N
from ansible_collections.krops.platform.plugins.module_utils import config_schema as S
from ansible_collections.krops.platform.plugins.module_utils import contract
from ansible_collections.krops.platform.plugins.module_utils import profiles

REQUIRED = S.REQUIRED
SYNC_KINDS = ("git", "oci")
POST_KIND_CREATE_HOOKS = ("arc-federate", "wif-federate")


def key(check, default=REQUIRED, nested=None):
    """One bootstrap.toml key: the checker the loader runs on its value and its default (REQUIRED: mandatory).
    ``nested``: the dataclass of a sub-table or of each table of an array of tables."""
    # called in the class bodies below, so each field is declared in one call
    return dataclasses.field(metadata={"check": check, "default": default, "nested": nested})  # pylint: disable=invalid-field-call


def toml_key(attribute):
    """The bootstrap.toml key of an attribute (``mgmt_ready_timeout`` -> ``mgmt-ready-timeout``)."""
    return attribute.replace("_", "-")


def fields_of(cls):
    """{TOML key: (checker, default)} of a table's dataclass, in declaration order (the order keys are checked)."""
    return {toml_key(f.name): (f.metadata["check"], f.metadata["default"]) for f in dataclasses.fields(cls)}


def sub_table(cls):
    """A sub-table of ``cls`` (a missing one gets the defaults of its keys)."""
    return key(S.table(fields_of(cls)), {}, nested=cls)


@dataclasses.dataclass(frozen=True)
class Bootstrap:
    """[bootstrap]: names and timings of the bootstrap, the local registry, Flux and the management cluster."""

    default_environment: str = key(S.string)
    git_url: str = key(N.git_url)
    git_branch: str = key(N.git_ref, "main")
    github_user: str = key(N.GITHUB_USER, "git")
    kind_cluster: str = key(N.KIND_CLUSTER, "mgmt")
    kind_context: str = key(S.optional(N.CONTEXT), "")  # empty: kind-<kind-cluster>, the context kind writes
    kind_network: str = key(N.DOCKER, "kind")
    kind_node_image: str = key(N.IMAGE, "")
    registry_name: str = key(N.DOCKER, "krops-registry")
    registry_port: int = key(S.integer(1, 65535), 5001)
    registry_container_port: int = key(S.integer(1, 65535), 5000)
    registry_ready_retries: int = key(S.integer(1, 100000), 120)
    oci_repository: str = key(N.OCI_REPO, "krops")
    oci_tag: str = key(N.OCI_REF, "latest")
    flux_version: str = key(N.FLUX_VERSION, "2.9.x")
    flux_namespace: str = key(N.DNS_LABEL_NAME, "flux-system")
    github_pat_secret: str = key(N.DNS_SUBDOMAIN_NAME, "flux-github-pat")
    sops_age_secret: str = key(N.DNS_SUBDOMAIN_NAME, "sops-age")
    run_configmap: str = key(N.DNS_SUBDOMAIN_NAME, "krops-run")
    run_ttl: str = key(S.ttl, "24h")  # kept as written ("none" or a duration): flux computes the expiry
    age_key_file: str = key(S.user_path, "~/.config/krops/age.agekey")
    mgmt_namespace: str = key(N.DNS_LABEL_NAME, "default")
    mgmt_context: str = key(N.CONTEXT, "krops-mgmt")
    mgmt_kubeconfig: str = key(S.user_path, "~/.kube/krops-mgmt.yaml")
    # durations, in whole seconds
    mgmt_poll_interval: int = key(S.duration_in(3600), 10)
    local_reconcile_timeout: int = key(S.duration, 900)
    cluster_delete_timeout: int = key(S.duration, 1200)
    provider_delete_timeout: int = key(S.duration, 300)


@dataclasses.dataclass(frozen=True)
class Charts:
    """[charts]: the chart versions the bootstrap installs before Flux exists (the trees pin the same)."""

    flux_operator: str = key(N.CHART)
    cert_manager: str = key(N.CHART)
    capi_operator: str = key(N.CHART)

    def pin(self, name):
        """The version of ``[charts] <name>``, the TOML key as tables of chart names spell it (``cert-manager``);
        KeyError names the known keys."""
        for field in dataclasses.fields(self):
            if toml_key(field.name) == name:
                return getattr(self, field.name)
        raise KeyError("no [charts] key {!r} (known: {})".format(name, ", ".join(fields_of(Charts))))


# [charts] key -> the Helm chart it pins: the bootstrap installs that chart before Flux exists, and the trees'
# releases of it must follow the same version. The one table of it (airgap_tables.BOOTSTRAP_CHARTS is this table,
# validate_bootstrap.CHART_PINS its inverse; the pivot's CHARTS rows name the same charts).
CHART_NAMES = {
    "cert-manager": "cert-manager",
    "capi-operator": "cluster-api-operator",
    "flux-operator": "flux-operator",
}


@dataclasses.dataclass(frozen=True)
class Teardown:
    """[teardown]: the account-global AWS names of every environment (an environment's own table may override
    global-iam-users and cfn-stack-name)."""

    cfn_stack_name: str = key(N.CFN, "cluster-api-provider-aws-sigs-k8s-io")
    global_iam_roles: tuple = key(S.list_of(N.IAM_ROLE_PATTERN), [])
    global_iam_users: tuple = key(S.list_of(N.IAM), [])
    s3_bucket_pattern: str = key(N.S3_BUCKET_PATTERN, "krops-{account_id}-{cluster_name}-data")


@dataclasses.dataclass(frozen=True)
class AwsWorkload:
    """[[environments.<env>.teardown.aws-workloads]]: one workload cluster the AWS sweep covers."""

    region: str = key(N.AWS_REGION)
    cluster_name: str = key(N.DNS_LABEL_NAME)
    eks_cluster_name: str = key(N.EKS)
    rds_instance: str = key(S.optional(N.RDS), "")


@dataclasses.dataclass(frozen=True)
class AwsAccount:
    """[[environments.<env>.accounts]]: an AWS account the sweep works in, through a role krops assumes."""

    account_id: str = key(N.account_id)
    role_arn: str = key(N.role_arn, "")  # completed from role-name by the loader
    role_name: str = key(N.role_name, "")
    regions: tuple = key(S.not_empty(contract.unique(N.AWS_REGION, 64), "region"), [])
    # the clusters (aws-workloads cluster-name, mgmt-cluster) that live in this account; unset: every cluster
    clusters: tuple = key(S.not_empty(contract.unique(N.DNS_LABEL_NAME, S.MAX_ITEMS), "cluster"), [])
    external_id: str = key(S.optional(N.EXTERNAL_ID), "")
    session_name: str = key(S.optional(N.SESSION_NAME), "")
    duration: int | None = key(N.role_duration, None)  # seconds
    # the role ACK's controllers assume to manage this account's resources (CARM: scripts/ack-accounts maps it)
    ack_role_arn: str = key(S.optional(N.role_arn), "")


@dataclasses.dataclass(frozen=True)
class MoveFallback:
    """[[environments.<env>.move-fallbacks]]: an object the pivot applies when clusterctl move leaves it."""

    resource: str = key(N.MOVE_RESOURCE)
    name: str = key(N.DNS_SUBDOMAIN_NAME)
    manifest: str = key(S.repo_path)


@dataclasses.dataclass(frozen=True)
class EnvironmentTeardown:
    """[environments.<env>.teardown]: what the teardown of the environment deletes, by exact name."""

    capi_workloads: tuple = key(contract.unique(N.DNS_LABEL_NAME, S.MAX_ITEMS), [])
    mgmt_container_prefix: str = key(S.optional(N.DOCKER), "")
    mgmt_eks_cluster_name: str = key(S.optional(N.EKS), "")
    mgmt_iam_role_prefix: str = key(S.optional(N.IAM), "")
    aws_workloads: tuple = key(S.distinct_by("cluster-name", S.table_list(fields_of(AwsWorkload))), [], AwsWorkload)
    hardware_release: bool = key(S.boolean, False)
    resource_groups: tuple = key(contract.unique(N.AZURE_GROUP, S.MAX_ITEMS), [])
    networks: tuple = key(contract.unique(N.GCP_NETWORK, S.MAX_ITEMS), [])
    # GCP IAM objects carry no labels: owned by these exact names only (gcp teardown, last stages).
    service_accounts: tuple = key(contract.unique(N.GCP_SERVICE_ACCOUNT, S.MAX_ITEMS), [])
    workload_identity_providers: tuple = key(contract.unique(N.GCP_WIF_PROVIDER, S.MAX_ITEMS), [])
    # Account-global AWS resources this environment names (None: the top-level [teardown] values).
    global_iam_users: tuple | None = key(S.list_of(N.IAM), None)
    cfn_stack_name: str | None = key(N.CFN, None)
    # Cloud resources whose deletion protection the teardown may switch off (exact names).
    disable_deletion_protection: tuple = key(S.list_of(N.DNS_LABEL_NAME), [])


@dataclasses.dataclass(frozen=True)
class Environment:
    """[environments.<name>]: one environment; ``platform`` names its profile (``profiles.of(env)``), so code
    asks the profile for capabilities instead of comparing platform names.

    bootstrap.toml spells the platform ``platform`` or, the older name, ``kind`` (PLATFORM_ALIAS); the
    loader accepts either and keeps one, ``platform``.
    """

    platform: str = key(S.choice(*profiles.PLATFORMS), None)
    sync: str = key(S.choice(*SYNC_KINDS))
    resource_plane: str = key(S.choice(*profiles.RESOURCE_PLANES), "native")  # profiles.py: which platform has which
    sync_path: str = key(S.repo_path)
    workload_path: str = key(S.optional(S.repo_path), "")
    mgmt_cluster: str = key(N.DNS_LABEL_NAME)
    # The management cluster's cloud region (aws, azure, gcp): stated, never inferred from a name.
    mgmt_region: str = key(S.string, "")
    mgmt_ready_timeout: int = key(S.duration)  # seconds
    infra_provider_namespace: str = key(N.DNS_LABEL_NAME)
    infra_provider_name: str = key(N.DNS_LABEL_NAME)
    provider_manifests: tuple = key(S.list_of(S.repo_path), [])
    move_fallbacks: tuple = key(S.table_list(fields_of(MoveFallback)), [], MoveFallback)
    pivot_sops_secrets: tuple = key(S.list_of(S.repo_path), [])
    # Flux Kustomizations (flux-system, exact names) that must be Ready on kind before the move starts.
    pivot_wait_kustomizations: tuple = key(S.list_of(N.DNS_LABEL_NAME), [])
    post_kind_create_hook: str = key(S.choice("", *POST_KIND_CREATE_HOOKS), "")
    pivot_manifests: tuple = key(S.list_of(S.repo_path), [])
    pivot_manifest_vars: Mapping = key(S.var_map, {})
    teardown: EnvironmentTeardown = sub_table(EnvironmentTeardown)
    # aws: the accounts the sweep and the orphan report work in, each through a role krops assumes (unset:
    # the one account of the caller's credentials).
    accounts: tuple = key(N.accounts(fields_of(AwsAccount)), [], AwsAccount)
    # Operator providers ("<Kind>/<name>") whose Cluster API base is past its end of life, accepted knowingly:
    # validate reports them as warnings instead of findings (module_utils/contracts.py).
    accepted_end_of_life: tuple = key(S.list_of(N.PROVIDER_REF), [])


# The older spelling of Environment.platform in bootstrap.toml (checked first, as the loader always did).
PLATFORM_ALIAS = "kind"
TABLES = {"bootstrap": Bootstrap, "charts": Charts, "teardown": Teardown, "environments": Environment}


def environment_fields():
    """The known keys of an [environments.<name>] table: the alias ``kind``, then Environment's."""
    return {PLATFORM_ALIAS: (S.choice(*profiles.PLATFORMS), None), **fields_of(Environment)}


def _frozen(value):
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return types.MappingProxyType(dict(value))
    return value


def build(cls, table):
    """The frozen ``cls`` of a table the loader has checked (a dict of TOML keys, every key present)."""
    values = {}
    for field in dataclasses.fields(cls):
        value = table[toml_key(field.name)]
        nested = field.metadata["nested"]
        if nested is not None:
            value = tuple(build(nested, v) for v in value) if isinstance(value, list) else build(nested, value)
        values[field.name] = _frozen(value)
    return cls(**values)


def as_toml_dict(value):
    """Plain data with the TOML keys (dicts, lists, str, int, bool) of a table or any value inside one.

    The one way from the typed configuration back to dicts, for the Ansible side only (the lookup plugin,
    through Config.lookup). An environment also carries ``kind`` (= platform) after ``platform``, as the
    loader always returned it to the roles.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {toml_key(f.name): as_toml_dict(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, Environment):
            out["platform"] = out.pop("platform")
            out[PLATFORM_ALIAS] = value.platform
        return out
    if isinstance(value, (list, tuple)):
        return [as_toml_dict(v) for v in value]
    if isinstance(value, Mapping):
        return {k: as_toml_dict(v) for k, v in value.items()}
    return value
