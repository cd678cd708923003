# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""kind clusters: create, reuse, recreate or delete one, wait for its nodes, export its kubeconfig.

Uses the kind CLI (module_utils.cli) for the cluster itself and the Kubernetes API
(module_utils.kube) for node readiness. Importable without Ansible.
"""

from __future__ import annotations

import copy
import os
import tempfile
import time

try:
    import yaml
    HAS_YAML = True
except ImportError:  # pragma: no cover - PyYAML ships with ansible-core
    HAS_YAML = False

from ansible_collections.krops.platform.plugins.module_utils import cli, kube

KIND_API_VERSION = "kind.x-k8s.io/v1alpha4"
CERTS_DIR = "/etc/containerd/certs.d"
# kind node images already point containerd at certs.d; the patch makes it explicit. The legacy
# `registry.mirrors` table is refused by containerd when config_path is set, so the mirror is a
# hosts.toml file mounted into every node instead.
CONFIG_PATH_PATCH = '[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "%s"\n' % CERTS_DIR


class KindError(Exception):
    """The kind cluster cannot be brought to the requested state; the message says what to do."""

    def __init__(self, message, result=None, details=None):
        super().__init__(message)
        self.result = result or {}
        self.details = details or {}


def context_name(name):
    return "kind-%s" % name


def default_mirror_dir(name):
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "krops", "kind-%s" % name, "certs.d")


def hosts_toml(endpoint):
    return ('server = "%s"\n\n[host."%s"]\n  capabilities = ["pull", "resolve"]\n' % (endpoint, endpoint))


def render_config(config=None, engine_socket="/var/run/docker.sock", registry_mirror=None, mirror_dir=None):
    """The kind Cluster config: the given one (or one control-plane node) plus krops' additions.

    Every node mounts the engine socket at the same path; with a registry mirror every node
    mounts <mirror_dir>/<host>/hosts.toml and containerd is pointed at certs.d.
    """
    rendered = copy.deepcopy(config) if config else {}
    if not isinstance(rendered, dict):
        raise KindError("config must be a kind Cluster config (a dict), got %s" % type(config).__name__)
    rendered.setdefault("kind", "Cluster")
    rendered.setdefault("apiVersion", KIND_API_VERSION)
    if rendered["kind"] != "Cluster":
        raise KindError("config.kind must be Cluster, got %r" % rendered["kind"])
    nodes = rendered.get("nodes") or [{"role": "control-plane"}]
    if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
        raise KindError("config.nodes must be a list of node dicts")
    mounts = []
    if engine_socket:
        mounts.append({"hostPath": engine_socket, "containerPath": engine_socket})
    if registry_mirror:
        host = registry_mirror["host"]
        mounts.append({"hostPath": os.path.join(mirror_dir, host, "hosts.toml"),
                       "containerPath": "%s/%s/hosts.toml" % (CERTS_DIR, host), "readOnly": True})
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


def merge_kubeconfig(existing_text, new_text):
    """existing kubeconfig with the clusters/contexts/users of new_text replaced or added.

    current-context becomes new_text's. Other entries are kept in their order.
    """
    new = yaml.safe_load(new_text) or {}
    if not existing_text or not existing_text.strip():
        return yaml.safe_dump(new, default_flow_style=False, sort_keys=False)
    try:
        merged = yaml.safe_load(existing_text) or {}
    except yaml.YAMLError as exc:
        raise KindError("the existing kubeconfig is not valid YAML (%s); move it away or choose another "
                        "kubeconfig_path" % str(exc).splitlines()[0])
    if not isinstance(merged, dict):
        raise KindError("the existing kubeconfig is not a kubeconfig mapping; choose another kubeconfig_path")
    for section in ("clusters", "contexts", "users"):
        entries = list(merged.get(section) or [])
        for entry in new.get(section) or []:
            for index, old in enumerate(entries):
                if old.get("name") == entry.get("name"):
                    entries[index] = entry
                    break
            else:
                entries.append(entry)
        merged[section] = entries
    merged.setdefault("apiVersion", "v1")
    merged.setdefault("kind", "Config")
    if new.get("current-context"):
        merged["current-context"] = new["current-context"]
    return yaml.safe_dump(merged, default_flow_style=False, sort_keys=False)


class KindCluster:
    """Drives one kind cluster; every method raises KindError or cli.CliError on failure."""

    def __init__(self, name, kind_binary=None, environ=None):
        self.name = name
        self.kind = cli.Cli("kind", binary=kind_binary, version_args=("version",), environ=environ)

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

    def kubeconfig(self):
        """The cluster's kubeconfig text (it holds a client key: never log or return it)."""
        return self.kind.run(["get", "kubeconfig", "--name", self.name]).stdout

    def export_kubeconfig(self, path):
        """Merge this cluster's entries into path (0600); True when the file changed."""
        path = os.path.expanduser(path)
        existing = None
        if os.path.exists(path):
            with open(path, "r", encoding="utf-8") as handle:
                existing = handle.read()
        return kube.write_private(path, merge_kubeconfig(existing, self.kubeconfig()))


def _node_states(objects):
    nodes = []
    for (dummy, name), obj in sorted(objects.items()):
        ready, reason, message = kube.readiness(obj)
        nodes.append({"name": name, "ready": bool(ready), "reason": reason, "message": message})
    return bool(nodes) and all(n["ready"] for n in nodes), nodes


def wait_nodes_ready(kubeconfig, context, timeout, clock=time.monotonic, sleep=time.sleep):
    """Wait (watch) until the cluster has nodes and all are Ready; returns [{name, ready}].

    The API may refuse connections for a moment after `kind create`; connecting is retried
    until the deadline. Raises kube.WaitTimeout with the last node list as state.
    """
    deadline = clock() + timeout
    last_error = None
    while True:
        try:
            client = kube.connect(kubeconfig, context)
            break
        except kube.KubeError as exc:
            last_error = exc
            if clock() >= deadline:
                raise kube.WaitTimeout("the API server did not answer within %ss: %s" % (int(timeout), last_error))
            sleep(1)
    remaining = max(1, deadline - clock())
    state = kube.watch_until(client, "v1", "Node", None, _node_states, timeout=remaining)
    return _public_nodes(state)


def _public_nodes(nodes):
    return [{"name": n["name"], "ready": n["ready"]} for n in nodes or []]


def _pending_text(nodes):
    if not nodes:
        return "no node registered"
    waiting = ["%s (%s%s)" % (n["name"], n.get("reason") or "not Ready",
                              ": %s" % n["message"] if n.get("message") else "")
               for n in nodes if not n["ready"]]
    return "not Ready: %s" % ", ".join(waiting)


def ensure(name, state="present", recreate=False, config=None, engine_socket="/var/run/docker.sock",
           registry_mirror=None, kubeconfig_path=None, wait_timeout=120, node_image=None, kind_binary=None,
           check_mode=False, environ=None):
    """Bring kind cluster ``name`` to ``state``; returns the module result dict.

    Raises KindError (with the partial result) or cli.CliError.
    """
    if not HAS_YAML:
        raise KindError("the Python library PyYAML is required (it ships with ansible-core): pip install pyyaml")
    cluster = KindCluster(name, kind_binary=kind_binary, environ=environ)
    result = {"changed": False, "created": False, "recreated": False, "deleted": False,
              "context": cluster.context, "kubeconfig_path": os.path.expanduser(kubeconfig_path) if kubeconfig_path else None,
              "nodes": []}
    result["kind_version"] = cluster.kind.version()
    exists = cluster.exists()

    if state == "absent":
        if exists:
            result.update(changed=True, deleted=True)
            if not check_mode:
                cluster.delete(kubeconfig_path)
        return result

    mirror_dir = None
    if registry_mirror:
        if not registry_mirror.get("host") or not registry_mirror.get("endpoint"):
            raise KindError("registry_mirror needs host (e.g. localhost:5001) and endpoint "
                            "(e.g. http://krops-registry:5000)")
        mirror_dir = os.path.expanduser(registry_mirror.get("config_dir") or default_mirror_dir(name))
    rendered = render_config(config, engine_socket, registry_mirror, mirror_dir)
    result["config"] = rendered

    if exists and not recreate:
        return _reuse(cluster, result, kubeconfig_path, wait_timeout, check_mode)

    result["changed"] = True
    if exists:
        result["recreated"] = True
    else:
        result["created"] = True
    if check_mode:
        return result
    if registry_mirror:
        _write_hosts_toml(mirror_dir, registry_mirror)
    if exists:
        cluster.delete(kubeconfig_path)
    if kubeconfig_path:
        os.makedirs(os.path.dirname(os.path.abspath(os.path.expanduser(kubeconfig_path))), mode=0o700, exist_ok=True)
    cluster.create(rendered, node_image=node_image, kubeconfig_path=kubeconfig_path)
    _finish(cluster, result, kubeconfig_path, wait_timeout, reused=False)
    return result


def _write_hosts_toml(mirror_dir, registry_mirror):
    folder = os.path.join(mirror_dir, registry_mirror["host"])
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "hosts.toml")
    text = hosts_toml(registry_mirror["endpoint"])
    current = None
    if os.path.exists(path):
        with open(path, "r", encoding="utf-8") as handle:
            current = handle.read()
    if current != text:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(path, 0o644)
        return True
    return False


def _reuse(cluster, result, kubeconfig_path, wait_timeout, check_mode):
    if check_mode:
        if kubeconfig_path:
            path = os.path.expanduser(kubeconfig_path)
            existing = None
            if os.path.exists(path):
                with open(path, "r", encoding="utf-8") as handle:
                    existing = handle.read()
            wanted = merge_kubeconfig(existing, cluster.kubeconfig())
            mode_ok = existing is not None and (os.stat(path).st_mode & 0o777) == 0o600
            result["changed"] = existing != wanted or not mode_ok
        return result
    _finish(cluster, result, kubeconfig_path, wait_timeout, reused=True)
    return result


def _finish(cluster, result, kubeconfig_path, wait_timeout, reused):
    if kubeconfig_path:
        if cluster.export_kubeconfig(kubeconfig_path):
            result["changed"] = True
        _wait(cluster, result, kubeconfig_path, wait_timeout, reused)
        return
    fd, tmp = tempfile.mkstemp(prefix="krops-kind-", suffix=".kubeconfig")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(cluster.kubeconfig())
        _wait(cluster, result, tmp, wait_timeout, reused)
    finally:
        os.unlink(tmp)


def _wait(cluster, result, kubeconfig, wait_timeout, reused):
    try:
        result["nodes"] = wait_nodes_ready(kubeconfig, cluster.context, wait_timeout)
    except kube.WaitTimeout as exc:
        nodes = exc.state
        result["nodes"] = _public_nodes(nodes)
        if reused:
            advice = ("the existing cluster looks unhealthy: set recreate: true to delete and create it again "
                      "(or `kind delete cluster --name %s`)" % cluster.name)
        else:
            advice = ("check the node containers (`docker ps -a --filter label=io.x-k8s.kind.cluster=%s`, "
                      "`kind export logs --name %s`)" % (cluster.name, cluster.name))
        raise KindError("kind cluster %s: nodes not Ready within %ss (%s); %s"
                        % (cluster.name, int(wait_timeout), _pending_text(nodes) if nodes is not None else exc, advice),
                        result=result)
    except kube.KubeError as exc:
        raise KindError("kind cluster %s: cannot read its nodes: %s" % (cluster.name, exc), result=result)
