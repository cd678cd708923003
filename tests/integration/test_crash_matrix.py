# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The crash matrix's fast form (issue 30): every Kubernetes write of the stepped modules failed once.

tests/benchmarks/crash_matrix.py is the full form (the local-host playbook killed and faulted at every
step, minutes per point). This one runs in make test, in-process, on tests/substrate/crash_world.py: a
baseline run of the bootstrap's Kubernetes-side modules (capi_pivot, flux_handoff) and of the teardown
(teardown_host's plan: capi_cluster_delete, capi_provider_delete, bootstrap_secrets_delete,
flux_release_quiesce) logs every write the API servers receive; those are the points. At each point the
write fails once (a 500 or a connection reset, crash_matrix.WRITE_FAULTS) and then:

- bootstrap point: (a) a plain re-run from the partial state ends with the baseline's objects (compared
  object by object) and the run after it changes nothing; (b) instead of the re-run, a teardown from the
  partial state leaves nothing krops owns and every decoy; (c) nothing is lost (the run tags, the
  Clusters on exactly one side, the Flux secrets after the re-run);
- teardown point: after the faulted teardown, a second teardown finishes and leaves nothing owned.

Each point starts from a checkpoint of the clusters (CrashWorld.checkpoint/restore), so a point costs its
module runs only.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request

import pytest
import yaml

from tests.benchmarks.crash_matrix import WRITE_FAULTS, arm, diff, distinct_writes, spread, summary, table
from tests.substrate import crash_world as crash_world_module
from tests.substrate.crash_world import (
    AGE_KEY,
    CLUSTER,
    DECOY_CLUSTER,
    DECOYS,
    KS,
    MGMT,
    OPERATOR,
    RUN_TAGS,
    WORKLOAD,
    CrashWorld,
)

# Fault kinds of the fast form: a stall waits out krops' 30 s request timeout, so it is the full form's.
KINDS = ("write", "reset")
BOOTSTRAP_POINTS = 3  # spread over the bootstrap's writes (each costs 8 to 12 s: a pivot or two)
PROVIDER_KINDS = ("CoreProvider", "BootstrapProvider", "ControlPlaneProvider", "InfrastructureProvider")
HELM_RELEASE = "sh.helm.release.v1."


def run_steps(run_module, steps):
    """Run the steps in order as a playbook does: stop at the first that fails; (failed step or None, results)."""
    results = []
    for name, module, args in steps:
        result = run_module(module, args)
        results.append((name, result))
        if result.failed:
            return "%s: %s" % (name, " ".join(str(result.get("msg")).split())[:300]), results
    return None, results


def teardown(world, run_module):
    try:
        steps = world.teardown_steps(run_module)
    except AssertionError as exc:
        return str(exc), []
    return run_steps(run_module, steps)


def snapshot(world):
    """Every object's identity on every API server (a helm release Secret without its revision)."""
    state = {}
    for api in world.apis().values():
        with api._cond:
            keys = {
                "%s/%s %s/%s" % (g, p, ns or "", n.split(".v")[0] if n.startswith(HELM_RELEASE) else n)
                for (g, p, ns, n) in api.objects
            }
        state[api.name] = sorted(keys)
    return state


def owned_left(world):
    """What krops owns that the teardown's Kubernetes side must have removed from the cluster it ran on (the
    other one goes whole: delete-kind, or the management cluster's containers or EKS cluster), and the decoys."""
    problems = []
    for api in [world.teardown_api] if world.teardown_api else []:
        cluster_api = ("cluster.x-k8s.io", "clusters") in api.resources
        if cluster_api and api.exists("cluster.x-k8s.io/v1beta2", "Cluster", WORKLOAD, "default"):
            problems.append("%s: Cluster %s" % (api.name, WORKLOAD))
        if ("operator.cluster.x-k8s.io", "coreproviders") in api.resources:
            problems += [
                "%s: %s %s" % (api.name, k, o["metadata"]["name"])
                for k in PROVIDER_KINDS
                for o in api.list(OPERATOR, k)
            ]
        if api is not world.kind:  # on kind, bootstrap_secrets_delete is not in the plan: kind goes whole
            for kind, name in (("Secret", "sops-age"), ("Secret", "flux-github-pat"), ("ConfigMap", "krops-run")):
                if api.exists("v1", kind, name, "flux-system"):
                    problems.append("%s: %s flux-system/%s" % (api.name, kind, name))
        if ("kustomize.toolkit.fluxcd.io", "kustomizations") in api.resources:
            for ks in api.list(*KS):
                if not (ks.get("spec") or {}).get("suspend"):
                    problems.append("%s: Kustomization %s not suspended" % (api.name, ks["metadata"]["name"]))
    mgmt = world.mgmt
    problems += ["decoy %s %s/%s deleted" % (k, ns, n) for v, k, n, ns in DECOYS if not mgmt.exists(v, k, n, ns)]
    if not any(
        ("cluster.x-k8s.io", "clusters") in api.resources
        and api.exists("cluster.x-k8s.io/v1beta2", "Cluster", MGMT, "default")
        for api in (world.kind, mgmt)
    ):
        problems.append("the kept management Cluster %s is gone" % MGMT)
    if not any(
        ("cluster.x-k8s.io", "clusters") in api.resources
        and api.exists("cluster.x-k8s.io/v1beta2", "Cluster", DECOY_CLUSTER, "default")
        for api in (world.kind, mgmt)
    ):
        problems.append("the user's Cluster %s is gone" % DECOY_CLUSTER)
    return problems


def lost(world, after_rerun):
    """(c): the age key, the run tags on the kind cluster (the pivot's source state), each Cluster on exactly one side, and
    after the re-run the Flux secrets and run tags on the management cluster."""
    problems = []
    kind, mgmt = world.kind, world.mgmt
    tags = (
        kind.get("v1", "ConfigMap", "krops-run", "flux-system")
        if kind.exists("v1", "ConfigMap", "krops-run", "flux-system")
        else None
    )
    if not tags or tags.get("data") != RUN_TAGS:
        problems.append("the run tags on the kind cluster are gone or changed")
    if not world.age_key.exists() or world.age_key.read_text() != AGE_KEY:
        problems.append("the age key file is gone or changed")
    for name in (MGMT, WORKLOAD):
        sides = [
            api.name
            for api in (kind, mgmt)
            if ("cluster.x-k8s.io", "clusters") in api.resources
            and api.exists("cluster.x-k8s.io/v1beta2", "Cluster", name, "default")
        ]
        if len(sides) != 1:
            problems.append("Cluster %s on %s side(s): %s" % (name, len(sides), sides))
    if after_rerun:
        for kind_, name in (("Secret", "sops-age"), ("ConfigMap", "krops-run")):
            if not mgmt.exists("v1", kind_, name, "flux-system"):
                problems.append("%s flux-system/%s missing on the management cluster" % (kind_, name))
    return problems


@pytest.fixture
def crash_world(tmp_path, monkeypatch):
    world = CrashWorld(tmp_path)
    monkeypatch.setenv("PATH", "%s%s%s" % (world.bin, os.pathsep, os.environ.get("PATH", "")))
    world.plant_decoys()
    yield world
    errors = world.stop()
    assert not errors, errors


def check_bootstrap_point(world, run_module, point, start, expected):
    row = {"point": point, "fault_rc": None, "converged": None, "torn_down": None, "lost": [], "notes": []}
    world.restore(start)
    arm(world.apis()[point.split(":", 2)[1]], point)
    failed, _results = run_steps(run_module, world.bootstrap_steps())
    row["fault_rc"] = 2 if failed else 0
    world.disarm()  # a fault the run did not reach
    partial = world.checkpoint()
    failed, _results = run_steps(run_module, world.bootstrap_steps())
    if failed:
        row["converged"] = False
        row["notes"].append("re-run failed: " + failed)
    else:
        differs = diff(expected, snapshot(world))
        failed, results = run_steps(run_module, world.bootstrap_steps())
        changed = [name for name, result in results if result.get("changed")] if not failed else [failed]
        row["converged"] = not differs and not changed
        row["notes"] += (["end state differs: " + "; ".join(differs[:4])] if differs else []) + (
            ["run after: changed " + ", ".join(changed)] if changed else []
        )
    row["lost"] += lost(world, after_rerun=row["converged"])
    world.restore(partial)
    tear_down(world, run_module, row)
    return row


def tear_down(world, run_module, row):
    failed, _results = teardown(world, run_module)
    left = owned_left(world)
    row["torn_down"] = not failed and not left
    if failed:
        row["notes"].append("teardown failed: " + failed)
    if left:
        row["notes"].append(("BUG teardown ok but left: " if not failed else "left: ") + ", ".join(left[:5]))


def check_teardown_point(world, run_module, point, after_bootstrap):
    row = {
        "point": "teardown/" + point,
        "fault_rc": None,
        "converged": None,
        "torn_down": None,
        "lost": [],
        "notes": [],
    }
    world.restore(after_bootstrap)
    arm(world.apis()[point.split(":", 2)[1]], point)
    failed, _results = teardown(world, run_module)
    row["fault_rc"] = 2 if failed else 0
    left = [] if failed else owned_left(world)
    if left:  # a teardown that ends well must have left nothing owned, fault or not
        row["notes"].append("BUG faulted teardown ok but left: " + ", ".join(left[:5]))
    world.disarm()  # what the run did not reach
    tear_down(world, run_module, row)
    row["torn_down"] = row["torn_down"] and not left
    return row


@pytest.mark.slow  # about 75 s: in make test, not in make check's quick tier
def test_every_write_failed_once_converges_tears_down_clean_and_loses_nothing(crash_world, run_module, capsys):
    world = crash_world
    started = time.monotonic()
    start = world.checkpoint()
    failed, _results = run_steps(run_module, world.bootstrap_steps())
    assert failed is None, failed
    boot_writes = distinct_writes(world.apis().values())
    expected = snapshot(world)
    after_bootstrap = world.checkpoint()
    world.disarm()  # clears the request logs
    failed, _results = teardown(world, run_module)
    assert failed is None, failed
    assert owned_left(world) == []
    tear_writes = distinct_writes(world.apis().values())
    baseline = time.monotonic() - started

    # the points, from the baseline run: every teardown write and a spread of the bootstrap's, each kind of fault
    boot_points = spread(["%s:%s" % (k, w.split(":", 1)[1]) for w in boot_writes for k in KINDS], BOOTSTRAP_POINTS)
    tear_points = ["%s:%s" % (k, w.split(":", 1)[1]) for w in tear_writes for k in KINDS]
    assert set(KINDS) <= set(WRITE_FAULTS)
    rows, seconds = [], []
    for point in boot_points + tear_points:
        began = time.monotonic()
        if point in boot_points:
            rows.append(check_bootstrap_point(world, run_module, point, start, expected))
        else:
            rows.append(check_teardown_point(world, run_module, point, after_bootstrap))
        seconds.append("%.1f" % (time.monotonic() - began))
    with capsys.disabled():
        print(
            "\nbaseline: %d bootstrap writes, %d teardown writes, %.1fs; %d points in %.1fs"
            % (len(boot_writes), len(tear_writes), baseline, len(rows), time.monotonic() - started)
        )
        print("seconds per point: " + " ".join(seconds))
        print(table(rows))
        print(summary(rows))
    assert len(rows) >= 12
    bad = [r for r in rows if r["converged"] is False or not r["torn_down"] or r["lost"]]
    assert not bad, "\n" + table(bad)


# ---- CrashWorld.checkpoint/restore: the API servers --------------------------------------------------------------


def answers(url):
    """Whether an API server answers at url."""
    try:
        with urllib.request.urlopen(url + "/version", timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError):
        return False


def kubeconfig_server(text):
    return yaml.safe_load(text)["clusters"][0]["cluster"]["server"]


def test_restore_forgets_a_server_started_since(crash_world):
    """A server started after the checkpoint (a Cluster CAPI provisioned) is stopped on restore and nothing of the
    world names its URL any more: not world.clusters, not a kubeconfig file."""
    world = crash_world
    saved = world.checkpoint()
    extra = world._spawn("extra")  # as CapiController spawns a workload's API server
    url = extra.url
    world.restore(saved)
    assert "extra" not in world.apis() and not answers(url)
    assert url not in world.world.clusters
    files = list(world.root.glob("*.kubeconfig")) + [world.target_kubeconfig]
    assert [str(f) for f in files if f.exists() and url in f.read_text()] == []


def test_no_later_server_takes_the_url_of_a_stopped_one(crash_world, monkeypatch):
    """No server of the world gets the URL a stopped one had, even when the OS hands the freed port out again: a
    stale kubeconfig (a Secret of a later checkpoint, a file read before the restore) reaches nothing, never another
    server."""
    world = crash_world
    saved = world.checkpoint()
    extra = world._spawn("extra")
    url = extra.url
    world.restore(saved)
    freed = [extra.port]

    class PortReused(crash_world_module.StrictKubeEmulator):
        def start(self, host="127.0.0.1", port=0, tls=False):
            if port == 0 and freed:  # the OS gives out the port the stopped server had
                port = freed.pop()
            return super().start(host, port, tls)

    monkeypatch.setattr(crash_world_module, "StrictKubeEmulator", PortReused)
    again = world._spawn("again")
    assert not freed  # the freed port was handed out
    assert again.url != url and answers(again.url)
    assert world.world.clusters[again.url] is again


def test_restore_serves_a_server_stopped_since_on_its_own_url(crash_world):
    """A Cluster deleted after the checkpoint had its API server stopped (CapiController._delete_cluster): the
    restore brings it back serving on its URL, the one the restored kubeconfig Secret names; back to a checkpoint
    taken while it was stopped, it is stopped again and the world does not name it."""
    world = crash_world
    workload = world.apis()[DECOY_CLUSTER]
    url = workload.url
    before = world.checkpoint()
    world.kind.remove(*CLUSTER, DECOY_CLUSTER, "default")
    deadline = time.monotonic() + 20
    while answers(url) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not answers(url)
    gone = world.checkpoint()

    world.restore(before)
    assert answers(url)
    secret = world.secret_kubeconfig(DECOY_CLUSTER)
    assert kubeconfig_server(secret) == url and world.world.cluster_for_kubeconfig(secret) is workload
    assert world.apis()[DECOY_CLUSTER] is workload

    world.restore(gone)
    assert not answers(url) and url not in world.world.clusters
    world.restore(before)
    assert answers(url) and world.world.clusters[url] is workload


def test_restore_goes_back_to_checkpoints_in_any_order_with_their_servers(crash_world):
    """Back to an older checkpoint, then to a newer one: the newer one's servers are back (the bootstrap points restore
    the start, the teardown points the bootstrapped state), serving on their URLs with their kubeconfig files."""
    world = crash_world
    older = world.checkpoint()
    extra = world._spawn("extra")
    extra.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mine", "namespace": "default"}})
    newer = world.checkpoint()
    world.restore(older)
    assert not answers(extra.url)
    world.restore(newer)
    assert world.apis()["extra"] is extra and answers(extra.url)
    assert world.world.clusters[extra.url] is extra
    assert extra.exists("v1", "ConfigMap", "mine", "default")
    with open(extra.kubeconfig_path, encoding="utf-8") as handle:
        assert kubeconfig_server(handle.read()) == extra.url
