# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Hardening round 2 (issue 22), ownership: decoys that plausible configurations used to delete.

- Azure tag names are case-insensitive: another environment's tag in any spelling vetoes a CAPZ owned tag.
- gcp_teardown refuses the prerequisite account and another pool's provider, given as options or in
  bootstrap.toml, by the rule set validate applies (ownership.gcp_iam_problems), before any call.
- EKS control-plane log groups /aws/eks/<cluster>/cluster have a row: the sweep deletes them; another
  environment's and a lookalike stay.
- The loader refuses duplicate capi-workloads and aws-workloads entries.
"""

from __future__ import annotations

import pytest
from test_aws_sweep_world import BOOTSTRAP_TOML, clients
from test_teardown_cloud import (  # noqa: F401  # pylint: disable=unused-import
    SUB,
    arm,
    azure_args,
    gcp_args,
    gcp_toml,
    gcp_world,
    google,
    rg,
)

from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils import ownership
from ansible_collections.krops.platform.plugins.modules import aws_orphan_sweep, azure_teardown, gcp_teardown
from tests.substrate.fixtures import REPO

CAPZ = "sigs.k8s.io_cluster-api-provider-azure_cluster_%s"

# --- Azure --------------------------------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["Krops-Environment", "KROPS-ENVIRONMENT", "krops-Environment"])
def test_azure_another_environments_tag_in_any_case_vetoes_the_capz_tag(arm, run_module, spelling):  # noqa: F811
    """The decoy of issue 22: CAPZ's owned tag and Krops-Environment: azure-staging. ARM matches tag names
    case-insensitively, so the group is azure-staging's and stays."""
    arm.add(rg("swedencentral-workload"), tags={CAPZ % "swedencentral-workload": "owned", spelling: "azure-staging"})
    arm.add(rg("swedencentral-management"), tags={spelling.upper(): "azure"})  # ours, in upper case
    result = run_module(
        azure_teardown, azure_args(arm, resource_groups=["swedencentral-workload", "swedencentral-management"])
    )
    assert not result.failed, result
    assert arm.writes() == [("DELETE", rg("swedencentral-management"))]
    assert arm.groups() == ["swedencentral-workload"]
    assert [n["name"] for n in result["not_owned"]] == ["swedencentral-workload"]


def test_azure_capz_tag_name_in_another_case_still_proves_ownership_but_its_value_is_exact(arm, run_module):  # noqa: F811
    arm.add(rg("swedencentral-workload"), tags={(CAPZ % "swedencentral-workload").upper(): "owned"})
    arm.add(rg("swedencentral-management"), tags={"krops-environment": "Azure"})  # values are case-sensitive
    result = run_module(
        azure_teardown, azure_args(arm, resource_groups=["swedencentral-workload", "swedencentral-management"])
    )
    assert not result.failed, result
    assert arm.writes() == [("DELETE", rg("swedencentral-workload"))]
    assert arm.groups() == ["swedencentral-management"]


# --- GCP IAM: the prerequisites ------------------------------------------------------------------


def test_gcp_teardown_refuses_the_prerequisite_account_and_another_pools_provider_before_any_call(
    google,  # noqa: F811
    run_module,
    tmp_path,
):
    gcp_world(google)
    args = gcp_args(google, config_file=gcp_toml(tmp_path), service_accounts=["krops-capg"])
    result = run_module(gcp_teardown, args)
    assert result.failed
    assert result["msg"] == (
        "gcp_teardown refuses to delete what krops does not own (the rules validate applies, docs/teardown.md): "
        "service account krops-capg is abandoned by Config Connector in the tree (a prerequisite, "
        "docs/environments/gcp.md): teardown must not delete it; remove it from teardown service-accounts"
    )
    result = run_module(gcp_teardown, dict(args, service_accounts=[], workload_identity_providers=["team/kind"]))
    assert result.failed
    assert result["msg"] == (
        "gcp_teardown refuses to delete what krops does not own (the rules validate applies, docs/teardown.md): "
        "workload identity provider team/kind is neither an IAMWorkloadIdentityPoolProvider of the tree nor the "
        "wif-federate hook's (krops/kind, krops/mgmt)"
    )
    assert google.calls == []  # refused before any call


def test_gcp_teardown_refuses_the_prerequisite_in_bootstrap_toml_too(google, run_module, tmp_path):  # noqa: F811
    toml = gcp_toml(tmp_path)
    text = open(toml, encoding="utf-8").read()
    text = text.replace('service-accounts = ["krops-europe-north1-workload"]', 'service-accounts = ["krops-capg"]')
    open(toml, "w", encoding="utf-8").write(text)
    result = run_module(gcp_teardown, gcp_args(google, config_file=toml))
    assert result.failed and "service account krops-capg is abandoned by Config Connector" in result["msg"]
    assert google.calls == []


def test_validate_and_gcp_teardown_share_one_rule_set():
    """The rules are ownership.gcp_iam_problems: what validate reports as a refusal, teardown refuses."""
    declared = ownership.gcp_iam_declared(
        [
            {
                "apiVersion": "iam.cnrm.cloud.google.com/v1beta1",
                "kind": "IAMServiceAccount",
                "metadata": {
                    "name": "krops-capg",
                    "annotations": {"cnrm.cloud.google.com/deletion-policy": "abandon"},
                },
                "spec": {"resourceID": "krops-capg"},
            },
            {
                "apiVersion": "iam.cnrm.cloud.google.com/v1beta1",
                "kind": "IAMServiceAccount",
                "metadata": {"name": "x"},
                "spec": {"resourceID": "krops-apps"},
            },
        ],
        hook="wif-federate",
    )
    problems = ownership.gcp_iam_problems(["krops-capg", "krops-apps"], ["krops/kind", "team/kind"], declared)
    assert [(field, refuse) for field, refuse, dummy in problems] == [
        ("service-accounts", True),
        ("workload-identity-providers", True),
    ]


# --- AWS: EKS control-plane log groups -------------------------------------------------------------


@pytest.fixture
def toml(tmp_path):
    path = tmp_path / "bootstrap.toml"
    path.write_text(BOOTSTRAP_TOML)
    return str(path)


def test_eks_control_plane_log_groups_have_a_row_and_go(run_module, moto, toml):
    logs = clients(moto, "eu-north-1")("logs")
    ours = "/aws/eks/default_eu-north-1-workload-control-plane/cluster"
    other_env = "/aws/eks/default_eu-north-1-management-control-plane-2/cluster"
    lookalike = "/aws/eks/default_eu-north-1-workload-control-plane/cluster-old"
    tagged = "/krops/eu-north-1-workload/audit"
    logs.create_log_group(logGroupName=ours)
    logs.create_log_group(logGroupName=other_env, tags={"krops.io/environment": "aws-staging"})
    logs.create_log_group(logGroupName=lookalike)
    logs.create_log_group(
        logGroupName=tagged, tags={"sigs.k8s.io/cluster-api-provider-aws/cluster/eu-north-1-workload": "owned"}
    )
    vetoed = "/aws/eks/default_eu-north-1-management-control-plane/cluster"
    logs.create_log_group(logGroupName=vetoed, tags={"krops.io/environment": "aws-staging"})
    args = {
        "config_file": toml,
        "environment": "aws",
        "endpoint_url": moto,
        "wait_timeout": 5,
        "regions": ["eu-north-1"],
    }
    plan = run_module(aws_orphan_sweep, args, check_mode=True)
    assert not plan.failed, plan
    planned = {(p["type"], p["id"]) for p in plan["plan"] if p["type"] in ("eks-log-group", "unsupported")}
    assert planned == {("eks-log-group", ours), ("eks-log-group", tagged)}
    result = run_module(aws_orphan_sweep, args)
    assert not result.failed, result
    left = sorted(g["logGroupName"] for g in logs.describe_log_groups()["logGroups"])
    assert left == sorted([other_env, lookalike, vetoed])


# --- the loader: duplicates ----------------------------------------------------------------------


def test_the_loader_refuses_duplicate_workloads(tmp_path):
    text = (REPO / "bootstrap.toml").read_text()
    dup = text.replace('capi-workloads = ["local-workload"]', 'capi-workloads = ["local-workload", "local-workload"]')
    path = tmp_path / "bootstrap.toml"
    path.write_text(dup)
    with pytest.raises(krops_config.ConfigError) as caught:
        krops_config.load(path=str(path), environ={})
    assert str(caught.value) == (
        f"{path}: environments.local-host.teardown.capi-workloads[1]: expected distinct entries, got "
        "'local-workload'; it repeats an earlier entry (valid environments: local-host, aws, aws-crossplane, azure, gcp, local-talos)"
    )
    block = text[text.index("[[environments.aws.teardown.aws-workloads]]") :]
    block = block[: block.index("\n\n") + 1]
    path.write_text(text.replace(block, block + "\n" + block))
    with pytest.raises(krops_config.ConfigError) as caught:
        krops_config.load(path=str(path), environ={})
    assert "environments.aws.teardown.aws-workloads[].cluster-name[1]: expected distinct entries" in str(caught.value)
