# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The IAM role the Crossplane providers assume through IRSA (resource-plane crossplane, aws).

``ensure_role(connection, ...)`` makes the role ``krops-crossplane`` (bootstrap.toml's default name) trust the IAM
OIDC provider of the management EKS cluster for the providers' ServiceAccounts, and gives it an inline policy of
the four provider services. It runs at the pivot, once the management cluster's EKS cluster and the OIDC provider
CAPA associates with it (``associateOIDCProvider``) exist, before Flux starts the providers there.

Ownership (docs/ownership.md): the role carries ``krops.io/environment=<environment>``. A role of that exact name
without the tag, or tagged for another environment, is not krops': it is refused, never changed. The teardown's
orphan sweep deletes the role by that tag (and only a role of that tag).

The trust policy is the IRSA form (AWS IAM user guide "IAM roles for service accounts", and CAPA
``pkg/cloud/services/eks/oidc.go`` buildOIDCTrustPolicy): ``Federated`` the OIDC provider's ARN,
``sts:AssumeRoleWithWebIdentity``, the audience ``sts.amazonaws.com`` and the subject
``system:serviceaccount:<namespace>:<ServiceAccount>``; Crossplane names each provider's ServiceAccount after its
package revision (``<provider>-<digest>``, crossplane v2.3.4 internal/controller/pkg/runtime/runtime.go), so the
subjects are patterns (``StringLike``).

Importable without Ansible.
"""

from __future__ import annotations

import json
import urllib.parse

from ansible_collections.krops.platform.plugins.module_utils import aws
from ansible_collections.krops.platform.plugins.module_utils.aws import BotoCoreError, ClientError
from ansible_collections.krops.platform.plugins.module_utils.ownership import KROPS_ENV_TAG

POLICY_NAME = "krops-crossplane-providers"
# What the four providers of mgmt/aws-crossplane/crossplane-providers manage: s3, rds, iam, ec2.
PROVIDER_ACTIONS = ("s3:*", "rds:*", "iam:*", "ec2:*")


def trust_policy(provider_arn, namespace, service_accounts):
    """The IRSA trust policy document (a dict) for the ServiceAccount patterns in namespace."""
    host = provider_arn.split(":oidc-provider/", 1)[1]
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Federated": provider_arn},
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": {
                    "StringEquals": {f"{host}:aud": "sts.amazonaws.com"},
                    "StringLike": {
                        f"{host}:sub": [f"system:serviceaccount:{namespace}:{sa}" for sa in service_accounts]
                    },
                },
            }
        ],
    }


def permissions_policy():
    return {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": list(PROVIDER_ACTIONS), "Resource": "*"}],
    }


def _document(value):
    """IAM returns policy documents URL-encoded (boto3 decodes GetRole's, not every emulator does)."""
    if isinstance(value, dict):
        return value
    return json.loads(urllib.parse.unquote(value))


def _fail(what, exc):
    raise aws.AwsError(f"{what}: {aws.error_message(exc)}")


def oidc_provider(connection, region, eks_cluster):
    """(provider ARN, issuer URL) of the EKS cluster's IAM OIDC provider; an AwsError says what is missing."""
    try:
        cluster = aws.call(connection.client("eks", region), "describe_cluster", name=eks_cluster)["cluster"]
    except (ClientError, BotoCoreError) as exc:
        _fail(f"cannot read the EKS cluster {eks_cluster} in {region}", exc)
    issuer = ((cluster.get("identity") or {}).get("oidc") or {}).get("issuer") or ""
    if not issuer.startswith("https://"):
        raise aws.AwsError(f"the EKS cluster {eks_cluster} in {region} reports no OIDC issuer, so IRSA cannot work")
    account = connection.account_id(region)
    arn = "arn:aws:iam::{}:oidc-provider/{}".format(account, issuer.removeprefix("https://"))
    try:
        aws.call(connection.client("iam", region), "get_open_id_connect_provider", OpenIDConnectProviderArn=arn)
    except (ClientError, BotoCoreError) as exc:
        if aws.is_not_found(exc):
            raise aws.AwsError(
                f"the EKS cluster {eks_cluster} has no IAM OIDC provider ({arn}): set associateOIDCProvider: true on "
                "its AWSManagedControlPlane (CAPA creates and tags the provider; feature gate EKSEnableIAM)"
            )
        _fail(f"cannot read the IAM OIDC provider {arn}", exc)
    return arn, issuer


def _owned(iam, name, environment):
    """The role's tags when krops owns it; an AwsError when a role of that name is not krops'."""
    tags = {t["Key"]: t["Value"] for t in aws.paginate(iam, "list_role_tags", "Tags", RoleName=name)}
    if tags.get(KROPS_ENV_TAG) != environment:
        raise aws.AwsError(
            f"the IAM role {name} exists and is not tagged {KROPS_ENV_TAG}={environment} (its tag is "
            f"{tags.get(KROPS_ENV_TAG)!r}): krops changes no role it cannot prove it owns. Delete or rename that role, "
            "or give the pivot another role name (pivot_crossplane_role_name) and the tree's DeploymentRuntimeConfig"
        )
    return tags


def ensure_role(connection, region, eks_cluster, environment, name, namespace, service_accounts, tags, check_mode):
    """Create or bring up to date the IRSA role; returns the result dict (changes lists what was or would be done)."""
    provider_arn, issuer = oidc_provider(connection, region, eks_cluster)
    iam = connection.client("iam", region)
    trust = trust_policy(provider_arn, namespace, service_accounts)
    permissions = permissions_policy()
    wanted_tags = dict(tags or {}, **{KROPS_ENV_TAG: environment})
    result = {"role_name": name, "oidc_provider_arn": provider_arn, "issuer": issuer, "changes": []}
    try:
        role = aws.call(iam, "get_role", RoleName=name)["Role"]
    except ClientError as exc:
        if not aws.is_not_found(exc):
            _fail(f"cannot read the IAM role {name}", exc)
        role = None
    try:
        if role is None:
            result["changes"] = ["create role", "put policy " + POLICY_NAME]
            if not check_mode:
                role = aws.call(
                    iam,
                    "create_role",
                    RoleName=name,
                    AssumeRolePolicyDocument=json.dumps(trust),
                    Description=f"Crossplane providers of krops environment {environment} (IRSA)",
                    Tags=[{"Key": k, "Value": v} for k, v in sorted(wanted_tags.items())],
                )["Role"]
                aws.call(
                    iam,
                    "put_role_policy",
                    RoleName=name,
                    PolicyName=POLICY_NAME,
                    PolicyDocument=json.dumps(permissions),
                )
        else:
            result["changes"] = _update(iam, role, name, environment, trust, permissions, wanted_tags, check_mode)
    except (ClientError, BotoCoreError) as exc:
        _fail(f"cannot write the IAM role {name}", exc)
    result["role_arn"] = (role or {}).get("Arn", "")
    result["changed"] = bool(result["changes"])
    return result


def _update(iam, role, name, environment, trust, permissions, wanted_tags, check_mode):
    tags = _owned(iam, name, environment)
    changes = []
    if _document(role.get("AssumeRolePolicyDocument") or "{}") != trust:
        changes.append("update trust policy")
        if not check_mode:
            aws.call(iam, "update_assume_role_policy", RoleName=name, PolicyDocument=json.dumps(trust))
    try:
        current = _document(aws.call(iam, "get_role_policy", RoleName=name, PolicyName=POLICY_NAME)["PolicyDocument"])
    except ClientError as exc:
        if not aws.is_not_found(exc):
            raise
        current = None
    if current != permissions:
        changes.append("put policy " + POLICY_NAME)
        if not check_mode:
            aws.call(
                iam, "put_role_policy", RoleName=name, PolicyName=POLICY_NAME, PolicyDocument=json.dumps(permissions)
            )
    missing = {k: v for k, v in wanted_tags.items() if tags.get(k) != v}
    if missing:
        changes.append("tag role " + ", ".join(sorted(missing)))
        if not check_mode:
            aws.call(iam, "tag_role", RoleName=name, Tags=[{"Key": k, "Value": v} for k, v in sorted(missing.items())])
    return changes
