# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The scale generator (tests/substrate/scale_env.py): its aws tree is a real config that krops validate accepts.

The benchmark (tests/benchmarks/scale_bench.py, ``make scale-bench``) measures n = 1, 10 and 50; this
checks the same generator at n = 3 (three regions, all three accounts) and that validate still
catches a defect in it, so a generator that writes nothing validate reads cannot pass.
"""

from __future__ import annotations

import pytest

from ansible_collections.krops.platform.plugins.module_utils import validate
from tests.substrate import scale_env
from tests.substrate.fixtures import REPO

pytestmark = pytest.mark.slow  # two validate runs of the aws environment (about 4 s)

SCHEMAS = str(REPO / "schemas" / "crds")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = scale_env.copy_repository(str(REPO), str(tmp_path_factory.mktemp("scale") / "repo"))
    plan = scale_env.write(root, 3)
    return root, plan


def test_plan_spreads_clusters_over_regions_and_accounts():
    plan = scale_env.clusters(50)
    assert [c.name for c in plan[:3]] == ["eu-north-1-workload-00", "eu-west-1-workload-01", "eu-west-2-workload-02"]
    assert {c.region for c in plan} == set(scale_env.REGIONS)
    assert [sum(c.account_key == key for c in plan) for key, _id in scale_env.ACCOUNTS] == [17, 17, 16]
    assert len({c.vpc_cidr for c in plan}) == 50 and len({c.db_octet for c in plan}) == 50
    assert plan[1].identity == ("AWSClusterRoleIdentity", "krops-team-a")
    assert plan[3].identity == ("AWSClusterControllerIdentity", "default")
    with pytest.raises(ValueError, match=r"^scale_env: n must be between 1 and 100, got 0$"):
        scale_env.clusters(0)


def test_generated_tree_validates(tree):
    root, plan = tree
    result = validate.run(root, ["aws"], SCHEMAS)
    assert result["findings"] == []
    summary = result["summary"]["aws"]
    # 16 objects a cluster (7 CAPI, 8 ACK, its ResourceSet bag) over the 57 the environment holds without any
    # (the role-account map among them), and the namespaces of the two further accounts (CARM)
    assert (summary["objects"], summary["directories"]) == (107, 21)
    assert sorted(o for o in _names(root, "AWSClusterRoleIdentity")) == ["krops-team-a", "krops-team-b"]
    assert [c.name for c in plan] == ["eu-north-1-workload-00", "eu-west-1-workload-01", "eu-west-2-workload-02"]


def test_validate_catches_a_defect_in_the_generated_tree(tree):
    root, _plan = tree
    path = root + "/bootstrap.toml"
    text = open(path, encoding="utf-8").read()
    broken = text.replace('rds-instance = "krops-eu-west-2-workload-02-db"', 'rds-instance = "krops-eu-west-2-db"')
    assert broken != text
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(broken)
    try:
        result = validate.run(root, ["aws"], SCHEMAS)
    finally:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    messages = [f["message"] for f in result["findings"]]
    assert len(messages) == 1
    assert messages[0].startswith("rds-instance krops-eu-west-2-db matches no DBInstance dbInstanceIdentifier (")
    assert "krops-eu-west-2-workload-02-db" in messages[0]


def _names(root, kind):
    import pathlib

    import yaml

    for path in pathlib.Path(root, "mgmt", "aws").rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == kind:
                yield doc["metadata"]["name"]
