"""capi_pivot on two emulator API servers (kind = source, mgmt = target).

clusterctl is a stand-in that really moves objects over HTTP between the emulators
(pausing the source Clusters, creating objects on the target, deleting them from the
source), or fails midway, or exits 0 having moved nothing. A background "operator"
marks provider objects Ready on the target, as cluster-api-operator would.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import threading
import time

import pytest
import yaml

from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils import pivot, stepping
from ansible_collections.krops.platform.plugins.modules import capi_pivot
from tests.substrate.fixtures import task_results
from tests.substrate.lifecycle import install_clusterctl

NS = "default"
MGMT = "local-management"
CLUSTER_V = "cluster.x-k8s.io/v1beta2"
KS = ("kustomize.toolkit.fluxcd.io/v1", "Kustomization")
OPERATOR_V = "operator.cluster.x-k8s.io/v1alpha2"

# --- the clusterctl stand-in (tests/substrate/standins/clusterctl.py) ---------------------


def install_mover(fake_bins, mode="move", resume=True):
    install_clusterctl(fake_bins.dir, mode=mode, resume=resume)


# --- a world: bootstrap.toml, manifests, two clusters ---------------------------------

BOOTSTRAP = """
[bootstrap]
default-environment = "local-host"
git-url = "https://github.com/krops/krops"
mgmt-kubeconfig = "{kubeconfig}"

[charts]
flux-operator = "0.58.0"
cert-manager = "v1.21.1"
capi-operator = "0.28.0"

[environments.local-host]
kind = "local-host"
sync = "oci"
sync-path = "mgmt/local-host"
mgmt-cluster = "local-management"
mgmt-ready-timeout = "15m"
infra-provider-namespace = "capd-system"
infra-provider-name = "docker"
provider-manifests = ["mgmt/core-provider.yaml", "mgmt/infrastructure-provider.yaml"]
pivot-manifests = ["mgmt/pivot-settings.yaml"]

[environments.local-host.pivot-manifest-vars]
CLUSTER_REGION = "local"

[environments.aws]
kind = "aws"
mgmt-region = "eu-north-1"
sync = "git"
sync-path = "mgmt/aws"
mgmt-cluster = "local-management"
mgmt-ready-timeout = "40m"
infra-provider-namespace = "capa-system"
infra-provider-name = "aws"
provider-manifests = ["mgmt/core-provider.yaml"]
pivot-sops-secrets = ["mgmt/ack-credentials.sops.yaml"]

[[environments.aws.move-fallbacks]]
resource = "awsclustercontrolleridentities.infrastructure.cluster.x-k8s.io"
name = "default"
manifest = "mgmt/identity.yaml"
"""

CORE_PROVIDER = """
apiVersion: v1
kind: Namespace
metadata:
  name: capi-system
---
apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: CoreProvider
metadata:
  name: cluster-api
  namespace: capi-system
spec:
  version: ${CAPI_VERSION:=v1.10.2}
"""

INFRA_PROVIDER = """
apiVersion: operator.cluster.x-k8s.io/v1alpha2
kind: InfrastructureProvider
metadata:
  name: docker
  namespace: capd-system
spec:
  version: v1.10.2
"""

PIVOT_SETTINGS = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: pivot-settings
  namespace: flux-system
data:
  region: ${CLUSTER_REGION}
  run: ${KROPS_RUN_ID}
  tier: ${TIER:=standard}
"""

IDENTITY = """
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSClusterControllerIdentity
metadata:
  name: default
spec:
  allowedNamespaces: {}
"""


class Operator:
    """Marks provider objects Ready on an emulator (with installedVersion = spec.version)."""

    KINDS = ("CoreProvider", "BootstrapProvider", "ControlPlaneProvider", "InfrastructureProvider", "AddonProvider")

    def __init__(self, api, version_override=None):
        self.api = api
        self.version_override = version_override or {}
        self.ignore = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        seen = -1
        while not self.stop.wait(0.02):
            if len(self.api.events) == seen:
                continue
            seen = len(self.api.events)
            for kind in self.KINDS:
                for obj in self.api.list(OPERATOR_V, kind):
                    meta = obj["metadata"]
                    if meta["name"] in self.ignore:
                        continue
                    version = self.version_override.get(meta["name"], (obj.get("spec") or {}).get("version"))
                    status = obj.get("status") or {}
                    if status.get("installedVersion") != version or not status.get("conditions"):
                        self.api.apply_object(
                            {
                                "apiVersion": OPERATOR_V,
                                "kind": kind,
                                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                                "status": {"installedVersion": version},
                            }
                        )
                        self.api.set_condition(OPERATOR_V, kind, meta["name"], meta["namespace"])


class World:
    def __init__(self, tmp_path, kind_api, mgmt_api, fake_bins, registry):
        self.tmp = tmp_path
        self.kind = kind_api
        self.mgmt = mgmt_api
        self.bins = fake_bins
        self.registry = registry
        self.repo = tmp_path / "repo"
        (self.repo / "mgmt").mkdir(parents=True)
        self.target_kubeconfig = tmp_path / "out" / "krops-mgmt.yaml"
        (self.repo / "bootstrap.toml").write_text(BOOTSTRAP.format(kubeconfig=self.target_kubeconfig))
        for name, text in (
            ("core-provider.yaml", CORE_PROVIDER),
            ("infrastructure-provider.yaml", INFRA_PROVIDER),
            ("pivot-settings.yaml", PIVOT_SETTINGS),
            ("identity.yaml", IDENTITY),
            ("ack-credentials.sops.yaml", "sops: encrypted\n"),
        ):
            (self.repo / "mgmt" / name).write_text(text)
        self.populate_source()
        self.populate_target()

    def populate_source(self, cluster_ready=True):
        api = self.kind
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "flux-system"}})
        for name in ("flux-system", "capi-providers", "clusters"):
            api.create(
                {
                    "apiVersion": KS[0],
                    "kind": KS[1],
                    "metadata": {"name": name, "namespace": "flux-system"},
                    "spec": {"interval": "5m", "path": "./mgmt/local-host", "prune": True},
                }
            )
        api.create(
            {
                "apiVersion": KS[0],
                "kind": KS[1],
                "metadata": {"name": "already-off", "namespace": "flux-system"},
                "spec": {"interval": "5m", "path": "./x", "prune": True, "suspend": True},
            }
        )
        api.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "krops-run", "namespace": "flux-system"},
                "data": {"KROPS_RUN_ID": "local-host-20261130", "KROPS_RUN_KIND": "manual"},
            }
        )
        api.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "cluster-vars", "namespace": "flux-system"},
                "data": {"CLUSTER_REGION": "overridden-by-bootstrap-toml", "CAPI_VERSION": "v1.10.2"},
            }
        )
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "capi-system"}})
        api.create(
            {
                "apiVersion": OPERATOR_V,
                "kind": "CoreProvider",
                "metadata": {"name": "cluster-api", "namespace": "capi-system"},
                "spec": {"version": "v1.10.0"},
            }
        )
        api.apply_object(
            {
                "apiVersion": OPERATOR_V,
                "kind": "CoreProvider",
                "metadata": {"name": "cluster-api", "namespace": "capi-system"},
                "status": {"installedVersion": "v1.10.0"},
            }
        )
        self.add_cluster(MGMT, ready=cluster_ready)
        self.add_cluster("local-workload", ready=True)
        kubeconfig = yaml.safe_dump(self.mgmt.kubeconfig(context="local-management-admin@local-management"))
        api.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": f"{MGMT}-kubeconfig", "namespace": NS},
                "data": {"value": base64.b64encode(kubeconfig.encode()).decode()},
            }
        )

    def add_cluster(self, name, ready=True, node_ref=True):
        api = self.kind
        api.create(
            {
                "apiVersion": CLUSTER_V,
                "kind": "Cluster",
                "metadata": {"name": name, "namespace": NS},
                "spec": {
                    "infrastructureRef": {
                        "apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "DockerCluster",
                        "name": name,
                    }
                },
            }
        )
        if ready:
            api.apply_object(
                {
                    "apiVersion": CLUSTER_V,
                    "kind": "Cluster",
                    "metadata": {"name": name, "namespace": NS},
                    "status": {"initialization": {"infrastructureProvisioned": True, "controlPlaneInitialized": True}},
                }
            )
        api.create(
            {
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                "kind": "DockerCluster",
                "metadata": {"name": name, "namespace": NS},
                "spec": {},
            }
        )
        api.create(
            {
                "apiVersion": CLUSTER_V,
                "kind": "Machine",
                "metadata": {"name": name + "-cp-0", "namespace": NS},
                "spec": {"clusterName": name},
            }
        )
        if node_ref:
            api.apply_object(
                {
                    "apiVersion": CLUSTER_V,
                    "kind": "Machine",
                    "metadata": {"name": name + "-cp-0", "namespace": NS},
                    "status": {"nodeRef": {"name": name + "-cp-0"}},
                }
            )

    def populate_target(self):
        self.mgmt.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "local-management-cp-0"}})
        self.mgmt.set_condition("v1", "Node", "local-management-cp-0")

    def args(self, **extra):
        args = {
            "source_kubeconfig": self.kind.kubeconfig_path,
            "source_context": "kind-mgmt",
            "config_file": str(self.repo / "bootstrap.toml"),
            "environment": "local-host",
            "target_server": self.mgmt.url,
            "registry_url": f"http://{self.registry}",
            "wait_timeout": 10,
            "node_timeout": 5,
            "mgmt_ready_timeout": 5,
        }
        args.update(extra)
        return args

    def helm_deployed(self):
        self.bins.answer(
            "helm",
            "list -n cert-manager",
            stdout=json.dumps(
                [
                    {
                        "name": "cert-manager",
                        "namespace": "cert-manager",
                        "chart": "cert-manager-v1.21.1",
                        "status": "deployed",
                    }
                ]
            ),
        )
        self.bins.answer(
            "helm",
            "list -n capi-operator-system",
            stdout=json.dumps(
                [
                    {
                        "name": "capi-operator",
                        "namespace": "capi-operator-system",
                        "chart": "cluster-api-operator-0.28.0",
                        "status": "deployed",
                    }
                ]
            ),
        )

    # observations
    def capi(self, api):
        found = set()
        for api_version, kind in (
            (CLUSTER_V, "Cluster"),
            (CLUSTER_V, "Machine"),
            ("infrastructure.cluster.x-k8s.io/v1beta1", "DockerCluster"),
        ):
            found |= {(kind, o["metadata"]["name"]) for o in api.list(api_version, kind, NS)}
        return found

    def paused(self, api):
        return {
            o["metadata"]["name"]: bool((o.get("spec") or {}).get("paused")) for o in api.list(CLUSTER_V, "Cluster", NS)
        }

    def suspended(self):
        return {o["metadata"]["name"]: bool(o["spec"].get("suspend")) for o in self.kind.list(*KS, "flux-system")}


ALL_OBJECTS = {
    ("Cluster", MGMT),
    ("Cluster", "local-workload"),
    ("Machine", MGMT + "-cp-0"),
    ("Machine", "local-workload-cp-0"),
    ("DockerCluster", MGMT),
    ("DockerCluster", "local-workload"),
}
ACTIVE_KS = {"flux-system": False, "capi-providers": False, "clusters": False, "already-off": True}


@pytest.fixture
def world(tmp_path, kind_api, mgmt_api, fake_bins, oci_registry):
    install_mover(fake_bins)
    operator = Operator(mgmt_api)
    made = World(tmp_path, kind_api, mgmt_api, fake_bins, oci_registry)
    made.operator = operator
    yield made
    operator.stop.set()
    operator.thread.join(2)


def helm_calls(bins, verb="upgrade"):
    return [c["argv"] for c in bins.calls("helm") if c["argv"][0] == verb]


# --- substitution (pure) -------------------------------------------------------------


def test_substitute_defaults_escapes_and_lists_every_unresolved_name():
    text = "a: ${A}\nb: ${B:=dflt}\nc: $${LITERAL}\nd: ${D:=x}\ne: ${MISSING_1} ${MISSING_2} ${MISSING_1}\n"
    with pytest.raises(pivot.SubstitutionError) as err:
        pivot.substitute(text, {"A": "1", "D": ""}, "mgmt/x.yaml")
    assert err.value.names == ["MISSING_1", "MISSING_2"]
    assert str(err.value).startswith("mgmt/x.yaml: unresolved variables: MISSING_1, MISSING_2; define them")
    done = pivot.substitute(text, {"A": "1", "D": "", "MISSING_1": "m1", "MISSING_2": "m2"}, "x")
    assert done == "a: 1\nb: dflt\nc: ${LITERAL}\nd: x\ne: m1 m2 m1\n"


def test_parse_version_orders_releases():
    assert pivot.parse_version("v1.10.0") > pivot.parse_version("v1.9.9")
    assert pivot.parse_version("1.10.0-rc.1") < pivot.parse_version("v1.10.0")
    assert pivot.parse_version("latest") is None


# --- success and idempotence ---------------------------------------------------------


def test_pivot_moves_everything_then_a_rerun_changes_nothing(world, run_module):
    result = run_module(capi_pivot, world.args())
    assert not result.failed, result.get("msg")
    assert result["changed"] and result["phase_reached"] == "move"

    # phase 1: the exported kubeconfig
    path = world.target_kubeconfig
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    exported = yaml.safe_load(path.read_text())
    assert exported["current-context"] == "krops-mgmt"
    assert [c["name"] for c in exported["contexts"]] == ["krops-mgmt"]
    assert exported["clusters"][0]["cluster"]["server"] == world.mgmt.url

    # phase 2: charts at the pins (non-secret values only), providers, substituted pivot manifest
    upgrades = helm_calls(world.bins)
    assert [a[2] for a in upgrades] == ["cert-manager", "capi-operator"]
    cert, capi = upgrades
    assert (
        cert[cert.index("--version") + 1] == "v1.21.1"
        and cert[cert.index("--repo") + 1] == "https://charts.jetstack.io"
    )
    assert cert[cert.index("-n") : cert.index("-n") + 2] == ["-n", "cert-manager"] and "crds.enabled=true" in cert
    assert capi[3] == "cluster-api-operator" and capi[capi.index("--version") + 1] == "0.28.0"
    assert "cert-manager.enabled=false" in capi and "capi-operator-system" in capi
    assert world.mgmt.get(OPERATOR_V, "CoreProvider", "cluster-api", "capi-system")["spec"]["version"] == "v1.10.2"
    assert world.mgmt.exists(OPERATOR_V, "InfrastructureProvider", "docker", "capd-system")
    settings = world.mgmt.get("v1", "ConfigMap", "pivot-settings", "flux-system")["data"]
    assert settings == {"region": "local", "run": "local-host-20261130", "tier": "standard"}
    assert {(p["kind"], p["version"], p["source_version"]) for p in result["providers"]} == {
        ("CoreProvider", "v1.10.2", "v1.10.0"),
        ("InfrastructureProvider", "v1.10.2", None),
    }

    # phase 4: moved, verified, unpaused on the target; Flux on kind stays suspended
    assert world.capi(world.kind) == set()
    assert world.capi(world.mgmt) == ALL_OBJECTS
    assert world.paused(world.mgmt) == {MGMT: False, "local-workload": False}
    assert world.mgmt.exists("v1", "Secret", MGMT + "-kubeconfig", NS)
    assert world.suspended() == {name: True for name in ACTIVE_KS}
    marks = {
        o["metadata"]["name"]: (o["metadata"].get("annotations") or {}).get("krops.io/suspended-by")
        for o in world.kind.list(*KS, "flux-system")
    }
    assert marks == {name: ("krops.platform.capi_pivot" if not off else None) for name, off in ACTIVE_KS.items()}
    assert {(m["kind"], m["name"]) for m in result["moved"]} >= ALL_OBJECTS
    assert {s["name"] for s in result["suspended"]} == {"flux-system", "capi-providers", "clusters"}
    assert result["run_tags"] == {"KROPS_RUN_ID": "local-host-20261130", "KROPS_RUN_KIND": "manual"}
    move = [c["argv"] for c in world.bins.calls("clusterctl")]
    assert len(move) == 1 and move[0][:2] == ["move", "--kubeconfig"] and move[0][-2:] == ["-n", "default"]
    assert move[0][move[0].index("--to-kubeconfig") + 1] == str(world.target_kubeconfig)

    # re-run: the kind cluster holds nothing to move; charts deployed; nothing changes
    world.helm_deployed()
    again = run_module(capi_pivot, world.args())
    assert not again.failed, again.get("msg")
    assert again["changed"] is False and again["already_moved"] is True
    assert len(world.bins.calls("clusterctl")) == 1 and len(helm_calls(world.bins)) == 2
    assert {a["state"] for a in again["applied"]} == {"unchanged"}


def test_pivot_moves_n_workload_clusters_and_all_their_objects(world, run_module):
    """Every Cluster with its Machine and DockerCluster moves, paused on kind and unpaused on the target.

    n is KROPS_PIVOT_CLUSTERS (default 3); tests/benchmarks/scale_bench.py --only pivot runs this at n = 1, 10, 50
    and reads the move's time from KROPS_PIVOT_TIMING (a JSON file it names). The suite asserts only the outcome.
    """
    count = int(os.environ.get("KROPS_PIVOT_CLUSTERS") or 3)
    names = ["scale-%03d" % i for i in range(count)]
    for name in names:
        world.add_cluster(name)
    expected = ALL_OBJECTS | {(kind, n + suffix) for n in names for kind, suffix in CLUSTER_OBJECTS}
    started = time.monotonic()
    result = run_module(capi_pivot, world.args())
    elapsed = time.monotonic() - started
    assert not result.failed, result.get("msg")
    assert world.capi(world.kind) == set()
    assert world.capi(world.mgmt) == expected
    assert world.paused(world.mgmt) == {name: False for name in [MGMT, "local-workload", *names]}
    assert {(m["kind"], m["name"]) for m in result["moved"]} >= expected
    timing = os.environ.get("KROPS_PIVOT_TIMING")
    if timing:
        with open(timing, "w", encoding="utf-8") as handle:
            json.dump({"pivot": elapsed, "objects": len(expected), "clusters": count + 2}, handle)


CLUSTER_OBJECTS = (("Cluster", ""), ("Machine", "-cp-0"), ("DockerCluster", ""))


def test_rerun_when_the_kind_cluster_is_gone_reports_already_moved(world, run_module):
    assert not run_module(capi_pivot, world.args()).failed
    world.kind.stop()
    again = run_module(capi_pivot, world.args())
    assert not again.failed, again.get("msg")
    assert again["changed"] is False and again["already_moved"] is True


def test_check_mode_plans_without_writing(world, run_module):
    result = run_module(capi_pivot, world.args(), check_mode=True)
    assert not result.failed, result.get("msg")
    assert result["changed"] is True
    assert not world.target_kubeconfig.exists()
    assert helm_calls(world.bins) == []
    assert world.mgmt.list(OPERATOR_V, "CoreProvider") == []
    assert world.capi(world.kind) == ALL_OBJECTS and world.capi(world.mgmt) == set()
    assert world.suspended() == ACTIVE_KS
    assert [c["argv"][-1] for c in world.bins.calls("clusterctl")] == ["--dry-run"]
    assert {(m["kind"], m["name"]) for m in result["moved"]} >= ALL_OBJECTS
    assert {s["name"] for s in result["suspended"]} == {"flux-system", "capi-providers", "clusters"}


def test_check_mode_on_a_bare_target_plans_the_crds_it_does_not_serve_yet(world, run_module, kube_cluster):
    bare = kube_cluster("bare-mgmt", crds=False)
    bare.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    bare.set_condition("v1", "Node", "n1")
    result = run_module(capi_pivot, world.args(target_server=bare.url), check_mode=True)
    assert not result.failed, result.get("msg")
    assert {(a["kind"], a["state"]) for a in result["applied"]} == {
        ("Namespace", "created"),
        ("CoreProvider", "created"),
        ("InfrastructureProvider", "created"),
        ("ConfigMap", "created"),
    }
    assert bare.list("v1", "ConfigMap", "flux-system") == [] and not bare.exists("v1", "Namespace", "capi-system")


def test_clusterctl_leaving_clusters_paused_is_finished_by_the_module(world, run_module):
    install_mover(world.bins, resume=False)
    result = run_module(capi_pivot, world.args())
    assert not result.failed, result.get("msg")
    assert world.paused(world.mgmt) == {MGMT: False, "local-workload": False}


def test_stop_after_preflight_changes_nothing_on_the_source(world, run_module):
    result = run_module(capi_pivot, world.args(stop_after="preflight"))
    assert not result.failed, result.get("msg")
    assert result["phase_reached"] == "preflight"
    assert world.capi(world.kind) == ALL_OBJECTS and world.suspended() == ACTIVE_KS
    assert world.bins.calls("clusterctl") == []


# --- failures before the move: the source is untouched -------------------------------


def assert_source_untouched(world):
    assert world.capi(world.kind) == ALL_OBJECTS
    assert world.paused(world.kind) == {MGMT: False, "local-workload": False}
    assert world.suspended() == ACTIVE_KS
    assert world.bins.calls("clusterctl") == []


def test_preconditions_refuse_a_non_kind_context_a_dead_registry_and_a_missing_cluster(world, run_module, tmp_path):
    result = run_module(capi_pivot, world.args(source_context="krops-mgmt"))
    assert result["msg"] == (
        "pivot phase preconditions failed: the pivot source must be the kind cluster's context kind-mgmt, "
        "not krops-mgmt; pass source_context=kind-mgmt"
    )
    assert result["failed_phase"] == "preconditions"

    result = run_module(capi_pivot, world.args(registry_url="http://127.0.0.1:9"))
    assert result["msg"] == (
        "pivot phase preconditions failed: the local registry krops-registry does not serve "
        "http://127.0.0.1:9/v2/; start it (bootstrap role) before pivoting"
    )

    world.kind.remove(CLUSTER_V, "Cluster", MGMT, NS)
    result = run_module(capi_pivot, world.args(mgmt_ready_timeout=1))
    assert result["failed_phase"] == "preconditions"
    assert "Cluster default/local-management did not appear on the kind cluster within 1s" in result["msg"]
    assert "Clusters there: local-workload" in result["msg"]
    assert world.suspended() == ACTIVE_KS and not world.target_kubeconfig.exists()


def test_export_fails_without_the_kubeconfig_secret(world, run_module):
    world.kind.remove("v1", "Secret", MGMT + "-kubeconfig", NS)
    result = run_module(capi_pivot, world.args(mgmt_ready_timeout=1))
    assert result["failed_phase"] == "export"
    assert (
        "Secret default/local-management-kubeconfig (the management cluster's kubeconfig) did not appear on the kind "
        "cluster within mgmt-ready-timeout"
    ) in result["msg"]
    assert_source_untouched(world)


def test_export_fails_when_no_node_becomes_ready(world, run_module):
    world.mgmt.set_condition("v1", "Node", "local-management-cp-0", status="False", reason="KubeletNotReady")
    result = run_module(capi_pivot, world.args(node_timeout=1))
    assert result["msg"] == (
        "pivot phase export failed: no node of the management cluster local-management became Ready "
        "within 1s (Pending: local-management-cp-0 not Ready); check its machines"
    )
    assert_source_untouched(world)


def test_export_refuses_a_kubeconfig_that_points_at_the_kind_cluster(world, run_module):
    result = run_module(capi_pivot, world.args(target_server=world.kind.url))
    assert result["msg"] == (
        "pivot phase export failed: the exported management kubeconfig points at the kind cluster itself "
        f"({world.kind.url}); refusing to move onto the source"
    )
    assert_source_untouched(world)


def test_export_tolerates_node_pools_that_register_late(world, run_module):
    world.mgmt.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "pool-a-0"}})
    result = run_module(capi_pivot, world.args(node_timeout=1, stop_after="export"))
    assert not result.failed, result.get("msg")
    assert (
        "! Pending: pool-a-0 not Ready after 1s; continuing (node pools that register late are tolerated)"
        in result["progress"]
    )


def test_substitution_errors_fail_before_anything_is_written(world, run_module):
    (world.repo / "mgmt" / "pivot-settings.yaml").write_text(PIVOT_SETTINGS + "  zone: ${ZONE}\n  key: ${API_KEY}\n")
    result = run_module(capi_pivot, world.args())
    path = world.repo / "mgmt" / "pivot-settings.yaml"
    assert result["msg"] == (
        f"pivot phase prepare failed: {path}: unresolved variables: ZONE, API_KEY; define them in a ConfigMap of the source's "
        "flux namespace or in pivot-manifest-vars of the environment in bootstrap.toml, or give a default with ${NAME:=value}"
    )
    assert result["unresolved"] == ["ZONE", "API_KEY"]
    assert helm_calls(world.bins) == [] and world.mgmt.list(OPERATOR_V, "CoreProvider") == []
    assert_source_untouched(world)


def test_older_target_provider_is_refused(world, run_module):
    world.kind.apply_object(
        {
            "apiVersion": OPERATOR_V,
            "kind": "CoreProvider",
            "metadata": {"name": "cluster-api", "namespace": "capi-system"},
            "status": {"installedVersion": "v1.11.0"},
        }
    )
    result = run_module(capi_pivot, world.args())
    assert result["failed_phase"] == "prepare"
    assert "CoreProvider cluster-api is v1.10.2 on the target but v1.11.0 on the kind cluster" in result["msg"]
    assert_source_untouched(world)


def test_provider_that_never_becomes_ready_times_out(world, run_module):
    world.operator.ignore.add("docker")
    result = run_module(capi_pivot, world.args(wait_timeout=1))
    assert result["msg"] == (
        "pivot phase prepare failed: InfrastructureProvider capd-system/docker did not become Ready on the "
        "management cluster within 1s (Pending no Ready condition yet); check the cluster-api-operator logs there"
    )
    assert_source_untouched(world)


def test_helm_failure_names_the_chart(world, run_module):
    world.bins.answer("helm", "upgrade --install capi-operator", stderr="Error: context deadline exceeded\n", rc=1)
    result = run_module(capi_pivot, world.args())
    assert result["failed_phase"] == "prepare"
    assert "installing chart cluster-api-operator 0.28.0 on the management cluster failed" in result["msg"]
    assert result["msg"].endswith("exited 1: Error: context deadline exceeded")
    assert_source_untouched(world)


def test_preflight_reports_every_refusal_and_pauses_nothing(world, run_module):
    world.add_cluster("provisioning", ready=False, node_ref=False)
    world.kind.apply_object(
        {
            "apiVersion": CLUSTER_V,
            "kind": "Cluster",
            "metadata": {"name": "local-workload", "namespace": NS},
            "spec": {"paused": True},
        }
    )
    world.kind.apply_object(
        {
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "DockerCluster",
            "metadata": {
                "name": MGMT,
                "namespace": NS,
                "annotations": {"clusterctl.cluster.x-k8s.io/block-move": "true"},
            },
        }
    )
    result = run_module(capi_pivot, world.args())
    assert result["failed_phase"] == "preflight"
    assert result["refusals"] == [
        "Cluster local-workload: already paused (unpause it or finish the earlier move first)",
        "Cluster provisioning: infrastructure is still provisioning",
        "Cluster provisioning: control plane is not initialised",
        "Machine provisioning-cp-0: no nodeRef yet (the node is still provisioning)",
        "DockerCluster.infrastructure.cluster.x-k8s.io default/local-management: carries the "
        "clusterctl.cluster.x-k8s.io/block-move annotation (a provider is still working on it)",
    ]
    assert result["msg"].startswith(
        "pivot phase preflight failed: the move cannot start; nothing was paused or suspended: "
    )
    assert world.suspended() == ACTIVE_KS and world.bins.calls("clusterctl") == []
    assert world.paused(world.kind) == {MGMT: False, "local-workload": True, "provisioning": False}


# --- failures during the move: the source is authoritative again ----------------------


def test_clusterctl_failing_midway_rolls_back_then_a_rerun_completes(world, run_module):
    install_mover(world.bins, mode="fail-half")
    result = run_module(capi_pivot, world.args())
    assert result["failed_phase"] == "move"
    assert (
        "clusterctl move failed" in result["msg"]
        and "exited 1: Error: action failed after 10 attempts" in result["msg"]
    )
    assert "unpaused Cluster local-management on the kind cluster" in result["msg"]
    assert "resumed 3 Kustomizations on the kind cluster" in result["msg"]
    assert "Nothing was deleted on the management cluster" in result["msg"]
    # source authoritative: everything there, unpaused, Flux resumed (the one suspended before stays suspended)
    assert world.capi(world.kind) == ALL_OBJECTS
    assert world.paused(world.kind) == {MGMT: False, "local-workload": False}
    assert world.suspended() == ACTIVE_KS
    # the target keeps its partial copies (paused), nothing deleted there
    copied = world.capi(world.mgmt)
    assert copied and copied < ALL_OBJECTS
    assert {(p["kind"], p["name"]) for p in result["partial"]} == copied
    assert result["moved"] == []
    assert all(world.paused(world.mgmt).values())

    install_mover(world.bins)
    world.helm_deployed()
    again = run_module(capi_pivot, world.args())
    assert not again.failed, again.get("msg")
    assert world.capi(world.kind) == set() and world.capi(world.mgmt) == ALL_OBJECTS
    assert world.paused(world.mgmt) == {MGMT: False, "local-workload": False}


@pytest.mark.slow
def test_a_rerun_after_a_killed_move_owns_the_suspension_the_killed_run_left(world, run_module):
    """Issue 30: a run killed after suspending kind's Kustomizations never resumed them. The re-run finds them by the
    pivot's annotation and treats them as its own: its rollback resumes them (and removes the mark), while the
    Kustomization the user had suspended stays suspended."""
    from ansible_collections.krops.platform.plugins.module_utils import kube

    client = kube.connect(str(world.kind.kubeconfig_path), "kind-mgmt")
    for name, off in ACTIVE_KS.items():
        if not off:  # what the killed run did before clusterctl move
            kube.set_suspend(client, "flux-system", name, True, by=kube.PIVOT_SUSPENDER)
    install_mover(world.bins, mode="fail-half")
    result = run_module(capi_pivot, world.args())
    assert result["failed_phase"] == "move"
    assert "resumed 3 Kustomizations on the kind cluster" in result["msg"], result["msg"]
    assert world.suspended() == ACTIVE_KS
    assert not any(
        "krops.io/suspended-by" in (o["metadata"].get("annotations") or {}) for o in world.kind.list(*KS, "flux-system")
    )


@pytest.mark.slow
def test_a_rerun_after_a_move_killed_once_clusterctl_paused_the_clusters_finishes_it(world, run_module):
    """Issue 30 (crash matrix point clusterctl:paused): the run died after clusterctl paused kind's Clusters. The
    preflight refused every re-run ("already paused"); the pivot's own suspension mark proves an earlier move
    reached clusterctl, so the re-run finishes that move."""
    from ansible_collections.krops.platform.plugins.module_utils import kube

    client = kube.connect(str(world.kind.kubeconfig_path), "kind-mgmt")
    for name, off in ACTIVE_KS.items():
        if not off:
            kube.set_suspend(client, "flux-system", name, True, by=kube.PIVOT_SUSPENDER)
    for name in (MGMT, "local-workload"):  # what clusterctl move does first
        kube.merge_patch(client, CLUSTER_V, "Cluster", name, "default", {"spec": {"paused": True}})
    result = run_module(capi_pivot, world.args())
    assert not result.failed, result.get("msg")
    assert world.capi(world.kind) == set() and world.capi(world.mgmt) == ALL_OBJECTS
    assert world.paused(world.mgmt) == {MGMT: False, "local-workload": False}
    assert any("an earlier pivot run reached the move" in line for line in result["progress"])


def test_clusterctl_failing_after_deleting_keeps_flux_suspended(world, run_module):
    install_mover(world.bins, mode="fail-delete")
    result = run_module(capi_pivot, world.args())
    assert result["failed_phase"] == "move"
    assert "kept 3 Kustomizations suspended on the kind cluster because" in result["msg"]
    left = ALL_OBJECTS - world.capi(world.kind)
    assert left and {(m["kind"], m["name"]) for m in result["moved"]} >= left
    assert world.capi(world.mgmt) == ALL_OBJECTS
    assert not any(world.paused(world.kind).values())
    assert world.suspended() == {name: True for name in ACTIVE_KS}

    install_mover(world.bins)
    again = run_module(capi_pivot, world.args())
    assert not again.failed, again.get("msg")
    assert world.capi(world.kind) == set() and world.capi(world.mgmt) == ALL_OBJECTS
    assert world.paused(world.mgmt) == {MGMT: False, "local-workload": False}


def test_clusterctl_exiting_zero_having_moved_nothing_is_caught(world, run_module):
    install_mover(world.bins, mode="noop")
    result = run_module(capi_pivot, world.args())
    assert result["failed_phase"] == "move"
    assert "clusterctl move exited 0 but verification failed: the kind cluster still holds" in result["msg"]
    assert world.capi(world.kind) == ALL_OBJECTS and world.capi(world.mgmt) == set()
    assert world.suspended() == ACTIVE_KS


def test_missing_clusterctl_fails_before_suspending(world, run_module, monkeypatch):
    world.bins.remove("clusterctl")
    monkeypatch.setattr(pivot.cli, "_EXTRA_DIRS", ())
    result = run_module(capi_pivot, world.args(clusterctl_binary=str(world.tmp / "nope" / "clusterctl")))
    assert result["failed_phase"] == "move"
    assert (
        "clusterctl binary %s does not exist or is not executable" % (world.tmp / "nope" / "clusterctl")
        in result["msg"]
    )
    assert_source_untouched(world)


# --- aws: credentials, SOPS secrets and move fallbacks -----------------------------


def test_aws_applies_credentials_sops_secrets_and_fallbacks(world, run_module, monkeypatch):
    monkeypatch.setenv("AWS_B64ENCODED_CREDENTIALS", "W2RlZmF1bHRdCg==")
    key = world.repo / "age.agekey"
    key.write_text("# created: now\n# public key: age1x\nAGE-SECRET-KEY-1X\n")
    world.bins.answer(
        "sops",
        "--decrypt",
        stdout=yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "ack-credentials", "namespace": "ack-system"},
                "stringData": {"credentials": "[default]\naws_access_key_id = AKIA\n"},
            }
        ),
    )
    result = run_module(capi_pivot, world.args(environment="aws", target_server=world.mgmt.url, age_key_file=str(key)))
    assert not result.failed, result.get("msg")
    secret = world.mgmt.get("v1", "Secret", "aws-credentials", "capa-system")
    assert base64.b64decode(secret["data"]["AWS_B64ENCODED_CREDENTIALS"]).decode() == "W2RlZmF1bHRdCg=="
    ack = world.mgmt.get("v1", "Secret", "ack-credentials", "ack-system")
    assert base64.b64decode(ack["data"]["credentials"]).decode().startswith("[default]")
    sops = world.bins.calls("sops")[0]
    assert sops["env"]["SOPS_AGE_KEY_FILE"] == str(key) and sops["argv"][-1].endswith("mgmt/ack-credentials.sops.yaml")
    assert "W2RlZmF1bHRdCg==" not in json.dumps([c["argv"] for c in world.bins.calls()])
    assert world.mgmt.exists("infrastructure.cluster.x-k8s.io/v1beta2", "AWSClusterControllerIdentity", "default")
    assert result["fallbacks"] == [
        {
            "resource": "awsclustercontrolleridentities.infrastructure.cluster.x-k8s.io",
            "name": "default",
            "manifest": "mgmt/identity.yaml",
            "state": "applied",
        }
    ]


def test_sops_secrets_are_substituted_after_decrypting_and_unresolved_names_fail_first(world, run_module, monkeypatch):
    """As Flux does: decrypt, then substitute; a missing variable fails before anything is written."""
    monkeypatch.setenv("AWS_B64ENCODED_CREDENTIALS", "W2RlZmF1bHRdCg==")
    key = world.repo / "age.agekey"
    key.write_text("# created: now\n# public key: age1x\nAGE-SECRET-KEY-1X\n")

    def answer(credentials):
        world.bins.rules.pop("sops", None)  # first rule wins: replace the previous answer
        world.bins.answer(
            "sops",
            "--decrypt",
            stdout=yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "ack-credentials", "namespace": "ack-system"},
                    "stringData": {"credentials": credentials},
                }
            ),
        )

    answer("[default]\nregion = ${KROPS_NO_SUCH_VARIABLE}\n")
    result = run_module(capi_pivot, world.args(environment="aws", target_server=world.mgmt.url, age_key_file=str(key)))
    assert result.failed and result["failed_phase"] == "prepare"
    assert "KROPS_NO_SUCH_VARIABLE" in result["msg"]
    assert not world.mgmt.exists("v1", "Secret", "ack-credentials", "ack-system")
    assert not world.mgmt.exists("v1", "Secret", "aws-credentials", "capa-system")  # nothing written
    answer("[default]\nregion = ${KROPS_TEST_REGION:=eu-north-1}\n")
    result = run_module(capi_pivot, world.args(environment="aws", target_server=world.mgmt.url, age_key_file=str(key)))
    assert not result.failed, result.get("msg")
    ack = world.mgmt.get("v1", "Secret", "ack-credentials", "ack-system")
    assert base64.b64decode(ack["data"]["credentials"]).decode() == "[default]\nregion = eu-north-1\n"


def test_aws_credentials_are_copied_from_the_kind_cluster_when_not_given(world, run_module, monkeypatch):
    monkeypatch.delenv("AWS_B64ENCODED_CREDENTIALS", raising=False)
    (world.repo / "bootstrap.toml").write_text(
        (world.repo / "bootstrap.toml")
        .read_text()
        .replace('pivot-sops-secrets = ["mgmt/ack-credentials.sops.yaml"]\n', "")
    )
    result = run_module(capi_pivot, world.args(environment="aws", stop_after="prepare"))
    assert result["msg"] == (
        "pivot phase prepare failed: aws: no credentials for Secret capa-system/aws-credentials: set "
        "AWS_B64ENCODED_CREDENTIALS (clusterawsadm bootstrap credentials encode-as-profile) or create "
        "that Secret on the kind cluster"
    )
    world.kind.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "capa-system"}})
    world.kind.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "aws-credentials", "namespace": "capa-system"},
            "data": {"AWS_B64ENCODED_CREDENTIALS": base64.b64encode(b"c2VjcmV0").decode()},
        }
    )
    result = run_module(capi_pivot, world.args(environment="aws", stop_after="prepare"))
    assert not result.failed, result.get("msg")
    secret = world.mgmt.get("v1", "Secret", "aws-credentials", "capa-system")
    assert base64.b64decode(secret["data"]["AWS_B64ENCODED_CREDENTIALS"]) == b"c2VjcmV0"
    assert "c2VjcmV0" not in json.dumps(result)


def test_lb_port_comes_from_docker_inspect(world, tmp_path):
    world.bins.answer("docker", "inspect", stdout="43121\n")
    cfg = krops_config.load(str(world.repo / "bootstrap.toml"))
    pv = pivot.PivotState(cfg, {"environment": "local-host"})
    assert pivot.lb_port_from_docker(pv) == 43121
    assert world.bins.calls("docker")[0]["argv"][-1] == "local-management-lb"
    rendered = yaml.safe_load(
        pivot.render_kubeconfig(
            yaml.safe_dump(world.mgmt.kubeconfig(context="admin@x")), "krops-mgmt", "https://127.0.0.1:43121"
        )
    )
    assert rendered["current-context"] == "krops-mgmt"
    assert rendered["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:43121"


# --- the role, end to end (real ansible-playbook) --------------------------------------


def role_play(world, **extra):
    variables = {
        "krops_environment": "local-host",
        "pivot_config_file": str(world.repo / "bootstrap.toml"),
        "pivot_source_kubeconfig": world.kind.kubeconfig_path,
        "pivot_target_server": world.mgmt.url,
        "pivot_registry_url": f"http://{world.registry}",
        "pivot_wait_timeout": 10,
        "pivot_node_timeout": 5,
        "pivot_handoff_wait": False,
        "pivot_push_artifact": False,
    }
    variables.update(extra)
    return [
        {
            "name": "pivot",
            "hosts": "localhost",
            "gather_facts": False,
            "vars": variables,
            "roles": ["krops.platform.pivot"],
        }
    ]


@pytest.mark.slow
def test_role_moves_seeds_flux_and_deletes_kind(world, ansible_playbook):
    world.bins.answer("kind", "get clusters", stdout="mgmt\n")
    rc, output, stderr = ansible_playbook(role_play(world))
    results = task_results(output)
    assert rc == 0, (stderr, json.dumps(results, indent=1)[-3000:])
    assert world.capi(world.kind) == set() and world.capi(world.mgmt) == ALL_OBJECTS
    # flux_handoff seeded the target with the kind cluster's run tags
    run = world.mgmt.get("v1", "ConfigMap", "krops-run", "flux-system")
    assert run["data"]["KROPS_RUN_ID"] == "local-host-20261130"
    assert world.mgmt.list("fluxcd.controlplane.io/v1", "FluxInstance", "flux-system")
    assert ["delete", "cluster", "--name", "mgmt", "--kubeconfig", world.kind.kubeconfig_path] in [
        c["argv"] for c in world.bins.calls("kind")
    ], json.dumps([v for k, v in results.items() if v.get("action") == "krops.platform.kind_cluster"])[:3000]


def gate_play(world, tmp_path, **extra):
    """The kind deletion gate alone (tasks_from delete_kind.yml), after a pivot that moved local-workload."""
    kubeconfig = world.mgmt.write_kubeconfig(tmp_path / "target.yaml", context="krops-mgmt")
    moved = {"target_kubeconfig": kubeconfig, "moved": [{"kind": "Cluster", "namespace": NS, "name": "local-workload"}]}
    gate = {"name": "krops.platform.pivot", "tasks_from": "delete_kind.yml"}
    return [
        {
            "name": "gate",
            "hosts": "localhost",
            "gather_facts": False,
            "vars": dict(role_play(world)[0]["vars"], pivot_result=moved, **extra),
            "tasks": [{"name": "gate", "ansible.builtin.include_role": gate}],
        }
    ]


def adoption_play(world, tmp_path, source_kubeconfig):
    """The ACK adoption tasks alone (tasks_from ack_adoption.yml) of an aws pivot into the target."""
    kubeconfig = world.mgmt.write_kubeconfig(tmp_path / "target.yaml", context="krops-mgmt")
    variables = dict(
        role_play(world, krops_environment="aws")[0]["vars"],
        pivot_source_kubeconfig=source_kubeconfig,
        pivot_result={"target_kubeconfig": kubeconfig, "already_moved": True},
    )
    adoption = {"name": "krops.platform.pivot", "tasks_from": "ack_adoption.yml"}
    return [
        {
            "name": "adoption",
            "hosts": "localhost",
            "gather_facts": False,
            "vars": variables,
            "tasks": [{"name": "adoption", "ansible.builtin.include_role": adoption}],
        }
    ]


@pytest.mark.slow
def test_a_rerun_after_the_pivot_keeps_the_ack_adoption_fields_once_kind_is_gone(world, ansible_playbook, tmp_path):
    """A plain re-run of the aws playbook after a pivot failed here (kind is gone, its ACK objects unreadable),
    rc=2, found by the crash matrix (issue 30); writing the ConfigMap from nothing would have emptied it."""
    for kind, plural in (("VPC", "vpcs"), ("Subnet", "subnets"), ("SecurityGroup", "securitygroups")):
        world.kind.add_resource("ec2.services.k8s.aws", "v1alpha1", kind, plural)
    world.kind.create(
        {
            "apiVersion": "ec2.services.k8s.aws/v1alpha1",
            "kind": "VPC",
            "metadata": {"name": "eu-west-1-workload-db", "namespace": "default"},
            "spec": {"cidrBlocks": ["10.130.0.0/16"]},
        }
    )
    world.kind.apply_object(
        {
            "apiVersion": "ec2.services.k8s.aws/v1alpha1",
            "kind": "VPC",
            "metadata": {"name": "eu-west-1-workload-db", "namespace": "default"},
            "status": {"vpcID": "vpc-0123"},
        }
    )
    # the run that moved: kind answers, its ids go to the management cluster
    rc, output, stderr = ansible_playbook(adoption_play(world, tmp_path, world.kind.kubeconfig_path))
    assert rc == 0, (stderr, json.dumps(task_results(output), indent=1)[-3000:])
    carried = world.mgmt.get("v1", "ConfigMap", "krops-ack-adoption", "flux-system")["data"]
    assert carried == {"KROPS_ADOPT_VPC_EU_WEST_1_WORKLOAD_DB": '"vpcID":"vpc-0123"'}
    # a re-run once kind is deleted: nothing to read, the ConfigMap stays as the run that moved wrote it
    rc, output, stderr = ansible_playbook(adoption_play(world, tmp_path, str(tmp_path / "kind-is-gone.yaml")))
    assert rc == 0, (stderr, json.dumps(task_results(output), indent=1)[-3000:])
    assert world.mgmt.get("v1", "ConfigMap", "krops-ack-adoption", "flux-system")["data"] == carried


@pytest.mark.slow
def test_role_refuses_to_delete_kind_when_the_target_lacks_the_clusters(world, ansible_playbook, tmp_path):
    """The deletion gate, after a pivot whose Clusters are not on the target."""
    rc, output, stderr = ansible_playbook(gate_play(world, tmp_path))
    refusal = task_results(output)[
        "krops.platform.pivot : Refuse to delete kind unless the management cluster lists the Clusters"
    ]
    assert rc != 0 and refusal.get("failed")
    assert refusal["msg"] == (
        "Not deleting kind cluster mgmt: the management cluster (krops-mgmt) lists Clusters none but should "
        "list local-workload, local-management; kind is still authoritative for the missing ones, re-run the pivot."
    )
    assert world.bins.calls("kind") == []


@pytest.mark.slow
def test_role_refuses_to_delete_kind_while_the_local_registry_does_not_serve(world, ansible_playbook, tmp_path):
    """The deletion gate: the target lists every Cluster, but the local registry (local-host) is down."""
    from tests.substrate.fixtures import free_port

    for name in (MGMT, "local-workload"):
        world.mgmt.create({"apiVersion": CLUSTER_V, "kind": "Cluster", "metadata": {"name": name, "namespace": NS}})
    down = f"http://127.0.0.1:{free_port()}"
    rc, output, stderr = ansible_playbook(gate_play(world, tmp_path, pivot_registry_url=down))
    refusal = task_results(output)["krops.platform.pivot : Delete the kind cluster mgmt"]
    assert rc != 0 and refusal.get("failed"), stderr[-2000:]
    assert refusal["msg"].startswith(
        f"Not deleting kind cluster mgmt: the registry {down} does not serve /v2/ (no answer: "
    )
    assert world.bins.calls("kind") == []


# --- progress on the controller: the action plugin runs the waits in bounded steps --------


def remove_mgmt_cluster_and_secret(world):
    world.kind.remove(CLUSTER_V, "Cluster", MGMT, NS)
    secret = world.kind.get("v1", "Secret", MGMT + "-kubeconfig", NS)
    world.kind.remove("v1", "Secret", MGMT + "-kubeconfig", NS)
    return secret


def restore_cluster(world):
    world.kind.create(
        {
            "apiVersion": CLUSTER_V,
            "kind": "Cluster",
            "metadata": {"name": MGMT, "namespace": NS},
            "spec": {
                "infrastructureRef": {
                    "apiGroup": "infrastructure.cluster.x-k8s.io",
                    "kind": "DockerCluster",
                    "name": MGMT,
                }
            },
        }
    )
    world.kind.apply_object(
        {
            "apiVersion": CLUSTER_V,
            "kind": "Cluster",
            "metadata": {"name": MGMT, "namespace": NS},
            "status": {"initialization": {"infrastructureProvisioned": True, "controlPlaneInitialized": True}},
        }
    )


def recreate_later(world, secret, lists=4):
    """As Cluster API on kind would: the management Cluster appears, later its kubeconfig Secret.

    Each only after the pivot listed or watched it ``lists`` times (two steps of the action plugin).
    """

    def requested(plural, count):
        path = f"/namespaces/{NS}/{plural}"
        deadline = time.monotonic() + 30
        while (
            time.monotonic() < deadline
            and sum(1 for m, p in list(world.kind.requests) if m == "GET" and p.endswith(path)) < count
        ):
            time.sleep(0.05)

    def work():
        requested("clusters", lists)
        restore_cluster(world)
        requested("secrets", lists)
        world.kind.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": secret["metadata"]["name"], "namespace": NS},
                "data": secret["data"],
            }
        )

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def resume(monkeypatch, **state):
    """The resume state the action plugin hands a step, in the module's environment (module_utils/stepping.py)."""
    monkeypatch.setenv(stepping.ENV, stepping.encode(state))


def test_a_wait_cut_by_the_step_budget_returns_pending_then_a_step_resumes(world, run_module, monkeypatch):
    remove_mgmt_cluster_and_secret(world)
    started = time.monotonic()
    resume(monkeypatch, _wait_budget=1)
    result = run_module(capi_pivot, world.args(mgmt_ready_timeout=600))
    assert time.monotonic() - started < 5
    assert not result.failed, result.get("msg")
    assert result["_krops_pending"] is True and result["phase_reached"] is None
    state = result["_krops_resume"]  # the engine's resume state (steps.Waits)
    wait = state["wait"]
    assert {k: wait[k] for k in ("key", "step", "number", "title", "total", "state")} == {
        "key": "mgmt",
        "step": "preconditions",
        "number": 0,
        "title": "management Cluster",
        "total": 600,
        "state": "Cluster default/local-management not on the kind cluster yet (Clusters there: local-workload)",
    }
    assert 0 < wait["waited"] < 3 and state["spent"] == {"mgmt": wait["waited"]}
    assert not world.target_kubeconfig.exists()

    # the next step counts the time already spent: the Cluster is there, the Secret wait is pending
    restore_cluster(world)
    resume(monkeypatch, _wait_budget=1, _resume={"spent": {"mgmt": 100}})
    result = run_module(capi_pivot, world.args(mgmt_ready_timeout=600))
    wait = result["_krops_resume"]["wait"]
    assert result["phase_reached"] == "preconditions" and wait["number"] == 1 and wait["title"] == "management cluster"
    assert wait["state"] == "Secret default/local-management-kubeconfig not found yet"
    assert 100 < wait["waited"] < 103 and wait["total"] == 600
    # the spent time is counted against mgmt-ready-timeout: a step whose budget covers the rest is final
    resume(monkeypatch, _wait_budget=5, _resume={"spent": {"mgmt": 599}})
    result = run_module(capi_pivot, world.args(mgmt_ready_timeout=600))
    assert result["msg"] == (
        "pivot phase export failed: Secret default/local-management-kubeconfig (the management cluster's "
        "kubeconfig) did not appear on the kind cluster within mgmt-ready-timeout; check "
        "`clusterctl describe cluster local-management -n default`"
    )
    assert_source_untouched(world)


def test_merge_steps_gives_the_result_of_a_single_run():
    earlier = {
        "changed": True,
        "charts": [{"namespace": "cert-manager", "release": "cert-manager", "state": "installed"}],
        "applied": [
            {"kind": "Namespace", "namespace": "", "name": "capi-system", "file": "a.yaml", "state": "created"}
        ],
        "progress": [">>> wait Cluster", ">>> wait Secret", "wrote k", ">>> wait nodes"],
        "_krops_pending": True,
    }
    later = {
        "changed": False,
        "phase_reached": "move",
        "charts": [
            {"namespace": "cert-manager", "release": "cert-manager", "state": "unchanged"},
            {"namespace": "capi-operator-system", "release": "capi-operator", "state": "unchanged"},
        ],
        "applied": [
            {"kind": "Namespace", "namespace": "", "name": "capi-system", "file": "a.yaml", "state": "unchanged"},
            {"kind": "ConfigMap", "namespace": "x", "name": "y", "file": "b.yaml", "state": "updated"},
        ],
        "progress": [">>> wait Cluster", ">>> wait Secret", ">>> wait nodes", ">>> wait providers", "moved"],
    }
    merged = pivot.merge_steps(earlier, later)
    assert merged == {
        "changed": True,
        "phase_reached": "move",
        "charts": [
            {"namespace": "cert-manager", "release": "cert-manager", "state": "installed"},
            {"namespace": "capi-operator-system", "release": "capi-operator", "state": "unchanged"},
        ],
        "applied": [
            {"kind": "Namespace", "namespace": "", "name": "capi-system", "file": "a.yaml", "state": "created"},
            {"kind": "ConfigMap", "namespace": "x", "name": "y", "file": "b.yaml", "state": "updated"},
        ],
        "progress": [">>> wait Cluster", ">>> wait Secret", "wrote k", ">>> wait nodes", ">>> wait providers", "moved"],
    }
    assert pivot.merge_steps(None, later) == later


def pivot_play(world, **extra):
    args = world.args(target_kubeconfig=str(world.target_kubeconfig))
    args.update(extra)
    return [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [{"name": "pivot", "register": "pivot", "krops.platform.capi_pivot": args}],
        }
    ]


@pytest.mark.slow
def test_playbook_shows_progress_while_the_management_cluster_comes_up(world, ansible_playbook):
    secret = remove_mgmt_cluster_and_secret(world)
    recreate_later(world, secret)
    rc, output, stderr = ansible_playbook(
        pivot_play(world, mgmt_ready_timeout=60, progress_interval=2), env={"PATH": world.bins.path_env}
    )
    result = task_results(output)["pivot"]
    assert rc == 0, (stderr, json.dumps(result, indent=1)[-3000:])
    lines = [line for line in stderr.splitlines() if line.startswith("capi_pivot [localhost] ")]
    assert any(
        line.startswith("capi_pivot [localhost] phase 0 (management Cluster): waited ")
        and line.endswith(
            "s of 60s: Cluster default/local-management not on the kind cluster yet (Clusters there: local-workload)"
        )
        for line in lines
    ), stderr
    assert any(
        line.startswith("capi_pivot [localhost] phase 1 (management cluster): waited ")
        and line.endswith("s of 60s: Secret default/local-management-kubeconfig not found yet")
        for line in lines
    ), stderr
    waited = [int(line.split("waited ")[1].split("s")[0]) for line in lines]
    assert waited == sorted(waited) and len(lines) >= 2, lines

    # the result of a single run: same phases, objects, states and progress lines (each once)
    assert "_krops_pending" not in result and "_krops_resume" not in result
    assert result["changed"] is True and result["phase_reached"] == "move" and result["already_moved"] is False
    assert world.capi(world.kind) == set() and world.capi(world.mgmt) == ALL_OBJECTS
    assert {(m["kind"], m["name"]) for m in result["moved"]} >= ALL_OBJECTS
    assert {s["name"] for s in result["suspended"]} == {"flux-system", "capi-providers", "clusters"}
    assert [(c["release"], c["state"]) for c in result["charts"]] == [
        ("cert-manager", "installed"),
        ("capi-operator", "installed"),
    ]
    assert [(a["kind"], a["name"], a["state"]) for a in result["applied"]] == [
        ("Namespace", "capi-system", "created"),
        ("CoreProvider", "cluster-api", "created"),
        ("InfrastructureProvider", "docker", "created"),
        ("ConfigMap", "pivot-settings", "created"),
    ]
    assert result["run_tags"] == {"KROPS_RUN_ID": "local-host-20261130", "KROPS_RUN_KIND": "manual"}
    assert result["target_kubeconfig"] == str(world.target_kubeconfig)
    assert result["progress"] == [
        ">>> waiting up to 60s for Cluster default/local-management on the kind cluster",
        ">>> waiting for Secret default/local-management-kubeconfig",
        f"wrote {world.target_kubeconfig} (context krops-mgmt)",
        ">>> waiting up to 5s for the management cluster's nodes",
        ">>> helm upgrade --install cert-manager cert-manager v1.21.1",
        ">>> helm upgrade --install capi-operator cluster-api-operator 0.28.0",
        ">>> waiting up to 10s for CoreProvider capi-system/cluster-api Ready",
        ">>> waiting up to 10s for InfrastructureProvider capd-system/docker Ready",
        "suspended 3 Kustomizations on the kind cluster",
        ">>> clusterctl move -n default (7 objects)",
    ], result["progress"]
    assert len(world.bins.calls("clusterctl")) == 1


@pytest.mark.slow
def test_playbook_timeout_keeps_the_single_run_message(world, ansible_playbook):
    world.kind.remove(CLUSTER_V, "Cluster", MGMT, NS)
    rc, output, stderr = ansible_playbook(
        pivot_play(world, mgmt_ready_timeout=4, progress_interval=2), env={"PATH": world.bins.path_env}
    )
    result = task_results(output)["pivot"]
    assert rc == 2 and result["failed"] is True
    assert result["msg"] == (
        "pivot phase preconditions failed: Cluster default/local-management did not appear on the kind "
        "cluster within 4s (mgmt-ready-timeout; Clusters there: local-workload); check the Flux "
        "Kustomizations on kind"
    )
    assert result["failed_phase"] == "preconditions" and "_krops_pending" not in result
    assert "capi_pivot [localhost] phase 0 (management Cluster): waited " in stderr
    assert world.suspended() == ACTIVE_KS and not world.target_kubeconfig.exists()
    assert world.bins.calls("clusterctl") == []


def test_export_merges_into_an_existing_kubeconfig_keeping_its_other_contexts(world, run_module):
    # issue 9: pointing target_kubeconfig at ~/.kube/config must not lose the user's other clusters.
    path = world.target_kubeconfig
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "work",
                "clusters": [{"name": "work", "cluster": {"server": "https://work.example:6443"}}],
                "users": [{"name": "work", "user": {"token": "w"}}],
                "contexts": [
                    {"name": "work", "context": {"cluster": "work", "user": "work"}},
                    {"name": "krops-mgmt", "context": {"cluster": "work", "user": "work"}},
                ],
            }
        )
    )
    path.chmod(0o644)
    result = run_module(capi_pivot, world.args(stop_after="export"))
    assert not result.failed, result.get("msg")
    assert result["changed"] is True
    data = yaml.safe_load(path.read_text())
    assert data["current-context"] == "work"
    assert [c["name"] for c in data["contexts"]] == ["work", "krops-mgmt"]
    assert {c["name"]: c["cluster"]["server"] for c in data["clusters"]} == {
        "work": "https://work.example:6443",
        "krops-mgmt": world.mgmt.url,
    }
    assert [u["name"] for u in data["users"]] == ["work", "krops-mgmt"]
    assert data["contexts"][1]["context"] == {"cluster": "krops-mgmt", "user": "krops-mgmt"}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    again = run_module(capi_pivot, world.args(stop_after="export"))
    assert not again.failed and again["changed"] is False


def test_phase_table_is_the_order_and_the_choices():
    assert pivot.PHASES == ("preconditions", "export", "prepare", "preflight", "move")
    assert [p.name for p in pivot.PHASE_TABLE] == list(pivot.PHASES)
    assert capi_pivot.argument_spec()["stop_after"]["choices"] == list(pivot.PHASES)
    assert all(callable(p.run) for p in pivot.PHASE_TABLE)


def test_a_stalled_kind_api_cannot_hold_the_wait_past_its_timeout(world, run_module):
    # issue 12: no request timeout let a stalled server hold a 5 s wait for 40 s.
    remove_mgmt_cluster_and_secret(world)
    world.kind.inject_stall("GET", r"/clusters$", seconds=60)
    start = time.monotonic()
    result = run_module(capi_pivot, world.args(mgmt_ready_timeout=5, request_timeout=2))
    elapsed = time.monotonic() - start
    world.kind.clear_stalls()
    assert result.failed and result["failed_phase"] == "preconditions"
    assert "did not appear on the kind cluster within 5s" in result["msg"], result["msg"]
    assert elapsed < 5 + 2 + 1, elapsed
    assert world.suspended() == ACTIVE_KS
