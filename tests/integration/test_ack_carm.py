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
