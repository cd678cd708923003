# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The name rules of bootstrap.toml's consumers, as checkers of the loader (module_utils.config_schema's form).

Module options check the same names with the same checkers (module_utils.options). Sources, checked at the
pinned versions (docs/configuration.md): Kubernetes DNS-1123 label/subdomain (k8s.io/apimachinery
validation), kind's cluster name (kind v0.32.0 pkg/internal/apis/config/validate.go and
pkg/cluster/internal/create/create.go), Docker names (moby daemon/names), OCI distribution-spec v1.1,
AWS RDS/EKS/S3/IAM/CloudFormation/STS (AWS API references), Azure resource groups, GCP Compute and IAM.
"""

from __future__ import annotations

import re

from ansible_collections.krops.platform.plugins.module_utils import config_schema as S

REGION = re.compile(r"^[a-z]{2}(?:-[a-z]+)+-\d$")

# Kubernetes (k8s.io/apimachinery/pkg/util/validation: IsDNS1123Label, IsDNS1123Subdomain).
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# kind v0.32.0: validNameRE and clusterNameMax = 50 (the node container appends -control-plane).
KIND_NAME = re.compile(r"^[a-z0-9.-]+$")
KIND_NAME_MAX = 50
# Docker container and network names (moby daemon/names: [a-zA-Z0-9][a-zA-Z0-9_.-]).
_DOCKER_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
# OCI distribution-spec v1.1 spec.md: <name> and <reference> (tag).
_OCI_REPOSITORY = re.compile(r"^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$")
_OCI_TAG = re.compile(r"^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$")
# AWS: EKS CreateCluster name (1-100, alphanumeric start, then alphanumerics, - and _);
# RDS DBInstanceIdentifier (1-63, letter first, no trailing or double hyphen);
# IAM role/user names ([\w+=,.@-], 1-64); CloudFormation stack names (letter, then [-a-zA-Z0-9], 1-128).
_EKS_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")
_RDS_NAME = re.compile(r"^[A-Za-z](?!.*--)[A-Za-z0-9-]{0,62}(?<!-)$")
_IAM_NAME = re.compile(r"^[\w+=,.@-]{1,64}$", re.ASCII)
_CFN_STACK = re.compile(r"^[A-Za-z][-A-Za-z0-9]{0,127}$")
# Azure resource groups (1-90; alphanumerics, _, (, ), -, .; not ending in .). ASCII only here.
_AZURE_RG = re.compile(r"^[-\w.()]{0,89}[-\w()]$", re.ASCII)
# GCP Compute resource names (RFC 1035, 1-63).
_GCP_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_CHART_VERSION = re.compile(r"^v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")
_GIT_REF_BAD = re.compile(r"(\.\.|@\{|//|[\s~^:?*\[\\]|^[-/.]|[/.]$|\.lock$|/\.)")

DNS_LABEL_NAME = S.name_rule(
    DNS_LABEL,
    "a DNS-1123 label: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit",
    63,
    "the rule Kubernetes enforces on this name",
)
DNS_SUBDOMAIN_NAME = S.name_rule(
    DNS_SUBDOMAIN,
    "a DNS-1123 subdomain: at most 253 lowercase letters, digits, '-' and '.'",
    253,
    "the rule Kubernetes enforces on Secret and ConfigMap names",
)
KIND_CLUSTER = S.name_rule(
    KIND_NAME,
    "a kind cluster name: at most %d characters of a-z, 0-9, '.' and '-'" % KIND_NAME_MAX,
    KIND_NAME_MAX,
    "kind's cluster-name rule",
)
DOCKER = S.name_rule(
    _DOCKER_NAME,
    "a Docker name: letters, digits, '_', '.' and '-', starting with a letter or digit",
    128,
    "the rule Docker enforces on container and network names",
)
OCI_REPO = S.name_rule(
    _OCI_REPOSITORY,
    "an OCI repository name such as krops or team/krops (lowercase)",
    255,
    "OCI distribution-spec repository name",
)
OCI_REF = S.name_rule(
    _OCI_TAG,
    "an OCI tag: up to 128 of a-z, A-Z, 0-9, '_', '.', '-', not starting with '.' or '-'",
    128,
    "OCI distribution-spec tag",
)
EKS = S.name_rule(
    _EKS_NAME,
    "an EKS cluster name: up to 100 letters, digits, '-' and '_', starting with a letter or digit",
    100,
    "EKS CreateCluster name rule",
)
RDS = S.name_rule(
    _RDS_NAME,
    "an RDS DB instance identifier: 1 to 63 letters, digits and hyphens, starting with a letter, "
    "without a trailing or double hyphen",
    63,
    "RDS DBInstanceIdentifier rule",
)
IAM = S.name_rule(_IAM_NAME, "an IAM name: 1 to 64 of letters, digits and _+=,.@-", 64, "IAM role and user name rule")
CFN = S.name_rule(
    _CFN_STACK,
    "a CloudFormation stack name: a letter, then letters, digits and '-' (at most 128)",
    128,
    "CloudFormation stack name rule",
)
AZURE_GROUP = S.name_rule(
    _AZURE_RG,
    "an Azure resource group name: 1 to 90 of letters, digits, '_', '(', ')', '-', '.', not ending in '.'",
    90,
    "Azure resource group name rule",
)
GCP_NETWORK = S.name_rule(
    _GCP_NAME,
    "a GCP network name: 1 to 63 lowercase letters, digits and '-', starting with a letter and not ending with '-'",
    63,
    "GCP Compute resource name rule (RFC 1035)",
)
# gcp IAM names (also gcp_teardown's option check, through gcp_iam)
GCP_SERVICE_ACCOUNT_ID = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
GCP_WIF_PROVIDER_NAME = re.compile(r"^(?!gcp-)[a-z0-9-]{4,32}/(?!gcp-)[a-z0-9-]{4,32}$")
GCP_SERVICE_ACCOUNT = S.name_rule(
    GCP_SERVICE_ACCOUNT_ID,
    "a GCP service account id (the part before '@'): 6 to 30 lowercase letters, digits and '-', "
    "starting with a letter and not ending with '-'",
    30,
    "IAM projects.serviceAccounts.create accountId rule",
)
GCP_WIF_PROVIDER = S.name_rule(
    GCP_WIF_PROVIDER_NAME,
    "<pool>/<provider>, e.g. krops/kind: two workload identity IDs of 4 to 32 lowercase letters, digits "
    "and '-', not starting with 'gcp-'",
    65,
    "IAM workloadIdentityPools and providers ID rule",
)
CHART = S.name_rule(_CHART_VERSION, "a chart version such as 1.21.2", 64, "semantic version")
CONTEXT = S.name_rule(re.compile(r"^\S+$"), "a kubeconfig context name without spaces", 253, "kubeconfig context name")
GITHUB_USER = S.name_rule(
    re.compile(r"^[A-Za-z0-9-]+$"), "a GitHub user name (letters, digits, '-')", 39, "GitHub user name rule"
)
AWS_REGION = S.matching(REGION, "an AWS region name such as eu-north-1", limit=32)
FLUX_VERSION = S.matching(re.compile(r"^\d+\.\d+\.(x|\d+)$"), 'a Flux version such as "2.9.x"')
MOVE_RESOURCE = S.matching(
    re.compile(r"^[a-z0-9-]+(\.[a-z0-9-]+)+$"),
    "a resource.group such as awsclustercontrolleridentities.infrastructure.cluster.x-k8s.io",
    limit=253,
)
PROVIDER_REF = S.matching(re.compile(r"^[A-Za-z]+Provider/[a-z0-9]([-a-z0-9]*[a-z0-9])?$"), "<Kind>Provider/<name>")
# A container image reference: [registry[:port]/]path[:tag][@sha256:digest].
_IMAGE_REF = re.compile(
    r"^(?:[a-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9][a-z0-9._/-]*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?\Z"
)
IMAGE = S.matching(_IMAGE_REF, "an image reference such as kindest/node:v1.35.5@sha256:<digest>", limit=512)


def git_ref(value, ctx, key):
    """The git-branch rule (the loader's bootstrap.git-branch, flux_handoff sync_ref, preflight git_branch)."""
    S.plain(value, ctx, key, "a git branch name", limit=255)
    if _GIT_REF_BAD.search(value):
        ctx.fail(
            key,
            "a git branch name (no spaces, '..', '~^:?*[\\', '@{', no leading '-', '/' or '.', no trailing "
            "'/', '.' or '.lock'; see git check-ref-format)",
            value,
        )
    return value


GIT_URL_FORM = S.matching(
    re.compile(r"^(https|ssh)://[!-~]+$"), "an https:// or ssh:// URL (ASCII, no spaces)", limit=2048
)

# Why a Git URL with credentials is refused, for every place that takes one (never echo the URL).
GIT_URL_CREDENTIALS = (
    "carries a user name or token before '@' (not shown here); remove it and give the token as GITHUB_TOKEN "
    "(the Flux sync secret and the preflight check read it from there)"
)


def git_url_has_credentials(url):
    """True when a Git URL carries a secret: any password, or any https user (ssh://git@host names the SSH user)."""
    if not isinstance(url, str):
        return False
    scheme, _sep, rest = url.partition("://")
    userinfo = rest.split("/", 1)[0].rpartition("@")[0]
    return ":" in userinfo or bool(userinfo and scheme != "ssh")


def git_url(value, ctx, key):
    """An https:// or ssh:// URL that carries no credentials (they would be printed and stored in Flux objects)."""
    if git_url_has_credentials(value):
        ctx.fail(key, "a Git URL without credentials", detail="the URL " + GIT_URL_CREDENTIALS)
    return GIT_URL_FORM(value, ctx, key)


def s3_bucket(value, ctx, key):
    """S3 general purpose bucket naming rules (docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html)."""
    problems = []
    if not 3 <= len(value) <= 63:
        problems.append("3 to 63 characters")
    if not re.match(r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$", value):
        problems.append("only a-z, 0-9, '.' and '-', starting and ending with a letter or digit")
    if ".." in value:
        problems.append("no two adjacent periods")
    if re.match(r"^\d+\.\d+\.\d+\.\d+$", value):
        problems.append("not an IP address")
    if value.startswith(("xn--", "sthree-", "amzn-s3-demo-")) or value.endswith(
        ("-s3alias", "--ol-s3", ".mrap", "--x-s3")
    ):
        problems.append(
            "no reserved prefix (xn--, sthree-, amzn-s3-demo-) or suffix (-s3alias, --ol-s3, .mrap, --x-s3)"
        )
    if problems:
        ctx.fail(key, "an S3 bucket name: " + "; ".join(problems), value)
    return value


# The longest names the patterns are rendered with: an AWS account id is 12 digits; cluster
# names are DNS-1123 labels, checked again with every real workload name after load.
SAMPLE = {"account_id": "123456789012", "cluster_name": "c"}
S3_BUCKET_PATTERN = S.pattern(("account_id", "cluster_name"), s3_bucket, SAMPLE)
IAM_ROLE_PATTERN = S.pattern(("cluster_name",), IAM, {"cluster_name": "c"})


# --- AWS accounts ([[environments.<env>.accounts]]) -----------------------------------
# STS AssumeRole's request shapes (botocore data sts/2011-06-15 service-2.json, docs/upstream-facts.md):
# RoleSessionName 2-64 of [\w+=,.@-]; ExternalId 2-1224 of [\w+=,.@:/-]; DurationSeconds 900-43200.
# IAM (iam/2010-05-08): role names 1-64 of [\w+=,.@-], paths "/" or "/.../" of 1-512 printable ASCII.
_ACCOUNT_ID = re.compile(r"^\d{12}$", re.ASCII)
_ROLE_ARN = re.compile(r"^arn:(aws(?:-[a-z]+)*):iam::(\d{12}):role(/(?:[\x21-\x7e]*/)?)?([\w+=,.@-]{1,64})$", re.ASCII)
_ROLE_NAME = re.compile(r"^(/(?:[\x21-\x7e]*/)?)?[\w+=,.@-]{1,64}$", re.ASCII)
_SESSION_NAME = re.compile(r"^[\w+=,.@-]{2,64}$", re.ASCII)
_EXTERNAL_ID = re.compile(r"^[\w+=,.@:/-]{2,1224}$", re.ASCII)
ROLE_SESSION_DURATION = (900, 43200)
EXTERNAL_ID = S.matching(_EXTERNAL_ID, "an STS external ID: 2 to 1224 of letters, digits and _+=,.@:/-", 1224)
SESSION_NAME = S.matching(_SESSION_NAME, "an STS role session name: 2 to 64 of letters, digits and _+=,.@-", 64)


def account_id(value, ctx, key):
    if not isinstance(value, str) or not _ACCOUNT_ID.match(value):
        ctx.fail(key, 'a 12-digit AWS account ID as a string such as "123456789012"', value)
    return value


def role_arn(value, ctx, key):
    S.plain(value, ctx, key, "an IAM role ARN", limit=2048)
    if not _ROLE_ARN.match(value):
        ctx.fail(key, "an IAM role ARN such as arn:aws:iam::123456789012:role/krops-teardown", value)
    return value


def role_name(value, ctx, key):
    S.plain(value, ctx, key, "an IAM role name", limit=576)
    if not _ROLE_NAME.match(value):
        ctx.fail(
            key,
            "an IAM role name (1 to 64 of letters, digits and _+=,.@-, optionally after a path such as /krops/)",
            value,
        )
    return value


def role_duration(value, ctx, key):
    low, high = ROLE_SESSION_DURATION
    seconds = S.parse_duration(value)
    if seconds is None or not low <= seconds <= high:
        ctx.fail(
            key,
            'an STS role session duration from 900s to 43200s (15m to 12h) such as "1h" (AssumeRole DurationSeconds)',
            value,
        )
    return seconds


def accounts(fields):
    """[[accounts]] of ``fields``: distinct account ids, each with exactly one of role-arn and role-name; the
    account of a role ARN is the account-id given. The role ARN is completed from role-name (partition aws)."""
    rule = S.distinct_by("account-id", S.table_list(fields, limit=S.MAX_ITEMS))

    def check(value, ctx, key):
        tables = rule(value, ctx, key)
        for index, account in enumerate(tables):
            where = "%s[%d]" % (key, index)
            if bool(account["role-arn"]) == bool(account["role-name"]):
                ctx.fail(
                    f"{where}.role-arn",
                    "exactly one of role-arn and role-name (the IAM role krops assumes in account {})".format(
                        account["account-id"]
                    ),
                    detail="both are given" if account["role-arn"] else "neither is given",
                )
            for field in ("role-arn", "ack-role-arn"):
                in_arn = _ROLE_ARN.match(account[field]).group(2) if account[field] else account["account-id"]
                if in_arn != account["account-id"]:
                    ctx.fail(
                        f"{where}.{field}",
                        "a role of account {} (the account-id of this table)".format(account["account-id"]),
                        account[field],
                        detail=f"the ARN names account {in_arn}; fix {field} or account-id",
                    )
            if not account["role-arn"]:
                name = account["role-name"]
                path, base = (name.rsplit("/", 1)[0] + "/", name.rsplit("/", 1)[1]) if "/" in name else ("/", name)
                account["role-arn"] = "arn:aws:iam::{}:role{}{}".format(account["account-id"], path, base)
        return tables

    return check
