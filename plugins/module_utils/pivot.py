# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The pivot: move the management plane from the kind cluster into the self-managed cluster.

Phases, each a function over the pivot state (two DynamicClients, bootstrap.toml, options):

0. preconditions  the source is the kind context; (local-host) the registry serves; the
                  management Cluster exists (on the source, or already on the target).
1. export         Secret <mgmt>-kubeconfig exported 0600, context renamed, nodes Ready.
2. prepare        charts, provider manifests, pivot manifests (${VAR} substituted),
                  credentials and SOPS secrets on the target; providers Ready; versions.
3. preflight      every Cluster/Machine on the source movable; all reasons reported together.
4. move           Kustomizations suspended, ``clusterctl move``, verification, Clusters
                  unpaused on the target, move fallbacks; rollback on failure.

Failure semantics: phases 0-3 only read the source. A failure in phase 4 unpauses the
source's Clusters and resumes the Kustomizations the pivot suspended (kept suspended when
objects already left the source, so Flux cannot re-create them on kind), never deletes
anything on the target, and reports the partial object list. Re-running completes the move.

Long waits can be cut into bounded steps (option ``_wait_budget``, set by the action plugin
so that the controller shows progress): a wait whose budget runs out before its own timeout
ends the run with a "pending" result (``_krops_pending``, ``_krops_wait``) instead of an error,
and the next step re-runs the pivot from the start with the time already spent on each wait
(``_wait_spent``). Only the waits are cut, never a command (helm, clusterctl move).

Importable without Ansible; external binaries run through module_utils.cli (secrets only
through the environment or stdin).
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import os
import re
import shutil
import tempfile
import time
import urllib.parse

try:
    import yaml
    HAS_YAML = True
except ImportError:  # pragma: no cover - PyYAML ships with ansible-core
    HAS_YAML = False

from ansible_collections.krops.platform.plugins.module_utils import cli
from ansible_collections.krops.platform.plugins.module_utils import kube
from ansible_collections.krops.platform.plugins.module_utils import render

try:
    from kubernetes.dynamic.exceptions import ApiException as _ApiException
    from kubernetes.dynamic.resource import ResourceList as _ResourceList
    import urllib3
    _API_ERRORS = (_ApiException, urllib3.exceptions.HTTPError, OSError)
except ImportError:  # reported by kube.connect
    _ResourceList = ()
    _API_ERRORS = (OSError,)


PHASES = ("preconditions", "export", "prepare", "preflight", "move")

CAPI_GROUP_SUFFIX = "cluster.x-k8s.io"
# Groups of the cluster.x-k8s.io family that clusterctl move never moves.
NOT_MOVED_GROUPS = ("operator.cluster.x-k8s.io", "clusterctl.cluster.x-k8s.io", "runtime.cluster.x-k8s.io")
PROVIDER_GROUP = "operator.cluster.x-k8s.io"
PROVIDER_KINDS = ("CoreProvider", "BootstrapProvider", "ControlPlaneProvider", "InfrastructureProvider",
                  "AddonProvider", "IPAMProvider", "RuntimeExtensionProvider")
BLOCK_MOVE = "clusterctl.cluster.x-k8s.io/block-move"
PAUSED_ANNOTATION = "cluster.x-k8s.io/paused"
KUSTOMIZATION = ("kustomize.toolkit.fluxcd.io/v1", "Kustomization")

CHARTS = {
    # bootstrap.toml [charts] key -> (release, chart, repository, namespace, non-secret values)
    "cert-manager": ("cert-manager", "cert-manager", "https://charts.jetstack.io", "cert-manager",
                     ["crds.enabled=true"]),
    "capi-operator": ("capi-operator", "cluster-api-operator", "https://kubernetes-sigs.github.io/cluster-api-operator",
                      "capi-operator-system", ["cert-manager.enabled=false"]),
}


class PivotError(Exception):
    """A pivot phase failed; ``phase`` names it and ``result`` holds what was done so far."""

    def __init__(self, phase, message, result=None):
        super().__init__(message)
        self.phase = phase
        self.result = result or {}


class Pending(Exception):
    """A wait ran out of its step budget (not of its timeout); the action plugin runs the next step."""

    def __init__(self, key, phase, title, waited, total, state):
        super().__init__(state)
        self.info = {"key": key, "phase": phase, "phase_number": PHASES.index(phase), "title": title,
                     "waited": round(float(waited), 3), "total": int(total), "state": state}


class SubstitutionError(PivotError):
    """A manifest references ${VAR}s that no variable source defines."""

    def __init__(self, path, names):
        self.path = path
        self.names = list(names)
        super().__init__("prepare", "%s: unresolved variables: %s; define them in a ConfigMap of the source's flux namespace "
                         "or in pivot-manifest-vars of the environment in bootstrap.toml, or give a default with ${NAME:=value}"
                         % (path, ", ".join(self.names)))


# --- external binaries (through module_utils.cli) ------------------------------------

def find_binary(name, explicit=None):
    """Absolute path of a binary: explicit path, else PATH; PivotError naming the tool when missing."""
    try:
        return cli.find_binary(name, explicit)
    except cli.ToolMissing as exc:
        raise PivotError(None, "%s; pass %s_binary to name it" % (exc.message, name))


def run_command(argv, env=None, stdin=None, timeout=3600):
    """(rc, stdout, stderr) of argv (argv[0] an absolute path). Secrets travel in env or stdin, never in argv."""
    tool = cli.Cli(os.path.basename(argv[0]), binary=argv[0])
    try:
        result = tool.run(argv[1:], stdin=stdin, env=env, check=False, timeout=timeout)
    except cli.CliError as exc:
        return 124 if exc.rc is None else exc.rc, exc.stdout or "", exc.message
    return result.rc, result.stdout, result.stderr


def _command_failed(phase, argv, rc, out, err, what):
    tail = (err or out or "").strip().splitlines()[-5:]
    return PivotError(phase, "%s failed: `%s` exited %s: %s" % (what, " ".join(argv), rc, " | ".join(tail) or "(no output)"))


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
        raise PivotError(phase, "manifest %s cannot be read: %s; check repo_root and bootstrap.toml" % (path, exc.strerror))
    if variables is not None:
        text = substitute(text, variables, path)
    try:
        docs = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as exc:
        raise PivotError(phase, "manifest %s is not valid YAML: %s" % (path, str(exc).splitlines()[0]))
    for doc in docs:
        if not isinstance(doc, dict) or not doc.get("apiVersion") or not doc.get("kind") \
                or not (doc.get("metadata") or {}).get("name"):
            raise PivotError(phase, "manifest %s holds a document without apiVersion, kind and metadata.name" % path)
    return docs


# --- small Kubernetes helpers -----------------------------------------------------

def ident(obj):
    meta = obj.get("metadata") or {}
    return {"kind": obj.get("kind"), "namespace": meta.get("namespace") or "", "name": meta.get("name")}


def _key(obj):
    meta = obj.get("metadata") or {}
    group = obj.get("apiVersion", "").rpartition("/")[0]
    return (group, obj.get("kind"), meta.get("namespace") or "", meta.get("name"))


def _label(key):
    group, kind, namespace, name = key
    return "%s%s %s" % (kind, "." + group if group else "", "%s/%s" % (namespace, name) if namespace else name)


def _contains(have, want):
    """True when every field of want is present and equal in have (lists compared whole)."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(_contains(have.get(k), v) for k, v in want.items())
    return have == want


def _normalise_secret(obj):
    if obj.get("kind") == "Secret" and obj.get("apiVersion") == "v1" and obj.get("stringData"):
        obj = copy.deepcopy(obj)
        data = obj.setdefault("data", {}) or {}
        for k, v in obj.pop("stringData").items():
            data[k] = base64.b64encode(str(v).encode()).decode()
        obj["data"] = data
    return obj


def apply_object(client, obj, check_mode, where="target"):
    """Create or merge-patch obj; returns 'created', 'updated' or 'unchanged'. Never deletes."""
    obj = _normalise_secret(obj)
    obj = {k: v for k, v in obj.items() if k != "status"}
    try:
        res = kube.resource(client, obj["apiVersion"], obj["kind"])
    except kube.KubeError as exc:
        if check_mode:  # its CRD comes with a chart or provider that check mode does not install
            return "created"
        raise PivotError("prepare", "%s on the %s cluster: %s" % (_label(_key(obj)), where, exc))
    meta = obj.setdefault("metadata", {})
    namespace = (meta.get("namespace") or "default") if res.namespaced else None
    if namespace:
        meta["namespace"] = namespace
    existing = kube.get(client, obj["apiVersion"], obj["kind"], meta["name"], namespace)
    try:
        if existing is None:
            if not check_mode:
                if namespace:
                    ensure_namespace(client, namespace)
                res.create(body=obj, namespace=namespace)
            return "created"
        if _contains(existing, obj):
            return "unchanged"
        if not check_mode:
            res.patch(body=obj, name=meta["name"], namespace=namespace, content_type="application/merge-patch+json")
        return "updated"
    except _API_ERRORS as exc:
        raise PivotError("prepare", "cannot apply %s on the %s cluster: %s" % (_label(_key(obj)), where, kube.error_text(exc)))


def ensure_namespace(client, name):
    if kube.get(client, "v1", "Namespace", name) is None:
        kube.resource(client, "v1", "Namespace").create(body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def capi_resources(client, namespaced=True):
    """Served resources of the cluster.x-k8s.io family that clusterctl moves, one per kind (preferred version)."""
    chosen = {}
    for res in client.resources.search():
        if isinstance(res, _ResourceList) or "/" in (res.name or "") or not res.group:
            continue
        if not res.group.endswith(CAPI_GROUP_SUFFIX) or res.group in NOT_MOVED_GROUPS:
            continue
        if bool(res.namespaced) != namespaced or "list" not in (res.verbs or []):
            continue
        key = (res.group, res.kind)
        if key not in chosen or (res.preferred and not chosen[key].preferred):
            chosen[key] = res
    return [chosen[k] for k in sorted(chosen)]


def capi_objects(client, namespace, where="source", phase="move"):
    """{key: object} of every CAPI object in namespace, plus the Secrets named after its Clusters."""
    found = {}
    try:
        for res in capi_resources(client):
            for item in res.get(namespace=namespace).items:
                obj = item.to_dict()
                found[_key(obj)] = obj
        clusters = [k[3] for k in found if k[1] == "Cluster" and k[0] == "cluster.x-k8s.io"]
        if clusters:
            for item in kube.resource(client, "v1", "Secret").get(namespace=namespace).items:
                obj = item.to_dict()
                name = obj["metadata"]["name"]
                if any(name.startswith(c + "-") for c in clusters):
                    found[_key(obj)] = obj
    except (kube.KubeError,) + _API_ERRORS as exc:
        raise PivotError(phase, "cannot list the CAPI objects in namespace %s on the %s cluster: %s"
                         % (namespace, where, kube.error_text(exc)))
    return found


def cluster_resource(client):
    """The preferred served version of cluster.x-k8s.io Cluster; None when not served."""
    for res in capi_resources(client):
        if res.group == "cluster.x-k8s.io" and res.kind == "Cluster":
            return res
    return None


def _api_version_of(res):
    return "%s/%s" % (res.group, res.api_version) if "/" not in res.api_version else res.api_version


def parse_version(text):
    """Comparable tuple for v1.9.3, 1.10.0-rc.1 (pre-releases sort before the release)."""
    match = re.match(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:-(.+))?$", str(text or "").strip())
    if not match:
        return None
    major, minor, patch, pre = match.groups()
    return (int(major), int(minor or 0), int(patch or 0), 0 if pre else 1, pre or "")


# --- the pivot state ----------------------------------------------------------------

class Pivot:
    """Options, configuration and clients of one pivot run."""

    def __init__(self, config, options, check_mode=False, clock=time.monotonic):
        self.config = config
        self.options = options
        self.check_mode = check_mode
        self.clock = clock
        self.boot = config.data["bootstrap"]
        self.env_name = options.get("environment") or config.selected
        self.env = config.environment(self.env_name)
        self.namespace = self.boot["mgmt-namespace"]
        self.mgmt = self.env["mgmt-cluster"]
        self.repo_root = options.get("repo_root") or os.path.dirname(os.path.abspath(config.path))
        self.source = None
        self.target = None
        self.target_kubeconfig = os.path.expanduser(options.get("target_kubeconfig") or self.boot["mgmt-kubeconfig"])
        self.target_context = self.boot["mgmt-context"]
        self.connect_kubeconfig = None  # the file used to reach the target (temporary in check mode)
        self._tempdir = None
        self.variables = None
        self.already_moved = False
        # Step budget of this run (None: wait as long as each timeout allows) and time spent on waits in earlier steps.
        budget = options.get("_wait_budget")
        self.budget_deadline = None if budget is None else self.clock() + max(0.0, float(budget))
        self.spent = dict(options.get("_wait_spent") or {})
        self.result = {"changed": False, "phase_reached": None, "moved": [], "excluded": [], "fallbacks": [],
                       "target_kubeconfig": self.target_kubeconfig, "target_context": self.target_context,
                       "providers": [], "charts": [], "applied": [], "suspended": [], "progress": [],
                       "environment": self.env_name, "already_moved": False}

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
        return self.options.get("source_context") or self.boot["kind-context"]

    def remaining(self, deadline):
        return max(1.0, deadline - self.clock())

    def wait_left(self, key, timeout):
        """Seconds the wait ``key`` may still take: its timeout less the time earlier steps spent on it."""
        try:
            spent = float(self.spent.get(key) or 0)
        except (TypeError, ValueError):
            spent = 0.0
        return timeout if spent <= 0 else max(0.0, timeout - spent)

    def budgeted_wait(self, key, phase, title, total, seconds, watch, describe):
        """watch(timeout) for a wait that may still take ``seconds`` (of ``total``, its whole timeout).

        Without a step budget, or when the budget left covers ``seconds``, this is watch(seconds) and
        kube.WaitTimeout propagates as in a single call. Otherwise the wait stops when the budget runs
        out and raises Pending with describe(state) and the time spent on this wait so far.
        """
        if self.budget_deadline is None:
            return watch(seconds)
        left = self.budget_deadline - self.clock()
        if left >= seconds:
            return watch(seconds)
        began = self.clock()
        try:
            return watch(max(0.1, left))
        except kube.WaitTimeout as exc:
            raise Pending(key, phase, title, total - seconds + (self.clock() - began), total, describe(exc.state))


# --- phase 0: preconditions -----------------------------------------------------------

def _existing_target(pv):
    """A client for an already exported target kubeconfig that answers; None otherwise."""
    if not os.path.exists(pv.target_kubeconfig):
        return None
    try:
        client = kube.connect(pv.target_kubeconfig, pv.target_context)
        client.resources.get(api_version="v1", kind="Namespace").get(name="default")
    except (kube.KubeError,) + _API_ERRORS:
        return None
    pv.target = client
    pv.connect_kubeconfig = pv.target_kubeconfig
    return client


def _mgmt_on_target(pv):
    """Connect to an already exported target kubeconfig; True when it lists the management Cluster."""
    if not os.path.exists(pv.target_kubeconfig):
        return False
    try:
        client = kube.connect(pv.target_kubeconfig, pv.target_context)
        res = cluster_resource(client)
        if res is None or kube.get(client, _api_version_of(res), "Cluster", pv.mgmt, pv.namespace) is None:
            return False
    except (kube.KubeError,) + _API_ERRORS:
        return False
    pv.target = client
    pv.connect_kubeconfig = pv.target_kubeconfig
    return True


def registry_serves(url, timeout=5.0):
    """True when GET <url>/v2/ answers 200 or 401 (a registry that wants auth still serves)."""
    try:
        parsed = urllib.parse.urlsplit(url.rstrip("/") + "/v2/")
        kind = http.client.HTTPSConnection if parsed.scheme == "https" else http.client.HTTPConnection
        conn = kind(parsed.hostname, parsed.port, timeout=timeout)
        try:
            conn.request("GET", parsed.path)
            return conn.getresponse().status in (200, 401)
        finally:
            conn.close()
    except (OSError, ValueError, http.client.HTTPException):
        return False


def registry_url(pv):
    return pv.options.get("registry_url") or "http://127.0.0.1:%d" % pv.boot["registry-port"]


def phase_preconditions(pv):
    phase = "preconditions"
    context = pv.source_context()
    if context != pv.boot["kind-context"]:
        raise PivotError(phase, "the pivot source must be the kind cluster's context %s, not %s; pass source_context=%s"
                         % (pv.boot["kind-context"], context, pv.boot["kind-context"]))
    try:
        pv.source = kube.connect(pv.source_kubeconfig(), context)
        pv.source.resources.get(api_version="v1", kind="Namespace").get(name="default")
    except (kube.KubeError,) + _API_ERRORS as exc:
        pv.source = None
        if _mgmt_on_target(pv):
            pv.already_moved = True
            pv.say("kind context %s does not answer and %s already manages Cluster %s: nothing to move"
                   % (context, pv.target_context, pv.mgmt))
            return
        raise PivotError(phase, "the kind cluster (context %s) cannot be reached and %s does not list Cluster %s yet: %s"
                         % (context, pv.target_kubeconfig, pv.mgmt, kube.error_text(exc)))
    if pv.env["kind"] == "local-host":
        url = registry_url(pv)
        if not registry_serves(url):
            raise PivotError(phase, "the local registry %s does not serve %s/v2/; start it (bootstrap role) before pivoting"
                             % (pv.boot["registry-name"], url))
    res = cluster_resource(pv.source)
    if res is None:
        raise PivotError(phase, "the kind cluster (context %s) does not serve cluster.x-k8s.io Cluster: "
                         "Cluster API is not installed there; run the bootstrap first" % context)
    if kube.get(pv.source, _api_version_of(res), "Cluster", pv.mgmt, pv.namespace) is None and _mgmt_on_target(pv):
        pv.say("Cluster %s/%s is already on the target" % (pv.namespace, pv.mgmt))
        return
    timeout = pv.options.get("mgmt_ready_timeout") or pv.env["mgmt-ready-timeout"]
    pv.say(">>> waiting up to %ss for Cluster %s/%s on the kind cluster" % (timeout, pv.namespace, pv.mgmt))
    if pv.check_mode and kube.get(pv.source, _api_version_of(res), "Cluster", pv.mgmt, pv.namespace) is None:
        raise PivotError(phase, "Cluster %s/%s does not exist on the kind cluster (check mode does not wait)" % (pv.namespace, pv.mgmt))
    seconds = pv.wait_left("mgmt", timeout)
    pv.deadline = pv.clock() + seconds

    def watch(limit):
        return kube.watch_until(pv.source, _api_version_of(res), "Cluster", pv.namespace,
                                lambda objs: ((pv.namespace, pv.mgmt) in objs, sorted(key[1] for key in objs)), limit)
    try:
        pv.budgeted_wait("mgmt", phase, "management Cluster", timeout, seconds, watch,
                         lambda state: "Cluster %s/%s not on the kind cluster yet (Clusters there: %s)"
                         % (pv.namespace, pv.mgmt, ", ".join(state or []) or "none"))
    except kube.WaitTimeout as exc:
        raise PivotError(phase, "Cluster %s/%s did not appear on the kind cluster within %ss (mgmt-ready-timeout; Clusters there: %s); "
                         "check the Flux Kustomizations on kind" % (pv.namespace, pv.mgmt, timeout, ", ".join(exc.state or []) or "none"))


# --- phase 1: export ----------------------------------------------------------------

def lb_port_from_docker(pv):
    """Published host port of the <mgmt>-lb container's 6443/tcp (local-host)."""
    docker = find_binary("docker", pv.options.get("docker_binary"))
    argv = [docker, "inspect", "-f", '{{(index (index .NetworkSettings.Ports "6443/tcp") 0).HostPort}}', "%s-lb" % pv.mgmt]
    rc, out, err = run_command(argv, timeout=60)
    if rc != 0 or not out.strip().isdigit():
        raise _command_failed("export", argv, rc, out, err, "finding the published port of the load balancer %s-lb" % pv.mgmt)
    return int(out.strip())


def render_kubeconfig(raw, context, server=None):
    """The exported kubeconfig with its context renamed (and its server rewritten)."""
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError:
        data = None
    if not isinstance(data, dict) or not data.get("contexts") or not data.get("clusters"):
        raise PivotError("export", "the management kubeconfig Secret does not hold a kubeconfig with clusters and contexts")
    data = copy.deepcopy(data)
    current = data.get("current-context")
    entry = next((c for c in data["contexts"] if c.get("name") == current), data["contexts"][0])
    entry["name"] = context
    data["contexts"] = [entry] + [c for c in data["contexts"] if c is not entry and c.get("name") != context]
    data["current-context"] = context
    if server:
        cluster_name = (entry.get("context") or {}).get("cluster")
        for cluster in data["clusters"]:
            if cluster.get("name") == cluster_name or len(data["clusters"]) == 1:
                cluster.setdefault("cluster", {})["server"] = server
    return yaml.safe_dump(data, sort_keys=False)


def phase_export(pv):
    phase = "export"
    if pv.already_moved:
        return
    secret_name = "%s-kubeconfig" % pv.mgmt
    secret = kube.get(pv.source, "v1", "Secret", secret_name, pv.namespace)
    if secret is None and not pv.check_mode and (pv.target is not None or _existing_target(pv) is not None):
        pv.say("Secret %s/%s already moved; using %s" % (pv.namespace, secret_name, pv.target_kubeconfig))
    else:
        if secret is None and not pv.check_mode:
            total = pv.options.get("mgmt_ready_timeout") or pv.env["mgmt-ready-timeout"]
            deadline = getattr(pv, "deadline", pv.clock() + pv.wait_left("mgmt", total))
            pv.say(">>> waiting for Secret %s/%s" % (pv.namespace, secret_name))
            try:
                pv.budgeted_wait("mgmt", phase, "management cluster", total, pv.remaining(deadline),
                                 lambda limit: kube.watch_until(pv.source, "v1", "Secret", pv.namespace,
                                                                lambda objs: ((pv.namespace, secret_name) in objs, None), limit),
                                 lambda state: "Secret %s/%s not found yet" % (pv.namespace, secret_name))
            except kube.WaitTimeout:
                raise PivotError(phase, "Secret %s/%s (the management cluster's kubeconfig) did not appear on the kind cluster "
                                 "within mgmt-ready-timeout; check `clusterctl describe cluster %s -n %s`"
                                 % (pv.namespace, secret_name, pv.mgmt, pv.namespace))
            secret = kube.get(pv.source, "v1", "Secret", secret_name, pv.namespace)
        if secret is None:
            raise PivotError(phase, "Secret %s/%s (the management cluster's kubeconfig) does not exist on the kind cluster"
                             % (pv.namespace, secret_name))
        try:
            raw = base64.b64decode((secret.get("data") or {}).get("value") or "").decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            raw = ""
        if not raw:
            raise PivotError(phase, "Secret %s/%s has no base64 kubeconfig under data.value" % (pv.namespace, secret_name))
        server = pv.options.get("target_server")
        if not server and pv.env["kind"] == "local-host":
            port = pv.options.get("lb_port") or lb_port_from_docker(pv)
            server = "https://127.0.0.1:%d" % int(port)
        text = render_kubeconfig(raw, pv.target_context, server)
        if pv.check_mode:
            pv._tempdir = tempfile.mkdtemp(prefix="krops-pivot-")
            pv.connect_kubeconfig = os.path.join(pv._tempdir, "target.kubeconfig")
            kube.write_private(pv.connect_kubeconfig, text)
            try:
                with open(pv.target_kubeconfig, encoding="utf-8") as handle:
                    if handle.read() != text:
                        pv.changed()
            except OSError:
                pv.changed()
        else:
            try:
                if kube.write_private(pv.target_kubeconfig, text):
                    pv.changed()
                    pv.say("wrote %s (context %s)" % (pv.target_kubeconfig, pv.target_context))
            except OSError as exc:
                raise PivotError(phase, "cannot write the management kubeconfig %s: %s" % (pv.target_kubeconfig, exc.strerror))
            pv.connect_kubeconfig = pv.target_kubeconfig
        try:
            pv.target = kube.connect(pv.connect_kubeconfig, pv.target_context)
        except kube.KubeError as exc:
            raise PivotError(phase, "the management cluster %s does not answer: %s" % (pv.mgmt, exc))
    if _same_cluster(pv):
        raise PivotError(phase, "the exported management kubeconfig points at the kind cluster itself (%s); refusing to move onto the source"
                         % pv.target.configuration.host)
    wait_nodes(pv)


def _same_cluster(pv):
    try:
        return pv.source is not None and pv.source.configuration.host == pv.target.configuration.host
    except AttributeError:
        return False


def _node_states(objects):
    nodes = {name: kube.readiness(obj)[0] for (_ns, name), obj in objects.items()}
    if not nodes:
        return False, "Nodeless"
    if all(nodes.values()):
        return True, "Ready"
    return False, "Pending: %s not Ready" % ", ".join(sorted(n for n, ready in nodes.items() if not ready))


def wait_nodes(pv):
    if pv.check_mode:
        return
    timeout = pv.options.get("node_timeout") or 900
    pv.say(">>> waiting up to %ss for the management cluster's nodes" % timeout)
    try:
        pv.budgeted_wait("nodes", "export", "nodes", timeout, pv.wait_left("nodes", timeout),
                         lambda limit: kube.watch_until(pv.target, "v1", "Node", None, _node_states, limit, on_progress=pv.say),
                         lambda state: "nodes of %s: %s" % (pv.mgmt, state))
    except kube.WaitTimeout as exc:
        nodes = kube.list_objects(pv.target, "v1", "Node")
        if any(kube.readiness(n)[0] for n in nodes):
            pv.say("! %s after %ss; continuing (node pools that register late are tolerated)" % (exc.state, timeout))
            return
        raise PivotError("export", "no node of the management cluster %s became Ready within %ss (%s); check its machines"
                         % (pv.mgmt, timeout, exc.state))
    except (kube.KubeError,) + _API_ERRORS as exc:
        raise PivotError("export", "cannot read the nodes of the management cluster %s: %s" % (pv.mgmt, kube.error_text(exc)))


# --- phase 2: prepare ---------------------------------------------------------------

def source_variables(pv):
    """Merged data of the source's flux-namespace ConfigMaps (by name), overlaid by pivot-manifest-vars."""
    variables = {}
    if pv.source is not None:
        try:
            maps = kube.list_objects(pv.source, "v1", "ConfigMap", pv.boot["flux-namespace"])
        except (kube.KubeError,) + _API_ERRORS as exc:
            raise PivotError("prepare", "cannot read the ConfigMaps of %s on the kind cluster: %s" % (pv.boot["flux-namespace"], kube.error_text(exc)))
        for cm in sorted(maps, key=lambda o: o["metadata"]["name"]):
            variables.update({k: str(v) for k, v in (cm.get("data") or {}).items()})
    variables.update(pv.env.get("pivot-manifest-vars") or {})
    variables.update(pv.options.get("manifest_vars") or {})
    return variables


def run_tags(pv):
    """The run tags ConfigMap of the source (copied to the target by flux_handoff)."""
    if pv.source is None:
        return {}
    cm = kube.get(pv.source, "v1", "ConfigMap", pv.boot["run-configmap"], pv.boot["flux-namespace"])
    return dict((cm or {}).get("data") or {})


def _helm_installed(pv, helm, release, namespace):
    argv = [helm, "list", "-n", namespace, "--filter", "^%s$" % release, "-o", "json",
            "--kubeconfig", pv.connect_kubeconfig, "--kube-context", pv.target_context]
    rc, out, err = run_command(argv, timeout=120)
    if rc != 0:
        raise _command_failed("prepare", argv, rc, out, err, "listing helm release %s/%s on the management cluster" % (namespace, release))
    try:
        releases = json.loads(out or "[]") or []
    except ValueError:
        releases = []
    for item in releases:
        if item.get("name") == release:
            return item
    return None


def install_charts(pv):
    helm = find_binary("helm", pv.options.get("helm_binary"))
    timeout = pv.options.get("wait_timeout") or 900
    for key in ("cert-manager", "capi-operator"):
        release, chart, repo, namespace, values = CHARTS[key]
        version = pv.config.data["charts"][key]
        if key == "cert-manager" and not version.startswith("v"):
            version = "v" + version
        current = _helm_installed(pv, helm, release, namespace)
        entry = {"release": release, "namespace": namespace, "chart": chart, "version": version}
        wanted = "%s-%s" % (chart, version)
        if current and current.get("chart") in (wanted, "%s-%s" % (chart, version.lstrip("v"))) and current.get("status") == "deployed":
            entry["state"] = "unchanged"
            pv.result["charts"].append(entry)
            continue
        entry["state"] = "upgraded" if current else "installed"
        pv.result["charts"].append(entry)
        pv.changed()
        if pv.check_mode:
            continue
        argv = [helm, "upgrade", "--install", release, chart, "--repo", repo, "--version", version,
                "-n", namespace, "--create-namespace", "--wait", "--timeout", "%ds" % timeout,
                "--kubeconfig", pv.connect_kubeconfig, "--kube-context", pv.target_context]
        for value in values:
            argv += ["--set", value]
        pv.say(">>> helm upgrade --install %s %s %s" % (release, chart, version))
        rc, out, err = run_command(argv, timeout=timeout + 120)
        if rc != 0:
            raise _command_failed("prepare", argv, rc, out, err, "installing chart %s %s on the management cluster" % (chart, version))


def _apply_docs(pv, docs, origin):
    applied = []
    for doc in docs:
        state = apply_object(pv.target, doc, pv.check_mode)
        item = dict(ident(doc), state=state, file=origin)
        item["namespace"] = item["namespace"] or ""
        pv.result["applied"].append(item)
        if state != "unchanged":
            pv.changed()
        applied.append(doc)
    return applied


def aws_credentials(pv):
    """Secret capa-system/aws-credentials on the target (aws): option, else copied from the source."""
    value = pv.options.get("aws_b64encoded_credentials")
    if not value and pv.source is not None:
        secret = kube.get(pv.source, "v1", "Secret", "aws-credentials", "capa-system")
        encoded = ((secret or {}).get("data") or {}).get("AWS_B64ENCODED_CREDENTIALS")
        if encoded:
            value = base64.b64decode(encoded).decode("utf-8")
    if not value:
        raise PivotError("prepare", "aws: no credentials for Secret capa-system/aws-credentials: set AWS_B64ENCODED_CREDENTIALS "
                         "(clusterawsadm bootstrap credentials encode-as-profile) or create that Secret on the kind cluster")
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": "aws-credentials", "namespace": "capa-system"},
              "stringData": {"AWS_B64ENCODED_CREDENTIALS": value}}
    _apply_docs(pv, [secret], "(aws credentials)")


def sops_secrets(pv):
    files = pv.env.get("pivot-sops-secrets") or []
    if not files:
        return
    sops = find_binary("sops", pv.options.get("sops_binary"))
    key_file = os.path.expanduser(pv.options.get("age_key_file") or pv.boot["age-key-file"])
    if not os.path.isabs(key_file):
        key_file = pv.path(key_file)
    if not os.path.exists(key_file):
        raise PivotError("prepare", "age key file %s does not exist; SOPS secrets %s cannot be decrypted" % (key_file, ", ".join(files)))
    for relative in files:
        path = pv.path(relative)
        argv = [sops, "--decrypt", "--input-type", "yaml", "--output-type", "yaml", path]
        rc, out, err = run_command(argv, env={"SOPS_AGE_KEY_FILE": key_file}, timeout=120)
        if rc != 0:
            raise _command_failed("prepare", argv, rc, "", err, "decrypting %s" % relative)
        try:
            docs = [d for d in yaml.safe_load_all(out) if d]
        except yaml.YAMLError:
            raise PivotError("prepare", "sops decrypted %s into something that is not YAML" % relative)
        _apply_docs(pv, docs, relative)


def _provider_docs(docs):
    return [d for d in docs if d.get("apiVersion", "").startswith(PROVIDER_GROUP + "/") and d.get("kind") in PROVIDER_KINDS]


def _provider_version(obj):
    return ((obj.get("status") or {}).get("installedVersion") or (obj.get("spec") or {}).get("version") or "")


def wait_providers(pv, providers):
    timeout = pv.options.get("wait_timeout") or 900
    for doc in providers:
        meta = doc["metadata"]
        name, namespace = meta["name"], meta.get("namespace") or "default"
        label = "%s %s/%s" % (doc["kind"], namespace, name)
        if not pv.check_mode:
            pv.say(">>> waiting up to %ss for %s Ready" % (timeout, label))

            def evaluate(objs, key=(namespace, name)):
                ready, reason, message = kube.readiness(objs.get(key))
                return ready, "%s %s" % (reason, message)

            def watch(limit, api=(doc["apiVersion"], doc["kind"], namespace), evaluate=evaluate):
                return kube.watch_until(pv.target, api[0], api[1], api[2], evaluate, limit, on_progress=pv.say)

            def describe(state, label=label):
                return "%s not Ready: %s" % (label, (state or "").strip())

            key = "provider %s" % label
            try:
                pv.budgeted_wait(key, "prepare", "providers", timeout, pv.wait_left(key, timeout), watch, describe)
            except kube.WaitTimeout as exc:
                raise PivotError("prepare", "%s did not become Ready on the management cluster within %ss (%s); "
                                 "check the cluster-api-operator logs there" % (label, timeout, (exc.state or "").strip()))
            current = kube.get(pv.target, doc["apiVersion"], doc["kind"], name, namespace) or doc
        else:
            current = kube.get(pv.target, doc["apiVersion"], doc["kind"], name, namespace) or doc
            current = dict(current, spec=dict(current.get("spec") or {}, **(doc.get("spec") or {})))
        pv.result["providers"].append({"kind": doc["kind"], "namespace": namespace, "name": name,
                                       "version": _provider_version(current), "source_version": None})
    check_provider_versions(pv)


def check_provider_versions(pv):
    if pv.source is None:
        return
    source = {}
    wanted = {entry["kind"] for entry in pv.result["providers"]}
    # Only kinds the source serves: asking a DynamicClient for an unknown kind re-runs discovery.
    served = {r.kind: r for r in pv.source.resources.search(group=PROVIDER_GROUP)
              if not isinstance(r, _ResourceList) and r.kind in wanted and r.preferred}
    for kind, res in sorted(served.items()):
        for item in res.get().items:
            obj = item.to_dict()
            source[(kind, obj["metadata"]["name"])] = _provider_version(obj)
    problems = []
    for entry in pv.result["providers"]:
        src = source.get((entry["kind"], entry["name"]))
        entry["source_version"] = src
        if not src:
            continue
        have, want = parse_version(entry["version"]), parse_version(src)
        if have is None or want is None:
            problems.append("%s %s: cannot compare versions %r and %r" % (entry["kind"], entry["name"], entry["version"], src))
        elif have < want:
            problems.append("%s %s is %s on the target but %s on the kind cluster" % (entry["kind"], entry["name"], entry["version"], src))
    if problems:
        raise PivotError("prepare", "target providers older than the source's (clusterctl move needs the target at least at the "
                         "source's version; raise spec.version in the provider manifests): " + "; ".join(problems))


def phase_prepare(pv):
    if pv.already_moved and pv.source is None:
        return
    pv.variables = source_variables(pv)
    pv.result["run_tags"] = run_tags(pv)
    # Load and substitute every manifest first: a bad file fails before anything is written.
    provider_docs, pivot_docs = [], []
    for relative in pv.env.get("provider-manifests") or []:
        provider_docs.append((relative, load_documents(pv.path(relative), pv.variables)))
    unresolved, first = [], None
    for relative in pv.env.get("pivot-manifests") or []:
        try:
            pivot_docs.append((relative, load_documents(pv.path(relative), pv.variables)))
        except SubstitutionError as exc:
            first = first or exc
            unresolved.append(str(exc))
    if unresolved:
        raise PivotError("prepare", "; ".join(unresolved), {"unresolved": first.names})
    install_charts(pv)
    providers = []
    for relative, docs in provider_docs:
        providers += _provider_docs(_apply_docs(pv, docs, relative))
    for relative, docs in pivot_docs:
        providers += _provider_docs(_apply_docs(pv, docs, relative))
    if pv.env["kind"] == "aws":
        aws_credentials(pv)
    sops_secrets(pv)
    wait_providers(pv, providers)


# --- phase 3: preflight -----------------------------------------------------------

def _cluster_problems(obj):
    status = obj.get("status") or {}
    init = status.get("initialization") or {}
    name = obj["metadata"]["name"]
    problems = []
    infra = init.get("infrastructureProvisioned") or status.get("infrastructureReady") \
        or (kube.condition(obj, "InfrastructureReady") or {}).get("status") == "True"
    if not infra:
        problems.append("Cluster %s: infrastructure is still provisioning" % name)
    control = init.get("controlPlaneInitialized") or status.get("controlPlaneReady") \
        or (kube.condition(obj, "ControlPlaneInitialized") or {}).get("status") == "True"
    if not control:
        problems.append("Cluster %s: control plane is not initialised" % name)
    if (obj.get("spec") or {}).get("paused") or PAUSED_ANNOTATION in ((obj["metadata"].get("annotations")) or {}):
        problems.append("Cluster %s: already paused (unpause it or finish the earlier move first)" % name)
    return problems


def phase_preflight(pv, objects=None):
    if pv.source is None:
        return {}
    objects = capi_objects(pv.source, pv.namespace, phase="preflight") if objects is None else objects
    problems = []
    for key, obj in sorted(objects.items(), key=lambda kv: kv[0]):
        group, kind, _ns, name = key
        if group == "cluster.x-k8s.io" and kind == "Cluster":
            problems += _cluster_problems(obj)
        elif group == "cluster.x-k8s.io" and kind == "Machine" and not ((obj.get("status") or {}).get("nodeRef") or {}).get("name"):
            problems.append("Machine %s: no nodeRef yet (the node is still provisioning)" % name)
        if BLOCK_MOVE in ((obj["metadata"].get("annotations")) or {}):
            problems.append("%s: carries the %s annotation (a provider is still working on it)" % (_label(key), BLOCK_MOVE))
    if problems:
        raise PivotError("preflight", "the move cannot start; nothing was paused or suspended: " + "; ".join(problems),
                         {"refusals": problems})
    return objects


# --- phase 4: move --------------------------------------------------------------------

def _set_suspend(client, obj, value):
    meta = obj["metadata"]
    kube.resource(client, *KUSTOMIZATION).patch(body={"spec": {"suspend": value}}, name=meta["name"], namespace=meta["namespace"],
                                                content_type="application/merge-patch+json")


def suspend_kustomizations(pv):
    state, objects, error = kube.probe(pv.source, *KUSTOMIZATION)
    if state == kube.UNKNOWN:
        raise PivotError("move", "cannot list the Flux Kustomizations on the kind cluster: %s; nothing was suspended" % error)
    active = [o for o in objects if not (o.get("spec") or {}).get("suspend")]
    suspended = []
    for obj in active:
        item = {"namespace": obj["metadata"]["namespace"], "name": obj["metadata"]["name"]}
        if not pv.check_mode:
            try:
                _set_suspend(pv.source, obj, True)
            except _API_ERRORS as exc:
                pv.suspended = suspended
                raise PivotError("move", "cannot suspend Kustomization %s/%s on the kind cluster: %s"
                                 % (item["namespace"], item["name"], kube.error_text(exc)))
        suspended.append(item)
    pv.suspended = suspended
    pv.result["suspended"] = suspended
    if suspended:
        pv.changed()
        pv.say("suspended %d Kustomizations on the kind cluster" % len(suspended))


def _set_paused(client, res, name, namespace, paused):
    body = {"spec": {"paused": True if paused else None}}
    res.patch(body=body, name=name, namespace=namespace, content_type="application/merge-patch+json")


def rollback(pv, before, error):
    """Make the source authoritative again; never delete anything on the target."""
    notes = []
    after = None
    try:
        after = capi_objects(pv.source, pv.namespace, phase="move")
        res = cluster_resource(pv.source)
    except PivotError as exc:
        notes.append("could not re-list the kind cluster (%s)" % exc)
    left = [k for k in before if k not in after] if after is not None else list(before)
    after = after or {}
    for key, obj in after.items():
        if key[0] == "cluster.x-k8s.io" and key[1] == "Cluster" and (obj.get("spec") or {}).get("paused"):
            try:
                _set_paused(pv.source, res, key[3], key[2], False)
                notes.append("unpaused Cluster %s on the kind cluster" % key[3])
            except _API_ERRORS as exc:
                notes.append("could NOT unpause Cluster %s on the kind cluster: %s" % (key[3], kube.error_text(exc)))
    suspended = getattr(pv, "suspended", [])
    if left and suspended:
        notes.append("kept %d Kustomizations suspended on the kind cluster because %d objects already left it "
                     "(resuming Flux there would re-create them)" % (len(suspended), len(left)))
    elif not left:
        for item in suspended:
            try:
                _set_suspend(pv.source, {"metadata": item}, False)
            except _API_ERRORS as exc:
                notes.append("could NOT resume Kustomization %s/%s: %s" % (item["namespace"], item["name"], kube.error_text(exc)))
        if suspended:
            notes.append("resumed %d Kustomizations on the kind cluster" % len(suspended))
    target_now = {}
    if pv.target is not None:
        try:
            target_now = capi_objects(pv.target, pv.namespace, where="target")
        except PivotError:
            pass
    partial = [ident(before[k]) for k in sorted(before) if k in target_now]
    moved = [ident(before[k]) for k in sorted(left) if k in target_now]
    pv.result["moved"] = moved
    pv.result["partial"] = partial
    pv.result["rollback"] = notes
    message = "%s. Rolled back: %s. Nothing was deleted on the management cluster (%d of %d objects are there, %d left the kind cluster); " \
              "fix the cause and re-run the pivot to complete the move" % (error, "; ".join(notes) or "nothing to undo", len(partial), len(before), len(left))
    return PivotError("move", message, pv.result)


def _clusterctl_argv(pv, dry_run):
    clusterctl = find_binary("clusterctl", pv.options.get("clusterctl_binary"))
    argv = [clusterctl, "move", "--kubeconfig", pv.source_kubeconfig(), "--kubeconfig-context", pv.source_context(),
            "--to-kubeconfig", pv.connect_kubeconfig, "--to-kubeconfig-context", pv.target_context, "-n", pv.namespace]
    return argv + (["--dry-run"] if dry_run else [])


def apply_fallbacks(pv):
    for fb in pv.env.get("move-fallbacks") or []:
        plural, dummy, group = fb["resource"].partition(".")
        entry = {"resource": fb["resource"], "name": fb["name"], "manifest": fb["manifest"], "state": "present"}
        docs = load_documents(pv.path(fb["manifest"]), None, phase="move")
        if not any(d["metadata"]["name"] == fb["name"] and d["apiVersion"].startswith(group + "/") for d in docs):
            raise PivotError("move", "move fallback %s: manifest %s does not declare %s %s" % (fb["resource"], fb["manifest"], plural, fb["name"]))
        missing = [d for d in docs if kube.get(pv.target, d["apiVersion"], d["kind"], d["metadata"]["name"],
                                               d["metadata"].get("namespace")) is None]
        if missing:
            entry["state"] = "applied"
            for doc in missing:
                try:
                    apply_object(pv.target, doc, pv.check_mode)
                except PivotError as exc:
                    raise PivotError("move", str(exc))
            pv.changed()
        pv.result["fallbacks"].append(entry)


def unpause_target(pv):
    res = cluster_resource(pv.target)
    if res is None:
        return
    for obj in kube.list_objects(pv.target, _api_version_of(res), "Cluster", pv.namespace):
        if (obj.get("spec") or {}).get("paused"):
            pv.changed()
            if not pv.check_mode:
                _set_paused(pv.target, res, obj["metadata"]["name"], pv.namespace, False)
            pv.say("unpaused Cluster %s on the management cluster" % obj["metadata"]["name"])


def _excluded(pv):
    """Cluster-scoped CAPI objects on the source: `clusterctl move -n` does not cover them (fallbacks do)."""
    excluded = []
    try:
        for res in capi_resources(pv.source, namespaced=False):
            for item in res.get().items:
                excluded.append(ident(item.to_dict()))
    except _API_ERRORS:
        pass
    return excluded


def phase_move(pv, objects=None):
    if pv.source is None:
        unpause_target(pv)
        return
    before = capi_objects(pv.source, pv.namespace) if objects is None else objects
    pv.result["excluded"] = _excluded(pv)
    if not before:
        on_target = pv.target is not None and cluster_resource(pv.target) is not None and \
            kube.get(pv.target, _api_version_of(cluster_resource(pv.target)), "Cluster", pv.mgmt, pv.namespace) is not None
        if on_target or _mgmt_on_target(pv):
            pv.already_moved = True
            pv.say("the kind cluster holds no CAPI object in %s: already moved" % pv.namespace)
            unpause_target(pv)
            apply_fallbacks(pv)
            return
        raise PivotError("move", "namespace %s on the kind cluster holds no CAPI object and the management cluster lists no Cluster %s"
                         % (pv.namespace, pv.mgmt))
    if pv.check_mode:
        argv = _clusterctl_argv(pv, dry_run=True)
        rc, out, err = run_command(argv, timeout=600)
        if rc != 0:
            raise _command_failed("move", argv, rc, out, err, "clusterctl move --dry-run")
        pv.result["dry_run_output"] = out
        pv.result["moved"] = [ident(before[k]) for k in sorted(before)]
        suspend_kustomizations(pv)
        pv.changed()
        apply_fallbacks(pv)
        return
    argv = _clusterctl_argv(pv, dry_run=False)
    try:
        suspend_kustomizations(pv)
    except PivotError as exc:
        raise rollback(pv, before, str(exc))
    pv.say(">>> clusterctl move -n %s (%d objects)" % (pv.namespace, len(before)))
    rc, out, err = run_command(argv, timeout=pv.options.get("move_timeout") or 3600)
    if rc != 0:
        raise rollback(pv, before, str(_command_failed("move", argv, rc, out, err, "clusterctl move")))
    pv.changed()
    try:
        after = capi_objects(pv.source, pv.namespace)
        target_now = capi_objects(pv.target, pv.namespace, where="target")
    except PivotError as exc:
        raise rollback(pv, before, "clusterctl move exited 0 but the result cannot be verified: %s" % exc)
    missing = [k for k in before if k not in after and k not in target_now]
    if after or missing:
        parts = []
        if after:
            parts.append("the kind cluster still holds %d CAPI objects in %s (%s)"
                         % (len(after), pv.namespace, ", ".join(_label(k) for k in sorted(after)[:10])))
        if missing:
            parts.append("%d objects left the kind cluster but are not on the management cluster (%s)"
                         % (len(missing), ", ".join(_label(k) for k in sorted(missing)[:10])))
        raise rollback(pv, before, "clusterctl move exited 0 but verification failed: " + "; ".join(parts))
    pv.result["moved"] = [ident(before[k]) for k in sorted(before)]
    try:
        unpause_target(pv)
        apply_fallbacks(pv)
    except _API_ERRORS as exc:
        raise PivotError("move", "the move completed but finishing on the management cluster failed: %s; re-run the pivot"
                         % kube.error_text(exc), pv.result)


# --- orchestration --------------------------------------------------------------------

def run(config, options, check_mode=False):
    """Run the phases up to options['stop_after'] (default: move). Returns the result dict; raises PivotError."""
    pv = Pivot(config, options, check_mode)
    stop_after = options.get("stop_after") or "move"
    if stop_after not in PHASES:
        raise PivotError(None, "stop_after must be one of %s, got %r" % (", ".join(PHASES), stop_after))
    steps = (("preconditions", phase_preconditions), ("export", phase_export), ("prepare", phase_prepare),
             ("preflight", phase_preflight), ("move", phase_move))
    objects = None
    try:
        for name, step in steps:
            try:
                if name == "move":
                    step(pv, objects)
                else:
                    value = step(pv)
                    if name == "preflight":
                        objects = value or None
            except PivotError as exc:
                if exc.phase is None:
                    exc.phase = name
                merged = dict(pv.result)
                merged.update(exc.result or {})
                exc.result = merged
                raise
            except kube.KubeError as exc:
                raise PivotError(name, str(exc), pv.result)
            except _API_ERRORS as exc:
                raise PivotError(name, "Kubernetes API error: %s" % kube.error_text(exc), pv.result)
            pv.result["phase_reached"] = name
            if name == stop_after:
                break
    except Pending as pending:
        # Only raised between steps of the action plugin: nothing failed, the next step resumes.
        pv.result["_krops_pending"] = True
        pv.result["_krops_wait"] = pending.info
        return pv.result
    else:
        pv.result["already_moved"] = pv.already_moved
        if pv.connect_kubeconfig and not check_mode:
            pv.result["target_kubeconfig"] = pv.connect_kubeconfig
        return pv.result
    finally:
        pv.cleanup()


# --- stepped runs (the action plugin) ----------------------------------------------------

def _merge_states(earlier, later, fields, quiet):
    """later's list, with an item's state taken from earlier when later only found it ``quiet`` (done by earlier)."""
    before = {tuple(item.get(f) for f in fields): item.get("state") for item in earlier or []}
    merged = []
    for item in later or []:
        state = before.get(tuple(item.get(f) for f in fields))
        if item.get("state") == quiet and state not in (None, quiet):
            item = dict(item, state=state)
        merged.append(item)
    return merged


def merge_steps(earlier, later):
    """The result a single run would give, from an earlier (pending) step and the later step that re-ran the pivot.

    ``changed`` is true when any step changed something; charts and applied objects keep the state the
    step that wrote them reported (the re-run finds them unchanged); progress lines the re-run repeats
    are kept once.
    """
    if not earlier:
        return dict(later)
    merged = dict(later)
    merged["changed"] = bool(earlier.get("changed") or later.get("changed"))
    for name, fields in (("charts", ("namespace", "release")), ("applied", ("kind", "namespace", "name", "file"))):
        if name in later:
            merged[name] = _merge_states(earlier.get(name), later[name], fields, "unchanged")
    if "progress" not in later:
        return merged
    lines = list(earlier.get("progress") or [])
    cursor = 0
    for line in later.get("progress") or []:
        if line in lines[cursor:]:
            cursor = lines.index(line, cursor) + 1
        else:
            lines.append(line)
            cursor = len(lines)
    merged["progress"] = lines
    return merged
