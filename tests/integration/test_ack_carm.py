# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""ACK cross-account resource management (CARM) from bootstrap.toml's accounts (issue 26).

The generator (tests/substrate/scale_env.py at n = 3: one cluster in each of three accounts, the two further
ones with an ack-role-arn) writes bootstrap.toml's accounts; scripts/ack-accounts writes the role-account map
and the namespaces from them. validate accepts that tree and names each defect a planted edit makes (the
runtime's rules and bootstrap.toml's). The emulated ACK controllers (tests/substrate/aws_world.py) then
reconcile the tree's ACK resources into moto as aws-controllers-k8s/runtime v0.61.0 does: each in the account
of its namespace's owner annotation through the mapped role, the others in the controllers' own account, none
while its namespace's account has no usable mapping; and deleting one account's objects, or sweeping one
account, leaves every other account's resources and decoys as they were.
"""

from __future__ import annotations

import subprocess

import pytest

from ansible_collections.krops.platform.plugins.module_utils import ack_accounts, config, validate
from tests.substrate import scale_env
from tests.substrate.fixtures import REPO

pytestmark = pytest.mark.slow  # validate runs of a generated tree and moto worlds (about 3 minutes in all)

SCHEMAS = str(REPO / "schemas" / "crds")
HOME, TEAM_A, TEAM_B = (account for _key, account in scale_env.ACCOUNTS)
MAP_FILE = "mgmt/aws/ack-controllers/role-account-map.yaml"
RELEASES = "mgmt/aws/ack-controllers/helmreleases.yaml"
RESOURCES_01 = "mgmt/aws/workload-resources/eu-west-1-workload-01.yaml"


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = scale_env.copy_repository(str(REPO), str(tmp_path_factory.mktemp("carm") / "repo"))
    scale_env.write(root, 3)
    return root


def _edit(root, rel, old, new):
    """Every occurrence of ``old`` in the file replaced (the edit of all four ACK releases, say)."""
    path = f"{root}/{rel}"
    text = open(path, encoding="utf-8").read()
    assert old in text, (rel, old)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text.replace(old, new))
    return path, text


def _findings(root, *edits):
    saved = []
    try:
        for rel, old, new in edits:
            saved.append(_edit(root, rel, old, new))
        result = validate.run(root, ["aws"], SCHEMAS)
    finally:
        for path, text in reversed(saved):
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
    return sorted((f["rule"], f["object"], f["message"]) for f in result["findings"])


def test_the_generated_map_and_namespaces_follow_bootstrap_toml(tree):
    cfg = config.load(path=f"{tree}/bootstrap.toml", environ={})
    settings = cfg.environment("aws")
    assert ack_accounts.mapped_accounts(settings) == [
        (TEAM_A, f"arn:aws:iam::{TEAM_A}:role/krops-ack"),
        (TEAM_B, f"arn:aws:iam::{TEAM_B}:role/krops-ack"),
    ]
    assert ack_accounts.home_account(settings) == HOME
    assert ack_accounts.namespace_for_cluster(settings, "eu-west-1-workload-01") == f"ack-{TEAM_A}"
    assert ack_accounts.namespace_for_cluster(settings, "eu-north-1-workload-00") is None
    assert ack_accounts.write(tree, cfg, check=True) == []  # scale_env wrote it with the product's generator
    script = subprocess.run(
        [str(REPO / "scripts" / "ack-accounts"), "--check"], cwd=tree, capture_output=True, text=True, check=False
    )
    assert (script.returncode, script.stdout) == (0, "")  # the script run on the shipped tree: it is current too


def test_the_generated_tree_has_no_findings(tree):
    assert _findings(tree) == []


def test_a_stale_map_is_a_finding_and_the_script_says_so(tree, tmp_path):
    edit = (MAP_FILE, f"  '{TEAM_B}': arn:aws:iam::{TEAM_B}:role/krops-ack\n", "")
    found = _findings(tree, edit)
    assert ("bootstrap", "ConfigMap/ack-system/ack-role-account-map") in {f[:2] for f in found}
    assert (
        "contracts",
        f"Namespace/ack-{TEAM_B}",
        f'its resources would never sync: retrieving role ARN for account/team ID "{TEAM_B}" from '
        '"ack-role-account-map" configmap: key not found in CARM configmap (the ConfigMap ack-role-account-map '
        "in ack-system, where the controllers run)",
    ) in found
    path, text = _edit(tree, *edit)
    try:
        stale = ack_accounts.main(["--path", tree, "--check"])
        assert stale == 1
        assert ack_accounts.main(["--path", tree, "--write"]) == 0
        assert open(path, encoding="utf-8").read() == text
    finally:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            (RESOURCES_01, f"  namespace: ack-{TEAM_A}\n", "  namespace: default\n"),
            (
                "bootstrap",
                "the DBInstance of cluster eu-west-1-workload-01 is in namespace default, which ACK manages in account "
                f"{HOME}, but bootstrap.toml lists the cluster in account {TEAM_A}: put the cluster's ACK resources in "
                f"namespace ack-{TEAM_A}",
            ),
        ),
        (
            (
                MAP_FILE,
                f"'{TEAM_A}': arn:aws:iam::{TEAM_A}:role/krops-ack",
                f"'{TEAM_A}': arn:aws:iam::{TEAM_B}:role/krops-ack",
            ),
            (
                "contracts",
                f"account {TEAM_A} maps to arn:aws:iam::{TEAM_B}:role/krops-ack, a role of account {TEAM_B}: the "
                "runtime manages the namespace in the role's account",
            ),
        ),
        (
            (MAP_FILE, f"'{TEAM_A}': arn:aws:iam::{TEAM_A}:role/krops-ack", f"'{TEAM_A}': ''"),
            (
                "contracts",
                f"account {TEAM_A} maps to no role: the runtime answers 'role value is empty in CARM configmap'",
            ),
        ),
        (
            (RELEASES, "    deletionPolicy: delete\n", "    deletionPolicy: delete\n    enableCARM: false\n"),
            (
                "contracts",
                f"CARM is off (its values set enableCARM: false), so the resources of ack-{TEAM_A} (account {TEAM_A}), "
                f"ack-{TEAM_B} (account {TEAM_B}) land in the controller's own account",
            ),
        ),
        (
            (RELEASES, "    deletionPolicy: delete\n", "    deletionPolicy: delete\n    installScope: namespace\n"),
            (
                "contracts",
                "CARM is off (installScope: namespace makes it watch one namespace, and the runtime runs CARM only "
                f"beyond one), so the resources of ack-{TEAM_A} (account {TEAM_A}), ack-{TEAM_B} (account {TEAM_B}) "
                "land in the controller's own account",
            ),
        ),
        (
            (
                RELEASES,
                "    deletionPolicy: delete\n",
                "    deletionPolicy: delete\n    featureGates:\n      IAMRoleSelector: true\n",
            ),
            (
                "contracts",
                "the controller would not start: cannot enable feature gate 'IAMRoleSelector' when flag 'enable-carm' "
                "is set to true (aws-controllers-k8s/runtime pkg/config/config.go); set enableCARM: false beside it",
            ),
        ),
        (
            ("bootstrap.toml", f'ack-role-arn = "arn:aws:iam::{TEAM_B}:role/krops-ack"\n', ""),
            (
                "bootstrap",
                f"ack-role-account-map is {{'{TEAM_A}': 'arn:aws:iam::{TEAM_A}:role/krops-ack', '{TEAM_B}': "
                f"'arn:aws:iam::{TEAM_B}:role/krops-ack'}}, bootstrap.toml's accounts (ack-role-arn) give "
                f"{{'{TEAM_A}': 'arn:aws:iam::{TEAM_A}:role/krops-ack'}}: run scripts/ack-accounts --write",
            ),
        ),
    ],
    ids=[
        "wrong-namespace",
        "role-of-another-account",
        "empty-role",
        "carm-off",
        "namespace-scope",
        "role-selector",
        "stale",
    ],
)
def test_each_planted_defect_is_named(tree, edit, expected):
    found = _findings(tree, edit)
    assert expected in {(rule, message) for rule, _object, message in found}, found


# --- the emulated ACK controllers on moto -------------------------------------------------------------------------

RUN = {
    "quote": '"',
    "AWS_ACCOUNT_ID": HOME,
    "KROPS_RUN_ID": "carm-1",
    "KROPS_REVISION": "main@sha1:" + "a" * 40,
    "KROPS_EXPIRES_AT": "2026-12-02T00:00:00Z",
    "KROPS_RUN_KIND": "ci",
}
CLUSTERS = {"eu-north-1-workload-00": HOME, "eu-west-1-workload-01": TEAM_A, "eu-west-2-workload-02": TEAM_B}


def _tree_objects(root, folder, kinds=None):
    from ansible_collections.krops.platform.plugins.module_utils import render
    from tests.substrate import aws_world

    return [
        aws_world.flux_substitute(obj, RUN)
        for obj in render.build(f"{root}/{folder}")
        if kinds is None or obj["kind"] in kinds
    ]


def _apply(api, objects):
    from tests.substrate.flux_world import ssa_apply

    for obj in objects:
        ssa_apply(api, obj, "kustomize-controller")


@pytest.fixture
def carm_world(tree, strict_cluster, moto):
    """The management cluster's ACK controllers (own account HOME) and the tree's CARM objects and ACK resources."""
    from tests.substrate import aws_world
    from tests.substrate.flux_world import World

    world, ack = World(), aws_world.Ack(moto, account=HOME)
    aws_world.AckController(world, ack)
    api = world.add_cluster(strict_cluster("carm-mgmt", bundles=()))
    aws_world.install_crds(api, aws_world.ACK_KINDS)
    _apply(api, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ack-system"}}])
    _apply(api, _tree_objects(tree, "mgmt/aws/ack-controllers", {"Namespace", "ConfigMap"}))
    _apply(api, _tree_objects(tree, "mgmt/aws/workload-resources"))
    world.settle()
    return world, ack, api, moto


def _objects(api, namespace=None):
    from tests.substrate.aws_world import ACK_KINDS

    return [o for group, kind in ACK_KINDS for o in api.list(f"{group}/v1alpha1", kind, namespace)]


def _cluster_of(obj):
    return next(c for c in CLUSTERS if c in obj["metadata"]["name"])


def test_each_clusters_resources_land_in_the_account_its_namespace_maps_to(carm_world):
    from tests.substrate.aws_world import inventory_of

    _world, ack, api, moto = carm_world
    objects = _objects(api)
    assert len(objects) == 24  # eight ACK resources for each of the three clusters, all synced
    for obj in objects:
        expected = CLUSTERS[_cluster_of(obj)]
        assert obj["status"]["conditions"][0]["status"] == "True", obj["status"]
        assert obj["status"]["ackResourceMetadata"]["ownerAccountID"] == expected
        assert obj["metadata"]["namespace"] == ("default" if expected == HOME else f"ack-{expected}")
    inventories = {account: inventory_of(moto, account) for account in (HOME, TEAM_A, TEAM_B)}
    for account in (HOME, TEAM_A, TEAM_B):
        made = ack.created(account)
        assert made and made <= inventories[account]
        for other in {HOME, TEAM_A, TEAM_B} - {account}:
            assert not made & inventories[other]  # nothing of one account's clusters in another's
    # each further account's bucket is named for it, as the sweep's s3-bucket-pattern names it there
    assert ("bucket", "s3-bucket", f"krops-{TEAM_B}-eu-west-2-workload-02-data") in ack.created(TEAM_B)


def test_without_the_annotation_a_resource_is_the_controllers_and_without_a_mapping_it_waits(carm_world):
    """Upstream's runtime: a namespace without services.k8s.aws/owner-account-id (or ignored: kube-system) is the
    controllers' own account's; an annotated one whose account has no usable ack-role-account-map entry makes no
    resource anywhere and waits, ACK.ResourceSynced False "IAM Role is not available" with the lookup's error."""
    from tests.substrate.aws_world import inventory_of

    world, ack, api, moto = carm_world
    role = next(o for o in _objects(api, f"ack-{TEAM_A}") if o["kind"] == "Role")
    spare = "333333333333"
    namespaces = {
        "plain": {},
        "kube-system": {ack_accounts.OWNER_ANNOTATION: TEAM_A},
        "spare": {ack_accounts.OWNER_ANNOTATION: spare},
    }
    for name, wanted in namespaces.items():
        _apply(api, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "annotations": wanted}}])
        copy = {
            "apiVersion": role["apiVersion"],
            "kind": "Role",
            "metadata": {"name": f"reader-{name}", "namespace": name},
        }
        copy["spec"] = dict(role["spec"], name=f"krops-reader-{name}")
        _apply(api, [copy])
    world.settle()
    synced = {
        o["metadata"]["namespace"]: o["status"] for o in _objects(api) if o["metadata"]["name"].startswith("reader-")
    }
    assert synced["plain"]["ackResourceMetadata"]["ownerAccountID"] == HOME
    assert synced["kube-system"]["ackResourceMetadata"]["ownerAccountID"] == HOME  # the namespace cache ignores it
    assert "ackResourceMetadata" not in synced["spare"]
    assert synced["spare"]["conditions"] == [
        {
            "type": "ACK.ResourceSynced",
            "status": "False",
            "message": "IAM Role is not available",
            "reason": f'retrieving role ARN for account/team ID "{spare}" from "ack-role-account-map" configmap: '
            "key not found in CARM configmap",
        }
    ]
    assert not any("krops-reader-spare" in str(r) for a in (HOME, TEAM_A, TEAM_B, spare) for r in inventory_of(moto, a))
    # without the ConfigMap no annotated namespace syncs: a new object in team-a's namespace waits
    api.remove("v1", "ConfigMap", "ack-role-account-map", "ack-system")
    copy = {
        "apiVersion": role["apiVersion"],
        "kind": "Role",
        "metadata": {"name": "reader-late", "namespace": f"ack-{TEAM_A}"},
    }
    copy["spec"] = dict(role["spec"], name="krops-reader-late")
    _apply(api, [copy])
    world.settle()
    late = api.get(role["apiVersion"], "Role", "reader-late", f"ack-{TEAM_A}")["status"]["conditions"][0]
    assert late["reason"].endswith(": CARM configmap not found")
    assert ("global", "iam-role", "krops-reader-late") not in ack.created()


def test_carm_off_puts_every_namespace_in_the_controllers_account(tree, strict_cluster, moto):
    """--enable-carm=false (the charts' enableCARM: false): the annotations are not read, so a further account's
    resources land in the controllers' own account (the defect validate's contracts.ack-carm rule names)."""
    from tests.substrate import aws_world
    from tests.substrate.flux_world import World

    world, ack = World(), aws_world.Ack(moto, account=HOME, enable_carm=False)
    aws_world.AckController(world, ack)
    api = world.add_cluster(strict_cluster("carm-off", bundles=()))
    aws_world.install_crds(api, aws_world.ACK_KINDS)
    _apply(api, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ack-system"}}])
    _apply(api, _tree_objects(tree, "mgmt/aws/ack-controllers", {"Namespace", "ConfigMap"}))
    _apply(api, _tree_objects(tree, "mgmt/aws/workload-resources"))
    world.settle()
    assert {o["status"]["ackResourceMetadata"]["ownerAccountID"] for o in _objects(api)} == {HOME}
    assert ack.created(TEAM_A) == set() and ack.created(HOME)


def _decoys(moto):
    """In every account: a role and a DB subnet group named and tagged exactly as team-b's ACK made them (owned,
    were they in team-b), and a role tagged for another environment. In team-b only the latter."""
    from tests.substrate.aws_world import account_clients

    made = {}
    tags = [{"Key": "krops.io/environment", "Value": "aws"}]
    for account in (HOME, TEAM_A, TEAM_B):
        make = account_clients(moto, account)
        iam, rds = make(moto, "eu-north-1")("iam"), make(moto, "eu-west-2")("rds")
        trust = '{"Version":"2012-10-17","Statement":[]}'
        iam.create_role(
            RoleName="krops-decoy-staging",
            AssumeRolePolicyDocument=trust,
            Tags=[{"Key": "krops.io/environment", "Value": "aws-staging"}],
        )
        made[account] = {("global", "iam-role", "krops-decoy-staging")}
        if account != TEAM_B:
            iam.create_role(RoleName="krops-eu-west-2-workload-02-reader", AssumeRolePolicyDocument=trust, Tags=tags)
            ec2 = make(moto, "eu-west-2")("ec2")
            vpc = ec2.create_vpc(CidrBlock="10.99.0.0/16")["Vpc"]["VpcId"]
            subnets = [
                ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.99.{i}.0/24", AvailabilityZone=f"eu-west-2{z}")["Subnet"][
                    "SubnetId"
                ]
                for i, z in ((1, "a"), (2, "b"))
            ]
            rds.create_db_subnet_group(
                DBSubnetGroupName="krops-eu-west-2-workload-02-db",
                DBSubnetGroupDescription="decoy",
                SubnetIds=subnets,
                Tags=tags,
            )
            made[account] |= {
                ("global", "iam-role", "krops-eu-west-2-workload-02-reader"),
                ("eu-west-2", "rds-subnet-group", "krops-eu-west-2-workload-02-db"),
            }
    return made


def test_deleting_one_accounts_objects_and_sweeping_one_account_leave_the_others_alone(
    carm_world, tree, monkeypatch, tmp_path
):
    """Teardown of one account never touches another: deleting team-a's ACK objects deletes team-a's resources
    only; the sweep of a bootstrap.toml that lists only team-b deletes team-b's owned resources only. Every other
    account keeps its resources and its decoys (named and tagged as team-b's), and team-b its other-environment
    decoy."""
    from ansible_collections.krops.platform.plugins.module_utils import aws_delete, aws_sweep
    from tests.substrate.aws_world import inventory_of

    world, ack, api, moto = carm_world
    decoys = _decoys(moto)
    before = {account: inventory_of(moto, account) for account in (HOME, TEAM_A, TEAM_B)}
    assert all(decoys[a] <= before[a] for a in before)
    team_a = ack.created(TEAM_A)
    for obj in _objects(api, f"ack-{TEAM_A}"):
        api.remove(obj["apiVersion"], obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"])
    world.settle()
    assert _objects(api, f"ack-{TEAM_A}") == []
    after = {account: inventory_of(moto, account) for account in (HOME, TEAM_A, TEAM_B)}
    assert not team_a & after[TEAM_A] and decoys[TEAM_A] <= after[TEAM_A]
    assert after[TEAM_A] == before[TEAM_A] - team_a  # moto's default VPC and the decoys are all that is left
    assert (after[HOME], after[TEAM_B]) == (before[HOME], before[TEAM_B])
    # the sweep of team-b alone (bootstrap.toml lists that account only, through role krops-teardown)
    text = open(f"{tree}/bootstrap.toml", encoding="utf-8").read()
    head, _sep, rest = text.partition("[[environments.aws.accounts]]")
    tables = ["[[environments.aws.accounts]]" + t for t in rest.split("[[environments.aws.accounts]]")]
    tail = tables[-1][tables[-1].index("\n[environments.aws.teardown]") :]
    tables[-1] = tables[-1][: tables[-1].index("\n[environments.aws.teardown]")]
    only_b = head + next(t for t in tables if f'"{TEAM_B}"' in t) + "\n" + tail
    toml = tmp_path / "bootstrap.toml"
    toml.write_text(only_b)
    monkeypatch.setattr(aws_delete, "EXPECTED_SCALE", 0.0)
    monkeypatch.setattr(aws_delete, "POLL_FIRST", 0.05)
    monkeypatch.setattr(aws_delete, "POLL_MAX", 0.2)
    team_b = ack.created(TEAM_B)
    result = aws_sweep.run({"config_file": str(toml), "environment": "aws", "endpoint_url": moto, "wait_timeout": 30})
    assert not result["failed"], result["msg"]
    assert result["account_ids"] == [TEAM_B]
    swept = {account: inventory_of(moto, account) for account in (HOME, TEAM_A, TEAM_B)}
    assert not team_b & swept[TEAM_B], sorted(team_b & swept[TEAM_B])
    assert decoys[TEAM_B] <= swept[TEAM_B]  # tagged for another environment
    assert (swept[HOME], swept[TEAM_A]) == (after[HOME], after[TEAM_A])  # owned-looking decoys, cluster 0's resources
