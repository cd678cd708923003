# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""IAM rows of the AWS sweep: roles, OIDC providers, the account-global users, customer managed policies.

Roles are owned by their tags (CAPA tags every role it creates, docs/ownership.md) or named exactly by
``global-iam-roles``; a name that only resembles a cluster is a report candidate, never deleted. One
GetAccountAuthorizationDetails walk per discovery (roles, users and customer managed policies together)
gives every role with its tags, attached and inline policies and instance profiles, the named users with
their groups and policies, and the local policies, so deleting a role or user costs only its detach/delete
calls, not a GetUser, ListRoleTags and three listings each. If something was attached meanwhile
(DeleteConflict), the role or user is listed afresh and cleaned once more.
"""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import aws
from ansible_collections.krops.platform.plugins.module_utils.aws import ClientError
from ansible_collections.krops.platform.plugins.module_utils.aws_delete import sweep_row
from ansible_collections.krops.platform.plugins.module_utils.aws_rows import GLOBAL, resource


def _iam(d):
    return d.sweep.conn.client("iam", d.sweep.home_region)


def details(d):
    """{'RoleDetailList', 'UserDetailList', 'Policies': [...]} of the account: one walk per discovery."""

    def walk():
        found = {"RoleDetailList": [], "UserDetailList": [], "Policies": []}
        for page in aws.pages(
            _iam(d), "get_account_authorization_details", Filter=["Role", "User", "LocalManagedPolicy"]
        ):
            for key, items in found.items():
                items.extend(page.get(key) or [])
        return found

    return d.cached("iam-details", walk)


def roles(d, with_age):
    exact = {}
    for target in d.sweep.targets:
        for pattern in d.sweep.global_roles:
            exact[pattern.format(cluster_name=target.cluster)] = target.cluster
    found = []
    for role in details(d)["RoleDetailList"]:
        name = role["RoleName"]
        owner, reason = exact.get(name), "global IAM role named by bootstrap.toml"
        if owner is None:
            owner, reason = d.owner_of(role.get("Tags") or []), ""
        if owner is not None:
            found.append(
                resource(
                    GLOBAL,
                    "iam-role",
                    name,
                    owner,
                    role.get("CreateDate"),
                    reason,
                    attached=[p["PolicyArn"] for p in role.get("AttachedManagedPolicies") or []],
                    inline=[p["PolicyName"] for p in role.get("RolePolicyList") or []],
                    profiles=[p["InstanceProfileName"] for p in role.get("InstanceProfileList") or []],
                )
            )
        elif d.sweep.ownership.candidate(name) is not None:
            d.candidates.append(
                resource(
                    GLOBAL,
                    "iam-role",
                    name,
                    d.sweep.ownership.candidate(name),
                    role.get("CreateDate"),
                    "name resembles a cluster of the environment but no ownership tag proves it: not deleted",
                )
            )
    return found


def _ignore_gone_each(client, operation, key, values, **owner):
    """aws.call_unless_gone once per value, given as ``key`` beside ``owner`` (the role or the user), in order."""
    for value in values:
        aws.call_unless_gone(client, operation, **owner, **{key: value})


def _clean_role(client, name, attached, inline, profiles):
    _ignore_gone_each(client, "detach_role_policy", "PolicyArn", attached, RoleName=name)
    _ignore_gone_each(client, "delete_role_policy", "PolicyName", inline, RoleName=name)
    for profile in profiles:
        aws.call_unless_gone(client, "remove_role_from_instance_profile", RoleName=name, InstanceProfileName=profile)
        aws.call_unless_gone(client, "delete_instance_profile", InstanceProfileName=profile)


def _delete_cleaned(client, operation, clean, **owner):
    """``operation`` (delete_role, delete_user) once ``clean(afresh)`` has removed what IAM requires gone first:
    what the walk gave (afresh False); on a DeleteConflict (IAM refuses while anything is left), everything listed
    afresh (afresh True), then ``operation`` once more."""
    clean(False)
    try:
        aws.call(client, operation, **owner)
    except ClientError as exc:
        if aws.error_code(exc) != "DeleteConflict":
            raise
        clean(True)
        aws.call(client, operation, **owner)


def delete_role(x, res):
    client = x.client("iam", x.sweep.home_region)
    name, meta = res["id"], res["meta"]

    def clean(afresh):
        if not afresh:
            _clean_role(client, name, meta.get("attached") or [], meta.get("inline") or [], meta.get("profiles") or [])
            return
        _clean_role(
            client,
            name,
            [
                p["PolicyArn"]
                for p in aws.paginate(client, "list_attached_role_policies", "AttachedPolicies", RoleName=name)
            ],
            aws.paginate(client, "list_role_policies", "PolicyNames", RoleName=name),
            [
                p["InstanceProfileName"]
                for p in aws.paginate(client, "list_instance_profiles_for_role", "InstanceProfiles", RoleName=name)
            ],
        )

    _delete_cleaned(client, "delete_role", clean, RoleName=name)


def oidc_providers(d, with_age):
    """IAM OIDC providers: CAPA tags the one it creates for an EKS cluster with that cluster's tags."""
    client = _iam(d)
    found = []
    for item in aws.call(client, "list_open_id_connect_providers").get("OpenIDConnectProviderList") or []:
        arn = item["Arn"]
        try:
            info = aws.call(client, "get_open_id_connect_provider", OpenIDConnectProviderArn=arn)
        except ClientError as exc:
            if aws.is_not_found(exc):
                continue
            raise
        owner = d.owner_of(info.get("Tags") or [])
        if owner is not None:
            found.append(resource(GLOBAL, "iam-oidc-provider", arn, owner, info.get("CreateDate")))
    return found


def delete_oidc_provider(x, res):
    aws.call(
        x.client("iam", x.sweep.home_region), "delete_open_id_connect_provider", OpenIDConnectProviderArn=res["id"]
    )


def users(d, with_age):
    listed = {u["UserName"]: u for u in details(d)["UserDetailList"]}
    found = []
    for name in d.sweep.global_users:
        user = listed.get(name)
        if user is None:
            continue
        res = resource(
            GLOBAL,
            "iam-user",
            name,
            "",
            user.get("CreateDate"),
            "account-global IAM user named by bootstrap.toml",
            groups=list(user.get("GroupList") or []),
            attached=[p["PolicyArn"] for p in user.get("AttachedManagedPolicies") or []],
            inline=[p["PolicyName"] for p in user.get("UserPolicyList") or []],
        )
        why = d.sweep.global_kept_reason("iam-user", name)
        if why:
            d.sweep.keep(res, why)
        else:
            found.append(res)
    return found


def _clean_user(client, name, groups, attached, inline):
    _ignore_gone_each(client, "remove_user_from_group", "GroupName", groups, UserName=name)
    _ignore_gone_each(client, "detach_user_policy", "PolicyArn", attached, UserName=name)
    _ignore_gone_each(client, "delete_user_policy", "PolicyName", inline, UserName=name)


def _delete_other_credentials(client, name):
    """The rarer things DeleteUser also requires gone (IAM API reference, DeleteUser): SSH public keys, signing
    certificates and service-specific credentials. Listed only after a DeleteConflict, so a plain user costs no
    calls for them."""
    for ssh in aws.paginate(client, "list_ssh_public_keys", "SSHPublicKeys", UserName=name):
        aws.call(client, "delete_ssh_public_key", UserName=name, SSHPublicKeyId=ssh["SSHPublicKeyId"])
    for cert in aws.paginate(client, "list_signing_certificates", "Certificates", UserName=name):
        aws.call(client, "delete_signing_certificate", UserName=name, CertificateId=cert["CertificateId"])
    try:  # CodeCommit/Keyspaces credentials; an endpoint without the API (moto) can hold none
        creds = aws.call(client, "list_service_specific_credentials", UserName=name).get("ServiceSpecificCredentials")
    except aws.UnsupportedOperation:
        creds = []
    for cred in creds or []:
        aws.call(
            client,
            "delete_service_specific_credential",
            UserName=name,
            ServiceSpecificCredentialId=cred["ServiceSpecificCredentialId"],
        )


def delete_user(x, res):
    """What IAM's DeleteUser requires gone first (IAM API reference, DeleteUser): the login profile, access keys,
    then the groups and policies the walk gave. MFA devices and the rarer credentials are listed only on a
    DeleteConflict (IAM refuses to delete a user that still has one): then they go (_delete_other_credentials)
    and everything is listed afresh."""
    client = x.client("iam", x.sweep.home_region)
    name, meta = res["id"], res["meta"]
    aws.call_unless_gone(client, "delete_login_profile", UserName=name)
    for key in aws.paginate(client, "list_access_keys", "AccessKeyMetadata", UserName=name):
        aws.call(client, "delete_access_key", UserName=name, AccessKeyId=key["AccessKeyId"])

    def clean(afresh):
        if not afresh:
            _clean_user(client, name, meta.get("groups") or [], meta.get("attached") or [], meta.get("inline") or [])
            return
        for device in aws.paginate(client, "list_mfa_devices", "MFADevices", UserName=name):
            aws.call(client, "deactivate_mfa_device", UserName=name, SerialNumber=device["SerialNumber"])
            if device["SerialNumber"].startswith("arn:"):  # a virtual device (an ARN) is the user's own; delete it
                aws.call_unless_gone(client, "delete_virtual_mfa_device", SerialNumber=device["SerialNumber"])
        _delete_other_credentials(client, name)
        _clean_user(
            client,
            name,
            [g["GroupName"] for g in aws.paginate(client, "list_groups_for_user", "Groups", UserName=name)],
            [
                p["PolicyArn"]
                for p in aws.paginate(client, "list_attached_user_policies", "AttachedPolicies", UserName=name)
            ],
            aws.paginate(client, "list_user_policies", "PolicyNames", UserName=name),
        )

    _delete_cleaned(client, "delete_user", clean, UserName=name)


ROLE_ROW = sweep_row("iam-role", GLOBAL, roles, delete_role)
OIDC_ROW = sweep_row("iam-oidc-provider", GLOBAL, oidc_providers, delete_oidc_provider)
USER_ROW = sweep_row("iam-user", GLOBAL, users, delete_user)


def policies(d, with_age):
    """Customer managed policies tagged for the environment (ACK's iam-controller writes the tree's tags on the
    Policies it creates). The Tagging API does not cover IAM, and the authorization-details walk carries no
    policy tags, so each local policy's tags are listed once per sweep: the final pass lists only those of the
    policies discovery did not see (a policy created during the sweep), and takes the others' from discovery
    (a policy ARN names one policy; ACK and CAPA tag at creation). A policy attached to an account-global user
    that stays (another environment names it) stays with it (the walk gives the users' attached policies)."""
    client = _iam(d)
    known = d.sweep.policy_tags
    kept_users = {k["id"] for k in d.sweep.kept if k["type"] == "iam-user"}
    attached_to = {}
    for user in details(d)["UserDetailList"]:
        for policy in user.get("AttachedManagedPolicies") or []:
            attached_to.setdefault(policy["PolicyArn"], set()).add(user["UserName"])
    found = []
    for policy in details(d)["Policies"]:
        arn = policy["Arn"]
        tags = known.get(arn) if d.final else None
        if tags is None:
            tags = known[arn] = aws.paginate(client, "list_policy_tags", "Tags", PolicyArn=arn)
        owner = d.owner_of(tags)
        if owner is None:
            continue
        res = resource(GLOBAL, "iam-policy", arn, owner, policy.get("CreateDate"))
        staying = sorted(attached_to.get(arn, set()) & kept_users)
        if staying:
            d.sweep.keep(res, "attached to the account-global user {}, which stays".format(", ".join(staying)))
        else:
            found.append(res)
    return found


def delete_policy(x, res):
    """Its non-default versions, then the policy. Entities still attached are not ours to change: the
    roles and users of the environment went before (table order), so anything left fails the deletion."""
    client = x.client("iam", x.sweep.home_region)
    arn = res["id"]
    attached = []
    for page in aws.pages(client, "list_entities_for_policy", PolicyArn=arn):
        for key, field in (("PolicyUsers", "UserName"), ("PolicyRoles", "RoleName"), ("PolicyGroups", "GroupName")):
            attached += [e[field] for e in page.get(key) or []]
    if attached:
        raise aws.AwsError(
            "still attached to {}, which this sweep does not delete; detach it or delete them first".format(
                ", ".join(sorted(attached))
            )
        )
    for version in aws.paginate(client, "list_policy_versions", "Versions", PolicyArn=arn):
        if not version.get("IsDefaultVersion"):
            aws.call(client, "delete_policy_version", PolicyArn=arn, VersionId=version["VersionId"])
    aws.call(client, "delete_policy", PolicyArn=arn)


POLICY_ROW = sweep_row("iam-policy", GLOBAL, policies, delete_policy)
ROWS = (ROLE_ROW, OIDC_ROW, USER_ROW, POLICY_ROW)  # in their deletion order (aws_sweep.SERVICES)
