# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The aws GitOps tree (mgmt/aws, workload/aws): validate, the reconciliation order, ownership and
run tags, cluster labels, the bootstrap.toml cross-checks and the SOPS placeholders.

validate runs against the vendored schemas (schemas/crds) and the real kustomize, as in
test_validate.py; planted defects are made in a copy of the tree.
"""

from __future__ import annotations

import datetime
import os
import re
import subprocess

import pytest
import yaml

from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils import render
from ansible_collections.krops.platform.plugins.module_utils import validate
from tests.substrate.fixtures import REPO, VENV_BIN
from tests.substrate.trees import SCHEMAS, copy_repo, edit, findings as found

AWS = "mgmt/aws"
CLUSTERS = AWS + "/aws-managed-clusters"
AGE_KEY = REPO / "tests" / "integration" / "fixtures" / "aws-sops-test.agekey"

# Pins of docs/upstream-facts.md that validate compares with bootstrap.toml [charts]. Until the
# [charts] update of that work lands, bootstrap.toml still names the older pins, so the tree copy
# used for exact assertions carries these (see tree()).
CHART_PINS = {"flux-operator": "0.58.1", "cert-manager": "v1.21.1", "capi-operator": "0.28.0"}
RUN_TAGS = ("krops.io/run-id", "krops.io/revision", "krops.io/expires-at", "krops.io/run-kind")
WORKLOADS = {"eu-north-1-workload": "eu-north-1", "eu-west-1-workload": "eu-west-1"}


def _set_chart_pins(path):
    text = path.read_text()
    for key, value in CHART_PINS.items():
        text = re.sub(rf'(?m)^{re.escape(key)} = "[^"]*"$', f'{key} = "{value}"', text)
    path.write_text(text)


@pytest.fixture
def tree(tmp_path):
    root = copy_repo(tmp_path, (AWS, "workload/aws"))
    _set_chart_pins(root / "bootstrap.toml")
    return root


def check(root):
    return validate.run(str(root), environments=["aws"], schema_location=str(SCHEMAS))


def _is_chart_drift(finding):
    return finding[2] == "bootstrap" and " differs from bootstrap.toml [charts] " in finding[3]


def _objects(directory, variables=None):
    objects = render.build(str(REPO / directory))
    return [render.substitute(o, variables or {}) for o in objects]


# --- validate -----------------------------------------------------------------------------------


def test_validate_aws_finds_only_the_stale_schema():
    result = check(REPO)
    # Chart-pin drift is the pending [charts] update only: the pins are the docs/upstream-facts.md ones.
    assert [f for f in found(result) if not _is_chart_drift(f)] == []
    for finding in found(result):
        if _is_chart_drift(finding):
            assert any(f"version {pin} differs" in finding[3] for pin in CHART_PINS.values()), finding
    summary = result["summary"]["aws"]
    assert summary["directories"] == 19 and summary["objects"] >= 85


def test_validate_aws_copy_with_aligned_pins(tree):
    assert found(check(tree)) == []


# --- reconciliation order -----------------------------------------------------------------------

CHAIN = {
    "cert-manager": [],
    "capi-operator": ["cert-manager"],
    "capa-identity": ["capi-operator"],
    "aws-managed-clusters": ["capa-identity"],
    "capi-system": ["capi-operator"],
    "capa-system": ["capi-system"],
    "clusters-eu-north-1": ["capa-system"],
    "clusters-eu-west-1": ["capa-system"],
    "caaph-system": ["capi-system"],
    "flux-apps": ["caaph-system"],
    "ack-controllers": [],
    "workload-resources": ["ack-controllers"],
    "aws-global-iam": ["ack-controllers"],
    "konflate": [],
}


def test_dependson_graph_is_the_issue_chain():
    kss = [o for o in _objects(AWS) + _objects(CLUSTERS) if o["kind"] == "Kustomization"]
    deps = {o["metadata"]["name"]: [d["name"] for d in o["spec"].get("dependsOn", [])] for o in kss}
    assert deps == CHAIN
    for obj in kss:
        spec = obj["spec"]
        assert obj["metadata"]["namespace"] == "flux-system"
        assert spec["sourceRef"] == {"kind": "GitRepository", "name": "flux-system"}
        assert spec["prune"] is True and {"interval", "retryInterval", "timeout"} <= set(spec)
        assert os.path.isfile(REPO / spec["path"] / "kustomization.yaml")
    # The root applies the aws-managed-clusters parent; it applies the regional ones.
    root = {o["metadata"]["name"] for o in _objects(AWS) if o["kind"] == "Kustomization"}
    assert root == set(CHAIN) - {"clusters-eu-north-1", "clusters-eu-west-1"}


def test_broken_dependson_is_found(tree):
    edit(tree, AWS + "/workload-resources/flux-ks.yaml", "    - name: ack-controllers", "    - name: ack-controller")
    assert sorted(found(check(tree))) == sorted(
        [
            (
                AWS + "/workload-resources/flux-ks.yaml",
                "Kustomization/flux-system/workload-resources",
                "flux-graph",
                "dependsOn flux-system/ack-controller: no Kustomization of that name in environment aws",
            )
        ]
    )


# --- ownership and run tags -----------------------------------------------------------------------


def _tags(obj):
    spec = obj["spec"]
    if obj["kind"] == "Bucket":
        return {t["key"]: t["value"] for t in spec["tagging"]["tagSet"]}
    if "additionalTags" in spec:
        return spec["additionalTags"]
    return {t["key"]: t["value"] for t in spec["tags"]}


def _text(value):
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if isinstance(value, datetime.datetime) else value


def _cloud_resources(variables=None):
    objects = []
    for directory in (
        CLUSTERS + "/eu-north-1",
        CLUSTERS + "/eu-west-1",
        AWS + "/workload-resources",
        AWS + "/aws-global-iam",
    ):
        objects += _objects(directory, variables)
    return [
        o
        for o in objects
        if o["apiVersion"].split("/")[0].endswith(".services.k8s.aws")
        or o["kind"] in ("AWSManagedControlPlane", "AWSManagedMachinePool")
    ]


def test_every_cloud_resource_carries_ownership_and_run_tags():
    run = {
        "KROPS_RUN_ID": "aws-20261201-090000",
        "KROPS_REVISION": "0123abc",
        "KROPS_EXPIRES_AT": "2026-12-02T09:00:00Z",
        "KROPS_RUN_KIND": "ci",
        "AWS_ACCOUNT_ID": "111122223333",
    }
    resources = _cloud_resources(run)
    kinds = sorted({o["kind"] for o in resources})
    assert kinds == [
        "AWSManagedControlPlane",
        "AWSManagedMachinePool",
        "Bucket",
        "DBInstance",
        "DBSubnetGroup",
        "Policy",
        "Role",
        "SecurityGroup",
        "Subnet",
        "User",
        "VPC",
    ]
    for obj in resources:
        tags = _tags(obj)
        assert tags["krops.io/environment"] == "aws", obj["metadata"]["name"]
        # render.substitute parses with PyYAML, which reads the unquoted timestamp kustomize emits as a
        # datetime; Go's yaml.v2 (Flux) keeps it a string. Compare the text.
        assert [_text(tags[t]) for t in RUN_TAGS] == ["aws-20261201-090000", "0123abc", "2026-12-02T09:00:00Z", "ci"]
    # Without the krops-run ConfigMap (it is optional), the defaults fill the tags.
    for obj in _cloud_resources({"AWS_ACCOUNT_ID": "111122223333"}):
        assert [_tags(obj)[t] for t in RUN_TAGS] == ["unset", "unknown", "none", "manual"]


def test_kustomizations_of_tagged_resources_substitute_from_krops_run():
    for name in ("clusters-eu-north-1", "clusters-eu-west-1", "workload-resources", "aws-global-iam"):
        obj = next(o for o in _objects(AWS) + _objects(CLUSTERS) if o["metadata"]["name"] == name)
        assert {"kind": "ConfigMap", "name": "krops-run", "optional": True} in obj["spec"]["postBuild"][
            "substituteFrom"
        ]


def test_ack_resources_adopt_across_the_pivot():
    for obj in _cloud_resources():
        if obj["apiVersion"].split("/")[0].endswith(".services.k8s.aws"):
            assert obj["metadata"]["annotations"]["services.k8s.aws/adoption-policy"] == "adopt-or-create"


def test_dropped_ownership_and_run_tags_are_found(tree):
    rel = AWS + "/workload-resources/eu-west-1-workload.yaml"
    edit(tree, rel, "      - key: krops.io/environment\n        value: aws\n", "")  # the Bucket's tagSet
    cp = CLUSTERS + "/eu-west-1/eu-west-1-workload.yaml"
    edit(tree, cp, "    krops.io/run-id: ${quote}${KROPS_RUN_ID:=unset}${quote}\n", "")  # the control plane's
    edit(tree, AWS + "/aws-global-iam/krops-reader.yaml", "      value: aws\n", "      value: azure\n")  # the Policy's
    assert sorted(found(check(tree))) == sorted(
        [
            (
                AWS + "/aws-global-iam/krops-reader.yaml",
                "Policy/default/krops-reader-assume",
                "tags",
                "spec.tags: krops.io/environment is 'azure', expected 'aws'",
            ),
            (
                cp,
                "AWSManagedControlPlane/default/eu-west-1-workload-control-plane",
                "tags",
                "spec.additionalTags lacks the run tags krops.io/run-id: add them from the krops-run ConfigMap "
                '(postBuild substituteFrom, e.g. "${KROPS_RUN_ID:=unset}")',
            ),
            (
                rel,
                "Bucket/default/krops-eu-west-1-workload-data",
                "tags",
                "spec.tagging.tagSet lacks the ownership tag "
                "krops.io/environment=aws (teardown finds what it owns by this tag)",
            ),
        ]
    )


# --- clusters -----------------------------------------------------------------------------------


def test_cluster_labels_pools_and_regions():
    objects = _objects(CLUSTERS + "/eu-north-1") + _objects(CLUSTERS + "/eu-west-1")
    clusters = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Cluster"}
    assert sorted(clusters) == ["eu-north-1-management", "eu-north-1-workload", "eu-west-1-workload"]
    for name, region in WORKLOADS.items():
        assert clusters[name]["metadata"]["labels"] == {"fluxcd": "enabled", "region": region}
    assert "fluxcd" not in (clusters["eu-north-1-management"]["metadata"].get("labels") or {})
    cps = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "AWSManagedControlPlane"}
    for name, cluster in clusters.items():
        ref = cluster["spec"]["controlPlaneRef"]
        assert (
            ref["kind"] == "AWSManagedControlPlane"
            and cluster["spec"]["infrastructureRef"]["kind"] == "AWSManagedCluster"
        )
        assert cps[ref["name"]]["identityRef"] == {"kind": "AWSClusterControllerIdentity", "name": "default"}
        assert cps[ref["name"]]["region"] == name.rsplit("-", 1)[0]
    pools = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "AWSManagedMachinePool"}
    for name in WORKLOADS:
        assert pools[name + "-x86"]["amiType"] == "AL2023_x86_64_STANDARD"
        assert pools[name + "-arm"]["amiType"] == "AL2023_ARM_64_STANDARD"
    assert [n for n, p in pools.items() if "NVIDIA" in p["amiType"]] == ["eu-north-1-workload-gpu"]
    machinepools = {
        o["spec"]["template"]["spec"]["infrastructureRef"]["name"] for o in objects if o["kind"] == "MachinePool"
    }
    assert machinepools == set(pools)


def test_workload_clusters_run_no_controllers_and_hold_no_credentials():
    for directory in ("workload/aws/base", "workload/aws/eu-north-01", "workload/aws/eu-west-01"):
        assert render.build(str(REPO / directory)) == []
    bag = {(o["kind"], o["metadata"]["name"]) for o in render.build(str(REPO / AWS / "flux-apps" / "workload-flux"))}
    assert bag == {
        ("Namespace", "flux-system"),
        ("ConfigMap", "cluster-vars"),
        ("Secret", "flux-github-pat"),
        ("FluxInstance", "flux"),
    }


# --- bootstrap.toml -------------------------------------------------------------------------------


def test_bootstrap_toml_names_match_the_tree():
    cfg = krops_config.load(path=str(REPO / "bootstrap.toml"), environ={})
    env, teardown = cfg.environment("aws"), cfg.teardown
    objects = (
        _cloud_resources({"AWS_ACCOUNT_ID": "111122223333"})
        + _objects(CLUSTERS + "/eu-north-1")
        + _objects(CLUSTERS + "/eu-west-1")
    )
    by_kind = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], {})[obj["metadata"]["name"]] = obj["spec"]
    assert env.mgmt_cluster in by_kind["Cluster"] and env.mgmt_region == "eu-north-1"
    assert by_kind["AWSManagedControlPlane"][env.mgmt_cluster + "-control-plane"]["region"] == env.mgmt_region
    assert {cp["eksClusterName"] for cp in by_kind["AWSManagedControlPlane"].values()} == {
        env.teardown.mgmt_eks_cluster_name
    } | {w.eks_cluster_name for w in env.teardown.aws_workloads}
    for workload in env.teardown.aws_workloads:
        name = workload.cluster_name
        assert WORKLOADS[name] == workload.region
        assert workload.rds_instance in {s["dbInstanceIdentifier"] for s in by_kind["DBInstance"].values()}
        bucket = teardown.s3_bucket_pattern.format(account_id="111122223333", cluster_name=name)
        assert bucket in {s["name"] for s in by_kind["Bucket"].values()}
        roles = [r.format(cluster_name=name) for r in teardown.global_iam_roles]
        assert set(roles) <= {s["name"] for s in by_kind["Role"].values()}
    assert set(env.teardown.capi_workloads) == set(WORKLOADS)
    assert set(teardown.global_iam_users) == {s["name"] for s in by_kind["User"].values()}
    fallback = env.move_fallbacks[0]
    doc = yaml.safe_load((REPO / fallback.manifest).read_text())
    assert (doc["kind"], doc["metadata"]["name"]) == ("AWSClusterControllerIdentity", fallback.name)
    assert "${" not in (REPO / fallback.manifest).read_text()  # the pivot applies it without substitution


def test_wrong_mgmt_region_and_workload_region_are_found(tree):
    edit(tree, "bootstrap.toml", 'mgmt-region = "eu-north-1"', 'mgmt-region = "eu-west-1"')
    edit(
        tree,
        "bootstrap.toml",
        'region = "eu-west-1"\ncluster-name = "eu-west-1-workload"',
        'region = "eu-central-1"\ncluster-name = "eu-west-1-workload"',
    )
    edit(
        tree, "bootstrap.toml", 'rds-instance = "krops-eu-north-1-workload-db"', 'rds-instance = "krops-eu-north-1-db"'
    )
    key = "environments.aws"
    assert sorted(found(check(tree))) == sorted(
        [
            (
                "bootstrap.toml",
                key + ".mgmt-region",
                "bootstrap",
                "mgmt-region eu-west-1 differs from the region of mgmt-cluster eu-north-1-management in the tree (eu-north-1)",
            ),
            (
                "bootstrap.toml",
                key + ".teardown.aws-workloads[0]",
                "bootstrap",
                "rds-instance krops-eu-north-1-db matches no "
                "DBInstance dbInstanceIdentifier (krops-eu-north-1-workload-db, krops-eu-west-1-workload-db)",
            ),
            (
                "bootstrap.toml",
                key + ".teardown.aws-workloads[1]",
                "bootstrap",
                "region eu-central-1 differs from the region of cluster eu-west-1-workload in the tree (eu-west-1)",
            ),
        ]
    )


# --- secrets ------------------------------------------------------------------------------------


def _sops_files():
    return sorted(p for p in (REPO / AWS).rglob("*.sops.yaml"))


def test_every_secret_is_sops_encrypted_with_placeholders():
    files = _sops_files()
    assert [str(p.relative_to(REPO)) for p in files] == [
        AWS + "/ack-controllers/aws-credentials.sops.yaml",
        AWS + "/capa-system/aws-credentials.sops.yaml",
        AWS + "/flux-apps/workload-flux/flux-github-pat.sops.yaml",
        AWS + "/konflate/konflate-token.sops.yaml",
    ]
    for path in files:
        doc = yaml.safe_load(path.read_text())
        assert all(v.startswith("ENC[AES256_GCM,") for v in doc["stringData"].values()), path
        plain = subprocess.run(
            [str(VENV_BIN / "sops"), "--decrypt", str(path)],
            capture_output=True,
            text=True,
            check=True,
            env=dict(os.environ, SOPS_AGE_KEY_FILE=str(AGE_KEY)),
        ).stdout
        values = yaml.safe_load(plain)["stringData"]
        assert all("REPLACE" in v or v == "git" for v in values.values()), path  # placeholders only
    # Every Kustomization that applies one of them decrypts with sops-age.
    for name in ("capa-system", "ack-controllers", "konflate"):
        obj = next(o for o in _objects(AWS) if o["metadata"]["name"] == name)
        assert obj["spec"]["decryption"] == {"provider": "sops", "secretRef": {"name": "sops-age"}}


def test_plaintext_secret_is_found(tree):
    (tree / AWS / "konflate" / "konflate-token.sops.yaml").write_text(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: konflate-token\n  namespace: konflate\n"
        "stringData:\n  KONFLATE_TOKEN: ghp_plain\n"
    )
    assert sorted(found(check(tree))) == sorted(
        [
            (
                AWS + "/konflate/konflate-token.sops.yaml",
                "Secret/konflate/konflate-token",
                "secrets",
                "SOPS file without sops metadata (mac and a key group): encrypt it with sops",
            ),
            (
                AWS + "/konflate/konflate-token.sops.yaml",
                "Secret/konflate/konflate-token",
                "secrets",
                "Secret rendered in plaintext by mgmt/aws/konflate/kustomization.yaml (secretGenerator?): commit it as a "
                "*.sops.yaml file instead",
            ),
        ]
    )
