# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Typed loader for bootstrap.toml, the repository-owned lifecycle configuration.

Every module, plugin and role reads bootstrap.toml through :func:`load`, once per
process (the result is cached by file content and overrides). The loader is strict:
an unknown key, a wrong type, a bad duration, a name its consumer would refuse (a
Kubernetes object, a kind cluster, an AWS resource), a path that leaves the repository
or a missing or unknown environment raises :class:`ConfigKeyError` (an errors.ConfigError) whose
message names the file, the key path, what was expected and the valid environment names. It never lets a
traceback reach the user for bad input, and never accepts a value that fails later.

The result is plain data (dicts, lists, str, int, bool) so it can travel through
Ansible unchanged. Durations are normalised to whole seconds. Each environment gets
``platform`` (the bootstrap.toml key ``kind`` or ``platform``; ``kind`` is kept in the
data for older readers) whose capabilities module_utils.profiles describes.

Name rules and their sources (checked at the pinned versions; docs/configuration.md):
Kubernetes DNS-1123 label/subdomain (k8s.io/apimachinery validation), kind's cluster
name (kind v0.32.0 pkg/internal/apis/config/validate.go and
pkg/cluster/internal/create/create.go), AWS RDS/EKS/S3/IAM (AWS API references).
"""

from __future__ import annotations

import copy
import hashlib
import os
import re
import string

try:
    import tomllib
except ImportError:  # pragma: no cover - Python < 3.11 is not a supported controller
    tomllib = None

from ansible_collections.krops.platform.plugins.module_utils import contract
from ansible_collections.krops.platform.plugins.module_utils import errors
from ansible_collections.krops.platform.plugins.module_utils.errors import ConfigError  # noqa: F401  # pylint: disable=unused-import  # config.ConfigError: the area error, as airgap.py and the tests catch it
from ansible_collections.krops.platform.plugins.module_utils import profiles

DEFAULT_FILE = "bootstrap.toml"

SYNC_KINDS = ("git", "oci")
POST_KIND_CREATE_HOOKS = ("arc-federate", "wif-federate")

# The one default of each timeout that is not a bootstrap.toml key (module options fall back to these).
TIMEOUTS = {
    "wait": 900,  # each chart and provider Ready (capi_pivot wait_timeout)
    "node": 900,  # the management cluster's nodes Ready (capi_pivot node_timeout)
    "move": 3600,  # clusterctl move (capi_pivot move_timeout)
    "progress_interval": 30,  # seconds between progress lines of the stepped waits
    "request": 30,  # one Kubernetes API request (module_utils.kube)
}

# Limits that keep a hostile or broken file from exhausting the process.
MAX_FILE_BYTES = 1 << 20
MAX_STRING = 1024
MAX_TEXT = 65536
MAX_ITEMS = 256
MAX_TIMEOUT = 7 * 24 * 3600
MAX_TTL = 366 * 24 * 3600

_DURATION = re.compile(r"^(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?$")
_DIGITS = re.compile(r"^[0-9]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_VAR_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,127}$")
_REGION = re.compile(r"^[a-z]{2}(?:-[a-z]+)+-\d$")

# Kubernetes (k8s.io/apimachinery/pkg/util/validation: IsDNS1123Label, IsDNS1123Subdomain).
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# kind v0.32.0: validNameRE and clusterNameMax = 50 (the node container appends -control-plane).
_KIND_NAME = re.compile(r"^[a-z0-9.-]+$")
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


class ConfigKeyError(errors.ConfigError):
    """bootstrap.toml (or an override) does not describe a valid configuration: ``key`` of ``path``
    is not what was ``expected``."""

    def __init__(self, path, key, expected, got=None, environments=None, detail=None):
        self.path = path
        self.key = key
        self.expected = expected
        self.got = got
        self.environments = list(environments or [])
        parts = ["{}: {}: expected {}".format(path, key or "(top level)", expected)]
        if got is not None:
            parts.append(f", got {contract.describe(got)}")
        if detail:
            parts.append(f"; {detail}")
        if self.environments:
            parts.append(" (valid environments: {})".format(", ".join(self.environments)))
        super().__init__("".join(parts))


def parse_duration(value):
    """Return whole seconds for '40m', '2h', '90s', '1h30m', 90 or '90'; None when invalid."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if not isinstance(value, str) or len(value) > 64:
        return None
    text = value.strip()
    if _DIGITS.match(text):  # ASCII digits only: "²".isdigit() is true but int("²") fails
        seconds = int(text)
        return seconds if seconds > 0 else None
    match = _DURATION.match(text)
    if not text or not match:
        return None
    hours, minutes, secs = (int(g) if g else 0 for g in match.groups())
    seconds = hours * 3600 + minutes * 60 + secs
    return seconds if seconds > 0 else None


# --- field types -------------------------------------------------------------------
# Each checker takes (value, ctx, key) and returns the normalised value or raises.


class _Ctx:
    def __init__(self, path, environments, root=None):
        self.path = path
        self.environments = environments
        self.root = root

    def fail(self, key, expected, got=None, detail=None):
        raise ConfigKeyError(self.path, key, expected, got, self.environments, detail)


def _plain(value, ctx, key, what="a non-empty string", limit=MAX_STRING):
    """A non-empty single-line string of at most ``limit`` characters."""
    if not isinstance(value, str) or not value.strip():
        ctx.fail(key, what, value)
    if len(value) > limit:
        ctx.fail(key, "%s of at most %d characters" % (what, limit), value)
    if _CONTROL.search(value):
        ctx.fail(key, f"{what} without control characters (NUL, newline, tab...)", value)
    return value


def _string(value, ctx, key):
    return _plain(value, ctx, key)


def _optional(checker):
    """checker, but the empty string means "not set"."""

    def check(value, ctx, key):
        if value == "":
            return value
        return checker(value, ctx, key)

    return check


def _name(pattern, what, limit, source):
    """A name its consumer enforces ``pattern`` and ``limit`` on; the message cites the rule."""

    def check(value, ctx, key):
        _plain(value, ctx, key, what, limit=max(limit, 1))
        if len(value) > limit or not pattern.match(value):
            ctx.fail(key, f"{what} ({source})", value)
        return value

    return check


_DNS_LABEL_NAME = _name(
    _DNS_LABEL,
    "a DNS-1123 label: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit",
    63,
    "the rule Kubernetes enforces on this name",
)
_DNS_SUBDOMAIN_NAME = _name(
    _DNS_SUBDOMAIN,
    "a DNS-1123 subdomain: at most 253 lowercase letters, digits, '-' and '.'",
    253,
    "the rule Kubernetes enforces on Secret and ConfigMap names",
)
_KIND_CLUSTER = _name(
    _KIND_NAME,
    "a kind cluster name: at most %d characters of a-z, 0-9, '.' and '-'" % KIND_NAME_MAX,
    KIND_NAME_MAX,
    "kind's cluster-name rule",
)
_DOCKER = _name(
    _DOCKER_NAME,
    "a Docker name: letters, digits, '_', '.' and '-', starting with a letter or digit",
    128,
    "the rule Docker enforces on container and network names",
)
_OCI_REPO = _name(
    _OCI_REPOSITORY,
    "an OCI repository name such as krops or team/krops (lowercase)",
    255,
    "OCI distribution-spec repository name",
)
_OCI_REF = _name(
    _OCI_TAG,
    "an OCI tag: up to 128 of a-z, A-Z, 0-9, '_', '.', '-', not starting with '.' or '-'",
    128,
    "OCI distribution-spec tag",
)
_EKS = _name(
    _EKS_NAME,
    "an EKS cluster name: up to 100 letters, digits, '-' and '_', starting with a letter or digit",
    100,
    "EKS CreateCluster name rule",
)
_RDS = _name(
    _RDS_NAME,
    "an RDS DB instance identifier: 1 to 63 letters, digits and hyphens, starting with a letter, "
    "without a trailing or double hyphen",
    63,
    "RDS DBInstanceIdentifier rule",
)
_IAM = _name(_IAM_NAME, "an IAM name: 1 to 64 of letters, digits and _+=,.@-", 64, "IAM role and user name rule")
_CFN = _name(
    _CFN_STACK,
    "a CloudFormation stack name: a letter, then letters, digits and '-' (at most 128)",
    128,
    "CloudFormation stack name rule",
)
_AZURE_GROUP = _name(
    _AZURE_RG,
    "an Azure resource group name: 1 to 90 of letters, digits, '_', '(', ')', '-', '.', not ending in '.'",
    90,
    "Azure resource group name rule",
)
_GCP_NETWORK = _name(
    _GCP_NAME,
    "a GCP network name: 1 to 63 lowercase letters, digits and '-', starting with a letter and not ending with '-'",
    63,
    "GCP Compute resource name rule (RFC 1035)",
)
# gcp IAM names (also gcp_teardown's option check, through cloud_teardown)
GCP_SERVICE_ACCOUNT_ID = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
GCP_WIF_PROVIDER_NAME = re.compile(r"^(?!gcp-)[a-z0-9-]{4,32}/(?!gcp-)[a-z0-9-]{4,32}$")
_GCP_SERVICE_ACCOUNT = _name(
    GCP_SERVICE_ACCOUNT_ID,
    "a GCP service account id (the part before '@'): 6 to 30 lowercase letters, digits and '-', "
    "starting with a letter and not ending with '-'",
    30,
    "IAM projects.serviceAccounts.create accountId rule",
)
_GCP_WIF_PROVIDER = _name(
    GCP_WIF_PROVIDER_NAME,
    "<pool>/<provider>, e.g. krops/kind: two workload identity IDs of 4 to 32 lowercase letters, digits "
    "and '-', not starting with 'gcp-'",
    65,
    "IAM workloadIdentityPools and providers ID rule",
)
_CHART = _name(_CHART_VERSION, "a chart version such as 1.21.2", 64, "semantic version")
_CONTEXT = _name(re.compile(r"^\S+$"), "a kubeconfig context name without spaces", 253, "kubeconfig context name")


def git_ref(value, ctx, key):
    """The git-branch rule (the loader's bootstrap.git-branch, flux_handoff sync_ref, preflight git_branch)."""
    return _git_ref(value, ctx, key)


def _git_ref(value, ctx, key):
    _plain(value, ctx, key, "a git branch name", limit=255)
    if _GIT_REF_BAD.search(value):
        ctx.fail(
            key,
            "a git branch name (no spaces, '..', '~^:?*[\\', '@{', no leading '-', '/' or '.', no trailing "
            "'/', '.' or '.lock'; see git check-ref-format)",
            value,
        )
    return value


def _integer(low, high):
    def check(value, ctx, key):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            ctx.fail(key, "an integer from %d to %d" % (low, high), value)
        return value

    return check


def _boolean(value, ctx, key):
    if not isinstance(value, bool):
        ctx.fail(key, "true or false", value)
    return value


def _duration_in(high):
    def check(value, ctx, key):
        seconds = parse_duration(value)
        if seconds is None:
            ctx.fail(key, 'a positive duration such as "40m", "2h", "90s" or bare seconds', value)
        if seconds > high:
            ctx.fail(key, "a duration of at most %ds (%dh)" % (high, high // 3600), value)
        return seconds

    return check


_duration = _duration_in(MAX_TIMEOUT)


def _ttl(value, ctx, key):
    """'none' or a positive duration; kept as written (flux computes the expiry from it)."""
    if value == "none":
        return value
    if not isinstance(value, str) or parse_duration(value) is None or _DIGITS.match(value.strip()):
        ctx.fail(key, 'a duration such as "24h" or "none"', value)
    if parse_duration(value) > MAX_TTL:
        ctx.fail(key, 'a duration of at most %dh, or "none"' % (MAX_TTL // 3600), value)
    return value


def _choice(*choices):
    def check(value, ctx, key):
        if not isinstance(value, str) or value not in choices:
            ctx.fail(key, "one of {}".format(", ".join(c or '""' for c in choices)), value)
        return value

    return check


def _matching(pattern, what, limit=MAX_STRING):
    def check(value, ctx, key):
        if not isinstance(value, str) or len(value) > limit or not pattern.match(value):
            ctx.fail(key, what, value)
        return value

    return check


def _list_of(item, limit=MAX_ITEMS):
    def check(value, ctx, key):
        if not isinstance(value, list):
            ctx.fail(key, "an array", value)
        if len(value) > limit:
            ctx.fail(key, "an array of at most %d items" % limit, detail="it has %d" % len(value))
        return [item(v, ctx, "%s[%d]" % (key, i)) for i, v in enumerate(value)]

    return check


def _var_map(value, ctx, key):
    if not isinstance(value, dict):
        ctx.fail(key, "a table of UPPER_SNAKE_CASE names to strings", value)
    if len(value) > MAX_ITEMS:
        ctx.fail(key, "a table of at most %d variables" % MAX_ITEMS, detail="it has %d" % len(value))
    for name, text in value.items():
        if not _VAR_NAME.match(name):
            ctx.fail(f"{key}.{name}", "an UPPER_SNAKE_CASE variable name", name)
        if not isinstance(text, str):
            ctx.fail(f"{key}.{name}", "a string", text)
        if len(text) > MAX_TEXT or "\x00" in text:
            ctx.fail(f"{key}.{name}", "a string of at most %d characters without NUL" % MAX_TEXT, text)
    return dict(value)


def _path_text(value, ctx, key, what):
    _plain(value, ctx, key, what, limit=4096)
    if "\\" in value:
        ctx.fail(key, f"{what} with '/' separators (no backslash)", value)
    return value


def _inside(ctx, key, value, what):
    """The path, relative to the repository root, must stay inside it (also through symlinks)."""
    parts = value.split("/")
    if value.startswith(("/", "~")) or ".." in parts:
        ctx.fail(key, f"{what} inside the repository: relative, without '..' and not absolute", value)
    if ctx.root:
        root = os.path.realpath(ctx.root)
        real = os.path.realpath(os.path.join(root, value))
        if real != root and not real.startswith(root + os.sep):
            ctx.fail(
                key,
                f"{what} inside the repository",
                value,
                detail=f"it resolves to {real} through a symbolic link, outside {root}",
            )
    return value


def _repo_path(value, ctx, key):
    """A path of the GitOps repository (a tree or a manifest)."""
    return _inside(ctx, key, _path_text(value, ctx, key, "a repository path"), "a repository path")


def _user_path(value, ctx, key):
    """A file of the user (a key, a kubeconfig): absolute or ~ allowed; a relative one stays in the repository."""
    _path_text(value, ctx, key, "a file path")
    if value.startswith(("/", "~")):
        return value
    return _inside(ctx, key, value, "a relative file path")


def _pattern(placeholders, rule, samples):
    """A str.format pattern using only ``placeholders``; rendered with samples, it must satisfy ``rule``."""

    def check(value, ctx, key):
        _plain(value, ctx, key, "a name pattern", limit=255)
        try:
            fields = [
                (name, spec, conv) for _text, name, spec, conv in string.Formatter().parse(value) if name is not None
            ]
        except ValueError as exc:
            ctx.fail(
                key,
                "a pattern with balanced braces and only the placeholders {}".format(
                    ", ".join(f"{{{p}}}" for p in placeholders)
                ),
                value,
                detail=str(exc),
            )
        for name, spec, conv in fields:
            if name not in placeholders or spec or conv:
                ctx.fail(
                    key,
                    "a pattern with only the placeholders {} (no format spec or conversion)".format(
                        ", ".join(f"{{{p}}}" for p in placeholders)
                    ),
                    value,
                    detail="unknown placeholder {{{}{}{}}}".format(
                        name, "!" + conv if conv else "", ":" + spec if spec else ""
                    ),
                )
        rendered = value.format(**samples)
        rule(
            rendered,
            ctx,
            "{} (rendered with {})".format(key, ", ".join("{}={}".format(*kv) for kv in sorted(samples.items()))),
        )
        return value

    return check


def _s3_bucket(value, ctx, key):
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


def _table(fields):
    """fields: name -> (checker, default). A default of _REQUIRED makes the key mandatory."""

    def check(value, ctx, key):
        if not isinstance(value, dict):
            ctx.fail(key, "a table", value)
        unknown = sorted(set(value) - set(fields))
        if unknown:
            ctx.fail(
                _join(key, unknown[0]),
                "one of the known keys: {}".format(", ".join(sorted(fields))),
                detail=f"unknown key {unknown[0][:80]!r}",
            )
        result = {}
        for name, (checker, default) in fields.items():
            if name in value:
                result[name] = checker(value[name], ctx, _join(key, name))
            elif default is _REQUIRED:
                ctx.fail(_join(key, name), "a value (the key is required)")
            elif hasattr(checker, "fields"):  # a missing sub-table gets its own defaults
                result[name] = checker(dict(default or {}), ctx, _join(key, name))
            else:
                result[name] = _copy(default)
        return result

    check.fields = fields
    return check


def _table_list(fields, limit=64):
    table = _table(fields)

    def check(value, ctx, key):
        if not isinstance(value, list):
            ctx.fail(key, f"an array of tables ([[{key}]])", value)
        if len(value) > limit:
            ctx.fail(key, "at most %d tables" % limit, detail="it has %d" % len(value))
        return [table(v, ctx, "%s[%d]" % (key, i)) for i, v in enumerate(value)]

    return check


def _join(key, name):
    return f"{key}.{name}" if key else name


def _copy(value):
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return value


_REQUIRED = object()
_STRINGS = _list_of(_string)
_GIT_URL_FORM = _matching(
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


def _git_url(value, ctx, key):
    """An https:// or ssh:// URL that carries no credentials (they would be printed and stored in Flux objects)."""
    if git_url_has_credentials(value):
        ctx.fail(key, "a Git URL without credentials", detail="the URL " + GIT_URL_CREDENTIALS)
    return _GIT_URL_FORM(value, ctx, key)


_GIT_URL = _git_url

# A container image reference: [registry[:port]/]path[:tag][@sha256:digest].
_IMAGE_REF = re.compile(
    r"^(?:[a-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9][a-z0-9._/-]*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?\Z"
)

_BOOTSTRAP = _table(
    {
        "default-environment": (_string, _REQUIRED),
        "git-url": (_GIT_URL, _REQUIRED),
        "git-branch": (_git_ref, "main"),
        "github-user": (
            _name(
                re.compile(r"^[A-Za-z0-9-]+$"), "a GitHub user name (letters, digits, '-')", 39, "GitHub user name rule"
            ),
            "git",
        ),
        "kind-cluster": (_KIND_CLUSTER, "mgmt"),
        "kind-context": (_optional(_CONTEXT), ""),  # empty: kind-<kind-cluster>, the context kind writes
        "kind-network": (_DOCKER, "kind"),
        "kind-node-image": (
            _matching(_IMAGE_REF, "an image reference such as kindest/node:v1.35.5@sha256:<digest>", limit=512),
            "",
        ),
        "registry-name": (_DOCKER, "krops-registry"),
        "registry-port": (_integer(1, 65535), 5001),
        "registry-container-port": (_integer(1, 65535), 5000),
        "registry-ready-retries": (_integer(1, 100000), 120),
        "oci-repository": (_OCI_REPO, "krops"),
        "oci-tag": (_OCI_REF, "latest"),
        "flux-version": (_matching(re.compile(r"^\d+\.\d+\.(x|\d+)$"), 'a Flux version such as "2.9.x"'), "2.9.x"),
        "flux-namespace": (_DNS_LABEL_NAME, "flux-system"),
        "github-pat-secret": (_DNS_SUBDOMAIN_NAME, "flux-github-pat"),
        "sops-age-secret": (_DNS_SUBDOMAIN_NAME, "sops-age"),
        "run-configmap": (_DNS_SUBDOMAIN_NAME, "krops-run"),
        "run-ttl": (_ttl, "24h"),
        "age-key-file": (_user_path, "~/.config/krops/age.agekey"),
        "mgmt-namespace": (_DNS_LABEL_NAME, "default"),
        "mgmt-context": (_CONTEXT, "krops-mgmt"),
        "mgmt-kubeconfig": (_user_path, "~/.kube/krops-mgmt.yaml"),
        "mgmt-poll-interval": (_duration_in(3600), 10),
        "local-reconcile-timeout": (_duration, 900),
        "cluster-delete-timeout": (_duration, 1200),
        "provider-delete-timeout": (_duration, 300),
    }
)

_CHARTS = _table(
    {
        "flux-operator": (_CHART, _REQUIRED),
        "cert-manager": (_CHART, _REQUIRED),
        "capi-operator": (_CHART, _REQUIRED),
    }
)

# The longest names the patterns are rendered with: an AWS account id is 12 digits; cluster
# names are DNS-1123 labels, checked again with every real workload name after load.
_SAMPLE = {"account_id": "123456789012", "cluster_name": "c"}

_GLOBAL_TEARDOWN = _table(
    {
        "cfn-stack-name": (_CFN, "cluster-api-provider-aws-sigs-k8s-io"),
        "global-iam-roles": (_list_of(_pattern(("cluster_name",), _IAM, {"cluster_name": "c"})), []),
        "global-iam-users": (_list_of(_IAM), []),
        "s3-bucket-pattern": (
            _pattern(("account_id", "cluster_name"), _s3_bucket, _SAMPLE),
            "krops-{account_id}-{cluster_name}-data",
        ),
    }
)

_AWS_WORKLOAD = {
    "region": (_matching(_REGION, "an AWS region name such as eu-north-1", limit=32), _REQUIRED),
    "cluster-name": (_DNS_LABEL_NAME, _REQUIRED),
    "eks-cluster-name": (_EKS, _REQUIRED),
    "rds-instance": (_optional(_RDS), ""),
}


def _distinct_by(field, rule):
    """rule (a list of tables), then no two tables with the same ``field`` (contract: duplicates are refused)."""

    def check(value, ctx, key):
        tables = rule(value, ctx, key)
        contract.unique(lambda v, c, k: v)([t[field] for t in tables], ctx, f"{key}[].{field}")
        return tables

    return check


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


def _account_id(value, ctx, key):
    if not isinstance(value, str) or not _ACCOUNT_ID.match(value):
        ctx.fail(key, 'a 12-digit AWS account ID as a string such as "123456789012"', value)
    return value


def _role_arn(value, ctx, key):
    _plain(value, ctx, key, "an IAM role ARN", limit=2048)
    if not _ROLE_ARN.match(value):
        ctx.fail(key, "an IAM role ARN such as arn:aws:iam::123456789012:role/krops-teardown", value)
    return value


def _role_name(value, ctx, key):
    _plain(value, ctx, key, "an IAM role name", limit=576)
    if not _ROLE_NAME.match(value):
        ctx.fail(
            key,
            "an IAM role name (1 to 64 of letters, digits and _+=,.@-, optionally after a path such as /krops/)",
            value,
        )
    return value


def _role_duration(value, ctx, key):
    low, high = ROLE_SESSION_DURATION
    seconds = parse_duration(value)
    if seconds is None or not low <= seconds <= high:
        ctx.fail(
            key,
            'an STS role session duration from 900s to 43200s (15m to 12h) such as "1h" (AssumeRole DurationSeconds)',
            value,
        )
    return seconds


def _not_empty(rule, what):
    """rule, but an empty array is refused: it must not silently mean every {what} of the environment."""

    def check(value, ctx, key):
        if value == []:
            ctx.fail(key, f"at least one {what} (leave the key out for every {what} of the environment)", value)
        return rule(value, ctx, key)

    return check


_AWS_ACCOUNT = {
    "account-id": (_account_id, _REQUIRED),
    "role-arn": (_role_arn, ""),
    "role-name": (_role_name, ""),
    "regions": (
        _not_empty(
            contract.unique(_matching(_REGION, "an AWS region name such as eu-north-1", limit=32), 64), "region"
        ),
        [],
    ),
    # the clusters (aws-workloads cluster-name, mgmt-cluster) that live in this account; unset: every cluster
    "clusters": (_not_empty(contract.unique(_DNS_LABEL_NAME, MAX_ITEMS), "cluster"), []),
    "external-id": (
        _optional(_matching(_EXTERNAL_ID, "an STS external ID: 2 to 1224 of letters, digits and _+=,.@:/-", 1224)),
        "",
    ),
    "session-name": (
        _optional(_matching(_SESSION_NAME, "an STS role session name: 2 to 64 of letters, digits and _+=,.@-", 64)),
        "",
    ),
    "duration": (_role_duration, None),
    # the role ACK's controllers assume to manage this account's resources (CARM: scripts/ack-accounts maps it)
    "ack-role-arn": (_optional(_role_arn), ""),
}


def _accounts(value, ctx, key):
    """[[accounts]]: distinct account ids, each with exactly one of role-arn and role-name; the account of a
    role ARN is the account-id given. The role ARN is completed from role-name (partition aws)."""
    tables = _distinct_by("account-id", _table_list(_AWS_ACCOUNT, limit=MAX_ITEMS))(value, ctx, key)
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


_ENV_TEARDOWN = _table(
    {
        "capi-workloads": (contract.unique(_DNS_LABEL_NAME, MAX_ITEMS), []),
        "mgmt-container-prefix": (_optional(_DOCKER), ""),
        "mgmt-eks-cluster-name": (_optional(_EKS), ""),
        "mgmt-iam-role-prefix": (_optional(_IAM), ""),
        "aws-workloads": (_distinct_by("cluster-name", _table_list(_AWS_WORKLOAD)), []),
        "hardware-release": (_boolean, False),
        "resource-groups": (contract.unique(_AZURE_GROUP, MAX_ITEMS), []),
        "networks": (contract.unique(_GCP_NETWORK, MAX_ITEMS), []),
        # GCP IAM objects carry no labels: owned by these exact names only (gcp teardown, last stages).
        "service-accounts": (contract.unique(_GCP_SERVICE_ACCOUNT, MAX_ITEMS), []),
        "workload-identity-providers": (contract.unique(_GCP_WIF_PROVIDER, MAX_ITEMS), []),
        # Account-global AWS resources this environment names (unset: the top-level [teardown] values).
        "global-iam-users": (_list_of(_IAM), None),
        "cfn-stack-name": (_CFN, None),
        # Cloud resources whose deletion protection the teardown may switch off (exact names).
        "disable-deletion-protection": (_list_of(_DNS_LABEL_NAME), []),
    }
)

_MOVE_FALLBACK = {
    "resource": (
        _matching(
            re.compile(r"^[a-z0-9-]+(\.[a-z0-9-]+)+$"),
            "a resource.group such as awsclustercontrolleridentities.infrastructure.cluster.x-k8s.io",
            limit=253,
        ),
        _REQUIRED,
    ),
    "name": (_DNS_SUBDOMAIN_NAME, _REQUIRED),
    "manifest": (_repo_path, _REQUIRED),
}

_ENVIRONMENT = _table(
    {
        # The platform (module_utils.profiles); `kind` is the historical spelling, `platform` the new one.
        "kind": (_choice(*profiles.PLATFORMS), None),
        "platform": (_choice(*profiles.PLATFORMS), None),
        "sync": (_choice(*SYNC_KINDS), _REQUIRED),
        "resource-plane": (_choice(*profiles.RESOURCE_PLANES), "native"),  # profiles.py: which platform has which
        "sync-path": (_repo_path, _REQUIRED),
        "workload-path": (_optional(_repo_path), ""),
        "mgmt-cluster": (_DNS_LABEL_NAME, _REQUIRED),
        # The management cluster's cloud region (aws, azure, gcp): stated, never inferred from a name.
        "mgmt-region": (_string, ""),
        "mgmt-ready-timeout": (_duration, _REQUIRED),
        "infra-provider-namespace": (_DNS_LABEL_NAME, _REQUIRED),
        "infra-provider-name": (_DNS_LABEL_NAME, _REQUIRED),
        "provider-manifests": (_list_of(_repo_path), []),
        "move-fallbacks": (_table_list(_MOVE_FALLBACK), []),
        "pivot-sops-secrets": (_list_of(_repo_path), []),
        # Flux Kustomizations (flux-system, exact names) that must be Ready on kind before the move starts.
        "pivot-wait-kustomizations": (_list_of(_DNS_LABEL_NAME), []),
        "post-kind-create-hook": (_choice("", *POST_KIND_CREATE_HOOKS), ""),
        "pivot-manifests": (_list_of(_repo_path), []),
        "pivot-manifest-vars": (_var_map, {}),
        "teardown": (_ENV_TEARDOWN, {}),
        # aws: the accounts the sweep and the orphan report work in, each through a role krops assumes (unset:
        # the one account of the caller's credentials).
        "accounts": (_accounts, []),
        # Operator providers ("<Kind>/<name>") whose Cluster API base is past its end of life, accepted knowingly:
        # validate reports them as warnings instead of findings (module_utils/contracts.py).
        "accepted-end-of-life": (
            _list_of(
                _matching(re.compile(r"^[A-Za-z]+Provider/[a-z0-9]([-a-z0-9]*[a-z0-9])?$"), "<Kind>Provider/<name>")
            ),
            [],
        ),
    }
)

_TOP_LEVEL = ("bootstrap", "charts", "teardown", "environments")


def _check_environment(env, ctx, key, data):
    """Rules across the keys of one environment (they depend on its platform's profile)."""
    kind, platform = env.pop("kind"), env.pop("platform")
    if kind and platform and kind != platform:
        ctx.fail(
            _join(key, "platform"),
            f"the same platform as kind = {kind!r} (kind is the older name of platform; keep one of them)",
            platform,
        )
    platform = platform or kind
    if not platform:
        ctx.fail(
            _join(key, "platform"),
            "a value (the key is required; the older name kind is also accepted): one of {}".format(
                ", ".join(profiles.PLATFORMS)
            ),
        )
    env["platform"] = platform
    env["kind"] = platform  # older readers; new code reads platform through module_utils.profiles
    profile = profiles.get(platform)
    region = env["mgmt-region"]
    if profile.region_pattern is not None:
        if not region:
            ctx.fail(
                _join(key, "mgmt-region"),
                f"the {platform} region of the management cluster such as {profile.region_example} (the key is "
                f"required for {platform})",
            )
        if len(region) > 64 or not profile.region_pattern.match(region):
            ctx.fail(
                _join(key, "mgmt-region"),
                f"a region name of the {platform} platform such as {profile.region_example}",
                region,
            )
    elif region:
        ctx.fail(_join(key, "mgmt-region"), f"no mgmt-region (a {platform} environment has no cloud region)", region)
    hook = env["post-kind-create-hook"]
    if hook and hook not in profile.post_kind_hooks:
        ctx.fail(
            _join(key, "post-kind-create-hook"),
            "a hook of the {} platform: {}".format(platform, ", ".join(profile.post_kind_hooks) or "none"),
            hook,
        )
    if env["sync"] == "oci" and not profile.local_registry:
        ctx.fail(
            _join(key, "sync"),
            'git (sync = "oci" needs the local registry, which only {} starts)'.format(
                ", ".join(p for p, prof in profiles.PROFILES.items() if prof.local_registry)
            ),
            env["sync"],
        )
    if env["resource-plane"] not in profile.resource_planes:
        plane = env["resource-plane"]
        only = ", ".join(p for p, f in profiles.PROFILES.items() if plane in f.resource_planes)
        why = f"krops ships a {plane} tree only for platform {only}; this environment is {platform}"
        ctx.fail(_join(key, "resource-plane"), f"native ({why})", plane)
    _check_accounts(env, ctx, key, profile)
    # The teardown patterns must give valid AWS names for every real workload cluster name.
    down = data["teardown"]
    for index, workload in enumerate(env["teardown"]["aws-workloads"]):
        name = workload["cluster-name"]
        how = "(rendered with %s.teardown.aws-workloads[%d].cluster-name = %s)" % (key, index, name)
        bucket = down["s3-bucket-pattern"].format(account_id=_SAMPLE["account_id"], cluster_name=name)
        _s3_bucket(bucket, ctx, f"teardown.s3-bucket-pattern {how}")
        for pattern in down["global-iam-roles"]:
            _IAM(pattern.format(cluster_name=name), ctx, f"teardown.global-iam-roles {how}")


def _check_accounts(env, ctx, key, profile):
    """accounts only on aws; each account's regions are regions of the environment."""
    accounts = env["accounts"]
    if not accounts:
        return
    if profile.cloud != "aws":
        ctx.fail(
            _join(key, "accounts"),
            "no accounts (only an environment of platform aws sweeps several accounts; this one is {})".format(
                env["platform"]
            ),
            accounts,
        )
    regions = [env["mgmt-region"]] + [w["region"] for w in env["teardown"]["aws-workloads"]]
    clusters = [env["mgmt-cluster"]] + [w["cluster-name"] for w in env["teardown"]["aws-workloads"]]
    placed = {}
    for index, account in enumerate(accounts):
        for position, cluster in enumerate(account["clusters"]):
            where = "%s.accounts[%d].clusters[%d]" % (key, index, position)
            if cluster not in clusters:
                ctx.fail(
                    where,
                    "a cluster of this environment: {} (mgmt-cluster and the aws-workloads cluster-name)".format(
                        ", ".join(clusters[:20]) + (" and %d more" % (len(clusters) - 20) if len(clusters) > 20 else "")
                    ),
                    cluster,
                )
            if cluster in placed:
                ctx.fail(
                    where,
                    "a cluster that no other account lists (a cluster lives in one account)",
                    cluster,
                    detail=f"account {placed[cluster]} lists it too",
                )
            placed[cluster] = account["account-id"]
        for position, region in enumerate(account["regions"]):
            if region not in regions:
                ctx.fail(
                    "%s.accounts[%d].regions[%d]" % (key, index, position),
                    "a region of this environment: {} (mgmt-region and the aws-workloads regions)".format(
                        ", ".join(dict.fromkeys(regions))
                    ),
                    region,
                )


def _as_int(text):
    try:
        return int(text) if _DIGITS.match(text) else text
    except ValueError:
        return text


_B = _BOOTSTRAP.fields

# Documented environment-variable overrides: variable -> (key path, checker, parse).
# The checkers are those of the file's keys. An empty variable counts as unset.
# MGMT_READY_TIMEOUT applies to every environment.
OVERRIDES = {
    "REGISTRY_PORT": ("bootstrap.registry-port", _B["registry-port"][0], _as_int),
    "REGISTRY_READY_RETRIES": ("bootstrap.registry-ready-retries", _B["registry-ready-retries"][0], _as_int),
    "GIT_REPO_URL": ("bootstrap.git-url", _B["git-url"][0], str),
    "GIT_BRANCH": ("bootstrap.git-branch", _B["git-branch"][0], str),
    "GITHUB_USER": ("bootstrap.github-user", _B["github-user"][0], str),
    "OCI_REPOSITORY": ("bootstrap.oci-repository", _B["oci-repository"][0], str),
    "OCI_TAG": ("bootstrap.oci-tag", _B["oci-tag"][0], str),
    "AGE_KEY_FILE": ("bootstrap.age-key-file", _B["age-key-file"][0], str),
    "MGMT_KUBECONFIG": ("bootstrap.mgmt-kubeconfig", _B["mgmt-kubeconfig"][0], str),
    "MGMT_POLL_INTERVAL": ("bootstrap.mgmt-poll-interval", _B["mgmt-poll-interval"][0], str),
    "LOCAL_RECONCILE_TIMEOUT": ("bootstrap.local-reconcile-timeout", _B["local-reconcile-timeout"][0], str),
    "CLUSTER_DELETE_TIMEOUT": ("bootstrap.cluster-delete-timeout", _B["cluster-delete-timeout"][0], str),
    "PROVIDER_DELETE_TIMEOUT": ("bootstrap.provider-delete-timeout", _B["provider-delete-timeout"][0], str),
    "MGMT_READY_TIMEOUT": ("environments.*.mgmt-ready-timeout", _ENVIRONMENT.fields["mgmt-ready-timeout"][0], str),
}


def _apply_overrides(data, environ, path, environments, root):
    for variable, (key, checker, parse) in OVERRIDES.items():
        text = environ.get(variable, "")
        if not text:
            continue
        ctx = _Ctx(f"environment variable {variable} (overrides {key} in {path})", environments, root)
        value = checker(parse(text), ctx, key)
        section, name = key.split(".", maxsplit=1)[0], key.rsplit(".", maxsplit=1)[-1]
        targets = data["environments"].values() if section == "environments" else [data[section]]
        for table in targets:
            table[name] = value


class Config:
    """A validated bootstrap.toml. ``data`` is the normalised plain-data form."""

    def __init__(self, path, data, selected):
        self.path = path
        self.data = data
        self.selected = selected

    @property
    def environment_names(self):
        return list(self.data["environments"])

    @property
    def root(self):
        """The repository root: the folder of bootstrap.toml (repository paths are relative to it)."""
        return os.path.dirname(os.path.abspath(self.path))

    def environment(self, name=None):
        """The table of environment ``name`` (default: the selected one)."""
        name = name or self.selected
        if name not in self.data["environments"]:
            raise ConfigKeyError(
                self.path,
                f"environments.{name}",
                "a defined environment",
                environments=self.environment_names,
                detail=f"unknown environment {name!r}",
            )
        return self.data["environments"][name]

    def profile(self, name=None):
        """The profile (module_utils.profiles.Profile) of environment ``name`` (default: the selected one)."""
        return profiles.of(self.environment(name))

    def lookup(self, dotted):
        """Value at a dotted key path, e.g. 'environments.aws.mgmt-cluster' or 'charts'.

        'environment' is the selected environment's name; 'current.<key>' reads the
        selected environment's table; 'profile[.<field>]' the selected environment's
        profile and 'profiles.<environment>[.<field>]' another's (fields with dashes).
        """
        if dotted == "environment":
            return self.selected
        if dotted == "current" or dotted.startswith("current."):
            dotted = "environments.{}{}".format(self.selected, dotted[len("current") :])
        if dotted == "profile" or dotted.startswith("profile."):
            dotted = "profiles.{}{}".format(self.selected, dotted[len("profile") :])
        root = self.data
        if dotted.startswith("profiles.") or dotted == "profiles":
            root = {
                "profiles": {
                    name: profiles.as_dict(profiles.of(env)) for name, env in self.data["environments"].items()
                }
            }
        node = root
        walked = []
        for part in dotted.split("."):
            walked.append(part)
            if isinstance(node, dict) and part in node:
                node = node[part]
                continue
            if walked[0] in ("environments", "profiles") and len(walked) == 2:
                self.environment(part)
            choices = (
                ", ".join(sorted(node))
                if isinstance(node, dict)
                else "none ({} is not a table)".format(".".join(walked[:-1]))
            )
            raise ConfigKeyError(
                self.path,
                ".".join(walked),
                f"an existing key; available here: {choices}",
                environments=self.environment_names,
            )
        return node


def resolve_path(path=None, environ=None, base_dir=None, playbook_dir=None):
    """The one resolver of the bootstrap.toml to read, for the lookup and the modules alike.

    The explicit path, else $BOOTSTRAP_CONFIG, else bootstrap.toml beside the playbooks
    folder (``playbook_dir``/.., when the lookup knows it and the file exists there), else
    bootstrap.toml in ``base_dir`` (default: the current directory).
    """
    environ = os.environ if environ is None else environ
    chosen = path or environ.get("BOOTSTRAP_CONFIG")
    if not chosen and playbook_dir:
        beside = os.path.join(os.path.dirname(os.path.abspath(playbook_dir)), DEFAULT_FILE)
        if os.path.exists(beside):
            chosen = beside
    chosen = chosen or os.path.join(base_dir or os.getcwd(), DEFAULT_FILE)
    return os.path.expanduser(chosen)


# Validated data per (path, file content, overrides, environment): bootstrap.toml is read
# and checked once per process however many plugins and module_utils ask for it.
_CACHE = {}


def clear_cache():
    _CACHE.clear()


def load(path=None, environ=None, environment=None, base_dir=None, playbook_dir=None):
    """Read, validate and normalise bootstrap.toml; raise ConfigKeyError on any problem."""
    environ = os.environ if environ is None else environ
    path = resolve_path(path, environ, base_dir, playbook_dir)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigKeyError(
            path,
            None,
            "a readable bootstrap.toml",
            detail=f"{exc.strerror}; set BOOTSTRAP_CONFIG or run from the repository root",
        )
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigKeyError(path, None, "a file of at most %d bytes" % MAX_FILE_BYTES)
    overrides = tuple((name, environ.get(name, "")) for name in sorted(OVERRIDES) + ["KROPS_PROFILE"])
    key = (os.path.abspath(path), hashlib.sha256(raw).hexdigest(), overrides, environment)
    cached = _CACHE.get(key)
    if cached is None:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigKeyError(path, None, "UTF-8 text", detail="invalid byte at offset %d" % exc.start)
        cached = loads(text, path=path, environ=environ, environment=environment)
        if len(_CACHE) > 32:
            _CACHE.clear()
        _CACHE[key] = cached
    return Config(cached.path, copy.deepcopy(cached.data), cached.selected)


def loads(text, path=DEFAULT_FILE, environ=None, environment=None, root=None):
    """Validate TOML text. ``environment`` (else $KROPS_PROFILE, else default-environment) is selected.

    ``root`` is the repository root repository paths must stay in (default: the folder of ``path``).
    """
    environ = {} if environ is None else environ
    if tomllib is None:  # pragma: no cover
        raise ConfigKeyError(path, None, "Python 3.11 or newer (tomllib)")
    if not isinstance(text, str):
        raise ConfigKeyError(path, None, "TOML text", text)
    if len(text) > MAX_FILE_BYTES:
        raise ConfigKeyError(path, None, "a file of at most %d bytes" % MAX_FILE_BYTES)
    text = text[1:] if text.startswith("\ufeff") else text  # a UTF-8 byte order mark is harmless
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigKeyError(path, None, "valid TOML", detail=str(exc))
    except RecursionError:
        raise ConfigKeyError(
            path,
            None,
            "valid TOML of bounded depth",
            detail="arrays or tables are nested too deeply to read (bootstrap.toml needs at most 5 levels)",
        )

    envs_raw = raw.get("environments")
    names = [n[:80] for n in envs_raw] if isinstance(envs_raw, dict) else []
    root = root or os.path.dirname(os.path.abspath(path))
    ctx = _Ctx(path, names, root)
    unknown = sorted(set(raw) - set(_TOP_LEVEL))
    if unknown:
        ctx.fail(
            unknown[0][:80],
            "one of the known tables: {}".format(", ".join(_TOP_LEVEL)),
            detail=f"unknown key {unknown[0][:80]!r}",
        )
    for table in _TOP_LEVEL:
        if table not in raw and table != "teardown":
            ctx.fail(
                table, f"a [{table}] table" if table != "environments" else "at least one [environments.<name>] table"
            )
    if not isinstance(envs_raw, dict) or not envs_raw:
        ctx.fail("environments", "at least one [environments.<name>] table", envs_raw)
    if len(envs_raw) > 64:
        ctx.fail("environments", "at most 64 environments", detail="it has %d" % len(envs_raw))

    data = {
        "bootstrap": _BOOTSTRAP(raw["bootstrap"], ctx, "bootstrap"),
        "charts": _CHARTS(raw["charts"], ctx, "charts"),
        "teardown": _GLOBAL_TEARDOWN(raw.get("teardown", {}), ctx, "teardown"),
        "environments": {},
    }
    boot = data["bootstrap"]
    boot["kind-context"] = boot["kind-context"] or "kind-" + boot["kind-cluster"]
    if boot["kind-context"] != "kind-" + boot["kind-cluster"]:
        ctx.fail(
            "bootstrap.kind-context",
            "kind-{} (kind names the context of cluster {} kind-{})".format(
                boot["kind-cluster"], boot["kind-cluster"], boot["kind-cluster"]
            ),
            boot["kind-context"],
        )
    for name, table in envs_raw.items():
        key = f"environments.{name[:80]}"
        _DNS_LABEL_NAME(name, ctx, key + " (the environment name, also a label value and part of resource names)")
        env = _ENVIRONMENT(table, ctx, key)
        _check_environment(env, ctx, key, data)
        data["environments"][name] = env

    default = boot["default-environment"]
    if default not in data["environments"]:
        ctx.fail("bootstrap.default-environment", "the name of a defined environment", default)

    _apply_overrides(data, environ, path, names, root)

    selected = environment or environ.get("KROPS_PROFILE") or default
    config = Config(path, data, selected)
    if selected not in data["environments"]:
        source = "the requested environment" if environment else "KROPS_PROFILE"
        raise ConfigKeyError(
            path,
            f"environments.{str(selected)[:80]}",
            f"a defined environment ({source})",
            environments=names,
            detail=f"unknown environment {str(selected)[:80]!r}",
        )
    return config
