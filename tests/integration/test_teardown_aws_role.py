"""roles/teardown end to end for aws: `ansible-playbook -i inventories/aws playbooks/aws.yml --tags teardown`.

The kind cluster is the kube emulator (management Cluster eu-north-1-management, the workload Clusters,
Kustomizations, CAPI operator provider objects, bootstrap secrets); a thread plays CAPA by letting a
workload Cluster go once its deletion is requested; helm and kind are recording stand-ins; AWS is moto,
seeded with one owned workload cluster (tests/integration/test_aws_sweep_world.py) and decoys.
"""

from __future__ import annotations

import json
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
    seed_global,
    seed_network,
    vpc_defaults,
)
from tests.substrate.bootstrapped import (
    CAPI_FINALIZER,
    CLUSTER,
    KS,
    PROVIDER_API,
    RUN_TAGS,
    SECRETS,
    install_bootstrapped_tools,
    seed_bootstrapped_kind,
)
from tests.substrate.fixtures import REPO

pytestmark = pytest.mark.slow
R = "krops.platform.teardown : "
MGMT = "eu-north-1-management"
WORKLOADS = ("eu-north-1-workload", "eu-west-1-workload")
# An IPAM provider too: teardown deletes every provider kind of cluster-api-operator, not only the
# ones the aws tree installs (one left behind keeps its controller running).
PROVIDERS = (
    ("CoreProvider", "capi-system", "cluster-api"),
    ("InfrastructureProvider", "capa-system", "aws"),
    ("IPAMProvider", "capi-ipam-in-cluster-system", "in-cluster"),
    ("AddonProvider", "caaph-system", "helm"),
)


@pytest.fixture
def world(kind_api, fake_bins, moto, tmp_path):
    """The emulator, the stand-ins and moto as a freshly bootstrapped aws environment leaves them."""
    seed_bootstrapped_kind(
        kind_api,
        "aws",
        [(*provider, "v2.8.1") for provider in PROVIDERS],
        clusters=(MGMT,) + WORKLOADS,
        run_tags={"run": "1"},
    )
    install_bootstrapped_tools(fake_bins, kind_api)

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
    full_env = {
        "PATH": fake_bins.path_env,
        "HOME": str(tmp_path),
        "BOOTSTRAP_CONFIG": str(REPO / "bootstrap.toml"),
        # moto deletes at once: the sweep polls its waits from the start instead of after AWS's usual durations
        "KROPS_AWS_SWEEP_TIME_SCALE": "0",
    }
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
        "3. delete the CAPI providers (add-on, runtime extension, IPAM, control plane, bootstrap, infrastructure, core) "
        "so nothing recreates "
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
    providers = ran(out, "Delete the CAPI providers (step 3)")
    assert providers["changed"] is True
    assert [(p["kind"], p["name"]) for p in providers["deleted"]] == [
        ("AddonProvider", "helm"),
        ("IPAMProvider", "in-cluster"),
        ("InfrastructureProvider", "aws"),
        ("CoreProvider", "cluster-api"),
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


# --- the unsafe cases of issue 9 as decoys of a real playbook run ------------------------------------------------

NORTH_ENTRY = """[[environments.aws.teardown.aws-workloads]]
region = "eu-north-1"
cluster-name = "eu-north-1-workload"
eks-cluster-name = "default_eu-north-1-workload-control-plane"
rds-instance = "krops-eu-north-1-workload-db"
"""
WEST_ENTRY = """[[environments.aws.teardown.aws-workloads]]
region = "eu-west-1"
cluster-name = "eu-west-1-workload"
eks-cluster-name = "default_eu-west-1-workload-control-plane"
rds-instance = "krops-eu-west-1-workload-db"
"""
# A second aws environment in the same account: its clusters share prefixes with ours.
STAGING = """
[environments.aws-staging]
kind = "aws"
mgmt-region = "eu-north-1"
sync = "git"
sync-path = "mgmt/aws"
mgmt-cluster = "eu-north-1-management-staging"
mgmt-ready-timeout = "40m"
infra-provider-namespace = "capa-system"
infra-provider-name = "aws"
provider-manifests = ["mgmt/aws/capi-system/core-provider.yaml"]

# it names neither our reader user nor our stack: only its live clusters keep them
[environments.aws-staging.teardown]
global-iam-users = []
cfn-stack-name = "staging-capa-bootstrap"

[[environments.aws-staging.teardown.aws-workloads]]
region = "eu-north-1"
cluster-name = "eu-north-1-workload-2"
eks-cluster-name = "default_eu-north-1-workload-2-control-plane"

[[environments.aws-staging.teardown.aws-workloads]]
region = "eu-west-1"
cluster-name = "eu-west-1-workload-blue"
eks-cluster-name = "default_eu-west-1-workload-blue-control-plane"
"""
# IAM roles of the other environment's clusters whose names start with one of ours (issue 9)
OTHER_ROLES = {
    "eu-north-1-workload-2-nodes": "eu-north-1-workload-2",
    "eu-west-1-workload-blue-nodes": "eu-west-1-workload-blue",
    "eu-north-1-management-staging-controllers": "eu-north-1-management-staging",
}


def two_environments(tmp_path):
    """The shipped bootstrap.toml with its aws-workloads entries swapped (eu-west-1 first) and aws-staging added.

    aws-crossplane is left out: it names the same account-global user and stack, and the kept reason this file
    is for is aws-staging's live cluster."""
    text = (REPO / "bootstrap.toml").read_text()
    start, end = text.index("[environments.aws-crossplane]"), text.index("[environments.azure]")
    text = text[:start] + text[end:]
    assert text.count(NORTH_ENTRY) == 1 and text.count(WEST_ENTRY) == 1
    text = text.replace(NORTH_ENTRY, "@@north@@").replace(WEST_ENTRY, NORTH_ENTRY).replace("@@north@@", WEST_ENTRY)
    assert text.index('cluster-name = "eu-west-1-workload"') < text.index('cluster-name = "eu-north-1-workload"')
    path = tmp_path / "config" / "bootstrap.toml"
    path.parent.mkdir()
    path.write_text(text + STAGING)
    return str(path)


def seed_other_environment(moto):
    north = clients(moto, "eu-north-1")
    iam = north("iam")
    for name, cluster in OTHER_ROLES.items():
        iam.create_role(
            RoleName=name, AssumeRolePolicyDocument=ASSUME, Tags=[{"Key": CAPA % cluster, "Value": "owned"}]
        )
    live = seed_network(north("ec2"), CAPA % "eu-north-1-management-staging", "172.18.0.0/16", nat=False)
    return live["vpc"][0], {("global", "iam-role", n) for n in OTHER_ROLES} | {("eu-north-1", "vpc", live["vpc"][0])}


def test_aws_teardown_keeps_every_unsafe_decoy_in_check_mode_and_for_real(
    world, kind_api, fake_bins, moto, ansible_playbook, tmp_path
):
    owned, decoys = world
    # the management cluster too: with the entries swapped its region must still come from mgmt-region
    owned = owned | seed_cluster(moto, *CLUSTERS[2])
    live_vpc, others = seed_other_environment(moto)
    shared = seed_global(moto)  # the reader user and the clusterawsadm stack of environment aws
    decoys = decoys | others | as_inventory(shared)
    env = {"BOOTSTRAP_CONFIG": two_environments(tmp_path)}
    before = inventory(moto)
    why = f"clusters of other environments still exist: VPC {live_vpc} of environment aws-staging in eu-north-1"

    rc, out, err = run_teardown(ansible_playbook, kind_api, fake_bins, moto, tmp_path, "--check", env=env)
    assert rc == 0, (failed(out), err[-3000:])
    planned = normalise(ran(out, "Show the sweep")["msg"])
    assert planned == as_inventory(owned - shared) and not planned & decoys
    assert inventory(moto) == before

    threads = capa(kind_api, WORKLOADS)
    rc, out, err = run_teardown(ansible_playbook, kind_api, fake_bins, moto, tmp_path, env=env)
    for t in threads:
        t.join(5)
    assert rc == 0, (failed(out), err[-3000:])
    after = inventory(moto)
    assert decoys <= after, decoys - after
    assert not as_inventory(owned - shared) & after
    sweep = ran(out, "Sweep the workload targets and the management cluster (ownership-filtered)")
    assert sorted((k["type"], k["id"], k["region"], k["reason"]) for k in sweep["kept"]) == [
        ("cloudformation-stack", "cluster-api-provider-aws-sigs-k8s-io", "eu-north-1", why),
        ("cloudformation-stack", "cluster-api-provider-aws-sigs-k8s-io", "eu-west-1", why),
        ("iam-user", "krops-reader", "global", why),
    ]
    assert "kept: " in sweep["msg"] and why in sweep["msg"]
    assert ("eu-north-1", "eks-cluster", CLUSTERS[2][2]) in normalise(
        [r for r in sweep["results"] if r["outcome"] == "deleted"]
    )
    assert live_vpc in {i for r, t, i in after if t == "vpc"}


def test_aws_teardown_fails_naming_an_owned_resource_the_sweep_cannot_delete(
    world, kind_api, fake_bins, moto, ansible_playbook, tmp_path
):
    owned, decoys = world
    ec2 = clients(moto, "eu-north-1")("ec2")
    gateway = ec2.create_customer_gateway(
        Type="ipsec.1",
        PublicIp="203.0.113.9",
        BgpAsn=65000,
        TagSpecifications=[
            {"ResourceType": "customer-gateway", "Tags": [{"Key": CAPA % "eu-north-1-workload", "Value": "owned"}]}
        ],
    )["CustomerGateway"]["CustomerGatewayId"]
    arn = f"arn:aws:ec2:eu-north-1:123456789012:customer-gateway/{gateway}"
    threads = capa(kind_api, WORKLOADS)
    rc, out, err = run_teardown(ansible_playbook, kind_api, fake_bins, moto, tmp_path)
    for t in threads:
        t.join(5)
    assert rc != 0
    [(task, msg)] = failed(out)
    assert task == R + "Sweep the workload targets and the management cluster (ownership-filtered)"
    assert f"still owned after the sweep: unsupported {arn} in eu-north-1" in msg
    after = inventory(moto)
    assert decoys <= after and not as_inventory(owned) & after
    # nothing after the failed step: the kind cluster stays for the re-run
    assert not [c for c in fake_bins.calls("kind") if c["argv"][:1] == ["delete"]]
