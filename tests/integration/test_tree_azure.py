# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The azure GitOps tree: validate finds nothing, and the facts validate cannot see hold.

The tree is rendered with kustomize (kubectl) and read independently of validate: the Flux
dependsOn graph is the issue's chain, every Azure resource (also those embedded in CAPZ's
AzureASOManaged* objects) carries the krops ownership and run tags where its API has tags,
the Clusters carry the right labels, bootstrap.toml and the bootstrap hook agree with what
the tree declares, and no Azure secret is at rest. Planted defects must be reported.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils import render
from ansible_collections.krops.platform.plugins.module_utils import validate
from tests.substrate.fixtures import REPO, VENV_BIN
from tests.substrate.trees import SCHEMAS, edit, findings as found

AZ = "mgmt/azure"
PARTS = ("mgmt/azure", "workload/azure-base", "workload/swedencentral-01")
TEST_AGE_KEY = Path(__file__).parent / "fixtures" / "azure-test-age.agekey"

# Shared chart pins of docs/upstream-facts.md that the azure tree uses. Until bootstrap.toml
# [charts] carries them (the issue-10 change), the tree copy gets them; afterwards that is a no-op.
CHART_PINS = {"flux-operator": "0.58.1", "cert-manager": "v1.21.1", "capi-operator": "0.28.0"}

# The issue's chain: cert-manager > capi-operator > capi-system > capz-system; capz-system >
# azure-identity > aso-workload-identity > workload-resources; capz-system and azure-identity >
# the swedencentral clusters; capi-system > caaph-system > flux-apps.
CHAIN = {
    "cert-manager": [],
    "capi-operator": ["cert-manager"],
    "capi-system": ["capi-operator"],
    "capz-system": ["capi-system"],
    "azure-identity": ["capz-system"],
    "aso-workload-identity": ["azure-identity"],
    "workload-resources": ["aso-workload-identity"],
    "cluster-swedencentral-management": ["azure-identity", "capz-system"],
    "cluster-swedencentral-workload": ["azure-identity", "capz-system"],
    "caaph-system": ["capi-system"],
    "flux-apps": ["caaph-system"],
}
# the run tags as the tree writes them: wrapped in the quote variable so Flux keeps them strings
OWNER_TAGS = {
    "krops-environment": "azure",
    "krops-run-id": "${quote}${KROPS_RUN_ID:=unknown}${quote}",
    "krops-revision": "${quote}${KROPS_REVISION:=unknown}${quote}",
    "krops-expires-at": "${quote}${KROPS_EXPIRES_AT:=none}${quote}",
    "krops-run-kind": "${quote}${KROPS_RUN_KIND:=manual}${quote}",
}
EMBEDDING = ("AzureASOManagedCluster", "AzureASOManagedControlPlane", "AzureASOManagedMachinePool")


# --- helpers ------------------------------------------------------------------------------


def _pinned_config(text):
    """bootstrap.toml text with [charts] set to CHART_PINS (nothing else changes)."""
    block = "[charts]\n" + "".join('{} = "{}"\n'.format(*kv) for kv in CHART_PINS.items())
    new, count = re.subn(r"(?ms)^\[charts\]\n.*?(?=^\n|^\[)", block, text, count=1)
    assert count == 1
    return new


@pytest.fixture
def tree(tmp_path):
    """A copy of the azure tree with bootstrap.toml and .yamllint; returns its root Path."""
    root = tmp_path / "repo"
    for part in PARTS:
        shutil.copytree(REPO / part, root / part)
    shutil.copy(REPO / ".yamllint", root / ".yamllint")
    (root / "bootstrap.toml").write_text(_pinned_config((REPO / "bootstrap.toml").read_text()))
    return root


def check(root):
    return validate.run(str(root), environments=["azure"], schema_location=str(SCHEMAS))


@pytest.fixture(scope="module")
def rendered():
    """Every object the azure tree renders (each kustomization directory once), keyed by directory."""
    dirs = []
    for part in PARTS:
        dirs += render.find_kustomization_dirs(str(REPO / part))
    built = render.render_directories(dirs)
    for directory, result in built.items():
        assert not isinstance(result, render.RenderError), result
    return {str(Path(d).relative_to(REPO)): objs for d, objs in built.items()}


def _component_objects(rendered):
    """Objects the Flux Kustomizations apply (root directories hold only flux-ks and azure-vars)."""
    skip = {AZ, "workload/azure-base"}  # azure-base is rendered through swedencentral-01
    return [(d, o) for d, objs in sorted(rendered.items()) if d not in skip for o in objs]


def _with_embedded(pairs):
    """The objects plus the ASO resources embedded in AzureASOManaged* (as CAPZ creates them)."""
    out = []
    for directory, obj in pairs:
        out.append((directory, obj, None))
        if obj["kind"] in EMBEDDING:
            for inner in obj["spec"]["resources"]:
                out.append((directory, inner, "{}/{}".format(obj["kind"], obj["metadata"]["name"])))
    return out


def _schema_spec(api_version, kind):
    group, version = api_version.split("/")
    path = SCHEMAS / group / (f"{kind.lower()}_{version}.json")
    assert path.is_file(), f"no vendored schema for {kind} {api_version}"
    return json.loads(path.read_text())["properties"]["spec"]


def _kustomizations(rendered):
    return {o["metadata"]["name"]: o for o in rendered[AZ] if o["kind"] == "Kustomization"}


def _settings():
    return krops_config.load(path=str(REPO / "bootstrap.toml"), environ={}).environment("azure")


# --- validate -----------------------------------------------------------------------------


def test_azure_tree_has_zero_findings(tree):
    result = check(tree)
    assert found(result) == []
    summary = result["summary"]["azure"]
    assert summary["directories"] == 14  # 13 under mgmt/azure, and workload/swedencentral-01
    assert summary["objects"] >= 50


def test_tree_chart_versions_are_the_shared_pins(rendered):
    versions = {}
    for directory, obj in _component_objects(rendered):
        if obj["kind"] == "HelmRelease":
            versions.setdefault(obj["spec"]["chart"]["spec"]["chart"], set()).add(
                obj["spec"]["chart"]["spec"]["version"]
            )
        if obj["kind"] == "HelmChartProxy":
            versions.setdefault(obj["spec"]["chartName"], set()).add(obj["spec"]["version"])
    assert versions == {
        "cert-manager": {CHART_PINS["cert-manager"]},
        "cluster-api-operator": {CHART_PINS["capi-operator"]},
        "flux-operator": {CHART_PINS["flux-operator"]},
    }


def test_planted_resource_group_rename_is_caught(tree):
    edit(
        tree,
        AZ + "/clusters/swedencentral-workload/cluster.yaml",
        "        name: swedencentral-workload\n      spec:",
        "        name: swedencentral-workloads\n      spec:",
    )
    assert found(check(tree)) == [
        (
            "bootstrap.toml",
            "environments.azure.teardown.resource-groups",
            "bootstrap",
            "resource group swedencentral-workload is not a ResourceGroup of the tree "
            "(swedencentral-data, swedencentral-management, swedencentral-workloads)",
        )
    ]


def test_planted_typo_in_an_embedded_resource_is_caught(tree):
    edit(tree, AZ + "/clusters/swedencentral-workload/control-plane.yaml", "        dnsPrefix:", "        dnsPrefx:")
    result = found(check(tree))
    assert len(result) == 1
    file, obj, rule, message = result[0]
    assert (file, obj, rule) == (
        AZ + "/clusters/swedencentral-workload/control-plane.yaml",
        "ManagedCluster/default/swedencentral-workload "
        "(embedded in AzureASOManagedControlPlane/default/swedencentral-workload)",
        "schema",
    )
    assert "dnsPrefx" in message


def test_planted_dependency_typo_is_caught(tree):
    edit(
        tree,
        AZ + "/workload-resources/flux-ks.yaml",
        "    - name: aso-workload-identity",
        "    - name: aso-workload-identiy",
    )
    assert found(check(tree)) == [
        (
            AZ + "/workload-resources/flux-ks.yaml",
            "Kustomization/flux-system/workload-resources",
            "flux-graph",
            "dependsOn flux-system/aso-workload-identiy: no Kustomization of that name in environment azure",
        )
    ]


# --- what validate does not check ---------------------------------------------------------


def test_depends_on_graph_is_the_issue_chain(rendered):
    graph = {
        name: sorted(d["name"] for d in ks["spec"].get("dependsOn", []))
        for name, ks in _kustomizations(rendered).items()
    }
    assert graph == CHAIN
    for name, ks in _kustomizations(rendered).items():
        assert ks["spec"]["sourceRef"] == {"kind": "GitRepository", "name": "flux-system"}, name
        assert ks["spec"]["prune"] is True and ks["spec"]["interval"] and ks["spec"]["retryInterval"], name


def test_every_azure_resource_carries_the_ownership_and_run_tags(rendered):
    kss = _kustomizations(rendered)
    by_path = {ks["spec"]["path"].lstrip("./"): ks for ks in kss.values()}
    seen, untagged = set(), set()
    for directory, obj, parent in _with_embedded(_component_objects(rendered)):
        if not obj["apiVersion"].split("/")[0].endswith(".azure.com"):
            continue
        label = "{} {}{}".format(obj["kind"], obj["metadata"]["name"], f" in {parent}" if parent else "")
        seen.add((obj["kind"], obj["metadata"]["name"]))
        if "tags" in _schema_spec(obj["apiVersion"], obj["kind"])["properties"]:
            assert obj["spec"].get("tags") == OWNER_TAGS, label
            # the run tags are filled from flux-system/krops-run by the Kustomization applying it
            refs = by_path[directory]["spec"]["postBuild"]["substituteFrom"]
            assert {"kind": "ConfigMap", "name": "krops-run"} in refs, label
        else:
            untagged.add(obj["kind"])
    assert untagged == {
        "FederatedIdentityCredential",
        "VirtualNetworksSubnet",
        "StorageAccountsBlobService",
        "StorageAccountsBlobServicesContainer",
    }
    for cluster in ("swedencentral-management", "swedencentral-workload"):
        assert {
            ("ResourceGroup", cluster),
            ("ManagedCluster", cluster),
            ("ManagedClustersAgentPool", cluster + "-pool0"),
        } <= seen
    assert {
        ("ResourceGroup", "swedencentral-data"),
        ("UserAssignedIdentity", "krops-capz"),
        ("FlexibleServer", "swedencentral-data"),
        ("StorageAccount", "swedencentral-data"),
        ("StorageAccountsBlobServicesContainer", "swedencentral-data-data"),
    } <= seen


def test_embedded_resources_match_their_vendored_schemas(rendered):
    """validate checks them too; this reads the schemas directly so a validate regression shows."""
    from ansible_collections.krops.platform.plugins.module_utils import validate_schema

    store = validate_schema.SchemaStore(str(SCHEMAS))
    count = 0
    for directory, obj, parent in _with_embedded(_component_objects(rendered)):
        if parent:
            count += 1
            inner = json.loads(json.dumps(obj))
            inner["metadata"]["namespace"] = "default"
            assert store.errors(inner) == [], (parent, obj["kind"])
    assert count == 6


def test_cluster_labels(rendered):
    clusters = {o["metadata"]["name"]: o for d, o in _component_objects(rendered) if o["kind"] == "Cluster"}
    assert sorted(clusters) == ["swedencentral-management", "swedencentral-workload"]
    assert clusters["swedencentral-workload"]["metadata"]["labels"] == {
        "fluxcd": "enabled",
        "region": "swedencentral",
        "krops.io/environment": "azure",
    }
    assert clusters["swedencentral-management"]["metadata"]["labels"] == {"krops.io/environment": "azure"}
    for directory, objs in rendered.items():
        for obj in objs:
            assert (obj["metadata"].get("labels") or {}).get("krops.io/environment") == "azure", (
                directory,
                obj["kind"],
            )
    # the flux-apps HelmChartProxy reaches exactly the clusters labelled fluxcd: enabled
    proxy = next(o for o in rendered[AZ + "/flux-apps"] if o["kind"] == "HelmChartProxy")
    assert proxy["spec"]["clusterSelector"] == {"matchLabels": {"fluxcd": "enabled"}}
    resourceset = next(o for o in rendered[AZ + "/flux-apps"] if o["kind"] == "ResourceSet")
    assert [i["cluster"] for i in resourceset["spec"]["inputs"]] == ["swedencentral-workload"]


def test_bootstrap_toml_agrees_with_the_tree(rendered):
    settings = _settings()
    objects = _with_embedded(_component_objects(rendered))
    clusters = {o["metadata"]["name"] for d, o, p in objects if o["kind"] == "Cluster"}
    groups = {
        o.get("spec", {}).get("azureName") or o["metadata"]["name"]
        for d, o, p in objects
        if o["kind"] == "ResourceGroup"
    }
    assert settings.mgmt_cluster == "swedencentral-management" and settings.mgmt_cluster in clusters
    assert sorted(settings.teardown.capi_workloads) == sorted(clusters - {settings.mgmt_cluster})
    # exactly the groups the tree creates: none left behind, none deleted that the tree does not create
    assert sorted(settings.teardown.resource_groups) == sorted(groups)
    azure_vars = next(o for o in rendered[AZ] if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "azure-vars")
    assert settings.mgmt_region == azure_vars["data"]["AZURE_LOCATION"] == "swedencentral"
    locations = {o["spec"]["location"] for d, o, p in objects if o["apiVersion"].startswith("resources.azure.com/")}
    assert locations == {"${AZURE_LOCATION}"}
    assert settings.workload_path == "workload/swedencentral-01"
    fluxinstance = render.load_yaml_documents(str(REPO / AZ / "flux-apps/workload-flux/fluxinstance.yaml"))[0]
    assert fluxinstance["spec"]["sync"]["path"] == "workload/${REGION}-01"
    assert (
        fluxinstance["spec"]["sync"]["url"]
        == krops_config.load(path=str(REPO / "bootstrap.toml"), environ={}).bootstrap.git_url
    )
    assert settings.pivot_manifests == ()
    for rel in settings.pivot_sops_secrets:
        docs = render.load_yaml_documents(str(REPO / rel))
        assert [d["kind"] for d in docs] == ["Secret"] and "sops" in docs[0]
        component = rel.rsplit("/", 2)[-2]
        assert (
            rel.rsplit("/", 1)[-1]
            in yaml.safe_load((REPO / AZ / component / "kustomization.yaml").read_text())["resources"]
        )


def test_identity_agrees_with_the_bootstrap_hook(rendered):
    """The arc-federate hook federates the kind issuer on krops-capz in the management cluster's
    resource group; the tree adopts that identity and federates the management cluster's issuer."""
    defaults = yaml.safe_load((REPO / "roles/bootstrap/defaults/main.yml").read_text())
    inventory = yaml.safe_load((REPO / "inventories/azure/group_vars/all.yml").read_text())
    objects = [o for d, o, p in _with_embedded(_component_objects(rendered))]
    identity = next(o for o in objects if o["kind"] == "UserAssignedIdentity")
    assert (
        identity["metadata"]["name"]
        == defaults["bootstrap_azure_identity_name"]
        == inventory["bootstrap_azure_identity_name"]
    )
    assert identity["spec"]["owner"] == {
        "armId": "/subscriptions/${AZURE_SUBSCRIPTION_ID}/resourceGroups/" + _settings().mgmt_cluster
    }
    assert identity["metadata"]["annotations"]["serviceoperator.azure.com/reconcile-policy"] == "detach-on-delete"
    assert "mgmt-cluster" in defaults["bootstrap_azure_resource_group"]
    creds = [o for o in objects if o["kind"] == "FederatedIdentityCredential"]
    hook = defaults["bootstrap_azure_federated_subjects"]
    assert sorted(c["spec"]["subject"] for c in creds) == sorted(s["subject"] for s in hook)
    # the teardown removes exactly the hook's credentials (by name) and never the tree's
    teardown = yaml.safe_load((REPO / "roles/teardown/defaults/main.yml").read_text())
    assert teardown["teardown_azure_federated_credential_names"] == [s["name"] for s in hook]
    assert not {c["metadata"]["name"] for c in creds} & {s["name"] for s in hook}
    assert not any(c["metadata"]["name"].startswith("krops-kind-") for c in creds)
    mgmt = next(
        o for o in objects if o["kind"] == "ManagedCluster" and o["metadata"]["name"] == "swedencentral-management"
    )
    for cred in creds:
        assert cred["spec"]["owner"] == {"name": "krops-capz"}
        assert cred["spec"]["audiences"] == ["api://AzureADTokenExchange"]
        assert cred["spec"]["issuerFromConfig"] == mgmt["spec"]["operatorSpec"]["configMaps"]["oidcIssuerProfile"]
    assert mgmt["spec"]["oidcIssuerProfile"] == {"enabled": True}
    assert mgmt["spec"]["securityProfile"]["workloadIdentity"] == {"enabled": True}
    # the credentials gate the pivot: aso-workload-identity is Ready only once they are
    checks = {
        (c["kind"], c["name"]) for c in _kustomizations(rendered)["aso-workload-identity"]["spec"]["healthChecks"]
    }
    assert {("FederatedIdentityCredential", c["metadata"]["name"]) for c in creds} <= checks
    # and the pivot waits for exactly that Kustomization (bootstrap.toml pivot-wait-kustomizations)
    assert _settings().pivot_wait_kustomizations == ("aso-workload-identity",)
    assert set(_settings().pivot_wait_kustomizations) <= set(_kustomizations(rendered))
    # The AzureASOManaged* kinds take no identityRef (their CRDs at v1.25.1 have none): ASO authenticates
    # their resources with the namespace's aso-credential, so an AzureClusterIdentity would be referenced
    # by nothing.
    assert not [o for o in objects if o["kind"] == "AzureClusterIdentity"]
    for kind in ("AzureASOManagedCluster", "AzureASOManagedControlPlane", "AzureASOManagedMachinePool"):
        schema = json.loads((SCHEMAS / "infrastructure.cluster.x-k8s.io" / f"{kind.lower()}_v1beta1.json").read_text())
        assert "identityRef" not in json.dumps(schema), kind


def test_no_azure_secret_at_rest(rendered, tmp_path):
    secrets = [(d, o) for d, objs in rendered.items() for o in objs if o["kind"] == "Secret"]
    assert sorted(o["metadata"]["name"] for d, o in secrets) == ["aso-credential", "azure-variables"]
    decrypted = {}
    for rel in _settings().pivot_sops_secrets:
        proc = subprocess.run(
            [str(VENV_BIN / "sops"), "--decrypt", str(REPO / rel)],
            capture_output=True,
            text=True,
            env={"SOPS_AGE_KEY_FILE": str(TEST_AGE_KEY), "PATH": "/usr/bin:/bin"},
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        doc = yaml.safe_load(proc.stdout)
        decrypted[doc["metadata"]["name"]] = doc["stringData"]
    # kustomize must not change them: SOPS's MAC covers every value, metadata included (a labels or
    # namespace transformer in their kustomization would make decryption fail with "MAC mismatch")
    for directory, secret in secrets:
        raw = next(
            r for r in _settings().pivot_sops_secrets if r.endswith("/{}.sops.yaml".format(secret["metadata"]["name"]))
        )
        assert secret == render.load_yaml_documents(str(REPO / raw))[0], directory
    assert sorted(decrypted["aso-credential"]) == ["AZURE_CLIENT_ID", "AZURE_SUBSCRIPTION_ID", "AZURE_TENANT_ID"]
    assert sorted(decrypted["azure-variables"]) == ["ADDITIONAL_ASO_CRDS", "EXP_MACHINE_POOL"]
    objects = [o for d, o, p in _with_embedded(_component_objects(rendered))]
    postgres = next(o for o in objects if o["kind"] == "FlexibleServer")
    assert postgres["spec"]["authConfig"] == {
        "activeDirectoryAuth": "Enabled",
        "passwordAuth": "Disabled",
        "tenantId": "${AZURE_TENANT_ID}",
    }
    assert "administratorLoginPassword" not in postgres["spec"]
    assert postgres["spec"]["network"]["publicNetworkAccess"] == "Disabled"
    storage = next(o for o in objects if o["kind"] == "StorageAccount")
    assert storage["spec"]["allowSharedKeyAccess"] is False and storage["spec"]["allowBlobPublicAccess"] is False
    # every ASO kind the tree uses is installed by CAPZ's ASO (its own set or ADDITIONAL_ASO_CRDS)
    capz_own = {
        "resources.azure.com/ResourceGroup",
        "containerservice.azure.com/ManagedCluster",
        "containerservice.azure.com/ManagedClustersAgentPool",
        "network.azure.com/VirtualNetwork",
        "network.azure.com/VirtualNetworksSubnet",
    }
    extra = set(decrypted["azure-variables"]["ADDITIONAL_ASO_CRDS"].split(";"))
    used = {
        "{}/{}".format(o["apiVersion"].split("/")[0], o["kind"])
        for o in objects
        if o["apiVersion"].split("/")[0].endswith(".azure.com")
    }
    assert used <= capz_own | extra and not extra - used


def test_mgmt_region_is_read_by_config():
    assert _settings().mgmt_region == "swedencentral"
    text = (REPO / "bootstrap.toml").read_text()
    assert text.count('mgmt-region = "swedencentral"\n') == 1
    with pytest.raises(krops_config.ConfigError, match="environments.azure.mgmt-region: .*required for azure"):
        krops_config.loads(text.replace('mgmt-region = "swedencentral"\n', ""), environ={})
    with pytest.raises(krops_config.ConfigError, match="environments.azure.mgmt-region"):
        krops_config.loads(text.replace('mgmt-region = "swedencentral"', "mgmt-region = 5"), environ={})
