# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The Flux handoff: Flux Operator, run tags, sync secrets, the FluxInstance and the readiness wait.

Bootstrap (on kind) and the pivot (on the management cluster) hand the cluster to Flux
the same way:

1. the Flux Operator chart, pinned in bootstrap.toml ([charts] flux-operator), installed
   with ``helm upgrade --install`` unless the pinned release is already deployed;
2. the run tags ConfigMap (``krops-run``: KROPS_RUN_ID, KROPS_REVISION, KROPS_EXPIRES_AT,
   KROPS_RUN_KIND), reused when present so a re-run changes nothing;
3. the sync secrets: ``flux-github-pat`` (username, password) for Git sync and
   ``sops-age`` (key ``age.agekey``) in every namespace that decrypts;
4. the FluxInstance ``flux`` (created with the Kubernetes API, not the flux-instance chart);
5. an event-driven wait: the FluxInstance Ready, then every Kustomization of the Flux
   namespace Ready, reported in dependsOn order.

Importable without Ansible; :func:`handoff` is the single entry point of the module.
"""

from __future__ import annotations

import base64
import datetime
import json
import math
import os

from ansible_collections.krops.platform.plugins.module_utils import cli as krops_cli
from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils.errors import FluxError  # the error the handoff raises
from ansible_collections.krops.platform.plugins.module_utils import flux_status
from ansible_collections.krops.platform.plugins.module_utils import kube
from ansible_collections.krops.platform.plugins.module_utils import ownership
from ansible_collections.krops.platform.plugins.module_utils import profiles
from ansible_collections.krops.platform.plugins.module_utils import steps


OPERATOR_RELEASE = "flux-operator"
OPERATOR_CHART = "oci://ghcr.io/controlplaneio-fluxcd/charts/flux-operator"
OPERATOR_HELM_TIMEOUT = "10m"

AGE_KEY = "age.agekey"
RUN_TAG_KEYS = ownership.RUN_TAG_KEYS
MANAGED_BY = {"app.kubernetes.io/managed-by": "krops"}

# The distribution version comes from bootstrap.toml (bootstrap.flux-version), the same on the
# management and workload clusters; validate checks the workload FluxInstances against it.
DISTRIBUTION_REGISTRY = "ghcr.io/fluxcd"
COMPONENTS = ["source-controller", "kustomize-controller", "helm-controller", "notification-controller"]
CLUSTER = {
    "type": "kubernetes",
    "size": "small",
    "multitenant": False,
    "networkPolicy": True,
    "domain": "cluster.local",
}
OCI_INSECURE_PATCH = "- op: add\n  path: /spec/insecure\n  value: true\n"

SCOPES = ("all", "secrets", "wait")
# The handoff's two steps for the stepped wait (steps.Waits): a step that resumes has the setup done and only waits.
SETUP, WAIT_KEY = "setup", "flux"


# --- plan ---------------------------------------------------------------------------


def git_ref(ref):
    """'main' -> 'refs/heads/main'; a full ref (refs/...) is kept."""
    return ref if ref.startswith("refs/") else f"refs/heads/{ref}"


def in_cluster_registry(boot):
    """<registry-name>:<registry-container-port>: the local registry as pods on the kind network reach it."""
    return f"{boot.registry_name}:{boot.registry_container_port}"


def sync_settings(cfg, environment, sync_url=None, sync_ref=None):
    """{kind, url, ref, path, pull_secret, insecure, flux_version} of the FluxInstance sync for an environment."""
    boot = cfg.bootstrap
    env = cfg.environment(environment)
    if krops_config.git_url_has_credentials(sync_url):
        raise FluxError("sync_url " + krops_config.GIT_URL_CREDENTIALS)
    if env.sync == "oci":
        url = sync_url or f"oci://{in_cluster_registry(boot)}/{boot.oci_repository}"
        return {
            "kind": "OCIRepository",
            "url": url,
            "ref": sync_ref or boot.oci_tag,
            "path": env.sync_path,
            "pull_secret": None,
            # The local registry speaks plain HTTP; any other OCI URL keeps TLS.
            "insecure": url.startswith(f"oci://{in_cluster_registry(boot)}/"),
            "flux_version": boot.flux_version,
        }
    return {
        "kind": "GitRepository",
        "url": sync_url or boot.git_url,
        "ref": git_ref(sync_ref or boot.git_branch),
        "path": env.sync_path,
        "pull_secret": boot.github_pat_secret,
        "insecure": False,
        "flux_version": boot.flux_version,
    }


def fluxinstance_spec(sync):
    """The FluxInstance spec (fluxcd.controlplane.io/v1) krops installs.

    Keys set to None must be absent: they are removed by the merge patch when a previous
    run set them (for example the pull secret after a switch from Git to OCI).
    """
    insecure = sync["kind"] == "OCIRepository" and sync.get("insecure")
    return {
        "distribution": {"version": sync["flux_version"], "registry": DISTRIBUTION_REGISTRY},
        "components": list(COMPONENTS),
        "cluster": dict(CLUSTER),
        "sync": {
            "kind": sync["kind"],
            "url": sync["url"],
            "ref": sync["ref"],
            "path": sync["path"],
            "pullSecret": sync["pull_secret"],
        },
        "kustomize": {"patches": [{"target": {"kind": "OCIRepository"}, "patch": OCI_INSECURE_PATCH}]}
        if insecure
        else None,
    }


def fluxinstance_manifest(namespace, sync):
    return {
        "apiVersion": flux_status.FLUX_API,
        "kind": flux_status.FLUX_KIND,
        "metadata": {"name": flux_status.FLUX_NAME, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "spec": _prune_none(fluxinstance_spec(sync)),
    }


def _prune_none(value):
    if isinstance(value, dict):
        return {k: _prune_none(v) for k, v in value.items() if v is not None}
    return value


def _differs(desired, current):
    """True when current does not hold desired (dicts compared as subsets; None = absent)."""
    if isinstance(desired, dict):
        if not isinstance(current, dict):
            return any(v is not None for v in desired.values())
        return any(_differs(v, current.get(k)) for k, v in desired.items())
    return desired != current


# --- run tags -----------------------------------------------------------------------


def utc_now():
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


def run_tags(existing, overrides, profile, ttl, now=None):
    """The four run tags: overrides win, then the existing ConfigMap's, then generated ones.

    ttl is the bootstrap.toml run-ttl ('24h', 'none'); 'none' gives KROPS_EXPIRES_AT=none.
    """
    now = now or utc_now()
    existing = {k: v for k, v in (existing or {}).items() if k in RUN_TAG_KEYS and v}
    overrides = {k: str(v) for k, v in (overrides or {}).items() if v is not None and str(v) != ""}
    # the GCP label forms (the ConfigMap the pivot hands on carries them) are derived again, not taken
    overrides = {k: v for k, v in overrides.items() if k not in ownership.GCP_RUN_LABEL_VARS.values()}
    unknown = sorted(set(overrides) - set(RUN_TAG_KEYS))
    if unknown:
        raise FluxError("run_tags: unknown key {}; expected only {}".format(unknown[0], ", ".join(RUN_TAG_KEYS)))
    if ttl == "none":
        expires = "none"
    else:
        seconds = krops_config.parse_duration(ttl) or 86400
        expires = (now + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    generated = {
        "KROPS_RUN_ID": "{}-{}".format(profile, now.strftime("%Y%m%d-%H%M%S")),
        "KROPS_REVISION": "unknown",
        "KROPS_EXPIRES_AT": expires,
        "KROPS_RUN_KIND": "manual",
    }
    tags = {}
    for key in RUN_TAG_KEYS:
        tags[key] = overrides.get(key) or existing.get(key) or generated[key]
    return tags


# --- cluster writes -----------------------------------------------------------------


class _Writer:
    """Idempotent create/patch of namespaced objects; records actions; writes nothing in check mode."""

    def __init__(self, client, check_mode, target):
        self.client = client
        self.check_mode = check_mode
        self.target = target
        self.actions = []
        self.changed = False
        self.diff = {"before": {}, "after": {}}

    def _record(self, action):
        self.actions.append(("would " if self.check_mode else "") + action)
        self.changed = True

    def namespace(self, name):
        if kube.get(self.client, "v1", "Namespace", name) is not None:
            return
        self._record(f"create Namespace {name}")
        if not self.check_mode:
            self._call(
                lambda: kube.resource(self.client, "v1", "Namespace").create(
                    body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
                ),
                f"create Namespace {name}",
                conflict_ok=True,
            )

    def config_map(self, namespace, name, data):
        current = kube.get(self.client, "v1", "ConfigMap", name, namespace)
        before = (current or {}).get("data") or {}
        key = f"configmap/{namespace}/{name}"
        if current is not None and before == data:
            return
        self.diff["before"][key] = before if current is not None else None
        self.diff["after"][key] = dict(data)
        self._write(
            current,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)},
                "data": dict(data),
            },
            {"data": _replace_map(before, data)},
            f"ConfigMap {namespace}/{name}",
        )

    def secret(self, namespace, name, values):
        """values: {key: text}; data is compared base64-encoded and never reported."""
        data = {k: base64.b64encode(v.encode("utf-8")).decode("ascii") for k, v in values.items()}
        current = kube.get(self.client, "v1", "Secret", name, namespace)
        before = (current or {}).get("data") or {}
        if current is not None and before == data:
            return
        key = f"secret/{namespace}/{name}"
        self.diff["before"][key] = sorted(before) if current is not None else None
        self.diff["after"][key] = "keys {} (values hidden)".format(", ".join(sorted(data)))
        self._write(
            current,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)},
                "data": data,
            },
            {"data": _replace_map(before, data)},
            f"Secret {namespace}/{name}",
            kind="Secret",
        )

    def fluxinstance(self, namespace, sync):
        manifest = fluxinstance_manifest(namespace, sync)
        desired = fluxinstance_spec(sync)
        current = kube.get(self.client, flux_status.FLUX_API, flux_status.FLUX_KIND, flux_status.FLUX_NAME, namespace)
        if current is not None and not _differs(desired, current.get("spec") or {}):
            return manifest
        key = f"fluxinstance/{namespace}/{flux_status.FLUX_NAME}"
        self.diff["before"][key] = (current or {}).get("spec")
        self.diff["after"][key] = manifest["spec"]
        self._write(
            current,
            manifest,
            {"spec": desired},
            f"FluxInstance {namespace}/{flux_status.FLUX_NAME}",
            api_version=flux_status.FLUX_API,
            kind=flux_status.FLUX_KIND,
        )
        return manifest

    def _write(self, current, body, patch, what, api_version="v1", kind=None):
        kind = kind or body["kind"]
        verb = "create" if current is None else "update"
        self._record(f"{verb} {what}")
        if self.check_mode:
            return
        try:
            res = kube.resource(self.client, api_version, kind)
        except kube.KubeError as exc:
            raise FluxError(
                f"cannot {verb} {what} on {self.target}: {exc}; install the Flux Operator first (install_operator=true)"
            )
        meta = body["metadata"]
        if current is None:
            self._call(lambda: res.create(body=body, namespace=meta["namespace"]), f"{verb} {what}")
        else:
            self._call(
                lambda: res.patch(
                    body=patch,
                    name=meta["name"],
                    namespace=meta["namespace"],
                    content_type="application/merge-patch+json",
                ),
                f"{verb} {what}",
            )

    def _call(self, func, what, conflict_ok=False):
        try:
            return func()
        except kube.ApiException as exc:
            if conflict_ok and getattr(exc, "status", None) == 409:
                return None
            raise FluxError(f"cannot {what} on {self.target}: {kube.error_text(exc)}")


def _replace_map(before, after):
    """A merge patch turning map before into map after (removed keys set to None)."""
    patch = {k: None for k in before if k not in after}
    patch.update(after)
    return patch


# --- operator -----------------------------------------------------------------------


def operator_status(helm, namespace, kube_args):
    """(deployed_chart_version or None, status) of the flux-operator release."""
    result = helm.run(
        ["list", "--namespace", namespace, "--filter", f"^{OPERATOR_RELEASE}$", "--output", "json"] + kube_args
    )
    text = (result.stdout or "").strip()
    if not text:
        return None, None
    try:
        releases = json.loads(text)
    except ValueError:
        releases = None
    if not isinstance(releases, list):
        raise FluxError(f"`{result.command}` printed something that is not a JSON list of releases: {text[:200]}")
    for release in releases:
        if isinstance(release, dict) and release.get("name") == OPERATOR_RELEASE:
            chart = release.get("chart") or ""
            prefix = OPERATOR_RELEASE + "-"
            return (chart[len(prefix) :] if chart.startswith(prefix) else chart), release.get("status")
    return None, None


def install_operator(helm, namespace, version, kube_args, writer):
    """helm upgrade --install the pinned flux-operator unless it is already deployed at that version."""
    current, status = operator_status(helm, namespace, kube_args)
    if current == version and status == "deployed":
        return {"release": OPERATOR_RELEASE, "version": version, "changed": False}
    what = "{} Flux Operator chart {} (release {} in {}{})".format(
        "install" if current is None else "upgrade",
        version,
        OPERATOR_RELEASE,
        namespace,
        "" if current is None else f", was {current} {status}",
    )
    writer._record(what)
    if not writer.check_mode:
        helm.run(
            [
                "upgrade",
                "--install",
                OPERATOR_RELEASE,
                OPERATOR_CHART,
                "--version",
                version,
                "--namespace",
                namespace,
                "--create-namespace",
                "--wait",
                "--timeout",
                OPERATOR_HELM_TIMEOUT,
            ]
            + kube_args
        )
    return {"release": OPERATOR_RELEASE, "version": version, "changed": True, "previous": current}


def helm_kube_args(kubeconfig, context):
    kubeconfig, context = kube.resolve_auth(kubeconfig, context)
    args = []
    if kubeconfig:
        args += ["--kubeconfig", kubeconfig]
    if context:
        args += ["--kube-context", context]
    return args


# --- entry point --------------------------------------------------------------------


def default_timeout(cfg, environment):
    return profiles.reconcile_timeout(cfg, cfg.environment(environment))


def read_age_key(path):
    path = os.path.expanduser(path)
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise FluxError(
            f"cannot read the age key file {path}: {exc.strerror}; create it with `age-keygen -o {path}` or set age_key_file"
        )
    if "AGE-SECRET-KEY-" not in text:
        raise FluxError(
            f"the age key file {path} holds no AGE-SECRET-KEY- line; it must be an age identity file "
            "(age-keygen output)"
        )
    return text


def handoff(params, check_mode=False, helm=None, environ=None):
    """Run the handoff described by the module parameters; return the module result.

    Raises config.ConfigError, kube.KubeError, cli.CliError or FluxError (whose ``result``
    carries the partial result, e.g. the readiness table on timeout).
    """
    environ = os.environ if environ is None else environ
    cfg = krops_config.load(params.get("config_file"), environ=environ, environment=params.get("environment"))
    environment = cfg.selected
    boot = cfg.bootstrap
    env = cfg.environment(environment)
    namespace = boot.flux_namespace
    scope = params.get("scope") or "all"
    resume = params.get("_resume") or {}  # the engine's resume state of a pending earlier step (steps.Waits)
    target = kube.describe_target(params.get("kubeconfig"), params.get("context"))
    total = params.get("wait_timeout") or default_timeout(cfg, environment)

    result = {
        "changed": False,
        "environment": environment,
        "actions": [],
        "run_tags": {},
        "fluxinstance": {"name": flux_status.FLUX_NAME, "ready": False, "reason": "", "message": ""},
        "kustomizations": [],
        "ready": False,
        "wait_timeout": total,
    }
    client = kube.connect(params.get("kubeconfig"), params.get("context"))
    writer = _Writer(client, check_mode, target)

    if SETUP not in (resume.get("done") or ()) and scope in ("all", "secrets"):
        _setup(params, cfg, env, environment, namespace, scope, client, writer, result, helm, target)
        result["changed"] = writer.changed
        result["actions"] = writer.actions
        result["diff"] = writer.diff
    if check_mode or scope == "secrets" or not params.get("wait", True):
        if scope != "secrets" and not check_mode:
            flux_status.observe(client, namespace, result)
        return result

    waits = steps.Waits(params.get("_wait_budget"), resume, cut=kube.WaitTimeout)
    waits.done = [SETUP]  # a step that resumes only waits
    try:
        if _wait(client, namespace, total, waits, result, params.get("_wait_budget")):
            return _finish(waits.pause(result))
        _held(result, namespace, target)
    except kube.WaitTimeout:
        raise FluxError(flux_status.timeout_message(result, total, target, namespace), _finish(result))
    except FluxError as exc:
        raise FluxError(flux_status.stalled_message(exc, _finish(result), target, namespace), _finish(result))
    except kube.KubeError as exc:
        raise FluxError(f"waiting for Flux on {target} failed: {exc}", _finish(result))
    return _finish(result)


def _wait(client, namespace, total, waits, result, budget):
    """Wait for Flux within what is left of ``total``; a steps.Pending when the step's ``budget`` ran out first.

    A step whose budget covers all that is left (whole seconds) is final: its timeout fails as a single call's."""
    seconds = max(1, int(math.ceil(waits.left(WAIT_KEY, total))))
    return waits.wait(
        WAIT_KEY,
        total,
        seconds,
        lambda limit: flux_status.wait_ready(client, namespace, limit, result, progress_every=max(limit, 1)),
        lambda state: flux_status.summary(result).splitlines()[0],
        final=budget is None or budget >= seconds,
        title="Flux",
    )


def _held(result, namespace, target):
    """Ready unless Kustomizations are held by an interrupted pivot, which are named in a warning."""
    result["held_by_pivot"] = [r["name"] for r in result["kustomizations"] if r.get("held")]
    result["ready"] = not result["held_by_pivot"]
    if result["held_by_pivot"]:
        result["warnings"] = [
            "{} Kustomizations of {} on {} are suspended by an interrupted pivot ({}={}): {}; not waited for. "
            "Run the pivot again: it completes the move (or resumes them on rollback)".format(
                len(result["held_by_pivot"]),
                namespace,
                target,
                kube.SUSPENDED_BY,
                kube.PIVOT_SUSPENDER,
                ", ".join(result["held_by_pivot"]),
            )
        ]


def _finish(result):
    result["kustomizations"] = flux_status.public_rows(result.get("kustomizations"))
    return result


def _setup(params, cfg, env, environment, namespace, scope, client, writer, result, helm, target):
    boot = cfg.bootstrap
    sync = sync_settings(cfg, environment, params.get("sync_url"), params.get("sync_ref"))
    result["sync"] = dict(sync)
    if scope == "all" and params.get("install_operator", True):
        helm = helm or krops_cli.Cli("helm", binary=params.get("helm_binary"))
        result["operator"] = install_operator(
            helm,
            namespace,
            cfg.charts.flux_operator,
            helm_kube_args(params.get("kubeconfig"), params.get("context")),
            writer,
        )
    # Namespaces (the chart creates the Flux one; the pivot may skip the chart).
    sops_namespaces = params.get("sops_namespaces")
    if sops_namespaces is None:
        sops_namespaces = [namespace, boot.mgmt_namespace]
    sops_namespaces = list(dict.fromkeys([namespace] + list(sops_namespaces)))
    age_text = read_age_key(params["age_key_file"]) if params.get("age_key_file") else None
    for ns in dict.fromkeys([namespace] + (sops_namespaces if age_text else [])):
        writer.namespace(ns)

    existing = kube.get(client, "v1", "ConfigMap", boot.run_configmap, namespace)
    tags = run_tags((existing or {}).get("data"), params.get("run_tags"), environment, boot.run_ttl)
    tags.update(ownership.gcp_run_labels(tags))  # GCP label values allow no upper case, ":" or "@"
    result["run_tags"] = tags
    writer.config_map(namespace, boot.run_configmap, tags)

    if sync["pull_secret"]:
        token = params.get("github_token")
        if not token:
            raise FluxError(
                "environment {} syncs from Git ({}) and needs a GitHub token for Secret {}/{}: "
                "set github_token (or the GITHUB_TOKEN environment variable)".format(
                    environment, sync["url"], namespace, sync["pull_secret"]
                )
            )
        writer.secret(namespace, sync["pull_secret"], {"username": boot.github_user, "password": token})
    if age_text:
        for ns in sops_namespaces:
            writer.secret(ns, boot.sops_age_secret, {AGE_KEY: age_text})
    result["sops_namespaces"] = sops_namespaces if age_text else []
    if scope == "all":
        writer.fluxinstance(namespace, sync)
