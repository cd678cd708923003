"""Teardown on the Kubernetes side (emulator): controller host, probes, Flux suspension, Cluster deletion, plans."""

from __future__ import annotations

import threading
import time

import pytest
import yaml

from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils import kube
from ansible_collections.krops.platform.plugins.module_utils import teardown
from ansible_collections.krops.platform.plugins.module_utils import teardown_plan
from ansible_collections.krops.platform.plugins.modules import capi_cluster_delete, teardown_host
from tests.substrate.fixtures import REPO
from tests.substrate.bootstrapped import CLUSTER, KS, make_cluster, make_ks
from tests.substrate.krops_marks import make_kind_marker


class FakeCapi:
    """Plays the CAPI controllers: once a Cluster carries deletionTimestamp, drop its finalizers after a delay."""

    def __init__(self, api, delay=0.2, refuse=()):
        self.api = api
        self.delay = delay
        self.refuse = set(refuse)
        self.suspended_before_delete = {}
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        seen = set()
        while not self._stop.is_set():
            for obj in self.api.list(*CLUSTER):
                meta = obj["metadata"]
                # like CAPI: a paused Cluster is not reconciled, its deletion included
                if meta.get("deletionTimestamp") and meta["name"] not in seen and not obj["spec"].get("paused"):
                    seen.add(meta["name"])
                    self.suspended_before_delete[meta["name"]] = [
                        k["metadata"]["name"] for k in self.api.list(*KS) if (k.get("spec") or {}).get("suspend")
                    ]
                    if meta["name"] not in self.refuse:
                        threading.Timer(
                            self.delay,
                            self.api.clear_finalizers,
                            args=(CLUSTER[0], CLUSTER[1], meta["name"], meta["namespace"]),
                        ).start()
            self._stop.wait(0.05)

    def stop(self):
        self._stop.set()
        self.thread.join(2)


@pytest.fixture
def capi(kind_api):
    fake = FakeCapi(kind_api)
    yield fake
    fake.stop()


def test_delete_clusters_suspends_first_deletes_named_and_waits(kind_api, capi, run_module):
    make_ks(kind_api, "flux-system")
    make_ks(kind_api, "clusters")
    make_ks(kind_api, "done", suspend=True)
    for name in ("local-management", "local-workload", "other"):
        make_cluster(kind_api, name)
    result = run_module(
        capi_cluster_delete,
        {
            "kubeconfig": kind_api.kubeconfig_path,
            "context": "kind-mgmt",
            "clusters": ["local-workload", "gone-already"],
            "keep": ["local-management"],
            "wait_timeout": 10,
        },
    )
    assert not result.failed, result
    assert result["changed"] is True
    assert result["deleted"] == ["local-workload"]
    assert result["already_absent"] == ["gone-already"]
    assert sorted(result["suspended"]) == ["flux-system/clusters", "flux-system/flux-system"]
    assert result["already_suspended"] == ["flux-system/done"]
    # Flux was suspended before the deletion was requested, and only the named Cluster went.
    assert sorted(capi.suspended_before_delete["local-workload"]) == ["clusters", "done", "flux-system"]
    left = sorted(c["metadata"]["name"] for c in kind_api.list(*CLUSTER))
    assert left == ["local-management", "other"]
    assert all(k["spec"]["suspend"] is True for k in kind_api.list(*KS))
    # The teardown's suspensions say who made them, as the pivot's do (one suspend verb, kube.suspend_patch);
    # the Kustomization the user had suspended keeps its own.
    marks = {k["metadata"]["name"]: kube.suspended_by(k) for k in kind_api.list(*KS)}
    assert marks == {"flux-system": kube.TEARDOWN_SUSPENDER, "clusters": kube.TEARDOWN_SUSPENDER, "done": None}
    again = run_module(
        capi_cluster_delete,
        {
            "kubeconfig": kind_api.kubeconfig_path,
            "context": "kind-mgmt",
            "clusters": ["local-workload"],
            "keep": ["local-management"],
        },
    )
    assert again["changed"] is False and again["already_absent"] == ["local-workload"]


@pytest.mark.slow
def test_clusters_an_interrupted_pivot_move_paused_are_unpaused_before_deletion_the_users_are_not(
    kind_api, capi, run_module
):
    """Issue 30 (crash matrix point clusterctl:paused): a run killed after clusterctl paused kind's Clusters left a
    teardown waiting 300 s for a deletion CAPI never reconciles. The pivot's mark on the Kustomizations proves the
    pause is krops' move: the teardown unpauses the Clusters it deletes. Without the mark the pause is the user's."""

    make_ks(kind_api, "flux-system")
    make_cluster(kind_api, "local-workload")
    client = kube.connect(kind_api.kubeconfig_path, "kind-mgmt")
    kube.merge_patch(client, *CLUSTER, "local-workload", "default", {"spec": {"paused": True}})
    args = {"kubeconfig": kind_api.kubeconfig_path, "context": "kind-mgmt", "clusters": ["local-workload"]}
    users = run_module(capi_cluster_delete, dict(args, wait_timeout=1))
    assert users.failed and "still present: local-workload" in users["msg"]
    assert kind_api.get(*CLUSTER, "local-workload", "default")["spec"]["paused"] is True

    kube.set_suspend(client, "flux-system", "flux-system", True, by=kube.PIVOT_SUSPENDER)
    result = run_module(capi_cluster_delete, dict(args, wait_timeout=10))
    assert not result.failed, result.get("msg")
    assert "unpause Cluster default/local-workload (paused by an interrupted pivot move)" in result["plan"]
    assert kind_api.list(*CLUSTER) == []


def test_only_named_clusters_go_lookalikes_stay_and_check_mode_only_plans(kind_api, capi, run_module):
    make_ks(kind_api, "flux-system")
    for name in ("mgmt", "a", "b", "a-2", "ab"):
        make_cluster(kind_api, name)
    args = {"kubeconfig": kind_api.kubeconfig_path, "context": "kind-mgmt", "clusters": ["a", "b"], "keep": ["mgmt"]}
    planned = run_module(capi_cluster_delete, args, check_mode=True)
    assert planned["plan"] == [
        "suspend Kustomization flux-system/flux-system",
        "delete Cluster default/a and wait until it is gone",
        "delete Cluster default/b and wait until it is gone",
    ]
    assert planned["changed"] is True
    assert len(kind_api.list(*CLUSTER)) == 5
    assert "suspend" not in kind_api.get(*KS, "flux-system", "flux-system")["spec"]
    result = run_module(capi_cluster_delete, args)
    assert result["deleted"] == ["a", "b"]
    assert sorted(c["metadata"]["name"] for c in kind_api.list(*CLUSTER)) == ["a-2", "ab", "mgmt"]
    # deleting every Cluster of a namespace is no longer possible
    refused = run_module(capi_cluster_delete, dict(args, all_clusters=True))
    assert refused.failed and "all_clusters" in refused["msg"]


def test_the_flux_operator_stops_first_and_what_comes_back_before_the_end_fails_the_step(kind_api, run_module):
    """The rows of kube_rows.py on the step engine: the Flux Operator's reconciliation is disabled before the
    Kustomizations are suspended (the plan lists the writes in the order they are made), and once the Clusters are
    gone the engine lists again: a Kustomization resumed meanwhile (by a Flux Operator that still reconciled) fails
    the step, named."""
    make_ks(kind_api, "flux-system")
    make_cluster(kind_api, "local-workload")
    kind_api.create(
        {
            "apiVersion": "fluxcd.controlplane.io/v1",
            "kind": "FluxInstance",
            "metadata": {"name": "flux", "namespace": "flux-system"},
            "spec": {"distribution": {"version": "2.x", "registry": "ghcr.io/fluxcd"}},
        }
    )
    args = {"kubeconfig": kind_api.kubeconfig_path, "context": "kind-mgmt", "clusters": ["local-workload"]}
    planned = run_module(capi_cluster_delete, args, check_mode=True)
    assert planned["plan"] == [
        "disable reconciliation of FluxInstance flux-system/flux",
        "suspend Kustomization flux-system/flux-system",
        "delete Cluster default/local-workload and wait until it is gone",
    ]
    assert planned["flux_operator_disabled"] == ["flux-system/flux"] and planned["deleted"] == ["local-workload"]

    def resume_flux():  # while CAPI removes the Cluster, Flux runs again
        client = kube.connect(kind_api.kubeconfig_path, "kind-mgmt")
        kube.merge_patch(client, *KS, "flux-system", "flux-system", {"spec": {"suspend": False}})
        kind_api.clear_finalizers(*CLUSTER, "local-workload", "default")

    watcher = threading.Thread(target=lambda: _when_deleting(kind_api, "local-workload", resume_flux), daemon=True)
    watcher.start()
    result = run_module(capi_cluster_delete, dict(args, wait_timeout=10))
    watcher.join(5)
    assert result.failed
    assert result["msg"].startswith(
        "the teardown left Kustomization flux-system/flux-system (kustomization) on context kind-mgmt"
    ), result["msg"]
    annotations = kind_api.get("fluxcd.controlplane.io/v1", "FluxInstance", "flux", "flux-system")["metadata"]
    assert annotations["annotations"] == {"fluxcd.controlplane.io/reconcile": "disabled"}
    assert kind_api.list(*CLUSTER) == [] and result["deleted"] == ["local-workload"]
    assert "results" not in result and "leftovers" not in result  # the engine's bookkeeping stays inside


def _when_deleting(api, name, then, seconds=5.0):
    """Call ``then`` once Cluster ``name`` carries a deletionTimestamp."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        obj = api.get(*CLUSTER, name, "default")
        if obj and obj["metadata"].get("deletionTimestamp"):
            then()
            return
        time.sleep(0.02)


def test_refuses_to_delete_a_kept_cluster(kind_api, run_module):
    make_cluster(kind_api, "eu-north-1-management")
    result = run_module(
        capi_cluster_delete,
        {
            "kubeconfig": kind_api.kubeconfig_path,
            "context": "kind-mgmt",
            "clusters": ["eu-north-1-management"],
            "keep": ["eu-north-1-management"],
        },
    )
    assert result.failed
    assert result["msg"].startswith("refusing to delete Cluster eu-north-1-management in default on context kind-mgmt")
    assert kind_api.exists(*CLUSTER, "eu-north-1-management", "default")


def test_unknown_probe_aborts_before_anything_changes(kind_api, run_module):
    make_ks(kind_api, "flux-system")
    make_cluster(kind_api, "local-workload")
    kind_api.inject_failure("GET", r"/kustomizations$", 500, "etcdserver: request timed out")
    result = run_module(
        capi_cluster_delete,
        {"kubeconfig": kind_api.kubeconfig_path, "context": "kind-mgmt", "clusters": ["local-workload"]},
    )
    assert result.failed
    assert result["msg"] == (
        f"cannot list Kustomization kustomize.toolkit.fluxcd.io/v1 on context kind-mgmt in {kind_api.kubeconfig_path}: "
        "etcdserver: request timed out; nothing was deleted, fix access and run the teardown again"
    )
    cluster = kind_api.get(*CLUSTER, "local-workload", "default")
    assert "deletionTimestamp" not in cluster["metadata"]
    assert "suspend" not in kind_api.get(*KS, "flux-system", "flux-system")["spec"]
    assert not [r for r in kind_api.requests if r[0] in ("PATCH", "DELETE", "PUT", "POST")]


def test_timeout_names_the_clusters_left_and_their_state(kind_api, run_module):
    fake = FakeCapi(kind_api, refuse={"stuck"})
    try:
        make_cluster(kind_api, "stuck")
        kind_api.apply_object(
            {
                "apiVersion": CLUSTER[0],
                "kind": CLUSTER[1],
                "metadata": {"name": "stuck", "namespace": "default"},
                "status": {"phase": "Deleting"},
            }
        )
        result = run_module(
            capi_cluster_delete,
            {"kubeconfig": kind_api.kubeconfig_path, "context": "kind-mgmt", "clusters": ["stuck"], "wait_timeout": 2},
        )
    finally:
        fake.stop()
    assert result.failed
    assert result["remaining"] == ["stuck"]
    assert result["msg"].startswith("timed out after 2s waiting for Cluster deletion in default on context kind-mgmt")
    assert "still present: stuck (Deleting (finalizers cluster.cluster.x-k8s.io))" in result["msg"]
    assert "the controller host is left running" in result["msg"]


# --- controller host ------------------------------------------------------------------


def _config(tmp_path, environment, mgmt_kubeconfig):
    text = (REPO / "bootstrap.toml").read_text()
    path = tmp_path / "bootstrap.toml"
    path.write_text(
        text.replace('mgmt-kubeconfig = "~/.kube/krops-mgmt.yaml"', f'mgmt-kubeconfig = "{mgmt_kubeconfig}"')
    )
    return str(path)


def _dead_kubeconfig(tmp_path, context):
    path = tmp_path / (f"dead-{context}.yaml")
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": context,
                "clusters": [{"name": context, "cluster": {"server": "http://127.0.0.1:9"}}],
                "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
                "users": [{"name": context, "user": {"token": "t"}}],
            }
        )
    )
    return str(path)


def plan_host(run_module, tmp_path, kubeconfig, environment, mgmt_kubeconfig, **extra):
    """teardown_host for ``environment``, its bootstrap.toml naming ``mgmt_kubeconfig``."""
    args = dict(extra, kubeconfig=kubeconfig, environment=environment)
    return run_module(teardown_host, dict(args, config_file=_config(tmp_path, environment, mgmt_kubeconfig)))


def test_host_is_kind_while_it_holds_the_management_cluster(kube_cluster, tmp_path, run_module, fake_bins):
    kind = kube_cluster("kind-mgmt")
    mgmt = kube_cluster("krops-mgmt")
    make_cluster(kind, "local-management")
    make_cluster(kind, "local-workload")
    result = plan_host(run_module, tmp_path, kind.kubeconfig_path, "local-host", mgmt.kubeconfig_path)
    assert not result.failed, result
    assert (result["host"], result["context"], result["pivoted"]) == ("kind", "kind-mgmt", False)
    assert result["kubeconfig"] == kind.kubeconfig_path
    # the exported management kubeconfig was not even needed
    assert not mgmt.requests
    # no marker ConfigMap: nothing proves krops created the kind cluster, so it is kept
    assert [s["action"] for s in result["plan"]] == [
        "suspend-flux",
        "delete-clusters",
        "remove-containers",
        "remove-registry",
        "remove-kubeconfig",
        "remove-kubeconfig",
    ]
    # issue 30: a pivot killed after its export phase leaves kind the host and ~/.kube/krops-mgmt.yaml written; the
    # management cluster's containers go, so its context goes too (a teardown keeping it exited 0 with the file left)
    assert (result["plan"][-1]["path"], result["plan"][-1]["context"]) == (mgmt.kubeconfig_path, "krops-mgmt")
    assert result["kept"][0]["what"] == "kind cluster mgmt"
    delete = result["plan"][1]
    assert (delete["clusters"], delete["keep"], delete["timeout"]) == (["local-workload"], ["local-management"], 300)
    assert result["plan"][2]["filters"] == [
        "io.x-k8s.kind.cluster=local-management",
        "io.x-k8s.kind.cluster=local-workload",
    ]
    assert result["plan"][3]["name"] == "krops-registry"
    make_kind_marker(kind, "local-host")
    marked = plan_host(run_module, tmp_path, kind.kubeconfig_path, "local-host", mgmt.kubeconfig_path)
    assert [s["action"] for s in marked["plan"]] == [
        "suspend-flux",
        "delete-clusters",
        "delete-kind",
        "remove-containers",
        "remove-registry",
        "remove-kubeconfig",
        "remove-kubeconfig",
    ]
    assert marked["kind_marker"] == {
        "owned": True,
        "reason": "marker kube-system/krops-bootstrap: environment local-host, kind cluster mgmt",
    }


def test_host_is_mgmt_after_the_pivot(kube_cluster, tmp_path, run_module, fake_bins):
    kind = kube_cluster("kind-mgmt")  # kind survived the pivot but no longer holds the Clusters
    mgmt = kube_cluster("krops-mgmt")
    make_cluster(mgmt, "local-management")
    make_kind_marker(kind, "local-host")
    result = plan_host(run_module, tmp_path, kind.kubeconfig_path, "local-host", mgmt.kubeconfig_path)
    assert (result["host"], result["context"], result["pivoted"]) == ("mgmt", "krops-mgmt", True)
    assert [s["action"] for s in result["plan"]] == [
        "suspend-flux",
        "delete-clusters",
        "remove-containers",
        "delete-kind",
        "remove-registry",
        "remove-kubeconfig",
        "remove-kubeconfig",
    ]
    assert result["plan"][-1]["context"] == "krops-mgmt"
    # the workload kubeconfig the bootstrap wrote, with the context it names krops-<cluster>
    assert (result["plan"][-2]["path"], result["plan"][-2]["context"]) == (
        "~/.kube/krops-local-workload.yaml",
        "krops-local-workload",
    )


def test_host_mgmt_when_kind_is_gone_and_unreachable_when_nothing_answers(
    kube_cluster, tmp_path, run_module, fake_bins
):
    mgmt = kube_cluster("krops-mgmt")
    dead_kind = _dead_kubeconfig(tmp_path, "kind-mgmt")
    result = plan_host(run_module, tmp_path, dead_kind, "aws", mgmt.kubeconfig_path, timeout=2)
    assert (result["host"], result["pivoted"], result["kind_reachable"]) == ("mgmt", True, False)
    assert [s["action"] for s in result["plan"]] == [
        "suspend-flux",
        "delete-clusters",
        "capi-providers",
        "flux-uninstall",
        "bootstrap-secrets",
        "aws-orphan-sweep",
        "remove-kubeconfig",
    ]
    assert result["plan"][1]["timeout"] == 1200 and result["plan"][1]["keep"] == ["eu-north-1-management"]
    dead_mgmt = _dead_kubeconfig(tmp_path, "krops-mgmt")
    failed = plan_host(run_module, tmp_path, dead_kind, "aws", dead_mgmt, timeout=2)
    assert failed.failed and failed["host"] == "unreachable"
    assert failed["msg"].startswith(
        "no controller host answers for aws: kind context kind-mgmt (http://127.0.0.1:9 does not answer"
    )
    assert "set force to remove the cloud side anyway" in failed["msg"]
    forced = plan_host(run_module, tmp_path, dead_kind, "aws", dead_mgmt, timeout=2, force=True)
    assert not forced.failed and forced["host"] == "unreachable"
    assert [s["action"] for s in forced["plan"]] == ["aws-orphan-sweep"]
    local = plan_host(run_module, tmp_path, dead_kind, "local-host", dead_mgmt, timeout=2)
    # nothing answers: kind is never deleted (no marker can be read); labelled containers still go
    assert [s["action"] for s in local["plan"]] == [
        "remove-containers",
        "remove-registry",
        "remove-kubeconfig",
        "remove-kubeconfig",
    ]


def test_host_probe_unknown_aborts(kube_cluster, tmp_path, run_module):
    kind = kube_cluster("kind-mgmt")
    kind.inject_failure("GET", r"/clusters/local-management$", 503, "apiserver overloaded")
    result = plan_host(run_module, tmp_path, kind.kubeconfig_path, "local-host", "/nonexistent")
    assert result.failed
    assert result["msg"] == (
        "cannot tell whether Cluster default/local-management exists on the kind cluster "
        "(context kind-mgmt): apiserver overloaded; nothing was changed, fix access to the kind "
        "cluster and run again"
    )


def test_missing_tools_reported_at_once(kube_cluster, tmp_path, run_module, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    result = run_module(
        teardown_host,
        {"environment": "aws", "required_tools": ["helm", "kind"], "config_file": str(REPO / "bootstrap.toml")},
    )
    assert result.failed
    assert result["msg"] == (
        "missing tools needed by the teardown of aws: helm, kind; install them and run again (nothing was changed)"
    )


@pytest.mark.parametrize(
    "environment,pivoted,actions",
    [
        (
            "azure",
            False,
            [
                "suspend-flux",
                "delete-clusters",
                "capi-providers",
                "flux-uninstall",
                "bootstrap-secrets",
                "azure-teardown",
                "delete-kind",
                "remove-kubeconfig",  # the cloud teardown removed the management cluster the export phase wrote
            ],
        ),
        (
            "gcp",
            True,
            [
                "suspend-flux",
                "gcp-teardown",  # phase before-clusters: Cloud SQL and private services access hold the workload VPC
                "delete-clusters",
                "capi-providers",
                "flux-uninstall",
                "bootstrap-secrets",
                "gcp-teardown",
                "remove-kubeconfig",
            ],
        ),
        ("local-talos", False, ["suspend-flux", "tinkerbell-release", "delete-kind"]),
        ("local-talos", True, ["suspend-flux", "tinkerbell-release"]),
    ],
)
def test_plans_per_environment(environment, pivoted, actions):
    cfg = krops_config.load(str(REPO / "bootstrap.toml"), environ={})
    host = {
        "host": "mgmt" if pivoted else "kind",
        "pivoted": pivoted,
        "kind_reachable": not pivoted,
        "kind_marker": {"owned": True, "reason": "marker"},
        "mgmt_kubeconfig_present": True,
    }
    plan = teardown_plan.build_plan(cfg, environment, host)
    assert [s["action"] for s in plan] == actions
    assert [s["step"] for s in plan] == list(range(1, len(actions) + 1))
    if environment == "local-talos":
        assert plan[1]["keep"] == (["local-talos-management"] if pivoted else [])
        # only the Clusters bootstrap.toml names: the management Cluster only while kind hosts it
        assert plan[1]["clusters"] == ([] if pivoted else ["local-talos-management"])


def test_tools_the_plan_needs_are_checked_after_discovery(kube_cluster, tmp_path, run_module, fake_bins):
    kind = kube_cluster("kind-mgmt")
    make_cluster(kind, "eu-north-1-management")
    fake_bins.remove("helm")
    result = plan_host(run_module, tmp_path, kind.kubeconfig_path, "aws", "/nonexistent")
    assert result.failed
    assert result["msg"] == (
        "missing tools needed by the teardown of aws: helm; install them and run again (nothing was changed)"
    )
    assert not [r for r in kind.requests if r[0] != "GET"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PATCH", r"/kustomizations/"),  # the suspend of Flux before any deletion
        ("DELETE", r"/clusters/local-workload$"),
    ],
)
def test_a_stalled_write_ends_at_the_modules_request_timeout_naming_the_call(kind_api, run_module, method, path):
    """A write the API server never answers ends after request_timeout with a message naming the call,
    never as "failed unexpectedly ... This is a krops defect" (issue 22)."""
    make_ks(kind_api, "flux-system")
    make_cluster(kind_api, "local-workload")
    kind_api.inject_stall(method, path, seconds=120)
    args = {
        "kubeconfig": kind_api.kubeconfig_path,
        "context": "kind-mgmt",
        "clusters": ["local-workload"],
        "request_timeout": 2,
        "wait_timeout": 10,
    }
    try:
        result = run_module(capi_cluster_delete, args)
    finally:
        kind_api.clear_stalls()
    assert result.failed, result
    # The module's request_timeout reaches the client (it was dropped: the call waited urllib3's 30 s).
    assert (
        result["msg"]
        == {
            "PATCH": f"cannot patch Kustomization flux-system/flux-system on context kind-mgmt in {kind_api.kubeconfig_path}: "
            f"HTTPConnectionPool(host='127.0.0.1', port={kind_api.port}): Read timed out. (read timeout=2)",
            "DELETE": f"cannot delete Cluster default/local-workload on context kind-mgmt in {kind_api.kubeconfig_path}: "
            f"HTTPConnectionPool(host='127.0.0.1', port={kind_api.port}): Read timed out. (read timeout=2)",
        }[method]
    )
    assert result["deleted"] == ["local-workload"] if method == "DELETE" else "deleted" not in result
    assert kind_api.get(*CLUSTER, "local-workload", "default") is not None


def test_with_kind_the_host_and_no_exported_kubeconfig_the_plan_removes_none():
    # kind still the host and no krops-mgmt kubeconfig on disk (the pivot never reached its export): nothing to remove
    cfg = krops_config.load(str(REPO / "bootstrap.toml"), environ={})
    host = {
        "host": "kind",
        "pivoted": False,
        "kind_reachable": True,
        "kind_marker": {"owned": True, "reason": "marker"},
        "mgmt_kubeconfig_present": False,
    }
    plan = teardown_plan.build_plan(cfg, "azure", host)
    assert [s["action"] for s in plan][-2:] == ["azure-teardown", "delete-kind"]


# --- capi_provider_delete: the providers, add-on first, core last ---------------------------

PROVIDER_ROWS = (
    ("CoreProvider", "capi-system", "cluster-api"),
    ("InfrastructureProvider", "capa-system", "aws"),
    ("RuntimeExtensionProvider", "rx-system", "rx"),
    ("AddonProvider", "caaph-system", "helm"),
)
PROVIDER_PATH = "/apis/operator.cluster.x-k8s.io/v1alpha2/namespaces/{}/{}s/{}"


def _providers(kind_api, finalizers=()):

    client = kube.connect(kind_api.kubeconfig_path, "kind-mgmt")
    for kind, namespace, name in PROVIDER_ROWS:
        kube.ensure_namespace(client, namespace)
        meta = {"name": name, "namespace": namespace, "finalizers": list(finalizers)}
        kind_api.create({"apiVersion": teardown.PROVIDER_API, "kind": kind, "metadata": meta, "spec": {}})
    return {"kubeconfig": str(kind_api.kubeconfig_path), "context": "kind-mgmt"}


def _provider_deletes(kind_api, log):
    return [(m, p) for m, p in log if m == "DELETE" and "operator.cluster.x-k8s.io" in p]


def test_providers_go_add_on_first_core_last_and_check_mode_dry_runs_every_delete(kind_api, run_module):
    from ansible_collections.krops.platform.plugins.modules import capi_provider_delete

    args = _providers(kind_api)
    order = [PROVIDER_ROWS[i] for i in (3, 2, 1, 0)]
    paths = [("DELETE", PROVIDER_PATH.format(ns, kind.lower(), name)) for kind, ns, name in order]
    planned = run_module(capi_provider_delete, args, check_mode=True)
    assert not planned.failed, planned.get("msg")
    assert planned["plan"] == [f"delete {kind} {ns}/{name} and wait until it is gone" for kind, ns, name in order]
    assert planned["changed"] is True
    assert kind_api.dry_runs == paths  # server-side dry run: admission answers, nothing is applied
    assert _provider_deletes(kind_api, kind_api.requests) == []
    assert all(kind_api.exists(teardown.PROVIDER_API, kind, name, ns) for kind, ns, name in PROVIDER_ROWS)

    result = run_module(capi_provider_delete, args)
    assert not result.failed, result.get("msg")
    assert result["deleted"] == [{"kind": kind, "namespace": ns, "name": name} for kind, ns, name in order]
    assert _provider_deletes(kind_api, kind_api.requests) == paths
    assert not [1 for kind, ns, name in PROVIDER_ROWS if kind_api.exists(teardown.PROVIDER_API, kind, name, ns)]
    again = run_module(capi_provider_delete, args)
    assert again["changed"] is False and again["plan"] == [] and again["deleted"] == []


def test_a_provider_that_never_goes_stops_the_step_before_the_next_kind(kind_api, run_module):
    """The add-on provider keeps its finalizer: the step names it and deletes nothing after it."""
    from ansible_collections.krops.platform.plugins.modules import capi_provider_delete

    args = _providers(kind_api, finalizers=["example.com/hold"])
    result = run_module(capi_provider_delete, dict(args, wait_timeout=1))
    assert result.failed
    assert result["msg"].startswith("timed out waiting for the providers to be deleted on context kind-mgmt in ")
    assert "still present: AddonProvider caaph-system/helm (Unknown (finalizers example.com/hold))" in result["msg"]
    assert result["remaining"] == ["AddonProvider caaph-system/helm"]
    assert _provider_deletes(kind_api, kind_api.requests) == [
        ("DELETE", PROVIDER_PATH.format("caaph-system", "addonprovider", "helm"))
    ]


def test_a_provider_listing_the_server_cannot_answer_deletes_nothing(kind_api, run_module):
    from ansible_collections.krops.platform.plugins.modules import capi_provider_delete

    args = _providers(kind_api)
    kind_api.inject_failure("GET", r"/coreproviders$", 500, "etcd is down", times=5)
    result = run_module(capi_provider_delete, args)
    assert result.failed
    assert result["msg"].startswith(
        "cannot list CoreProvider objects operator.cluster.x-k8s.io/v1alpha2 on context kind-mgmt"
    )
    assert "nothing was deleted" in result["msg"]
    assert _provider_deletes(kind_api, kind_api.requests) == []


@pytest.mark.parametrize(
    "options, message",
    [
        ({"kinds": ["Provider"]}, "value of kinds must be one or more of"),
        (
            {"api_version": "operator.cluster.x-k8s.io"},
            "option api_version: expected a Kubernetes group/version such as operator.cluster.x-k8s.io/v1alpha2, "
            "got 'operator.cluster.x-k8s.io'",
        ),
        ({"api_version": "../v1"}, "option api_version: expected a Kubernetes group/version"),
        ({"wait_timeout": 0}, "wait_timeout must be at least 1 second, got 0"),
    ],
)
def test_provider_delete_refuses_bad_options_before_any_request(kind_api, run_module, options, message):
    from ansible_collections.krops.platform.plugins.modules import capi_provider_delete

    args = _providers(kind_api)
    before = len(kind_api.requests)
    result = run_module(capi_provider_delete, dict(args, **options))
    assert result.failed and message in result["msg"], result["msg"]
    assert len(kind_api.requests) == before


# --- the ACK controllers stopped before the sweep (flux_release_quiesce) ------------------------------------

HR_PATH = "/apis/helm.toolkit.fluxcd.io/v2/namespaces/ack-system/helmreleases/{}"
DEPLOY_PATH = "/apis/apps/v1/namespaces/ack-system/deployments/{}"
QUIESCE = {"namespace": "ack-system", "releases": ["ack-s3", "ack-rds"]}


def _ack(kind_api):
    """Two ACK releases (ack-rds suspended already), a lookalike release and the Deployments Helm made."""

    client = kube.connect(kind_api.kubeconfig_path, "kind-mgmt")
    kube.ensure_namespace(client, "ack-system")
    for name, suspended in (("ack-s3", False), ("ack-rds", True), ("ack-s3-extra", False)):
        meta = {"name": name, "namespace": "ack-system"}
        spec = {
            "interval": "10m",
            "chart": {"spec": {"chart": name, "sourceRef": {"kind": "HelmRepository", "name": "ack"}}},
        }
        kind_api.create(
            {
                "apiVersion": "helm.toolkit.fluxcd.io/v2",
                "kind": "HelmRelease",
                "metadata": meta,
                "spec": dict(spec, suspend=suspended),
            }
        )
    for name, release, replicas in (
        ("ack-s3-controller", "ack-s3", 1),
        ("ack-rds-controller", "ack-rds", 0),
        ("ack-s3-extra-controller", "ack-s3-extra", 1),  # a lookalike release's: stays
        ("metrics", None, 1),  # no Helm mark: stays
    ):
        meta = {"name": name, "namespace": "ack-system"}
        if release:
            meta["annotations"] = {"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": "ack-system"}
        pod = {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "c", "image": "example.com/c:1"}]},
        }
        spec = {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": pod}
        kind_api.create({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec})
    return {"kubeconfig": str(kind_api.kubeconfig_path), "context": "kind-mgmt"}


def _writes(log, *prefixes):
    return [(m, p) for m, p in log if m != "GET" and p.startswith(prefixes)]


def _state(kind_api):
    releases = {
        o["metadata"]["name"]: o["spec"].get("suspend")
        for o in kind_api.list("helm.toolkit.fluxcd.io/v2", "HelmRelease")
    }
    replicas = {o["metadata"]["name"]: o["spec"]["replicas"] for o in kind_api.list("apps/v1", "Deployment")}
    return releases, replicas


def test_quiesce_suspends_the_named_releases_and_scales_only_their_deployments(kind_api, run_module):
    from ansible_collections.krops.platform.plugins.modules import flux_release_quiesce

    args = dict(_ack(kind_api), **QUIESCE)
    before = _state(kind_api)
    planned = run_module(flux_release_quiesce, args, check_mode=True)
    assert not planned.failed, planned.get("msg")
    assert planned["plan"] == [
        "suspend HelmRelease ack-system/ack-s3",
        "scale Deployment ack-system/ack-s3-controller to 0 replicas",
    ]
    patches = [("PATCH", HR_PATH.format("ack-s3")), ("PATCH", DEPLOY_PATH.format("ack-s3-controller"))]
    assert kind_api.dry_runs == patches  # server-side dry runs only
    assert _writes(kind_api.requests, "/apis/") == [] and _state(kind_api) == before

    result = run_module(flux_release_quiesce, args)
    assert not result.failed, result.get("msg")
    assert (result["suspended"], result["scaled"], result["changed"]) == (["ack-s3"], ["ack-s3-controller"], True)
    assert _writes(kind_api.requests, "/apis/") == patches
    assert _state(kind_api) == (
        {"ack-s3": True, "ack-rds": True, "ack-s3-extra": False},
        {"ack-s3-controller": 0, "ack-rds-controller": 0, "ack-s3-extra-controller": 1, "metrics": 1},
    )
    marks = {
        o["metadata"]["name"]: kube.suspended_by(o) for o in kind_api.list("helm.toolkit.fluxcd.io/v2", "HelmRelease")
    }
    assert marks == {"ack-s3": kube.TEARDOWN_SUSPENDER, "ack-rds": None, "ack-s3-extra": None}
    again = run_module(flux_release_quiesce, args)
    assert (again["changed"], again["plan"]) == (False, [])


def test_quiesce_changes_nothing_when_a_listing_cannot_be_answered(kind_api, run_module):
    from ansible_collections.krops.platform.plugins.modules import flux_release_quiesce

    args = dict(_ack(kind_api), **QUIESCE)
    kind_api.inject_failure("GET", r"/namespaces/ack-system/deployments$", 500, "etcd is down", times=5)
    result = run_module(flux_release_quiesce, args)
    assert result.failed
    assert result["msg"].startswith("cannot list the Deployments apps/v1 in namespace ack-system on context kind-mgmt")
    assert _writes(kind_api.requests, "/apis/") == []  # the HelmReleases were listed, not one suspended


def test_quiesce_without_flux_on_the_cluster_scales_the_deployments(kube_cluster, run_module):
    """No HelmRelease kind served (Flux gone or never there): the Deployments still go to zero."""
    from ansible_collections.krops.platform.plugins.modules import flux_release_quiesce

    api = kube_cluster("bare", crds=False)
    pod = {"metadata": {"labels": {"app": "c"}}, "spec": {"containers": [{"name": "c", "image": "example.com/c:1"}]}}
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ack-system"}})
    meta = {
        "name": "ack-s3-controller",
        "namespace": "ack-system",
        "annotations": {"meta.helm.sh/release-name": "ack-s3"},
    }
    api.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "c"}}, "template": pod},
        }
    )
    result = run_module(flux_release_quiesce, dict(QUIESCE, kubeconfig=str(api.kubeconfig_path), context="bare"))
    assert not result.failed, result.get("msg")
    assert (result["suspended"], result["scaled"]) == ([], ["ack-s3-controller"])


# --- the bootstrap secrets and run tags (bootstrap_secrets_delete) ---------------------------------------------

NAMED = {"namespace": "flux-system", "secrets": ["flux-github-pat", "sops-age"], "configmaps": ["krops-run"]}


def _bootstrap_objects(kind_api):

    client = kube.connect(kind_api.kubeconfig_path, "kind-mgmt")
    kube.ensure_namespace(client, "flux-system")
    for kind, name in (
        ("Secret", "flux-github-pat"),
        ("Secret", "sops-age-backup"),
        ("ConfigMap", "krops-run"),
        ("ConfigMap", "krops-run-2"),
        ("Secret", "flux-system"),
    ):
        kind_api.create({"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": "flux-system"}})
    return {"kubeconfig": str(kind_api.kubeconfig_path), "context": "kind-mgmt"}


def _left(kind_api):
    return sorted(
        f"{o['kind']} {o['metadata']['name']}"
        for kind in ("Secret", "ConfigMap")
        for o in kind_api.list("v1", kind)
        if o["metadata"].get("namespace") == "flux-system"
    )


def test_bootstrap_secrets_go_by_exact_name_lookalikes_stay(kind_api, run_module):
    from ansible_collections.krops.platform.plugins.modules import bootstrap_secrets_delete

    args = dict(_bootstrap_objects(kind_api), **NAMED)
    planned = run_module(bootstrap_secrets_delete, args, check_mode=True)
    assert not planned.failed, planned.get("msg")
    assert planned["plan"] == ["delete Secret flux-system/flux-github-pat", "delete ConfigMap flux-system/krops-run"]
    assert planned["absent"] == ["Secret flux-system/sops-age"]
    assert kind_api.dry_runs == [
        ("DELETE", "/api/v1/namespaces/flux-system/secrets/flux-github-pat"),
        ("DELETE", "/api/v1/namespaces/flux-system/configmaps/krops-run"),
    ]
    kept = ["ConfigMap krops-run-2", "Secret flux-system", "Secret sops-age-backup"]
    assert _left(kind_api) == sorted(kept + ["ConfigMap krops-run", "Secret flux-github-pat"])

    result = run_module(bootstrap_secrets_delete, args)
    assert not result.failed, result.get("msg")
    assert result["deleted"] == ["Secret flux-system/flux-github-pat", "ConfigMap flux-system/krops-run"]
    assert _left(kind_api) == kept
    again = run_module(bootstrap_secrets_delete, args)
    assert (again["changed"], again["deleted"]) == (False, [])
    assert again["absent"] == [
        "Secret flux-system/flux-github-pat",
        "Secret flux-system/sops-age",
        "ConfigMap flux-system/krops-run",
    ]


def test_a_secret_deleted_by_someone_else_after_the_listing_is_absent_not_a_change(kind_api, run_module):
    from ansible_collections.krops.platform.plugins.modules import bootstrap_secrets_delete

    args = dict(_bootstrap_objects(kind_api), namespace="flux-system", secrets=["flux-github-pat"], configmaps=[])
    # listed present, then gone when its delete arrives: the API server answers 404 (what it sends then)
    kind_api.inject_failure(
        "DELETE", r"/namespaces/flux-system/secrets/flux-github-pat$", 404, 'secrets "flux-github-pat" not found'
    )
    result = run_module(bootstrap_secrets_delete, args)
    assert not result.failed, result.get("msg")
    assert result["plan"] == ["delete Secret flux-system/flux-github-pat"]
    assert (result["changed"], result["deleted"], result["absent"]) == (
        False,
        [],
        ["Secret flux-system/flux-github-pat"],
    )


def test_bootstrap_secrets_delete_nothing_when_a_listing_cannot_be_answered(kind_api, run_module):
    from ansible_collections.krops.platform.plugins.modules import bootstrap_secrets_delete

    args = dict(_bootstrap_objects(kind_api), **NAMED)
    kind_api.inject_failure("GET", r"/namespaces/flux-system/configmaps$", 500, "etcd is down", times=5)
    before = len(kind_api.requests)
    result = run_module(bootstrap_secrets_delete, args)
    assert result.failed
    assert result["msg"].startswith("cannot list ConfigMap v1 in namespace flux-system on context kind-mgmt")
    assert "nothing was deleted" in result["msg"]
    assert _writes(kind_api.requests[before:], "/api/") == []  # the Secrets were listed, not one deleted


@pytest.mark.parametrize(
    "module, options, message",
    [
        ("flux_release_quiesce", {"releases": ["ACK_S3"]}, "option releases[0]: expected a DNS-1123 subdomain"),
        ("flux_release_quiesce", {"namespace": "ack system"}, "option namespace: expected a DNS-1123 label"),
        ("flux_release_quiesce", {"releases": ["ack-s3", "ack-s3"]}, "option releases[1]: expected distinct entries"),
        ("bootstrap_secrets_delete", {"secrets": ["../x"]}, "option secrets[0]: expected a DNS-1123 subdomain"),
        ("bootstrap_secrets_delete", {"configmaps": ["krops-run."]}, "option configmaps[0]: expected a DNS-1123"),
        ("bootstrap_secrets_delete", {"request_timeout": 0}, "request_timeout must be at least 1 second, got 0"),
    ],
)
def test_named_object_steps_refuse_bad_options_before_any_request(kind_api, run_module, module, options, message):
    import importlib

    mod = importlib.import_module(f"ansible_collections.krops.platform.plugins.modules.{module}")
    base = QUIESCE if module == "flux_release_quiesce" else NAMED
    args = dict({"kubeconfig": str(kind_api.kubeconfig_path), "context": "kind-mgmt"}, **base)
    before = len(kind_api.requests)
    result = run_module(mod, dict(args, **options))
    assert result.failed and message in result["msg"], result["msg"]
    assert len(kind_api.requests) == before
