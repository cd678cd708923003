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

The result is a :class:`Config` of frozen dataclasses (module_utils.config_types), read by attribute:
``cfg.bootstrap.mgmt_namespace``, ``cfg.charts.flux_operator``, ``cfg.teardown.s3_bucket_pattern``,
``cfg.environment("aws").teardown.aws_workloads[0].cluster_name``. Durations are normalised to whole
seconds. Each environment's ``platform`` (the bootstrap.toml key ``platform`` or its older name ``kind``)
names the profile module_utils.profiles describes. The Ansible side reads plain data with the TOML keys
through :meth:`Config.lookup` (the lookup plugin krops.platform.bootstrap_config), the one way back to
dicts (config_types.as_toml_dict).

The files: config_schema (the error, the bounds, the field checkers), config_names (the name rules of the
consumers, with their sources), config_types (one dataclass per table: each key declared once), and this
one (the rules across keys, the overrides, loading and caching). docs/extending.md says how to add a key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import types

try:
    import tomllib
except ImportError:  # pragma: no cover - Python < 3.11 is not a supported controller
    tomllib = None

from ansible_collections.krops.platform.plugins.module_utils import config_names as N
from ansible_collections.krops.platform.plugins.module_utils import config_schema as S
from ansible_collections.krops.platform.plugins.module_utils import config_types as T
from ansible_collections.krops.platform.plugins.module_utils import profiles

# Re-exported for the consumers and tests that catch or use them as config.<name>.
from ansible_collections.krops.platform.plugins.module_utils.errors import ConfigError  # noqa: F401  # pylint: disable=unused-import  # config.ConfigError: the area error, as airgap.py and the tests catch it
from ansible_collections.krops.platform.plugins.module_utils.config_schema import (  # noqa: F401  # pylint: disable=unused-import
    MAX_TIMEOUT,
    MAX_TTL,
    ConfigKeyError,
    parse_duration,
)
from ansible_collections.krops.platform.plugins.module_utils.config_names import (  # noqa: F401  # pylint: disable=unused-import
    GIT_URL_CREDENTIALS,
    git_url_has_credentials,
)

DEFAULT_FILE = "bootstrap.toml"
# The options of every module that reads an environment from bootstrap.toml (doc fragment
# krops.platform.bootstrap_config): load(config_file, environment=environment).
ARGS = dict(environment=dict(type="str"), config_file=dict(type="path"))

# The one default of each timeout that is not a bootstrap.toml key (module options fall back to these).
TIMEOUTS = {
    "wait": 900,  # each chart and provider Ready (capi_pivot wait_timeout)
    "node": 900,  # the management cluster's nodes Ready (capi_pivot node_timeout)
    "move": 3600,  # clusterctl move (capi_pivot move_timeout)
    "progress_interval": 30,  # seconds between progress lines of the stepped waits
    "request": 30,  # one Kubernetes API request (module_utils.kube)
}

_BOOTSTRAP = S.table(T.fields_of(T.Bootstrap))
_CHARTS = S.table(T.fields_of(T.Charts))
_GLOBAL_TEARDOWN = S.table(T.fields_of(T.Teardown))
_ENVIRONMENT = S.table(T.environment_fields())
_TOP_LEVEL = tuple(T.TABLES)


# --- rules across the keys of a table (the loader's dict form, before the dataclasses are built) -------------


def _check_environment(env, ctx, key, data):
    """Rules across the keys of one environment (they depend on its platform's profile)."""
    kind, platform = env.pop("kind"), env.pop("platform")
    if kind and platform and kind != platform:
        ctx.fail(
            S.join(key, "platform"),
            f"the same platform as kind = {kind!r} (kind is the older name of platform; keep one of them)",
            platform,
        )
    platform = platform or kind
    if not platform:
        ctx.fail(
            S.join(key, "platform"),
            "a value (the key is required; the older name kind is also accepted): one of {}".format(
                ", ".join(profiles.PLATFORMS)
            ),
        )
    env["platform"] = platform
    profile = profiles.get(platform)
    region = env["mgmt-region"]
    if profile.region_pattern is not None:
        if not region:
            ctx.fail(
                S.join(key, "mgmt-region"),
                f"the {platform} region of the management cluster such as {profile.region_example} (the key is "
                f"required for {platform})",
            )
        if len(region) > 64 or not profile.region_pattern.match(region):
            ctx.fail(
                S.join(key, "mgmt-region"),
                f"a region name of the {platform} platform such as {profile.region_example}",
                region,
            )
    elif region:
        ctx.fail(S.join(key, "mgmt-region"), f"no mgmt-region (a {platform} environment has no cloud region)", region)
    hook = env["post-kind-create-hook"]
    if hook and hook not in profile.post_kind_hooks:
        ctx.fail(
            S.join(key, "post-kind-create-hook"),
            "a hook of the {} platform: {}".format(platform, ", ".join(profile.post_kind_hooks) or "none"),
            hook,
        )
    if env["sync"] == "oci" and not profile.local_registry:
        ctx.fail(
            S.join(key, "sync"),
            'git (sync = "oci" needs the local registry, which only {} starts)'.format(
                ", ".join(p for p, prof in profiles.PROFILES.items() if prof.local_registry)
            ),
            env["sync"],
        )
    if env["resource-plane"] not in profile.resource_planes:
        plane = env["resource-plane"]
        only = ", ".join(p for p, f in profiles.PROFILES.items() if plane in f.resource_planes)
        why = f"krops ships a {plane} tree only for platform {only}; this environment is {platform}"
        ctx.fail(S.join(key, "resource-plane"), f"native ({why})", plane)
    _check_accounts(env, ctx, key, profile)
    # The teardown patterns must give valid AWS names for every real workload cluster name.
    down = data["teardown"]
    for index, workload in enumerate(env["teardown"]["aws-workloads"]):
        name = workload["cluster-name"]
        how = "(rendered with %s.teardown.aws-workloads[%d].cluster-name = %s)" % (key, index, name)
        bucket = down["s3-bucket-pattern"].format(account_id=N.SAMPLE["account_id"], cluster_name=name)
        N.s3_bucket(bucket, ctx, f"teardown.s3-bucket-pattern {how}")
        for pattern in down["global-iam-roles"]:
            N.IAM(pattern.format(cluster_name=name), ctx, f"teardown.global-iam-roles {how}")


def _check_accounts(env, ctx, key, profile):
    """accounts only on aws; each account's regions are regions of the environment."""
    accounts = env["accounts"]
    if not accounts:
        return
    if profile.cloud != "aws":
        ctx.fail(
            S.join(key, "accounts"),
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
        return int(text) if S.DIGITS.match(text) else text
    except ValueError:
        return text


def _override(key, parse=str):
    """(key path, the checker of that bootstrap.toml key, parse) of an environment-variable override of ``key``:
    ``bootstrap.<key>``, or ``environments.*.<key>`` for every environment."""
    table = _ENVIRONMENT if key.startswith("environments.") else _BOOTSTRAP
    return key, table.fields[key.rsplit(".", maxsplit=1)[-1]][0], parse


# Documented environment-variable overrides: variable -> (key path, checker, parse).
# The checkers are those of the file's keys. An empty variable counts as unset.
# MGMT_READY_TIMEOUT applies to every environment.
OVERRIDES = {
    "REGISTRY_PORT": _override("bootstrap.registry-port", _as_int),
    "REGISTRY_READY_RETRIES": _override("bootstrap.registry-ready-retries", _as_int),
    "GIT_REPO_URL": _override("bootstrap.git-url"),
    "GIT_BRANCH": _override("bootstrap.git-branch"),
    "GITHUB_USER": _override("bootstrap.github-user"),
    "OCI_REPOSITORY": _override("bootstrap.oci-repository"),
    "OCI_TAG": _override("bootstrap.oci-tag"),
    "AGE_KEY_FILE": _override("bootstrap.age-key-file"),
    "MGMT_KUBECONFIG": _override("bootstrap.mgmt-kubeconfig"),
    "MGMT_POLL_INTERVAL": _override("bootstrap.mgmt-poll-interval"),
    "LOCAL_RECONCILE_TIMEOUT": _override("bootstrap.local-reconcile-timeout"),
    "CLUSTER_DELETE_TIMEOUT": _override("bootstrap.cluster-delete-timeout"),
    "PROVIDER_DELETE_TIMEOUT": _override("bootstrap.provider-delete-timeout"),
    "MGMT_READY_TIMEOUT": _override("environments.*.mgmt-ready-timeout"),
}


def _apply_overrides(data, environ, path, environments, root):
    for variable, (key, checker, parse) in OVERRIDES.items():
        text = environ.get(variable, "")
        if not text:
            continue
        ctx = S.Ctx(f"environment variable {variable} (overrides {key} in {path})", environments, root)
        value = checker(parse(text), ctx, key)
        section, name = key.split(".", maxsplit=1)[0], key.rsplit(".", maxsplit=1)[-1]
        targets = data["environments"].values() if section == "environments" else [data[section]]
        for table in targets:
            table[name] = value


@dataclasses.dataclass(frozen=True)
class Config:
    """A validated bootstrap.toml: its tables as frozen dataclasses (module_utils.config_types)."""

    path: str
    selected: str  # the environment current.* and environment() without a name refer to
    bootstrap: T.Bootstrap
    charts: T.Charts
    teardown: T.Teardown
    environments: types.MappingProxyType  # name -> T.Environment, in file order

    @property
    def environment_names(self):
        return list(self.environments)

    @property
    def root(self):
        """The repository root: the folder of bootstrap.toml (repository paths are relative to it)."""
        return os.path.dirname(os.path.abspath(self.path))

    def environment(self, name=None):
        """The Environment ``name`` (default: the selected one); ConfigKeyError names the defined ones."""
        name = name or self.selected
        if name not in self.environments:
            raise ConfigKeyError(
                self.path,
                f"environments.{name}",
                "a defined environment",
                environments=self.environment_names,
                detail=f"unknown environment {name!r}",
            )
        return self.environments[name]

    def profile(self, name=None):
        """The profile (module_utils.profiles.Profile) of environment ``name`` (default: the selected one)."""
        return profiles.of(self.environment(name))

    def lookup(self, dotted):
        """Plain data (the TOML keys) at a dotted key path, e.g. 'environments.aws.mgmt-cluster' or 'charts':
        what the lookup plugin returns to the Ansible side.

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
        if dotted.startswith("profiles.") or dotted == "profiles":
            node = {"profiles": {name: profiles.as_dict(profiles.of(env)) for name, env in self.environments.items()}}
        else:
            node = self._plain_path(dotted.split("."))
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

    def _plain_path(self, parts):
        """The tables as plain data, converted only along ``parts`` (the other keys are there, as None, for the
        listing of a missing key's siblings)."""
        node = dict.fromkeys(T.TABLES)
        if parts[0] not in T.TABLES:
            return node
        table = getattr(self, parts[0])
        if parts[0] == "environments" and len(parts) > 1 and parts[1] in table:
            node["environments"] = dict.fromkeys(table)
            node["environments"][parts[1]] = T.as_toml_dict(table[parts[1]])
        else:
            node[parts[0]] = T.as_toml_dict(table)
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


# The Config per (path, file content, overrides, environment): bootstrap.toml is read and checked once per
# process however many plugins and module_utils ask for it. A Config is immutable, so every caller shares it.
_CACHE = {}


def clear_cache():
    _CACHE.clear()


def load(path=None, environ=None, environment=None, base_dir=None, playbook_dir=None):
    """Read, validate and normalise bootstrap.toml; raise ConfigKeyError on any problem."""
    environ = os.environ if environ is None else environ
    path = resolve_path(path, environ, base_dir, playbook_dir)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(S.MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigKeyError(
            path,
            None,
            "a readable bootstrap.toml",
            detail=f"{exc.strerror}; set BOOTSTRAP_CONFIG or run from the repository root",
        )
    if len(raw) > S.MAX_FILE_BYTES:
        raise ConfigKeyError(path, None, "a file of at most %d bytes" % S.MAX_FILE_BYTES)
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
    return cached


def _parse(text, path):
    """The TOML document of ``text`` (a dict), or ConfigKeyError."""
    if tomllib is None:  # pragma: no cover
        raise ConfigKeyError(path, None, "Python 3.11 or newer (tomllib)")
    if not isinstance(text, str):
        raise ConfigKeyError(path, None, "TOML text", text)
    if len(text) > S.MAX_FILE_BYTES:
        raise ConfigKeyError(path, None, "a file of at most %d bytes" % S.MAX_FILE_BYTES)
    text = text[1:] if text.startswith("\ufeff") else text  # a UTF-8 byte order mark is harmless
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigKeyError(path, None, "valid TOML", detail=str(exc))
    except RecursionError:  # deeper than the interpreter's recursion limit lets tomllib read
        data = None
    if data is None or _depth(data) > S.MAX_DEPTH:
        raise ConfigKeyError(
            path,
            None,
            "valid TOML of bounded depth",
            detail="arrays or tables are nested too deeply to read (bootstrap.toml needs at most 5 levels)",
        )
    return data


def _depth(data):
    """How deep arrays and tables nest in ``data`` (a table: 1), walked without recursion."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def _check_top_level(raw, ctx):
    """The known tables, [bootstrap], [charts] and at least one (at most 64) [environments.<name>]."""
    envs_raw = raw.get("environments")
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


def _check_tables(raw, ctx):
    """Every table checked and normalised: plain dicts of TOML keys, every key present."""
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
    for name, table in raw["environments"].items():
        key = f"environments.{name[:80]}"
        N.DNS_LABEL_NAME(name, ctx, key + " (the environment name, also a label value and part of resource names)")
        env = _ENVIRONMENT(table, ctx, key)
        _check_environment(env, ctx, key, data)
        data["environments"][name] = env
    if boot["default-environment"] not in data["environments"]:
        ctx.fail("bootstrap.default-environment", "the name of a defined environment", boot["default-environment"])
    return data


def loads(text, path=DEFAULT_FILE, environ=None, environment=None, root=None):
    """Validate TOML text. ``environment`` (else $KROPS_PROFILE, else default-environment) is selected.

    ``root`` is the repository root repository paths must stay in (default: the folder of ``path``).
    """
    environ = {} if environ is None else environ
    raw = _parse(text, path)
    envs_raw = raw.get("environments")
    names = [n[:80] for n in envs_raw] if isinstance(envs_raw, dict) else []
    root = root or os.path.dirname(os.path.abspath(path))
    ctx = S.Ctx(path, names, root)
    _check_top_level(raw, ctx)
    data = _check_tables(raw, ctx)
    _apply_overrides(data, environ, path, names, root)
    selected = environment or environ.get("KROPS_PROFILE") or data["bootstrap"]["default-environment"]
    if selected not in data["environments"]:
        source = "the requested environment" if environment else "KROPS_PROFILE"
        raise ConfigKeyError(
            path,
            f"environments.{str(selected)[:80]}",
            f"a defined environment ({source})",
            environments=names,
            detail=f"unknown environment {str(selected)[:80]!r}",
        )
    return Config(
        path=path,
        selected=selected,
        bootstrap=T.build(T.Bootstrap, data["bootstrap"]),
        charts=T.build(T.Charts, data["charts"]),
        teardown=T.build(T.Teardown, data["teardown"]),
        environments=types.MappingProxyType(
            {name: T.build(T.Environment, env) for name, env in data["environments"].items()}
        ),
    )
