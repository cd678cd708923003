# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The crash matrix's fast form (issue 30): the Kubernetes side of the local-host lifecycle, in-process.

A kind API server and the management cluster's, both StrictKubeEmulator, with the emulated Cluster API
(capi_world.CapiController: providers become Ready and install their CRDs, the real tree's Clusters get
API servers and ``<cluster>-kubeconfig`` Secrets) reconciling in flux_world.World's thread. The kind cluster
starts as the bootstrap leaves it: the providers, ``mgmt/local-host/clusters/{local-management,local-workload}``
provisioned, Flux's Kustomizations, the krops-run ConfigMap and the kind marker. ``helm`` and ``clusterctl``
are the stand-ins of tests/substrate/standins (state in the clusters). The management cluster also holds decoys
that look like ours (a Secret and a ConfigMap whose names are near krops' ones), and the kind cluster a user's
Cluster named like the workload one, in the same namespace (clusterctl moves it with ours).

``steps(world)`` are the runs of the lifecycle, generated from bootstrap.toml and the teardown plan
(module_utils.teardown_plan.build_plan): capi_pivot, flux_handoff on the management cluster, then the
Kubernetes-side steps of the plan of a pivoted cloud environment (suspend-flux, delete-clusters,
capi-providers, bootstrap-secrets) with flux_release_quiesce before the sweep, as roles/teardown runs them.
tests/integration/test_crash_matrix.py faults each of their writes once.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml
from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.modules import (
    bootstrap_secrets_delete,
    capi_cluster_delete,
    capi_pivot,
    capi_provider_delete,
    flux_handoff,
    flux_release_quiesce,
    teardown_host,
)

from tests.substrate.capi_world import CapiController
from tests.substrate.fixtures import REPO
from tests.substrate.flux_world import World, ssa_apply
from tests.substrate.krops_marks import make_kind_marker
from tests.substrate.lifecycle import install_clusterctl, install_standin
from tests.substrate.strict_api import StrictKubeEmulator

OPERATOR = "operator.cluster.x-k8s.io/v1alpha2"
CLUSTER = ("cluster.x-k8s.io/v1beta2", "Cluster")
KS = ("kustomize.toolkit.fluxcd.io/v1", "Kustomization")
MGMT, WORKLOAD = "local-management", "local-workload"
DECOY_CLUSTER = "local-workload-2"
RUN_TAGS = {"KROPS_RUN_ID": "local-host-20261203", "KROPS_RUN_KIND": "manual"}
AGE_KEY = (
    "# created: 2026-12-03T05:00:00Z\n# public key: age1qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq\n"
    "AGE-SECRET-KEY-1QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ\n"
)
# Every provider manifest of the local-host environment, applied on kind as the bootstrap's Flux applies them.
PROVIDER_FILES = [
    "mgmt/local-host/capi-system/core-provider.yaml",
    "mgmt/local-host/capi-system/kubeadm-bootstrap-provider.yaml",
    "mgmt/local-host/capi-system/kubeadm-control-plane-provider.yaml",
    "mgmt/local-host/capd-system/infrastructure-provider.yaml",
]
CLUSTER_FILES = ("cluster.yaml", "control-plane.yaml", "workers.yaml")
# Objects on the management cluster the teardown must keep: lookalikes of krops' names.
DECOYS = (
    ("v1", "Secret", "sops-age-backup", "flux-system"),
    ("v1", "ConfigMap", "krops-run-old", "flux-system"),
)
BOOTSTRAP = """
[bootstrap]
default-environment = "local-host"
git-url = "https://github.com/krops/krops"
mgmt-kubeconfig = "{kubeconfig}"

[charts]
flux-operator = "{flux_operator}"
cert-manager = "{cert_manager}"
capi-operator = "{capi_operator}"

[environments.local-host]
kind = "local-host"
sync = "oci"
sync-path = "mgmt/local-host"
mgmt-cluster = "{mgmt}"
mgmt-ready-timeout = "15m"
infra-provider-namespace = "capd-system"
infra-provider-name = "docker"
provider-manifests = {providers}

[environments.local-host.teardown]
capi-workloads = ["{workload}"]

# The teardown plan of a pivoted cloud environment on the same clusters (its Kubernetes-side steps).
[environments.aws]
kind = "aws"
mgmt-region = "eu-north-1"
sync = "git"
sync-path = "mgmt/local-host"
mgmt-cluster = "{mgmt}"
mgmt-ready-timeout = "15m"
infra-provider-namespace = "capd-system"
infra-provider-name = "docker"
provider-manifests = {providers}

[environments.aws.teardown]
capi-workloads = ["{workload}"]
"""


def _ready_node(api, name):
    api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    api.set_condition("v1", "Node", name, None, "Ready", "True", "KubeletReady", "kubelet is posting ready status")


class CrashWorld:
    """Two strict API servers, the emulated Cluster API, the stand-ins; ``apis()`` by name."""

    def __init__(self, root):
        self.root = Path(root)
        self.bin = self.root / "bin"
        self.repo = self.root / "repo"
        for folder in (self.bin, self.repo / "mgmt"):
            folder.mkdir(parents=True, exist_ok=True)
        self.target_kubeconfig = self.root / "home" / "krops-mgmt.yaml"
        self.age_key = self.root / "age.key"
        self.age_key.write_text(AGE_KEY)
        self.age_key.chmod(0o600)
        self._started = []
        self._urls = set()  # every URL a server of this world had: never handed out twice (_spawn)
        self.errors = []  # what the emulated controllers raised
        self.teardown_api = None  # the cluster the last teardown_steps() runs on
        self.world = World()
        self.capi = CapiController(self.world, spawn=self._spawn)
        self.capi.on_provisioned = lambda _mgmt, cluster, api: _ready_node(api, cluster["metadata"]["name"] + "-cp-0")
        self.kind = self._spawn("kind-mgmt", bundles=("capi-operator",))
        self._write_config()
        for tool in ("helm", "clusterctl"):
            install_standin(self.bin, tool) if tool == "helm" else install_clusterctl(self.bin)
        self._bootstrapped_kind()
        self.registry_url = self._registry()
        self.world.start(interval=0.02, idle=0.5)

    def _spawn(self, name, bundles=()):
        # A URL a stopped server had is still named by kubeconfigs (a checkpoint's Secrets, files read before a
        # restore) and is its own again if a restore brings it back: a new server bound to the same port (the OS may
        # give it out again) would answer for it. Such a server stays bound until one gets a port of its own.
        taken = []
        api = StrictKubeEmulator(name).start()
        while api.url in self._urls:
            taken.append(api)
            api = StrictKubeEmulator(name).start()
        for other in taken:
            other.stop()
        api.install_bundle(*bundles)
        # numbered by servers ever started, not live ones: no file of a server a restore may bring back is reused
        api.kubeconfig_path = api.write_kubeconfig(
            self.root / ("%s-%d.kubeconfig" % (name, len(self._urls))), context=name
        )
        self._urls.add(api.url)
        self._started.append(api)
        self.world.add_cluster(api)
        return api

    def _write_config(self):
        charts = krops_config.load(str(REPO / "bootstrap.toml"), environ={}).charts
        for rel in PROVIDER_FILES:
            target = self.repo / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / rel, target)
        text = BOOTSTRAP.format(
            mgmt=MGMT,
            kubeconfig=self.target_kubeconfig,
            workload=WORKLOAD,
            providers=json.dumps(PROVIDER_FILES),
            flux_operator=charts.flux_operator,
            cert_manager=charts.cert_manager,
            capi_operator=charts.capi_operator,
        )
        self.config_file = self.repo / "bootstrap.toml"
        self.config_file.write_text(text)
        self.config = krops_config.load(str(self.config_file), environ={})

    def _bootstrapped_kind(self):
        kind = self.kind
        for namespace in (
            "flux-system",
            "capi-system",
            "capi-kubeadm-bootstrap-system",
            "capi-kubeadm-control-plane-system",
            "capd-system",
        ):
            kind.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        for rel in PROVIDER_FILES:
            for doc in yaml.safe_load_all((REPO / rel).read_text()):
                if doc:
                    ssa_apply(kind, doc, "kustomize-controller")
        self.world.settle()
        # and a user's Cluster in the same namespace, named like ours (the workload one's files under its name):
        # clusterctl moves it with ours, the teardown must keep it
        for cluster, name in ((MGMT, MGMT), (WORKLOAD, WORKLOAD), (WORKLOAD, DECOY_CLUSTER)):
            for rel in CLUSTER_FILES:
                text = (REPO / "mgmt/local-host/clusters" / cluster / rel).read_text().replace(cluster, name)
                for doc in yaml.safe_load_all(text):
                    if doc:
                        ssa_apply(kind, doc, "kustomize-controller")
        self.world.settle()
        kind.install_bundle("flux")
        for name in ("flux-system", "capi-providers", "clusters"):
            kind.create(
                {
                    "apiVersion": KS[0],
                    "kind": KS[1],
                    "metadata": {"name": name, "namespace": "flux-system"},
                    "spec": {
                        "interval": "5m",
                        "path": "./mgmt/local-host",
                        "prune": True,
                        "sourceRef": {"kind": "OCIRepository", "name": "flux-system"},
                    },
                }
            )
        kind.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "krops-run", "namespace": "flux-system"},
                "data": dict(RUN_TAGS),
            }
        )
        make_kind_marker(kind, "local-host")
        self.mgmt = self.world.cluster_for_kubeconfig(self.secret_kubeconfig(MGMT))

    def _registry(self):
        """The local registry's /v2/ (the pivot's precondition: Flux on the management cluster pulls from it)."""

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                self.send_response(200 if self.path.startswith("/v2/") else 404)
                self.send_header("Docker-Distribution-API-Version", "registry/2.0")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                return

        self._registry_server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._registry_server.serve_forever, daemon=True).start()
        return "http://127.0.0.1:%d" % self._registry_server.server_address[1]

    def secret_kubeconfig(self, cluster):
        secret = self.kind.get("v1", "Secret", cluster + "-kubeconfig", "default")
        return base64.b64decode(secret["data"]["value"]).decode()

    def plant_decoys(self):
        mgmt = self.mgmt
        for namespace in ("flux-system",):
            if not mgmt.exists("v1", "Namespace", namespace):
                mgmt.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        mgmt.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "data": {"x": "eA=="},
                "metadata": {"name": "sops-age-backup", "namespace": "flux-system"},
            }
        )
        mgmt.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "data": {"KROPS_RUN_ID": "someone-else"},
                "metadata": {"name": "krops-run-old", "namespace": "flux-system"},
            }
        )

    # ---- the runs ------------------------------------------------------------------------------------
    def bootstrap_steps(self):
        """(name, module, args) of the bootstrap's Kubernetes-side runs from the kind cluster as bootstrapped."""
        return [
            (
                "capi_pivot",
                capi_pivot,
                {
                    "source_kubeconfig": self.kind.kubeconfig_path,
                    "source_context": "kind-mgmt",
                    "config_file": str(self.config_file),
                    "environment": "local-host",
                    "target_kubeconfig": str(self.target_kubeconfig),
                    "target_server": self.mgmt.url,
                    "registry_url": self.registry_url,
                    "clusterctl_binary": str(self.bin / "clusterctl"),
                    "helm_binary": str(self.bin / "helm"),
                    # the world is provisioned already: the waits end at once unless a machine is overloaded
                    "wait_timeout": 30,
                    "node_timeout": 15,
                    "mgmt_ready_timeout": 15,
                    "move_timeout": 60,
                },
            ),
            (
                "flux_handoff",
                flux_handoff,
                {
                    "kubeconfig": str(self.target_kubeconfig),
                    "context": "krops-mgmt",
                    "environment": "local-host",
                    "config_file": str(self.config_file),
                    "age_key_file": str(self.age_key),
                    "run_tags": dict(RUN_TAGS),
                    "helm_binary": str(self.bin / "helm"),
                    "wait": False,
                },
            ),
        ]

    def teardown_steps(self, run_module):
        """(name, module, args) of the Kubernetes-side teardown steps of the plan teardown_host gives for the
        state the clusters are in (the kind cluster or the management cluster as host)."""
        found = run_module(
            teardown_host,
            {"kubeconfig": self.kind.kubeconfig_path, "environment": "aws", "config_file": str(self.config_file)},
        )
        if found.get("failed"):
            raise AssertionError("teardown_host: %s" % found.get("msg"))
        kube = {"kubeconfig": found["kubeconfig"], "context": found["context"]}
        self.teardown_api = self.kind if found["host"] == "kind" else self.mgmt
        namespace = self.config.bootstrap.mgmt_namespace
        steps = []
        for step in found["plan"]:
            action, name = step["action"], "%s:%s" % (step["step"], step["action"])
            if action == "suspend-flux":
                steps.append(
                    (name, capi_cluster_delete, dict(kube, namespace=namespace, clusters=[], kustomizations=["*"]))
                )
            elif action == "delete-clusters":
                args = dict(kube, namespace=step["namespace"], clusters=step["clusters"], keep=step["keep"])
                steps.append((name, capi_cluster_delete, dict(args, kustomizations=["*"], wait_timeout=60)))
            elif action == "capi-providers":
                args = dict(kube, api_version=OPERATOR, kinds=step["kinds"], wait_timeout=60)
                steps.append((name, capi_provider_delete, args))
            elif action == "bootstrap-secrets":
                args = dict(kube, namespace=step["namespace"], secrets=step["secrets"], configmaps=step["configmaps"])
                steps.append((name, bootstrap_secrets_delete, args))
            elif action == "aws-orphan-sweep":  # roles/teardown/tasks/aws.yml quiesces ACK before the sweep
                args = dict(kube, namespace="ack-system", releases=["ack-s3", "ack-rds", "ack-iam", "ack-ec2"])
                steps.append((name + ":quiesce", flux_release_quiesce, args))
        return steps

    # ---- checkpoints: a point starts from the state a run left, without building the world again -------
    def checkpoint(self):
        """The state of every API server (objects, resources, whether it serves), the clusters the world reconciles,
        the Cluster API's bookkeeping and the files."""
        with self._paused():
            apis = {id(api): (api, api._snapshot(), not api._stopping) for api in self._started}
            kubeconfig = self.target_kubeconfig.read_text() if self.target_kubeconfig.exists() else None
            return apis, dict(self.world.clusters), dict(self.capi.workloads), kubeconfig

    def disarm(self):
        """Clear the faults a run did not reach and the request logs, keeping the state."""
        for api in self._started:
            api.clear_stalls()
            with api._cond:
                api._failures, api._resets, api.requests[:] = [], [], []

    def restore(self, saved):
        """Back to a checkpoint, in any order: its API servers serve again as they did then (on their own URLs, which
        the restored kubeconfigs name), the ones started since are stopped and no longer named; faults and request
        logs cleared."""
        apis, clusters, workloads, kubeconfig = saved
        with self._paused():
            kept = [api for api, _state, _serving in apis.values()]
            for api in self._started:
                if api not in kept:  # started since the checkpoint
                    api.stop()
                    Path(api.kubeconfig_path).unlink(missing_ok=True)
            self._started = kept  # the checkpoint's servers, one an older restore had stopped included
            self.disarm()
            for api, (objects, events, last_rv, resources), serving in apis.values():
                if serving and api._stopping:  # stopped since (CAPI deleted its Cluster, or a restore did)
                    self._serve_again(api)
                elif not serving and not api._stopping:
                    api.stop()
                with api._cond:
                    api._restore((copy.deepcopy(objects), events, last_rv, dict(resources)))
            # the clusters the world reconciled then: not a server started since, again one stopped since
            self.world.clusters.clear()
            self.world.clusters.update(clusters)
            self.capi.workloads = dict(workloads)
            if kubeconfig is None:
                self.target_kubeconfig.unlink(missing_ok=True)
            else:
                self.target_kubeconfig.write_text(kubeconfig)
            install_clusterctl(self.bin)

    @staticmethod
    def _serve_again(api):
        """A stopped server serves again on its URL (no other server took it: _spawn) and its kubeconfig file, which
        a restore may have removed, is back."""
        port = api.port
        api._stopping = False  # stop() set it: watches would end at once
        api.start(port=port, tls=api.tls)
        api.write_kubeconfig(api.kubeconfig_path, context=api.name)

    @contextlib.contextmanager
    def _paused(self):
        self.errors.extend(self.world.stop())
        try:
            yield
        finally:
            self.world.start(interval=0.02, idle=0.5)

    def apis(self):
        return {api.name: api for api in self._started}

    def stop(self):
        errors = self.errors + self.world.stop()
        self._registry_server.shutdown()
        for api in self._started:
            api.stop()
        return errors
