# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Air gap: every cluster-api-operator provider takes its components from the bundle (spec.fetchConfig.oci).

The emulated operator (tests/substrate/capi_world.py, registry=ProviderRegistry) refuses a provider
without fetchConfig.oci and reads the artifact as cluster-api-operator v0.28.0 does; the archive and
the offline configuration come from plugins/module_utils/airgap.py.
"""

from __future__ import annotations

import hashlib
import io
import tarfile

import pytest
import yaml

from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils import (
    airgap,
    airgap_charts,
    airgap_offline,
    airgap_package,
)
from tests.substrate import airgap_fixtures
from tests.substrate.airgap_fixtures import chart_tgz, pin_made_up_digests
from tests.substrate.capi_world import CapiController, ProviderRegistry, parse_oci_source
from tests.substrate.fixtures import REPO
from tests.substrate.flux_world import World, condition

# the shared fixtures of the air-gapped bundle's tests (tests/substrate/airgap_fixtures.py)
tree = airgap_fixtures.tree

OP = "operator.cluster.x-k8s.io/v1alpha2"
PROVIDER_FILES = {
    "capi-system/core-provider.yaml": ("CoreProvider", "cluster-api", "capi-system"),
    "capi-system/kubeadm-bootstrap-provider.yaml": ("BootstrapProvider", "kubeadm", "capi-kubeadm-bootstrap-system"),
    "capi-system/kubeadm-control-plane-provider.yaml": (
        "ControlPlaneProvider",
        "kubeadm",
        "capi-kubeadm-control-plane-system",
    ),
    "capd-system/infrastructure-provider.yaml": ("InfrastructureProvider", "docker", "capd-system"),
    "caaph-system/addon-provider.yaml": ("AddonProvider", "helm", "caaph-system"),
}


def _boot():
    """bootstrap.toml [bootstrap] (registry krops-registry, container port 5000)."""
    return krops_config.load(str(REPO / "bootstrap.toml"), environ={}).bootstrap


# the cases of internal/controller/oci_source_parse_test.go @ cluster-api-operator v0.28.0
@pytest.mark.parametrize(
    "url, version, expect_url, expect_version",
    [
        ("registry/image:v1.1.0", "v1.2.0", "registry/image", "v1.1.0"),
        ("registry/image", "v1.2.0", "registry/image", "v1.2.0"),
        ("registry:5050/image", "v1.2.0", "registry:5050/image", "v1.2.0"),
        ("registry:5050/image:v1.1.0", "v1.2.0", "registry:5050/image", "v1.1.0"),
        ("image", "v1.2.0", "image", "v1.2.0"),
    ],
)
def test_stand_in_parses_the_oci_source_as_upstream(url, version, expect_url, expect_version):
    assert parse_oci_source(url, version) == (expect_url, expect_version, False)
    assert parse_oci_source("http://" + url, version) == (expect_url, expect_version, True)


def _layer_files(archive):
    """{path: bytes} of the Flux artifact layer inside the configuration archive."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as outer:
        blobs = {m.name: outer.extractfile(m).read() for m in outer.getmembers() if m.isfile()}
    layer = max((b for n, b in blobs.items() if n.startswith("blobs/")), key=len)
    with tarfile.open(fileobj=io.BytesIO(layer), mode="r:gz") as inner:
        return {m.name: inner.extractfile(m).read() for m in inner.getmembers() if m.isfile()}


RELEASES = {  # the HelmReleases whose chart takes the images' values (airgap/values/<chart>-images.yaml)
    "cert-manager/helmrelease.yaml": "cert-manager",
    "capi-operator/helmrelease.yaml": "cluster-api-operator",
}
OFFLINE_REPOSITORIES = {
    "cert-manager/helmrepository.yaml": "oci://quay.io/jetstack/charts",  # upstream's OCI chart
    "capi-operator/helmrepository.yaml": "oci://krops-registry:5000/charts",  # the chart the package packs
}
PROVIDER_IMAGES = {  # controller images: cluster-api Makefile @ v1.13.5, cluster-api-addon-provider-helm @ v0.6.4
    "CoreProvider": "registry.k8s.io/cluster-api/cluster-api-controller",
    "BootstrapProvider": "registry.k8s.io/cluster-api/kubeadm-bootstrap-controller",
    "ControlPlaneProvider": "registry.k8s.io/cluster-api/kubeadm-control-plane-controller",
    "InfrastructureProvider": "registry.k8s.io/cluster-api/capd-manager",
    "AddonProvider": "registry.k8s.io/cluster-api-helm/cluster-api-helm-controller",
}


def _offline_files(tree):
    archive, _digest = airgap_offline.config_archive(
        str(tree), ["mgmt/local-host", "workload/local-host"], "krops-registry:5000/krops:latest", revision="x"
    )
    return _layer_files(archive)


# the HelmChartProxy of mgmt/local-host/flux-apps as the disconnected host runs it: Flux installs the chart into
# each matching Cluster (local-workload carries fluxcd: enabled) from its OCI chart, which the Zarf agent rewrites
FLUX_OPERATOR_OFFLINE = [
    {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "OCIRepository",
        "metadata": {"name": "flux-operator-chart", "namespace": "default"},
        "spec": {
            "interval": "1h",
            "url": "oci://ghcr.io/controlplaneio-fluxcd/charts/flux-operator",
            "ref": {"tag": "0.58.1"},
            "layerSelector": {"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip", "operation": "copy"},
        },
    },
    {
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": {"name": "flux-operator-local-workload", "namespace": "default"},
        "spec": {
            "interval": "10m",
            "releaseName": "flux-operator",
            "targetNamespace": "flux-system",
            "storageNamespace": "flux-system",
            "chartRef": {"kind": "OCIRepository", "name": "flux-operator-chart"},
            "kubeConfig": {"secretRef": {"name": "local-workload-kubeconfig", "key": "value"}},
            "install": {"createNamespace": True},
            "values": {"image": {"repository": "ghcr.io/controlplaneio-fluxcd/flux-operator", "tag": "v0.58.1"}},
            "timeout": "5m",
        },
    },
]


def test_offline_configuration_sets_fetch_config_on_every_provider_and_changes_nothing_else(tree):
    files = _offline_files(tree)
    seen = set()
    for rel, data in files.items():
        original = (tree / rel).read_bytes()
        short = rel.removeprefix("mgmt/local-host/")
        if short in PROVIDER_FILES:
            kind, name, namespace = PROVIDER_FILES[short]
            (doc,) = list(yaml.safe_load_all(data))
            (before,) = list(yaml.safe_load_all(original))
            assert (doc["kind"], doc["metadata"]["name"], doc["metadata"]["namespace"]) == (kind, name, namespace)
            ptype = {"CoreProvider": "core", "BootstrapProvider": "bootstrap", "ControlPlaneProvider": "control-plane"}
            ptype = ptype.get(kind) or kind.removesuffix("Provider").lower()
            version = before["spec"]["version"]
            assert doc["spec"] == dict(
                before["spec"],
                fetchConfig={"oci": f"http://krops-registry:5000/capi-providers/{ptype}-{name}:{version}"},
            )
            seen.add(short)
        elif short in RELEASES:
            (doc,) = list(yaml.safe_load_all(data))
            (before,) = list(yaml.safe_load_all(original))
            values = yaml.safe_load((tree / "airgap" / "values" / f"{RELEASES[short]}-images.yaml").read_text())
            assert values and doc["spec"] == dict(before["spec"], values={**before["spec"]["values"], **values})
            seen.add(short)
        elif short in OFFLINE_REPOSITORIES:  # OCI repositories instead of the HTTP indexes
            (doc,) = list(yaml.safe_load_all(data))
            (before,) = list(yaml.safe_load_all(original))
            assert doc["spec"] == dict(before["spec"], type="oci", url=OFFLINE_REPOSITORIES[short])
            seen.add(short)
        elif short == "flux-apps/helmchartproxy.yaml":  # CAAPH cannot pull from the plain-HTTP local registry
            (before,) = list(yaml.safe_load_all(original))
            assert list(yaml.safe_load_all(data)) == FLUX_OPERATOR_OFFLINE
            assert before["spec"]["version"] == "0.58.1" and before["spec"]["clusterSelector"] == {
                "matchLabels": {"fluxcd": "enabled"}
            }
            seen.add(short)
        elif rel == "workload/local-host/podinfo.yaml":  # the workload clusters read the local registry only
            source, release = list(yaml.safe_load_all(data))
            before_source, before_release = list(yaml.safe_load_all(original))
            assert source["spec"] == dict(
                before_source["spec"],
                url="oci://krops-registry:5000/charts/podinfo",
                ref={"tag": "6.14.1"},  # the range pinned; the layout's digest once the build packed it
                insecure=True,
            )
            values = yaml.safe_load((tree / "airgap" / "values" / "podinfo-images.yaml").read_text())
            assert release["spec"] == dict(
                before_release["spec"], values={**before_release["spec"]["values"], **values}
            )
            seen.add(rel)
        else:
            assert data == original, rel
    assert seen == set(PROVIDER_FILES) | set(RELEASES) | set(OFFLINE_REPOSITORIES) | {
        "flux-apps/helmchartproxy.yaml",
        "workload/local-host/podinfo.yaml",
    }
    # the tree itself is untouched: the connected profile keeps fetching from the releases
    assert "fetchConfig" not in (tree / "mgmt/local-host/capi-system/core-provider.yaml").read_text()


def test_committed_provider_lock_is_what_the_generator_writes():
    inv = airgap.derive(str(REPO))
    expected = airgap.format_provider_lock(inv, airgap.load_provider_lock(str(REPO)))
    assert (REPO / airgap.PROVIDER_LOCK).read_text() == expected
    doc = yaml.safe_load(expected)
    assert sorted((p["kind"], p["name"]) for p in doc["providers"]) == sorted(
        (k, n) for k, n, _ns in PROVIDER_FILES.values()
    )


def test_a_provider_version_change_is_drift_until_regenerated(tree):
    path = tree / "mgmt/local-host/caaph-system/addon-provider.yaml"
    path.write_text(path.read_text().replace("v0.6.4", "v0.6.5"))
    findings, _unconfirmed = airgap_package.check(str(tree), pin=False)
    assert any(f[0] == airgap.PROVIDER_LOCK for f in findings)


def release_files(inv, broken=None):
    """What the releases would serve (fake bytes), keyed by URL."""
    served = {}
    for entry in inv.providers:
        for f in entry["files"]:
            served[f["url"]] = ("# " + f["url"] + "\n").encode() if f["url"] != broken else b"tampered\n"
    return served


def test_build_refuses_unrecorded_and_tampered_files_and_records_on_request(tree):
    inv = airgap.derive(str(tree))
    served = release_files(inv)
    with pytest.raises(airgap.AirgapError, match="no sha256 recorded"):
        airgap.fetch_providers(str(tree), inv, download=served.__getitem__)
    written, recorded = airgap.fetch_providers(str(tree), inv, download=served.__getitem__, record=True)
    assert len(written) == 5 and len(recorded) == 7  # the four cluster-api providers share one metadata.yaml
    assert all(recorded[u] == hashlib.sha256(b).hexdigest() for u, b in served.items())
    assert airgap.unconfirmed_provider_files(inv, airgap.load_provider_lock(str(tree))) == []
    core = next(e for e in inv.providers if e["kind"] == "CoreProvider")
    tampered = release_files(inv, broken=core["files"][1]["url"])
    with pytest.raises(airgap.AirgapError, match="differs from"):
        airgap.fetch_providers(str(tree), inv, download=tampered.__getitem__)


@pytest.fixture
def mgmt(strict_cluster):
    api = strict_cluster("mgmt", bundles=("capi-operator",))
    for _kind, _name, ns in PROVIDER_FILES.values():
        if not api.exists("v1", "Namespace", ns):
            api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    return api


def _apply_providers(api, root, offline):
    for short, (kind, name, ns) in PROVIDER_FILES.items():
        (doc,) = list(yaml.safe_load_all((root / "mgmt/local-host" / short).read_text()))
        if offline:
            entry = airgap.provider_entry(_boot(), kind, name, doc["spec"]["version"])
            doc = airgap.with_fetch_config(doc, entry)
        api.create(doc)


def test_offline_configuration_runs_every_pinned_image_by_digest(tree):
    """With the digests known, each provider's controller container and each chart's images name them: zarf pushes
    a digest-listed image under the digest only, and the agent keeps repo@digest (docs/airgap.md)."""
    digests = pin_made_up_digests(tree)
    airgap_package.write(str(tree), airgap.derive(str(tree)))
    files = _offline_files(tree)
    for short, (kind, _name, _namespace) in PROVIDER_FILES.items():
        (doc,) = list(yaml.safe_load_all(files["mgmt/local-host/" + short]))
        ref = "{}:{}".format(PROVIDER_IMAGES[kind], doc["spec"]["version"])
        assert doc["spec"]["deployment"] == {"containers": [{"name": "manager", "imageUrl": f"{ref}@{digests[ref]}"}]}
    (release,) = list(yaml.safe_load_all(files["mgmt/local-host/cert-manager/helmrelease.yaml"]))
    webhook = "quay.io/jetstack/cert-manager-webhook:v1.21.1"
    assert release["spec"]["values"]["webhook"]["image"] == {
        "repository": "quay.io/jetstack/cert-manager-webhook",
        "tag": "v1.21.1",
        "digest": digests[webhook],
    }
    assert release["spec"]["values"]["crds"] == {"enabled": True}  # the tree's own values stay
    (release,) = list(yaml.safe_load_all(files["mgmt/local-host/capi-operator/helmrelease.yaml"]))
    operator = "registry.k8s.io/capi-operator/cluster-api-operator:v0.28.0"
    assert release["spec"]["values"]["image"]["manager"]["digest"] == digests[operator]
    # stale values files are drift until regenerated
    path = tree / "airgap" / "values" / "cert-manager-images.yaml"
    path.write_text(path.read_text().replace(digests[webhook], "sha256:" + "0" * 64))
    findings, _unconfirmed = airgap_package.check(str(tree))
    assert (
        "airgap/values/cert-manager-images.yaml",
        "-",
        "does not name the cert-manager chart's images with the digests of airgap/images.txt: regenerate it with "
        "scripts/airgap-inventory --write",
    ) in findings


def _reasons(api):
    return {(k, n): condition(api.get(OP, k, n, ns))["reason"] for k, n, ns in PROVIDER_FILES.values()}


def test_air_gapped_operator_refuses_providers_without_fetch_config(mgmt, strict_cluster):
    world = World()
    world.add_cluster(mgmt)
    CapiController(world, spawn=strict_cluster, registry=ProviderRegistry())
    _apply_providers(mgmt, REPO, offline=False)
    world.settle()
    core = condition(mgmt.get(OP, "CoreProvider", "cluster-api", "capi-system"))
    assert (core["status"], core["reason"]) == ("False", "ComponentsFetchFailed")
    assert "no spec.fetchConfig.oci" in core["message"] and "github.com" in core["message"]


def test_air_gapped_operator_installs_from_the_bundled_artifacts(tree, mgmt, strict_cluster):
    inv = airgap.derive(str(tree))
    served = release_files(inv)
    written, _recorded = airgap.fetch_providers(str(tree), inv, download=served.__getitem__, record=True)
    registry = ProviderRegistry()
    for path in written:
        with open(path, "rb") as handle:
            registry.push_layout(handle.read())
    world = World()
    world.add_cluster(mgmt)
    CapiController(world, spawn=strict_cluster, registry=registry)
    _apply_providers(mgmt, tree, offline=True)
    world.settle()
    assert set(_reasons(mgmt).values()) == {"Ready"}
    assert ("krops-registry:5000/capi-providers/infrastructure-docker", "v1.13.5") in registry.fetches


def test_air_gapped_operator_refuses_an_artifact_without_the_names_it_reads(mgmt, strict_cluster):
    # CAPD's release file under its release name: the operator does not read it
    entry = airgap.provider_entry(_boot(), "CoreProvider", "cluster-api", "v1.13.5")
    registry = ProviderRegistry()
    data, _digest = airgap.provider_archive(
        entry["artifact"], {"metadata.yaml": b"x: 1\n", "core-components-release.yaml": b"kind: List\n"}
    )
    registry.push_layout(data)
    world = World()
    world.add_cluster(mgmt)
    CapiController(world, spawn=strict_cluster, registry=registry)
    mgmt.create(
        airgap.with_fetch_config(
            yaml.safe_load((REPO / "mgmt/local-host/capi-system/core-provider.yaml").read_text()), entry
        )
    )
    world.settle()
    core = condition(mgmt.get(OP, "CoreProvider", "cluster-api", "capi-system"))
    assert core["reason"] == "ComponentsFetchFailed"
    assert "core-cluster-api-v1.13.5-components.yaml or core-components.yaml or components.yaml" in core["message"]


def test_images_txt_line_no_object_uses_is_reported(tree):
    path = tree / airgap.INVENTORY
    path.write_text(path.read_text() + "docker.io/library/unused:1  # workload: nobody\n")
    findings, _unconfirmed = airgap_package.check(str(tree), pin=False)
    assert any("used by no object" in f[2] and f[1] == "docker.io/library/unused:1" for f in findings)


class _Registry:
    """The distribution API as the push uses it: blobs by digest, manifests by repository and tag."""

    def __init__(self):
        self.blobs, self.manifests = {}, {}

    def push_blob(self, repository, data):
        self.blobs[(repository, "sha256:" + hashlib.sha256(data).hexdigest())] = data
        return True

    def put_manifest(self, repository, reference, body):
        import json

        for blob in [json.loads(body)["config"], *json.loads(body)["layers"]]:
            assert (repository, blob["digest"]) in self.blobs, "manifest pushed before its blobs"
        self.manifests[(repository, reference)] = body


def test_deploy_pushes_each_layout_under_the_reference_fetch_config_names(tree):
    inv = airgap.derive(str(tree))
    served = release_files(inv)
    written, _recorded = airgap.fetch_providers(str(tree), inv, download=served.__getitem__, record=True)
    registry = _Registry()
    pushed = airgap.push_layouts([str(tree / "airgap" / airgap.PROVIDER_BUILD)], "localhost:5001", client=registry)
    assert len(pushed) == len(written) == 5
    for entry in inv.providers:
        repository, tag, plain = parse_oci_source(entry["oci"], entry["version"])
        assert plain and (repository.split("/", 1)[1], tag) in registry.manifests


def test_push_without_layouts_is_one_message(tmp_path):
    with pytest.raises(airgap.AirgapError, match="deploy the host component first"):
        airgap.push_layouts([str(tmp_path / "none")], "localhost:5001", client=_Registry())


def test_podinfo_range_is_pinned_offline_to_the_newest_known_release_and_its_layout(tree, tmp_path):
    inv = airgap.derive(str(tree))
    assert "ghcr.io/stefanprodan/podinfo:6.14.1" in inv.images  # digests.yaml chart-releases, newest 6.x
    assert inv.charts["podinfo"] == "6.14.1" and inv.problems == []  # the offline configuration pins it
    # once the build packed the chart, the OCIRepository is pinned to the layout's manifest digest too
    layout, digest = airgap_charts.chart_archive(
        "krops-registry:5000/charts/podinfo:6.14.1", chart_tgz("podinfo", "6.14.1")
    )
    (tree / "airgap" / airgap.CHART_BUILD).mkdir(parents=True)
    (tree / "airgap" / airgap.CHART_BUILD / "podinfo.tar").write_bytes(layout)
    airgap_offline.stage_offline_tree(str(tree), ["workload/local-host"], str(tmp_path / "staged"))
    source, _release = yaml.safe_load_all((tmp_path / "staged" / "workload/local-host/podinfo.yaml").read_text())
    assert source["spec"]["ref"] == {"tag": "6.14.1", "digest": digest}
    lock = tree / airgap.LOCK_FILE
    lock.write_text(lock.read_text().replace('versions: ["6.14.1"]', 'versions: ["6.14.1", "7.0.0", "6.9.0"]'))
    assert "ghcr.io/stefanprodan/podinfo:6.14.1" in airgap.derive(str(tree)).images
    # a range no known release matches stays a problem of the pin check
    pod = tree / "workload/local-host/podinfo.yaml"
    pod.write_text(pod.read_text().replace('semver: "6.x"', 'semver: "8.x"'))
    assert [p[2] for p in airgap.derive(str(tree)).problems] == [
        "chart podinfo version '8.x' is not an exact version: its images cannot be pinned; pin the chart to one release"
    ]
    # an exact version needs no release list
    pod.write_text(pod.read_text().replace('semver: "8.x"', 'tag: "6.9.0"'))
    images = airgap.derive(str(tree)).images
    assert "ghcr.io/stefanprodan/podinfo:6.9.0" in images and "ghcr.io/stefanprodan/podinfo:6.14.1" not in images


def _pinned_refs(node):
    """Every image reference an object names: container images, providers' imageUrl, and chart image values
    (a mapping with repository and tag, the digest in it or in the tag)."""
    if isinstance(node, dict):
        if isinstance(node.get("image"), str) and "name" in node:
            yield node["image"]
        if isinstance(node.get("imageUrl"), str):
            yield node["imageUrl"]
        if isinstance(node.get("repository"), str) and isinstance(node.get("tag"), str) and node["tag"]:
            yield "{}:{}".format(node["repository"], node["tag"]) + (f"@{node['digest']}" if node.get("digest") else "")
        for value in node.values():
            yield from _pinned_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _pinned_refs(value)


def test_every_image_the_offline_configuration_pins_is_in_the_inventory_with_its_digest(tree, tmp_path):
    """The lock and the trees agree, the workload tree included: every image an object of the staged mgmt/ and
    workload/ configuration runs or pins by value is a line of images.txt with the same digest, and every line of
    the workload component is pinned by what the workload clusters run (read from the rendered objects, not from
    the inventory's own derivation)."""
    from ansible_collections.krops.platform.plugins.module_utils import render

    pin_made_up_digests(tree)
    airgap_package.write(str(tree), airgap.derive(str(tree)))
    staged = tmp_path / "staged"
    airgap_offline.stage_offline_tree(str(tree), ["mgmt/local-host", "workload/local-host"], str(staged))
    listed = airgap.read_inventory(str(tree / airgap.INVENTORY))
    pinned = {}
    for top in ("mgmt/local-host", "workload/local-host"):
        directories = render.find_kustomization_dirs(str(staged / top))
        for directory, objects in render.render_directories(directories).items():
            assert not isinstance(objects, render.RenderError), (directory, objects)
            for obj in objects:
                docs = [obj] + [
                    d
                    for v in ((obj.get("data") or {}).values() if obj.get("kind") == "ConfigMap" else ())
                    for d in yaml.safe_load_all(v)
                    if isinstance(d, dict)
                ]
                for ref in _pinned_refs(docs):
                    pinned.setdefault(airgap.key(ref), set()).add(airgap.normalize(ref)[2])
    for key, digests in sorted(pinned.items()):
        assert key in listed, key
        assert digests == {listed[key][0]}, (key, digests, listed[key][0])  # every one by the lock's digest
    workload = {
        line.split()[0].split("@")[0]
        for line in (tree / airgap.INVENTORY).read_text().splitlines()
        if "# workload:" in line or "# UNCONFIRMED workload:" in line
    }
    assert workload == {"docker.io/kindest/kindnetd:v20260528-9350166c", "ghcr.io/stefanprodan/podinfo:6.14.1"}
    assert workload <= set(pinned)  # Podinfo by the workload tree's HelmRelease values, kindnet by its manifest
    assert "ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1" in pinned  # the workload clusters' HelmRelease
