# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Bootstrap preflight: every check runs, every problem is collected, nothing is changed.

- tools: every missing binary named at once;
- age key file: well-formed (``# created:``, ``# public key:``, ``AGE-SECRET-KEY-``), its public
  key derived with age-keygen when available, and equal to AGE_PUBLIC_KEY when that is set;
- Git sync: the token can read the repository and the branch exists (GitHub REST API);
- AWS: Elastic IP headroom per region (3 per cluster: one NAT gateway per AZ) against the
  Service Quotas limit, with the request that would raise a short quota;
- versions, not only presence: clusterctl's contract equals the pinned Cluster API release's,
  kind published the pinned node image, helm is recent enough for oci:// charts, and the container
  engine's daemon answers (docs/upstream-facts.md names the source of each table below).

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
from ansible_collections.krops.platform.plugins.module_utils import config as krops_config

EIP_QUOTA_CODE = "L-0263D0A3"  # EC2-VPC Elastic IPs
EIP_DEFAULT_LIMIT = 5
DEFAULT_GITHUB_API = "https://api.github.com"

_BECH32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_AGE_PUBLIC = re.compile(rf"^age1[{_BECH32}]{{58}}$")
_AGE_SECRET = re.compile(rf"^AGE-SECRET-KEY-1[{_BECH32.upper()}]{{58}}$")
_GIT_URL = re.compile(r"^https://(?P<host>[^/\s]+)/(?P<owner>[^/\s]+)/(?P<repo>[^/\s]+?)(?:\.git)?/?$")


# --- tools ---------------------------------------------------------------------------


# The versions meta/tools.yml pins (the execution environment installs exactly these; modules run
# without the collection's meta/ folder, so they are repeated here and test_preflight keeps them equal).
PINNED_TOOLS = {
    "kind": "v0.32.0",
    "kubectl": "v1.35.5",
    "helm": "v3.20.2",
    "clusterctl": "v1.13.5",
    "sops": "v3.13.3",
    "age": "v1.3.2",
}


def check_tools(names, environ=None):
    found, missing = cli.missing_tools(list(dict.fromkeys(names or [])), environ=environ)
    problems = []
    if missing:
        message = "missing tools: {} (install them or put them on PATH; PATH is {})".format(
            ", ".join(missing), (environ or os.environ).get("PATH", "")
        )
        pinned = [name for name in missing if name in PINNED_TOOLS]
        if pinned:
            message += (
                ". krops pins {} (meta/tools.yml); `python scripts/install_tools.py --only {} --dest ~/.local/bin` "
                "in a checkout installs exactly those, each checked against its SHA-256".format(
                    ", ".join(f"{name} {PINNED_TOOLS[name]}" for name in pinned), " ".join(pinned)
                )
            )
        problems.append(message)
    return {"found": found, "missing": missing}, problems


# --- versions -----------------------------------------------------------------------------

# Cluster API release series -> contract (kubernetes-sigs/cluster-api metadata.yaml at each tag:
# v1.10 v1beta1; v1.11, v1.12, v1.13, v1.14 v1beta2).
CAPI_CONTRACTS = {
    (1, 8): "v1beta1",
    (1, 9): "v1beta1",
    (1, 10): "v1beta1",
    (1, 11): "v1beta2",
    (1, 12): "v1beta2",
    (1, 13): "v1beta2",
    (1, 14): "v1beta2",
}
# Node images each kind release was published with (kind's release notes; the same list is in
# cluster-api test/infrastructure/kind/mapper.go @ v1.13.5). kind supports only these exact images.
KIND_NODE_IMAGES = {
    "0.32.0": {
        "kindest/node:v1.36.1": "sha256:3489c7674813ba5d8b1a9977baea8a6e553784dab7b84759d1014dbd78f7ebd5",
        "kindest/node:v1.35.5": "sha256:ce977ae6d65918d0b58a5f8b5e940429c2ce42fa3a5619ec2bbc60b949c0ac95",
        "kindest/node:v1.34.8": "sha256:02722c2dedddcfc00febf5d27fbeb9b7b2c14294c82109ff4a85d89ac9ba3256",
        "kindest/node:v1.33.12": "sha256:3f5c8443c620245e4d355cfe09e96a91ead32ceaa569d3f1ca9edf0cb2fe2ff4",
    },
    "0.31.0": {
        "kindest/node:v1.35.0": "sha256:452d707d4862f52530247495d180205e029056831160e22870e37e3f6c1ac31f",
        "kindest/node:v1.34.3": "sha256:08497ee19eace7b4b5348db5c6a1591d7752b164530a36f855cb0f2bdcbadd48",
        "kindest/node:v1.33.7": "sha256:d26ef333bdb2cbe9862a0f7c3803ecc7b4303d8cea8e814b481b09949d353040",
        "kindest/node:v1.32.11": "sha256:5fc52d52a7b9574015299724bd68f183702956aa4a2116ae75a63cb574b35af8",
        "kindest/node:v1.31.14": "sha256:6f86cf509dbb42767b6e79debc3f2c32e4ee01386f0489b3b2be24b0a55aac2b",
    },
}
# helm.sh docs/topics/registries: OCI support is generally available (on by default) from v3.8.0.
HELM_OCI_MIN = (3, 8, 0)
_SEMVER = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text):
    """(major, minor, patch) of the first version in text, or None."""
    match = _SEMVER.search(text or "")
    return tuple(int(g or 0) for g in match.groups()) if match else None


def _dotted(version):
    return ".".join(str(p) for p in version)


def core_provider_version(paths):
    """(version, problems): spec.version of the CoreProvider in the provider manifests."""
    try:
        import yaml
    except ImportError:  # pragma: no cover - PyYAML ships with ansible-core
        return None, ["the Python library PyYAML is required to read the provider manifests"]
    for path in paths or []:
        try:
            with open(path, encoding="utf-8") as handle:
                docs = [d for d in yaml.safe_load_all(handle) if isinstance(d, dict)]
        except (OSError, yaml.YAMLError) as exc:
            return None, [f"provider manifest {path} cannot be read: {str(exc).splitlines()[0]}"]
        for doc in docs:
            if doc.get("kind") == "CoreProvider":
                version = (doc.get("spec") or {}).get("version")
                if not version:
                    return None, [f"CoreProvider in {path} has no spec.version: pin the Cluster API release"]
                return str(version), []
    return None, [
        "no CoreProvider in the provider manifests ({}): bootstrap.toml provider-manifests must list it".format(
            ", ".join(paths or [])
        )
        or "none"
    ]


def check_clusterctl(capi_version, clusterctl=None):
    """clusterctl implements the contract of the pinned CAPI release (clusterctl refuses other contracts)."""
    facts = {"capi_version": capi_version, "clusterctl_version": None, "contract": None}
    wanted = parse_version(capi_version)
    if not wanted or wanted[:2] not in CAPI_CONTRACTS:
        return facts, [
            "Cluster API version {!r} is not a release krops knows the contract of ({}); pin a supported "
            "release in the CoreProvider manifest".format(
                capi_version, ", ".join("v%d.%d" % k for k in sorted(CAPI_CONTRACTS))
            )
        ]
    contract = CAPI_CONTRACTS[wanted[:2]]
    facts["contract"] = contract
    tool = clusterctl or cli.Cli("clusterctl", version_args=("version", "-o", "short"))
    try:
        result = tool.run(["version", "-o", "short"])
    except cli.CliError as exc:
        return facts, [f"clusterctl version could not be read: {exc}"]
    have = parse_version(result.stdout)
    facts["clusterctl_version"] = _dotted(have) if have else result.stdout.strip()
    if not have or have[:2] not in CAPI_CONTRACTS:
        return facts, [
            f"clusterctl {result.stdout.strip()}: unknown release series, cannot tell its contract; install clusterctl v{_dotted(wanted)}"
        ]
    if CAPI_CONTRACTS[have[:2]] != contract:
        return facts, [
            f"clusterctl v{_dotted(have)} implements contract {CAPI_CONTRACTS[have[:2]]} but Cluster API "
            f"{capi_version} needs {contract}: install clusterctl v{_dotted(wanted)}"
        ]
    return facts, []


def check_kind_image(node_image, kind=None):
    """kind published node_image (tag and digest) with its release; an image from another release is unsupported."""
    facts = {"kind_version": None, "node_image": node_image}
    tool = kind or cli.Cli("kind")
    try:
        version = tool.version()
    except cli.CliError as exc:
        return facts, [f"kind version could not be read: {exc}"]
    facts["kind_version"] = version
    images = KIND_NODE_IMAGES.get(version)
    if images is None:
        return facts, [
            "kind {}: krops does not know which node images it supports (known: kind {}); install kind v{}".format(
                version, ", ".join(sorted(KIND_NODE_IMAGES)), max(KIND_NODE_IMAGES)
            )
        ]
    name, _at, digest = node_image.partition("@")
    if images.get(name) is None or (digest and images[name] != digest):
        return facts, [
            "kind {} was not published with node image {}; use one of its images ({}) in "
            "bootstrap.kind-node-image, with the digest".format(
                version, node_image, ", ".join("{}@{}".format(*item) for item in sorted(images.items()))
            )
        ]
    if not digest:
        return facts, [
            f"node image {node_image} has no digest: kind's release notes require the exact image, {name}@{images[name]}"
        ]
    return facts, []


def check_helm(helm=None, minimum=HELM_OCI_MIN):
    facts = {"helm_version": None}
    tool = helm or cli.Cli("helm", version_args=("version", "--short"))
    try:
        result = tool.run(["version", "--short"])
    except cli.CliError as exc:
        return facts, [f"helm version could not be read: {exc}"]
    have = parse_version(result.stdout)
    facts["helm_version"] = _dotted(have) if have else result.stdout.strip()
    if not have or have < tuple(minimum):
        return facts, [
            "helm {} is too old for oci:// charts (needs v{} or later, where OCI support is generally "
            "available): upgrade helm".format(result.stdout.strip() or "(no version)", _dotted(minimum))
        ]
    return facts, []


def check_engine(engine, tool=None):
    """The container engine's daemon answers (`<engine> info` exits 0), not only its CLI on PATH."""
    facts = {"engine": engine, "daemon": False}
    runner = tool or cli.Cli(engine)
    try:
        result = runner.run(["info", "--format", "{{json .ServerVersion}}"], check=False, timeout=30)
    except cli.CliError as exc:
        return facts, [f"{engine} daemon: {exc}"]
    if result.rc != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        return facts, [
            "{} is installed but its daemon does not answer ({}): start it, or set ENGINE_SOCK/DOCKER_HOST "
            "to its socket".format(engine, detail[-1] if detail else "exit code %d" % result.rc)
        ]
    facts["daemon"] = True
    facts["server_version"] = result.stdout.strip().strip('"')
    return facts, []


# --- age key -------------------------------------------------------------------------


def check_age_key(path, expected_public_key=None, age_keygen=None):
    """Facts {path, public_key, derived} and problems for an age key file."""
    facts = {"path": path, "public_key": None, "derived": False}
    if not path:
        return facts, ["no age key file given: set AGE_KEY_FILE or bootstrap.age-key-file"]
    path = os.path.expanduser(path)
    facts["path"] = path
    if not os.path.isfile(path):
        return facts, [
            f"age key file {path} does not exist: create it with `age-keygen -o {path}` (and keep it out of Git)"
        ]
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        return facts, [f"age key file {path} cannot be read: {exc}"]
    public, secrets, problems = _age_key_lines(path, text)
    if public:
        facts["public_key"] = public[0]
        if not _AGE_PUBLIC.match(public[0]):
            problems.append(
                f"age key file {path}: the public key comment {public[0]!r} is not an age recipient (age1...)"
            )
    if secrets and _AGE_SECRET.match(secrets[0]):
        derived = _derive_public_key(secrets[0], age_keygen)
        if derived:
            facts["derived"] = True
            if facts["public_key"] and facts["public_key"] != derived:
                problems.append(
                    "age key file {}: the public key comment {} does not belong to its secret key "
                    "(which gives {})".format(path, facts["public_key"], derived)
                )
            facts["public_key"] = derived
    if expected_public_key and facts["public_key"] and expected_public_key.strip() != facts["public_key"]:
        problems.append(
            "AGE_PUBLIC_KEY is {} but the key in {} is {}: SOPS files encrypted for AGE_PUBLIC_KEY "
            "could not be decrypted; use the matching key file or fix AGE_PUBLIC_KEY".format(
                expected_public_key.strip(), path, facts["public_key"]
            )
        )
    mode = os.stat(path).st_mode & 0o777
    facts["mode"] = f"{mode:04o}"
    return facts, problems


def _age_key_lines(path, text):
    """The public-key comments, the secret-key lines and the format problems of an age-keygen key file's text."""
    problems = []
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
        problems.append("age key file {} is not an age-keygen key file: it lacks {}".format(path, ", ".join(missing)))
    if secrets and not _AGE_SECRET.match(secrets[0]):
        problems.append(
            f"age key file {path}: the AGE-SECRET-KEY line is malformed (expected AGE-SECRET-KEY-1 and 58 "
            "bech32 characters)"
        )
    return public, secrets, problems


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
    headers = {
        "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": "2022-11-28",
        "Authorization": f"Bearer {token}",
    }
    try:
        with open_url(
            api_url.rstrip("/") + path, headers=headers, timeout=timeout, http_agent="krops-preflight"
        ) as response:
            return response.status, json.loads(response.read().decode("utf-8") or "{}")
    except urllib.error.HTTPError as exc:
        try:
            body = json.loads(exc.read().decode("utf-8") or "{}")
        except (ValueError, UnicodeDecodeError):
            body = {}
        return exc.code, body if isinstance(body, dict) else {}


def check_git(git_url, branch, token, api_url=DEFAULT_GITHUB_API):
    """Facts {repository, branch, commit} and problems for Git sync through GitHub."""
    if krops_config.git_url_has_credentials(git_url):
        # refused before any request, and the URL is not repeated anywhere
        return {"url": None, "repository": None, "branch": branch, "commit": None}, [
            "git_url " + krops_config.GIT_URL_CREDENTIALS
        ]
    facts = {"url": git_url, "repository": None, "branch": branch, "commit": None}
    parsed = parse_git_url(git_url)
    if not parsed:
        return facts, [
            f"git URL {git_url!r} is not https://github.com/<owner>/<repo>: set GIT_REPO_URL or bootstrap.git-url"
        ]
    repository = "{}/{}".format(*parsed)
    facts["repository"] = repository
    if not token:
        return facts, [f"GITHUB_TOKEN is not set: Flux needs a personal access token that can read {repository}"]
    try:
        status, body = _github_get(api_url, f"/repos/{repository}", token)
        if status == 401:
            return facts, [
                "GitHub refused GITHUB_TOKEN (401 {}): it is invalid or expired; create a new token that can "
                "read {}".format(body.get("message", "Bad credentials"), repository)
            ]
        if status == 404:
            return facts, [
                f"repository {repository} was not found with GITHUB_TOKEN: it does not exist or the token cannot read "
                "it (a fine-grained token needs Contents: read on it)"
            ]
        if status != 200:
            return facts, [
                "GitHub answered HTTP %d for repository %s: %s"
                % (status, repository, body.get("message", "no message"))
            ]
        status, body = _github_get(
            api_url, "/repos/{}/branches/{}".format(repository, urllib.parse.quote(branch, safe="")), token
        )
        if status == 404:
            return facts, [
                f"branch {branch} does not exist in {repository}: push it, or set git-branch in bootstrap.toml"
            ]
        if status != 200:
            return facts, [
                "GitHub answered HTTP %d for branch %s of %s: %s"
                % (status, branch, repository, body.get("message", "no message"))
            ]
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return facts, ["cannot reach the GitHub API at {}: {}".format(api_url, getattr(exc, "reason", exc))]
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
                return int(value), "service-quotas {}".format(operation.replace("_", "-"))
        except (aws.ClientError, aws.BotoCoreError, aws.AwsError) as exc:
            if aws.error_code(exc) == "NoSuchResourceException":
                break  # Service Quotas does not know EC2 here: its default would not either
            continue
    try:
        answer = aws.call(
            connection.client("ec2", region), "describe_account_attributes", AttributeNames=["vpc-max-elastic-ips"]
        )
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
            addresses = aws.paginate(
                connection.client("ec2", region),
                "describe_addresses",
                "Addresses",
                Filters=[{"Name": "domain", "Values": ["vpc"]}],
            )
        except (aws.ClientError, aws.BotoCoreError, aws.AwsError) as exc:
            problems.append(
                f"aws {region}: cannot read the Elastic IPs ({aws.error_message(exc)}); check the AWS credentials and region"
            )
            facts.append({"region": region, "clusters": clusters, "error": aws.error_message(exc)})
            continue
        allocated = len(addresses)
        owned = len([a for a in addresses if aws.owned_by(a.get("Tags"), clusters)])
        needed = per_cluster * len(clusters)
        others = allocated - owned
        available = limit - others
        entry = {
            "region": region,
            "clusters": clusters,
            "limit": limit,
            "limit_source": source,
            "allocated": allocated,
            "owned": owned,
            "needed": needed,
            "available": available,
            "short": available < needed,
            "request": None,
        }
        if entry["short"]:
            desired = needed + others
            entry["request"] = (
                "aws service-quotas request-service-quota-increase --service-code ec2 --quota-code %s "
                "--desired-value %d --region %s" % (EIP_QUOTA_CODE, desired, region)
            )
            problems.append(
                "aws %s: %d Elastic IPs needed for %s (%d per cluster, one NAT gateway per AZ) but only %d available "
                "(limit %d, %d allocated, %d of them owned by these clusters); raise the quota: %s"
                % (
                    region,
                    needed,
                    ", ".join(clusters),
                    per_cluster,
                    available,
                    limit,
                    allocated,
                    owned,
                    entry["request"],
                )
            )
        facts.append(entry)
    return facts, problems


# --- all together ----------------------------------------------------------------------------


def run(
    tools=None,
    age_key_file=None,
    age_public_key=None,
    check_age_key_file=False,
    git_url=None,
    git_branch="main",
    github_token=None,
    github_api_url=DEFAULT_GITHUB_API,
    check_git_sync=False,
    eip_checks=None,
    eips_per_cluster=3,
    aws_connection=None,
    environ=None,
    capi_version=None,
    kind_node_image=None,
    helm_oci=False,
    container_engine=None,
):
    """Every requested check; returns {problems: [...], tools, versions, age_key, git, aws_eip}."""
    result = {"problems": []}
    facts, problems = check_tools(tools or [], environ=environ)
    result["tools"] = facts
    result["problems"].extend(problems)
    found = facts["found"]
    versions = {}
    # Each version check needs its tool; a missing one is already reported above.
    for needed, enabled, check in (
        (
            "clusterctl",
            capi_version,
            lambda: check_clusterctl(
                capi_version, cli.Cli("clusterctl", binary=found.get("clusterctl"), environ=environ)
            ),
        ),
        (
            "kind",
            kind_node_image,
            lambda: check_kind_image(kind_node_image, cli.Cli("kind", binary=found.get("kind"), environ=environ)),
        ),
        ("helm", helm_oci, lambda: check_helm(cli.Cli("helm", binary=found.get("helm"), environ=environ))),
        (
            container_engine,
            container_engine,
            lambda: check_engine(
                container_engine, cli.Cli(container_engine, binary=found.get(container_engine), environ=environ)
            ),
        ),
    ):
        if enabled and needed in found:
            facts, problems = check()
            versions[needed] = facts
            result["problems"].extend(problems)
    if versions:
        result["versions"] = versions
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
