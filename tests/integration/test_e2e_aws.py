# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The aws scenario of the emulated lifecycle (issue 15): CAPA, ACK and the sweep against moto.

The kind cluster is a StrictKubeEmulator holding what a bootstrap of the aws environment leaves on it:
the Flux Kustomizations, the CAPI operator's provider objects, the bootstrap secrets, the kind marker
and the real tree's Clusters (mgmt/aws/aws-managed-clusters) and ACK objects (mgmt/aws/
workload-resources, mgmt/aws/aws-global-iam), postBuild-substituted as Flux would. A background
world reconciles them: tests/substrate/capi_world.CapiController with tests/substrate/aws_world.Capa
creates in moto what CAPA creates for each EKS cluster, aws_world.AckController what the ACK
controllers create; workload leftovers (a Service's load balancer, a PersistentVolume's EBS volume)
are added as the in-cluster controllers would. Decoys that look like ours are seeded beforehand.

Then the teardown runs as a user runs it: ``ansible-playbook -i inventories/aws playbooks/aws.yml
--tags teardown --check`` (prints the full plan, changes nothing), then without --check. Deleting the
workload Clusters makes CAPA delete their infrastructure; the sweep removes the rest.

The lifecycle test runs the whole of playbooks/aws.yml (bootstrap, pivot, teardown --check, teardown) on the
emulated host of tests/substrate/lifecycle.py with the same CAPA and ACK over moto.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests.integration.test_aws_sweep_world import ASSUME, CAPA, CCM, STACK, normalise, vpc_defaults
from tests.integration.test_teardown_aws_role import PROVIDERS, failed, ran
from tests.substrate import aws_world
from tests.substrate.aws_world import ACCOUNT, ACK_KINDS, Ack, AckController, Capa, clients, inventory
from tests.substrate.capi_world import CapiController
from tests.substrate.fixtures import REPO
from tests.substrate.flux_world import World, ssa_apply
from tests.substrate.bootstrapped import CLUSTER, KIND, KS, PROVIDER_API, SECRETS, seed_bootstrapped_kind
from tests.substrate.bootstrapped import helm_release as release
from tests.substrate.gitops import gitops_checkout, ready_kustomizations

pytestmark = pytest.mark.slow

MGMT = "eu-north-1-management"
STACK_NAME = "cluster-api-provider-aws-sigs-k8s-io"
WORKLOADS = ("eu-north-1-workload", "eu-west-1-workload")
TREE = (
    "mgmt/aws/aws-managed-clusters/eu-north-1",
    "mgmt/aws/aws-managed-clusters/eu-west-1",
    "mgmt/aws/workload-resources",
    "mgmt/aws/aws-global-iam",
)
RUN = {
    "AWS_ACCOUNT_ID": ACCOUNT,
    "KROPS_RUN_ID": "e2e-1",
    "KROPS_REVISION": "main@sha1:" + "a" * 40,
    "KROPS_EXPIRES_AT": "2026-12-02T00:00:00Z",
    "KROPS_RUN_KIND": "ci",
}
# The waits of the role, scaled down (CLUSTER_DELETE_TIMEOUT is the role's cluster-delete-timeout).
TIMEOUT = "120s"
# A second aws environment in the same account, with a live management cluster: it names the
# account-global reader user (the top-level [teardown] global-iam-users) and the clusterawsadm stack.
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

[environments.aws-staging.teardown]
mgmt-eks-cluster-name = "default_eu-north-1-management-staging-control-plane"
"""


def _bootstrapped(kind):
    """What bootstrap leaves on the kind cluster besides the tree: Flux, providers, secrets, marker."""
    seed_bootstrapped_kind(
        kind,
        "aws",
        [(*provider, "v2.11.1" if provider[2] == "aws" else "v1.13.5") for provider in PROVIDERS],
        namespaces=("default",),
        run_tags={k: v for k, v in RUN.items() if k.startswith("KROPS_")},
    )


def seed_decoys(endpoint, capa):
    """Look-alikes in the same account that the teardown must leave: (region, type, id) of each."""
    north, west = clients(endpoint, "eu-north-1"), clients(endpoint, "eu-west-1")
    decoys = set()
    iam = north("iam")
    # other clusters' IAM roles whose names extend ours (issue 9), one tagged for its own cluster
    for role, tags in (
        ("eu-north-1-workload-2-nodes", {CCM % "eu-north-1-workload-2": "owned"}),
        ("eu-west-1-workload-blue-nodes", {CCM % "default_eu-west-1-workload-blue-control-plane": "owned"}),
        ("eu-north-1-management-staging-controllers", {"krops.io/environment": "aws-staging"}),
        ("eu-north-1-workload-iam-service-role-old", {}),
        ("krops-eu-north-1-workload-reader-2", {}),
    ):
        iam.create_role(RoleName=role, AssumeRolePolicyDocument=ASSUME, Tags=aws_world._tag_list(tags))
        decoys.add(("global", "iam-role", role))
    # a VPC of a cluster whose name extends ours, one of another environment, with a subnet each
    for ec2, region, tags, cidr in (
        (north("ec2"), "eu-north-1", {CAPA % "eu-north-1-workload-2": "owned"}, "172.20.0.0/16"),
        (west("ec2"), "eu-west-1", {"krops.io/environment": "aws-staging"}, "172.21.0.0/16"),
        (west("ec2"), "eu-west-1", {CCM % "eu-west-1-workload": "shared"}, "172.22.0.0/16"),
    ):
        vpc = ec2.create_vpc(CidrBlock=cidr, TagSpecifications=aws_world._spec("vpc", tags))["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(
            VpcId=vpc, CidrBlock=cidr.replace("0.0/16", "1.0/24"), TagSpecifications=aws_world._spec("subnet", tags)
        )["Subnet"]["SubnetId"]
        decoys |= {(region, "vpc", vpc), (region, "subnet", subnet)}
        decoys |= {
            (region, t, i)
            for t, i in [("route-table", r["RouteTableId"]) for r in _main_tables(ec2, vpc)]
            + [("security-group", g["GroupId"]) for g in _default_groups(ec2, vpc)]
        }
        if region == "eu-north-1":
            lb = north("elbv2").create_load_balancer(
                Name="eu-north-1-workload-2-svc",
                Subnets=[subnet],
                Type="network",
                Tags=aws_world._tag_list({CCM % "default_eu-north-1-workload-2-control-plane": "owned"}),
            )["LoadBalancers"][0]["LoadBalancerArn"]
            decoys.add((region, "elbv2-load-balancer", lb))
    # volumes of another cluster and of another environment
    for tags in (
        {CCM % "default_eu-north-1-workload-2-control-plane": "owned"},
        {"krops.io/environment": "aws-staging"},
        {CCM % "eu-north-1-workload": "shared"},
    ):
        volume = north("ec2").create_volume(
            Size=1, AvailabilityZone="eu-north-1a", TagSpecifications=aws_world._spec("volume", tags)
        )["VolumeId"]
        decoys.add(("eu-north-1", "ebs-volume", volume))
    # a bucket whose name extends ours
    bucket = f"krops-{ACCOUNT}-eu-north-1-workload-data-2"
    north("s3").create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "eu-north-1"})
    decoys.add(("bucket", "s3-bucket", bucket))
    return decoys


def _main_tables(ec2, vpc):
    return ec2.describe_route_tables(
        Filters=[{"Name": "vpc-id", "Values": [vpc]}, {"Name": "association.main", "Values": ["true"]}]
    )["RouteTables"]


def _default_groups(ec2, vpc):
    return ec2.describe_security_groups(
        Filters=[{"Name": "vpc-id", "Values": [vpc]}, {"Name": "group-name", "Values": ["default"]}]
    )["SecurityGroups"]


def staging_cluster(endpoint, capa):
    """The live management cluster of aws-staging, built by CAPA as for any Cluster: (region, type, id)."""
    cluster = {"metadata": {"name": "eu-north-1-management-staging", "namespace": "default"}}
    control_plane = {
        "metadata": {"name": "eu-north-1-management-staging-control-plane", "namespace": "default"},
        "spec": {
            "region": "eu-north-1",
            "eksClusterName": "default_eu-north-1-management-staging-control-plane",
            "network": {"vpc": {"cidrBlock": "10.90.0.0/16"}},
            "additionalTags": {"krops.io/environment": "aws-staging"},
        },
    }
    return capa.create(cluster, control_plane, []).items()


class AwsEnvironment:
    """The kind emulator, the reconciling world and moto, as a bootstrap of the aws environment leaves them."""

    def __init__(self, kind, moto, spawn):
        self.kind, self.moto = kind, moto
        self.world = World()
        self.world.add_cluster(kind)
        self.capa = Capa(moto)
        self.ack = Ack(moto)
        self.capi = CapiController(self.world, spawn=spawn, infrastructure={"AWSManagedCluster": self.capa})
        AckController(self.world, self.ack)
        aws_world.install_crds(kind, ACK_KINDS)  # the ACK charts' CRDs (install.crds: CreateReplace)
        _bootstrapped(kind)
        self.world.settle()  # the providers Ready, CAPA's CRDs installed
        for obj in aws_world.tree_objects(TREE, RUN):
            ssa_apply(kind, obj, "kustomize-controller")
        self.world.settle()
        self.leftovers = set()
        for key in [("default", MGMT), ("default", WORKLOADS[0])]:
            self.leftovers |= self.capa.workload_leftovers(self.capa.records[key])

    def created(self):
        return self.capa.created() | self.ack.created() | self.leftovers


@pytest.fixture
def aws_env(strict_cluster, moto, fake_bins):
    kind = strict_cluster("kind-mgmt", bundles=("flux", "capi-operator", "cluster-api", "helm-addon"))
    env = AwsEnvironment(kind, moto, lambda name: strict_cluster(f"workload-{name}"))
    fake_bins.install("kind", KIND.format(python=sys.executable, url=kind.url))
    fake_bins.answer("helm", "get values", stdout="null\n")
    fake_bins.answer("helm", "--filter flux-operator", stdout=release("flux-operator"))
    fake_bins.answer("helm", "--filter flux", stdout=release("flux"))
    return env


def run_teardown(ansible_playbook, env, fake_bins, tmp_path, *args, config=None):
    extra = {
        "teardown_kind_kubeconfig": str(env.kind.kubeconfig_path),
        "teardown_mgmt_kubeconfig": str(tmp_path / "no-mgmt.yaml"),
        "teardown_aws_endpoint_url": env.moto,
        "teardown_host_timeout": 5,
    }
    return ansible_playbook(
        REPO / "playbooks" / "aws.yml",
        "--tags",
        "teardown",
        "-e",
        json.dumps(extra),
        *args,
        inventory=REPO / "inventories" / "aws",
        env={
            "PATH": fake_bins.path_env,
            "HOME": str(tmp_path),
            "BOOTSTRAP_CONFIG": str(config or REPO / "bootstrap.toml"),
            "CLUSTER_DELETE_TIMEOUT": TIMEOUT,
            "KROPS_AWS_SWEEP_TIME_SCALE": "0",  # moto deletes at once: the sweep polls from the start
        },
    )


def _specs(api):
    return {
        (o["kind"], o["metadata"]["name"]): o.get("spec")
        for k in (CLUSTER, KS, (PROVIDER_API, "InfrastructureProvider"))
        for o in api.list(*k)
    }


def test_the_world_builds_in_moto_what_capa_and_ack_build(aws_env):
    """CAPA's and ACK's resources exist in moto, named and tagged as they name and tag them."""
    env = aws_env
    made = inventory(env.moto)
    assert env.created() <= made, env.created() - made
    north = clients(env.moto, "eu-north-1")
    eks = north("eks").describe_cluster(name="default_eu-north-1-workload-control-plane")["cluster"]
    assert eks["tags"][CAPA % "default_eu-north-1-workload-control-plane"] == "owned"
    assert eks["tags"][CCM % "default_eu-north-1-workload-control-plane"] == "owned"
    assert eks["tags"]["krops.io/environment"] == "aws" and eks["tags"]["krops.io/run-id"] == "e2e-1"
    assert eks["roleArn"].endswith(":role/eu-north-1-workload-iam-service-role")
    vpcs = north("ec2").describe_vpcs(Filters=[{"Name": "tag:Name", "Values": ["eu-north-1-workload-vpc"]}])["Vpcs"]
    [vpc] = vpcs
    tags = {t["Key"]: t["Value"] for t in vpc["Tags"]}
    assert tags[CAPA % "eu-north-1-workload"] == "owned" and tags[aws_world.CAPA_ROLE] == "common"
    assert vpc["CidrBlock"] == "10.20.0.0/16"
    subnets = north("ec2").describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc["VpcId"]]}])["Subnets"]
    names = sorted(next(t["Value"] for t in s["Tags"] if t["Key"] == "Name") for s in subnets)
    assert names == [
        f"eu-north-1-workload-subnet-{role}-eu-north-1{z}" for role in ("private", "public") for z in "abc"
    ]
    cidrs = sorted(s["CidrBlock"] for s in subnets)
    assert cidrs == sorted(
        ["10.20.64.0/18", "10.20.128.0/18", "10.20.192.0/18", "10.20.0.0/20", "10.20.16.0/20", "10.20.32.0/20"]
    )
    # node groups: the tree's pools, each with its own role named by GenerateEKSName
    pools = north("eks").list_nodegroups(clusterName="default_eu-north-1-workload-control-plane")["nodegroups"]
    assert sorted(pools) == ["eu-north-1-workload-arm", "eu-north-1-workload-gpu", "eu-north-1-workload-x86"]
    role = aws_world.nodegroup_role_name("default_eu-north-1-workload-control-plane", "eu-north-1-workload-x86")
    assert role.startswith("capa_") and len(role) == 32
    role_tags = {t["Key"]: t["Value"] for t in north("iam").list_role_tags(RoleName=role)["Tags"]}
    assert role_tags[CCM % "default_eu-north-1-workload-control-plane"] == "owned"
    # ACK: spec.tags plus the controllers' literal resourceTags
    bucket_tags = {
        t["Key"]: t["Value"]
        for t in north("s3").get_bucket_tagging(Bucket=f"krops-{ACCOUNT}-eu-north-1-workload-data")["TagSet"]
    }
    assert bucket_tags["krops.io/environment"] == "aws" and bucket_tags["krops.io/run-kind"] == "ci"
    assert bucket_tags["services.k8s.aws/namespace"] == "default"
    bucket = env.kind.get("s3.services.k8s.aws/v1alpha1", "Bucket", "krops-eu-north-1-workload-data", "default")
    assert bucket["metadata"]["finalizers"] == ["finalizers.s3.services.k8s.aws/Bucket"]
    user_tags = {t["Key"]: t["Value"] for t in north("iam").list_user_tags(UserName="krops-reader")["Tags"]}
    assert user_tags["krops.io/environment"] == "aws"
    # the Clusters are provisioned, the ACK objects synced
    for name in (MGMT,) + WORKLOADS:
        assert env.kind.get(*CLUSTER, name, "default")["status"]["phase"] == "Provisioned"
    db = env.kind.get("rds.services.k8s.aws/v1alpha1", "DBInstance", "krops-eu-north-1-workload-db", "default")
    assert db["status"]["conditions"][0] == {
        "type": "ACK.ResourceSynced",
        "status": "True",
        "message": "Resource synced successfully",
    }


def test_render_substitute_keeps_rfc3339_run_tags_strings():
    from ansible_collections.krops.platform.plugins.module_utils import render

    [control_plane] = [
        o
        for o in aws_world.tree_objects(["mgmt/aws/aws-managed-clusters/eu-north-1"], {})
        if o["kind"] == "AWSManagedControlPlane" and o["metadata"]["name"].startswith("eu-north-1-workload")
    ]
    # what the tree holds before Flux substitutes (the default of the variable kept as Flux would)
    control_plane["spec"]["additionalTags"]["krops.io/expires-at"] = "${KROPS_EXPIRES_AT:=none}"
    assert aws_world.flux_substitute(control_plane, RUN)["spec"]["additionalTags"]["krops.io/expires-at"] == (
        "2026-12-02T00:00:00Z"
    )
    substituted = render.substitute(control_plane, RUN)
    assert substituted["spec"]["additionalTags"]["krops.io/expires-at"] == "2026-12-02T00:00:00Z"


def _config(tmp_path):
    path = tmp_path / "bootstrap.toml"
    path.write_text((REPO / "bootstrap.toml").read_text() + STAGING)
    return path


PLAN = [
    "Teardown of aws on the kind cluster (context kind-mgmt) [check mode: nothing is deleted]",
    "1. suspend every Flux Kustomization and Flux Operator object on the kind cluster",
    f"2. delete the workload Clusters {', '.join(WORKLOADS)} through the provider and wait ({TIMEOUT})",
    "3. delete the CAPI providers (add-on, runtime extension, IPAM, control plane, bootstrap, infrastructure, core) "
    "so nothing recreates "
    "cloud resources",
    "4. helm uninstall flux and flux-operator in flux-system",
    "5. delete the bootstrap secrets and run tags in flux-system",
    "6. remove the aws resources this environment created, the management cluster included (ownership-filtered)",
    "7. delete the kind cluster mgmt (marker kube-system/krops-bootstrap: environment aws, kind cluster mgmt)",
]


def test_aws_teardown_check_then_real_removes_what_the_run_created_and_keeps_the_decoys(
    aws_env, moto, fake_bins, ansible_playbook, tmp_path
):
    """--check prints the full plan and changes nothing; the real run leaves nothing the run created but the
    account-global resources another environment with a live cluster still names, and every decoy."""
    env = aws_env
    config = _config(tmp_path)
    decoys = seed_decoys(moto, env.capa) | staging_cluster(moto, env.capa)
    clients(moto, "eu-north-1")("cloudformation").create_stack(StackName=STACK_NAME, TemplateBody=STACK)
    decoys.add(("eu-north-1", "cloudformation-stack", STACK_NAME))
    created = env.created()
    workloads = set().union(*(env.capa.records[("default", w)].items() for w in WORKLOADS))
    management = env.capa.records[("default", MGMT)].items()
    before = inventory(moto)
    assert created <= before and decoys <= before and not created & decoys
    defaults = vpc_defaults(moto, created)  # the main route table and default group go with their VPC
    # the account-global reader user (and the policy ACK attached to it) that aws-staging still names
    shared = {("global", "iam-user", "krops-reader"), ("global", "iam-policy", "krops-reader-assume")}
    specs = _specs(env.kind)
    env.world.start(interval=0.2)
    try:
        started = time.monotonic()
        rc, out, err = run_teardown(ansible_playbook, env, fake_bins, tmp_path, "--check", config=config)
        check_time = time.monotonic() - started
        assert rc == 0, (failed(out), err[-3000:])
        assert ran(out, "Show the teardown plan")["msg"] == PLAN
        assert ran(out, "Show the Cluster deletions")["teardown_clusters.plan"] == [
            "suspend Kustomization flux-system/clusters",
            "suspend Kustomization flux-system/flux-system",
        ] + [f"delete Cluster default/{w} and wait until it is gone" for w in WORKLOADS]
        planned = normalise(ran(out, "Show the sweep")["msg"])
        # RDS's automated snapshots (backupRetentionPeriod 1) carry the instance's tags (copyTagsToSnapshot) and
        # go with the instance; the plan lists them as a type the sweep cannot delete
        snapshots = {
            (r, "unsupported", i)
            for r, i in _automated_snapshots(moto, ("krops-eu-north-1-workload-db", "krops-eu-west-1-workload-db"))
        }
        assert planned == (created - defaults - shared) | snapshots, (
            sorted(planned - created),
            sorted(created - defaults - shared - planned),
        )
        assert not planned & decoys
        assert inventory(moto) == before
        assert _specs(env.kind) == specs
        assert not [c for c in fake_bins.calls("helm") if "uninstall" in c["argv"]]
        assert not [c for c in fake_bins.calls("kind") if c["argv"][:1] == ["delete"]]

        started = time.monotonic()
        rc, out, err = run_teardown(ansible_playbook, env, fake_bins, tmp_path, config=config)
        real_time = time.monotonic() - started
        assert rc == 0, (failed(out), err[-3000:])
    finally:
        errors = env.world.stop()
    assert errors == []
    print(f"aws teardown: --check {check_time:.1f}s, real {real_time:.1f}s")

    # AWS: nothing the run created is left but what aws-staging still names (and the clusterawsadm stack, which
    # aws-crossplane, the shipped alternative of aws, names too); every decoy survives
    after = inventory(moto)
    assert created & after == shared, sorted(created & after)
    assert decoys <= after, sorted(decoys - after)
    assert after == before - (created - shared), sorted(after - (before - (created - shared)))
    sweep = ran(out, "Sweep the workload targets and the management cluster (ownership-filtered)")
    assert [(k["type"], k["id"], k["reason"]) for k in sweep["kept"]] == [
        ("iam-user", "krops-reader", f"environment aws-staging in {config} also names it"),
        (
            "iam-policy",
            f"arn:aws:iam::{ACCOUNT}:policy/krops-reader-assume",
            "attached to the account-global user krops-reader, which stays",
        ),
        ("cloudformation-stack", STACK_NAME, f"environment aws-crossplane, aws-staging in {config} also names it"),
    ]
    # CAPA deleted the workload clusters' infrastructure when their Clusters went; the sweep took the rest
    deleted = normalise([r for r in sweep["results"] if r["outcome"] == "deleted"])
    assert not deleted & workloads, sorted(deleted & workloads)
    assert management - defaults <= deleted
    assert deleted == created - workloads - defaults - shared, sorted(
        deleted ^ (created - workloads - defaults - shared)
    )

    # Kubernetes: the workload Clusters deleted through the provider, the management Cluster kept for the sweep
    assert [c["metadata"]["name"] for c in env.kind.list(*CLUSTER)] == [MGMT]
    assert not [1 for k, ns, n in PROVIDERS if env.kind.exists(PROVIDER_API, k, n, ns)]
    assert not [n for n in SECRETS if env.kind.exists("v1", "Secret", n, "flux-system")]
    assert all(k["spec"]["suspend"] is True for k in env.kind.list(*KS))
    kind_deletes = [c for c in fake_bins.calls("kind") if c["argv"][:1] == ["delete"]]
    assert [(c["argv"], c["clusters_left"]) for c in kind_deletes] == [
        (["delete", "cluster", "--name", "mgmt", "--kubeconfig", str(env.kind.kubeconfig_path)], [MGMT])
    ]


def _automated_snapshots(endpoint, instances):
    found = set()
    for region in ("eu-north-1", "eu-west-1"):
        rds = clients(endpoint, region)("rds")
        for snap in rds.describe_db_snapshots(SnapshotType="automated")["DBSnapshots"]:
            if snap["DBInstanceIdentifier"] in instances:
                found.add((region, snap["DBSnapshotArn"]))
    return found


def test_the_sweep_removes_the_iam_policy_ack_created_for_the_reader_user(run_module, moto, monkeypatch):
    from ansible_collections.krops.platform.plugins.module_utils import aws_delete
    from ansible_collections.krops.platform.plugins.modules import aws_orphan_sweep

    monkeypatch.setattr(
        aws_delete, "EXPECTED_SCALE", 0.0
    )  # moto deletes at once (as tests/integration/test_aws_sweep.py)

    ack = Ack(moto)
    for obj in aws_world.tree_objects(["mgmt/aws/aws-global-iam"], RUN):
        ack.apply(obj)
    created = ack.created()
    assert created == {("global", "iam-user", "krops-reader"), ("global", "iam-policy", "krops-reader-assume")}
    result = run_module(
        aws_orphan_sweep,
        {"config_file": str(REPO / "bootstrap.toml"), "environment": "aws", "endpoint_url": moto, "wait_timeout": 5},
    )
    # the user goes (no other environment names it); the policy the environment's tree declared either goes
    # too, or the run fails and names it (issue 9: rc=0 means nothing owned is left)
    left = created & inventory(moto)
    assert ("global", "iam-user", "krops-reader") not in left
    assert not left or (result.failed and "krops-reader-assume" in result.get("msg", "")), (sorted(left), result)


def test_capa_deletes_a_cluster_only_while_it_runs_and_ack_deletes_with_its_object(aws_env):
    """No CAPA, no deletion: the Cluster keeps its finalizer and its AWS resources; with CAPA back both go.
    Deleting an ACK object deletes its AWS resource, then the object."""
    env = aws_env
    west = env.capa.records[("default", "eu-west-1-workload")].items()
    env.kind.remove(PROVIDER_API, "InfrastructureProvider", "aws", "capa-system")
    env.kind.remove(*CLUSTER, "eu-west-1-workload", "default")
    env.world.settle()
    stuck = env.kind.get(*CLUSTER, "eu-west-1-workload", "default")
    assert stuck["metadata"]["deletionTimestamp"] and stuck["metadata"]["finalizers"] == ["cluster.cluster.x-k8s.io"]
    assert west <= inventory(env.moto)
    env.kind.create(
        {
            "apiVersion": PROVIDER_API,
            "kind": "InfrastructureProvider",
            "metadata": {"name": "aws", "namespace": "capa-system"},
            "spec": {"version": "v2.11.1"},
        }
    )
    env.world.settle()
    assert not env.kind.exists(*CLUSTER, "eu-west-1-workload", "default")
    assert not west & inventory(env.moto), sorted(west & inventory(env.moto))
    assert not env.kind.exists(
        "infrastructure.cluster.x-k8s.io/v1beta2", "AWSManagedMachinePool", "eu-west-1-workload-x86", "default"
    )
    # ACK: the Bucket object goes only after its bucket
    bucket = ("bucket", "s3-bucket", f"krops-{ACCOUNT}-eu-west-1-workload-data")
    assert bucket in inventory(env.moto)
    env.kind.remove("s3.services.k8s.aws/v1alpha1", "Bucket", "krops-eu-west-1-workload-data", "default")
    env.world.settle()
    assert bucket not in inventory(env.moto)
    assert not env.kind.exists("s3.services.k8s.aws/v1alpha1", "Bucket", "krops-eu-west-1-workload-data", "default")


def test_the_emulated_api_server_merges_a_secrets_string_data_into_data_as_a_real_one_does():
    """stringData is write-only (core/v1 Secret): merged into data on write, overwriting, never read back. The
    emulator kept it, so the Flux-applied capa-system/aws-credentials had no data and the pivot found no
    credentials to copy ("aws: no credentials for Secret capa-system/aws-credentials")."""
    import base64

    from tests.substrate.strict_api import StrictKubeEmulator

    api = StrictKubeEmulator("secrets")
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "capa-system"}})
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "aws-credentials", "namespace": "capa-system"},
        "type": "Opaque",
        "data": {"OTHER": base64.b64encode(b"kept").decode(), "AWS_B64ENCODED_CREDENTIALS": "b2xk"},
        "stringData": {"AWS_B64ENCODED_CREDENTIALS": "W2RlZmF1bHRdCg=="},
    }
    ssa_apply(api, secret, "kustomize-controller")
    stored = api.get("v1", "Secret", "aws-credentials", "capa-system")
    assert "stringData" not in stored
    assert {k: base64.b64decode(v).decode() for k, v in stored["data"].items()} == {
        "OTHER": "kept",
        "AWS_B64ENCODED_CREDENTIALS": "W2RlZmF1bHRdCg==",
    }
    res = api.resource_for("v1", "Secret")
    api.patch(res, "capa-system", "aws-credentials", "merge", {"stringData": {"AWS_B64ENCODED_CREDENTIALS": "new"}})
    stored = api.get("v1", "Secret", "aws-credentials", "capa-system")
    assert "stringData" not in stored and stored["data"]["AWS_B64ENCODED_CREDENTIALS"] == "bmV3"
    assert stored["data"]["OTHER"] == base64.b64encode(b"kept").decode()


def test_deleting_the_kind_cluster_removes_the_kubeconfig_kind_leaves_empty(tmp_path, run_module):
    """kind delete cluster takes its entries out of --kubeconfig and writes the rest back, an empty file included
    (kind pkg/cluster/internal/kubeconfig/internal/kubeconfig/remove.go RemoveKIND): the aws lifecycle left an
    empty ~/.kube/krops-kind.yaml behind. kind_cluster removes the file when nothing else is left in it; a file
    holding other contexts keeps them."""
    import subprocess

    import yaml
    from ansible_collections.krops.platform.plugins.modules import kind_cluster

    from tests.substrate.lifecycle import emulated_world

    with emulated_world(tmp_path / "host") as host:
        env = dict(host.env, KROPS_STANDIN_BIN=str(host.bin))
        own, shared = host.home / ".kube" / "krops-kind.yaml", host.home / ".kube" / "config"
        shared.parent.mkdir(parents=True, exist_ok=True)
        shared.write_text(yaml.safe_dump(USER_KUBECONFIG))
        for name, path in (("mgmt", own), ("other", shared)):
            argv = [str(host.bin / "kind"), "create", "cluster", "--name", name, "--kubeconfig", str(path)]
            subprocess.run(argv, env=env, check=True, capture_output=True)
        args = {"state": "absent", "kind_binary": str(host.bin / "kind"), "engine_binary": str(host.bin / "docker")}
        planned = run_module(kind_cluster, dict(args, name="mgmt", kubeconfig_path=str(own)), check_mode=True)
        assert planned["deleted"] and own.exists()
        result = run_module(kind_cluster, dict(args, name="mgmt", kubeconfig_path=str(own)))
        assert result["deleted"] and not own.exists()
        result = run_module(kind_cluster, dict(args, name="other", kubeconfig_path=str(shared)))
        assert result["deleted"] and yaml.safe_load(shared.read_text())["contexts"] == USER_KUBECONFIG["contexts"]
        assert host.kind_clusters == {}


WRITES = ("POST", "PUT", "PATCH", "DELETE")


def _writes(world):
    """The API servers of the world, and (cluster, method, path) of every write request they were sent (a
    server-side dry run is not one). The emulated controllers write in-process, so the requests are what the
    playbook changed: a running world may still converge while check mode runs, which is no change of the
    playbook's. A cluster made or deleted (kind goes through the control server, not an API) changes the names."""
    servers = list(world.clusters.values())
    writes = [(api.name, method, path) for api in servers for method, path in list(api.requests) if method in WRITES]
    return sorted(api.name for api in servers), writes


USER_KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "team", "cluster": {"server": "https://team.example:6443"}}],
    "users": [{"name": "team", "user": {"token": "t"}}],
    "contexts": [{"name": "team", "context": {"cluster": "team", "user": "team"}}],
    "current-context": "team",
}


def assert_one_database_network_per_workload(endpoint):
    """One database VPC per workload region, one subnet per zone in it, one security group, and the DB subnet
    group and instance in that VPC (what duplicates after the pivot would break)."""
    for region in ("eu-north-1", "eu-west-1"):
        ec2, rds = clients(endpoint, region)("ec2"), clients(endpoint, region)("rds")
        name = f"krops-{region}-workload-db"
        vpcs = ec2.describe_vpcs(Filters=[{"Name": "cidr", "Values": ["10.120.0.0/16", "10.130.0.0/16"]}])["Vpcs"]
        assert len(vpcs) == 1, (region, [v["VpcId"] for v in vpcs])
        vpc = vpcs[0]["VpcId"]
        subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Subnets"]
        assert sorted(s["AvailabilityZone"] for s in subnets) == [f"{region}a", f"{region}b"], subnets
        groups = ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["SecurityGroups"]
        assert sorted(g["GroupName"] for g in groups) == ["default", name]
        group = rds.describe_db_subnet_groups(DBSubnetGroupName=name)["DBSubnetGroups"][0]
        assert group["VpcId"] == vpc and {s["SubnetIdentifier"] for s in group["Subnets"]} == {
            s["SubnetId"] for s in subnets
        }
        instance = rds.describe_db_instances(DBInstanceIdentifier=name)["DBInstances"][0]
        assert instance["DBSubnetGroup"]["DBSubnetGroupName"] == name
        assert [g["VpcSecurityGroupId"] for g in instance["VpcSecurityGroups"]] == [
            g["GroupId"] for g in groups if g["GroupName"] == name
        ]


@contextlib.contextmanager
def aws_lifecycle(tmp_path, moto, environment):
    """The emulated host (tests/substrate/lifecycle.py) for ``playbooks/<environment>.yml`` with moto as AWS and
    CAPA plugged in: the tree checked out from a GitHub double with the test account's id, the test age key,
    the user's own kubeconfig in ~/.kube/config. Yields (host, capa, run); ``run(*args)`` runs the playbook with
    ARGS and asserts rc 0. The phases' and roles' seconds are printed as "<environment> lifecycle: ..." at the end."""
    from tests.integration.test_e2e_azure import GitHubDouble
    from tests.substrate.lifecycle import emulated_world, role_times

    repo, head = gitops_checkout(
        tmp_path,
        (
            f"mgmt/{environment}/aws-account.yaml",
            'AWS_ACCOUNT_ID: "000000000000"',
            f'AWS_ACCOUNT_ID: "{ACCOUNT}"',
        ),
    )
    github = GitHubDouble("krops/krops", "main", head, "ghp_test")
    times = {}
    # a short host folder: ansible's local RPC server puts unix sockets (at most 108 bytes) under it
    root = Path(tempfile.mkdtemp(prefix=f"krops-{environment}-", dir="/tmp"))
    try:
        with emulated_world(
            root,
            environment=environment,
            git_checkouts={"https://github.com/krops/krops": str(repo)},
            env={"GITHUB_TOKEN": "ghp_test", "AWS_ENDPOINT_URL": moto},
        ) as host:
            capa = Capa(moto)
            host.capi.plug_in("AWSManagedCluster", capa)
            key = host.home / ".config" / "krops" / "age.agekey"
            key.parent.mkdir(parents=True)
            shutil.copy(REPO / "tests" / "integration" / "fixtures" / "aws-sops-test.agekey", key)
            key.chmod(0o600)
            kube_dir = host.home / ".kube"
            kube_dir.mkdir(parents=True, exist_ok=True)
            (kube_dir / "config").write_text(yaml.safe_dump(USER_KUBECONFIG))  # KUBECONFIG of the host
            # moto serves only the default Elastic IP quota (5, no increase), and the tree needs 6 in eu-north-1:
            # a real account needs the increase preflight names
            extra = json.dumps({"preflight_github_api_url": github.url, "preflight_check_aws_quota": False})

            def run(*args):
                started = time.monotonic()
                # moto deletes at once: the sweep polls from the start (docs/aws-orphan-sweep.md)
                rc, out, err = host.playbook(
                    f"playbooks/{environment}.yml",
                    "-e",
                    extra,
                    *args,
                    inventory=f"inventories/{environment}",
                    env={"KROPS_AWS_SWEEP_TIME_SCALE": "0"},
                )
                phase = " ".join(args[1:])
                times[phase] = time.monotonic() - started
                times.update({f"{phase}: {role}": t for role, t in role_times(out).items() if role != phase})
                assert rc == 0, (failed(out), err[-3000:])
                return out

            yield host, capa, run
        assert host.world.errors == []
    finally:
        github.stop()
        shutil.rmtree(root, ignore_errors=True)
        print(f"{environment} lifecycle: " + ", ".join(f"{k} {v:.1f}s" for k, v in times.items()))


def test_aws_playbook_bootstrap_pivot_and_teardown_on_the_emulated_host(tmp_path, moto, monkeypatch):
    """ansible-playbook -i inventories/aws playbooks/aws.yml --tags bootstrap, --tags pivot, then --tags teardown
    --check and --tags teardown, on the emulated host (tests/substrate/lifecycle.py: kind, Flux with SOPS
    decryption, CAPI, clusterctl move) with aws_world's CAPA and ACK over moto.

    The check run changes nothing in moto nor on any cluster; after the real teardown every AWS resource the run
    created is gone, the decoys created beforehand survive, and of the kubeconfigs only the user's own is left."""
    aws_world.register_ack_charts(monkeypatch)
    decoys = seed_decoys(moto, None)
    with aws_lifecycle(tmp_path, moto, "aws") as (host, capa, run):
        ack = Ack(moto)
        # ACK acts only while its controllers run, and creates again what vanishes behind its back (resync; every
        # 2 s, well inside the sweep: without the quiesce step this test finds 12 recreated)
        AckController(host.world, ack, needs_deployment=True, resync=2.0)
        kube_dir = host.home / ".kube"

        run("--tags", "bootstrap")
        kind = host.cluster("mgmt")
        chain = sorted(k["metadata"]["name"] for k in kind.list(*KS, "flux-system"))
        assert chain and ready_kustomizations(kind) == chain

        run("--tags", "pivot")
        assert host.kind_clusters == {} and host.leftovers()["kind_clusters"] == []
        mgmt = host.cluster(MGMT)
        assert sorted(c["metadata"]["name"] for c in mgmt.list(*CLUSTER)) == sorted((MGMT,) + WORKLOADS)
        assert ready_kustomizations(mgmt) == chain
        # kind's kubeconfig went with kind; the management cluster's is exported
        assert sorted(p.name for p in kube_dir.iterdir()) == ["config", "krops-mgmt.yaml"]
        # what runs inside a workload cluster leaves in AWS (a Service's load balancer, a volume)
        leftovers = capa.workload_leftovers(capa.records[("default", WORKLOADS[0])])
        created = capa.created() | ack.created() | leftovers
        assert ("bucket", "s3-bucket", f"krops-{ACCOUNT}-eu-north-1-workload-data") in created
        assert {r for r, t, i in capa.created() if t == "eks-cluster"} == {"eu-north-1", "eu-west-1"}
        before = inventory(moto)
        assert created <= before and decoys <= before and not created & decoys
        # the management cluster's ACK adopted what kind's created (adoption-fields from the pivot): nothing twice
        assert_one_database_network_per_workload(moto)
        made = [(kind, name) for kind, name, _id in ack.creations]
        assert made and len(made) == len(set(made)), sorted(made)

        writes = _writes(host.world)
        run("--tags", "teardown", "--check")
        assert inventory(moto) == before
        assert _writes(host.world) == writes

        run("--tags", "teardown")
        assert ack.recreated == []  # the controllers were stopped before the sweep
        after = inventory(moto)
        assert not created & after, sorted(created & after)
        assert decoys <= after, sorted(decoys - after)
        assert after == before - created, sorted(after - (before - created))
        assert host.kind_clusters == {}
        assert sorted(p.name for p in kube_dir.iterdir()) == ["config"]
        assert yaml.safe_load((kube_dir / "config").read_text()) == USER_KUBECONFIG


def _db_vpcs(endpoint, region="eu-west-1"):
    ec2 = clients(endpoint, region)("ec2")
    return [v["VpcId"] for v in ec2.describe_vpcs(Filters=[{"Name": "cidr", "Values": ["10.130.0.0/16"]}])["Vpcs"]]


def _ack_cluster(strict_cluster, name, world, variables):
    api = world.add_cluster(strict_cluster(name, bundles=()))
    aws_world.install_crds(api, ACK_KINDS)
    for obj in aws_world.tree_objects(["mgmt/aws/workload-resources/eu-west-1-workload.yaml"], variables):
        ssa_apply(api, obj, "kustomize-controller")
    world.settle()
    return api


def test_after_the_pivot_ack_adopts_the_vpc_subnets_and_group_only_with_their_adoption_fields(strict_cluster, moto):
    """kind's ACK creates the database network; a second cluster's ACK (the management cluster after the
    pivot) given the same objects creates a second VPC, subnets and group unless the adoption fields carry
    kind's ids, which the pivot writes into krops-ack-adoption (roles/pivot/tasks/handoff.yml)."""
    world, ack = World(), Ack(moto)
    AckController(world, ack)
    kind = _ack_cluster(strict_cluster, "kind-ack", world, RUN)
    assert len(_db_vpcs(moto)) == 1
    adoption = {}
    for obj_kind, field in (("VPC", "vpcID"), ("Subnet", "subnetID"), ("SecurityGroup", "id")):
        for obj in kind.list("ec2.services.k8s.aws/v1alpha1", obj_kind):
            var = "KROPS_ADOPT_{}_{}".format(obj_kind, obj["metadata"]["name"]).upper().replace("-", "_")
            adoption[var] = '"{}":"{}"'.format(field, obj["status"][field])
    assert len(adoption) == 4  # one VPC, two subnets, one group
    _ack_cluster(strict_cluster, "mgmt-adopting", world, dict(RUN, **adoption))
    assert len(_db_vpcs(moto)) == 1
    made = [(k, n) for k, n, _i in ack.creations]
    # bucket, VPC, two subnets, group, DB subnet group, DB instance, reader role: each created once
    assert len(made) == len(set(made)) == 8, made
    _ack_cluster(strict_cluster, "mgmt-without", world, RUN)
    assert len(_db_vpcs(moto)) == 2  # the defect the adoption fields prevent


def test_a_running_ack_creates_again_what_vanishes_and_a_stopped_one_does_not(strict_cluster, moto):
    world, ack = World(), Ack(moto)
    api = world.add_cluster(strict_cluster("ack-resync", bundles=()))
    AckController(world, ack, needs_deployment=True, resync=0)
    aws_world.install_crds(api, ACK_KINDS)
    for obj in aws_world.tree_objects(["mgmt/aws/workload-resources/eu-west-1-workload.yaml"], RUN):
        ssa_apply(api, obj, "kustomize-controller")
    world.settle()
    assert ack.creations == []  # no controller runs: nothing happens
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ack-system"}})
    from tests.substrate.flux_world import FluxController

    for service in ("s3", "rds", "iam", "ec2"):  # the charts' controllers start (as helm-controller runs them)
        FluxController._run_workload(api, "ack-system", f"ack-{service}", ("controller", "ack"), 1)
    world.settle()
    rds = clients(moto, "eu-west-1")("rds")
    db = "krops-eu-west-1-workload-db"
    assert [i["DBInstanceIdentifier"] for i in rds.describe_db_instances()["DBInstances"]] == [db]
    rds.delete_db_instance(DBInstanceIdentifier=db, SkipFinalSnapshot=True)
    world.settle()
    assert ack.recreated == [("DBInstance", db)]  # the sweep would race this
    res = api.resource_for("apps/v1", "Deployment")
    api.patch(res, "ack-system", "ack-rds", "merge", {"spec": {"replicas": 0}}, None, "krops")
    rds.delete_db_instance(DBInstanceIdentifier=db, SkipFinalSnapshot=True)
    world.settle()
    assert ack.recreated == [("DBInstance", db)] and rds.describe_db_instances()["DBInstances"] == []
