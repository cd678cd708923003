# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""One emulated host for lifecycle tests: the real playbooks run with ansible-playbook, no Docker.

    from tests.substrate.lifecycle import emulated_world, lifecycle_world  # noqa: F401 (the fixture)

    def test_x(lifecycle_world):                      # or: with emulated_world(tmp_path) as world:
        world = lifecycle_world
        rc, out, err = world.playbook("playbooks/local-host.yml", inventory="inventories/local-host")
        world.cluster("local-management")             # a cluster's StrictKubeEmulator, by name
        world.leftovers()                             # what is left on the host (containers, volumes, ...)

What the world is (API stable; other lifecycle tests build on it):

- ``world.world``: a flux_world.World with the emulated Flux (flux_world.FluxController) and CAPI
  (capi_world.CapiController) reconciling in a background thread. Every API server is a
  StrictKubeEmulator over HTTPS (a test CA, in every kubeconfig as certificate-authority-data).
- ``world.docker``: the Docker Engine API double (docker_double.DockerDouble) on a unix socket, the
  host's engine: ``DOCKER_HOST`` and ``ENGINE_SOCK`` point at it. Its ``registry:3`` image runs the real
  docker-registry on the published host port, with its storage in the container's volume.
- ``world.bin``: stand-ins on PATH (tests/substrate/standins/): ``kind`` (creates and deletes
  clusters in this world: an API server, Ready nodes, node containers labelled as kind labels them),
  ``docker`` (the CLI: version, info, inspect -f, exec into node containers), ``helm`` (releases kept
  in the cluster), ``clusterctl`` (``move`` between two API servers of the world). Each one refuses
  what the pinned real tool refuses (tool_contracts.py). ``kubectl`` is the machine's real one.
- CAPD: a provisioned Cluster whose infrastructure is a Dev*/Docker* kind gets its API server with a
  Ready node, and the containers CAPD runs (``<cluster>-lb`` publishing 6443/tcp on the API server's
  port, ``<cluster>-control-plane-<suffix>`` with its anonymous /var volume), labelled
  io.x-k8s.kind.cluster=<cluster>; deleting the Cluster removes them. Removing a cluster's node
  containers stops its API server, as it would on a real host.
- ``world.env``: what ansible-playbook needs (PATH, HOME inside the world, DOCKER_HOST, ENGINE_SOCK,
  REGISTRY_PORT: a free port instead of bootstrap.toml's 5001, and short timeouts).

Upstream facts (labels, names, ports) are listed in docs/testing.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from ansible_collections.krops.platform.plugins.module_utils import render

from tests.substrate import prewarm
from tests.substrate import tool_contracts as contracts
from tests.substrate.capi_world import CapiController
from tests.substrate.docker_double import DockerDouble
from tests.substrate.fixtures import (
    REPO,
    VENV_BIN,
    ManagedProcess,
    free_port,
    keep_for_profile,
    playbook_env,
    python_executable,
    wait_until_answers,
)
from tests.substrate.flux_world import FluxController, World
from tests.substrate.strict_api import StrictKubeEmulator

STANDINS = Path(__file__).resolve().parent / "standins"
KIND_CLUSTER_LABEL = "io.x-k8s.kind.cluster"  # kind pkg/cluster/internal/providers/docker/constants.go
KIND_ROLE_LABEL = "io.x-k8s.kind.role"
KIND_NETWORK = "kind"
CAPD_KINDS = ("DevCluster", "DockerCluster")
# Binaries the world puts on PATH, each a stand-in script under standins/.
TOOLS = {"kind": "kind.py", "docker": "docker_cli.py", "helm": "helm.py", "clusterctl": "clusterctl.py"}


class WorldError(Exception):
    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


class EmulatedWorld:
    """The host: Docker double, registry, kind, CAPD, Flux and CAPI; see the module docstring."""

    def __init__(self, root, environment="local-host", git_checkouts=None, env=None, registry_alias=None):
        self.root = Path(root)
        self.environment = environment
        self.home = self.root / "home"
        self.bin = self.root / "bin"
        for folder in (self.home, self.bin, self.root / "work"):
            folder.mkdir(parents=True, exist_ok=True)
        # unix sockets need a short path (108 bytes): a folder of its own under /tmp
        self._sock_dir = tempfile.mkdtemp(prefix="krops-host-", dir="/tmp")
        self.engine_socket = os.path.join(self._sock_dir, "docker.sock")
        self.registry_port = free_port()
        self.registry = "127.0.0.1:%d" % self.registry_port
        self.world = World()
        self.docker = DockerDouble(
            socket_path=self.engine_socket, programs={"registry": self._run_registry}, on_remove=self._removed
        )
        self.docker.exec_handler = self._exec
        self.kind_clusters = {}  # name -> emulator
        self.capd = {}  # CAPI cluster name -> emulator (its API server)
        self.node_files = {}  # container name -> {path: text}, {"dirs": [...]}
        self._stopped = set()
        self._apis = []
        self._lock = threading.RLock()
        kubectl = shutil.which("kubectl", path="/usr/local/bin:/usr/bin:/bin") or "kubectl"
        self.kubectl = kubectl
        FluxController(
            self.world,
            self.root / "work",
            registry_aliases={registry_alias or "krops-registry:5000": self.registry},
            git_checkouts=git_checkouts,
            renderer=render.find_kustomize(kubectl),
        )
        self.capi = CapiController(self.world, spawn=self._spawn_capi)
        self.capi.on_provisioned = self._capd_provisioned
        self.capi.on_deleted = self._capd_deleted
        self.control = _kind_control(self)
        self._install_bins()
        self.env = {
            "PATH": f"{self.bin}{os.pathsep}{VENV_BIN}{os.pathsep}/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.home),
            "DOCKER_HOST": self.docker.url,
            "ENGINE_SOCK": self.engine_socket,
            "REGISTRY_PORT": str(self.registry_port),
            "REGISTRY_READY_RETRIES": "30",
            "LOCAL_RECONCILE_TIMEOUT": "90s",
            "MGMT_READY_TIMEOUT": "90s",
            "CLUSTER_DELETE_TIMEOUT": "90s",
            "PROVIDER_DELETE_TIMEOUT": "60s",
            "KUBECONFIG": str(self.home / ".kube" / "config"),
        }
        self.env.update(env or {})
        self.errors = []

    # ---- life ------------------------------------------------------------------------------
    def start(self, interval=0.02, idle=1.0):
        self.world.start(interval, idle)
        return self

    def stop(self):
        """Stop everything; returns the reconcile errors of the world (empty when all went well)."""
        errors = self.world.stop() if hasattr(self.world, "_stop") else []
        self.docker.stop()
        self.control.stop()
        for api in list(self._apis):
            self._stop_api(api)
        shutil.rmtree(self._sock_dir, ignore_errors=True)
        return list(errors) + self.errors

    def _install_bins(self):
        (self.bin / "world.json").write_text(
            json.dumps({"control": self.control.url, "docker_host": self.docker.url, "repo": str(REPO)})
        )
        for tool in TOOLS:
            install_standin(self.bin, tool)

    # ---- running the playbooks ---------------------------------------------------------------
    def playbook(self, playbook, *args, inventory=None, env=None, timeout=600):
        """ansible-playbook PLAYBOOK [-i INVENTORY] ARGS from the checkout -> (rc, JSON output, stderr).

        The run leads its own process group (rc -9 when a stand-in killed it, standins/common.kill_the_run).
        """
        argv = [prewarm.playbook_command(), str(playbook)]
        if inventory:
            argv += ["-i", str(inventory)]
        argv += list(args) + prewarm.playbook_args()
        run_env = playbook_env(self.root, dict(self.env, **(env or {})))
        run_env["PATH"] = self.env["PATH"]
        # ansible's local RPC server listens on a unix socket under TMPDIR (multiprocessing's pymp-*
        # folder) and keeps files in ANSIBLE_LOCAL_TEMP: a unix socket path must stay under 108 bytes
        run_env["ANSIBLE_LOCAL_TEMP"] = os.path.join(self._sock_dir, "ansible")
        run_env["TMPDIR"] = os.path.join(self._sock_dir, "tmp")
        os.makedirs(run_env["TMPDIR"], exist_ok=True)
        # its own process group: a stand-in told to kill the run (a dying host) kills exactly this run
        proc = subprocess.run(
            argv,
            cwd=REPO,
            env=run_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            start_new_session=True,
        )
        try:
            output = json.loads(proc.stdout)
        except json.JSONDecodeError:
            output = {"raw": proc.stdout}
        keep_for_profile(proc.stdout)
        return proc.returncode, output, proc.stderr

    # ---- looking at the world ----------------------------------------------------------------
    def cluster(self, name):
        """The API server of a kind cluster or a CAPI cluster, by name (KeyError when there is none)."""
        with self._lock:
            if name in self.kind_clusters:
                return self.kind_clusters[name]
            return self.capd[name]

    def leftovers(self):
        """What is left on the host: containers, volumes, networks (name -> labels), the registry, API servers."""
        registry_answers = True
        try:
            wait_until_answers("http://%s/v2/" % self.registry, timeout=0.5)
        except RuntimeError:
            registry_answers = False
        return {
            "containers": {n: dict(c["labels"]) for n, c in self.docker.containers.items()},
            "volumes": sorted(self.docker.volumes),
            "networks": {n: dict(v["labels"]) for n, v in self.docker.networks.items()},
            "registry_answers": registry_answers,
            "kind_clusters": sorted(self.kind_clusters),
            "api_servers": sorted(a.name for a in self.world.clusters.values()),
        }

    # ---- API servers -------------------------------------------------------------------------
    def _new_api(self, name):
        api = StrictKubeEmulator(name).start(tls=True)
        self._apis.append(api)
        return api

    def _stop_api(self, api):
        if id(api) in self._stopped:
            return
        self._stopped.add(id(api))
        self.world.clusters.pop(api.url, None)
        api.stop()

    @staticmethod
    def _ready_node(api, name, role):
        labels = {"kubernetes.io/hostname": name}
        if role == "control-plane":
            labels["node-role.kubernetes.io/control-plane"] = ""
        api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
        api.set_condition("v1", "Node", name, None, "Ready", "True", "KubeletReady", "kubelet is posting ready status")

    # ---- kind --------------------------------------------------------------------------------
    def kind_create(self, name, config, image=None):
        """What `kind create cluster` does on the host; returns the kubeconfig (dict)."""
        with self._lock:
            if name in self.kind_clusters or any(
                c["labels"].get(KIND_CLUSTER_LABEL) == name for c in self.docker.containers.values()
            ):
                raise WorldError(
                    'ERROR: failed to create cluster: node(s) already exist for a cluster with the name "%s"' % name
                )
            image = image or "kindest/node"
            api = self._new_api(f"kind-{name}")
            self.docker.add_network(KIND_NETWORK)
            nodes = config.get("nodes") or [{"role": "control-plane"}]
            for node, node_name in zip(nodes, contracts.kind_node_names(name, config)):
                role = node.get("role") or "control-plane"
                self.docker.add_container(
                    node_name,
                    {KIND_CLUSTER_LABEL: name, KIND_ROLE_LABEL: role},
                    [KIND_NETWORK],
                    anonymous_volumes=1,  # --volume /var
                    ports={"6443/tcp": api.port} if role == "control-plane" else None,
                    image=image,
                )
                self.node_files[node_name] = {"files": {}, "dirs": []}
                self._ready_node(api, node_name, role)
            self.kind_clusters[name] = api
            self.world.add_cluster(api)
            return self.kind_kubeconfig(name)

    def kind_kubeconfig(self, name):
        api = self.kind_clusters.get(name)
        if api is None:
            raise WorldError(
                "ERROR: could not locate any control plane nodes for cluster named '%s'. Use the --name option to "
                "select a different cluster" % name
            )
        context = f"kind-{name}"
        config = api.kubeconfig(context=context, cluster=context, user=context)
        config["users"][0]["user"] = {"token": f"kind-token-{name}"}
        return config

    def kind_delete(self, name):
        """`kind delete cluster`: its node containers (by label) and their anonymous volumes go."""
        with self._lock:
            for node in [n for n, c in self.docker.containers.items() if c["labels"].get(KIND_CLUSTER_LABEL) == name]:
                self.docker.remove_container(node, remove_volumes=True)
            api = self.kind_clusters.pop(name, None)
            if api is not None:
                self._stop_api(api)

    def kind_nodes(self, name):
        return sorted(n for n, c in self.docker.containers.items() if c["labels"].get(KIND_CLUSTER_LABEL) == name)

    # ---- CAPD --------------------------------------------------------------------------------
    def _spawn_capi(self, name):
        api = self._new_api(name)
        self._ready_node(api, f"{name}-control-plane-{_suffix(name)}", "control-plane")
        with self._lock:
            self.capd[name] = api
        return api

    def _capd_provisioned(self, api, cluster, workload):
        infra = ((cluster.get("spec") or {}).get("infrastructureRef") or {}).get("kind")
        name = cluster["metadata"]["name"]
        if infra not in CAPD_KINDS or f"{name}-lb" in self.docker.containers:
            return
        with self._lock:
            self.docker.add_network(KIND_NETWORK)
            labels = {KIND_CLUSTER_LABEL: name}
            self.docker.add_container(
                f"{name}-lb",
                dict(labels, **{KIND_ROLE_LABEL: "external-load-balancer"}),
                [KIND_NETWORK],
                ports={"6443/tcp": workload.port},
                image="kindest/haproxy",
            )
            node = f"{name}-control-plane-{_suffix(name)}"
            self.docker.add_container(
                node, dict(labels, **{KIND_ROLE_LABEL: "control-plane"}), [KIND_NETWORK], anonymous_volumes=1
            )
            self.node_files[node] = {"files": {}, "dirs": []}

    def _capd_deleted(self, api, cluster, workload):
        name = cluster["metadata"]["name"]
        for container in [
            n for n, c in list(self.docker.containers.items()) if c["labels"].get(KIND_CLUSTER_LABEL) == name
        ]:
            self.docker.remove_container(container, remove_volumes=True)
        with self._lock:
            gone = self.capd.pop(name, None)
        if gone is not None:
            self._stop_api(gone)

    def _removed(self, name, container):
        """A container went: a cluster with no control-plane node left loses its API server."""
        self.node_files.pop(name, None)
        cluster = container["labels"].get(KIND_CLUSTER_LABEL)
        if not cluster or container["labels"].get(KIND_ROLE_LABEL) != "control-plane":
            return
        if any(
            c["labels"].get(KIND_CLUSTER_LABEL) == cluster and c["labels"].get(KIND_ROLE_LABEL) == "control-plane"
            for c in self.docker.containers.values()
        ):
            return
        with self._lock:
            api = self.kind_clusters.pop(cluster, None) or self.capd.pop(cluster, None)
        if api is not None:
            self._stop_api(api)

    # ---- inside containers (docker exec) -----------------------------------------------------
    def _exec(self, name, container, argv, stdin):
        node = self.node_files.get(name)
        if node is None:
            return 126, "", f"OCI runtime exec failed: {argv[:1]} not found in container {name}\n"
        files = node["files"]
        if argv[:2] == ["mkdir", "-p"]:
            node["dirs"].extend(argv[2:])
            return 0, "", ""
        if argv[:2] == ["cp", "/dev/stdin"] and len(argv) == 3:
            if os.path.dirname(argv[2]) not in node["dirs"]:
                return 1, "", "cp: cannot create regular file '%s': No such file or directory\n" % argv[2]
            files[argv[2]] = stdin
            return 0, "", ""
        if argv[:1] == ["cat"] and len(argv) == 2:
            if argv[1] not in files:
                return 1, "", "cat: %s: No such file or directory\n" % argv[1]
            return 0, files[argv[1]], ""
        return 126, "", "stand-in: exec %s is not emulated\n" % argv

    # ---- the registry image ------------------------------------------------------------------
    def _run_registry(self, double, name, container):
        """registry:3 started: the real docker-registry on each published host port of 5000/tcp."""
        binds = (container.get("host_config") or {}).get("PortBindings", {}).get("5000/tcp") or []
        volume = next(
            (v for v, target in (container.get("mount_points") or {}).items() if target == "/var/lib/registry"), None
        )
        storage = self.root / "volumes" / (volume or name)
        storage.mkdir(parents=True, exist_ok=True)
        processes = []
        for bind in binds:
            address = "{}:{}".format(bind.get("HostIp") or "0.0.0.0", bind.get("HostPort"))
            config = self.root / f"registry-{name}-{bind.get('HostPort')}.yml"
            config.write_text(
                yaml.safe_dump(
                    {
                        "version": 0.1,
                        "log": {"level": "warn"},
                        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
                        "http": {"addr": address},
                    }
                )
            )
            binary = shutil.which("docker-registry") or "/usr/bin/docker-registry"
            process = ManagedProcess([binary, "serve", str(config)], self.root / f"registry-{name}.log")
            processes.append(process)
        for bind in binds:
            wait_until_answers("http://127.0.0.1:%s/v2/" % bind.get("HostPort"), timeout=20)

        def stop():
            for process in processes:
                process.stop()
            if volume and volume not in double.volumes:
                shutil.rmtree(storage, ignore_errors=True)

        return stop


def install_standin(folder, tool):
    """Put the stand-in for ``tool`` (TOOLS) into ``folder`` as an executable named ``tool``; returns its path."""
    return python_executable(Path(folder) / tool, STANDINS / TOOLS[tool], {"KROPS_STANDIN_BIN": folder})


def install_clusterctl(folder, mode="move", resume=True, kill=None):
    """The clusterctl stand-in in ``folder``, moving (or failing, or killing the run at ``kill``) as ``mode`` says
    (standins/clusterctl.py)."""
    settings = {"mode": mode, "resume": resume}
    if kill:
        settings["kill"] = kill
    (Path(folder) / "clusterctl.json").write_text(json.dumps(settings))
    return install_standin(folder, "clusterctl")


def _suffix(name):
    return "%05x" % (sum(ord(c) * (i + 1) for i, c in enumerate(name)) % 0xFFFFF)


class ControlServer:
    """The host side of a stand-in: JSON over HTTP on 127.0.0.1 (``url``), started at once, ``stop()`` to end it.

    ``get`` and ``post`` map a path to a function of the query (GET, last value of each name) or of the JSON body
    (POST) that returns the reply's body. A WorldError replies with its status; any other error of a POST is
    recorded in ``world.errors`` and replies 500 (the stand-in prints it, the test sees it there); an unknown path
    is a 404. Without ``get`` the server has no GET at all (501).
    """

    def __init__(self, world, get=None, post=None):
        get, post = dict(get or {}), dict(post or {})

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                return

            def _reply(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if not get:  # what http.server answers a method its handler has no do_ for
                    return self.send_error(501, f"Unsupported method ({self.command!r})")
                parts = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                if parts.path not in get:
                    return self._reply(404, {"error": "unknown path " + parts.path})
                try:
                    return self._reply(200, get[parts.path](query))
                except WorldError as exc:
                    return self._reply(exc.status, {"error": str(exc)})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path not in post:
                    return self._reply(404, {"error": "unknown path " + self.path})
                try:
                    return self._reply(200, post[self.path](body))
                except WorldError as exc:
                    return self._reply(exc.status, {"error": str(exc)})
                except Exception as exc:  # the stand-in prints it; the test sees it in world.errors
                    world.errors.append(repr(exc))
                    return self._reply(500, {"error": repr(exc)})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def _kind_control(world):
    """The kind stand-in's ControlServer (standins/kind.py asks it)."""

    def delete(body):
        world.kind_delete(body["name"])
        return {}

    return ControlServer(
        world,
        get={
            "/world/leftovers": lambda _query: world.leftovers(),
            "/kind/clusters": lambda _query: sorted(world.kind_clusters),
            "/kind/nodes": lambda query: world.kind_nodes(query.get("name", "kind")),
            "/kind/kubeconfig": lambda query: world.kind_kubeconfig(query.get("name", "kind")),
        },
        post={
            "/kind/create": lambda body: world.kind_create(body["name"], body["config"], body.get("image")),
            "/kind/delete": delete,
        },
    )


@contextlib.contextmanager
def emulated_world(root, **options):
    """Build, start and (at the end) stop an EmulatedWorld under ``root``; see the module docstring."""
    world = EmulatedWorld(root, **options).start()
    try:
        yield world
    finally:
        world.stop()


@pytest.fixture
def lifecycle_world(tmp_path):
    """An started EmulatedWorld in tmp_path; reconcile errors fail the test at the end."""
    world = EmulatedWorld(tmp_path / "host").start()
    yield world
    errors = world.stop()
    assert errors == [], errors


def changed_tasks(output):
    """Names of the tasks that reported changed in a JSON-callback output (an idempotent run has none)."""
    return [
        task["task"]["name"]
        for play in output.get("plays", [])
        for task in play.get("tasks", [])
        for result in task["hosts"].values()
        if result.get("changed")
    ]


def failed_tasks(output):
    """(task, msg, stderr tail) of every failed task, for assertion messages."""
    return [
        (task["task"]["name"], result.get("msg"), (result.get("stderr") or "")[-800:])
        for play in output.get("plays", [])
        for task in play.get("tasks", [])
        for result in task["hosts"].values()
        if result.get("failed")
    ]


def role_times(output):
    """{role: wall seconds from its first task's start to its last task's end} of a JSON-callback output."""
    spans = {}
    for play in output.get("plays", []):
        for task in play.get("tasks", []):
            name, duration = task["task"]["name"], task["task"].get("duration") or {}
            if " : " not in name or not duration.get("start") or not duration.get("end"):
                continue
            role = name.split(" : ", 1)[0].rsplit(".", 1)[-1]
            start, end = (_instant(duration[k]) for k in ("start", "end"))
            first, last = spans.get(role, (start, end))
            spans[role] = (min(first, start), max(last, end))
    return {role: round(end - start, 1) for role, (start, end) in spans.items()}


def _instant(text):
    import datetime

    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def wait_for(predicate, timeout=30.0, interval=0.05):
    """Poll predicate until it is truthy; returns its last value."""
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = predicate()
    return value
