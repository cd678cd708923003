# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""What the pivot phases share: the declared state of a run, errors, binaries, manifests, CAPI listings."""

from __future__ import annotations

import os
import re
import shutil
import time

try:
    import yaml
except ImportError:  # pragma: no cover - PyYAML ships with ansible-core
    yaml = None

from ansible_collections.krops.platform.plugins.module_utils import cli
from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils.errors import PivotError  # the error the phases raise
from ansible_collections.krops.platform.plugins.module_utils import capi
from ansible_collections.krops.platform.plugins.module_utils import kube
from ansible_collections.krops.platform.plugins.module_utils.oci import registry_serves  # noqa: F401  # pylint: disable=unused-import
from ansible_collections.krops.platform.plugins.module_utils import profiles
from ansible_collections.krops.platform.plugins.module_utils import render
from ansible_collections.krops.platform.plugins.module_utils import steps

API_ERRORS = kube.API_ERRORS

BLOCK_MOVE = "clusterctl.cluster.x-k8s.io/block-move"
PAUSED_ANNOTATION = "cluster.x-k8s.io/paused"

CHARTS = {
    # bootstrap.toml [charts] key -> (release, chart, repository, namespace, non-secret values)
    "cert-manager": (
        "cert-manager",
        "cert-manager",
        "https://charts.jetstack.io",
        "cert-manager",
        ["crds.enabled=true"],
    ),
    "capi-operator": (
        "capi-operator",
        "cluster-api-operator",
        "https://kubernetes-sigs.github.io/cluster-api-operator",
        "capi-operator-system",
        ["cert-manager.enabled=false"],
    ),
}


class SubstitutionError(PivotError):
    """A manifest references ${VAR}s that no variable source defines."""

    def __init__(self, path, names):
        self.path = path
        self.names = list(names)
        super().__init__(
            "prepare",
            "{}: unresolved variables: {}; define them in a ConfigMap of the source's flux namespace "
            "or in pivot-manifest-vars of the environment in bootstrap.toml, or give a default with ${{NAME:=value}}".format(
                path, ", ".join(self.names)
            ),
        )


# --- external binaries (through module_utils.cli) ------------------------------------


def find_binary(name, explicit=None):
    """Absolute path of a binary: explicit path, else PATH; PivotError naming the tool when missing."""
    try:
        return cli.find_binary(name, explicit)
    except cli.ToolMissing as exc:
        raise PivotError(None, f"{exc.message}; pass {name}_binary to name it")


def run_command(argv, env=None, stdin=None, timeout=3600):
    """(rc, stdout, stderr) of argv (argv[0] an absolute path). Secrets travel in env or stdin, never in argv."""
    tool = cli.Cli(os.path.basename(argv[0]), binary=argv[0])
    try:
        result = tool.run(argv[1:], stdin=stdin, env=env, check=False, timeout=timeout)
    except cli.CliError as exc:
        return 124 if exc.rc is None else exc.rc, exc.stdout or "", exc.message
    return result.rc, result.stdout, result.stderr


def command_failed(phase, argv, rc, out, err, what):
    tail = (err or out or "").strip().splitlines()[-5:]
    return PivotError(
        phase, "{} failed: `{}` exited {}: {}".format(what, " ".join(argv), rc, " | ".join(tail) or "(no output)")
    )


# --- ${VAR} substitution ------------------------------------------------------------


def substitute(text, variables, path="<manifest>"):
    """Replace ${VAR} and ${VAR:=default} (also ${VAR:-default}); $${VAR} stays literal.

    Raises SubstitutionError listing every unresolved name (in order of appearance) and the file.
    """
    try:
        return render.substitute_text(text, variables, strict=True)
    except render.UnresolvedVariables as exc:
        raise SubstitutionError(path, exc.names)


def load_documents(path, variables=None, phase="prepare"):
    """YAML documents of a manifest file (substituted when variables is not None)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise PivotError(phase, f"manifest {path} cannot be read: {exc.strerror}; check repo_root and bootstrap.toml")
    return parse_documents(text, path, variables, phase)


def parse_documents(text, path, variables=None, phase="prepare"):
    """YAML documents of a manifest's text (a file, or what sops decrypted from it), substituted when
    variables is not None, as Flux substitutes after decrypting."""
    if variables is not None:
        text = substitute(text, variables, path)
    try:
        docs = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as exc:
        raise PivotError(phase, f"manifest {path} is not valid YAML: {str(exc).splitlines()[0]}")
    for doc in docs:
        if (
            not isinstance(doc, dict)
            or not doc.get("apiVersion")
            or not doc.get("kind")
            or not (doc.get("metadata") or {}).get("name")
        ):
            raise PivotError(phase, f"manifest {path} holds a document without apiVersion, kind and metadata.name")
    return docs


# --- Kubernetes helpers (the verbs themselves are in module_utils.kube) -------------

ident = kube.identity


def apply_object(client, obj, check_mode, where="target"):
    """kube.apply on the ``where`` cluster; PivotError (prepare) naming the object when it fails."""
    try:
        return kube.apply(client, obj, check_mode, where=f"the {where} cluster")
    except kube.KubeError as exc:
        raise PivotError("prepare", str(exc))


def capi_objects(client, namespace, where="source", phase="move"):
    """{key: object} of every CAPI object in namespace, plus the Secrets named after its Clusters."""
    found = {}
    try:
        for res in capi.capi_resources(client):
            for item in res.get(namespace=namespace).items:
                obj = item.to_dict()
                found[kube.object_key(obj)] = obj
        clusters = [k[3] for k in found if k[1] == "Cluster" and k[0] == "cluster.x-k8s.io"]
        if clusters:
            for item in kube.resource(client, "v1", "Secret").get(namespace=namespace).items:
                obj = item.to_dict()
                name = obj["metadata"]["name"]
                if any(name.startswith(c + "-") for c in clusters):
                    found[kube.object_key(obj)] = obj
    except (kube.KubeError,) + API_ERRORS as exc:
        raise PivotError(
            phase,
            f"cannot list the CAPI objects in namespace {namespace} on the {where} cluster: {kube.error_text(exc)}",
        )
    return found


def parse_version(text):
    """Comparable tuple for v1.9.3, 1.10.0-rc.1 (pre-releases sort before the release)."""
    match = re.match(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:-(.+))?$", str(text or "").strip())
    if not match:
        return None
    major, minor, patch, pre = match.groups()
    return (int(major), int(minor or 0), int(patch or 0), 0 if pre else 1, pre or "")


# --- the pivot state ----------------------------------------------------------------


class PivotState:
    """Options, configuration and clients of one pivot run: every field a phase sets or reads is declared here."""

    def __init__(self, config, options, check_mode=False, clock=time.monotonic):
        self.config = config
        self.options = options
        self.check_mode = check_mode
        self.clock = clock
        self.boot = config.bootstrap
        self.env_name = options.get("environment") or config.selected
        self.env = config.environment(self.env_name)
        self.profile = profiles.of(self.env)  # what the platform needs (local registry, LB rewrite, credentials)
        self.namespace = self.boot.mgmt_namespace
        self.mgmt = self.env.mgmt_cluster
        self.repo_root = options.get("repo_root") or os.path.dirname(os.path.abspath(config.path))
        self.source = None
        self.target = None
        self.target_kubeconfig = os.path.expanduser(options.get("target_kubeconfig") or self.boot.mgmt_kubeconfig)
        self.target_context = self.boot.mgmt_context
        self.connect_kubeconfig = None  # the file used to reach the target (temporary in check mode)
        self._tempdir = None
        self.variables = None  # prepare: ${VAR} values for the manifests
        self.already_moved = False  # preconditions/move: nothing is left on the source
        self.mgmt_deadline = None  # preconditions: when the wait for the management cluster ends (export reuses it)
        self.objects = None  # preflight: {key: object} the move carries
        self.suspended = []  # move: Kustomizations suspended on the source (rollback resumes them)
        self.request_timeout = options.get("request_timeout")
        # The step budget of this run (None: wait as long as each timeout allows) and the time earlier steps spent on
        # each wait: the engine's resume state (steps.STEP_STATE), which the action plugin sets.
        self.waits = steps.Waits(options.get("_wait_budget"), options.get("_resume"), cut=kube.WaitTimeout, clock=clock)
        self.result = {
            "changed": False,
            "phase_reached": None,
            "moved": [],
            "excluded": [],
            "fallbacks": [],
            "target_kubeconfig": self.target_kubeconfig,
            "target_context": self.target_context,
            "providers": [],
            "charts": [],
            "applied": [],
            "suspended": [],
            "progress": [],
            "environment": self.env_name,
            "already_moved": False,
        }

    def connect(self, kubeconfig, context, source=False):
        """A client of one of the two clusters, with the run's request timeout (and, for the source, the auth options)."""
        options = {"request_timeout": self.request_timeout}
        if source:
            options.update({k: self.options.get(k) for k in kube.KUBE_ARGS if k not in ("kubeconfig", "context")})
        return kube.connect(kubeconfig, context, **options)

    def timeout(self, name):
        """Seconds of the module option <name>_timeout, else its one default (config.TIMEOUTS)."""
        return self.options.get(f"{name}_timeout") or krops_config.TIMEOUTS[name]

    # progress lines are returned (the module has no live output)
    def say(self, line):
        self.result["progress"].append(line)

    def changed(self):
        self.result["changed"] = True

    def path(self, relative):
        return relative if os.path.isabs(relative) else os.path.join(self.repo_root, relative)

    def cleanup(self):
        if self._tempdir:
            shutil.rmtree(self._tempdir, ignore_errors=True)
            self._tempdir = None

    def source_kubeconfig(self):
        return kube.resolve_auth(self.options.get("source_kubeconfig"), None)[0] or os.path.expanduser("~/.kube/config")

    def source_context(self):
        return self.options.get("source_context") or self.boot.kind_context

    def remaining(self, deadline):
        return max(1.0, deadline - self.clock())

    @property
    def pending(self):
        """The steps.Pending of a wait that ran out of the step budget (None until one did): the phases stop there."""
        return self.waits.pending

    def wait_left(self, key, timeout):
        """Seconds the wait ``key`` may still take: its timeout less the time earlier steps spent on it."""
        return self.waits.left(key, timeout)

    def budgeted_wait(self, key, phase, title, total, seconds, watch, describe):
        """watch(timeout) for a wait that may still take ``seconds`` (of ``total``, its whole timeout); None when
        it ended in time.

        Without a step budget, or when the budget left covers ``seconds``, this is watch(seconds) and
        kube.WaitTimeout propagates as in a single call. Otherwise the wait stops when the budget runs out and
        returns (and keeps in self.pending) a steps.Pending, a value, with describe(state) and the time spent on it
        so far: the caller returns at once, and so does each caller up to the phase (steps.Waits.wait).
        """
        return self.waits.wait(key, total, seconds, watch, describe, step=phase, title=title)


# --- the management cluster, when it is already reachable ----------------------------------


def _adopt_target(pv, accepts):
    """Connect to an already exported target kubeconfig and make it pv.target when ``accepts(client)``; the
    client, or None when there is no such kubeconfig, the API answers an error or ``accepts`` is false."""
    if not os.path.exists(pv.target_kubeconfig):
        return None
    try:
        client = pv.connect(pv.target_kubeconfig, pv.target_context)
        if not accepts(client):
            return None
    except (kube.KubeError,) + API_ERRORS:
        return None
    pv.target = client
    pv.connect_kubeconfig = pv.target_kubeconfig
    return client


def _reads_default_namespace(client):
    client.resources.get(api_version="v1", kind="Namespace").get(name="default")
    return True


def existing_target(pv):
    """A client for an already exported target kubeconfig that answers; None otherwise."""
    return _adopt_target(pv, _reads_default_namespace)


def mgmt_on_target(pv):
    """Connect to an already exported target kubeconfig; True when it lists the management Cluster."""

    def lists_mgmt(client):
        res = capi.cluster_resource(client)
        return (
            res is not None and kube.get(client, capi.api_version_of(res), "Cluster", pv.mgmt, pv.namespace) is not None
        )

    return _adopt_target(pv, lists_mgmt) is not None


def registry_url(pv):
    return pv.options.get("registry_url") or "http://127.0.0.1:%d" % pv.boot.registry_port
