# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Typed loader for bootstrap.toml, the repository-owned lifecycle configuration.

Every module, plugin and role reads bootstrap.toml through :func:`load`. The loader
is strict: an unknown key, a wrong type, a bad duration or a missing or unknown
environment raises :class:`ConfigError` whose message names the file, the key path,
what was expected and the valid environment names. It never lets a traceback
reach the user for bad input.

The result is plain data (dicts, lists, str, int, bool) so it can travel through
Ansible unchanged. Durations are normalised to whole seconds.
"""

from __future__ import annotations

import os
import re

try:
    import tomllib
except ImportError:  # pragma: no cover - Python < 3.11 is not a supported controller
    tomllib = None

DEFAULT_FILE = "bootstrap.toml"

ENVIRONMENT_KINDS = ("local-host", "aws", "azure", "gcp", "local-talos")
SYNC_KINDS = ("git", "oci")
POST_KIND_CREATE_HOOKS = ("arc-federate", "wif-federate")

_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_VAR_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_REGION = re.compile(r"^[a-z]{2}(?:-[a-z]+)+-\d$")


class ConfigError(Exception):
    """bootstrap.toml (or an override) does not describe a valid configuration."""

    def __init__(self, path, key, expected, got=None, environments=None, detail=None):
        self.path = path
        self.key = key
        self.expected = expected
        self.got = got
        self.environments = list(environments or [])
        parts = ["%s: %s: expected %s" % (path, key or "(top level)", expected)]
        if got is not None:
            parts.append(", got %s" % _describe(got))
        if detail:
            parts.append("; %s" % detail)
        if self.environments:
            parts.append(" (valid environments: %s)" % ", ".join(self.environments))
        super().__init__("".join(parts))


def _describe(value):
    if isinstance(value, bool):
        return "boolean %s" % str(value).lower()
    if isinstance(value, (dict, list)):
        return "a %s" % ("table" if isinstance(value, dict) else "array")
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def parse_duration(value):
    """Return whole seconds for '40m', '2h', '90s', '1h30m', 90 or '90'; None when invalid."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.isdigit():
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
    def __init__(self, path, environments):
        self.path = path
        self.environments = environments

    def fail(self, key, expected, got=None, detail=None):
        raise ConfigError(self.path, key, expected, got, self.environments, detail)


def _string(value, ctx, key):
    if not isinstance(value, str) or not value.strip():
        ctx.fail(key, "a non-empty string", value)
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


def _duration(value, ctx, key):
    seconds = parse_duration(value)
    if seconds is None:
        ctx.fail(key, "a positive duration such as \"40m\", \"2h\", \"90s\" or bare seconds", value)
    return seconds


def _choice(*choices):
    def check(value, ctx, key):
        if value not in choices:
            ctx.fail(key, "one of %s" % ", ".join(choices), value)
        return value
    return check


def _matching(pattern, what):
    def check(value, ctx, key):
        if not isinstance(value, str) or not pattern.match(value):
            ctx.fail(key, what, value)
        return value
    return check


def _list_of(item):
    def check(value, ctx, key):
        if not isinstance(value, list):
            ctx.fail(key, "an array", value)
        return [item(v, ctx, "%s[%d]" % (key, i)) for i, v in enumerate(value)]
    return check


def _var_map(value, ctx, key):
    if not isinstance(value, dict):
        ctx.fail(key, "a table of UPPER_SNAKE_CASE names to strings", value)
    for name, text in value.items():
        if not _VAR_NAME.match(name):
            ctx.fail("%s.%s" % (key, name), "an UPPER_SNAKE_CASE variable name", name)
        if not isinstance(text, str):
            ctx.fail("%s.%s" % (key, name), "a string", text)
    return dict(value)


def _table(fields):
    """fields: name -> (checker, default). A default of _REQUIRED makes the key mandatory."""
    def check(value, ctx, key):
        if not isinstance(value, dict):
            ctx.fail(key, "a table", value)
        unknown = sorted(set(value) - set(fields))
        if unknown:
            ctx.fail(_join(key, unknown[0]), "one of the known keys: %s" % ", ".join(sorted(fields)),
                     detail="unknown key %r" % unknown[0])
        result = {}
        for name, (checker, default) in fields.items():
            if name in value:
                result[name] = checker(value[name], ctx, _join(key, name))
            elif default is _REQUIRED:
                ctx.fail(_join(key, name), "a value (the key is required)")
            else:
                result[name] = _copy(default)
        return result
    return check


def _table_list(fields):
    table = _table(fields)

    def check(value, ctx, key):
        if not isinstance(value, list):
            ctx.fail(key, "an array of tables ([[%s]])" % key, value)
        return [table(v, ctx, "%s[%d]" % (key, i)) for i, v in enumerate(value)]
    return check


def _join(key, name):
    return "%s.%s" % (key, name) if key else name


def _copy(value):
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return value


_REQUIRED = object()
_STRINGS = _list_of(_string)
_GIT_URL = _matching(re.compile(r"^(https|ssh)://\S+$"), "an https:// or ssh:// URL")

_BOOTSTRAP = _table({
    "default-environment": (_string, _REQUIRED),
    "git-url": (_GIT_URL, _REQUIRED),
    "git-branch": (_string, "main"),
    "github-user": (_string, "git"),
    "kind-cluster": (_string, "mgmt"),
    "kind-context": (_string, "kind-mgmt"),
    "kind-network": (_string, "kind"),
    "registry-name": (_string, "krops-registry"),
    "registry-port": (_integer(1, 65535), 5001),
    "registry-ready-retries": (_integer(1, 100000), 120),
    "oci-repository": (_string, "krops"),
    "oci-tag": (_string, "latest"),
    "flux-namespace": (_string, "flux-system"),
    "github-pat-secret": (_string, "flux-github-pat"),
    "sops-age-secret": (_string, "sops-age"),
    "run-configmap": (_string, "krops-run"),
    "run-ttl": (_matching(re.compile(r"^(none|(\d+h)?(\d+m)?(\d+s)?)$"), "a duration such as \"24h\" or \"none\""), "24h"),
    "age-key-file": (_string, "age.agekey"),
    "mgmt-namespace": (_string, "default"),
    "mgmt-context": (_string, "krops-mgmt"),
    "mgmt-kubeconfig": (_string, "~/.kube/krops-mgmt.yaml"),
    "mgmt-poll-interval": (_duration, 10),
    "local-reconcile-timeout": (_duration, 900),
    "cluster-delete-timeout": (_duration, 1200),
    "provider-delete-timeout": (_duration, 300),
})

_CHARTS = _table({
    "flux-operator": (_string, _REQUIRED),
    "cert-manager": (_string, _REQUIRED),
    "capi-operator": (_string, _REQUIRED),
})

_GLOBAL_TEARDOWN = _table({
    "cfn-stack-name": (_string, "cluster-api-provider-aws-sigs-k8s-io"),
    "global-iam-roles": (_STRINGS, []),
    "global-iam-users": (_STRINGS, []),
    "s3-bucket-pattern": (_string, "krops-{account_id}-{cluster_name}-data"),
})

_AWS_WORKLOAD = {
    "region": (_matching(_REGION, "an AWS region name such as eu-north-1"), _REQUIRED),
    "cluster-name": (_string, _REQUIRED),
    "eks-cluster-name": (_string, _REQUIRED),
    "rds-instance": (_string, ""),
}

_ENV_TEARDOWN = _table({
    "capi-workloads": (_STRINGS, []),
    "mgmt-container-prefix": (_string, ""),
    "mgmt-eks-cluster-name": (_string, ""),
    "mgmt-iam-role-prefix": (_string, ""),
    "aws-workloads": (_table_list(_AWS_WORKLOAD), []),
    "hardware-release": (_boolean, False),
    "resource-groups": (_STRINGS, []),
    "networks": (_STRINGS, []),
    # account-global AWS resources this environment names (unset: the top-level [teardown] values)
    "global-iam-users": (_STRINGS, None),
    "cfn-stack-name": (_string, None),
    # cloud resources whose deletion protection the teardown may switch off (exact names)
    "disable-deletion-protection": (_STRINGS, []),
})

_MOVE_FALLBACK = {
    "resource": (_matching(re.compile(r"^[a-z0-9-]+(\.[a-z0-9-]+)+$"),
                           "a resource.group such as awsclustercontrolleridentities.infrastructure.cluster.x-k8s.io"), _REQUIRED),
    "name": (_string, _REQUIRED),
    "manifest": (_string, _REQUIRED),
}

_ENVIRONMENT = _table({
    "kind": (_choice(*ENVIRONMENT_KINDS), _REQUIRED),
    "sync": (_choice(*SYNC_KINDS), _REQUIRED),
    "sync-path": (_string, _REQUIRED),
    "workload-path": (_string, ""),
    "mgmt-cluster": (_string, _REQUIRED),
    "mgmt-region": (_string, ""),
    "mgmt-ready-timeout": (_duration, _REQUIRED),
    "infra-provider-namespace": (_string, _REQUIRED),
    "infra-provider-name": (_string, _REQUIRED),
    "provider-manifests": (_STRINGS, []),
    "move-fallbacks": (_table_list(_MOVE_FALLBACK), []),
    "pivot-sops-secrets": (_STRINGS, []),
    "post-kind-create-hook": (_choice("", *POST_KIND_CREATE_HOOKS), ""),
    "pivot-manifests": (_STRINGS, []),
    "pivot-manifest-vars": (_var_map, {}),
    "teardown": (_ENV_TEARDOWN, {}),
})

_TOP_LEVEL = ("bootstrap", "charts", "teardown", "environments")

# Region name rule per cloud environment kind; local kinds have no region (CONTRACTS.md).
MGMT_REGION_RULES = {
    "aws": (_REGION, "an AWS region name such as eu-north-1"),
    "azure": (re.compile(r"^[a-z][a-z0-9]+$"), "an Azure region name such as swedencentral"),
    "gcp": (re.compile(r"^[a-z]+-[a-z]+\d+$"), "a GCP region name such as europe-north1"),
}


def _check_mgmt_region(env, ctx, key):
    """mgmt-region: required for the cloud kinds (where the management cluster runs), absent for local ones."""
    rule = MGMT_REGION_RULES.get(env["kind"])
    region = env.get("mgmt-region")
    if rule is None:
        if region:
            ctx.fail(key, "no value: an environment of kind %s has no cloud region" % env["kind"], region,
                     detail="remove the key")
        return
    if not region:
        ctx.fail(key, "%s (the management cluster's region; required for kind %s)" % (rule[1], env["kind"]))
    if not rule[0].match(region):
        ctx.fail(key, rule[1], region)


def _as_int(text):
    try:
        return int(text)
    except ValueError:
        return text


# Documented environment-variable overrides: variable -> (key path, checker, parse).
# An empty variable counts as unset. MGMT_READY_TIMEOUT applies to every environment.
OVERRIDES = {
    "REGISTRY_PORT": ("bootstrap.registry-port", _integer(1, 65535), _as_int),
    "REGISTRY_READY_RETRIES": ("bootstrap.registry-ready-retries", _integer(1, 100000), _as_int),
    "GIT_REPO_URL": ("bootstrap.git-url", _GIT_URL, str),
    "GIT_BRANCH": ("bootstrap.git-branch", _string, str),
    "GITHUB_USER": ("bootstrap.github-user", _string, str),
    "OCI_REPOSITORY": ("bootstrap.oci-repository", _string, str),
    "OCI_TAG": ("bootstrap.oci-tag", _string, str),
    "AGE_KEY_FILE": ("bootstrap.age-key-file", _string, str),
    "MGMT_KUBECONFIG": ("bootstrap.mgmt-kubeconfig", _string, str),
    "MGMT_POLL_INTERVAL": ("bootstrap.mgmt-poll-interval", _duration, str),
    "LOCAL_RECONCILE_TIMEOUT": ("bootstrap.local-reconcile-timeout", _duration, str),
    "CLUSTER_DELETE_TIMEOUT": ("bootstrap.cluster-delete-timeout", _duration, str),
    "PROVIDER_DELETE_TIMEOUT": ("bootstrap.provider-delete-timeout", _duration, str),
    "MGMT_READY_TIMEOUT": ("environments.*.mgmt-ready-timeout", _duration, str),
}


def _apply_overrides(data, environ, path, environments):
    for variable, (key, checker, parse) in OVERRIDES.items():
        text = environ.get(variable, "")
        if not text:
            continue
        ctx = _Ctx("environment variable %s (overrides %s in %s)" % (variable, key, path), environments)
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

    def environment(self, name=None):
        """The table of environment ``name`` (default: the selected one)."""
        name = name or self.selected
        if name not in self.data["environments"]:
            raise ConfigError(self.path, "environments.%s" % name, "a defined environment",
                              environments=self.environment_names,
                              detail="unknown environment %r" % name)
        return self.data["environments"][name]

    def lookup(self, dotted):
        """Value at a dotted key path, e.g. 'environments.aws.mgmt-cluster' or 'charts'.

        'environment' is the selected environment's name; 'current.<key>' reads the
        selected environment's table.
        """
        if dotted == "environment":
            return self.selected
        if dotted == "current" or dotted.startswith("current."):
            dotted = "environments.%s%s" % (self.selected, dotted[len("current"):])
        node = self.data
        walked = []
        for part in dotted.split("."):
            walked.append(part)
            if isinstance(node, dict) and part in node:
                node = node[part]
                continue
            if walked[0] == "environments" and len(walked) == 2:
                self.environment(part)
            choices = ", ".join(sorted(node)) if isinstance(node, dict) else "none (%s is not a table)" % ".".join(walked[:-1])
            raise ConfigError(self.path, ".".join(walked), "an existing key; available here: %s" % choices,
                              environments=self.environment_names)
        return node


def resolve_path(path=None, environ=None, base_dir=None):
    """The bootstrap.toml to read: explicit path, else $BOOTSTRAP_CONFIG, else base_dir/bootstrap.toml."""
    environ = os.environ if environ is None else environ
    chosen = path or environ.get("BOOTSTRAP_CONFIG") or os.path.join(base_dir or os.getcwd(), DEFAULT_FILE)
    return os.path.expanduser(chosen)


def load(path=None, environ=None, environment=None, base_dir=None):
    """Read, validate and normalise bootstrap.toml; raise ConfigError on any problem."""
    environ = os.environ if environ is None else environ
    path = resolve_path(path, environ, base_dir)
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise ConfigError(path, None, "a readable bootstrap.toml",
                          detail="%s; set BOOTSTRAP_CONFIG or run from the repository root" % exc.strerror)
    return loads(raw.decode("utf-8", errors="replace"), path=path, environ=environ, environment=environment)


def loads(text, path=DEFAULT_FILE, environ=None, environment=None):
    """Validate TOML text. ``environment`` (else $KROPS_PROFILE, else default-environment) is selected."""
    environ = {} if environ is None else environ
    if tomllib is None:  # pragma: no cover
        raise ConfigError(path, None, "Python 3.11 or newer (tomllib)")
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, None, "valid TOML", detail=str(exc))

    envs_raw = raw.get("environments")
    names = list(envs_raw) if isinstance(envs_raw, dict) else []
    ctx = _Ctx(path, names)
    unknown = sorted(set(raw) - set(_TOP_LEVEL))
    if unknown:
        ctx.fail(unknown[0], "one of the known tables: %s" % ", ".join(_TOP_LEVEL),
                 detail="unknown key %r" % unknown[0])
    for table in _TOP_LEVEL:
        if table not in raw and table != "teardown":
            ctx.fail(table, "a [%s] table" % table if table != "environments" else "at least one [environments.<name>] table")
    if not isinstance(envs_raw, dict) or not envs_raw:
        ctx.fail("environments", "at least one [environments.<name>] table", envs_raw)

    data = {
        "bootstrap": _BOOTSTRAP(raw["bootstrap"], ctx, "bootstrap"),
        "charts": _CHARTS(raw["charts"], ctx, "charts"),
        "teardown": _GLOBAL_TEARDOWN(raw.get("teardown", {}), ctx, "teardown"),
        "environments": {},
    }
    for name, table in envs_raw.items():
        data["environments"][name] = _ENVIRONMENT(table, ctx, "environments.%s" % name)
        _check_mgmt_region(data["environments"][name], ctx, "environments.%s.mgmt-region" % name)

    default = data["bootstrap"]["default-environment"]
    if default not in data["environments"]:
        ctx.fail("bootstrap.default-environment", "the name of a defined environment", default)

    _apply_overrides(data, environ, path, names)

    selected = environment or environ.get("KROPS_PROFILE") or default
    config = Config(path, data, selected)
    if selected not in data["environments"]:
        source = "the requested environment" if environment else "KROPS_PROFILE"
        raise ConfigError(path, "environments.%s" % selected, "a defined environment (%s)" % source,
                          environments=names, detail="unknown environment %r" % selected)
    return config
