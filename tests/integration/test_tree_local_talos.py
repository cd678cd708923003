# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The local-talos tree: clean under validate, reconciled in the documented order, in step with
bootstrap.toml, every object marked as krops', the BMC credentials only SOPS-encrypted, and the
planted defects a reviewer would miss are reported exactly.

Defects are planted in a copy of the tree (mgmt/local-talos, bootstrap.toml, .yamllint).
"""

from __future__ import annotations

import os
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

ENV = "local-talos"
LT = "mgmt/local-talos"
MGMT = LT + "/clusters/management"
AGE_KEY = Path(__file__).parent / "fixtures" / "local-talos.agekey"
OWNER = {"krops.io/environment": "local-talos"}

# The chain of issue 14: cert-manager > capi-operator > capi-system > capt-system, cabpt-system
# and cacppt-system > clusters/management; the Tinkerbell stack (its own root) > clusters/management.
CHAIN = {
    "tinkerbell": [],
    "cert-manager": [],
    "capi-operator": ["cert-manager"],
    "capi-system": ["capi-operator"],
    "capt-system": ["capi-system"],
    "cabpt-system": ["capi-system"],
    "cacppt-system": ["capi-system"],
    "cluster-local-talos-management": ["tinkerbell", "capt-system", "cabpt-system", "cacppt-system"],
}
SITE_VARIABLES = {
    "CONTROL_PLANE_ENDPOINT",
    "MACHINE_MAC",
    "MACHINE_IP",
    "MACHINE_NETMASK",
    "MACHINE_GATEWAY",
    "MACHINE_NAMESERVER",
    "INSTALL_DISK",
    "BMC_HOST",
    "TALOS_DISK_IMAGE_URL",
    "TALOS_INSTALLER_IMAGE",
}
TINKERBELL_VARIABLES = {"TINKERBELL_IP", "TINKERBELL_ARTIFACTS_IP"}
TINK = LT + "/tinkerbell"


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(REPO / LT, root / LT)
    for name in ("bootstrap.toml", ".yamllint"):
        shutil.copy(REPO / name, root / name)
    return root


def check(root):
    return validate.run(str(root), environments=[ENV], schema_location=str(SCHEMAS))


def rendered():
    """Every object of the tree as kustomize renders it: {directory: [objects]}."""
    dirs = render.find_kustomization_dirs(str(REPO / LT))
    return {os.path.relpath(d, REPO): objs for d, objs in render.render_directories(dirs).items()}


# --- the real tree ------------------------------------------------------------------------


def test_local_talos_tree_has_zero_findings():
    result = check(REPO)
    assert found(result) == []
    summary = result["summary"][ENV]
    assert summary["directories"] == 9 and summary["objects"] >= 33


def test_dependson_graph_is_the_chain():
    objects = render.build(str(REPO / LT))
    kss = [o for o in objects if o["kind"] == "Kustomization"]
    assert {o["metadata"]["name"]: sorted(d["name"] for d in o["spec"].get("dependsOn", [])) for o in kss} == {
        name: sorted(deps) for name, deps in CHAIN.items()
    }
    for obj in kss:
        spec = obj["spec"]
        assert obj["apiVersion"] == "kustomize.toolkit.fluxcd.io/v1" and obj["metadata"]["namespace"] == "flux-system"
        assert spec["sourceRef"] == {"kind": "GitRepository", "name": "flux-system"}  # sync = "git"
        name = obj["metadata"]["name"]
        assert spec["path"] == "./" + LT + "/" + ("clusters/management" if name.startswith("cluster-") else name)
        assert spec["prune"] is True and {"interval", "retryInterval", "timeout"} <= set(spec)
    # Management only: no add-on provider, no kubeadm, no workload cluster.
    kinds = {(o["kind"], o["metadata"]["name"]) for objs in rendered().values() for o in objs}
    assert ("AddonProvider", "helm") not in kinds and not any(
        k in kinds for k in (("BootstrapProvider", "kubeadm"), ("ControlPlaneProvider", "kubeadm"))
    )
    assert [n for k, n in kinds if k == "Cluster"] == ["local-talos-management"]


def test_bootstrap_toml_cross_checks_hold():
    cfg = krops_config.load(path=str(REPO / "bootstrap.toml"), environ={})
    env = cfg.environment(ENV)
    assert env.sync == "git" and env.sync_path == LT and not env.workload_path
    assert env.mgmt_cluster == "local-talos-management"
    assert (env.infra_provider_namespace, env.infra_provider_name) == ("capt-system", "tinkerbell-tinkerbell")
    assert env.teardown.capi_workloads == () and env.teardown.hardware_release is True
    assert not env.pivot_sops_secrets and not env.move_fallbacks
    providers = []
    for manifest in env.provider_manifests:
        for doc in render.load_yaml_documents(str(REPO / manifest)):
            providers.append((doc["kind"], doc["metadata"]["namespace"], doc["metadata"]["name"]))
    # Exactly the providers this environment installs, each also part of the rendered tree.
    assert providers == [
        ("CoreProvider", "capi-system", "cluster-api"),
        ("InfrastructureProvider", "capt-system", "tinkerbell-tinkerbell"),
        ("BootstrapProvider", "cabpt-system", "talos"),
        ("ControlPlaneProvider", "cacppt-system", "talos"),
    ]
    tree_providers = {
        (o["kind"], o["metadata"]["namespace"], o["metadata"]["name"])
        for objs in rendered().values()
        for o in objs
        if o["apiVersion"].startswith("operator.")
    }
    assert tree_providers == set(providers)
    # The chart pins equal bootstrap.toml [charts] (what the bootstrap installs before Flux).
    charts = {
        o["spec"]["chart"]["spec"]["chart"]: o["spec"]["chart"]["spec"]["version"]
        for objs in rendered().values()
        for o in objs
        if o["kind"] == "HelmRelease" and "chart" in o["spec"]
    }
    assert charts == {
        "cert-manager": cfg.charts.cert_manager,
        "cluster-api-operator": cfg.charts.capi_operator,
    }


def test_every_object_carries_the_ownership_label():
    objects = [(d, o) for d, objs in rendered().items() for o in objs]
    assert len(objects) >= 33
    unmarked = [
        (d, validate.object_id(o))
        for d, o in objects
        if (o.get("metadata", {}).get("labels") or {}).get("krops.io/environment") != "local-talos"
    ]
    assert unmarked == []


def test_hardware_comes_from_site_values_only():
    site = yaml.safe_load((REPO / LT / "site-values.yaml").read_text())
    assert (
        site["metadata"] == {"name": "local-talos-site", "namespace": "flux-system"}
        and set(site["data"]) == SITE_VARIABLES | TINKERBELL_VARIABLES
    )
    text = "".join((REPO / MGMT / name).read_text() for name in ("cluster.yaml", "control-plane.yaml", "hardware.yaml"))
    # Not one site value is written into the cluster folder; every variable used is defined.
    for value in site["data"].values():
        assert value not in text
    assert set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", text)) == SITE_VARIABLES
    ks = yaml.safe_load((REPO / MGMT / "flux-ks.yaml").read_text())
    assert ks["spec"]["postBuild"] == {"substituteFrom": [{"kind": "ConfigMap", "name": "local-talos-site"}]}
    hw = yaml.safe_load_all((REPO / MGMT / "hardware.yaml").read_text())
    hardware = next(d for d in hw if d["kind"] == "Hardware")
    # In the management namespace (clusterctl move carries it) and claimed by exact label.
    assert (hardware["metadata"]["name"], hardware["metadata"]["namespace"]) == ("talos-mgmt-01", "default")
    tmt = [
        d
        for d in yaml.safe_load_all((REPO / MGMT / "control-plane.yaml").read_text())
        if d["kind"] == "TinkerbellMachineTemplate"
    ][0]
    assert tmt["spec"]["template"]["spec"]["hardwareAffinity"]["required"] == [
        {"labelSelector": {"matchLabels": {"krops.io/hardware": "talos-mgmt-01"}}}
    ]


def test_tinkerbell_stack_comes_from_the_oci_chart_with_site_values():
    objs = {(o["kind"], o["metadata"]["name"]): o for o in rendered()[TINK]}
    assert set(objs) == {("Namespace", "tinkerbell"), ("OCIRepository", "tinkerbell"), ("HelmRelease", "tinkerbell")}
    source = objs[("OCIRepository", "tinkerbell")]["spec"]
    # The chart tag is the release tag, leading v included (tinkerbell/tinkerbell Makefile, RELEASING.md).
    assert (source["url"], source["ref"]) == ("oci://ghcr.io/tinkerbell/charts/tinkerbell", {"tag": "v0.25.0"})
    assert source["layerSelector"]["mediaType"] == "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
    release = objs[("HelmRelease", "tinkerbell")]
    assert release["metadata"]["namespace"] == "tinkerbell"
    assert release["spec"]["chartRef"] == {"kind": "OCIRepository", "name": "tinkerbell"}
    # The chart's three required values (helm/tinkerbell/README.md @ v0.25.0), addresses from the site.
    assert release["spec"]["values"] == {
        "publicIP": "${TINKERBELL_IP}",
        "artifactsFileServer": "http://${TINKERBELL_ARTIFACTS_IP}:7173",
        "trustedProxies": ["10.244.0.0/16"],
    }
    site = yaml.safe_load((REPO / LT / "site-values.yaml").read_text())["data"]
    text = "".join((REPO / TINK / n).read_text() for n in ("helmrelease.yaml", "ocirepository.yaml"))
    assert set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", text)) == TINKERBELL_VARIABLES <= set(site)
    assert not any(site[name] in text for name in TINKERBELL_VARIABLES)
    # The pod CIDR it trusts is the one of both clusters that run it: the Cluster's pods block here.
    cluster = next(d for d in yaml.safe_load_all((REPO / MGMT / "cluster.yaml").read_text()) if d["kind"] == "Cluster")
    assert cluster["spec"]["clusterNetwork"]["pods"]["cidrBlocks"] == release["spec"]["values"]["trustedProxies"]
    ks = yaml.safe_load((REPO / TINK / "flux-ks.yaml").read_text())["spec"]
    assert ks["postBuild"] == {"substituteFrom": [{"kind": "ConfigMap", "name": "local-talos-site"}]}
    # The cluster's objects wait for the release and for the CRDs the tinkerbell binary installs.
    assert ks["healthChecks"] == [
        {
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "name": "tinkerbell",
            "namespace": "tinkerbell",
        },
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "name": "hardware.tinkerbell.org",
        },
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "name": "machines.bmc.tinkerbell.org",
        },
    ]


def test_pivot_manifests_are_the_crds_of_what_clusterctl_move_carries():
    cfg = krops_config.load(path=str(REPO / "bootstrap.toml"), environ={})
    crds = [d for m in cfg.environment(ENV).pivot_manifests for d in render.load_yaml_documents(str(REPO / m))]
    assert all(d["kind"] == "CustomResourceDefinition" for d in crds)
    served = {(d["spec"]["group"], d["spec"]["names"]["kind"], v["name"]) for d in crds for v in d["spec"]["versions"]}
    assert all("clusterctl.cluster.x-k8s.io/move" in d["metadata"]["labels"] for d in crds)
    # Exactly the Tinkerbell kinds of clusters/management, at the version the tree writes.
    used = {
        (o["apiVersion"].split("/")[0], o["kind"], o["apiVersion"].split("/")[1])
        for o in rendered()[MGMT]
        if o["apiVersion"].split("/")[0].endswith("tinkerbell.org")
    }
    assert used == {("tinkerbell.org", "Hardware", "v1alpha1"), ("bmc.tinkerbell.org", "Machine", "v1alpha1")}
    assert used == served
    # Flux never applies them (no kustomization lists the folder).
    assert not any(o["kind"] == "CustomResourceDefinition" for objs in rendered().values() for o in objs)


def test_bmc_credentials_are_sops_encrypted_with_the_test_key(tmp_path):
    path = REPO / MGMT / "bmc-credentials.sops.yaml"
    doc = yaml.safe_load(path.read_text())
    assert doc["kind"] == "Secret" and doc["metadata"]["name"] == "local-talos-management-bmc"
    assert all(v.startswith("ENC[AES256_GCM,") for v in doc["stringData"].values())
    assert "krops-test-bmc-password" not in path.read_text()
    proc = subprocess.run(
        [str(VENV_BIN / "sops"), "--decrypt", str(path)],
        capture_output=True,
        text=True,
        env=dict(os.environ, SOPS_AGE_KEY_FILE=str(AGE_KEY)),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    plain = yaml.safe_load(proc.stdout)["stringData"]
    assert plain == {"username": "krops-test-bmc-user", "password": "krops-test-bmc-password"}
    # The Flux Kustomization that applies it decrypts with the bootstrap's age Secret.
    ks = yaml.safe_load((REPO / MGMT / "flux-ks.yaml").read_text())
    assert ks["spec"]["decryption"] == {"provider": "sops", "secretRef": {"name": "sops-age"}}


# --- planted defects ------------------------------------------------------------------------


def test_uppercase_mac_in_site_values_is_a_schema_finding(tree):
    edit(tree, LT + "/site-values.yaml", 'MACHINE_MAC: "aa:bb:cc:dd:ee:01"', 'MACHINE_MAC: "AA-BB-CC-DD-EE-01"')
    assert found(check(tree)) == [
        (
            MGMT + "/hardware.yaml",
            "Hardware/default/talos-mgmt-01",
            "schema",
            "spec.interfaces[0].dhcp.mac: 'AA-BB-CC-DD-EE-01' does not match '([0-9a-f]{2}[:]){5}([0-9a-f]{2})'",
        )
    ]


def test_dangling_dependson_and_dropped_provider(tree):
    edit(tree, MGMT + "/flux-ks.yaml", "    - name: cabpt-system\n", "    - name: cabpt-systen\n")
    os.remove(tree / LT / "cacppt-system" / "control-plane-provider.yaml")
    edit(tree, LT + "/cacppt-system/kustomization.yaml", "  - control-plane-provider.yaml\n", "")
    key = "environments.local-talos"
    assert found(check(tree)) == [
        (
            "bootstrap.toml",
            key + ".accepted-end-of-life",
            "contracts",
            "accepted-end-of-life lists ControlPlaneProvider/talos, which is not an end-of-life provider of this "
            "environment: remove it",
        ),
        (
            "bootstrap.toml",
            key + ".provider-manifests[3]",
            "bootstrap",
            "mgmt/local-talos/cacppt-system/control-plane-provider.yaml does not exist",
        ),
        (
            LT + "/cacppt-system/flux-ks.yaml",
            "Kustomization/flux-system/cacppt-system",
            "flux-graph",
            "healthCheck ControlPlaneProvider cacppt-system/talos: not defined in the tree nor created by the lifecycle",
        ),
        (
            MGMT + "/flux-ks.yaml",
            "Kustomization/flux-system/cluster-local-talos-management",
            "flux-graph",
            "dependsOn flux-system/cabpt-systen: no Kustomization of that name in environment local-talos",
        ),
    ]


def test_wrong_infra_provider_name_and_mgmt_cluster_are_bootstrap_findings(tree):
    edit(tree, LT + "/capt-system/infrastructure-provider.yaml", "  name: tinkerbell-tinkerbell", "  name: tinkerbell")
    edit(tree, LT + "/capt-system/flux-ks.yaml", "      name: tinkerbell-tinkerbell", "      name: tinkerbell")
    edit(tree, "bootstrap.toml", 'mgmt-cluster = "local-talos-management"', 'mgmt-cluster = "talos-management"')
    key = "environments.local-talos"
    assert found(check(tree)) == [
        (
            "bootstrap.toml",
            key + ".infra-provider-name",
            "bootstrap",
            "no provider manifest holds "
            "InfrastructureProvider capt-system/tinkerbell-tinkerbell (infra-provider-namespace/infra-provider-name)",
        ),
        (
            "bootstrap.toml",
            key + ".mgmt-cluster",
            "bootstrap",
            "mgmt-cluster talos-management is not a Cluster in "
            "namespace default of the tree (Clusters there: local-talos-management)",
        ),
        (
            LT + "/capt-system/infrastructure-provider.yaml",
            "InfrastructureProvider/capt-system/tinkerbell",
            "contracts",
            "InfrastructureProvider tinkerbell v0.7.0: no contract known for this provider (add its metadata.yaml "
            "to module_utils/contracts.py)",
        ),
    ]


def test_plaintext_bmc_password_is_a_secrets_finding(tree):
    path = tree / MGMT / "bmc-credentials.sops.yaml"
    text = path.read_text()
    start = text.index("password: ENC[")
    path.write_text(text[:start] + "password: hunter2" + text[text.index("\n", start) :])
    assert found(check(tree)) == [
        (
            MGMT + "/bmc-credentials.sops.yaml",
            "Secret/default/local-talos-management-bmc",
            "secrets",
            "stringData.password is not encrypted (expected ENC[...]): re-encrypt "
            "with --encrypted-regex '^(data|stringData)$'",
        )
    ]


def test_missing_site_value_is_caught(tree):
    # Flux substitutes an unset variable with nothing: the Hardware is then invalid.
    edit(tree, LT + "/site-values.yaml", '  INSTALL_DISK: "/dev/sda"\n', "")
    assert found(check(tree)) == [
        (
            MGMT + "/hardware.yaml",
            "Hardware/default/talos-mgmt-01",
            "schema",
            "spec.disks[0].device: None is not of type 'string'",
        )
    ]


def test_misspelled_crd_health_check_is_reported_and_a_missing_pivot_crd_too(tree):
    # Hardware's CRD plural is "hardware": the English plural is the typo here.
    edit(tree, TINK + "/flux-ks.yaml", "name: hardware.tinkerbell.org", "name: hardwares.tinkerbell.org")
    os.remove(tree / TINK / "pivot" / "bmc.tinkerbell.org_machines.yaml")
    assert found(check(tree)) == [
        (
            "bootstrap.toml",
            "environments.local-talos.pivot-manifests[1]",
            "bootstrap",
            "mgmt/local-talos/tinkerbell/pivot/bmc.tinkerbell.org_machines.yaml does not exist",
        ),
        (
            TINK + "/flux-ks.yaml",
            "Kustomization/flux-system/tinkerbell",
            "flux-graph",
            "healthCheck CustomResourceDefinition hardwares.tinkerbell.org: no object of that "
            "type in the tree (a health check on a CRD nothing uses is likely a typo)",
        ),
    ]
