"""The air-gapped bundle: inventory generator, pin check, validate rule airgap, Zarf schema, config archive, zarf stand-in."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile

import jsonschema
import pytest
import yaml

from ansible_collections.krops.platform.plugins.module_utils import (
    airgap,
    airgap_charts,
    airgap_offline,
    airgap_package,
)
from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils import flux
from ansible_collections.krops.platform.plugins.module_utils import profiles
from ansible_collections.krops.platform.plugins.module_utils import render
from ansible_collections.krops.platform.plugins.module_utils import validate
from ansible_collections.krops.platform.plugins.modules import airgap_config_archive
from tests.substrate import zarf_standin
from tests.substrate import airgap_fixtures
from tests.substrate.airgap_fixtures import chart_tgz
from tests.substrate.fixtures import REPO
from tests.substrate.trees import copy_repo, edit

# the shared fixtures of the air-gapped bundle's tests (tests/substrate/airgap_fixtures.py)
tree = airgap_fixtures.tree

SCHEMA = json.loads((REPO / "airgap" / "schema" / "zarf.schema.json").read_text())
NODE_1355 = "docker.io/kindest/node:v1.35.5@sha256:ce977ae6d65918d0b58a5f8b5e940429c2ce42fa3a5619ec2bbc60b949c0ac95"
KINDNET = "docker.io/kindest/kindnetd:v20260528-9350166c"  # mgmt/local-host/cni (kind v0.32.0's kindnet)


def schema_errors(doc):
    return sorted(e.message for e in jsonschema.Draft202012Validator(SCHEMA).iter_errors(doc))


# --- the generated files ------------------------------------------------------------------------


def test_committed_inventory_and_package_are_what_the_generator_writes():
    inv = airgap.derive(str(REPO))
    boot = krops_config.load(path=str(REPO / "bootstrap.toml"), environ={}).bootstrap
    assert (REPO / airgap.INVENTORY).read_text() == airgap.format_inventory(inv)
    assert (REPO / airgap.ZARF_FILE).read_text() == airgap_package.format_zarf(inv, boot)


def test_zarf_yaml_validates_against_the_published_schema():
    doc = yaml.safe_load((REPO / airgap.ZARF_FILE).read_text())
    assert schema_errors(doc) == []
    names = [c["name"] for c in doc["components"]]
    assert names == [
        "host",
        "kind-amd64",
        "kind-arm64",
        "cert-manager",
        "capi-operator",
        "krops-config",
        "flux",
        "capi",
        "capd",
        "caaph",
        "workload",
    ]
    for name in ("cert-manager", "flux", "capi-operator", "capi", "capd", "caaph"):
        assert next(c for c in doc["components"] if c["name"] == name)["healthChecks"], name


def test_the_schema_rejects_what_zarf_rejects():
    doc = yaml.safe_load((REPO / airgap.ZARF_FILE).read_text())
    # `only` belongs to a component, not to a file (the first zarf.yaml had it on files).
    doc["components"][1]["files"][0]["only"] = {"cluster": {"architecture": "amd64"}}
    doc["components"][0]["bogus"] = True
    doc["components"][1]["only"]["cluster"]["architecture"] = "s390x"
    errors = schema_errors(doc)
    assert len(errors) == 3
    assert any("'only' does not match any of the regexes: '^x-'" in e for e in errors)
    assert any("'bogus' does not match any of the regexes: '^x-'" in e for e in errors)
    assert "'s390x' is not one of ['amd64', 'arm64']" in errors


def test_inventory_pins_what_could_be_confirmed_and_marks_the_rest():
    lines = (REPO / airgap.INVENTORY).read_text().splitlines()
    node = [line for line in lines if line.startswith("docker.io/kindest/node:")]
    assert node and all("@sha256:" in line for line in node)
    assert all("@sha256:" in line for line in lines if line.startswith("ghcr.io/fluxcd/"))
    unconfirmed = [line for line in lines if "# UNCONFIRMED" in line]
    assert unconfirmed and all("@" not in line.split("#")[0] for line in unconfirmed)


def inventory_view(inv):
    """Everything derive returns, as plain data: what a rewrite of derive must leave unchanged."""
    images = {k: (i.component, i.digest, i.source, i.workload, tuple(i.origins)) for k, i in inv.images.items()}
    return {"images": images, "problems": inv.problems, "charts": inv.charts, "providers": inv.providers}


def test_derive_on_the_shipped_tree_is_pinned():
    """images.txt and provider-components.yaml pin the images' refs, components and origins and the providers;
    this pins the rest of what derive returns on the shipped tree."""
    inv = airgap.derive(str(REPO))
    assert inv.problems == []
    assert inv.charts == {
        "cert-manager": "v1.21.1",
        "cluster-api-operator": "0.28.0",
        "flux-operator": "0.58.1",
        "podinfo": "6.14.1",
    }
    assert sorted(k for k, i in inv.images.items() if i.workload) == [
        KINDNET,
        "ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1",
        "ghcr.io/fluxcd/helm-controller:v1.6.3",
        "ghcr.io/fluxcd/kustomize-controller:v1.9.4",
        "ghcr.io/fluxcd/notification-controller:v1.9.3",
        "ghcr.io/fluxcd/source-controller:v1.9.4",
        "ghcr.io/stefanprodan/podinfo:6.14.1",
    ]
    flux_source = (
        "controlplaneio-fluxcd/flux-operator config/data/flux-images/v2.9.4/upstream-alpine.yaml @ v0.58.1 (b3b36020)"
    )
    assert {k: i.source for k, i in inv.images.items() if i.source} == {
        "docker.io/kindest/node:v1.35.5": "kubernetes-sigs/cluster-api test/infrastructure/kind/mapper.go @ v1.13.5 "
        "(30be34da)",
        "ghcr.io/fluxcd/helm-controller:v1.6.3": flux_source,
        "ghcr.io/fluxcd/kustomize-controller:v1.9.4": flux_source,
        "ghcr.io/fluxcd/notification-controller:v1.9.3": flux_source,
        "ghcr.io/fluxcd/source-controller:v1.9.4": flux_source,
    }
    assert inv.lock == airgap.load_lock(str(REPO))
    assert [(p["kind"], p["name"], p["component"], [f["sha256"] for f in p["files"]]) for p in inv.providers] == [
        ("AddonProvider", "helm", "caaph", [None, None]),  # the order of the tree's directories
        ("InfrastructureProvider", "docker", "capd", [None, None]),
        ("BootstrapProvider", "kubeadm", "capi", [None, None]),
        ("ControlPlaneProvider", "kubeadm", "capi", [None, None]),
        ("CoreProvider", "cluster-api", "capi", [None, None]),
    ]


EVERY_KIND = """\
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: git, namespace: flux-system}
spec: {url: "https://example.org/repo.git"}
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: {name: index, namespace: flux-system}
spec: {url: "https://example.org/charts"}
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata: {name: manager-chart, namespace: flux-system}
spec: {url: "oci://quay.io/jetstack/charts/cert-manager", ref: {semver: "1.x"}}
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {name: by-ref, namespace: flux-system}
spec: {chartRef: {kind: OCIRepository, name: manager-chart}}
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {name: by-spec, namespace: flux-system}
spec: {chart: {spec: {chart: cert-manager, version: "v1.20.0"}}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: DockerMachineTemplate
metadata: {name: nodes, namespace: default}
spec: {template: {spec: {customImage: "example.org/nodes/custom:v2"}}}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata: {name: cp, namespace: default}
spec: {version: v1.99.0}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: applied, namespace: default}
data:
  pod.yaml: |
    kind: Pod
    spec: {containers: [{name: c, image: "example.org/inside:v1"}]}
  broken.yaml: "{ not yaml"
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: tool, namespace: default}
spec: {template: {spec: {initContainers: [{name: i, image: "tool:1"}]}}}
---
apiVersion: fluxcd.controlplane.io/v1
kind: FluxInstance
metadata: {name: extra, namespace: flux-system}
spec:
  distribution: {version: "2.9.x"}
  components: [source-controller, tofu-controller]
"""


def test_derive_follows_every_kind_it_reads(tree):
    """One object of every kind derive has a rule for, beside the shipped tree: the images, components and
    problems each gives."""
    before = inventory_view(airgap.derive(str(tree)))
    (tree / airgap.MANIFESTS / "every-kind.yaml").write_text(EVERY_KIND)
    after = inventory_view(airgap.derive(str(tree)))
    added = {k: v[:4] for k, v in after["images"].items() if k not in before["images"]}
    assert added == {
        "quay.io/jetstack/cert-manager-controller:v1.20.0": ("cert-manager", None, None, False),
        "quay.io/jetstack/cert-manager-webhook:v1.20.0": ("cert-manager", None, None, False),
        "quay.io/jetstack/cert-manager-cainjector:v1.20.0": ("cert-manager", None, None, False),
        "quay.io/jetstack/cert-manager-startupapicheck:v1.20.0": ("cert-manager", None, None, False),
        "example.org/nodes/custom:v2": ("host", None, None, False),
        "docker.io/kindest/node:v1.99.0": ("host", None, None, False),
        "example.org/inside:v1": ("workload", None, None, True),
        "docker.io/library/tool:1": ("krops-config", None, None, False),
    }
    origin = "airgap/manifests FluxInstance/flux-system/extra"
    assert origin in after["images"]["ghcr.io/fluxcd/source-controller:v1.9.4"][4]
    assert after["problems"] == [
        (
            "airgap/manifests",
            "GitRepository/flux-system/git",
            "GitRepository https://example.org/repo.git: the bundle carries no Git server",
        ),
        (
            "airgap/manifests",
            "HelmRepository/flux-system/index",
            "HelmRepository https://example.org/charts is an HTTP index: the Zarf agent rewrites only type: oci "
            "HelmRepositories, so Flux cannot fetch it offline; use the chart's OCI repository",
        ),
        (
            "airgap/manifests",
            "HelmRelease/flux-system/by-ref",
            "chart cert-manager version '1.x' is not an exact version: its images cannot be pinned; pin the chart "
            "to one release",
        ),
        (
            "airgap/manifests",
            "FluxInstance/flux-system/extra",
            "Flux component tofu-controller is not in distribution v2.9.4 of airgap/digests.yaml",
        ),
    ]
    assert after["charts"] == before["charts"] and after["providers"] == before["providers"]


# --- the generator follows the tree ------------------------------------------------------------------


def test_generator_follows_the_tree_and_bootstrap_toml(tree, monkeypatch):
    for rel in (
        "capi-system/core-provider.yaml",
        "capi-system/kubeadm-bootstrap-provider.yaml",
        "capi-system/kubeadm-control-plane-provider.yaml",
        "capd-system/infrastructure-provider.yaml",
    ):
        edit(tree, "mgmt/local-host/" + rel, "version: v1.13.5", "version: v1.13.4", count=-1)
    for rel in ("clusters/local-workload/control-plane.yaml", "clusters/local-workload/workers.yaml"):
        edit(tree, "mgmt/local-host/" + rel, "version: v1.35.5", "version: v1.34.8", count=-1)
    edit(
        tree,
        "mgmt/local-host/flux-apps/workload-flux/fluxinstance.yaml",
        'version: "2.9.x"',
        'version: "2.7.x"',
        count=-1,
    )
    node_1348 = yaml.safe_load((REPO / airgap.LOCK_FILE).read_text())["images"]["docker.io/kindest/node:v1.34.8"][
        "digest"
    ]
    # a bootstrap.toml kind-node-image digest is taken as written
    load = krops_config.load

    def with_node_image(*args, **kwargs):
        cfg = load(*args, **kwargs)
        node = "kindest/node:v1.36.1@sha256:" + "ab" * 32
        return dataclasses.replace(cfg, bootstrap=dataclasses.replace(cfg.bootstrap, kind_node_image=node))

    monkeypatch.setattr(krops_config, "load", with_node_image)
    inv = airgap.derive(str(tree))
    keys = set(inv.images)
    assert "registry.k8s.io/cluster-api/cluster-api-controller:v1.13.4" in keys
    assert "registry.k8s.io/cluster-api/capd-manager:v1.13.4" in keys
    assert "registry.k8s.io/cluster-api/cluster-api-controller:v1.13.5" not in keys
    assert inv.images["docker.io/kindest/node:v1.34.8"].ref == "docker.io/kindest/node:v1.34.8@" + node_1348
    assert inv.images["docker.io/kindest/node:v1.35.5"].ref == NODE_1355  # the management cluster's
    # the bootstrap.toml digest is taken as written, not replaced by the lock's
    assert inv.images["docker.io/kindest/node:v1.36.1"].digest == "sha256:" + "ab" * 32
    assert inv.images["ghcr.io/fluxcd/source-controller:v1.7.4"].digest.startswith("sha256:16f21ac1")
    assert inv.images["ghcr.io/fluxcd/source-controller:v1.9.4"].digest.startswith(
        "sha256:8a8ed0a5"
    )  # airgap/manifests
    assert "registry.k8s.io/cluster-api/cluster-api-controller:v1.13.4" in inv.unconfirmed
    # the committed inventory no longer covers the tree: the pin check and validate say so
    findings, _unconfirmed = airgap_package.check(str(tree), inv, pin=False)
    messages = [m for _f, _o, m in findings]
    assert (
        "registry.k8s.io/cluster-api/cluster-api-controller:v1.13.4 (mgmt/local-host/capi-system "
        "CoreProvider/capi-system/cluster-api) is not in airgap/images.txt: regenerate it with "
        "scripts/airgap-inventory --write"
    ) in messages
    airgap_package.write(str(tree), inv)
    assert airgap_package.check(str(tree), pin=False)[0] == []


def test_devmachinetemplate_custom_image_and_configmap_manifests_are_found(tree):
    edit(
        tree,
        "mgmt/local-host/clusters/local-workload/workers.yaml",
        "      backend:\n        docker: {}",
        "      backend:\n        docker:\n          customImage: example.org/nodes/custom:v1",
        count=-1,
    )
    edit(
        tree,
        "mgmt/local-host/cni/manifests/kindnet.yaml",
        KINDNET,
        "docker.io/kindest/kindnetd:v20990101-decafbad",
        count=-1,
    )
    inv = airgap.derive(str(tree))
    assert inv.images["example.org/nodes/custom:v1"].component == "host"
    assert inv.images["docker.io/kindest/kindnetd:v20990101-decafbad"].component == "workload"
    assert KINDNET not in inv.images


def test_sources_the_offline_configuration_serves_are_no_problem_and_the_others_are(tree):
    inv = airgap.derive(str(tree))
    # the air-gapped configuration replaces both HTTP indexes (cert-manager's by its OCI repository, the operator's
    # by the chart the package packs), installs the HelmChartProxy's chart with Flux and pins podinfo's range
    assert inv.problems == [] and airgap_package.check(str(tree), inv)[0] == []
    edit(tree, "mgmt/local-host/flux-apps/helmchartproxy.yaml", "chartName: flux-operator", "chartName: other")
    edit(tree, "workload/local-host/podinfo.yaml", 'semver: "6.x"', 'semver: "9.x"')
    inv = airgap.derive(str(tree))
    problems = {(f, o): m for f, o, m in inv.problems}
    assert problems == {
        ("workload/local-host", "HelmRelease/podinfo/podinfo"): (
            "chart podinfo version '9.x' is not an exact version: its images cannot be pinned; pin the chart to one "
            "release"
        ),
        ("mgmt/local-host/flux-apps", "HelmChartProxy/default/flux-operator"): (
            "HelmChartProxy chart oci://ghcr.io/controlplaneio-fluxcd/charts/other is pulled by the CAAPH controller, "
            "which the Zarf agent does not rewrite: point repoURL at the local registry krops-registry"
        ),
    }
    # validate's rule leaves them to the pin check; it names the image no object uses any more
    assert airgap_package.check(str(tree), inv, pin=False)[0] == [
        (
            "airgap/images.txt",
            "ghcr.io/stefanprodan/podinfo:6.14.1",
            "line 24: ghcr.io/stefanprodan/podinfo:6.14.1 is used by no object of the tree: regenerate with "
            "scripts/airgap-inventory --write",
        )
    ]


def test_an_http_index_the_offline_configuration_does_not_replace_is_a_problem(tree):
    edit(
        tree,
        "mgmt/local-host/capi-operator/helmrepository.yaml",
        "https://kubernetes-sigs.github.io/cluster-api-operator",
        "https://example.org/charts",
    )
    problems = {(f, o): m for f, o, m in airgap.derive(str(tree)).problems}
    assert problems[("mgmt/local-host/capi-operator", "HelmRepository/capi-operator-system/capi-operator")] == (
        "HelmRepository https://example.org/charts is an HTTP index: the Zarf agent rewrites only type: oci "
        "HelmRepositories, so Flux cannot fetch it offline; use the chart's OCI repository"
    )


def test_flux_version_outside_the_known_distributions_is_reported(tree):
    edit(
        tree,
        "mgmt/local-host/flux-apps/workload-flux/fluxinstance.yaml",
        'version: "2.9.x"',
        'version: "3.1.x"',
        count=-1,
    )
    inv = airgap.derive(str(tree))
    assert (
        "mgmt/local-host/flux-apps/workload-flux",
        "FluxInstance/flux-system/flux",
        "Flux version 3.1.x matches no distribution in airgap/digests.yaml (known: v2.7.5, v2.9.4): add the "
        "Flux Operator's images for it",
    ) in inv.problems


# --- the pin check --------------------------------------------------------------------------------


def test_pin_check_reports_drift_between_zarf_yaml_and_images_txt(tree):
    edit(
        tree,
        airgap.ZARF_FILE,
        "quay.io/jetstack/cert-manager-webhook:v1.21.1",
        "quay.io/jetstack/cert-manager-webhook:v1.21.3",
        count=-1,
    )
    edit(tree, airgap.ZARF_FILE, NODE_1355, NODE_1355.replace("ce977ae6", "00000000"), count=-1)
    edit(
        tree,
        airgap.INVENTORY,
        KINDNET + "  # UNCONFIRMED workload: mgmt/local-host/cni ConfigMap/default/kindnet\n",
        "",
        count=-1,
    )
    findings, unconfirmed = airgap_package.check(str(tree), pin=False)
    assert sorted(findings) == sorted(
        [
            (
                "airgap/images.txt",
                KINDNET,
                KINDNET + " (mgmt/local-host/cni ConfigMap/default/kindnet) is not in "
                "airgap/images.txt: regenerate it with scripts/airgap-inventory --write",
            ),
            (
                "airgap/zarf.yaml",
                "component cert-manager",
                "image quay.io/jetstack/cert-manager-webhook:v1.21.3 is not in airgap/images.txt (tags there: v1.21.1)",
            ),
            (
                "airgap/zarf.yaml",
                "component host",
                "image docker.io/kindest/node:v1.35.5: digest "
                "sha256:00000000" + NODE_1355.split("ce977ae6", 1)[1] + " differs from airgap/images.txt line 6 "
                "(sha256:" + NODE_1355.split("@sha256:", 1)[1] + ")",
            ),
            ("airgap/zarf.yaml", "component workload", "image " + KINDNET + " is not in airgap/images.txt"),
        ]
    )
    assert "docker.io/library/registry:3" in unconfirmed


def test_pin_check_rejects_a_digest_that_differs_from_the_lock(tree):
    edit(
        tree,
        airgap.INVENTORY,
        "ghcr.io/fluxcd/source-controller:v1.9.4@sha256:8a8ed0a5",
        "ghcr.io/fluxcd/source-controller:v1.9.4@sha256:9a8ed0a5",
        count=-1,
    )
    findings, _images = airgap_package.check(str(tree), pin=False)
    # the lock disagrees, and so does zarf.yaml in both components that carry the image
    assert [f[0:2] for f in findings] == [
        ("airgap/images.txt", "ghcr.io/fluxcd/source-controller:v1.9.4"),
        ("airgap/zarf.yaml", "component flux"),
        ("airgap/zarf.yaml", "component workload"),
    ]
    assert (
        "differs from sha256:8a8ed0a5" in findings[0][2] and "flux-operator config/data/flux-images" in findings[0][2]
    )


@pytest.mark.parametrize(
    "lock, message",
    [
        (
            "images:\n  docker.io/library/registry:3: {digest: sha256:1234}\n",
            "airgap/digests.yaml: images.docker.io/library/registry:3 needs digest (sha256:<64 hex>) and source (where it was read)",
        ),
        (
            "images:\n  docker.io/library/registry:3: {digest: 'sha256:%s'}\n" % ("a" * 64),
            "airgap/digests.yaml: images.docker.io/library/registry:3 needs digest (sha256:<64 hex>) and source (where it was read)",
        ),
        (
            "images:\n  docker.io/library/registry:3:\n    digest: 'sha256:%s'\n    source: crane\n"
            "    platforms: {linux/s390x: 'sha256:%s'}\n" % ("a" * 64, "b" * 64),
            "airgap/digests.yaml: images.docker.io/library/registry:3.platforms maps linux/amd64 and linux/arm64 to a "
            "digest (sha256:<64 hex>)",
        ),
        (
            "images:\n  docker.io/library/registry:3:\n    digest: 'sha256:%s'\n    source: crane\n"
            "    platforms: {linux/arm64: sha256:1}\n" % ("a" * 64),
            "airgap/digests.yaml: images.docker.io/library/registry:3.platforms maps linux/amd64 and linux/arm64 to a "
            "digest (sha256:<64 hex>)",
        ),
        ("images: [\n", None),
    ],
)
def test_a_lock_entry_without_a_real_digest_or_a_source_is_refused(tree, lock, message):
    (tree / airgap.LOCK_FILE).write_text(lock)
    with pytest.raises(airgap.AirgapError) as caught:
        airgap.derive(str(tree))
    if message:
        assert str(caught.value) == message
    else:
        assert str(caught.value).startswith("airgap/digests.yaml is not YAML: ")


def test_a_malformed_inventory_line_is_named(tree):
    (tree / airgap.INVENTORY).write_text("# header\nquay.io/a:b@sha256:xyz\n")
    with pytest.raises(airgap.AirgapError) as caught:
        airgap_package.check(str(tree))
    assert str(caught.value) == "%s:2: digest sha256:xyz of quay.io/a:b is not sha256:<64 hex>" % (
        tree / airgap.INVENTORY
    )


def test_cli_check_fails_on_unconfirmed_digests_and_write_is_idempotent(tree):
    script = [
        sys.executable,
        "-m",
        "ansible_collections.krops.platform.plugins.module_utils.airgap_package",
        "--path",
        str(tree),
    ]
    env = {"PYTHONPATH": "{}:{}".format(REPO, REPO / ".collections"), "PATH": "/usr/bin:/bin"}
    before = (tree / airgap.INVENTORY).read_text()
    proc = subprocess.run(script + ["--write"], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0 and (tree / airgap.INVENTORY).read_text() == before  # the tree is servable
    proc = subprocess.run(
        script + ["--check", "--format", "json"], capture_output=True, text=True, env=env, check=False
    )
    report = json.loads(proc.stdout)
    assert proc.returncode == 1  # the unconfirmed digests
    assert report["findings"] == [] and "docker.io/library/registry:3" in report["unconfirmed"]
    (tree / "bootstrap.toml").write_text("[bootstrap\n")
    proc = subprocess.run(script + ["--check"], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("ERROR: ") and "Traceback" not in proc.stderr


# --- validate's rule airgap -------------------------------------------------------------------------


def test_validate_rule_airgap_on_a_copy_of_the_repository(tree):
    result = validate.run(str(tree), environments=["local-host"], schema_location=str(REPO / "schemas" / "crds"))
    assert result["findings"] == []
    edit(
        tree,
        airgap.INVENTORY,
        "docker.io/library/registry:3  # UNCONFIRMED host: roles/bootstrap/defaults/main.yml "
        "bootstrap_registry_image\n",
        "",
        count=-1,
    )
    result = validate.run(str(tree), environments=["local-host"], schema_location=str(REPO / "schemas" / "crds"))
    assert [(f["file"], f["object"], f["rule"]) for f in result["findings"]] == [
        ("airgap/images.txt", "docker.io/library/registry:3", "airgap"),
        ("airgap/zarf.yaml", "component host", "airgap"),
    ]
    assert result["summary"]["local-host"]["by_rule"]["airgap"] == 2


def test_validate_rule_airgap_is_inactive_without_a_package(tree):
    shutil.rmtree(tree / "airgap")
    result = validate.run(str(tree), environments=["local-host"], schema_location=str(REPO / "schemas" / "crds"))
    assert result["findings"] == []


# --- the configuration archive -----------------------------------------------------------------------


def test_config_archive_module_writes_an_oci_layout_once(run_module, tree):
    dest = tree / "airgap" / "build" / "krops-config.tar"
    args = {
        "root": str(tree),
        "paths": ["mgmt/local-host", "workload/local-host"],
        "dest": str(dest),
        "reference": "krops-registry:5000/krops:latest",
        "revision": "main@sha1:" + "0" * 40,
    }
    planned = run_module(airgap_config_archive, args, check_mode=True)
    assert planned["changed"] is True and not dest.exists()
    first = run_module(airgap_config_archive, args)
    assert first["changed"] is True and dest.is_file()
    again = run_module(airgap_config_archive, args)
    assert again["changed"] is False and again["digest"] == first["digest"]
    with tarfile.open(dest) as tar:
        index = json.load(tar.extractfile("index.json"))
        blobs = {
            m.name: tar.extractfile(m).read()
            for m in tar.getmembers()
            if m.name.startswith("blobs/sha256/") and m.isfile()
        }
    assert index["manifests"][0]["annotations"] == {
        "org.opencontainers.image.ref.name": "krops-registry:5000/krops:latest"
    }
    assert index["manifests"][0]["digest"] == first["digest"]
    for name, data in blobs.items():
        assert name == "blobs/sha256/" + hashlib.sha256(data).hexdigest()
    manifest = json.loads(blobs["blobs/sha256/" + first["digest"].split(":")[1]])
    layer = blobs["blobs/sha256/" + manifest["layers"][0]["digest"].split(":")[1]]
    with tarfile.open(fileobj=io.BytesIO(layer)) as content:
        assert "workload/local-host/podinfo.yaml" in content.getnames()


def test_config_archive_module_refuses_a_bad_reference(run_module, tree):
    result = run_module(
        airgap_config_archive,
        {"root": str(tree), "paths": ["mgmt/local-host"], "dest": str(tree / "x.tar"), "reference": "krops:latest"},
    )
    assert result.failed and result["msg"] == (
        "reference 'krops:latest' is not <registry>/<repository>:<tag> (for example krops-registry:5000/krops:latest)"
    )
    assert not (tree / "x.tar").exists()


# --- the zarf stand-in ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["package", "create", ".", "--sbom-output", "x"], "unknown flag: --sbom-output"),
        (["package", "create", ".", "--skip-signature-validation"], "unknown flag: --skip-signature-validation"),
        (["package", "deploy", "p", "-z"], "unknown shorthand flag: 'z' in -z"),
        (["package", "publish", "p", "oci://x"], 'unknown command "publish" for "zarf package"'),
        (["package", "verify"], "accepts 1 arg(s), received 0"),
        (["package", "deploy", "p", "--verify", "sometimes"], "accepts at most 1 arg(s), received 2"),
        (
            ["package", "deploy", "p", "--verify=sometimes"],
            'invalid argument "sometimes" for "--verify" flag: invalid --verify value "sometimes" (must be never, if-possible, or always)',
        ),
        (
            ["init", "--confirm=yes"],
            'invalid argument "yes" for "--confirm" flag: strconv.ParseBool: parsing "yes": invalid syntax',
        ),
        (["package", "create", "-o"], "flag needs an argument: 'o' in -o"),
        (["tools", "download-init", "--architecture"], "flag needs an argument: --architecture"),
    ],
)
def test_zarf_stand_in_refuses_what_zarf_v0_84_0_lacks(capsys, argv, message):
    assert zarf_standin.main(argv) == 1
    assert capsys.readouterr().err == f"Error: {message}\n"


def test_zarf_stand_in_signs_verifies_and_extracts_sboms(tmp_path, capsys):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "zarf.yaml").write_text(
        yaml.safe_dump(
            {
                "kind": "ZarfPackageConfig",
                "metadata": {"name": "demo", "version": "###ZARF_PKG_TMPL_VERSION###"},
                "components": [
                    {"name": "a", "images": ["quay.io/a:1"]},
                    {"name": "b", "only": {"cluster": {"architecture": "amd64"}}, "images": ["quay.io/b:1"]},
                ],
            }
        )
    )
    (tmp_path / "k").write_text("PRIVATE one")
    (tmp_path / "pub").write_text("PUBLIC one")
    (tmp_path / "other").write_text("PUBLIC two")
    base = ["package", "create", str(tmp_path / "pkg"), "--confirm", "-a", "arm64", "-o", str(tmp_path / "out")]
    assert zarf_standin.main(base) == 1
    assert "package template variables not set: VERSION" in capsys.readouterr().err
    assert zarf_standin.main(base + ["--set", "VERSION=1.0.0"]) == 0
    unsigned = tmp_path / "out" / "zarf-package-demo-arm64-1.0.0.tar.zst"
    assert json.loads(unsigned.read_text())["components"] == ["a"]
    capsys.readouterr()
    assert zarf_standin.main(["package", "verify", str(unsigned), "--key", str(tmp_path / "pub")]) == 1
    assert capsys.readouterr().err == "Error: package verification failed: the package is not signed\n"
    assert zarf_standin.main(base + ["--set", "VERSION=1.0.0", "--signing-key", str(tmp_path / "k")]) == 0
    assert zarf_standin.main(["package", "verify", str(unsigned), "--key", str(tmp_path / "pub")]) == 0
    assert zarf_standin.main(["package", "verify", str(unsigned), "--key", str(tmp_path / "other")]) == 1
    assert (
        zarf_standin.main(
            [
                "package",
                "inspect",
                "sbom",
                str(unsigned),
                "--output",
                str(tmp_path / "sb"),
                "--key",
                str(tmp_path / "pub"),
            ]
        )
        == 0
    )
    assert [p.name for p in (tmp_path / "sb" / "demo").iterdir()] == ["quay.io_a_1-linux-arm64.json"]


def test_stand_in_stages_only_the_host_components_of_the_generated_package(tmp_path, capsys):
    """zarf always deploys required components (filters/deploy.go): with any required, staging would need a cluster."""
    pkg = tmp_path / "airgap"
    shutil.copytree(REPO / "airgap", pkg, ignore=shutil.ignore_patterns("build"))
    (pkg / "build").mkdir()
    (pkg / "build" / "host-images.tar").write_text("x")
    layout, _digest = airgap_offline.config_archive(str(REPO), ["mgmt/local-host"], "krops-registry:5000/krops:latest")
    (pkg / "build" / "krops-config.tar").write_bytes(layout)
    (pkg / airgap.CHART_BUILD).mkdir(parents=True)
    chart, _digest = airgap_charts.chart_archive(
        "krops-registry:5000/charts/cluster-api-operator:0.28.0",
        chart_tgz("cluster-api-operator", "0.28.0", app_version=False),
    )
    (pkg / airgap.CHART_BUILD / "cluster-api-operator.tar").write_bytes(chart)
    chart, _digest = airgap_charts.chart_archive(
        "krops-registry:5000/charts/podinfo:6.14.1", chart_tgz("podinfo", "6.14.1", app_version=False)
    )
    (pkg / airgap.CHART_BUILD / "podinfo.tar").write_bytes(chart)
    doc = yaml.safe_load((pkg / "zarf.yaml").read_text())
    layouts = [f["source"] for f in doc["components"][0]["files"] if f["source"].startswith(airgap.PROVIDER_BUILD)]
    assert len(layouts) == 5  # the operator providers' components travel with the host component
    for source in layouts:
        (pkg / source).parent.mkdir(parents=True, exist_ok=True)
        (pkg / source).write_text("x")
    (tmp_path / "k").write_text("PRIVATE one")
    assert (
        zarf_standin.main(
            [
                "package",
                "create",
                str(pkg),
                "--confirm",
                "-a",
                "arm64",
                "-o",
                str(tmp_path),
                "--set",
                "VERSION=0.1.0",
                "--set",
                "KIND_VERSION=v0.32.0",
                "--signing-key",
                str(tmp_path / "k"),
            ]
        )
        == 0
    )
    package = str(tmp_path / "zarf-package-krops-local-host-arm64-0.1.0.tar.zst")
    capsys.readouterr()
    assert zarf_standin.main(["package", "deploy", package, "--confirm", "--components", "host,kind-arm64"]) == 0
    assert capsys.readouterr().out == "Deployed krops-local-host: host, kind-arm64\n"
    assert zarf_standin.main(["package", "deploy", package, "--confirm", "--components", "host,kind-amd64"]) == 1
    assert capsys.readouterr().err == "Error: no compatible components found that match kind-amd64\n"
    assert zarf_standin.main(["package", "deploy", package, "--confirm", "--components", "cert-manager"]) == 1
    assert "components cert-manager need one" in capsys.readouterr().err
    doc = yaml.safe_load((pkg / "zarf.yaml").read_text())
    doc["components"][3]["required"] = True  # what the first zarf.yaml had on every component
    assert zarf_standin.select(doc["components"], ["host", "kind-arm64"]) == ["host", "kind-arm64", "cert-manager"]


def test_images_the_workload_clusters_pull_are_imported_into_their_nodes(tree):
    """Objects applied into the workload clusters (kubeConfig Kustomizations, HelmChartProxy, CRS ConfigMaps, workload/)."""
    doc = yaml.safe_load((REPO / airgap.ZARF_FILE).read_text())
    workload = next(c for c in doc["components"] if c["name"] == "workload")
    repos = sorted(airgap.normalize(ref)[0] for ref in workload["x-workload-import"])
    assert repos == [
        "docker.io/kindest/kindnetd",
        "ghcr.io/controlplaneio-fluxcd/flux-operator",
        "ghcr.io/fluxcd/helm-controller",
        "ghcr.io/fluxcd/kustomize-controller",
        "ghcr.io/fluxcd/notification-controller",
        "ghcr.io/fluxcd/source-controller",
        "ghcr.io/stefanprodan/podinfo",  # the newest known release of the tree's range 6.x
    ]
    # the management FluxInstance (airgap/manifests) is not applied there: with another Flux on the
    # workload clusters, the management controllers are not imported into their nodes
    edit(tree, "mgmt/local-host/flux-apps/workload-flux/fluxinstance.yaml", 'version: "2.9.x"', 'version: "2.7.x"')
    images = airgap.derive(str(tree)).images.values()
    mgmt = [i for i in images if i.origins and all(o.startswith("airgap/manifests") for o in i.origins)]
    assert mgmt and not any(i.workload for i in mgmt)


# --- airgap/mirror-sources.yaml: what the other environments pull -------------------------------------

MIRROR_SOURCES = "airgap/mirror-sources.yaml"
LOCAL_TALOS = "mgmt/local-talos"
OPERATOR_PROVIDERS = ("CoreProvider", "BootstrapProvider", "ControlPlaneProvider", "InfrastructureProvider")
_TEMPLATE_IMAGE = re.compile(r"^\s*image:\s*(\S+)\s*$", re.M)
_URL_VERSION = re.compile(r"/(v\d+\.\d+\.\d+)/")


def local_talos_pulls(root):
    """(pin, version, artifact) of everything local-talos pulls, read from its tree and bootstrap.toml.

    pin names where the version is set (an object of the tree, a bootstrap.toml key or a site value);
    artifact is what the entry must name exactly (an image, a chart location or a file URL), or None.
    """
    cfg = krops_config.load(path=str(root / "bootstrap.toml"), environ={})
    built = render.render_directories(render.find_kustomization_dirs(str(root / LOCAL_TALOS)))
    objects = []
    for directory, result in built.items():
        assert not isinstance(result, render.RenderError), f"{directory}: {result}"
        objects.extend(result)
    repos = {
        (o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects if o["kind"] == "HelmRepository"
    }
    site = next(o["data"] for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "local-talos-site")
    pulls = []
    for obj in objects:
        kind, meta, spec = obj["kind"], obj["metadata"], obj.get("spec") or {}
        pin = "{} {}/{}".format(kind, meta.get("namespace"), meta["name"])
        if kind == "OCIRepository":
            pulls.append((pin, spec["ref"]["tag"], "{}:{}".format(spec["url"], spec["ref"]["tag"])))
        elif kind == "HelmRelease" and "chart" in spec:
            chart = spec["chart"]["spec"]
            repo = repos[(meta.get("namespace"), chart["sourceRef"]["name"])]["spec"]["url"]
            pulls.append((pin, chart["version"], "{} (chart {})".format(repo, chart["chart"])))
        elif kind in OPERATOR_PROVIDERS or kind == "TalosControlPlane":
            pulls.append((pin, spec["version"], None))
        elif kind == "TinkerbellMachineTemplate":
            for image in _TEMPLATE_IMAGE.findall(spec["template"]["spec"]["templateOverride"]):
                pulls.append((pin, airgap.normalize(image)[1], image))
    boot = cfg.bootstrap
    for key in ("flux-operator", "cert-manager", "capi-operator"):
        pulls.append((f"bootstrap.toml [charts] {key}", cfg.charts.pin(key), None))
    pulls.append(("bootstrap.toml [bootstrap] flux-version", boot.flux_version, None))
    node = boot.kind_node_image
    pulls.append(("bootstrap.toml [bootstrap] kind-node-image", airgap.normalize(node)[1], node))
    installer = site["TALOS_INSTALLER_IMAGE"]
    pulls.append(("site value TALOS_INSTALLER_IMAGE", airgap.normalize(installer)[1], installer))
    disk = site["TALOS_DISK_IMAGE_URL"]
    pulls.append(("site value TALOS_DISK_IMAGE_URL", _URL_VERSION.search(disk).group(1), disk))
    return sorted(pulls)


def _bare(version):
    return str(version).lstrip("v")


def _flux_distribution(lock, wanted):
    """The newest Flux distribution of the lock matching a flux-version such as 2.9.x (as the operator picks)."""
    pattern = re.compile("^" + re.escape(_bare(wanted)).replace(r"\.x", r"\.\d+") + "$")
    matches = [v for v in lock["flux-distributions"] if pattern.match(_bare(v))]
    return max(matches, key=lambda v: tuple(int(p) for p in _bare(v).split("."))) if matches else None


def mirror_problems(root):
    """What is wrong between the local-talos tree and its entry in airgap/mirror-sources.yaml, one line each."""
    doc = yaml.safe_load((root / MIRROR_SOURCES).read_text()) or {}
    entries = doc.get("local-talos") or []
    lock = airgap.load_lock(str(root))
    problems = []
    claimed = {}
    for entry in entries:
        for pin in entry.get("pinned-by") or []:
            claimed.setdefault(pin, []).append(entry)
    pulls = local_talos_pulls(root)
    for pin, version, artifact in pulls:
        found = claimed.get(pin, [])
        if len(found) != 1:
            problems.append(
                f"{pin} ({version}) is pinned by {len(found)} local-talos entries of {MIRROR_SOURCES}, not 1"
            )
            continue
        entry = found[0]
        if pin.endswith("flux-version"):
            expected = _flux_distribution(lock, version)
            if _bare(entry["version"]) != _bare(expected):
                problems.append(f"{pin} is {version} (Flux {expected}); entry {entry['name']} says {entry['version']}")
        elif _bare(entry["version"]) != _bare(version):
            problems.append(f"{pin} pins {version}; entry {entry['name']} says {entry['version']}")
        named = [entry.get("upstream")] + [
            "{}/{}".format(entry.get("upstream"), c) for c in entry.get("contents") or []
        ]
        images = [airgap.normalize(i) for i in entry.get("images") or []]
        if artifact and artifact not in named and airgap.normalize(artifact) not in images:
            problems.append(f"{pin} pulls {artifact}, which entry {entry['name']} does not name")
    pins = {pin for pin, _version, _artifact in pulls}
    for pin in sorted(set(claimed) - pins):
        problems.append("entry {} is pinned by {}, which the tree does not have".format(claimed[pin][0]["name"], pin))
    # The images that follow a pin carry its version (a provider bumped in the tree but not here).
    for entry in entries:
        images = entry.get("images") or []
        if entry.get("pinned-by") and images and entry["name"] != "flux":
            if not any(_bare(airgap.normalize(i)[1]) == _bare(entry["version"]) for i in images):
                problems.append(f"entry {entry['name']}: no image is tagged {entry['version']}")
    # A digest is written only when airgap/digests.yaml has it with its source: never guessed here.
    known = {k: v["digest"] for k, v in (lock.get("images") or {}).items()}
    for dist in lock.get("flux-distributions", {}).values():
        for name, image in dist["images"].items():
            known[f"ghcr.io/fluxcd/{name}:{image['tag']}"] = image["digest"]
    for entry in entries:
        for ref in entry.get("images") or []:
            digest = airgap.normalize(ref)[2]
            if digest and known.get(airgap.key(ref)) != digest:
                problems.append(f"entry {entry['name']}: {ref} has a digest {airgap.LOCK_FILE} does not confirm")
    # Shared facts come from one table: the chart and provider images of the local-host inventory.
    by_name = {e["name"]: e for e in entries}

    def pinned(name):
        return _bare(by_name.get(name, {}).get("version", ""))

    dist = lock["flux-distributions"].get("v" + pinned("flux"), {"images": {}})["images"]
    tables = {
        "cert-manager": [t.format(v="v" + pinned("cert-manager")) for t in airgap.CHARTS["cert-manager"][1]],
        "capi-operator": [t.format(v="v" + pinned("capi-operator")) for t in airgap.CHARTS["cluster-api-operator"][1]],
        "cluster-api": [f"{r}:v{pinned('cluster-api')}" for r in airgap.PROVIDERS[("CoreProvider", "cluster-api")][1]],
        "flux": [f"ghcr.io/fluxcd/{n}:{dist[n]['tag']}@{dist[n]['digest']}" for n in flux.COMPONENTS if n in dist],
    }
    for name, expected in tables.items():
        listed = sorted(by_name.get(name, {}).get("images") or [])
        if name in by_name and listed != sorted(expected):
            problems.append(f"entry {name}: images {listed} differ from {sorted(expected)}")
    return problems


@pytest.fixture
def talos_tree(tmp_path):
    return copy_repo(tmp_path, ("mgmt/local-talos", "airgap"), ignore=shutil.ignore_patterns("build", "schema"))


def test_every_environment_entry_in_mirror_sources_has_the_required_fields():
    doc = yaml.safe_load((REPO / MIRROR_SOURCES).read_text())
    assert "local-talos" in doc and set(doc) <= set(profiles.PLATFORMS), sorted(doc)
    for env, entries in doc.items():
        names = [e["name"] for e in entries]
        assert len(names) == len(set(names)), env
        for entry in entries:
            assert {"name", "version", "why", "upstream"} <= set(entry), (env, entry.get("name"))
            assert entry.get("images") or entry.get("contents"), (env, entry["name"])
            assert all(airgap.normalize(ref)[0].count("/") >= 1 for ref in entry.get("images") or []), entry["name"]
            assert bool(entry.get("mirror")) == bool(entry.get("push")), (env, entry["name"])


def test_mirror_sources_name_everything_the_local_talos_tree_pulls():
    pins = {pin for pin, _version, _artifact in local_talos_pulls(REPO)}
    # the tree, its bootstrap and the machine: 9 objects, 5 bootstrap.toml keys, 2 site values
    assert pins == {
        "OCIRepository tinkerbell/tinkerbell",
        "HelmRelease cert-manager/cert-manager",
        "HelmRelease capi-operator-system/capi-operator",
        "CoreProvider capi-system/cluster-api",
        "InfrastructureProvider capt-system/tinkerbell-tinkerbell",
        "BootstrapProvider cabpt-system/talos",
        "ControlPlaneProvider cacppt-system/talos",
        "TalosControlPlane default/local-talos-management-control-plane",
        "TinkerbellMachineTemplate default/local-talos-management-control-plane",
        "bootstrap.toml [charts] flux-operator",
        "bootstrap.toml [charts] cert-manager",
        "bootstrap.toml [charts] capi-operator",
        "bootstrap.toml [bootstrap] flux-version",
        "bootstrap.toml [bootstrap] kind-node-image",
        "site value TALOS_INSTALLER_IMAGE",
        "site value TALOS_DISK_IMAGE_URL",
    }
    assert mirror_problems(REPO) == []


def test_a_tree_ahead_of_mirror_sources_is_reported(talos_tree):
    edit(talos_tree, LOCAL_TALOS + "/cabpt-system/bootstrap-provider.yaml", "version: v0.6.12", "version: v0.6.13")
    edit(talos_tree, LOCAL_TALOS + "/site-values.yaml", "installer/SCHEMATIC_ID:v1.12.11", "installer/abc123:v1.12.11")
    edit(talos_tree, "bootstrap.toml", 'flux-version = "2.9.x"', 'flux-version = "2.7.x"')
    # CAPT moved in the tree and in the entry's version, but its controller image was left behind
    edit(talos_tree, LOCAL_TALOS + "/capt-system/infrastructure-provider.yaml", "version: v0.7.0", "version: v0.7.1")
    edit(talos_tree, MIRROR_SOURCES, "  - name: capt\n    version: v0.7.0", "  - name: capt\n    version: v0.7.1")
    assert mirror_problems(talos_tree) == [
        "BootstrapProvider cabpt-system/talos pins v0.6.13; entry cabpt says v0.6.12",
        "bootstrap.toml [bootstrap] flux-version is 2.7.x (Flux v2.7.5); entry flux says v2.9.4",
        "site value TALOS_INSTALLER_IMAGE pulls factory.talos.dev/installer/abc123:v1.12.11, which entry talos does not name",
        "entry capt: no image is tagged v0.7.1",
    ]


def test_a_missing_stale_or_guessed_entry_is_reported(talos_tree):
    doc = yaml.safe_load((talos_tree / MIRROR_SOURCES).read_text())
    entries = doc["local-talos"]
    entries[:] = [e for e in entries if e["name"] != "capt"]
    cacppt = next(e for e in entries if e["name"] == "cacppt")
    cacppt["version"] = "v0.5.13"
    cacppt["images"] = ["ghcr.io/siderolabs/cluster-api-control-plane-talos-controller:v0.5.13"]
    cacppt["pinned-by"].append("ControlPlaneProvider cacppt-system/kubeadm")
    tinkerbell = next(e for e in entries if e["name"] == "tinkerbell")
    tinkerbell["images"][0] = "ghcr.io/tinkerbell/tinkerbell:v0.25.0@sha256:" + "0" * 64
    next(e for e in entries if e["name"] == "cert-manager")["images"].pop()
    (talos_tree / MIRROR_SOURCES).write_text(yaml.safe_dump(doc, sort_keys=False))
    assert mirror_problems(talos_tree) == [
        "ControlPlaneProvider cacppt-system/talos pins v0.5.12; entry cacppt says v0.5.13",
        "InfrastructureProvider capt-system/tinkerbell-tinkerbell (v0.7.0) is pinned by 0 local-talos entries of "
        "airgap/mirror-sources.yaml, not 1",
        "entry cacppt is pinned by ControlPlaneProvider cacppt-system/kubeadm, which the tree does not have",
        "entry tinkerbell: ghcr.io/tinkerbell/tinkerbell:v0.25.0@sha256:"
        + "0" * 64
        + " has a digest airgap/digests.yaml does not confirm",
        "entry cert-manager: images ['quay.io/jetstack/cert-manager-cainjector:v1.21.1', "
        "'quay.io/jetstack/cert-manager-controller:v1.21.1', 'quay.io/jetstack/cert-manager-webhook:v1.21.1'] differ "
        "from ['quay.io/jetstack/cert-manager-cainjector:v1.21.1', 'quay.io/jetstack/cert-manager-controller:v1.21.1', "
        "'quay.io/jetstack/cert-manager-startupapicheck:v1.21.1', 'quay.io/jetstack/cert-manager-webhook:v1.21.1']",
    ]


def test_without_the_local_talos_entry_every_pull_is_reported(talos_tree):
    doc = yaml.safe_load((talos_tree / MIRROR_SOURCES).read_text())
    del doc["local-talos"]
    (talos_tree / MIRROR_SOURCES).write_text(yaml.safe_dump(doc, sort_keys=False))
    problems = mirror_problems(talos_tree)
    assert len(problems) == 16 and all("is pinned by 0 local-talos entries" in p for p in problems)
