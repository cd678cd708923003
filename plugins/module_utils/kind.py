# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""kind clusters: create, reuse, recreate or delete one, wait for its nodes, export its kubeconfig.

Uses the kind CLI (module_utils.cli) for the cluster itself and the Kubernetes API
(module_utils.kube) for node readiness. Importable without Ansible.
"""

from __future__ import annotations

import copy
import datetime
import os
import tempfile
import time

try:
    import yaml

    HAS_YAML = True
except ImportError:  # pragma: no cover - PyYAML ships with ansible-core
    HAS_YAML = False

from ansible_collections.krops.platform.plugins.module_utils import cli, errors, kube, kubeconfigs, ownership
from ansible_collections.krops.platform.plugins.module_utils import config_names

KIND_API_VERSION = "kind.x-k8s.io/v1alpha4"
CERTS_DIR = "/etc/containerd/certs.d"
# kind's local-registry guide (site/content/docs/user/local-registry.md, static/examples/
# kind-with-registry.sh @ v0.32.0): point containerd at certs.d at creation, then write
# <certs.d>/<host>/hosts.toml into every node. The file is not mounted: kind passes mounts to the
# engine as `--volume host:container[:ro]` (providers/docker/provision.go generateMountBindings)
# and Docker splits that spec on ':', so a path such as certs.d/localhost:5001 cannot be mounted.
CONFIG_PATH_PATCH = f'[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "{CERTS_DIR}"\n'

# The ownership marker teardown looks for (docs/ownership.md): created once, when krops creates the cluster.
MARKER_NAMESPACE = "kube-system"
MARKER_NAME = "krops-bootstrap"
MARKER_LABELS = {"app.kubernetes.io/managed-by": "krops"}

# kind.x-k8s.io/v1alpha4 fields (pkg/apis/config/v1alpha4/types.go @ v0.32.0); kind decodes the
# config strictly, so an unknown field fails `kind create cluster`. Checked here first to name it.
CLUSTER_FIELDS = frozenset(
    (
        "kind",
        "apiVersion",
        "name",
        "nodes",
        "networking",
        "featureGates",
        "runtimeConfig",
        "kubeadmConfigPatches",
        "kubeadmConfigPatchesJSON6902",
        "containerdConfigPatches",
        "containerdConfigPatchesJSON6902",
    )
)
NODE_FIELDS = frozenset(
    (
        "role",
        "image",
        "labels",
        "extraMounts",
        "extraPortMappings",
        "kubeadmConfigPatches",
        "kubeadmConfigPatchesJSON6902",
    )
)
MOUNT_FIELDS = frozenset(("containerPath", "hostPath", "readOnly", "selinuxRelabel", "propagation"))


class KindError(errors.ToolError):
    """The kind cluster cannot be brought to the requested state; the message says what to do."""

    def __init__(self, message, result=None, details=None):
        super().__init__(message, result)
        self.details = details or {}


def check_name(name):
    """KindError unless ``name`` satisfies kind's cluster-name rule (the one the loader checks kind-cluster
    against): checked before any kind command runs, so that a bad name never reaches kind."""
    if isinstance(name, str) and len(name) <= config_names.KIND_NAME_MAX and config_names.KIND_NAME.match(name):
        return name
    shown = repr(name) if len(str(name)) <= 60 else f"{str(name)[:60]!r}... ({len(str(name))} characters)"
    raise KindError(
        f"kind cluster name {shown} is not a kind cluster name: at most {config_names.KIND_NAME_MAX} characters of "
        "a-z, 0-9, '.' and '-' (kind's cluster-name rule); give name= such a name"
    )


def context_name(name):
    return f"kind-{name}"


def hosts_toml(endpoint):
    """containerd hosts.toml sending pulls of the host to endpoint (as kind-with-registry.sh does)."""
    return f'[host."{endpoint}"]\n'


def _unknown(where, obj, allowed):
    extra = sorted(set(obj) - allowed)
    if extra:
        raise KindError(
            "{}: unknown field {} (kind {} accepts {})".format(
                where, ", ".join(repr(k) for k in extra), KIND_API_VERSION, ", ".join(sorted(allowed))
            )
        )


def _check_mounts(where, mounts):
    if not isinstance(mounts, list) or not all(isinstance(m, dict) for m in mounts):
        raise KindError(f"{where}.extraMounts must be a list of mounts")
    for index, mount in enumerate(mounts):
        at = "%s.extraMounts[%d]" % (where, index)
        _unknown(at, mount, MOUNT_FIELDS)
        for key in ("hostPath", "containerPath"):
            if ":" in str(mount.get(key, "")):
                raise KindError(
                    f"{at}.{key} {mount[key]!r} contains ':'; kind hands mounts to the engine as "
                    "--volume host:container[:ro], which Docker splits on ':'. Use a path without ':'"
                )


def render_config(config=None, engine_socket="/var/run/docker.sock", registry_mirror=False):
    """The kind Cluster config: the given one (or one control-plane node) plus krops' additions.

    Every node mounts the engine socket at the same path; with a registry mirror containerd is
    pointed at certs.d (the hosts.toml files are written into the nodes after creation).
    """
    rendered = copy.deepcopy(config) if config else {}
    if not isinstance(rendered, dict):
        raise KindError(f"config must be a kind Cluster config (a dict), got {type(config).__name__}")
    rendered.setdefault("kind", "Cluster")
    rendered.setdefault("apiVersion", KIND_API_VERSION)
    if rendered["kind"] != "Cluster":
        raise KindError("config.kind must be Cluster, got {!r}".format(rendered["kind"]))
    if rendered["apiVersion"] != KIND_API_VERSION:
        raise KindError("config.apiVersion must be {}, got {!r}".format(KIND_API_VERSION, rendered["apiVersion"]))
    _unknown("config", rendered, CLUSTER_FIELDS)
    nodes = rendered.get("nodes") or [{"role": "control-plane"}]
    if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
        raise KindError("config.nodes must be a list of node dicts")
    for index, node in enumerate(nodes):
        _unknown("config.nodes[%d]" % index, node, NODE_FIELDS)
        _check_mounts("config.nodes[%d]" % index, node.get("extraMounts") or [])
    mounts = []
    if engine_socket:
        mounts.append({"hostPath": engine_socket, "containerPath": engine_socket})
        _check_mounts("engine_socket", mounts)
    if registry_mirror:
        patches = list(rendered.get("containerdConfigPatches") or [])
        if CONFIG_PATH_PATCH not in patches:
            patches.append(CONFIG_PATH_PATCH)
        rendered["containerdConfigPatches"] = patches
    for node in nodes:
        existing = node.setdefault("extraMounts", [])
        for mount in mounts:
            if not any(m.get("containerPath") == mount["containerPath"] for m in existing):
                existing.append(dict(mount))
        if not existing:
            node.pop("extraMounts")
    rendered["nodes"] = nodes
    return rendered


class KindCluster:
    """Drives one kind cluster; every method raises KindError or cli.CliError on failure."""

    def __init__(self, name, kind_binary=None, environ=None, engine_binary=None):
        self.name = name
        self.kind = cli.Cli("kind", binary=kind_binary, version_args=("version",), environ=environ)
        self.engine = cli.Cli(
            os.path.basename(engine_binary) if engine_binary else "docker",
            binary=engine_binary,
            version_args=("version",),
            environ=environ,
        )

    @property
    def context(self):
        return context_name(self.name)

    def exists(self):
        result = self.kind.run(["get", "clusters"])
        return self.name in [line.strip() for line in result.stdout.splitlines()]

    def create(self, config, node_image=None, kubeconfig_path=None):
        args = ["create", "cluster", "--name", self.name, "--config", "-"]
        if node_image:
            args += ["--image", node_image]
        if kubeconfig_path:
            args += ["--kubeconfig", os.path.expanduser(kubeconfig_path)]
        self.kind.run(args, stdin=yaml.safe_dump(config, default_flow_style=False, sort_keys=False))

    def delete(self, kubeconfig_path=None):
        args = ["delete", "cluster", "--name", self.name]
        if kubeconfig_path:
            args += ["--kubeconfig", os.path.expanduser(kubeconfig_path)]
        self.kind.run(args)

    def nodes(self):
        """Names of the node containers (`kind get nodes --name`)."""
        result = self.kind.run(["get", "nodes", "--name", self.name])
        return [line.strip() for line in result.stdout.splitlines() if line.strip()]

    def read_node_file(self, node, path):
        """The file's text in the node container, or None when it does not exist."""
        result = self.engine.run(["exec", node, "cat", path], check=False)
        return result.stdout if result.rc == 0 else None

    def write_node_file(self, node, path, text):
        self.engine.run(["exec", node, "mkdir", "-p", os.path.dirname(path)])
        self.engine.run(["exec", "-i", node, "cp", "/dev/stdin", path], stdin=text)

    def kubeconfig(self):
        """The cluster's kubeconfig text (it holds a client key: never log or return it)."""
        return self.kind.run(["get", "kubeconfig", "--name", self.name]).stdout

    def export_kubeconfig(self, path, check_mode=False):
        """Merge this cluster's entries into path (0600) and make its context the current one, as
        `kind export kubeconfig` does; True when the file changed (or would change, in check mode)."""
        return kubeconfigs.write_kubeconfig(
            path, self.kubeconfig(), check_mode=check_mode, switch_context=True, option="kubeconfig_path"
        )


def connect_when_up(kubeconfig, context, timeout, clock=time.monotonic, sleep=time.sleep):
    """kube.connect, retried: the API may refuse connections for a moment after `kind create`."""
    deadline = clock() + timeout
    while True:
        try:
            return kube.connect(kubeconfig, context)
        except kube.KubeError as exc:
            if clock() >= deadline:
                raise kube.WaitTimeout(f"the API server did not answer within {int(timeout)}s: {exc}")
            sleep(1)


def wait_nodes_ready(kubeconfig, context, timeout, clock=time.monotonic, sleep=time.sleep):
    """Wait (watch) until the cluster has nodes and all are Ready; returns [{name, ready}].

    The API may refuse connections for a moment after `kind create`; connecting is retried
    until the deadline. Raises kube.WaitTimeout with the last node list as state.
    """
    deadline = clock() + timeout
    client = connect_when_up(kubeconfig, context, timeout, clock, sleep)
    remaining = max(1, deadline - clock())
    state = kube.watch_until(client, "v1", "Node", None, kube.node_states, timeout=remaining)
    return _public_nodes(state)


def _public_nodes(nodes):
    return [{"name": n["name"], "ready": n["ready"]} for n in nodes or []]


def _pending_text(nodes):
    if not nodes:
        return "no node registered"
    waiting = [
        "{} ({}{})".format(
            n["name"], n.get("reason") or "not Ready", ": {}".format(n["message"]) if n.get("message") else ""
        )
        for n in nodes
        if not n["ready"]
    ]
    return "not Ready: {}".format(", ".join(waiting))


def ensure(
    name,
    state="present",
    recreate=False,
    config=None,
    engine_socket="/var/run/docker.sock",
    registry_mirror=None,
    kubeconfig_path=None,
    wait_timeout=120,
    node_image=None,
    kind_binary=None,
    engine_binary=None,
    environment=None,
    check_mode=False,
    environ=None,
    now=None,
):
    """Bring kind cluster ``name`` to ``state``; returns the module result dict.

    Raises KindError (with the partial result) or cli.CliError.
    """
    if not HAS_YAML:
        raise KindError("the Python library PyYAML is required (it ships with ansible-core): pip install pyyaml")
    check_name(name)
    cluster = KindCluster(name, kind_binary=kind_binary, environ=environ, engine_binary=engine_binary)
    result = {
        "changed": False,
        "created": False,
        "recreated": False,
        "deleted": False,
        "context": cluster.context,
        "kubeconfig_path": os.path.expanduser(kubeconfig_path) if kubeconfig_path else None,
        "nodes": [],
        "marker": None,
        "mirror_nodes": [],
    }
    if state == "present" and not environment:
        raise KindError(
            f"kind cluster {name}: environment is required with state=present; it goes into the ownership "
            f"marker {MARKER_NAMESPACE}/{MARKER_NAME} that teardown checks"
        )
    if registry_mirror and (not registry_mirror.get("host") or not registry_mirror.get("endpoint")):
        raise KindError(
            "registry_mirror needs host (e.g. localhost:5001) and endpoint (e.g. http://krops-registry:5000)"
        )
    result["kind_version"] = cluster.kind.version()
    exists = cluster.exists()

    if state == "absent":
        if exists:
            result.update(changed=True, deleted=True)
            if not check_mode:
                cluster.delete(kubeconfig_path)
                _remove_if_empty(kubeconfig_path)
        return result

    rendered = render_config(config, engine_socket, bool(registry_mirror))
    result["config"] = rendered

    if exists and not recreate:
        return _reuse(cluster, result, kubeconfig_path, wait_timeout, check_mode, registry_mirror)

    result["changed"] = True
    if exists:
        result["recreated"] = True
    else:
        result["created"] = True
    if check_mode:
        return result
    if exists:
        cluster.delete(kubeconfig_path)
    if kubeconfig_path:
        os.makedirs(os.path.dirname(os.path.abspath(os.path.expanduser(kubeconfig_path))), mode=0o700, exist_ok=True)
    cluster.create(rendered, node_image=node_image, kubeconfig_path=kubeconfig_path)
    _finish(
        cluster,
        result,
        kubeconfig_path,
        wait_timeout,
        reused=False,
        registry_mirror=registry_mirror,
        marker=marker_data(environment, name, now),
    )
    return result


def marker_data(environment, kind_cluster, now=None):
    """The data of the ownership marker ConfigMap (created-at: RFC 3339 UTC)."""
    moment = now or datetime.datetime.now(datetime.UTC)
    return {
        "environment": environment,
        "kind-cluster": kind_cluster,
        "created-at": moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def create_marker(kubeconfig, context, data, timeout=120):
    """Create kube-system/krops-bootstrap; an existing one is left as it is (it records the creation)."""
    client = connect_when_up(kubeconfig, context, timeout)
    current = kube.get(client, "v1", "ConfigMap", MARKER_NAME, MARKER_NAMESPACE)
    if current is not None:
        return current.get("data") or {}
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": MARKER_NAME, "namespace": MARKER_NAMESPACE, "labels": dict(MARKER_LABELS)},
        "data": dict(data),
    }
    try:
        kube.resource(client, "v1", "ConfigMap").create(body=body, namespace=MARKER_NAMESPACE)
    except (kube.KubeError,) + kube.API_ERRORS as exc:  # API_ERRORS: a stalled or broken connection too
        raise KindError(
            "kind cluster {}: cannot create the ownership marker {}/{}: {}; teardown will not delete "
            "this cluster without it".format(data["kind-cluster"], MARKER_NAMESPACE, MARKER_NAME, kube.error_text(exc))
        )
    return dict(data)


def ensure_mirror(cluster, registry_mirror, check_mode=False):
    """Write <certs.d>/<host>/hosts.toml into every node that lacks it; returns the nodes changed."""
    path = "{}/{}/hosts.toml".format(CERTS_DIR, registry_mirror["host"])
    text = hosts_toml(registry_mirror["endpoint"])
    changed = []
    for node in cluster.nodes():
        if cluster.read_node_file(node, path) == text:
            continue
        changed.append(node)
        if not check_mode:
            cluster.write_node_file(node, path, text)
    return changed


def _remove_if_empty(kubeconfig_path):
    """kind delete writes the kubeconfig back without its entries, even when nothing is left (kind's RemoveKIND);
    the file goes when it holds no cluster, user or context."""
    if not kubeconfig_path:
        return
    path = os.path.expanduser(kubeconfig_path)
    try:
        with open(path, encoding="utf-8") as handle:
            doc = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError):
        return
    # the rule teardown uses: nothing of any context, cluster or user left (ownership.kubeconfig_without)
    if isinstance(doc, dict) and ownership.kubeconfig_without(doc, None)[0] is None:
        try:
            os.remove(path)
        except OSError:  # an empty kubeconfig left behind harms nothing; the cluster is gone
            pass


def _reuse(cluster, result, kubeconfig_path, wait_timeout, check_mode, registry_mirror=None):
    if check_mode:
        if registry_mirror:
            result["mirror_nodes"] = ensure_mirror(cluster, registry_mirror, check_mode=True)
            result["changed"] = result["changed"] or bool(result["mirror_nodes"])
        if kubeconfig_path:
            result["changed"] = cluster.export_kubeconfig(kubeconfig_path, check_mode=True) or result["changed"]
        return result
    _finish(cluster, result, kubeconfig_path, wait_timeout, reused=True, registry_mirror=registry_mirror)
    return result


def _finish(cluster, result, kubeconfig_path, wait_timeout, reused, registry_mirror=None, marker=None):
    if kubeconfig_path:
        if cluster.export_kubeconfig(kubeconfig_path):
            result["changed"] = True
        _after_create(cluster, result, kubeconfig_path, wait_timeout, reused, registry_mirror, marker)
        return
    fd, tmp = tempfile.mkstemp(prefix="krops-kind-", suffix=".kubeconfig")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(cluster.kubeconfig())
        _after_create(cluster, result, tmp, wait_timeout, reused, registry_mirror, marker)
    finally:
        os.unlink(tmp)


def _after_create(cluster, result, kubeconfig, wait_timeout, reused, registry_mirror, marker):
    if marker is not None:
        # Right after `kind create`, before anything else can fail: teardown needs it to delete the cluster.
        try:
            result["marker"] = create_marker(kubeconfig, cluster.context, marker, wait_timeout)
        except kube.KubeError as exc:
            raise KindError(
                f"kind cluster {cluster.name}: cannot create the ownership marker {MARKER_NAMESPACE}/{MARKER_NAME}: {exc}",
                result=result,
            )
    if registry_mirror:
        result["mirror_nodes"] = ensure_mirror(cluster, registry_mirror)
        if result["mirror_nodes"]:
            result["changed"] = True
    _wait(cluster, result, kubeconfig, wait_timeout, reused)


def _wait(cluster, result, kubeconfig, wait_timeout, reused):
    try:
        result["nodes"] = wait_nodes_ready(kubeconfig, cluster.context, wait_timeout)
    except kube.WaitTimeout as exc:
        nodes = exc.state
        result["nodes"] = _public_nodes(nodes)
        if reused:
            advice = (
                "the existing cluster looks unhealthy: set recreate: true to delete and create it again "
                f"(or `kind delete cluster --name {cluster.name}`)"
            )
        else:
            advice = (
                f"check the node containers (`docker ps -a --filter label=io.x-k8s.kind.cluster={cluster.name}`, "
                f"`kind export logs --name {cluster.name}`)"
            )
        raise KindError(
            f"kind cluster {cluster.name}: nodes not Ready within {int(wait_timeout)}s ({_pending_text(nodes) if nodes is not None else exc}); {advice}",
            result=result,
        )
    except kube.KubeError as exc:
        raise KindError(f"kind cluster {cluster.name}: cannot read its nodes: {exc}", result=result)
