# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The contract of every module's options (contract.check applies a module's row before anything else).

One row per module, option -> rule. The rules are the loader's (config.py: the names by their consumer's
rules) and contract.py's primitives, so an option and the bootstrap.toml key it mirrors cannot disagree.
docs/configuration.md (Module options) describes them.

Importable without Ansible.
"""

from __future__ import annotations

import re

from ansible_collections.krops.platform.plugins.module_utils import config_names as c
from ansible_collections.krops.platform.plugins.module_utils import config_schema
from ansible_collections.krops.platform.plugins.module_utils import contract as k

MAX_TIMEOUT = config_schema.MAX_TIMEOUT
TEXT = k.text()
PATH = k.text(4096, "a path")
ENVIRONMENT = c.DNS_LABEL_NAME  # an [environments.<name>] key
DNS_LABEL = c.DNS_LABEL_NAME
K8S_NAME = c.DNS_SUBDOMAIN_NAME  # a Secret, ConfigMap, Deployment or HelmRelease name
GIT_REF = c.git_ref
TIMEOUT = k.number(0, MAX_TIMEOUT, integer=True)
POSITIVE_TIMEOUT = k.number(1, MAX_TIMEOUT, integer=True)
POLL = k.number(0, 3600, integer=True)
PROGRESS = k.number(1, 3600, integer=True)  # seconds between progress lines: 0 would print without end
HTTPS = k.url()  # https, http only to loopback
MIN_AGE_HOURS = k.number(0, 24 * 366, what="a number of hours from 0 to 8784")  # the orphan reports' threshold
REGISTRY = k.url(http="any", what="an https:// (or, for a registry on the local network, http://) URL")

_GUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
GUID = k.segment(_GUID, "a GUID such as 00000000-0000-0000-0000-000000000000")
# Azure tenant: a GUID or a domain (contoso.onmicrosoft.com); it becomes a path segment of the login URL.
TENANT = k.segment(
    re.compile(r"^(?:[0-9a-fA-F-]{36}|[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9-]{1,63})+)$"),
    "an Azure tenant: its GUID or domain such as contoso.onmicrosoft.com",
)
AZURE_GROUP = c.AZURE_GROUP
# Arc connected cluster and user-assigned identity names (ARM: letters, digits, '-', '_', 1-63 / 3-128).
ARC_NAME = k.segment(
    re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$"),
    "an Arc connected cluster name: 1 to 63 letters, digits, '-' and '_', starting with a letter or digit",
)
IDENTITY_NAME = k.segment(
    re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{2,127}$"),
    "a user-assigned identity name: 3 to 128 letters, digits, '-' and '_', starting with a letter or digit",
)
FEDERATED_NAME = k.segment(
    re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{2,119}$"),
    "a federated identity credential name: 3 to 120 letters, digits, '-' and '_', starting with a letter or digit",
)
# A CRD's group/version: the group a DNS-1123 subdomain, the version a DNS-1035 label (what apiextensions
# requires of spec.group and spec.versions[].name).
_DNS1123_SUBDOMAIN = c.DNS_SUBDOMAIN
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


def _group_version(value, ctx, key):
    group, _slash, version = value.partition("/") if isinstance(value, str) else ("", "", "")
    if len(group) > 253 or not _DNS1123_SUBDOMAIN.match(group) or not _DNS1035_LABEL.match(version):
        ctx.fail(key, "a Kubernetes group/version such as operator.cluster.x-k8s.io/v1alpha2", value)
    return value


API_VERSION = k.segment(re.compile(r"^\d{4}-\d{2}-\d{2}(-preview)?$"), "an ARM api-version such as 2024-07-15-preview")
# GCP project ids: Resource Manager's character rule (a-z, 0-9 and -, letter first, no trailing -, at most 30;
# its minimum of 6 it enforces itself), optionally domain-scoped (example.com:my-project)
GCP_PROJECT = k.segment(
    re.compile(r"^(?:[a-z0-9][a-z0-9.-]{0,61}[a-z0-9]:)?[a-z](?:[a-z0-9-]{0,28}[a-z0-9])?$"),
    "a GCP project id: up to 30 lowercase letters, digits and '-', starting with a letter and not ending with '-'",
)
GKE_CLUSTER = k.segment(
    re.compile(r"^[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?$"),
    "a GKE cluster name: 1 to 40 lowercase letters, digits and '-', starting with a letter",
)
REGION = c.AWS_REGION
ACCOUNT_ID = k.segment(re.compile(r"^[0-9]{12}$"), "a 12-digit AWS account id")
# A Git revision given to `git rev-parse`: never an option (leading '-'), no spaces or control characters.
REVISION = k.segment(
    re.compile(r"^(?!-)[A-Za-z0-9._@^~{}+-]{1,255}$"), "a Git revision (a branch, tag or commit; no leading '-')"
)
REVISION_TEXT = k.text(255, "a revision such as main@sha1:<commit>")
KIND_NAME = c.KIND_CLUSTER
OCI_REPO = c.OCI_REPO
OCI_TAG = c.OCI_REF
GIT_URL = c.GIT_URL_FORM
# An OCI registry as oci_artifact_push takes it: host[:port], no scheme (https, or http with insecure=true)
OCI_REGISTRY = k.segment(
    re.compile(
        r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$"
    ),
    "a registry host[:port] such as localhost:5001 (no scheme: https, or http with insecure=true)",
)
KIND = k.segment(re.compile(r"^[A-Z][A-Za-z0-9]{0,62}$"), "a Kubernetes kind such as ConfigMap")
TOOL = k.segment(re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$"), "a tool name such as kubectl")
AGE_PUBLIC = k.segment(re.compile(r"^age1[02-9ac-hj-np-z]{58}$"), "an age public key (age1 and 58 characters)")
KS_NAME = k.text(253, "a Kustomization name, namespace/name, or *")
# A ServiceAccount name as an IAM StringLike pattern: DNS-1123 characters and the wildcards * and ?
SA_PATTERN = k.segment(
    re.compile(r"^[a-z0-9*?](?:[-a-z0-9.*?]{0,251}[a-z0-9*?])?$"),
    "a ServiceAccount name or IAM StringLike pattern such as provider-aws-* (lowercase letters, digits, '-', '.', * and ?)",
)
DEADLINE = k.number(1, 24 * 3600, what="a number of seconds from 1 to 86400")
MEMORY = k.number(64 * 1024**2, 1024**4, integer=True, what="a number of bytes from 64 MiB to 1 TiB")

KUBE = {"kubeconfig": PATH, "context": c.CONTEXT, "host": HTTPS, "proxy": k.url(http="any", what="a proxy URL")}
AWS = {"profile": TEXT, "endpoint_url": HTTPS}

OPTIONS = {
    "airgap_config_archive": {
        "root": k.directory("an existing directory (the krops checkout)"),
        "paths": k.unique(k.confined("root")),
        "dest": k.outside("root", "paths", "a file path outside the GitOps tree"),
        "reference": TEXT,
        "source": HTTPS,
        "revision": REVISION_TEXT,
    },
    "aws_orphan_sweep": dict(
        AWS,
        environment=ENVIRONMENT,
        config_file=PATH,
        regions=k.unique(REGION, 64),
        min_age_hours=MIN_AGE_HOURS,
        report_path=k.writable_file(),  # its folder is created when missing
        concurrency=k.number(1, 64, integer=True),
        wait_timeout=TIMEOUT,
        account_id=ACCOUNT_ID,
        progress_interval=PROGRESS,
        _wait_budget=TIMEOUT,
    ),
    "azure_arc_federate": {
        "subscription_id": GUID,
        "resource_group": AZURE_GROUP,
        "cluster_name": ARC_NAME,
        "identity_name": IDENTITY_NAME,
        "arc_api_version": API_VERSION,
        "issuer_timeout": TIMEOUT,
        "poll_interval": POLL,
        "endpoint": HTTPS,
        "client_id": GUID,
        "tenant": TENANT,
        "login_endpoint": HTTPS,
    },
    "azure_teardown": {
        "environment": ENVIRONMENT,
        "config_file": PATH,
        "subscription_id": GUID,
        "client_id": GUID,
        "tenant": TENANT,
        "resource_groups": k.unique(AZURE_GROUP),
        "federated_credential_names": k.unique(FEDERATED_NAME),
        "federated_credential_issuers": k.unique(k.url(http="never")),
        "endpoint": HTTPS,
        "login_endpoint": HTTPS,
        "wait_timeout": TIMEOUT,
        "poll_interval": POLL,
        "min_age_hours": MIN_AGE_HOURS,
        "report_path": k.writable_file(),  # its folder is created when missing
    },
    "capi_cluster_delete": dict(
        KUBE,
        namespace=DNS_LABEL,
        clusters=k.unique(DNS_LABEL),
        keep=k.unique(DNS_LABEL),
        kustomizations=k.unique(KS_NAME),
        wait_timeout=TIMEOUT,
    ),
    "capi_provider_delete": dict(KUBE, api_version=_group_version, wait_timeout=TIMEOUT),
    # settings: checked against the keys the cloud's rows file declares (cloud_teardown.cloud_settings)
    "cloud_teardown": {
        "environment": ENVIRONMENT,
        "config_file": PATH,
        "wait_timeout": TIMEOUT,
        "poll_interval": POLL,
        "min_age_hours": MIN_AGE_HOURS,
        "report_path": k.writable_file(),  # its folder is created when missing
    },
    "flux_release_quiesce": dict(KUBE, namespace=DNS_LABEL, releases=k.unique(K8S_NAME), providers=k.unique(K8S_NAME)),
    "crossplane_irsa_role": dict(
        AWS,
        environment=ENVIRONMENT,
        eks_cluster=c.EKS,
        region=REGION,
        role_name=c.IAM,
        namespace=DNS_LABEL,
        service_accounts=k.unique(SA_PATTERN),
    ),
    "crossplane_resources_delete": dict(KUBE, namespace=DNS_LABEL, environment=ENVIRONMENT, wait_timeout=TIMEOUT),
    "bootstrap_secrets_delete": dict(
        KUBE, namespace=DNS_LABEL, secrets=k.unique(K8S_NAME), configmaps=k.unique(K8S_NAME)
    ),
    "capi_pivot": dict(
        KUBE,
        source_kubeconfig=PATH,
        source_context=c.CONTEXT,
        target_kubeconfig=PATH,
        environment=ENVIRONMENT,
        config_file=PATH,
        repo_root=k.directory("an existing directory (the krops checkout)"),
        lb_port=k.number(1, 65535, integer=True),
        target_server=HTTPS,
        registry_url=REGISTRY,
        wait_timeout=TIMEOUT,
        node_timeout=TIMEOUT,
        mgmt_ready_timeout=TIMEOUT,
        move_timeout=TIMEOUT,
        progress_interval=PROGRESS,
        _wait_budget=TIMEOUT,
    ),
    "flux_handoff": dict(
        KUBE,
        environment=ENVIRONMENT,
        config_file=PATH,
        sync_url=GIT_URL,
        sync_ref=GIT_REF,
        age_key_file=PATH,
        sops_namespaces=k.unique(DNS_LABEL),
        helm_binary=PATH,
        wait_timeout=TIMEOUT,
        progress_interval=PROGRESS,
        _wait_budget=TIMEOUT,
    ),
    "gcp_teardown": {
        "environment": ENVIRONMENT,
        "config_file": PATH,
        "project": GCP_PROJECT,
        "networks": k.unique(c.GCP_NETWORK),
        "clusters": k.unique(GKE_CLUSTER),
        "service_accounts": k.unique(c.GCP_SERVICE_ACCOUNT),
        "workload_identity_providers": k.unique(c.GCP_WIF_PROVIDER),
        "base_url": HTTPS,
        "wait_timeout": TIMEOUT,
        "poll_interval": POLL,
        "min_age_hours": MIN_AGE_HOURS,
        "report_path": k.writable_file(),
    },
    "kind_cluster": {
        "name": KIND_NAME,
        "engine_socket": PATH,
        "registry_mirror.host": TEXT,
        "registry_mirror.endpoint": REGISTRY,  # documented http: the local registry on the kind network
        "environment": ENVIRONMENT,
        "engine_binary": PATH,
        "kubeconfig_path": PATH,
        "wait_timeout": POSITIVE_TIMEOUT,
        "node_image": TEXT,
        "kind_binary": PATH,
        "require_registry": REGISTRY,
    },
    "oci_artifact_push": {
        "registry": OCI_REGISTRY,
        "repository": OCI_REPO,
        "tag": OCI_TAG,
        "root": k.directory("an existing directory (the krops checkout)"),
        "paths": k.unique(k.confined("root")),
        "source": HTTPS,
        "revision": REVISION_TEXT,
        "username": TEXT,
    },
    "preflight_check": dict(
        AWS,
        tools=k.unique(TOOL),
        age_key_file=PATH,
        age_public_key=AGE_PUBLIC,
        # git_url: preflight's own rule is stricter (https://github.com/<owner>/<repo>) and reports it as a problem
        git_branch=GIT_REF,
        github_api_url=HTTPS,
        eips_per_cluster=k.number(1, 100, integer=True),
        **{"aws_eip_checks.region": REGION, "aws_eip_checks.clusters": k.unique(DNS_LABEL)},
        provider_manifests=k.unique(PATH),
        kind_node_image=TEXT,
        container_engine=TOOL,
    ),
    "render_diff": {
        "repo": k.directory("an existing directory (the Git repository)"),
        "base": REVISION,
        "head": REVISION,
        "environments": k.unique(ENVIRONMENT),
        "schema_location": TEXT,
        "accept_file": k.confined("repo", what="a file inside the repository"),
        "labels": k.unique(k.text(256, "a label")),
        "accept_label": k.text(256, "a label"),
        "deadline": DEADLINE,
        "memory_limit": MEMORY,
    },
    "engine_ping": dict(docker_host=TEXT, timeout=POSITIVE_TIMEOUT),
    "teardown_host": dict(
        KUBE,
        mgmt_kubeconfig=PATH,
        mgmt_context=c.CONTEXT,
        environment=ENVIRONMENT,
        config_file=PATH,
        timeout=POSITIVE_TIMEOUT,
        local_cluster_timeout=POSITIVE_TIMEOUT,
        required_tools=k.unique(TOOL),
        cleanup_kubeconfig=PATH,
    ),
    "tinkerbell_release": dict(
        KUBE,
        namespace=DNS_LABEL,
        hardware_namespace=DNS_LABEL,
        clusters=k.unique(DNS_LABEL),
        keep=k.unique(DNS_LABEL),
        wait_timeout=TIMEOUT,
    ),
    "validate": {
        "path": k.directory("an existing directory (the krops checkout)"),
        "environments": k.unique(ENVIRONMENT),
        "schema_location": TEXT,
        "allow_kinds": k.unique(KIND),
        "config_file": PATH,
        "deadline": DEADLINE,
        "memory_limit": MEMORY,
    },
}
