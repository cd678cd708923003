# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Round-4 hostile review: the AWS sweep's skipped describes and awaited stack, and the emulator's apply memo.

Each test is a defect found in review (it failed before the fix that came with it) or an attack that held up
(it pins the behaviour that resisted).
"""

from __future__ import annotations

import pytest
from test_aws_sweep_world import BOOTSTRAP_TOML, CAPA, CCM, clients, seed_global

from tests.integration.test_aws_sweep import _Http, fast, sweep, toml  # noqa: F401  # pylint: disable=unused-import
from tests.integration.test_strict_api import KS, api, kustomization  # noqa: F401  # pylint: disable=unused-import
from tests.substrate.kube_emulator import ApiError

STACK = "cluster-api-provider-aws-sigs-k8s-io"
STACK_TYPE = "cloudformation-stack"
NORTH = {"include_management": False, "regions": ["eu-north-1"]}


def _not_found(code, message):
    return (
        _Http(400),
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": 400}},
    )


def _vpc(ec2, key, value="owned", cidr="10.91.0.0/16"):
    spec = [{"ResourceType": "vpc", "Tags": [{"Key": key, "Value": value}]}]
    return ec2.create_vpc(CidrBlock=cidr, TagSpecifications=spec)["Vpc"]["VpcId"]


# --- (b) rc=0 while an owned resource is left --------------------------------------------------------------------


def test_a_delete_answering_not_found_for_a_vpc_that_exists_is_still_a_leftover(run_module, moto, toml, fast):  # noqa: F811
    ec2 = clients(moto, "eu-north-1")("ec2")
    fresh = _vpc(ec2, CAPA % "eu-north-1-workload")

    def lagging(model, params, **_kwargs):
        if model.name == "DeleteVpc" and fresh in str(params.get("body")):  # the serialised query
            return _not_found("InvalidVpcID.NotFound", f"The vpc ID '{fresh}' does not exist")
        return None

    fast.append(("before-call", lagging))
    result = sweep(run_module, moto, toml, **NORTH)
    assert [(r["type"], r["id"], r["outcome"]) for r in result["results"]] == [("vpc", fresh, "absent")]
    assert [v["VpcId"] for v in ec2.describe_vpcs(VpcIds=[fresh])["Vpcs"]] == [fresh]  # it is still there
    assert result.failed, "rc=0 although an owned VPC is still in the account"
    assert [(r["type"], r["id"]) for r in result["leftovers"]] == [("vpc", fresh)]


def _stack_never_finishes_deleting(fast):  # noqa: F811
    """CloudFormation accepts DeleteStack and the stack stays DELETE_IN_PROGRESS (a deletion longer than
    wait_timeout: a stuck custom resource, a slow IAM detach)."""
    deleting = set()

    def accept(model, context, **_kwargs):
        if model.name == "DeleteStack":
            deleting.add(context["client_region"])
            return (_Http(200), {"ResponseMetadata": {"HTTPStatusCode": 200}})
        return None

    def status(model, parsed, context, **_kwargs):
        if model.name == "DescribeStacks" and context["client_region"] in deleting:
            for stack in parsed.get("Stacks") or []:
                stack["StackStatus"] = "DELETE_IN_PROGRESS"

    fast.extend([("before-call", accept), ("after-call", status)])
    return deleting


def test_a_stack_still_deleting_when_wait_timeout_ends_fails_the_run(run_module, moto, toml, fast):  # noqa: F811
    seed_global(moto, regions=("eu-north-1",))
    _stack_never_finishes_deleting(fast)
    result = sweep(run_module, moto, toml, **dict(NORTH, wait_timeout=1))
    assert [(r["type"], r["outcome"], r["reason"]) for r in result["results"] if r["type"] == STACK_TYPE] == [
        (STACK_TYPE, "failed", "still DELETE_IN_PROGRESS after 1s (wait_timeout)")
    ]
    assert clients(moto, "eu-north-1")("cloudformation").describe_stacks(StackName=STACK)["Stacks"]
    assert result.failed, "rc=0 although the stack's deletion did not finish: " + result["msg"]


def test_a_rerun_while_the_stack_is_still_deleting_awaits_it_or_fails(run_module, moto, toml, fast):  # noqa: F811
    seed_global(moto, regions=("eu-north-1",))
    deleting = _stack_never_finishes_deleting(fast)
    first = sweep(run_module, moto, toml, **dict(NORTH, wait_timeout=1))
    assert deleting == {"eu-north-1"} and first["results"][-1]["type"] == STACK_TYPE
    again = sweep(run_module, moto, toml, **dict(NORTH, wait_timeout=1))
    assert clients(moto, "eu-north-1")("cloudformation").describe_stacks(StackName=STACK)["Stacks"]
    assert [r for r in again["results"] if r["type"] == STACK_TYPE], "the deleting stack is not even mentioned"
    assert again.failed, "rc=0 while the clusterawsadm stack is still DELETE_IN_PROGRESS: " + again["msg"]


# --- attacks that held up -----------------------------------------------------------------------------------------


def test_delete_mode_without_describes_still_deletes_only_what_is_owned(run_module, moto, toml, fast):  # noqa: F811
    """Delete mode no longer describes VPCs, subnets, launch templates and snapshots first: the tag walk alone
    decides. Lookalike clusters, 'shared' values, another cluster's tag and an untagged twin must survive."""
    ec2 = clients(moto, "eu-north-1")("ec2")
    owned = _vpc(ec2, CAPA % "eu-north-1-workload", cidr="10.92.0.0/16")
    decoys = {
        "prefix-sharing cluster": _vpc(ec2, CAPA % "eu-north-1-workload-2", cidr="10.93.0.0/16"),
        "prefix of the cluster": _vpc(ec2, CAPA % "eu-north-1-work", cidr="10.94.0.0/16"),
        "shared, not owned": _vpc(ec2, CCM % "eu-north-1-workload", "shared", cidr="10.95.0.0/16"),
        "CAPA key, shared": _vpc(ec2, CAPA % "eu-north-1-workload", "shared", cidr="10.96.0.0/16"),
        "another environment": _vpc(ec2, CAPA % "local-management", cidr="10.97.0.0/16"),
        "untagged": ec2.create_vpc(CidrBlock="10.98.0.0/16")["Vpc"]["VpcId"],
    }

    def template(name, key, value="owned"):
        spec = [{"ResourceType": "launch-template", "Tags": [{"Key": key, "Value": value}]}]
        return ec2.create_launch_template(
            LaunchTemplateName=name, LaunchTemplateData={"InstanceType": "t3.micro"}, TagSpecifications=spec
        )["LaunchTemplate"]["LaunchTemplateId"]

    owned_template = template("eu-north-1-workload-nodes", CAPA % "eu-north-1-workload")
    decoys["lookalike template"] = template("eu-north-1-workload-2-nodes", CAPA % "eu-north-1-workload-2")
    decoys["shared template"] = template("eu-north-1-workload-x", CCM % "eu-north-1-workload", "shared")
    result = sweep(run_module, moto, toml, **NORTH)
    assert not result.failed, result["msg"]
    assert sorted((r["type"], r["id"], r["outcome"]) for r in result["results"]) == sorted(
        [("launch-template", owned_template, "deleted"), ("vpc", owned, "deleted")]
    )
    vpcs = {v["VpcId"] for v in ec2.describe_vpcs()["Vpcs"]}
    templates = {t["LaunchTemplateId"] for t in ec2.describe_launch_templates()["LaunchTemplates"]}
    for what, rid in decoys.items():
        assert rid in vpcs | templates, what
    assert owned not in vpcs and owned_template not in templates


def test_a_vpc_recreated_with_the_same_tags_during_the_sweep_is_a_leftover(run_module, moto, toml, fast):  # noqa: F811
    """Deleted, then made again with the same tags (a controller still running): a new id, found by the final
    pass although the first id is in Sweep.gone."""
    ec2 = clients(moto, "eu-north-1")("ec2")
    first = _vpc(ec2, CAPA % "eu-north-1-workload")
    again = []

    def recreate(model, **_kwargs):
        if model.name == "DeleteVpc" and not again:
            again.append(_vpc(ec2, CAPA % "eu-north-1-workload"))

    fast.append(("after-call", recreate))
    result = sweep(run_module, moto, toml, **NORTH)
    assert result.failed
    assert [(r["id"], r["outcome"]) for r in result["results"]] == [(first, "deleted")]
    assert [(r["type"], r["id"]) for r in result["leftovers"]] == [("vpc", again[0])]


@pytest.mark.parametrize(
    "extra, message",
    [
        # the input contract (plugins/module_utils/options.py) refuses these before anything else
        ({"wait_timeout": -1}, "option wait_timeout: expected an integer from 0 to 604800, got -1"),
        ({"concurrency": 0}, "option concurrency: expected an integer from 1 to 64, got 0"),
        ({"wait_timeout": "soon"}, "argument 'wait_timeout' is of type"),
        ({"regions": "eu-north-1,nowhere-1"}, "option regions[1]: expected an AWS region name such as eu-north-1"),
        ({"regions": "eu-north-1,us-east-1"}, "regions us-east-1 are not regions of environment 'aws'"),
        ({"regions": []}, "regions is an empty list; leave it out to sweep every region of environment 'aws'"),
        ({"mode": "report", "min_age_hours": -1}, "option min_age_hours: expected a number of hours from 0 to 8784"),
    ],
)
def test_bad_numbers_and_regions_fail_with_a_message_not_a_traceback(run_module, moto, toml, fast, extra, message):  # noqa: F811
    result = sweep(run_module, moto, toml, **dict({"wait_timeout": 5}, **extra))
    assert result.failed
    assert message in result["msg"], result["msg"]
    assert "Traceback" not in result["msg"] and "exception" not in result


# --- the emulated API server's apply memo -------------------------------------------------------------------------


def test_a_repeated_apply_with_a_stale_resource_version_is_a_conflict(api):  # noqa: F811
    res = api.resource_for(KS, "Kustomization")

    def apply(body):
        return api.patch(res, "flux-system", "apps", "apply", body, None, "krops", "Strict", False)

    created = apply(kustomization(suspend=False))
    stale = created["metadata"]["resourceVersion"]
    body = kustomization(suspend=True)
    body["metadata"]["resourceVersion"] = stale
    moved = apply(body)  # the precondition holds: the object changes, its resourceVersion moves on
    assert moved["metadata"]["resourceVersion"] != stale
    with pytest.raises(ApiError) as refused:
        apply(body)  # the same body again: its resourceVersion is now stale
    assert refused.value.code == 409


def test_the_memo_misses_after_a_delete_and_recreate_and_for_another_manager(api):  # noqa: F811
    """Delete and recreate under the same name, or another field manager, and the same apply acts again."""
    res = api.resource_for(KS, "Kustomization")

    def apply(body, manager="krops"):
        return api.patch(res, "flux-system", "apps", "apply", body, None, manager, "Strict", False)

    apply(kustomization(suspend=False))
    first = apply(kustomization(suspend=False))
    assert apply(kustomization(suspend=False)) == first
    api.delete(res, "flux-system", "apps")
    recreated = apply(kustomization(suspend=False))
    assert recreated["metadata"]["uid"] != first["metadata"]["uid"]
    again = apply(kustomization(suspend=False))
    assert again["metadata"]["uid"] == recreated["metadata"]["uid"]
    # another manager applying the same body shares the field: not a memo hit, no conflict (same value)
    other = apply(kustomization(suspend=False), manager="someone-else")
    managers = {e["manager"] for e in other["metadata"]["managedFields"]}
    assert {"krops", "someone-else"} <= managers


def test_delete_mode_load_balancers_from_the_tag_walk_alone_spare_every_decoy(run_module, moto, toml, fast):  # noqa: F811
    """Delete mode takes load balancers straight from the Tagging API walk (no describe): the walk's owner
    decides alone. 'shared' values, a prefix-sharing cluster and the LB controller's tag for another cluster
    survive; classic load balancers are named from their ARN."""
    north = clients(moto, "eu-north-1")
    ec2, elbv2, elb = north("ec2"), north("elbv2"), north("elb")
    vpc = ec2.create_vpc(CidrBlock="172.20.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"172.20.{i}.0/24", AvailabilityZone=f"eu-north-1{z}")["Subnet"][
            "SubnetId"
        ]
        for i, z in ((1, "a"), (2, "b"))
    ]

    def v2(name, key, value):
        return elbv2.create_load_balancer(Name=name, Subnets=subnets, Tags=[{"Key": key, "Value": value}])[
            "LoadBalancers"
        ][0]["LoadBalancerArn"]

    def classic(name, key, value):
        elb.create_load_balancer(
            LoadBalancerName=name,
            Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 80}],
            Subnets=subnets,
            Tags=[{"Key": key, "Value": value}],
        )
        return name

    owned = {
        v2("owned-v2", CCM % "eu-north-1-workload", "owned"),
        classic("owned-classic", CCM % "eu-north-1-workload", "owned"),
    }
    decoys = {
        v2("shared-v2", CCM % "eu-north-1-workload", "shared"),
        v2("prefix-v2", CCM % "eu-north-1-workload-2", "owned"),
        v2("controller-v2", "elbv2.k8s.aws/cluster", "eu-north-1-workload-2"),
        classic("shared-classic", CCM % "eu-north-1-workload", "shared"),
        classic("owned-classic-2", CCM % "eu-north-1-workload-2", "owned"),
    }
    result = sweep(run_module, moto, toml, **NORTH)
    assert not result.failed, result["msg"]
    assert {(r["id"], r["outcome"]) for r in result["results"]} == {(i, "deleted") for i in owned}
    left = {lb["LoadBalancerArn"] for lb in elbv2.describe_load_balancers()["LoadBalancers"]}
    left |= {lb["LoadBalancerName"] for lb in elb.describe_load_balancers()["LoadBalancerDescriptions"]}
    assert left == decoys


@pytest.mark.parametrize(
    "old, new, message",
    [
        ('region = "eu-west-1"\n', "", "environments.aws.teardown.aws-workloads[1].region: expected a value"),
        ('region = "eu-west-1"', "region = 5", "expected an AWS region name such as eu-north-1, got 5"),
        ('global-iam-users = ["krops-reader"]', 'global-iam-users = "krops-reader"', "expected an array"),
        ('cfn-stack-name = "cluster-api-provider-aws-sigs-k8s-io"', "cfn-stack-name = 5", "CloudFormation stack"),
    ],
)
def test_a_bootstrap_toml_with_a_missing_region_or_wrong_types_fails_by_key(
    run_module,
    moto,
    tmp_path,
    fast,  # noqa: F811
    old,
    new,
    message,  # noqa: F811
):
    path = tmp_path / "bootstrap.toml"
    path.write_text(BOOTSTRAP_TOML.replace(old, new, 1))
    result = sweep(run_module, moto, str(path), check_mode=True)
    assert result.failed and message in result["msg"], result["msg"]
    assert "Traceback" not in result["msg"] and "unexpectedly" not in result["msg"]


def test_an_endpoint_url_without_a_scheme_is_refused_by_name(run_module, moto, toml, fast):  # noqa: F811
    result = sweep(run_module, moto, toml, check_mode=True, endpoint_url=moto.replace("http://", ""))
    assert result.failed
    assert "endpoint_url" in result["msg"] and "unexpectedly" not in result["msg"], result["msg"]


def test_a_report_path_that_cannot_be_written_is_refused_by_name(run_module, moto, toml, fast, tmp_path):  # noqa: F811
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = sweep(run_module, moto, toml, mode="report", report_path=str(blocker / "orphans.md"))
    assert result.failed
    assert "report_path" in result["msg"] and "unexpectedly" not in result["msg"], result["msg"]


SSH_KEY = (
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQDZ8d3yLQ8xL8mQ2q0V2oQ5Ah0P1zq7p0wq2n0p9t0s1u2v3w4x5y6z7A8B9C0D1E2F3G4"
    "H5I6J7K8L9M0N1O2P3Q4R5S6T7U8V9W0X1Y2Z3a4b5c6d7e8f9g0h1i2j3k4l5m6n7o8p9q0r1s2t3u4v5w6x7y8z9A0B1C2D3E4F5G6H7"
    "I8J9K0L1M2N3O4P5Q6R7S8T9U0V1W2X3Y4Z5a6b7c8d9e0f1g2h3i4j5k6l7m8n9o0p1q2r3s4t5u6v7w8x9y0z1A2B3C4D5E6F7G8H9I0"
    "J1K2L3M4N5O6P7Q8R9S0T1U2V3W4X5Y6Z7a8b9c0d1e2f3g4h5i6j7k8l9m0n1o2p3q4r5s6t7u8v9w0x1y2z3 review@krops"
)


def test_the_reader_user_goes_although_it_has_an_ssh_public_key(run_module, moto, toml, fast):  # noqa: F811
    seed_global(moto)
    iam = clients(moto, "eu-north-1")("iam")
    iam.upload_ssh_public_key(UserName="krops-reader", SSHPublicKeyBody=SSH_KEY)

    def like_iam(model, params, **_kwargs):
        if model.name == "DeleteUser" and iam.list_ssh_public_keys(UserName="krops-reader")["SSHPublicKeys"]:
            return (
                _Http(409),
                {
                    "Error": {"Code": "DeleteConflict", "Message": "Cannot delete entity, must remove SSH keys first."},
                    "ResponseMetadata": {"HTTPStatusCode": 409},
                },
            )
        return None

    fast.append(("before-call", like_iam))
    result = sweep(run_module, moto, toml)
    users = [(r["id"], r["outcome"], r.get("reason")) for r in result["results"] if r["type"] == "iam-user"]
    assert [u[:2] for u in users] == [("krops-reader", "deleted")], users
    assert "krops-reader" not in [u["UserName"] for u in iam.list_users()["Users"]]


def test_an_apply_whose_value_only_equals_the_last_one_in_python_is_validated(api):  # noqa: F811
    res = api.resource_for(KS, "Kustomization")

    def apply(body):
        return api.patch(res, "flux-system", "apps", "apply", body, None, "krops", "Strict", False)

    apply(kustomization(suspend=True))
    apply(kustomization(suspend=True))  # on the object: the memo now holds this configuration
    with pytest.raises(ApiError) as fresh:  # what the schema says of an integer, without a memo
        api.patch(res, "flux-system", "other", "apply", kustomization("other", suspend=1), None, "k", "Strict", False)
    assert fresh.value.code == 422
    with pytest.raises(ApiError) as refused:
        apply(kustomization(suspend=1))
    assert refused.value.code == 422
