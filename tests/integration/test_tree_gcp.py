# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The gcp tree (mgmt/gcp, workload/gcp-base, workload/europe-north1-01) and bootstrap.toml.

validate finds nothing in the real tree; the Flux dependsOn graph is the reconciliation order of
the GitOps-trees issue; every Google resource the tree declares carries the ownership label and
the run labels, with values GCP accepts; the cluster labels select what they should; and the
bootstrap.toml cross-checks hold. Planted defects in a copy of the tree are each reported.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path

import yaml

from tests.substrate.trees import SCHEMAS, copy_repo, edit, findings as found

import pytest

from ansible_collections.krops.platform.plugins.module_utils import flux
from ansible_collections.krops.platform.plugins.module_utils import ownership
from ansible_collections.krops.platform.plugins.module_utils import pivot
from ansible_collections.krops.platform.plugins.module_utils import render
from ansible_collections.krops.platform.plugins.module_utils import validate

REPO = Path(__file__).resolve().parents[2]
GCP = REPO / "mgmt" / "gcp"
PARTS = ("mgmt/gcp", "workload/gcp-base", "workload/europe-north1-01")
KCC_GROUP = ".cnrm.cloud.google.com"
# The test recipient of .sops.yaml's gcp rule: the committed credential Secrets are encrypted to it.
AGE_KEY = REPO / "tests" / "integration" / "fixtures" / "gcp-sops-test.agekey"
SOPS = REPO / ".venv" / "bin" / "sops"
# GCP label rules: keys start with a lowercase letter; keys and values are at most 63 of [a-z0-9_-].
LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
# The run labels take the GCP-safe forms of the run tags that flux_handoff adds to krops-run.
RUN_LABELS = {
    "krops-run-id": "KROPS_RUN_ID_LABEL",
    "krops-revision": "KROPS_REVISION_LABEL",
    "krops-expires-at": "KROPS_EXPIRES_AT_LABEL",
    "krops-run-kind": "KROPS_RUN_KIND_LABEL",
}

# The reconciliation order of the issue: Kustomization -> what it depends on.
CHAIN = {
    "gcp-vars": set(),
    "cert-manager": {"gcp-vars"},
    "capi-operator": {"cert-manager"},
    "capi-system": {"capi-operator"},
    "capg-system": {"capi-system"},
    "caaph-system": {"capi-system"},
    "flux-apps": {"caaph-system"},
    "kcc-operator": {"gcp-vars"},
    "kcc": {"kcc-operator"},
    "kcc-identity": {"kcc"},
    "workload-resources-networking": {"kcc-identity"},
    "workload-resources-storage": {"workload-resources-networking"},
    "workload-resources-postgres": {"workload-resources-networking"},
    "workload-resources-iam": {"workload-resources-storage", "workload-resources-postgres"},
    "cluster-europe-north1-management": {"capg-system", "gcp-vars"},
    "cluster-europe-north1-workload": {"capg-system", "gcp-vars"},
}


def decrypt(manifest):
    """The decrypted text of a committed SOPS file, with the test key of .sops.yaml's gcp rule."""
    proc = subprocess.run(
        [str(SOPS), "--decrypt", str(REPO / manifest)],
        env=dict(os.environ, SOPS_AGE_KEY_FILE=str(AGE_KEY)),
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout


def bootstrap_toml(root=REPO):
    return tomllib.loads((root / "bootstrap.toml").read_text())


def check(root):
    return validate.run(str(root), environments=["gcp"], schema_location=str(SCHEMAS))


def flux_kustomizations():
    return [
        o
        for o in render.build(str(GCP))
        if o["kind"] == "Kustomization" and o["apiVersion"].startswith("kustomize.toolkit.fluxcd.io/")
    ]


def component_objects():
    """(directory, object) of every object the Flux Kustomizations of mgmt/gcp apply from this repo."""
    result = []
    for ks in flux_kustomizations():
        if ks["spec"]["sourceRef"]["kind"] != "GitRepository":
            continue  # kcc-operator: the mirrored upstream artifact
        directory = REPO / ks["spec"]["path"]
        result.extend((ks["metadata"]["name"], obj) for obj in render.build(str(directory)))
    return result


def substituted(obj, variables):
    return render.substitute(obj, variables)


@pytest.fixture
def tree(tmp_path):
    return copy_repo(tmp_path, PARTS)


# --- the real tree -------------------------------------------------------------------------


def test_gcp_tree_has_zero_findings():
    result = check(REPO)
    assert found(result) == []
    summary = result["summary"]["gcp"]
    assert summary["objects"] > 50 and summary["directories"] >= 17


def test_dependson_graph_is_the_issue_chain():
    graph = {
        ks["metadata"]["name"]: {d["name"] for d in ks["spec"].get("dependsOn", [])} for ks in flux_kustomizations()
    }
    assert graph == CHAIN


def test_every_google_resource_carries_the_ownership_and_run_labels():
    # the values the lifecycle writes into krops-run, with a revision as CI sets it
    run = flux.run_tags({}, {"KROPS_REVISION": "main@sha1:0A1b2c3d4e5f60718293a4b5c6d7e8f901234567"}, "gcp", "24h")
    run.update(ownership.gcp_run_labels(run))
    assert not LABEL_VALUE.match(run["KROPS_EXPIRES_AT"]) and LABEL_VALUE.match(run["KROPS_EXPIRES_AT_LABEL"])
    variables = dict(run, GCP_PROJECT_ID="krops-example", GCP_PROJECT_NUMBER="123456789012")
    kcc = [
        (name, obj)
        for name, obj in component_objects()
        if obj["apiVersion"].split("/")[0].endswith(KCC_GROUP)
        and not obj["apiVersion"].startswith("core.cnrm.cloud.google.com/")
    ]
    capg = [
        (name, obj)
        for name, obj in component_objects()
        if obj["kind"] in ("GCPManagedCluster", "GCPManagedMachinePool")
    ]
    kinds = {obj["kind"] for _name, obj in kcc}
    assert {
        "ComputeAddress",
        "ServiceNetworkingConnection",
        "StorageBucket",
        "SQLInstance",
        "SQLDatabase",
        "SQLUser",
        "IAMServiceAccount",
        "IAMPolicyMember",
        "IAMWorkloadIdentityPool",
        "IAMWorkloadIdentityPoolProvider",
    } <= kinds
    assert len(capg) == 4
    for name, obj in kcc + capg:
        labels = (
            obj["metadata"].get("labels")
            if obj["kind"] not in ("GCPManagedCluster", "GCPManagedMachinePool")
            else obj["spec"]["additionalLabels"]
        )
        where = "{} {}/{}".format(name, obj["kind"], obj["metadata"]["name"])
        assert labels.get("krops-environment") == "gcp", where
        for label, variable in RUN_LABELS.items():
            # wrapped in the quote variable so Flux keeps a numeric-looking run value a string
            assert labels.get(label) == f"${{quote}}${{{variable}:=none}}${{quote}}", where
        # After Flux substitution every label Google receives is valid (Config Connector drops
        # keys with a '/' prefix, such as krops.io/environment, before it sends them).
        final = substituted(obj, variables)
        final_labels = (
            final["metadata"]["labels"]
            if labels is obj["metadata"].get("labels")
            else final["spec"]["additionalLabels"]
        )
        for key, value in final_labels.items():
            if "/" in key:
                continue
            assert LABEL_KEY.match(key) and LABEL_VALUE.match(str(value)), f"{where}: {key}={value}"
        assert {final_labels[k] for k in RUN_LABELS} == {run[v] for v in RUN_LABELS.values()}


def test_every_kubernetes_object_carries_the_environment_label():
    objects = (
        [("mgmt/gcp", o) for o in render.build(str(GCP))]
        + component_objects()
        + [("workload-flux", o) for o in render.build(str(GCP / "flux-apps" / "workload-flux"))]
    )
    resourceset = next(o for _n, o in component_objects() if o["kind"] == "ResourceSet")
    objects += [("flux-apps ResourceSet", o) for o in resourceset["spec"]["resources"]]
    missing = [
        "{}: {}/{}".format(name, o["kind"], o["metadata"]["name"])
        for name, o in objects
        if (o["metadata"].get("labels") or {}).get("krops.io/environment") != "gcp"
    ]
    assert missing == []


def test_cluster_labels_select_the_workload_only():
    clusters = {
        obj["metadata"]["name"]: obj
        for _n, obj in component_objects()
        if obj["kind"] == "Cluster" and obj["apiVersion"].startswith("cluster.x-k8s.io/")
    }
    assert set(clusters) == {"europe-north1-management", "europe-north1-workload"}
    workload = clusters["europe-north1-workload"]["metadata"]["labels"]
    assert workload["fluxcd"] == "enabled" and workload["region"] == "europe-north1"
    management = clusters["europe-north1-management"]["metadata"]["labels"]
    assert "fluxcd" not in management and "region" not in management
    proxy = next(o for _n, o in component_objects() if o["kind"] == "HelmChartProxy")
    assert proxy["spec"]["clusterSelector"]["matchLabels"] == {"fluxcd": "enabled"}


def test_bootstrap_toml_is_in_step_with_the_tree():
    env = bootstrap_toml()["environments"]["gcp"]
    boot = bootstrap_toml()["bootstrap"]
    objects = [obj for _n, obj in component_objects()]
    by_kind = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], {})[obj["metadata"]["name"]] = obj
    managed = by_kind["GCPManagedCluster"]
    # VPCs: exactly the ones CAPG creates.
    assert sorted(env["teardown"]["networks"]) == sorted(c["spec"]["network"]["name"] for c in managed.values())
    assert env["mgmt-cluster"] in by_kind["Cluster"]
    assert managed[env["mgmt-cluster"]]["spec"]["region"] == env["mgmt-region"]
    assert env["teardown"]["capi-workloads"] == [n for n in by_kind["Cluster"] if n != env["mgmt-cluster"]]
    # The flux-apps ResourceSet serves exactly the workload clusters, each with its overlay.
    inputs = by_kind["ResourceSet"]["flux-apps"]["spec"]["inputs"]
    assert [i["cluster"] for i in inputs] == env["teardown"]["capi-workloads"]
    for item in inputs:
        assert (REPO / "workload" / item["overlay"] / "kustomization.yaml").is_file()
    # The workload Flux syncs the same repository and branch as the management Flux.
    instance = render.build(str(GCP / "flux-apps" / "workload-flux"))[0]
    assert instance["spec"]["sync"]["url"] == boot["git-url"]
    assert instance["spec"]["sync"]["ref"] == "refs/heads/{}".format(boot["git-branch"])
    # The mgmt provider of the pool trusts the management GKE cluster's issuer.
    plane = by_kind["GCPManagedControlPlane"]["{}-control-plane".format(env["mgmt-cluster"])]["spec"]
    issuer = by_kind["IAMWorkloadIdentityPoolProvider"]["mgmt"]["spec"]["oidc"]["issuerUri"]
    assert issuer == "https://container.googleapis.com/v1/projects/${{GCP_PROJECT_ID}}/locations/{}/clusters/{}".format(
        plane["location"],
        plane["clusterName"],
    )
    # Pivot: the namespace is a pivot manifest (applied first), the credential Secrets are SOPS files
    # whose decrypted text uses GCP_WIF_PROVIDER.
    assert env["pivot-manifests"] == ["mgmt/gcp/config-connector/namespace.yaml"]
    assert env["pivot-sops-secrets"] == [
        "mgmt/gcp/capg-system/wif-credentials.sops.yaml",
        "mgmt/gcp/config-connector/wif-credentials.sops.yaml",
    ]
    for manifest in env["pivot-sops-secrets"]:
        assert "sops" in render.load_yaml_documents(str(REPO / manifest))[0]
        text = decrypt(manifest)
        assert "${GCP_WIF_PROVIDER:=mgmt}" in text
        secret = next(d for d in yaml.safe_load_all(text) if d)
        conf = json.loads(next(v for v in secret["stringData"].values() if v))
        assert conf["type"] == "external_account" and "private_key" not in conf
    assert env["pivot-manifest-vars"] == {"GCP_WIF_PROVIDER": "mgmt"}
    # CAPG reads the Secret through its operator configSecret and the patched credentials volume.
    provider = by_kind["InfrastructureProvider"]["gcp"]["spec"]
    assert provider["configSecret"]["name"] == "capg-wif-credentials"
    assert "secretName: capg-wif-credentials" in provider["patches"][0]["patch"]
    assert (
        by_kind["ConfigConnector"]["configconnector.core.cnrm.cloud.google.com"]["spec"]["credentialSecretName"]
        == "kcc-wif-credentials"
    )


def test_pivot_renders_the_credentials_for_the_mgmt_provider():
    """The pivot's own loader, with the kind cluster's flux-system ConfigMaps as it merges them."""
    env = bootstrap_toml()["environments"]["gcp"]
    gcp_vars = render.load_yaml_documents(str(GCP / "gcp-vars" / "configmap.yaml"))[0]["data"]
    variables = dict(gcp_vars, GCP_WIF_PROVIDER="kind")  # flux-system/gcp-wif on kind
    variables.update(env["pivot-manifest-vars"])
    audiences = []
    for manifest in env["pivot-sops-secrets"]:
        for doc in pivot.parse_documents(decrypt(manifest), manifest, variables):
            for value in (doc.get("stringData") or {}).values():
                if value:
                    audiences.append(json.loads(value)["audience"])
    assert (
        audiences
        == [
            "//iam.googleapis.com/projects/{}/locations/global/workloadIdentityPools/krops/providers/mgmt".format(
                gcp_vars["GCP_PROJECT_NUMBER"]
            )
        ]
        * 2
    )
    with pytest.raises(pivot.PivotError, match="GCP_PROJECT_NUMBER"):
        pivot.parse_documents(decrypt(env["pivot-sops-secrets"][0]), "x", {"GCP_WIF_PROVIDER": "mgmt"})


def test_cloud_sql_is_private_with_iam_auth_and_explicit_deletion_protection():
    sql = next(o for _n, o in component_objects() if o["kind"] == "SQLInstance")["spec"]
    assert sql["settings"]["deletionProtectionEnabled"] is True
    assert sql["settings"]["ipConfiguration"]["ipv4Enabled"] is False
    assert sql["settings"]["ipConfiguration"]["allocatedIpRange"] == "krops-europe-north1-workload-psa"
    assert {"name": "cloudsql.iam_authentication", "value": "on"} in sql["settings"]["databaseFlags"]


# --- planted defects ----------------------------------------------------------------------

KEY = "environments.gcp"
DEFECTS = {
    "guessed VPC name": (
        "bootstrap.toml",
        'networks = ["europe-north1-management", "europe-north1-workload"]',
        'networks = ["europe-north1-mgmt", "europe-north1-workload"]',
        [
            (
                "bootstrap.toml",
                KEY + ".teardown.networks",
                "bootstrap",
                "VPC europe-north1-management of the tree is not in "
                "teardown networks: teardown would leave it and everything in it behind",
            ),
            (
                "bootstrap.toml",
                KEY + ".teardown.networks",
                "bootstrap",
                "network europe-north1-mgmt is not a VPC of the tree "
                "(GCPManagedCluster spec.network.name or ComputeNetwork: europe-north1-management, europe-north1-workload)",
            ),
        ],
    ),
    "guessed service account": (
        "bootstrap.toml",
        'service-accounts = ["krops-europe-north1-workload"]',
        'service-accounts = ["krops-europe-north1-workloads", "krops-capg"]',
        [
            (
                "bootstrap.toml",
                KEY + ".teardown.service-accounts",
                "bootstrap",
                "service account krops-capg is abandoned by Config Connector in the tree (a prerequisite, "
                "docs/environments/gcp.md): teardown must not delete it; remove it from teardown service-accounts",
            ),
            (
                "bootstrap.toml",
                KEY + ".teardown.service-accounts",
                "bootstrap",
                "service account krops-europe-north1-workload of the tree is not in teardown service-accounts: "
                "teardown would leave it behind",
            ),
            (
                "bootstrap.toml",
                KEY + ".teardown.service-accounts",
                "bootstrap",
                "service account krops-europe-north1-workloads is not an IAMServiceAccount of the tree "
                "(resourceID: krops-capg, krops-europe-north1-workload)",
            ),
        ],
    ),
    "provider of another pool": (
        "bootstrap.toml",
        'workload-identity-providers = ["krops/kind", "krops/mgmt"]',
        'workload-identity-providers = ["krops/kind", "team/mgmt"]',
        [
            (
                "bootstrap.toml",
                KEY + ".teardown.workload-identity-providers",
                "bootstrap",
                "workload identity provider krops/mgmt is not in teardown workload-identity-providers: "
                "teardown would leave it behind",
            ),
            (
                "bootstrap.toml",
                KEY + ".teardown.workload-identity-providers",
                "bootstrap",
                "workload identity provider team/mgmt is neither an IAMWorkloadIdentityPoolProvider of the tree nor "
                "the wif-federate hook's (krops/kind, krops/mgmt)",
            ),
        ],
    ),
    "wrong mgmt-region": (
        "bootstrap.toml",
        'mgmt-region = "europe-north1"',
        'mgmt-region = "europe-west1"',
        [
            (
                "bootstrap.toml",
                KEY + ".mgmt-region",
                "bootstrap",
                "mgmt-region europe-west1 differs from the region of "
                "mgmt-cluster europe-north1-management in the tree (europe-north1)",
            )
        ],
    ),
    "missing pivot manifest": (
        "bootstrap.toml",
        '"mgmt/gcp/config-connector/namespace.yaml"',
        '"mgmt/gcp/kcc/namespace.yaml"',
        [("bootstrap.toml", KEY + ".pivot-manifests[0]", "bootstrap", "mgmt/gcp/kcc/namespace.yaml does not exist")],
    ),
    "dependsOn typo": (
        "mgmt/gcp/workload-resources/iam/flux-ks.yaml",
        "- name: workload-resources-postgres",
        "- name: workload-resources-postgre",
        [
            (
                "mgmt/gcp/workload-resources/iam/flux-ks.yaml",
                "Kustomization/flux-system/workload-resources-iam",
                "flux-graph",
                "dependsOn flux-system/workload-resources-postgre: no Kustomization of that name in environment gcp",
            )
        ],
    ),
    "Cloud SQL field misspelt": (
        "mgmt/gcp/workload-resources/postgres/sql-instance.yaml",
        "deletionProtectionEnabled: true",
        "deletionProtectionEnable: true",
        [
            (
                "mgmt/gcp/workload-resources/postgres/sql-instance.yaml",
                "SQLInstance/krops-gcp/krops-europe-north1-workload-db",
                "schema",
                "spec.settings: unknown field 'deletionProtectionEnable'",
            )
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(DEFECTS))
def test_planted_defect_is_caught(tree, name):
    rel, old, new, expected = DEFECTS[name]
    edit(tree, rel, old, new)
    assert found(check(tree)) == expected


def test_gcp_label_values_are_checked_with_a_runs_values_and_the_defaults(tree):
    """A label valid only through its default (the raw run tag) and a literal invalid value are both findings."""
    kustomization = "mgmt/gcp/workload-resources/storage/kustomization.yaml"
    edit(tree, kustomization, "${KROPS_EXPIRES_AT_LABEL:=none}", "${KROPS_EXPIRES_AT:=none}")
    edit(tree, kustomization, "krops-environment: gcp", "krops-environment: gcp\n      krops-owner: Team_A")
    assert found(check(tree)) == [
        (
            "mgmt/gcp/workload-resources/storage/bucket.yaml",
            "StorageBucket/krops-gcp/krops-europe-north1-workload-data",
            "tags",
            "metadata.labels.krops-expires-at: '2026-12-02T12:00:00Z' during a run (krops-run ConfigMap) is not a "
            "valid GCP label value (at most 63 lower-case letters, digits, _ and -); take the run tags' label forms "
            "(${KROPS_EXPIRES_AT_LABEL} and the other KROPS_*_LABEL variables of the krops-run ConfigMap)",
        ),
        (
            "mgmt/gcp/workload-resources/storage/bucket.yaml",
            "StorageBucket/krops-gcp/krops-europe-north1-workload-data",
            "tags",
            "metadata.labels.krops-owner: 'Team_A' is not a valid GCP label value (at most 63 lower-case letters, "
            "digits, _ and -); take the run tags' label forms (${KROPS_EXPIRES_AT_LABEL} and the other "
            "KROPS_*_LABEL variables of the krops-run ConfigMap)",
        ),
    ]


def test_gcp_label_forms_of_the_run_tags():
    assert ownership.gcp_label_value("2026-12-02T08:24:41Z") == "2026-12-02t08-24-41z"
    assert ownership.gcp_label_value("main@sha1:" + "A" * 60) == ("main-sha1-" + "a" * 60)[:63]
    tags = flux.run_tags({}, {}, "gcp", "none")
    labels = ownership.gcp_run_labels(tags)
    assert set(labels) == set(RUN_LABELS.values())
    assert all(ownership.GCP_LABEL_VALUE.match(v) for v in labels.values())


def test_unused_pivot_variable_is_found_where_every_pivot_file_is_readable(tree):
    """The encrypted pivot secrets could use any variable; with only readable pivot files, an unused one is found."""
    edit(tree, "bootstrap.toml", 'GCP_WIF_PROVIDER = "mgmt"', 'GCP_WIF_PROVIDER = "mgmt"\nGCP_WIF_PROVIDR = "mgmt"')
    assert found(check(tree)) == []
    text = (tree / "bootstrap.toml").read_text()
    start = text.index("pivot-sops-secrets = [", text.index("[environments.gcp]"))
    (tree / "bootstrap.toml").write_text(text[:start] + text[text.index("]\n", start) + 2 :])
    assert found(check(tree)) == [
        (
            "bootstrap.toml",
            KEY + ".pivot-manifest-vars.GCP_WIF_PROVIDER",
            "bootstrap",
            "GCP_WIF_PROVIDER is used by no pivot manifest (${GCP_WIF_PROVIDER}); remove it or use it",
        ),
        (
            "bootstrap.toml",
            KEY + ".pivot-manifest-vars.GCP_WIF_PROVIDR",
            "bootstrap",
            "GCP_WIF_PROVIDR is used by no pivot manifest (${GCP_WIF_PROVIDR}); remove it or use it",
        ),
    ]


def test_service_account_key_secret_is_refused(tree):
    key = {
        "type": "service_account",
        "project_id": "p",
        "private_key_id": "1",
        "private_key": "k",
        "client_email": "a@p.iam.gserviceaccount.com",
    }
    path = tree / "mgmt" / "gcp" / "capg-system" / "key.yaml"
    path.write_text(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: capg-key\n  namespace: capg-system\n"
        f"stringData:\n  credentials.json: '{json.dumps(key)}'\n"
    )
    edit(
        tree,
        "mgmt/gcp/capg-system/kustomization.yaml",
        "  - wif-credentials.sops.yaml",
        "  - wif-credentials.sops.yaml\n  - key.yaml",
    )
    assert found(check(tree)) == [
        (
            "mgmt/gcp/capg-system/key.yaml",
            "Secret/capg-system/capg-key",
            "secrets",
            "Secret committed unencrypted: encrypt it with sops (age, --encrypted-regex '^(data|stringData)$') "
            "into a *.sops.yaml file",
        )
    ]


def test_a_plain_credential_secret_is_refused_whatever_it_holds(tree):
    """Every Secret in Git is a SOPS file: an external_account configuration in data is no exception."""
    import base64

    conf = {
        "type": "external_account",
        "audience": "//iam.googleapis.com/x",
        "subject_token_type": "urn:x",
        "token_url": "https://sts.googleapis.com/v1/token",
        "credential_source": {"file": "/t"},
    }
    for extra, expected in (({}, 1), ({"client_secret": "s"}, 1)):
        encoded = base64.b64encode(json.dumps(dict(conf, **extra)).encode()).decode()
        path = tree / "mgmt" / "gcp" / "capg-system" / "extra.yaml"
        path.write_text(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: extra\n  namespace: capg-system\n"
            f"data:\n  credentials.json: {encoded}\n"
        )
        kust = tree / "mgmt" / "gcp" / "capg-system" / "kustomization.yaml"
        if "extra.yaml" not in kust.read_text():
            edit(
                tree,
                "mgmt/gcp/capg-system/kustomization.yaml",
                "  - wif-credentials.sops.yaml",
                "  - wif-credentials.sops.yaml\n  - extra.yaml",
            )
        secrets = [f for f in found(check(tree)) if f[2] == "secrets"]
        assert len(secrets) == expected, secrets
