# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Bootstrap preflight: every check runs, every problem is collected, nothing is changed.

- tools: every missing binary named at once;
- age key file: well-formed (``# created:``, ``# public key:``, ``AGE-SECRET-KEY-``), its public
  key derived with age-keygen when available, and equal to AGE_PUBLIC_KEY when that is set;
- Git sync: the token can read the repository and the branch exists (GitHub REST API);
- AWS: Elastic IP headroom per region (3 per cluster: one NAT gateway per AZ) against the
  Service Quotas limit, with the request that would raise a short quota.

Each check returns (facts, problems). Importable without Ansible; boto3 only for the AWS check.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.parse

from ansible.module_utils.urls import open_url

from ansible_collections.krops.platform.plugins.module_utils import aws, cli

EIP_QUOTA_CODE = "L-0263D0A3"  # EC2-VPC Elastic IPs
EIP_DEFAULT_LIMIT = 5
DEFAULT_GITHUB_API = "https://api.github.com"

_BECH32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_AGE_PUBLIC = re.compile(r"^age1[%s]{58}$" % _BECH32)
_AGE_SECRET = re.compile(r"^AGE-SECRET-KEY-1[%s]{58}$" % _BECH32.upper())
_GIT_URL = re.compile(r"^https://(?P<host>[^/\s]+)/(?P<owner>[^/\s]+)/(?P<repo>[^/\s]+?)(?:\.git)?/?$")


# --- tools ---------------------------------------------------------------------------

def check_tools(names, environ=None):
    found, missing = cli.missing_tools(list(dict.fromkeys(names or [])), environ=environ)
    problems = []
    if missing:
        problems.append("missing tools: %s (install them or put them on PATH; PATH is %s)"
                        % (", ".join(missing), (environ or os.environ).get("PATH", "")))
    return {"found": found, "missing": missing}, problems


# --- age key -------------------------------------------------------------------------

def check_age_key(path, expected_public_key=None, age_keygen=None):
    """Facts {path, public_key, derived} and problems for an age key file."""
    facts = {"path": path, "public_key": None, "derived": False}
    problems = []
    if not path:
        return facts, ["no age key file given: set AGE_KEY_FILE or bootstrap.age-key-file"]
    path = os.path.expanduser(path)
    facts["path"] = path
    if not os.path.isfile(path):
        return facts, ["age key file %s does not exist: create it with `age-keygen -o %s` (and keep it out of Git)"
                       % (path, path)]
    try:
        with open(path, "r", encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        return facts, ["age key file %s cannot be read: %s" % (path, exc)]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    created = [line for line in lines if line.startswith("# created:")]
    public = [line.split(":", 1)[1].strip() for line in lines if line.startswith("# public key:")]
    secrets = [line for line in lines if line.startswith("AGE-SECRET-KEY-")]
    missing = []
    if not created:
        missing.append("a '# created:' line")
    if not public:
        missing.append("a '# public key: age1...' line")
    if not secrets:
        missing.append("an 'AGE-SECRET-KEY-1...' line")
    if missing:
        problems.append("age key file %s is not an age-keygen key file: it lacks %s" % (path, ", ".join(missing)))
    if secrets and not _AGE_SECRET.match(secrets[0]):
        problems.append("age key file %s: the AGE-SECRET-KEY line is malformed (expected AGE-SECRET-KEY-1 and 58 "
                        "bech32 characters)" % path)
    if public:
        facts["public_key"] = public[0]
        if not _AGE_PUBLIC.match(public[0]):
            problems.append("age key file %s: the public key comment %r is not an age recipient (age1...)" % (path, public[0]))
    if secrets and _AGE_SECRET.match(secrets[0]):
        derived = _derive_public_key(secrets[0], age_keygen)
        if derived:
            facts["derived"] = True
            if facts["public_key"] and facts["public_key"] != derived:
                problems.append("age key file %s: the public key comment %s does not belong to its secret key "
                                "(which gives %s)" % (path, facts["public_key"], derived))
            facts["public_key"] = derived
    if expected_public_key and facts["public_key"] and expected_public_key.strip() != facts["public_key"]:
        problems.append("AGE_PUBLIC_KEY is %s but the key in %s is %s: SOPS files encrypted for AGE_PUBLIC_KEY "
                        "could not be decrypted; use the matching key file or fix AGE_PUBLIC_KEY"
                        % (expected_public_key.strip(), path, facts["public_key"]))
    mode = os.stat(path).st_mode & 0o777
    facts["mode"] = "%04o" % mode
    return facts, problems


def _derive_public_key(secret_line, age_keygen=None):
    """The recipient of a secret key via `age-keygen -y` (key on stdin), or None when unavailable."""
    try:
        tool = age_keygen or cli.Cli("age-keygen")
        result = tool.run(["-y"], stdin=secret_line + "\n", redact=[secret_line])
    except cli.CliError:
        return None
    derived = result.stdout.strip()
    return derived if _AGE_PUBLIC.match(derived) else None


# --- Git sync (GitHub REST API) --------------------------------------------------------

def parse_git_url(url):
    match = _GIT_URL.match(url or "")
    if not match:
        return None
    return match.group("owner"), match.group("repo")


def _github_get(api_url, path, token, timeout=20):
    headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28",
               "Authorization": "Bearer %s" % token}
    try:
        with open_url(api_url.rstrip("/") + path, headers=headers, timeout=timeout, http_agent="krops-preflight") as response:
            return response.status, json.loads(response.read().decode("utf-8") or "{}")
    except urllib.error.HTTPError as exc:
        try:
            body = json.loads(exc.read().decode("utf-8") or "{}")
        except (ValueError, UnicodeDecodeError):
            body = {}
        return exc.code, body if isinstance(body, dict) else {}


def check_git(git_url, branch, token, api_url=DEFAULT_GITHUB_API):
    """Facts {repository, branch, commit} and problems for Git sync through GitHub."""
    facts = {"url": git_url, "repository": None, "branch": branch, "commit": None}
    parsed = parse_git_url(git_url)
    if not parsed:
        return facts, ["git URL %r is not https://github.com/<owner>/<repo>: set GIT_REPO_URL or bootstrap.git-url"
                       % git_url]
    repository = "%s/%s" % parsed
    facts["repository"] = repository
    if not token:
        return facts, ["GITHUB_TOKEN is not set: Flux needs a personal access token that can read %s" % repository]
    try:
        status, body = _github_get(api_url, "/repos/%s" % repository, token)
        if status == 401:
            return facts, ["GitHub refused GITHUB_TOKEN (401 %s): it is invalid or expired; create a new token that can "
                           "read %s" % (body.get("message", "Bad credentials"), repository)]
        if status == 404:
            return facts, ["repository %s was not found with GITHUB_TOKEN: it does not exist or the token cannot read "
                           "it (a fine-grained token needs Contents: read on it)" % repository]
        if status != 200:
            return facts, ["GitHub answered HTTP %d for repository %s: %s"
                           % (status, repository, body.get("message", "no message"))]
        status, body = _github_get(api_url, "/repos/%s/branches/%s" % (repository, urllib.parse.quote(branch, safe="")),
                                   token)
        if status == 404:
            return facts, ["branch %s does not exist in %s: push it, or set git-branch in bootstrap.toml"
                           % (branch, repository)]
        if status != 200:
            return facts, ["GitHub answered HTTP %d for branch %s of %s: %s"
                           % (status, branch, repository, body.get("message", "no message"))]
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return facts, ["cannot reach the GitHub API at %s: %s" % (api_url, getattr(exc, "reason", exc))]
    facts["commit"] = (body.get("commit") or {}).get("sha")
    return facts, []


# --- AWS Elastic IP quota ------------------------------------------------------------------

def eip_limit(connection, region):
    """(limit, source): Service Quotas (applied, then default), then the EC2 account attribute."""
    quotas = connection.client("service-quotas", region)
    for operation in ("get_service_quota", "get_aws_default_service_quota"):
        try:
            answer = aws.call(quotas, operation, ServiceCode="ec2", QuotaCode=EIP_QUOTA_CODE)
            value = (answer.get("Quota") or {}).get("Value")
            if value is not None:
                return int(value), "service-quotas %s" % operation.replace("_", "-")
        except (aws.ClientError, aws.BotoCoreError, aws.AwsError) as exc:
            if aws.error_code(exc) == "NoSuchResourceException":
                break  # Service Quotas does not know EC2 here: its default would not either
            continue
    try:
        answer = aws.call(connection.client("ec2", region), "describe_account_attributes",
                          AttributeNames=["vpc-max-elastic-ips"])
        for attribute in answer.get("AccountAttributes") or []:
            for value in attribute.get("AttributeValues") or []:
                return int(value["AttributeValue"]), "ec2 account attribute vpc-max-elastic-ips"
    except (aws.ClientError, aws.BotoCoreError, aws.AwsError, KeyError, ValueError):
        pass
    return EIP_DEFAULT_LIMIT, "AWS default (no quota readable)"


def check_eip_quota(connection, checks, per_cluster=3):
    """Per region: limit, allocated, owned (by the listed clusters), needed, available, short, request."""
    facts, problems = [], []
    merged = {}
    for check in checks or []:  # several entries for one region add up
        clusters = merged.setdefault(check["region"], [])
        clusters.extend(c for c in check.get("clusters") or [] if c not in clusters)
    for region, clusters in merged.items():
        try:
            limit, source = eip_limit(connection, region)
            addresses = aws.paginate(connection.client("ec2", region), "describe_addresses", "Addresses",
                                     Filters=[{"Name": "domain", "Values": ["vpc"]}])
        except (aws.ClientError, aws.BotoCoreError, aws.AwsError) as exc:
            problems.append("aws %s: cannot read the Elastic IPs (%s); check the AWS credentials and region"
                            % (region, aws.error_message(exc)))
            facts.append({"region": region, "clusters": clusters, "error": aws.error_message(exc)})
            continue
        allocated = len(addresses)
        owned = len([a for a in addresses if aws.owned_by(a.get("Tags"), clusters)])
        needed = per_cluster * len(clusters)
        others = allocated - owned
        available = limit - others
        entry = {"region": region, "clusters": clusters, "limit": limit, "limit_source": source,
                 "allocated": allocated, "owned": owned, "needed": needed, "available": available,
                 "short": available < needed, "request": None}
        if entry["short"]:
            desired = needed + others
            entry["request"] = ("aws service-quotas request-service-quota-increase --service-code ec2 --quota-code %s "
                                "--desired-value %d --region %s" % (EIP_QUOTA_CODE, desired, region))
            problems.append(
                "aws %s: %d Elastic IPs needed for %s (%d per cluster, one NAT gateway per AZ) but only %d available "
                "(limit %d, %d allocated, %d of them owned by these clusters); raise the quota: %s"
                % (region, needed, ", ".join(clusters), per_cluster, available, limit, allocated, owned, entry["request"]))
        facts.append(entry)
    return facts, problems


# --- all together ----------------------------------------------------------------------------

def run(tools=None, age_key_file=None, age_public_key=None, check_age_key_file=False, git_url=None, git_branch="main",
        github_token=None, github_api_url=DEFAULT_GITHUB_API, check_git_sync=False, eip_checks=None, eips_per_cluster=3,
        aws_connection=None, environ=None):
    """Every requested check; returns {problems: [...], tools, age_key, git, aws_eip}."""
    result = {"problems": []}
    facts, problems = check_tools(tools or [], environ=environ)
    result["tools"] = facts
    result["problems"].extend(problems)
    if check_age_key_file:
        facts, problems = check_age_key(age_key_file, age_public_key)
        result["age_key"] = facts
        result["problems"].extend(problems)
    if check_git_sync:
        facts, problems = check_git(git_url, git_branch, github_token, github_api_url)
        result["git"] = facts
        result["problems"].extend(problems)
    if eip_checks:
        if aws_connection is None:
            result["problems"].append("aws: no AWS connection for the Elastic IP check")
        else:
            facts, problems = check_eip_quota(aws_connection, eip_checks, eips_per_cluster)
            result["aws_eip"] = facts
            result["problems"].extend(problems)
    return result
