# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The aws-crossplane lifecycle on the emulated host (issue 27, item 6): bootstrap, pivot and teardown of
``playbooks/aws-crossplane.yml`` as a user runs them, with moto as AWS.

The emulated host is tests/substrate/lifecycle.py's (kind, Flux with SOPS, CAPI, clusterctl move), with
aws_world.Capa over moto for the EKS clusters, and Crossplane from tests/substrate/crossplane_world.py:

- the Crossplane chart's install (its CRDs, the Deployment ``crossplane``) by the emulated helm-controller;
- the package manager (``PackageManager``): a Provider becomes Installed and Healthy, and its CRDs, dependency
  and runtime appear, only from a package the emulated registry serves (the pinned v2.6.0 family);
- the provider-aws family (``CrossplaneProviders``) reconciling the managed resources against moto, only where
  its ServiceAccount authenticates through IRSA (``Irsa``): on the management EKS cluster, once the role
  ``krops-crossplane`` the pivot makes trusts that cluster's OIDC provider. On kind nothing authenticates.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.integration.test_e2e_aws import _writes, aws_lifecycle, seed_decoys
from tests.substrate import aws_world
from tests.substrate.aws_world import ACCOUNT, clients, inventory
from tests.substrate.bootstrapped import CLUSTER, KS
from tests.substrate.crossplane_world import (
    EXTERNAL_NAME,
    PKG,
    CrossplaneProviders,
    Irsa,
    PackageManager,
    register_crossplane_chart,
)
from tests.substrate.gitops import ready_kustomizations

pytestmark = pytest.mark.slow

MGMT = "eu-north-1-management"
WORKLOADS = ("eu-north-1-workload", "eu-west-1-workload")
ROLE = "krops-crossplane"
PROVIDERS = ("provider-aws-s3", "provider-aws-rds", "provider-aws-iam", "provider-aws-ec2")
XP_KINDS = (
    ("ec2.aws.m.upbound.io/v1beta1", "VPC"),
    ("ec2.aws.m.upbound.io/v1beta1", "Subnet"),
    ("ec2.aws.m.upbound.io/v1beta1", "SecurityGroup"),
    ("rds.aws.m.upbound.io/v1beta1", "Instance"),
    ("s3.aws.m.upbound.io/v1beta1", "Bucket"),
    ("iam.aws.m.upbound.io/v1beta1", "Role"),
    ("iam.aws.m.upbound.io/v1beta1", "User"),
)


def _decoy_roles(endpoint):
    """IAM roles that look like the providers' role and are not krops' (no tag, or another environment's)."""
    iam = clients(endpoint, "eu-north-1")("iam")
    trust = json.dumps({"Version": "2012-10-17", "Statement": []})
    decoys = set()
    for name, tags in (("krops-crossplane-2", {"krops.io/environment": "aws"}), ("krops-crossplane-old", {})):
        iam.create_role(RoleName=name, AssumeRolePolicyDocument=trust, Tags=aws_world._tag_list(tags))
        decoys.add(("global", "iam-role", name))
    return decoys


def _conditions(obj):
    return {c["type"]: (c["status"], c.get("reason")) for c in (obj.get("status") or {}).get("conditions") or []}


def _managed(api):
    return {(kind, o["metadata"]["name"]): o for version, kind in XP_KINDS for o in api.list(version, kind)}


def _wait(predicate, timeout=120):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def assert_one_of_each(endpoint):
    """One database VPC per workload region with its two subnets and one security group, one DB subnet group and
    instance in it, one bucket per workload cluster: what a second set of managed resources would duplicate."""
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
        [instance] = rds.describe_db_instances(DBInstanceIdentifier=name)["DBInstances"]
        assert instance["DBSubnetGroup"]["DBSubnetGroupName"] == name
        assert [i["DBInstanceIdentifier"] for i in rds.describe_db_instances()["DBInstances"]] == [name]
    buckets = [b["Name"] for b in clients(endpoint, "eu-north-1")("s3").list_buckets()["Buckets"]]
    for cluster in WORKLOADS:
        assert buckets.count(f"krops-{ACCOUNT}-{cluster}-data") == 1


def test_aws_crossplane_playbook_bootstrap_pivot_and_teardown_on_the_emulated_host(tmp_path, moto, monkeypatch):
    """ansible-playbook -i inventories/aws-crossplane playbooks/aws-crossplane.yml --tags bootstrap, --tags pivot,
    --tags teardown --check and --tags teardown on the emulated host, Crossplane installed by its chart and package
    manager, the providers authenticating through IRSA.

    Bootstrap: every Kustomization is Ready on kind, the four Providers Installed and Healthy from the pinned
    packages; the managed resources wait (no AWS identity on kind) and nothing is made in AWS. Pivot: the
    Crossplane adoption step runs inside the run (its ConfigMap on the management cluster), the role
    krops-crossplane is made trusting the management cluster's OIDC provider, and the management cluster's
    providers make each cloud resource once. Teardown: the check run changes nothing; the real one leaves in moto
    exactly what was there before the bootstrap (the decoys, the lookalike roles among them)."""
    register_crossplane_chart(monkeypatch)
    decoys = seed_decoys(moto, None) | _decoy_roles(moto)
    initial = inventory(moto)
    with aws_lifecycle(tmp_path, moto, "aws-crossplane") as (host, capa, run):
        manager = PackageManager(host.world)
        irsa = Irsa(moto)
        issuers = {}

        def issuer_of(api):
            """The OIDC issuer of an EKS cluster's API server (None for kind, which is no EKS cluster)."""
            if api.url not in issuers:
                name = next((n for n, a in list(host.capd.items()) if a is api), None)
                record = capa.records.get(("default", name)) if name else None
                if record is None:
                    return None
                eks = clients(moto, record.region)("eks")
                issuers[api.url] = eks.describe_cluster(name=record.eks)["cluster"]["identity"]["oidc"]["issuer"]
            return issuers[api.url]

        irsa.issuer_of = issuer_of
        providers = CrossplaneProviders(host.world, moto, needs_deployment=True, identity=irsa)
        kube_dir = host.home / ".kube"

        run("--tags", "bootstrap")
        kind = host.cluster("mgmt")
        chain = sorted(k["metadata"]["name"] for k in kind.list(*KS, "flux-system"))
        assert {"crossplane", "crossplane-providers", "crossplane-config", "crossplane-resources"} <= set(chain)
        assert ready_kustomizations(kind) == chain
        for name in PROVIDERS:
            provider = kind.get(PKG, "Provider", name)
            assert _conditions(provider) == {
                "Installed": ("True", "ActivePackageRevision"),
                "Healthy": ("True", "HealthyPackageRevision"),
            }, provider.get("status")
        assert kind.exists(PKG, "Provider", "upbound-provider-family-aws")  # the family, as their dependency
        # the managed resources wait on kind: IRSA gives its providers no identity, so nothing is made in AWS
        on_kind = _managed(kind)
        assert len(on_kind) == 15 and providers.creations == []
        vpc = on_kind[("VPC", "krops-eu-west-1-workload-db")]
        assert _conditions(vpc)["Synced"] == ("False", "ReconcileError")
        assert "no web identity token" in vpc["status"]["conditions"][0]["message"]

        run("--tags", "pivot")
        assert host.kind_clusters == {}
        mgmt = host.cluster(MGMT)
        assert sorted(c["metadata"]["name"] for c in mgmt.list(*CLUSTER)) == sorted((MGMT,) + WORKLOADS)
        assert ready_kustomizations(mgmt) == chain
        # the pivot's Crossplane adoption step ran inside the run: its ConfigMap is on the management cluster
        # (empty: kind's providers made nothing, so there is no external name to carry)
        assert mgmt.get("v1", "ConfigMap", "krops-crossplane-adoption", "flux-system").get("data") in (None, {})
        iam = clients(moto, "eu-north-1")("iam")
        role = iam.get_role(RoleName=ROLE)["Role"]
        tags = {t["Key"]: t["Value"] for t in iam.list_role_tags(RoleName=ROLE)["Tags"]}
        assert tags["krops.io/environment"] == "aws-crossplane"
        [statement] = role["AssumeRolePolicyDocument"]["Statement"]
        assert statement["Principal"]["Federated"].startswith(f"arn:aws:iam::{ACCOUNT}:oidc-provider/oidc.eks.")
        # the management cluster's providers authenticate and make every managed resource, each once
        _wait(lambda: len(providers.creations) >= 31, timeout=180)
        assert_one_of_each(moto)
        made = [(k, n) for k, n, _i in providers.creations]
        assert len(made) == len(set(made)) == 31, sorted(made)
        for obj in _managed(mgmt).values():
            assert _conditions(obj)["Ready"][0] == "True" and obj["metadata"]["annotations"][EXTERNAL_NAME]
        assert manager.refused == []
        leftovers = capa.workload_leftovers(capa.records[("default", WORKLOADS[0])])
        before = inventory(moto)
        assert decoys <= before and leftovers <= before
        assert ("global", "iam-role", ROLE) in before

        writes = _writes(host.world)
        run("--tags", "teardown", "--check")
        assert inventory(moto) == before
        assert _writes(host.world) == writes

        run("--tags", "teardown")
        after = inventory(moto)
        assert after == initial, (sorted(after - initial), sorted(initial - after))
        assert decoys <= after and ("global", "iam-role", ROLE) not in after
        assert providers.orphaned == [] and providers.refused == []
        assert host.kind_clusters == {}
        assert sorted(p.name for p in kube_dir.iterdir()) == ["config"]
