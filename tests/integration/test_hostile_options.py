# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Hostile module options, table-driven (issue 22): every case runs the module's main() and must end in the
exact clear error naming the option, before any file, tool or network is touched; never a traceback, never
silently accepted. The success cases check the value the contract normalises to. A hypothesis property per
module (contract.check over its whole row) never raises anything but the contract's error.

tests/benchmarks/bad_input_table.py prints this table's figures beside the loader's.
Placeholders: <repo> this checkout, <tmp> a fresh folder, <tree> a repository in it (mgmt/, and a symbolic
link leak -> /etc), <file> a plain file, <outside> a file outside <tree>.
"""

from __future__ import annotations

import importlib
import math
import os
import pathlib
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.krops.platform.plugins.module_utils import contract, options

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
MODULES = sorted(options.OPTIONS)

CONFIG = "<repo>/bootstrap.toml"
NOK = "/nonexistent/kubeconfig"
NO_KIND = {"environment": "local-host", "kind_binary": "/nonexistent/kind"}
AR = {
    "root": "<tree>",
    "paths": ["mgmt"],
    "dest": "<tmp>/out/x.tar",
    "reference": "r:5000/krops:latest",
    "revision": "x",
}
AWS = {"config_file": CONFIG, "environment": "aws", "endpoint_url": "http://127.0.0.1:1"}
ARC = {
    "resource_group": "rg",
    "cluster_name": "c",
    "access_token": "t",
    "subscription_id": "00000000-0000-0000-0000-000000000001",
    "endpoint": "http://127.0.0.1:1",
}
AZ = {
    "environment": "azure",
    "config_file": CONFIG,
    "access_token": "t",
    "subscription_id": "00000000-0000-0000-0000-000000000001",
    "endpoint": "http://127.0.0.1:1",
}
CD = {"kubeconfig": NOK}
XR = {
    "environment": "aws-crossplane",
    "eks_cluster": "default_eu-north-1-management-control-plane",
    "region": "eu-north-1",
}
SUBDOMAIN_RULE = (
    "expected a DNS-1123 subdomain: at most 253 lowercase letters, digits, '-' and '.' "
    "(the rule Kubernetes enforces on Secret and ConfigMap names), got "
)
PV = {"config_file": CONFIG, "environment": "local-host", "source_kubeconfig": NOK, "target_kubeconfig": NOK}
FX = {"config_file": CONFIG, "environment": "local-host", "kubeconfig": NOK}
GC = {
    "environment": "gcp",
    "config_file": CONFIG,
    "project": "p1",
    "access_token": "t",
    "base_url": "http://127.0.0.1:1",
}
OCI = {"registry": "127.0.0.1:1", "paths": ["mgmt"], "root": "<tree>", "revision": "x"}
PF = {}
RD = {"base": "HEAD", "repo": "<tree>"}
TH = {"config_file": CONFIG, "environment": "local-host", "kubeconfig": NOK}
TB = {"clusters": ["x"], "kubeconfig": NOK}
VA = {"path": "<tree>"}
CT = {"environment": "local-talos", "config_file": CONFIG, "settings": {}}


def c(case_id, module, base_args, message, **args):
    return (case_id, module, dict(base_args, **args), message)


CASES = [
    c(
        "archive-path-traversal",
        "airgap_config_archive",
        AR,
        (
            "option paths[0]: expected a directory inside the repository, got "
            "'../../../../../../../../../../../../etc'; it resolves to /etc, outside <tmp>/tree (a symbolic "
            "link or '..'); nothing outside the repository is read"
        ),
        paths=["../../../../../../../../../../../../etc"],
    ),
    c(
        "archive-path-symlink-out",
        "airgap_config_archive",
        AR,
        (
            "option paths[0]: expected a directory inside the repository, got 'leak'; it resolves to /etc, "
            "outside <tmp>/tree (a symbolic link or '..'); nothing outside the repository is read"
        ),
        paths=["leak"],
    ),
    c(
        "archive-path-duplicate",
        "airgap_config_archive",
        AR,
        "option paths[1]: expected distinct entries, got 'mgmt'; it repeats an earlier entry",
        paths=["mgmt", "mgmt"],
    ),
    c(
        "archive-dest-in-tree",
        "airgap_config_archive",
        AR,
        (
            "option dest: expected a file path outside the GitOps tree, got '<tmp>/tree/mgmt/x.tar'; it lies "
            "inside <tmp>/tree/mgmt (paths), which Flux reconciles; write it elsewhere (e.g. airgap/build/)"
        ),
        dest="<tree>/mgmt/x.tar",
    ),
    c(
        "archive-dest-under-a-file",
        "airgap_config_archive",
        AR,
        (
            "option dest: expected a file path outside the GitOps tree, got '<tmp>/afile/x.tar'; a part of "
            "its folder is a file, not a directory"
        ),
        dest="<file>/x.tar",
    ),
    c(
        "archive-dest-a-directory",
        "airgap_config_archive",
        AR,
        "option dest: expected a file path outside the GitOps tree, not a directory, got '<tmp>'",
        dest="<tmp>",
    ),
    c(
        "archive-root-missing",
        "airgap_config_archive",
        AR,
        "option root: expected an existing directory (the krops checkout), got '/nonexistent'",
        root="/nonexistent",
    ),
    c(
        "archive-source-file-url",
        "airgap_config_archive",
        AR,
        (
            "option source: expected an https:// URL, got 'file:///etc/passwd'; the scheme file: is never "
            "accepted (only https or http)"
        ),
        source="file:///etc/passwd",
    ),
    c(
        "archive-revision-newline",
        "airgap_config_archive",
        AR,
        (
            "option revision: expected a revision such as main@sha1:<commit> without control characters "
            "(NUL, newline, tab...), got 'main\\nx'"
        ),
        revision="main\nx",
    ),
    c(
        "sweep-min-age-nan",
        "aws_orphan_sweep",
        AWS,
        "option min_age_hours: expected a finite number of hours from 0 to 8784, got nan",
        min_age_hours=float("nan"),
    ),
    c(
        "sweep-min-age-inf",
        "aws_orphan_sweep",
        AWS,
        "option min_age_hours: expected a finite number of hours from 0 to 8784, got inf",
        min_age_hours=float("inf"),
    ),
    c(
        "sweep-min-age-negative",
        "aws_orphan_sweep",
        AWS,
        "option min_age_hours: expected a number of hours from 0 to 8784, got -1.0",
        min_age_hours=-1.0,
    ),
    c(
        "sweep-concurrency-100000",
        "aws_orphan_sweep",
        AWS,
        "option concurrency: expected an integer from 1 to 64, got 100000",
        concurrency=100000,
    ),
    c(
        "sweep-concurrency-0",
        "aws_orphan_sweep",
        AWS,
        "option concurrency: expected an integer from 1 to 64, got 0",
        concurrency=0,
    ),
    c(
        "sweep-progress-0",
        "aws_orphan_sweep",
        AWS,
        "option progress_interval: expected an integer from 1 to 3600, got 0",
        progress_interval=0,
    ),
    c(
        "sweep-wait-negative",
        "aws_orphan_sweep",
        AWS,
        "option wait_timeout: expected an integer from 0 to 604800, got -1",
        wait_timeout=-1,
    ),
    c(
        "sweep-account-short",
        "aws_orphan_sweep",
        AWS,
        "option account_id: expected a 12-digit AWS account id, got '12345'",
        account_id="12345",
    ),
    c(
        "sweep-account-path",
        "aws_orphan_sweep",
        AWS,
        "option account_id: expected a 12-digit AWS account id, got '../123456789012'",
        account_id="../123456789012",
    ),
    c(
        "sweep-regions-duplicate",
        "aws_orphan_sweep",
        AWS,
        "option regions[1]: expected distinct entries, got 'eu-north-1'; it repeats an earlier entry",
        regions=["eu-north-1", "eu-north-1"],
    ),
    c(
        "sweep-region-bad",
        "aws_orphan_sweep",
        AWS,
        "option regions[0]: expected an AWS region name such as eu-north-1, got 'EU/../x'",
        regions=["EU/../x"],
    ),
    c(
        "sweep-endpoint-file",
        "aws_orphan_sweep",
        AWS,
        (
            "option endpoint_url: expected an https:// URL, got 'file:///etc'; the scheme file: is never "
            "accepted (only https or http)"
        ),
        endpoint_url="file:///etc",
    ),
    c(
        "sweep-endpoint-http-remote",
        "aws_orphan_sweep",
        AWS,
        (
            "option endpoint_url: expected an https:// URL, got 'http://example.com'; http:// is accepted "
            "only to a loopback address (127.0.0.1, ::1, localhost)"
        ),
        endpoint_url="http://example.com",
    ),
    c(
        "sweep-report-under-a-file",
        "aws_orphan_sweep",
        AWS,
        (
            "option report_path: expected a file path, got '<tmp>/afile/r.md'; a part of its folder is a "
            "file, not a directory"
        ),
        report_path="<file>/r.md",
    ),
    c(
        "cloud-environment-dotdot",
        "cloud_teardown",
        CT,
        (
            "option environment: expected a DNS-1123 label: at most 63 lowercase letters, digits and '-', starting "
            "and ending with a letter or digit (the rule Kubernetes enforces on this name), got '../x'"
        ),
        environment="../x",
    ),
    c(
        "cloud-poll-negative",
        "cloud_teardown",
        CT,
        "option poll_interval: expected an integer from 0 to 3600, got -1",
        poll_interval=-1,
    ),
    c(
        "cloud-report-under-a-file",
        "cloud_teardown",
        CT,
        (
            "option report_path: expected a file path, got '<tmp>/afile/r.md'; a part of its folder is a "
            "file, not a directory"
        ),
        report_path="<file>/r.md",
        mode="report",
    ),
    c(
        "arc-cluster-name-path",
        "azure_arc_federate",
        ARC,
        (
            "option cluster_name: expected an Arc connected cluster name: 1 to 63 letters, digits, '-' and "
            "'_', starting with a letter or digit, got 'Bad Name/..'"
        ),
        cluster_name="Bad Name/..",
    ),
    c(
        "arc-group-traversal",
        "azure_arc_federate",
        ARC,
        (
            "option resource_group: expected an Azure resource group name: 1 to 90 of letters, digits, '_', "
            "'(', ')', '-', '.', not ending in '.' (Azure resource group name rule), got '../x'"
        ),
        resource_group="../x",
    ),
    c(
        "arc-endpoint-file",
        "azure_arc_federate",
        ARC,
        (
            "option endpoint: expected an https:// URL, got 'file:///'; the scheme file: is never accepted "
            "(only https or http)"
        ),
        endpoint="file:///",
    ),
    c(
        "arc-endpoint-http-remote",
        "azure_arc_federate",
        ARC,
        (
            "option endpoint: expected an https:// URL, got 'http://management.example'; http:// is accepted "
            "only to a loopback address (127.0.0.1, ::1, localhost)"
        ),
        endpoint="http://management.example",
    ),
    c(
        "arc-login-ftp",
        "azure_arc_federate",
        ARC,
        (
            "option login_endpoint: expected an https:// URL, got 'ftp://login.example'; the scheme ftp: is "
            "never accepted (only https or http)"
        ),
        login_endpoint="ftp://login.example",
    ),
    c(
        "arc-subscription-path",
        "azure_arc_federate",
        ARC,
        "option subscription_id: expected a GUID such as 00000000-0000-0000-0000-000000000000, got '../sub'",
        subscription_id="../sub",
    ),
    c(
        "arc-api-version-path",
        "azure_arc_federate",
        ARC,
        "option arc_api_version: expected an ARM api-version such as 2024-07-15-preview, got '../../x'",
        arc_api_version="../../x",
    ),
    c(
        "arc-poll-negative",
        "azure_arc_federate",
        ARC,
        "option poll_interval: expected an integer from 0 to 3600, got -1",
        poll_interval=-1,
    ),
    c(
        "arc-tenant-slash",
        "azure_arc_federate",
        ARC,
        "option tenant: expected an Azure tenant: its GUID or domain such as contoso.onmicrosoft.com, got 'a/b'",
        tenant="a/b",
    ),
    c(
        "arc-identity-dotdot",
        "azure_arc_federate",
        ARC,
        (
            "option identity_name: expected a user-assigned identity name: 3 to 128 letters, digits, '-' and "
            "'_', starting with a letter or digit, got '..'"
        ),
        identity_name="..",
    ),
    c(
        "azure-endpoint-file",
        "azure_teardown",
        AZ,
        (
            "option endpoint: expected an https:// URL, got 'file:///'; the scheme file: is never accepted "
            "(only https or http)"
        ),
        endpoint="file:///",
    ),
    c(
        "azure-endpoint-userinfo",
        "azure_teardown",
        AZ,
        "option endpoint: expected an https:// URL without credentials; it carries a user name or password before '@'",
        endpoint="https://user:pw@management.example",
    ),
    c(
        "azure-groups-duplicate",
        "azure_teardown",
        AZ,
        "option resource_groups[1]: expected distinct entries, got 'rg1'; it repeats an earlier entry",
        resource_groups=["rg1", "rg1"],
    ),
    c(
        "azure-group-slash",
        "azure_teardown",
        AZ,
        (
            "option resource_groups[0]: expected an Azure resource group name: 1 to 90 of letters, digits, "
            "'_', '(', ')', '-', '.', not ending in '.' (Azure resource group name rule), got 'a/b'"
        ),
        resource_groups=["a/b"],
    ),
    c(
        "azure-credential-name-dotdot",
        "azure_teardown",
        AZ,
        (
            "option federated_credential_names[0]: expected a federated identity credential name: 3 to 120 "
            "letters, digits, '-' and '_', starting with a letter or digit, got '../x'"
        ),
        federated_credential_names=["../x"],
    ),
    c(
        "azure-issuer-http",
        "azure_teardown",
        AZ,
        (
            "option federated_credential_issuers[0]: expected an https:// URL, got 'http://issuer.example'; "
            "http:// is never accepted here"
        ),
        federated_credential_issuers=["http://issuer.example"],
    ),
    c(
        "azure-subscription-slash",
        "azure_teardown",
        AZ,
        "option subscription_id: expected a GUID such as 00000000-0000-0000-0000-000000000000, got 'x/y'",
        subscription_id="x/y",
    ),
    c(
        "azure-wait-negative",
        "azure_teardown",
        AZ,
        "option wait_timeout: expected an integer from 0 to 604800, got -5",
        wait_timeout=-5,
    ),
    c(
        "azure-poll-huge",
        "azure_teardown",
        AZ,
        "option poll_interval: expected an integer from 0 to 3600, got 100000",
        poll_interval=100000,
    ),
    c(
        "azure-tenant-dotdot",
        "azure_teardown",
        AZ,
        "option tenant: expected an Azure tenant: its GUID or domain such as contoso.onmicrosoft.com, got '..'",
        tenant="..",
    ),
    c(
        "providers-api-version-no-version",
        "capi_provider_delete",
        CD,
        (
            "option api_version: expected a Kubernetes group/version such as operator.cluster.x-k8s.io/v1alpha2, "
            "got 'operator.cluster.x-k8s.io'"
        ),
        api_version="operator.cluster.x-k8s.io",
    ),
    c(
        "providers-api-version-dotdot",
        "capi_provider_delete",
        CD,
        "option api_version: expected a Kubernetes group/version such as operator.cluster.x-k8s.io/v1alpha2, got '../v1'",
        api_version="../v1",
    ),
    c(
        "providers-api-version-query",
        "capi_provider_delete",
        CD,
        (
            "option api_version: expected a Kubernetes group/version such as operator.cluster.x-k8s.io/v1alpha2, "
            "got 'x.io/v1?watch=1'"
        ),
        api_version="x.io/v1?watch=1",
    ),
    c(
        "quiesce-release-uppercase",
        "flux_release_quiesce",
        dict(CD, namespace="ack-system", releases=["ack-s3"]),
        "option releases[0]: " + SUBDOMAIN_RULE + "'ACK-S3'",
        releases=["ACK-S3"],
    ),
    c(
        "quiesce-namespace-slash",
        "flux_release_quiesce",
        dict(CD, releases=["ack-s3"]),
        (
            "option namespace: expected a DNS-1123 label: at most 63 lowercase letters, digits and '-', starting and "
            "ending with a letter or digit (the rule Kubernetes enforces on this name), got 'ack-system/x'"
        ),
        namespace="ack-system/x",
    ),
    c(
        "quiesce-provider-uppercase",
        "flux_release_quiesce",
        dict(CD, namespace="crossplane-system", releases=["crossplane"]),
        "option providers[0]: " + SUBDOMAIN_RULE + "'Provider-AWS-S3'",
        providers=["Provider-AWS-S3"],
    ),
    c(
        "irsa-role-name-path",
        "crossplane_irsa_role",
        dict(XR, endpoint_url="http://127.0.0.1:1"),
        (
            "option role_name: expected an IAM name: 1 to 64 of letters, digits and _+=,.@- (IAM role and user name "
            "rule), got '../admin'"
        ),
        role_name="../admin",
    ),
    c(
        "irsa-service-account-space",
        "crossplane_irsa_role",
        dict(XR, endpoint_url="http://127.0.0.1:1"),
        (
            "option service_accounts[0]: expected a ServiceAccount name or IAM StringLike pattern such as "
            "provider-aws-* (lowercase letters, digits, '-', '.', * and ?), got 'provider aws *'"
        ),
        service_accounts=["provider aws *"],
    ),
    c(
        "irsa-region-bad",
        "crossplane_irsa_role",
        dict(XR, endpoint_url="http://127.0.0.1:1"),
        "option region: expected an AWS region name such as eu-north-1, got 'eu-north-1; rm'",
        region="eu-north-1; rm",
    ),
    c(
        "crossplane-delete-environment-path",
        "crossplane_resources_delete",
        dict(CD, namespace="default"),
        (
            "option environment: expected a DNS-1123 label: at most 63 lowercase letters, digits and '-', starting "
            "and ending with a letter or digit (the rule Kubernetes enforces on this name), got '../aws'"
        ),
        environment="../aws",
    ),
    c(
        "crossplane-delete-timeout-negative",
        "crossplane_resources_delete",
        dict(CD, namespace="default", environment="aws-crossplane"),
        "option wait_timeout: expected an integer from 0 to 604800, got -1",
        wait_timeout=-1,
    ),
    c(
        "bootstrap-secrets-name-traversal",
        "bootstrap_secrets_delete",
        dict(CD, namespace="flux-system"),
        "option secrets[0]: " + SUBDOMAIN_RULE + "'../../etc'",
        secrets=["../../etc"],
    ),
    c(
        "bootstrap-secrets-configmap-repeated",
        "bootstrap_secrets_delete",
        dict(CD, namespace="flux-system"),
        "option configmaps[1]: expected distinct entries, got 'krops-run'; it repeats an earlier entry",
        configmaps=["krops-run", "krops-run"],
    ),
    c(
        "providers-wait-negative",
        "capi_provider_delete",
        CD,
        "option wait_timeout: expected an integer from 0 to 604800, got -1",
        wait_timeout=-1,
    ),
    c(
        "providers-host-file",
        "capi_provider_delete",
        CD,
        (
            "option host: expected an https:// URL, got 'file:///x'; the scheme file: is never accepted "
            "(only https or http)"
        ),
        host="file:///x",
    ),
    c(
        "delete-namespace-path",
        "capi_cluster_delete",
        CD,
        (
            "option namespace: expected a DNS-1123 label: at most 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit (the rule Kubernetes enforces on this name), got "
            "'Bad/..'"
        ),
        namespace="Bad/..",
    ),
    c(
        "delete-clusters-duplicate",
        "capi_cluster_delete",
        CD,
        "option clusters[1]: expected distinct entries, got 'a'; it repeats an earlier entry",
        clusters=["a", "a"],
    ),
    c(
        "delete-cluster-path",
        "capi_cluster_delete",
        CD,
        (
            "option clusters[0]: expected a DNS-1123 label: at most 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit (the rule Kubernetes enforces on this name), got "
            "'Bad Name/..'"
        ),
        clusters=["Bad Name/.."],
    ),
    c(
        "delete-keep-dotdot",
        "capi_cluster_delete",
        CD,
        (
            "option keep[0]: expected a DNS-1123 label: at most 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit (the rule Kubernetes enforces on this name), got "
            "'../x'"
        ),
        keep=["../x"],
    ),
    c(
        "delete-wait-negative",
        "capi_cluster_delete",
        CD,
        "option wait_timeout: expected an integer from 0 to 604800, got -1",
        wait_timeout=-1,
    ),
    c(
        "delete-host-file",
        "capi_cluster_delete",
        CD,
        (
            "option host: expected an https:// URL, got 'file:///x'; the scheme file: is never accepted "
            "(only https or http)"
        ),
        host="file:///x",
    ),
    c(
        "delete-kustomization-newline",
        "capi_cluster_delete",
        CD,
        (
            "option kustomizations[0]: expected a Kustomization name, namespace/name, or * without control "
            "characters (NUL, newline, tab...), got 'a\\nb'"
        ),
        kustomizations=["a\nb"],
    ),
    c(
        "pivot-lb-port-70000",
        "capi_pivot",
        PV,
        "option lb_port: expected an integer from 1 to 65535, got 70000",
        lb_port=70000,
    ),
    c(
        "pivot-lb-port-0",
        "capi_pivot",
        PV,
        "option lb_port: expected an integer from 1 to 65535, got 0",
        lb_port=0,
    ),
    c(
        "pivot-target-server-file",
        "capi_pivot",
        PV,
        (
            "option target_server: expected an https:// URL, got 'file:///'; the scheme file: is never "
            "accepted (only https or http)"
        ),
        target_server="file:///",
    ),
    c(
        "pivot-registry-file",
        "capi_pivot",
        PV,
        (
            "option registry_url: expected an https:// (or, for a registry on the local network, http://) "
            "URL, got 'file:///x'; the scheme file: is never accepted (only https or http)"
        ),
        registry_url="file:///x",
    ),
    c(
        "pivot-registry-ftp",
        "capi_pivot",
        PV,
        (
            "option registry_url: expected an https:// (or, for a registry on the local network, http://) "
            "URL, got 'ftp://x'; the scheme ftp: is never accepted (only https or http)"
        ),
        registry_url="ftp://x",
    ),
    c(
        "pivot-progress-0",
        "capi_pivot",
        PV,
        "option progress_interval: expected an integer from 1 to 3600, got 0",
        progress_interval=0,
    ),
    c(
        "pivot-wait-negative",
        "capi_pivot",
        PV,
        "option wait_timeout: expected an integer from 0 to 604800, got -1",
        wait_timeout=-1,
    ),
    c(
        "pivot-repo-root-missing",
        "capi_pivot",
        PV,
        "option repo_root: expected an existing directory (the krops checkout), got '/nonexistent'",
        repo_root="/nonexistent",
    ),
    c(
        "pivot-environment-path",
        "capi_pivot",
        PV,
        (
            "option environment: expected a DNS-1123 label: at most 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit (the rule Kubernetes enforces on this name), got "
            "'Bad/..'"
        ),
        environment="Bad/..",
    ),
    c(
        "flux-sync-ref-option",
        "flux_handoff",
        FX,
        (
            "flux_handoff: option sync_ref: expected a git branch name (no spaces, '..', '~^:?*[\\', '@{', no "
            "leading '-', '/' or '.', no trailing '/', '.' or '.lock'; see git check-ref-format), got "
            "'--upload-pack=x'"
        ),
        sync_ref="--upload-pack=x",
    ),
    c(
        "flux-sync-ref-dotdot",
        "flux_handoff",
        FX,
        (
            "flux_handoff: option sync_ref: expected a git branch name (no spaces, '..', '~^:?*[\\', '@{', no "
            "leading '-', '/' or '.', no trailing '/', '.' or '.lock'; see git check-ref-format), got 'a..b'"
        ),
        sync_ref="a..b",
    ),
    c(
        "flux-sync-url-file",
        "flux_handoff",
        FX,
        "flux_handoff: option sync_url: expected an https:// or ssh:// URL (ASCII, no spaces), got 'file:///x'",
        sync_url="file:///x",
    ),
    c(
        "flux-sync-url-http",
        "flux_handoff",
        FX,
        (
            "flux_handoff: option sync_url: expected an https:// or ssh:// URL (ASCII, no spaces), got "
            "'http://git.example/x.git'"
        ),
        sync_url="http://git.example/x.git",
    ),
    c(
        "flux-sops-namespaces-duplicate",
        "flux_handoff",
        FX,
        (
            "flux_handoff: option sops_namespaces[1]: expected distinct entries, got 'flux-system'; it "
            "repeats an earlier entry"
        ),
        sops_namespaces=["flux-system", "flux-system"],
    ),
    c(
        "flux-progress-0",
        "flux_handoff",
        FX,
        "flux_handoff: option progress_interval: expected an integer from 1 to 3600, got 0",
        progress_interval=0,
    ),
    c(
        "flux-wait-negative",
        "flux_handoff",
        FX,
        "flux_handoff: option wait_timeout: expected an integer from 0 to 604800, got -1",
        wait_timeout=-1,
    ),
    c(
        "flux-environment-dotdot",
        "flux_handoff",
        FX,
        (
            "flux_handoff: option environment: expected a DNS-1123 label: at most 63 lowercase letters, "
            "digits and '-', starting and ending with a letter or digit (the rule Kubernetes enforces on "
            "this name), got '../x'"
        ),
        environment="../x",
    ),
    c(
        "gcp-project-dotdot",
        "gcp_teardown",
        GC,
        (
            "option project: expected a GCP project id: up to 30 lowercase letters, digits and '-', starting "
            "with a letter and not ending with '-', got '../x'"
        ),
        project="../x",
    ),
    c(
        "gcp-project-slash",
        "gcp_teardown",
        GC,
        (
            "option project: expected a GCP project id: up to 30 lowercase letters, digits and '-', starting "
            "with a letter and not ending with '-', got 'a/b'"
        ),
        project="a/b",
    ),
    c(
        "gcp-base-url-file",
        "gcp_teardown",
        GC,
        (
            "option base_url: expected an https:// URL, got 'file:///etc'; the scheme file: is never "
            "accepted (only https or http)"
        ),
        base_url="file:///etc",
    ),
    c(
        "gcp-base-url-http-remote",
        "gcp_teardown",
        GC,
        (
            "option base_url: expected an https:// URL, got 'http://googleapis.example'; http:// is accepted "
            "only to a loopback address (127.0.0.1, ::1, localhost)"
        ),
        base_url="http://googleapis.example",
    ),
    c(
        "gcp-networks-duplicate",
        "gcp_teardown",
        GC,
        "option networks[1]: expected distinct entries, got 'vpc-a'; it repeats an earlier entry",
        networks=["vpc-a", "vpc-a"],
    ),
    c(
        "gcp-network-upper",
        "gcp_teardown",
        GC,
        (
            "option networks[0]: expected a GCP network name: 1 to 63 lowercase letters, digits and '-', "
            "starting with a letter and not ending with '-' (GCP Compute resource name rule (RFC 1035)), got "
            "'Bad'"
        ),
        networks=["Bad"],
    ),
    c(
        "gcp-cluster-path",
        "gcp_teardown",
        GC,
        (
            "option clusters[0]: expected a GKE cluster name: 1 to 40 lowercase letters, digits and '-', "
            "starting with a letter, got 'Bad Name/..'"
        ),
        clusters=["Bad Name/.."],
    ),
    c(
        "gcp-accounts-duplicate",
        "gcp_teardown",
        GC,
        "option service_accounts[1]: expected distinct entries, got 'krops-apps'; it repeats an earlier entry",
        service_accounts=["krops-apps", "krops-apps"],
    ),
    c(
        "gcp-provider-three-parts",
        "gcp_teardown",
        GC,
        (
            "option workload_identity_providers[0]: expected <pool>/<provider>, e.g. krops/kind: two "
            "workload identity IDs of 4 to 32 lowercase letters, digits and '-', not starting with 'gcp-' "
            "(IAM workloadIdentityPools and providers ID rule), got 'team/kind/x'"
        ),
        workload_identity_providers=["team/kind/x"],
    ),
    c(
        "gcp-poll-negative",
        "gcp_teardown",
        GC,
        "option poll_interval: expected an integer from 0 to 3600, got -1",
        poll_interval=-1,
    ),
    c(
        "engine-timeout-zero",
        "engine_ping",
        {},
        "option timeout: expected an integer from 1 to 604800, got 0",
        timeout=0,
    ),
    c(
        "engine-timeout-huge",
        "engine_ping",
        {},
        "option timeout: expected an integer from 1 to 604800, got 10000000",
        timeout=10000000,
    ),
    c(
        "engine-host-scheme",
        "engine_ping",
        {},
        "DOCKER_HOST ftp://127.0.0.1:1 is not an engine address: use unix:///path/to/docker.sock or tcp://host:port",
        docker_host="ftp://127.0.0.1:1",
    ),
    c(
        "kind-name-traversal",
        "kind_cluster",
        NO_KIND,
        (
            "option name: expected a kind cluster name: at most 50 characters of a-z, 0-9, '.' and '-' "
            "(kind's cluster-name rule), got '../../etc'"
        ),
        name="../../etc",
    ),
    c(
        "kind-name-space",
        "kind_cluster",
        NO_KIND,
        (
            "option name: expected a kind cluster name: at most 50 characters of a-z, 0-9, '.' and '-' "
            "(kind's cluster-name rule), got 'Bad Name'"
        ),
        name="Bad Name",
    ),
    c(
        "kind-mirror-file",
        "kind_cluster",
        NO_KIND,
        (
            "option registry_mirror.endpoint: expected an https:// (or, for a registry on the local network, "
            "http://) URL, got 'file:///x'; the scheme file: is never accepted (only https or http)"
        ),
        name="mgmt",
        registry_mirror={"host": "localhost:5001", "endpoint": "file:///x"},
    ),
    c(
        "kind-mirror-host-newline",
        "kind_cluster",
        NO_KIND,
        (
            "option registry_mirror.host: expected a non-empty string without control characters (NUL, "
            "newline, tab...), got 'a\\nb'"
        ),
        name="mgmt",
        registry_mirror={"host": "a\nb", "endpoint": "http://krops-registry:5000"},
    ),
    c(
        "kind-require-registry-file",
        "kind_cluster",
        {"kind_binary": "/nonexistent/kind"},
        (
            "option require_registry: expected an https:// (or, for a registry on the local network, "
            "http://) URL, got 'file:///x'; the scheme file: is never accepted (only https or http)"
        ),
        name="mgmt",
        state="absent",
        require_registry="file:///x",
    ),
    c(
        "kind-wait-0",
        "kind_cluster",
        NO_KIND,
        "option wait_timeout: expected an integer from 1 to 604800, got 0",
        name="mgmt",
        wait_timeout=0,
    ),
    c(
        "kind-environment-path",
        "kind_cluster",
        NO_KIND,
        (
            "option environment: expected a DNS-1123 label: at most 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit (the rule Kubernetes enforces on this name), got "
            "'Bad/..'"
        ),
        name="mgmt",
        environment="Bad/..",
    ),
    c(
        "kind-kubeconfig-newline",
        "kind_cluster",
        NO_KIND,
        "option kubeconfig_path: expected a path without control characters (NUL, newline, tab...), got 'a\\nb'",
        name="mgmt",
        kubeconfig_path="a\nb",
    ),
    c(
        "oci-registry-space",
        "oci_artifact_push",
        OCI,
        (
            "option registry: expected a registry host[:port] such as localhost:5001 (no scheme: https, or "
            "http with insecure=true), got 'http://x y'"
        ),
        registry="http://x y",
    ),
    c(
        "oci-registry-scheme",
        "oci_artifact_push",
        OCI,
        (
            "option registry: expected a registry host[:port] such as localhost:5001 (no scheme: https, or "
            "http with insecure=true), got 'https://registry.example'"
        ),
        registry="https://registry.example",
    ),
    c(
        "oci-registry-file",
        "oci_artifact_push",
        OCI,
        (
            "option registry: expected a registry host[:port] such as localhost:5001 (no scheme: https, or "
            "http with insecure=true), got 'file:///x'"
        ),
        registry="file:///x",
    ),
    c(
        "oci-repository-upper",
        "oci_artifact_push",
        OCI,
        (
            "option repository: expected an OCI repository name such as krops or team/krops (lowercase) (OCI "
            "distribution-spec repository name), got 'Krops'"
        ),
        repository="Krops",
    ),
    c(
        "oci-repository-dotdot",
        "oci_artifact_push",
        OCI,
        (
            "option repository: expected an OCI repository name such as krops or team/krops (lowercase) (OCI "
            "distribution-spec repository name), got '../x'"
        ),
        repository="../x",
    ),
    c(
        "oci-tag-space",
        "oci_artifact_push",
        OCI,
        (
            "option tag: expected an OCI tag: up to 128 of a-z, A-Z, 0-9, '_', '.', '-', not starting with "
            "'.' or '-' (OCI distribution-spec tag), got 'bad tag'"
        ),
        tag="bad tag",
    ),
    c(
        "oci-path-traversal",
        "oci_artifact_push",
        OCI,
        (
            "option paths[0]: expected a directory inside the repository, got "
            "'../../../../../../../../../../../../etc'; it resolves to /etc, outside <tmp>/tree (a symbolic "
            "link or '..'); nothing outside the repository is read"
        ),
        paths=["../../../../../../../../../../../../etc"],
    ),
    c(
        "oci-path-symlink-out",
        "oci_artifact_push",
        OCI,
        (
            "option paths[0]: expected a directory inside the repository, got 'leak'; it resolves to /etc, "
            "outside <tmp>/tree (a symbolic link or '..'); nothing outside the repository is read"
        ),
        paths=["leak"],
    ),
    c(
        "oci-paths-duplicate",
        "oci_artifact_push",
        OCI,
        "option paths[1]: expected distinct entries, got 'mgmt'; it repeats an earlier entry",
        paths=["mgmt", "mgmt"],
    ),
    c(
        "oci-source-file",
        "oci_artifact_push",
        OCI,
        (
            "option source: expected an https:// URL, got 'file:///x'; the scheme file: is never accepted "
            "(only https or http)"
        ),
        source="file:///x",
    ),
    c(
        "preflight-eips-negative",
        "preflight_check",
        PF,
        "option eips_per_cluster: expected an integer from 1 to 100, got -1",
        eips_per_cluster=-1,
    ),
    c(
        "preflight-eips-huge",
        "preflight_check",
        PF,
        "option eips_per_cluster: expected an integer from 1 to 100, got 1000",
        eips_per_cluster=1000,
    ),
    c(
        "preflight-tool-path",
        "preflight_check",
        PF,
        "option tools[0]: expected a tool name such as kubectl, got '../../bin/sh'",
        tools=["../../bin/sh"],
    ),
    c(
        "preflight-tools-duplicate",
        "preflight_check",
        PF,
        "option tools[1]: expected distinct entries, got 'git'; it repeats an earlier entry",
        tools=["git", "git"],
    ),
    c(
        "preflight-git-branch-option",
        "preflight_check",
        PF,
        (
            "option git_branch: expected a git branch name (no spaces, '..', '~^:?*[\\', '@{', no leading "
            "'-', '/' or '.', no trailing '/', '.' or '.lock'; see git check-ref-format), got "
            "'--upload-pack=x'"
        ),
        git_branch="--upload-pack=x",
    ),
    c(
        "preflight-github-api-http",
        "preflight_check",
        PF,
        (
            "option github_api_url: expected an https:// URL, got 'http://api.github.com'; http:// is "
            "accepted only to a loopback address (127.0.0.1, ::1, localhost)"
        ),
        github_api_url="http://api.github.com",
    ),
    c(
        "preflight-age-key-bad",
        "preflight_check",
        PF,
        "option age_public_key: expected an age public key (age1 and 58 characters), got 'nope'",
        age_public_key="nope",
    ),
    c(
        "preflight-eip-region-bad",
        "preflight_check",
        PF,
        "option aws_eip_checks[0].region: expected an AWS region name such as eu-north-1, got 'EU'",
        aws_eip_checks=[{"region": "EU", "clusters": ["a"]}],
    ),
    c(
        "render-diff-base-option",
        "render_diff",
        RD,
        "option base: expected a Git revision (a branch, tag or commit; no leading '-'), got '--output=/tmp/x'",
        base="--output=/tmp/x",
    ),
    c(
        "render-diff-head-space",
        "render_diff",
        RD,
        "option head: expected a Git revision (a branch, tag or commit; no leading '-'), got 'a b'",
        head="a b",
    ),
    c(
        "render-diff-repo-missing",
        "render_diff",
        RD,
        "option repo: expected an existing directory (the Git repository), got '/nonexistent'",
        repo="/nonexistent",
    ),
    c(
        "render-diff-accept-outside",
        "render_diff",
        RD,
        (
            "option accept_file: expected a file inside the repository, got '<tmp>/outside.txt'; it resolves "
            "to <tmp>/outside.txt, outside <tmp>/tree (a symbolic link or '..'); nothing outside the "
            "repository is read"
        ),
        accept_file="<outside>",
    ),
    c(
        "render-diff-environments-duplicate",
        "render_diff",
        RD,
        "option environments[1]: expected distinct entries, got 'local-host'; it repeats an earlier entry",
        environments=["local-host", "local-host"],
    ),
    c(
        "render-diff-deadline-0",
        "render_diff",
        RD,
        "option deadline: expected a number of seconds from 1 to 86400, got 0.0",
        deadline=0.0,
    ),
    c(
        "render-diff-deadline-nan",
        "render_diff",
        RD,
        "option deadline: expected a finite number of seconds from 1 to 86400, got nan",
        deadline=float("nan"),
    ),
    c(
        "render-diff-memory-tiny",
        "render_diff",
        RD,
        "option memory_limit: expected a number of bytes from 64 MiB to 1 TiB, got 1",
        memory_limit=1,
    ),
    c(
        "teardown-host-timeout-0",
        "teardown_host",
        TH,
        "option timeout: expected an integer from 1 to 604800, got 0",
        timeout=0,
    ),
    c(
        "teardown-host-timeout-negative",
        "teardown_host",
        TH,
        "option timeout: expected an integer from 1 to 604800, got -1",
        timeout=-1,
    ),
    c(
        "teardown-host-local-timeout-0",
        "teardown_host",
        TH,
        "option local_cluster_timeout: expected an integer from 1 to 604800, got 0",
        local_cluster_timeout=0,
    ),
    c(
        "teardown-host-tool-path",
        "teardown_host",
        TH,
        "option required_tools[0]: expected a tool name such as kubectl, got '../sh'",
        required_tools=["../sh"],
    ),
    c(
        "teardown-host-tools-duplicate",
        "teardown_host",
        TH,
        "option required_tools[1]: expected distinct entries, got 'kind'; it repeats an earlier entry",
        required_tools=["kind", "kind"],
    ),
    c(
        "teardown-host-environment-path",
        "teardown_host",
        TH,
        (
            "option environment: expected a DNS-1123 label: at most 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit (the rule Kubernetes enforces on this name), got "
            "'Bad/..'"
        ),
        environment="Bad/..",
    ),
    c(
        "teardown-host-host-file",
        "teardown_host",
        TH,
        (
            "option host: expected an https:// URL, got 'file:///'; the scheme file: is never accepted (only "
            "https or http)"
        ),
        host="file:///",
    ),
    c(
        "tinkerbell-clusters-duplicate",
        "tinkerbell_release",
        TB,
        "option clusters[1]: expected distinct entries, got 'x'; it repeats an earlier entry",
        clusters=["x", "x"],
    ),
    c(
        "tinkerbell-cluster-path",
        "tinkerbell_release",
        TB,
        (
            "option clusters[0]: expected a DNS-1123 label: at most 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit (the rule Kubernetes enforces on this name), got "
            "'Bad/..'"
        ),
        clusters=["Bad/.."],
    ),
    c(
        "tinkerbell-namespace-dotdot",
        "tinkerbell_release",
        TB,
        (
            "option namespace: expected a DNS-1123 label: at most 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit (the rule Kubernetes enforces on this name), got "
            "'../x'"
        ),
        namespace="../x",
    ),
    c(
        "tinkerbell-hardware-namespace-upper",
        "tinkerbell_release",
        TB,
        (
            "option hardware_namespace: expected a DNS-1123 label: at most 63 lowercase letters, digits and "
            "'-', starting and ending with a letter or digit (the rule Kubernetes enforces on this name), "
            "got 'A'"
        ),
        hardware_namespace="A",
    ),
    c(
        "tinkerbell-wait-negative",
        "tinkerbell_release",
        TB,
        "option wait_timeout: expected an integer from 0 to 604800, got -1",
        wait_timeout=-1,
    ),
    c(
        "tinkerbell-keep-space",
        "tinkerbell_release",
        TB,
        (
            "option keep[0]: expected a DNS-1123 label: at most 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit (the rule Kubernetes enforces on this name), got 'x "
            "y'"
        ),
        keep=["x y"],
    ),
    c(
        "validate-path-missing",
        "validate",
        VA,
        "option path: expected an existing directory (the krops checkout), got '/nonexistent'",
        path="/nonexistent",
    ),
    c(
        "validate-environments-duplicate",
        "validate",
        VA,
        "option environments[1]: expected distinct entries, got 'local-host'; it repeats an earlier entry",
        environments=["local-host", "local-host"],
    ),
    c(
        "validate-environment-dotdot",
        "validate",
        VA,
        (
            "option environments[0]: expected a DNS-1123 label: at most 63 lowercase letters, digits and "
            "'-', starting and ending with a letter or digit (the rule Kubernetes enforces on this name), "
            "got '../x'"
        ),
        environments=["../x"],
    ),
    c(
        "validate-kind-space",
        "validate",
        VA,
        "option allow_kinds[0]: expected a Kubernetes kind such as ConfigMap, got 'bad kind'",
        allow_kinds=["bad kind"],
    ),
    c(
        "validate-deadline-0",
        "validate",
        VA,
        "option deadline: expected a number of seconds from 1 to 86400, got 0.0",
        deadline=0.0,
    ),
    c(
        "validate-deadline-inf",
        "validate",
        VA,
        "option deadline: expected a finite number of seconds from 1 to 86400, got inf",
        deadline=float("inf"),
    ),
    c(
        "validate-memory-tiny",
        "validate",
        VA,
        "option memory_limit: expected a number of bytes from 64 MiB to 1 TiB, got 10",
        memory_limit=10,
    ),
]


def place(value, tmp):
    """value with the placeholders replaced (see the module docstring)."""
    if isinstance(value, str):
        for mark, real in (
            ("<tree>", f"{tmp}/tree"),
            ("<file>", f"{tmp}/afile"),
            ("<outside>", f"{tmp}/outside.txt"),
            ("<repo>", REPO),
            ("<tmp>", str(tmp)),
        ):
            value = value.replace(mark, real)
        return value
    if isinstance(value, list):
        return [place(v, tmp) for v in value]
    if isinstance(value, dict):
        return {k: place(v, tmp) for k, v in value.items()}
    return value


def world(tmp):
    (tmp / "tree" / "mgmt" / "x").mkdir(parents=True)
    (tmp / "tree" / "mgmt" / "x" / "a.yaml").write_text("a: 1\n")
    (tmp / "tree" / "leak").symlink_to("/etc")
    (tmp / "afile").write_text("x")
    (tmp / "outside.txt").write_text("x")


def module_of(name):
    return importlib.import_module(f"ansible_collections.krops.platform.plugins.modules.{name}")


def test_the_table_covers_every_module_with_at_least_100_cases():
    assert len(CASES) >= 100
    assert sorted({case[1] for case in CASES}) == MODULES and len(MODULES) == 22
    assert len({case[0] for case in CASES}) == len(CASES)


@pytest.fixture
def short_tmp():
    """A folder with a short path: the messages shorten a value over 60 characters, and pytest's
    own tmp_path (longer under xdist, popen-gwN) would then change the exact text expected."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="kh", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_hostile_option_is_a_clear_error_naming_it(run_module, short_tmp, case):
    case_id, module, args, message = case
    world(short_tmp)
    result = run_module(module_of(module), place(args, short_tmp))
    assert "exception" not in result, result
    assert result.failed, f"{case_id}: accepted"
    assert result["msg"] == place(message, short_tmp)


# (module, options, option, normalised value): accepted, and what the module then works with
ACCEPTED = [
    ("gcp_teardown", {"base_url": "https://googleapis.example/"}, "base_url", "https://googleapis.example"),
    ("gcp_teardown", {"base_url": "http://127.0.0.1:8080/"}, "base_url", "http://127.0.0.1:8080"),
    ("azure_teardown", {"endpoint": "http://[::1]:9000"}, "endpoint", "http://[::1]:9000"),
    ("aws_orphan_sweep", {"min_age_hours": 0}, "min_age_hours", 0),
    ("aws_orphan_sweep", {"concurrency": 64.0}, "concurrency", 64),
    ("aws_orphan_sweep", {"account_id": "123456789012"}, "account_id", "123456789012"),
    ("flux_handoff", {"sync_ref": "release/v1.2"}, "sync_ref", "release/v1.2"),
    ("gcp_teardown", {"workload_identity_providers": ["krops/kind"]}, "workload_identity_providers", ["krops/kind"]),
    ("gcp_teardown", {"project": "example.com:my-project"}, "project", "example.com:my-project"),
    (
        "kind_cluster",
        {"registry_mirror": {"host": "localhost:5001", "endpoint": "http://krops-registry:5000/"}},
        "registry_mirror",
        {"host": "localhost:5001", "endpoint": "http://krops-registry:5000"},
    ),
    ("oci_artifact_push", {"registry": "[::1]:5001"}, "registry", "[::1]:5001"),
    ("render_diff", {"deadline": 0.5 + 0.5}, "deadline", 1.0),
]


@pytest.mark.parametrize("case", ACCEPTED, ids=[f"{c[0]}-{c[2]}" for c in ACCEPTED])
def test_good_options_pass_normalised(case):
    module, params, option, normalised = case
    assert contract.check(module, dict(params))[option] == normalised


def test_a_secret_option_is_never_echoed():
    ctx = contract.OptionCtx("x", {}, secret=("password",))
    with pytest.raises(contract.ContractError) as caught:
        contract.text()("hunter2\n", ctx, "password")
    assert "hunter2" not in str(caught.value)


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=300),
    st.sampled_from(["../x", "a/b", "file:///etc", "http://x y", "--upload-pack=x", "\x00", "..", "%2e%2e"]),
    st.lists(st.one_of(st.text(max_size=40), st.integers()), max_size=5),
    st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=3),
)


@pytest.mark.parametrize("module", MODULES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_property_the_contract_never_raises_anything_else(module, data, tmp_path_factory):
    """Any value of any option of the module: the contract normalises it or names the option; nothing else."""
    row = options.OPTIONS[module]
    option = data.draw(st.sampled_from(sorted(row)))
    value = data.draw(_VALUES)
    if "." in option:  # a sub-option: inside its dict (or list of dicts)
        parent, child = option.split(".", 1)
        params = {parent: {child: value}}
    else:
        params = {option: value}
    try:
        contract.check(module, params)
    except contract.ContractError as exc:
        assert str(exc).startswith(f"option {option.split('.')[0]}")
    else:
        got = params[option.split(".")[0]]
        if isinstance(got, float):
            assert math.isfinite(got)
