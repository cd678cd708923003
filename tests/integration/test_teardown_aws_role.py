"""roles/teardown end to end for aws: `ansible-playbook -i inventories/aws playbooks/aws.yml --tags teardown`.

The kind cluster is the kube emulator (management Cluster eu-north-1-management, the workload Clusters,
Kustomizations, CAPI operator provider objects, bootstrap secrets); a thread plays CAPA by letting a
workload Cluster go once its deletion is requested; helm and kind are recording stand-ins; AWS is moto,
seeded with one owned workload cluster (tests/integration/test_aws_sweep_world.py) and decoys.
"""

from __future__ import annotations

import json
import sys
import threading

import pytest

from tests.integration.test_aws_sweep_world import (
    ASSUME,
    CAPA,
    CLUSTERS,
    clients,
    inventory,
    normalise,
    seed_cluster,
    seed_network,
    vpc_defaults,
)
from tests.integration.test_teardown_kube import CAPI_FINALIZER, CLUSTER, KS, make_cluster, make_ks
from tests.substrate.krops_marks import make_kind_marker
from tests.substrate.fixtures import REPO

pytestmark = pytest.mark.slow
R = "krops.platform.teardown : "
MGMT = "eu-north-1-management"
WORKLOADS = ("eu-north-1-workload", "eu-west-1-workload")
PROVIDER_API = "operator.cluster.x-k8s.io/v1alpha2"
PROVIDERS = (
    ("CoreProvider", "capi-system", "cluster-api"),
    ("InfrastructureProvider", "capa-system", "aws"),
    ("AddonProvider", "caaph-system", "helm"),
)
SECRETS = ("flux-github-pat", "sops-age")
RUN_TAGS = "krops-run"

# kind stand-in: records like the standard one and, when asked to delete, which Clusters the kind API
# server (the emulator) still holds at that moment.
KIND = """#!{python}
import json, os, sys, urllib.request
here = os.path.dirname(os.path.abspath(__file__))
entry = {{"tool": "kind", "argv": sys.argv[1:], "env": {{}}, "cwd": os.getcwd(), "stdin": ""}}
if sys.argv[1:2] == ["delete"]:
    with urllib.request.urlopen("{url}/apis/cluster.x-k8s.io/v1beta2/clusters", timeout=10) as answer:
        entry["clusters_left"] = sorted(c["metadata"]["name"] for c in json.load(answer)["items"])
with open(os.path.join(here, "calls.jsonl"), "a") as log:
    log.write(json.dumps(entry) + "\\n")
if sys.argv[1:3] == ["get", "clusters"]:
    print("mgmt")
elif sys.argv[1:2] == ["version"]:
    print("kind v0.27.0 go1.23 linux/amd64")
"""


def release(name):
    return json.dumps(
        [
            {
                "name": name,
                "namespace": "flux-system",
                "revision": "1",
                "status": "deployed",
                "chart": f"{name}-2.5.0",
                "app_version": "2.5.0",
                "updated": "2026-11-30 06:00:00 +0000 UTC",
            }
        ]
    )


@pytest.fixture
def world(kind_api, fake_bins, moto, tmp_path):
    """The emulator, the stand-ins and moto as a freshly bootstrapped aws environment leaves them."""
    for name in ("flux-system", "capi-system", "capa-system", "caaph-system"):
        if not kind_api.exists("v1", "Namespace", name):
            kind_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    make_ks(kind_api, "flux-system")
    make_ks(kind_api, "clusters")
    make_kind_marker(kind_api, "aws")
    for name in (MGMT,) + WORKLOADS:
        make_cluster(kind_api, name)
    for kind, namespace, name in PROVIDERS:
        kind_api.create(
            {
                "apiVersion": PROVIDER_API,
                "kind": kind,
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"version": "v2.8.1"},
            }
        )
    for name in SECRETS:
        kind_api.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": "flux-system"},
                "type": "Opaque",
                "data": {"x": "eA=="},
            }
        )
    kind_api.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": RUN_TAGS, "namespace": "flux-system"},
            "data": {"run": "1"},
        }
    )

    fake_bins.install("kind", KIND.format(python=sys.executable, url=kind_api.url))
    fake_bins.answer("helm", "get values", stdout="null\n")
    fake_bins.answer("helm", "--filter flux-operator", stdout=release("flux-operator"))
    fake_bins.answer("helm", "--filter flux", stdout=release("flux"))
    fake_bins.answer(
        "helm",
        "version",
        stdout='version.BuildInfo{Version:"v3.17.0", GitCommit:"x", GitTreeState:"clean", GoVersion:"go1.23.0"}\n',
    )

    # owned: what CAPA and krops create for eu-north-1-workload; decoys: an untagged VPC, the network of a
    # cluster whose name only shares a prefix with it, and an IAM role whose name does
    owned = seed_cluster(moto, *CLUSTERS[0])
    north = clients(moto, "eu-north-1")
    prefix = seed_network(north("ec2"), CAPA % "eu-north-1-workload2", "172.17.0.0/16", nat=False)
    north("iam").create_role(RoleName="eu-north-1-workloadx", AssumeRolePolicyDocument=ASSUME)
    decoys = {
        ("eu-north-1", "vpc", north("ec2").create_vpc(CidrBlock="172.16.0.0/16")["Vpc"]["VpcId"]),
        ("eu-north-1", "vpc", prefix["vpc"][0]),
        ("eu-north-1", "subnet", prefix["subnet"][0]),
        ("global", "iam-role", "eu-north-1-workloadx"),
    }
    return owned, decoys


def run_teardown(ansible_playbook, kind_api, fake_bins, moto, tmp_path, *args, env=None):
    extra = {
        "teardown_kind_kubeconfig": str(kind_api.kubeconfig_path),
        "teardown_mgmt_kubeconfig": str(tmp_path / "no-mgmt.yaml"),
        "teardown_aws_endpoint_url": moto,
    }
    full_env = {"PATH": fake_bins.path_env, "HOME": str(tmp_path), "BOOTSTRAP_CONFIG": str(REPO / "bootstrap.toml")}
    full_env.update(env or {})
    return ansible_playbook(
        REPO / "playbooks" / "aws.yml",
        "--tags",
        "teardown",
        "-e",
        json.dumps(extra),
        *args,
        inventory=REPO / "inventories" / "aws",
        env=full_env,
    )


def capa(kind_api, names):
    """Play CAPA: once a workload Cluster's deletion is requested, its finalizer goes and so does the object."""

    def run(name):
        if kind_api.wait_for_event(
            lambda t, o: (
                t == "MODIFIED"
                and o["kind"] == "Cluster"
                and o["metadata"]["name"] == name
                and o["metadata"].get("deletionTimestamp")
            ),
            timeout=40,
        ):
            kind_api.clear_finalizers(*CLUSTER, name, "default")

    threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in names]
    for t in threads:
        t.start()
    return threads


def as_inventory(items):
    """Seeded (region, type, id) as test_aws_sweep_world.inventory lists them (buckets without region)."""
    return {("bucket", t, i) if t == "s3-bucket" else (r, t, i) for r, t, i in items}


def writes(kind_api):
    return [(m, p) for m, p in kind_api.requests if m in ("POST", "PUT", "PATCH", "DELETE")]


def ran(out, name):
    """The result of the task called R + name that was not skipped (the role includes each task file per step)."""
    found = [
        t["hosts"]["localhost"]
        for p in out.get("plays", [])
        for t in p["tasks"]
        if t["task"]["name"] == R + name and not t["hosts"].get("localhost", {}).get("skipped")
    ]
    assert len(found) == 1, (name, found)
    return found[0]


def failed(out):
    return [
        (t["task"]["name"], h.get("msg"))
        for p in out.get("plays", [])
        for t in p["tasks"]
        for h in t["hosts"].values()
        if h.get("failed")
    ]


def test_aws_teardown_check_mode_prints_the_plan_and_changes_nothing(
    world, kind_api, fake_bins, moto, ansible_playbook, tmp_path
):
    owned, decoys = world
    before = inventory(moto)
    objects = {k: kind_api.list(*k) for k in (CLUSTER, KS)}
    rc, out, err = run_teardown(ansible_playbook, kind_api, fake_bins, moto, tmp_path, "--check")
    assert rc == 0, (failed(out), err[-3000:])
    assert ran(out, "Show the teardown plan")["msg"] == [
        "Teardown of aws on the kind cluster (context kind-mgmt) [check mode: nothing is deleted]",
        "1. suspend every Flux Kustomization and Flux Operator object on the kind cluster",
        "2. delete the workload Clusters eu-north-1-workload, eu-west-1-workload through the provider and wait (1200s)",
        "3. delete the CAPI providers (add-on, control plane, bootstrap, infrastructure, core) so nothing recreates "
        "cloud resources",
        "4. helm uninstall flux and flux-operator in flux-system",
        "5. delete the bootstrap secrets and run tags in flux-system",
        "6. remove the aws resources this environment created, the management cluster included (ownership-filtered)",
        "7. delete the kind cluster mgmt (marker kube-system/krops-bootstrap: environment aws, kind cluster mgmt)",
    ]
    assert ran(out, "Show the Cluster deletions")["teardown_clusters.plan"] == [
        "suspend Kustomization flux-system/clusters",
        "suspend Kustomization flux-system/flux-system",
        "delete Cluster default/eu-north-1-workload and wait until it is gone",
        "delete Cluster default/eu-west-1-workload and wait until it is gone",
    ]
    providers = ran(out, "Delete them add-on first, core last, each waited for")["results"]
    assert [(p["item"]["kind"], p["item"]["metadata"]["name"], p["changed"]) for p in providers] == [
        ("AddonProvider", "helm", True),
        ("InfrastructureProvider", "aws", True),
        ("CoreProvider", "cluster-api", True),
    ]
    helm = ran(out, "Uninstall Flux (step 4)")["results"]
    assert [(h["item"], h["changed"]) for h in helm] == [("flux", True), ("flux-operator", True)]
    planned = normalise(ran(out, "Show the sweep")["msg"])
    assert planned == as_inventory(owned) and not planned & decoys
    # nothing changed anywhere
    assert not writes(kind_api), writes(kind_api)
    # kubernetes.core.k8s deletes with server-side dry run in check mode
    assert kind_api.dry_runs == [
        ("DELETE", f"/apis/{PROVIDER_API}/namespaces/{ns}/{k.lower()}s/{n}") for k, ns, n in PROVIDERS[::-1]
    ] + [("DELETE", f"/api/v1/namespaces/flux-system/secrets/{n}") for n in SECRETS] + [
        ("DELETE", f"/api/v1/namespaces/flux-system/configmaps/{RUN_TAGS}")
    ]
    assert {k: kind_api.list(*k) for k in (CLUSTER, KS)} == objects
    assert inventory(moto) == before
    assert not [c for c in fake_bins.calls("helm") if "uninstall" in c["argv"]]
    assert not [c for c in fake_bins.calls("kind") if c["argv"][:1] == ["delete"]]


def test_aws_teardown_removes_the_workloads_then_providers_flux_secrets_aws_and_kind(
    world, kind_api, fake_bins, moto, ansible_playbook, tmp_path
):
    owned, decoys = world
    before = inventory(moto)
    defaults = vpc_defaults(moto, owned)  # the main route table and default security group go with their VPC
    threads = capa(kind_api, WORKLOADS)
    rc, out, err = run_teardown(ansible_playbook, kind_api, fake_bins, moto, tmp_path)
    for t in threads:
        t.join(5)
    assert rc == 0, (failed(out), err[-3000:])

    # Kubernetes side: workloads gone, the management Cluster kept and never deleted through its own object
    assert [c["metadata"]["name"] for c in kind_api.list(*CLUSTER)] == [MGMT]
    assert CAPI_FINALIZER in kind_api.get(*CLUSTER, MGMT, "default")["metadata"]["finalizers"]
    log = writes(kind_api)
    cluster_path = "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/clusters/%s"
    assert not [
        w
        for w in log
        if w[1] == cluster_path % MGMT or (w[1].startswith("/apis/cluster.x-k8s.io/") and w[1].endswith("/clusters"))
    ], log
    # Flux suspended (both Kustomizations) before the first Cluster delete; each workload deleted once
    ks_path = "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/flux-system/kustomizations/%s"
    deletes = [log.index(("DELETE", cluster_path % n)) for n in WORKLOADS]
    suspends = [log.index(("PATCH", ks_path % n)) for n in ("clusters", "flux-system")]
    assert max(suspends) < min(deletes), log
    assert [w for w in log if "/clusters/" in w[1]] == [("DELETE", cluster_path % n) for n in WORKLOADS]
    assert all(k["spec"]["suspend"] is True for k in kind_api.list(*KS))
    # then the providers, add-on first, core last; then the bootstrap secrets and run tags
    provider_deletes = [w for w in log if "operator.cluster.x-k8s.io" in w[1]]
    assert provider_deletes == [
        ("DELETE", f"/apis/{PROVIDER_API}/namespaces/{ns}/{k.lower()}s/{n}") for k, ns, n in PROVIDERS[::-1]
    ]
    assert log.index(provider_deletes[0]) > max(deletes)
    assert not [1 for k, ns, n in PROVIDERS if kind_api.exists(PROVIDER_API, k, n, ns)]
    assert not [n for n in SECRETS if kind_api.exists("v1", "Secret", n, "flux-system")]
    assert not kind_api.exists("v1", "ConfigMap", RUN_TAGS, "flux-system")
    assert not kind_api.dry_runs

    # helm uninstall of both releases, in the flux namespace, against the kind cluster
    uninstalls = [c for c in fake_bins.calls("helm") if "uninstall" in c["argv"]]
    assert [c["argv"] for c in uninstalls] == [
        ["uninstall", "--wait", "flux"],
        ["uninstall", "--wait", "flux-operator"],
    ]
    assert {(c["env"]["HELM_NAMESPACE"], c["env"]["HELM_KUBECONTEXT"]) for c in uninstalls} == {
        ("flux-system", "kind-mgmt")
    }

    # AWS: everything owned deleted, the decoys kept
    after = inventory(moto)
    assert not as_inventory(owned) & after, as_inventory(owned) & after
    assert decoys <= after
    sweep = ran(out, "Sweep the workload targets and the management cluster (ownership-filtered)")
    assert normalise([r for r in sweep["results"] if r["outcome"] == "deleted"]) == as_inventory(owned)
    assert after == before - as_inventory(owned) - defaults

    # kind deleted through the stand-in, once, when the emulator held only the management Cluster
    kind_deletes = [c for c in fake_bins.calls("kind") if c["argv"][:1] == ["delete"]]
    assert [(c["argv"], c["clusters_left"]) for c in kind_deletes] == [
        (["delete", "cluster", "--name", "mgmt", "--kubeconfig", str(kind_api.kubeconfig_path)], [MGMT])
    ]


def test_aws_teardown_stops_when_a_workload_cluster_never_goes(
    world, kind_api, fake_bins, moto, ansible_playbook, tmp_path
):
    owned, decoys = world
    before = inventory(moto)
    threads = capa(kind_api, WORKLOADS[:1])  # nothing lets eu-west-1-workload go
    rc, out, err = run_teardown(
        ansible_playbook, kind_api, fake_bins, moto, tmp_path, env={"CLUSTER_DELETE_TIMEOUT": "2s"}
    )
    for t in threads:
        t.join(5)
    assert rc != 0
    [(task, msg)] = failed(out)
    assert task == R + "Delete the workload Clusters through their provider and wait until they are gone"
    assert msg.startswith("timed out after 2s waiting for Cluster deletion in default on ")
    assert "still present: eu-west-1-workload (" in msg and "eu-north-1-workload" not in msg
    assert "Nothing after this step ran (the controller host is left running)" in msg
    assert [c["metadata"]["name"] for c in kind_api.list(*CLUSTER)] == [MGMT, "eu-west-1-workload"]
    # nothing after the failed step: providers, Flux, secrets, AWS and kind untouched
    assert not [w for w in writes(kind_api) if "operator.cluster.x-k8s.io" in w[1] or w[1].startswith("/api/v1")]
    assert all(kind_api.exists(PROVIDER_API, k, n, ns) for k, ns, n in PROVIDERS)
    assert all(kind_api.exists("v1", "Secret", n, "flux-system") for n in SECRETS)
    assert not [c for c in fake_bins.calls("helm") if "uninstall" in c["argv"]]
    assert inventory(moto) == before
    assert not [c for c in fake_bins.calls("kind") if c["argv"][:1] == ["delete"]]
