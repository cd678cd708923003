"""The Crossplane resource plane (aws-crossplane): the emulated providers on moto, the teardown's ordered deletion
with decoys, and the quiesce of Crossplane and its providers.

The cluster is a StrictKubeEmulator serving the vendored CRDs of provider-upjet-aws v2.6.0 (schemas and CEL);
tests/substrate/crossplane_world.CrossplaneProviders reconciles the managed resources against moto.
"""

from __future__ import annotations

import json

import pytest

from ansible_collections.krops.platform.plugins.modules import crossplane_resources_delete, flux_release_quiesce
from tests.substrate import aws_world
from tests.substrate.aws_world import ACCOUNT, clients
from tests.substrate.crossplane_world import CRD_KINDS, EXTERNAL_NAME, FINALIZER, CrossplaneProviders
from tests.substrate.flux_world import World, ssa_apply

TREE = ["mgmt/aws-crossplane/crossplane-resources", "mgmt/aws-crossplane/crossplane-global-iam"]
RUN = {
    "AWS_ACCOUNT_ID": ACCOUNT,
    "KROPS_RUN_ID": "xp-1",
    "KROPS_REVISION": "main@sha1:" + "b" * 40,
    "KROPS_EXPIRES_AT": "2026-12-02T00:00:00Z",
    "KROPS_RUN_KIND": "ci",
}
XP = "aws.m.upbound.io/v1beta1"
DB = "krops-eu-west-1-workload-db"
BUCKET = f"krops-{ACCOUNT}-eu-west-1-workload-data"


def _world(strict_cluster, moto, name="xp-mgmt", objects=None, needs_deployment=False):
    world = World()
    api = world.add_cluster(strict_cluster(name, bundles=()))
    providers = CrossplaneProviders(world, moto, needs_deployment=needs_deployment)
    aws_world.install_crds(api, CRD_KINDS)
    for obj in aws_world.tree_objects(TREE, RUN) if objects is None else objects:
        ssa_apply(api, obj, "kustomize-controller")
    world.settle()
    return world, api, providers


def _mrs(api):
    found = {}
    for group, kind in CRD_KINDS:
        if group == "aws.m.upbound.io":
            continue
        for obj in api.list(f"{group}/v1beta1", kind):
            found[(kind, obj["metadata"]["name"])] = obj
    return found


def _vpcs(moto, region="eu-west-1", cidr="10.130.0.0/16"):
    ec2 = clients(moto, region)("ec2")
    return [v["VpcId"] for v in ec2.describe_vpcs(Filters=[{"Name": "cidr", "Values": [cidr]}])["Vpcs"]]


def _decoy_vpc():
    """A VPC of the same kind and a lookalike name, in the same namespace, without krops' label: not ours."""
    return {
        "apiVersion": "ec2.aws.m.upbound.io/v1beta1",
        "kind": "VPC",
        "metadata": {"name": DB + "-2", "namespace": "default", "labels": {"krops.io/environment": "aws"}},
        "spec": {"forProvider": {"region": "eu-west-1", "cidrBlock": "10.140.0.0/16"}},
    }


def test_the_providers_build_in_moto_what_the_tree_declares(strict_cluster, moto):
    _world_, api, providers = _world(strict_cluster, moto)
    mrs = _mrs(api)
    assert len(mrs) == 31  # 14 per workload cluster, the policy, user and attachment of the reader
    for obj in mrs.values():
        conditions = {c["type"]: c["status"] for c in obj["status"]["conditions"]}
        assert conditions == {"Synced": "True", "Ready": "True"}, (obj["kind"], obj["metadata"]["name"], obj["status"])
        assert FINALIZER in obj["metadata"]["finalizers"]
        assert obj["metadata"]["annotations"][EXTERNAL_NAME]
    # the ids AWS assigned are written into the external names (IdentifierFromProvider)
    vpc = mrs[("VPC", DB)]
    assert _vpcs(moto) == [vpc["metadata"]["annotations"][EXTERNAL_NAME]]
    ec2 = clients(moto, "eu-west-1")("ec2")
    tags = {t["Key"]: t["Value"] for t in ec2.describe_vpcs(VpcIds=_vpcs(moto))["Vpcs"][0]["Tags"]}
    assert tags["krops.io/environment"] == "aws-crossplane" and tags["krops.io/run-id"] == "xp-1"
    rds = clients(moto, "eu-west-1")("rds")
    (instance,) = [i for i in rds.describe_db_instances()["DBInstances"] if i["DBInstanceIdentifier"] == DB]
    assert instance["DBSubnetGroup"]["DBSubnetGroupName"] == DB
    assert [g["VpcSecurityGroupId"] for g in instance["VpcSecurityGroups"]] == [
        mrs[("SecurityGroup", DB)]["metadata"]["annotations"][EXTERNAL_NAME]
    ]
    s3 = clients(moto, "eu-west-1")("s3")
    assert s3.get_bucket_versioning(Bucket=BUCKET)["Status"] == "Enabled"
    assert s3.get_public_access_block(Bucket=BUCKET)["PublicAccessBlockConfiguration"]["BlockPublicPolicy"] is True
    iam = clients(moto, "eu-north-1")("iam")
    attached = iam.list_attached_user_policies(UserName="krops-crossplane-reader")["AttachedPolicies"]
    assert [p["PolicyName"] for p in attached] == ["krops-crossplane-reader-assume"]
    assert iam.get_role(RoleName="krops-eu-west-1-workload-reader")["Role"]["MaxSessionDuration"] == 3600
    made = [(k, n) for k, n, _id in providers.creations]
    assert len(made) == len(set(made)) == 31
    assert providers.skipped == [
        "attach arn:aws:iam::aws:policy/ReadOnlyAccess to role krops-eu-north-1-workload-reader: moto serves no AWS "
        "managed policies",
        "attach arn:aws:iam::aws:policy/ReadOnlyAccess to role krops-eu-west-1-workload-reader: moto serves no AWS "
        "managed policies",
    ]


def test_a_second_cluster_creates_a_second_vpc_unless_the_external_names_come_along(strict_cluster, moto):
    """The pivot's gap, shown: the management cluster's providers given the tree without kind's external names
    create a second VPC; with them they take kind's over (what krops-crossplane-adoption must carry)."""
    world, kind, providers = _world(strict_cluster, moto, "xp-kind")
    names = {}
    for o in _mrs(kind).values():
        if o["kind"] in ("VPC", "Subnet", "SecurityGroup", "SecurityGroupIngressRule", "Instance"):
            var = "KROPS_XP_{}_{}".format(o["kind"].upper(), o["metadata"]["name"].upper().replace("-", "_"))
            names.update({var: o["metadata"]["annotations"][EXTERNAL_NAME], var + "_KEY": EXTERNAL_NAME})
    assert len(names) == 24  # per workload cluster: VPC, two subnets, security group and its rule, DB instance
    adopting = world.add_cluster(strict_cluster("xp-mgmt-adopting", bundles=()))
    aws_world.install_crds(adopting, CRD_KINDS)
    for obj in aws_world.tree_objects(TREE, dict(RUN, **names)):
        ssa_apply(adopting, obj, "kustomize-controller")
    world.settle()
    assert len(_vpcs(moto)) == 1
    vpcs = [(k, n) for k, n, _i in providers.creations if k == "VPC"]
    assert len(vpcs) == 2  # each VPC once, on kind
    without = world.add_cluster(strict_cluster("xp-mgmt-without", bundles=()))
    aws_world.install_crds(without, CRD_KINDS)
    for obj in aws_world.tree_objects(TREE, RUN):
        ssa_apply(without, obj, "kustomize-controller")
    world.settle()
    assert len(_vpcs(moto)) == 2  # the duplicate the external names prevent


def test_removing_the_db_instance_from_git_leaves_the_database(strict_cluster, moto):
    """managementPolicies without Delete: a Flux prune (or a mistaken change) deletes the object, never the data."""
    _world_, api, providers = _world(strict_cluster, moto)
    api.delete(api.resource_for("rds.aws.m.upbound.io/v1beta1", "Instance"), "default", DB)
    _world_.settle()
    assert not api.exists("rds.aws.m.upbound.io/v1beta1", "Instance", DB, "default")
    rds = clients(moto, "eu-west-1")("rds")
    assert DB in [i["DBInstanceIdentifier"] for i in rds.describe_db_instances()["DBInstances"]]
    assert providers.orphaned == [("Instance", DB)]


def _args(api, **extra):
    return dict({"kubeconfig": str(api.kubeconfig_path), "context": api.name, "environment": "aws-crossplane"}, **extra)


def test_teardown_deletes_in_dependency_order_with_crossplane_running_and_keeps_the_decoys(
    strict_cluster, moto, run_module
):
    objects = aws_world.tree_objects(TREE, RUN) + [_decoy_vpc()]
    world, api, providers = _world(strict_cluster, moto, objects=objects)
    decoy_id = _mrs(api)[("VPC", DB + "-2")]["metadata"]["annotations"][EXTERNAL_NAME]
    before = set(_mrs(api))

    planned = run_module(crossplane_resources_delete, _args(api), check_mode=True)
    assert not planned.failed, planned.get("msg")
    assert planned["opted_in"] == [
        "Instance default/krops-eu-north-1-workload-db",
        "Instance default/krops-eu-west-1-workload-db",
        "Bucket default/krops-eu-north-1-workload-data",
        "Bucket default/krops-eu-west-1-workload-data",
    ]
    assert len(planned["deleted"]) == 31
    world.settle()
    assert set(_mrs(api)) == before and providers.deletions == []  # check mode: dry runs only

    world.start()
    try:
        result = run_module(crossplane_resources_delete, _args(api, wait_timeout=60))
    finally:
        world.stop()
    assert not result.failed, result.get("msg")
    assert set(_mrs(api)) == {("VPC", DB + "-2")}  # the decoy (another environment's label) stays
    assert providers.orphaned == []  # the DB instances and buckets were deleted, not left behind
    assert providers.refused == []  # in dependency order AWS never finds a dependant still there
    order = [k for k, _n in providers.deletions]
    stage = {"Instance": 1, "SecurityGroupIngressRule": 1, "SubnetGroup": 2, "Bucket": 2, "SecurityGroup": 3}
    stage.update({"Subnet": 3, "VPC": 4, "BucketVersioning": 1, "Role": 2, "RolePolicyAttachment": 1})
    ranks = [stage[k] for k in order if k in stage]
    assert ranks == sorted(ranks), order
    assert _vpcs(moto) == [] and _vpcs(moto, cidr="10.140.0.0/16") == [decoy_id]
    rds = clients(moto, "eu-west-1")("rds")
    assert rds.describe_db_instances()["DBInstances"] == []
    assert BUCKET not in [b["Name"] for b in clients(moto, "eu-west-1")("s3").list_buckets()["Buckets"]]
    again = run_module(crossplane_resources_delete, _args(api, wait_timeout=5))
    assert (again["changed"], again["plan"]) == (False, [])


def test_teardown_times_out_naming_what_a_stopped_provider_leaves(strict_cluster, moto, run_module):
    world, api, providers = _world(strict_cluster, moto)
    world.controllers.remove(providers)  # the providers stopped: nothing removes the finalizers
    result = run_module(crossplane_resources_delete, _args(api, wait_timeout=1))
    assert result.failed
    assert result["msg"].startswith(
        "timed out waiting for the Crossplane managed resources of stage 1 to be deleted on context xp-mgmt"
    )
    assert "Instance default/krops-eu-north-1-workload-db" in result["msg"]
    assert "The later stages did not run and Crossplane still runs" in result["msg"]
    assert api.exists("ec2.aws.m.upbound.io/v1beta1", "VPC", DB, "default")  # stage 4 never started


def test_a_listing_the_api_cannot_answer_changes_nothing(strict_cluster, moto, run_module):
    _world_, api, _providers = _world(strict_cluster, moto)
    api.inject_failure("GET", r"/namespaces/default/vpcs$", 500, "etcd is down", times=5)
    result = run_module(crossplane_resources_delete, _args(api))
    assert result.failed
    assert result["msg"].startswith(
        "cannot list the VPC objects ec2.aws.m.upbound.io/v1beta1 in namespace default on context xp-mgmt"
    )
    assert len(_mrs(api)) == 31


def _deployment(api, name, labels, replicas=1):
    pod = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "example.com/c:1"}]}}
    api.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": "crossplane-system"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": pod},
        }
    )


def test_quiesce_stops_crossplane_and_exactly_its_named_providers(kind_api, run_module):
    kind_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "crossplane-system"}})
    _deployment(kind_api, "provider-aws-s3-1a2b3c", {"pkg.crossplane.io/provider": "provider-aws-s3"})
    _deployment(kind_api, "provider-aws-s3x-9z", {"pkg.crossplane.io/provider": "provider-aws-s3x"})  # lookalike
    _deployment(kind_api, "metrics", {"app": "provider-aws-s3"})  # no Crossplane label
    args = {
        "kubeconfig": str(kind_api.kubeconfig_path),
        "context": "kind-mgmt",
        "namespace": "crossplane-system",
        "releases": ["crossplane"],
        "providers": ["provider-aws-s3", "provider-aws-rds"],
    }
    result = run_module(flux_release_quiesce, args)
    assert not result.failed, result.get("msg")
    assert result["scaled"] == ["provider-aws-s3-1a2b3c"]
    replicas = {o["metadata"]["name"]: o["spec"]["replicas"] for o in kind_api.list("apps/v1", "Deployment")}
    assert replicas == {"provider-aws-s3-1a2b3c": 0, "provider-aws-s3x-9z": 1, "metrics": 1}


def test_a_stopped_provider_creates_nothing(strict_cluster, moto):
    _world_, api, providers = _world(strict_cluster, moto, needs_deployment=True)
    assert providers.creations == [] and _vpcs(moto) == []
    assert all("status" not in o or o["status"].get("conditions") is None for o in _mrs(api).values())


@pytest.mark.parametrize(
    "plane,platform,message",
    [
        (
            "crossplan",
            "aws",
            "bootstrap.toml: environments.aws-crossplane.resource-plane: expected one of native, crossplane, got "
            "'crossplan'",
        ),
        (
            "crossplane",
            "azure",
            "bootstrap.toml: environments.aws-crossplane.resource-plane: expected native (krops ships a crossplane "
            "tree only for platform aws; this environment is azure), got 'crossplane'",
        ),
    ],
)
def test_the_loader_refuses_an_unknown_resource_plane(plane, platform, message):
    import tomllib

    import tomli_w

    from ansible_collections.krops.platform.plugins.module_utils import config
    from tests.substrate.fixtures import REPO

    data = tomllib.loads((REPO / "bootstrap.toml").read_text())
    env = data["environments"]["aws-crossplane"]
    env["resource-plane"] = plane
    if platform == "azure":
        env.update(kind="azure", **{"mgmt-region": "swedencentral"})
        env["teardown"].pop("aws-workloads")
        env.pop("accepted-end-of-life")
    with pytest.raises(config.ConfigKeyError) as err:
        config.loads(tomli_w.dumps(data), path="bootstrap.toml")
    assert str(err.value).startswith(message)


def test_validate_holds_the_crossplane_tree_to_the_schemas_cel_and_the_ownership_tags(tmp_path):
    from ansible_collections.krops.platform.plugins.module_utils import validate
    from tests.substrate.trees import copy_repo, edit, findings

    root = copy_repo(tmp_path, ("mgmt/aws-crossplane", "workload/aws"))
    assert findings(validate.run(path=str(root), environments=["aws-crossplane"])) == []
    res = "mgmt/aws-crossplane/crossplane-resources/eu-west-1-workload.yaml"
    edit(root, res, "      krops.io/environment: aws-crossplane\n", "      krops.io/environment: aws\n")
    edit(root, res, "    instanceClass: db.t4g.micro\n", "")
    edit(root, "mgmt/aws-crossplane/crossplane-config/clusterproviderconfig.yaml", "source: IRSA", "source: Irsa")
    found = {(f[1], f[2]): f[3] for f in findings(validate.run(path=str(root), environments=["aws-crossplane"]))}
    assert found == {
        ("Bucket/default/krops-eu-west-1-workload-data", "tags"): (
            "spec.forProvider.tags: krops.io/environment is 'aws', expected 'aws-crossplane'"
        ),
        ("Instance/default/krops-eu-west-1-workload-db", "cel"): (
            "spec: spec.forProvider.instanceClass is a required parameter (rule: !('*' in self.managementPolicies || "
            "'Create' in self.managementPolicies || 'Update' in self.managementPolicies) || "
            "has(self.forProvider.instanceClass) || (has(self.initProvider) && has(self.initProvider.instanceClass)))"
        ),
        ("ClusterProviderConfig/default", "schema"): (
            "spec.credentials.source: 'Irsa' is not one of 'None', 'Secret', 'IRSA', 'WebIdentity', 'PodIdentity', "
            "'Upbound'"
        ),
    }


@pytest.mark.playbook
def test_the_pivot_carries_the_external_names_so_the_management_cluster_makes_no_second_vpc(
    strict_cluster, kube_cluster, moto, ansible_playbook
):
    """roles/pivot/tasks/crossplane_adoption.yml on kind's managed resources, then the tree on the target with the
    ConfigMap it wrote: the target's providers take kind's VPC, subnets, group and DB instance over."""
    world, kind, providers = _world(strict_cluster, moto, "xp-kind")
    target = kube_cluster("xp-target", crds=False)
    play = {
        "hosts": "localhost",
        "gather_facts": False,
        "vars": {
            "pivot_source_kubeconfig": str(kind.kubeconfig_path),
            "pivot_source_context": "xp-kind",
            "pivot_result": {"target_kubeconfig": str(target.kubeconfig_path)},
            "pivot_target_context": "xp-target",
            "pivot_bootstrap_config": {"flux-namespace": "flux-system"},
        },
        "tasks": [
            {"ansible.builtin.import_role": {"name": "krops.platform.pivot", "tasks_from": "crossplane_adoption"}}
        ],
    }
    rc, output, stderr = ansible_playbook([play])
    assert rc == 0, (output, stderr[-2000:])
    data = target.get("v1", "ConfigMap", "krops-crossplane-adoption", "flux-system")["data"]
    vpc = kind.get("ec2.aws.m.upbound.io/v1beta1", "VPC", DB, "default")["metadata"]["annotations"][EXTERNAL_NAME]
    assert len(data) == 24 and data["KROPS_XP_VPC_KROPS_EU_WEST_1_WORKLOAD_DB"] == vpc
    assert data["KROPS_XP_VPC_KROPS_EU_WEST_1_WORKLOAD_DB_KEY"] == EXTERNAL_NAME
    assert data["KROPS_XP_INSTANCE_KROPS_EU_WEST_1_WORKLOAD_DB"].startswith("db-")
    mgmt = world.add_cluster(strict_cluster("xp-mgmt", bundles=()))
    aws_world.install_crds(mgmt, CRD_KINDS)
    for obj in aws_world.tree_objects(TREE, dict(RUN, **data)):
        ssa_apply(mgmt, obj, "kustomize-controller")
    world.settle()
    assert _vpcs(moto) == [vpc]
    assert all(c["status"] == "True" for o in _mrs(mgmt).values() for c in o["status"]["conditions"])
    # each AWS resource is created once, on kind; the attachments and the bucket's settings are PUTs of
    # their owner's settings (their external name carries no id of their own), so the target writes them again
    again = {"BucketOwnershipControls", "BucketPublicAccessBlock", "BucketServerSideEncryptionConfiguration"}
    again |= {"BucketVersioning", "RolePolicyAttachment", "UserPolicyAttachment"}
    made = [(k, n) for k, n, _i in providers.creations if k not in again]
    assert len(made) == len(set(made)) == 20


@pytest.mark.slow
@pytest.mark.playbook
def test_aws_crossplane_teardown_role_deletes_then_quiesces_then_sweeps(
    kind_api, fake_bins, moto, ansible_playbook, tmp_path
):
    """`ansible-playbook -i inventories/aws-crossplane playbooks/aws-crossplane.yml --tags teardown` on a kind
    cluster whose Crossplane providers made the tree's resources in moto; a decoy VPC object (another
    environment's label) and its VPC stay."""
    from tests.integration.test_teardown_aws_role import PROVIDERS, capa, failed, ran
    from tests.substrate.bootstrapped import install_bootstrapped_tools, seed_bootstrapped_kind
    from tests.substrate.fixtures import REPO
    from tests.substrate.strict_api import plural_of

    seed_bootstrapped_kind(
        kind_api,
        "aws-crossplane",
        [(*p, "v2.8.1") for p in PROVIDERS],
        clusters=("eu-north-1-management", "eu-north-1-workload", "eu-west-1-workload"),
        run_tags={"run": "1"},
        namespaces=("crossplane-system",),
    )
    install_bootstrapped_tools(fake_bins, kind_api)
    for group, kind in CRD_KINDS:
        kind_api.add_resource(group, "v1beta1", kind, plural_of(group, kind), namespaced=group != "aws.m.upbound.io")
    kind_api.create(
        {
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": {"name": "crossplane", "namespace": "crossplane-system"},
            "spec": {"interval": "30m", "chart": {"spec": {"chart": "crossplane", "version": "2.3.4"}}},
        }
    )
    _deployment(kind_api, "provider-aws-ec2-5f1c", {"pkg.crossplane.io/provider": "provider-aws-ec2"})
    world = World()
    world.add_cluster(kind_api)
    providers = CrossplaneProviders(world, moto)
    for obj in aws_world.tree_objects(TREE, RUN) + [_decoy_vpc()]:
        kind_api.create(obj)  # the plain emulator (teardown's kind cluster): no server-side apply
    world.settle()
    decoy = kind_api.get("ec2.aws.m.upbound.io/v1beta1", "VPC", DB + "-2", "default")["metadata"]["annotations"]
    assert len(_vpcs(moto)) == 1
    threads = capa(kind_api, ("eu-north-1-workload", "eu-west-1-workload"))
    world.start()
    try:
        rc, out, err = ansible_playbook(
            REPO / "playbooks" / "aws-crossplane.yml",
            "--tags",
            "teardown",
            "-e",
            json.dumps(
                {
                    "teardown_kind_kubeconfig": str(kind_api.kubeconfig_path),
                    "teardown_mgmt_kubeconfig": str(tmp_path / "no-mgmt.yaml"),
                    "teardown_aws_endpoint_url": moto,
                }
            ),
            inventory=REPO / "inventories" / "aws-crossplane",
            env={
                "PATH": fake_bins.path_env,
                "HOME": str(tmp_path),
                "BOOTSTRAP_CONFIG": str(REPO / "bootstrap.toml"),
                "KROPS_AWS_SWEEP_TIME_SCALE": "0",
            },
        )
    finally:
        world.stop()
    for t in threads:
        t.join(5)
    assert rc == 0, (failed(out), err[-3000:])
    deleted = ran(out, "Delete the Crossplane managed resources krops owns, with Crossplane running")
    assert len(deleted["deleted"]) == 31 and providers.orphaned == [] and providers.refused == []
    quiesced = ran(
        out, "Stop the resource plane's controllers before the sweep (suspend their HelmReleases, scale them to zero)"
    )
    assert (quiesced["suspended"], quiesced["scaled"]) == (["crossplane"], ["provider-aws-ec2-5f1c"])
    ran(out, "Sweep the workload targets and the management cluster (ownership-filtered)")
    assert _vpcs(moto) == [] and _vpcs(moto, cidr="10.140.0.0/16") == [decoy[EXTERNAL_NAME]]
    assert rds_instances(moto) == []


def rds_instances(moto):
    return [
        i["DBInstanceIdentifier"]
        for region in ("eu-north-1", "eu-west-1")
        for i in clients(moto, region)("rds").describe_db_instances()["DBInstances"]
    ]


def _crossplane_core(strict_cluster, monkeypatch, name="xp-core"):
    """A cluster with the Crossplane chart installed as helm-controller installs it: its CRDs, its Deployment."""
    from tests.substrate.crossplane_world import PackageManager, register_crossplane_chart
    from tests.substrate.flux_world import FluxController

    register_crossplane_chart(monkeypatch)
    world = World()
    api = world.add_cluster(strict_cluster(name, bundles=()))
    api.install_bundle("crossplane")
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "crossplane-system"}})
    FluxController._run_workload(api, "crossplane-system", "crossplane", ("crossplane", "xpkg.crossplane.io/x"), 1)
    return world, api, PackageManager(world)


PROVIDER_TREE = ["mgmt/aws-crossplane/crossplane-providers"]


def test_the_package_manager_installs_the_pinned_providers_their_crds_dependency_and_irsa_runtime(
    strict_cluster, monkeypatch
):
    from tests.substrate.crossplane_world import PKG, friendly_id

    world, api, manager = _crossplane_core(strict_cluster, monkeypatch)
    assert ("ec2.aws.m.upbound.io", "vpcs") not in api.resources
    for obj in aws_world.tree_objects(PROVIDER_TREE, RUN):
        ssa_apply(api, obj, "kustomize-controller")
    world.settle()
    names = sorted(p["metadata"]["name"] for p in api.list(PKG, "Provider"))
    assert names == sorted(
        ["provider-aws-s3", "provider-aws-rds", "provider-aws-iam", "provider-aws-ec2", "upbound-provider-family-aws"]
    )
    s3 = api.get(PKG, "Provider", "provider-aws-s3")
    revision = friendly_id("provider-aws-s3", manager.digest("xpkg.upbound.io/upbound/provider-aws-s3:v2.6.0"))
    assert revision.startswith("provider-aws-s3-") and len(revision) == len("provider-aws-s3-") + 12
    assert s3["status"]["currentRevision"] == revision
    assert {c["type"]: (c["status"], c["reason"]) for c in s3["status"]["conditions"]} == {
        "Installed": ("True", "ActivePackageRevision"),
        "Healthy": ("True", "HealthyPackageRevision"),
    }
    for group, plural in (("ec2.aws.m.upbound.io", "vpcs"), ("aws.m.upbound.io", "clusterproviderconfigs")):
        assert (group, plural) in api.resources
    sa = api.get("v1", "ServiceAccount", revision, "crossplane-system")
    assert sa["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": f"arn:aws:iam::{ACCOUNT}:role/krops-crossplane"
    }
    deployment = api.get("apps/v1", "Deployment", revision, "crossplane-system")
    assert deployment["spec"]["selector"]["matchLabels"]["pkg.crossplane.io/provider"] == "provider-aws-s3"
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == revision
    assert manager.refused == []


def test_the_package_manager_refuses_a_package_or_tag_the_registry_does_not_serve(strict_cluster, monkeypatch):
    from tests.substrate.crossplane_world import PKG

    world, api, manager = _crossplane_core(strict_cluster, monkeypatch)
    for name, ref in (
        ("provider-aws-s3", "xpkg.upbound.io/upbound/provider-aws-s3:v2.5.9"),
        ("provider-aws-eks", "xpkg.upbound.io/upbound/provider-aws-eks:v2.6.0"),
    ):
        api.create({"apiVersion": PKG, "kind": "Provider", "metadata": {"name": name}, "spec": {"package": ref}})
    world.settle()
    s3 = api.get(PKG, "Provider", "provider-aws-s3")
    installed, healthy = s3["status"]["conditions"]
    assert (installed["type"], installed["status"], installed["reason"]) == ("Installed", "False", "UnpackingPackage")
    assert (healthy["type"], healthy["status"], healthy["reason"]) == ("Healthy", "False", "UnhealthyPackageRevision")
    assert installed["message"].startswith(
        "cannot unpack package: cannot resolve xpkg.upbound.io/upbound/provider-aws-s3:v2.5.9 to digest: "
    )
    assert "currentRevision" not in s3["status"]
    assert ("s3.aws.m.upbound.io", "buckets") not in api.resources  # nothing installed from it
    assert api.list("apps/v1", "Deployment", "crossplane-system") == [
        api.get("apps/v1", "Deployment", "crossplane", "crossplane-system")
    ]
    assert sorted(n for n, _m in manager.refused) == ["provider-aws-eks", "provider-aws-s3"]


def test_the_package_manager_does_nothing_while_crossplane_is_stopped(strict_cluster, monkeypatch):
    from tests.substrate.crossplane_world import PKG

    world, api, manager = _crossplane_core(strict_cluster, monkeypatch)
    res = api.resource_for("apps/v1", "Deployment")
    api.patch(res, "crossplane-system", "crossplane", "merge", {"spec": {"replicas": 0}}, None, "krops")
    for obj in aws_world.tree_objects(PROVIDER_TREE, RUN):
        ssa_apply(api, obj, "kustomize-controller")
    world.settle()
    assert all("status" not in p for p in api.list(PKG, "Provider")) and manager.installed == []


def test_an_empty_external_name_applied_over_the_providers_makes_a_second_vpc(strict_cluster, moto):
    """Why the tree applies crossplane.io/external-name only when the pivot carried one: an applier that owns the
    annotation as "" (Flux, on every reconcile) wipes the id the provider wrote, and the emulated provider, which
    looks the resource up by its external name (upjet's handling of a changed name was not read), creates it again.
    The placeholder key leaves the provider's annotation alone."""
    world, api, providers = _world(strict_cluster, moto, "xp-reapply")
    vpc = api.get("ec2.aws.m.upbound.io/v1beta1", "VPC", DB, "default")
    assert vpc["metadata"]["annotations"]["krops.io/no-external-name"] == "none"
    for obj in aws_world.tree_objects(TREE, RUN):  # Flux's next reconcile
        ssa_apply(api, obj, "kustomize-controller")
    world.settle()
    assert len(_vpcs(moto)) == 1  # the provider's external name stays: no second VPC
    res = api.resource_for("ec2.aws.m.upbound.io/v1beta1", "VPC")
    api.patch(res, "default", DB, "merge", {"metadata": {"annotations": {EXTERNAL_NAME: ""}}}, None, "someone")
    world.settle()
    assert len(_vpcs(moto)) == 2  # the defect: an empty external name applied over the provider's


EKS = "default_eu-north-1-management-control-plane"
ROOT_TRUST = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}, "Action": "sts:AssumeRole"}
        ],
    }
)


def _eks_with_issuer(moto, associate=True):
    """The management EKS cluster in moto and, as CAPA makes it with associateOIDCProvider, its IAM OIDC provider."""
    eks, iam = clients(moto, "eu-north-1")("eks"), clients(moto, "eu-north-1")("iam")
    eks.create_cluster(
        name=EKS, roleArn=f"arn:aws:iam::{ACCOUNT}:role/cp", resourcesVpcConfig={"subnetIds": []}, version="1.35"
    )
    issuer = eks.describe_cluster(name=EKS)["cluster"]["identity"]["oidc"]["issuer"]
    if associate:
        iam.create_open_id_connect_provider(Url=issuer, ClientIDList=["sts.amazonaws.com"], ThumbprintList=["9" * 40])
    return issuer


def _irsa_args(moto, **extra):
    args = {"environment": "aws-crossplane", "eks_cluster": EKS, "region": "eu-north-1", "endpoint_url": moto}
    return dict(args, **extra)


def test_the_irsa_role_trusts_the_management_clusters_oidc_provider_for_the_providers(moto, run_module):
    from ansible_collections.krops.platform.plugins.modules import crossplane_irsa_role

    issuer = _eks_with_issuer(moto)
    host = issuer.removeprefix("https://")
    iam = clients(moto, "eu-north-1")("iam")
    planned = run_module(crossplane_irsa_role, _irsa_args(moto), check_mode=True)
    assert not planned.failed, planned.get("msg")
    assert planned["changes"] == ["create role", "put policy krops-crossplane-providers"] and planned["changed"]
    assert [r["RoleName"] for r in iam.list_roles()["Roles"]] == []  # check mode writes nothing
    made = run_module(crossplane_irsa_role, _irsa_args(moto, tags={"krops.io/run-id": "xp-1"}))
    assert not made.failed, made.get("msg")
    assert made["role_arn"] == f"arn:aws:iam::{ACCOUNT}:role/krops-crossplane"
    assert made["oidc_provider_arn"] == f"arn:aws:iam::{ACCOUNT}:oidc-provider/{host}"
    role = iam.get_role(RoleName="krops-crossplane")["Role"]
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {
            "Effect": "Allow",
            "Principal": {"Federated": made["oidc_provider_arn"]},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {
                "StringEquals": {f"{host}:aud": "sts.amazonaws.com"},
                "StringLike": {f"{host}:sub": ["system:serviceaccount:crossplane-system:provider-aws-*"]},
            },
        }
    ]
    tags = {t["Key"]: t["Value"] for t in iam.list_role_tags(RoleName="krops-crossplane")["Tags"]}
    assert tags == {"krops.io/environment": "aws-crossplane", "krops.io/run-id": "xp-1"}
    policy = iam.get_role_policy(RoleName="krops-crossplane", PolicyName="krops-crossplane-providers")
    assert policy["PolicyDocument"]["Statement"][0]["Action"] == ["s3:*", "rds:*", "iam:*", "ec2:*"]
    again = run_module(crossplane_irsa_role, _irsa_args(moto, tags={"krops.io/run-id": "xp-1"}))
    assert (again["changed"], again["changes"]) == (False, [])
    # a trust policy changed behind krops' back is put right
    iam.update_assume_role_policy(RoleName="krops-crossplane", PolicyDocument=ROOT_TRUST)
    fixed = run_module(crossplane_irsa_role, _irsa_args(moto, tags={"krops.io/run-id": "xp-1"}))
    assert fixed["changes"] == ["update trust policy"]


@pytest.mark.parametrize("tags", [{}, {"krops.io/environment": "aws"}])
def test_a_role_of_that_name_krops_cannot_prove_it_owns_is_refused_and_left(moto, run_module, tags):
    from ansible_collections.krops.platform.plugins.modules import crossplane_irsa_role

    _eks_with_issuer(moto)
    iam = clients(moto, "eu-north-1")("iam")
    iam.create_role(RoleName="krops-crossplane", AssumeRolePolicyDocument=ROOT_TRUST, Tags=aws_world._tag_list(tags))
    result = run_module(crossplane_irsa_role, _irsa_args(moto))
    assert result.failed
    assert result["msg"].startswith(
        "crossplane_irsa_role: the IAM role krops-crossplane exists and is not tagged "
        "krops.io/environment=aws-crossplane (its tag is {}): krops changes no role it cannot prove it owns.".format(
            repr(tags.get("krops.io/environment"))
        )
    )
    role = iam.get_role(RoleName="krops-crossplane")["Role"]
    assert role["AssumeRolePolicyDocument"] == json.loads(ROOT_TRUST)
    assert iam.list_role_policies(RoleName="krops-crossplane")["PolicyNames"] == []


def test_without_the_oidc_provider_capa_associates_the_role_is_not_made(moto, run_module):
    from ansible_collections.krops.platform.plugins.modules import crossplane_irsa_role

    issuer = _eks_with_issuer(moto, associate=False)
    result = run_module(crossplane_irsa_role, _irsa_args(moto))
    assert result.failed
    assert result["msg"] == (
        f"crossplane_irsa_role: the EKS cluster {EKS} has no IAM OIDC provider (arn:aws:iam::{ACCOUNT}:oidc-provider/"
        f"{issuer.removeprefix('https://')}): set associateOIDCProvider: true on its AWSManagedControlPlane (CAPA "
        "creates and tags the provider; feature gate EKSEnableIAM)"
    )
    assert clients(moto, "eu-north-1")("iam").list_roles()["Roles"] == []
    missing = run_module(crossplane_irsa_role, _irsa_args(moto, eks_cluster="nope"))
    assert missing.failed and missing["msg"].startswith(
        "crossplane_irsa_role: cannot read the EKS cluster nope in eu-north-1: ResourceNotFoundException"
    )
