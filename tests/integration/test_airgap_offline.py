"""The network cut: what the air-gapped cluster runs comes from the bundle's registry, by digest, or not at all.

In-process (no ansible-playbook): the package is built from the ``ready`` tree by the zarf stand-in, its
cluster components are deployed by tests/substrate/airgap_world.zarf_deploy into an emulated kind cluster
whose kubelet pulls only from the Zarf registry stand-in. The pods' images come from the charts' own
workloads (airgap_world.CHART_WORKLOADS), never from krops' inventory.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
import zlib

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
from tests.substrate.airgap_fixtures import chart_tgz
from tests.substrate import zarf_standin
from tests.substrate.fixtures import REPO
from tests.substrate.airgap_world import (
    ZARF_REGISTRY,
    DeployFailed,
    Kubelet,
    RefError,
    ZarfRegistry,
    agent_mutate_helm_repository,
    pull_chart,
    transform_host,
    zarf_deploy,
)
from tests.substrate.capi_world import CapiController, ProviderRegistry
from tests.substrate.flux_world import FluxController, World, condition

# the shared fixtures of the air-gapped bundle's tests (tests/substrate/airgap_fixtures.py)
ready = airgap_fixtures.ready

# zarf src/pkg/transform/image_test.go @ v0.84.0: (reference, ImageTransformHost, ...WithoutChecksum) to gitlab.com/project
ZARF_CASES = [
    ("nginx", "gitlab.com/project/library/nginx:latest-zarf-3793515731", "gitlab.com/project/library/nginx:latest"),
    (
        "nginx:1.23.3",
        "gitlab.com/project/library/nginx:1.23.3-zarf-3793515731",
        "gitlab.com/project/library/nginx:1.23.3",
    ),
    (
        "zarf-dev/zarf-agent:v0.22.1",
        "gitlab.com/project/zarf-dev/zarf-agent:v0.22.1-zarf-2183797434",
        "gitlab.com/project/zarf-dev/zarf-agent:v0.22.1",
    ),
    (
        "busybox:latest@sha256:3fbc632167424a6d997e74f52b878d7cc478225cffac6bc977eedfe51c7f4e79",
        "gitlab.com/project/library/busybox@sha256:3fbc632167424a6d997e74f52b878d7cc478225cffac6bc977eedfe51c7f4e79",
        "gitlab.com/project/library/busybox@sha256:3fbc632167424a6d997e74f52b878d7cc478225cffac6bc977eedfe51c7f4e79",
    ),
    (
        "ghcr.io/stefanprodan/podinfo:6.3.3",
        "gitlab.com/project/stefanprodan/podinfo:6.3.3-zarf-2985051089",
        "gitlab.com/project/stefanprodan/podinfo:6.3.3",
    ),
    (
        "registry1.dso.mil/ironbank/opensource/zarf-dev/zarf/zarf-agent:v0.25.0",
        "gitlab.com/project/ironbank/opensource/zarf-dev/zarf/zarf-agent:v0.25.0-zarf-1211467612",
        "gitlab.com/project/ironbank/opensource/zarf-dev/zarf/zarf-agent:v0.25.0",
    ),
    (
        "gitlab.com/project/gitea/gitea:1.19.3-rootless-zarf-3431384023",
        "gitlab.com/project/gitea/gitea:1.19.3-rootless-zarf-3431384023",
        "gitlab.com/project/gitea/gitea:1.19.3-rootless-zarf-3431384023",
    ),
    (
        "oci://10.43.130.183:5000/stefanprodan/manifests/podinfo",
        "gitlab.com/project/stefanprodan/manifests/podinfo:latest-zarf-531355090",
        "gitlab.com/project/stefanprodan/manifests/podinfo:latest",
    ),
]


def _boot():
    """bootstrap.toml [bootstrap] (registry krops-registry, container port 5000)."""
    return krops_config.load(str(REPO / "bootstrap.toml"), environ={}).bootstrap


@pytest.mark.parametrize("ref,with_crc,plain", ZARF_CASES)
def test_the_image_transform_is_zarfs(ref, with_crc, plain):
    assert transform_host("gitlab.com/project", ref) == with_crc
    assert transform_host("gitlab.com/project", ref, checksum=False) == plain


def _layout(reference):
    manifest = json.dumps({"schemaVersion": 2, "layers": []}).encode()
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    index = {
        "schemaVersion": 2,
        "manifests": [{"digest": digest, "annotations": {"org.opencontainers.image.ref.name": reference}}],
    }
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for name, body in (("index.json", json.dumps(index).encode()), ("blobs/sha256/" + digest[7:], manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return data.getvalue()


def build(root, tmp_path, drop=None):
    """The package zarf create makes of the ready tree (stand-in), optionally with one image line removed."""
    airgap = root / "airgap"
    for name in ("host-images.tar", "krops-config.tar"):
        (airgap / "build" / "providers").mkdir(parents=True, exist_ok=True)
        (airgap / "build" / name).write_bytes(_layout("krops-registry:5000/krops:latest"))
    (airgap / "build" / "charts").mkdir(parents=True, exist_ok=True)
    (airgap / "build" / "charts" / "cluster-api-operator.tar").write_bytes(
        _layout("krops-registry:5000/charts/cluster-api-operator:0.28.0")
    )
    (airgap / "build" / "charts" / "podinfo.tar").write_bytes(_layout("krops-registry:5000/charts/podinfo:6.14.1"))
    for provider in (
        "addon-helm",
        "bootstrap-kubeadm",
        "control-plane-kubeadm",
        "core-cluster-api",
        "infrastructure-docker",
    ):
        (airgap / "build" / "providers" / f"{provider}.tar").write_bytes(b"")
    if drop:
        text = (airgap / "zarf.yaml").read_text()
        line = f"  - {drop}\n"
        assert text.count(line) == 1, drop
        (airgap / "zarf.yaml").write_text(text.replace(line, ""))
    key = tmp_path / "zarf.key"
    key.write_text("PRIVATE krops-test")
    out = tmp_path / "out"
    flags = {
        "architecture": ["amd64"],
        "output": [str(out)],
        "set": ["VERSION=0.1.0", "KIND_VERSION=v0.32.0"],
        "signing-key": [str(key)],
    }
    zarf_standin.create(flags, [str(airgap)])
    [package] = out.glob("zarf-package-*.tar.zst")
    return json.loads(package.read_text())


@pytest.fixture
def airgapped(strict_cluster):
    """An emulated kind cluster whose kubelet pulls only from the Zarf registry (the agent on)."""
    world = World()
    api = strict_cluster("kind-airgap")
    world.add_cluster(api)
    registry = ZarfRegistry()
    Kubelet(world, api, registry)
    world.start(interval=0.01, idle=0.2)
    yield api, registry
    assert world.stop() == []


CHART_COMPONENTS = ["cert-manager", "capi-operator"]
CHART_PODS = ["capi-operator-cluster-api-operator", "cert-manager", "cert-manager-cainjector", "cert-manager-webhook"]


def _pods(api):
    return {p["metadata"]["name"].rsplit("-", 1)[0]: p for p in api.list("v1", "Pod")}


def test_the_bundle_runs_every_chart_workload_from_the_zarf_registry_by_digest(ready, tmp_path, airgapped):
    """Every image is in the package by digest; the charts' image values name the digests, so each pod runs
    127.0.0.1:31999/<path>@<digest> (zarf pushes a digest-listed image under the digest only)."""
    api, registry = airgapped
    package = build(ready, tmp_path)
    # every image by digest; the configuration and the chart artifact by tag (their pulls name a tag)
    assert [r for r in package["images"] if "@sha256:" not in r] == [
        "quay.io/jetstack/charts/cert-manager:v1.21.1",
        "krops-registry:5000/charts/cluster-api-operator:0.28.0",
        "krops-registry:5000/krops:latest",
        "ghcr.io/controlplaneio-fluxcd/charts/flux-operator:0.58.1",
    ]
    zarf_deploy(api, package, CHART_COMPONENTS, registry)
    pods = _pods(api)
    assert sorted(pods) == CHART_PODS
    for pod in pods.values():
        [status] = pod["status"]["containerStatuses"]
        original = pod["metadata"]["annotations"]["zarf.dev/original-image-" + status["name"]]
        # the chart ran the packaged image by its digest (cert-manager renders repo:tag@digest, the operator's
        # chart repo@digest)
        repo, digest = original.split("@")
        [packaged] = [r for r in package["images"] if r.split(":")[0] == repo.split(":")[0]]
        assert packaged.split("@")[1] == digest == package["digests"][packaged]
        assert status["image"] == "{}/{}@{}".format(ZARF_REGISTRY, repo.split("/", 1)[1].split(":")[0], digest)
        assert status["imageID"] == digest and status["state"] == {"running": {}}
    assert "jetstack/cert-manager-webhook" not in registry.tags  # pushed by digest only: the tag is not served
    for deployment in api.list("apps/v1", "Deployment"):
        assert condition(deployment, "Available")["status"] == "True"


def test_one_image_missing_from_the_bundle_fails_the_deploy_naming_it(ready, tmp_path, airgapped):
    api, registry = airgapped
    [ref] = [
        line.split()[0]
        for line in (ready / "airgap" / "images.txt").read_text().splitlines()
        if line.startswith("quay.io/jetstack/cert-manager-webhook:v1.21.1@sha256:")
    ]
    package = build(ready, tmp_path, drop=ref)
    with pytest.raises(DeployFailed) as failed:
        zarf_deploy(api, package, CHART_COMPONENTS, registry, timeout=2)
    image = "127.0.0.1:31999/jetstack/cert-manager-webhook@" + ref.split("@")[1]
    pod = _pods(api)["cert-manager-webhook"]["metadata"]["name"]
    assert str(failed.value) == (
        "component cert-manager: health checks did not pass: Deployment cert-manager/cert-manager-webhook: "
        f'pod {pod}: ErrImagePull: failed to pull and unpack image "{image}": failed to resolve reference '
        f'"{image}": {image}: not found'
    )


def test_without_the_image_values_a_chart_that_runs_tags_finds_nothing(ready, tmp_path, airgapped):
    """Why the values files exist: zarf pushes a digest-listed image under the digest only and the agent rewrites a
    pod's tag to the crc32 tag, so the chart's default (a tag) is not in the registry."""
    api, registry = airgapped
    values = ready / "airgap" / "values" / "cert-manager-images.yaml"
    values.write_text("{}\n")
    package = build(ready, tmp_path)
    with pytest.raises(DeployFailed) as failed:
        zarf_deploy(api, package, ["cert-manager"], registry, timeout=2)
    pods = _pods(api)
    reasons = []
    for name, image_name, crc in (
        ("cert-manager", "cert-manager-controller", 1554577349),
        ("cert-manager-webhook", "cert-manager-webhook", 1456110539),
        ("cert-manager-cainjector", "cert-manager-cainjector", 1217229965),
    ):
        image = f"127.0.0.1:31999/jetstack/{image_name}:v1.21.1-zarf-{crc}"
        reasons.append(
            f"Deployment cert-manager/{name}: pod {pods[name]['metadata']['name']}: ErrImagePull: failed to pull and "
            f'unpack image "{image}": failed to resolve reference "{image}": {image}: not found'
        )
    assert str(failed.value) == "component cert-manager: health checks did not pass: " + "; ".join(reasons)


def test_unconfirmed_images_are_packaged_and_run_by_tag(ready, tmp_path, airgapped):
    """Before --resolve (no digest known), zarf.yaml and the values name the tag: zarf pushes the tag and the crc32
    tag, and the agent's crc32 tag is found."""
    api, registry = airgapped
    lock_path = ready / airgap.LOCK_FILE
    lock = yaml.safe_load(lock_path.read_text())
    for key in list(lock["images"]):
        if key.startswith(("quay.io/jetstack/", "registry.k8s.io/capi-operator/")):
            del lock["images"][key]
    lock_path.write_text(yaml.safe_dump(lock))
    airgap_package.write(str(ready), airgap.derive(str(ready)))
    package = build(ready, tmp_path)
    zarf_deploy(api, package, CHART_COMPONENTS, registry)
    pods = _pods(api)
    [status] = pods["capi-operator-cluster-api-operator"]["status"]["containerStatuses"]
    assert status["image"] == "127.0.0.1:31999/capi-operator/cluster-api-operator:v0.28.0-zarf-{}".format(
        zlib.crc32(b"registry.k8s.io/capi-operator/cluster-api-operator") & 0xFFFFFFFF
    )
    assert status["imageID"] == package["digests"]["registry.k8s.io/capi-operator/cluster-api-operator:v0.28.0"]
    assert sorted(pods) == CHART_PODS


def test_the_kubelet_refuses_a_digest_the_registry_does_not_hold_and_any_other_host(airgapped):
    api, registry = airgapped
    held = "sha256:" + "a" * 64
    registry.push("ghcr.io/fluxcd/source-controller:v1.9.4@" + held, held)
    registry.push("ghcr.io/fluxcd/helm-controller:v1.6.3", "sha256:" + "b" * 64)
    other = "ghcr.io/fluxcd/source-controller@sha256:" + "c" * 64
    for name, namespace, image in [
        ("held", "default", "ghcr.io/fluxcd/source-controller:v1.9.4@" + held),
        ("by-tag", "default", "ghcr.io/fluxcd/helm-controller:v1.6.3"),
        ("other-digest", "default", other),
        ("unmutated", "kube-system", "ghcr.io/fluxcd/helm-controller:v1.6.3"),
    ]:
        api.create(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": "c", "image": image}]},
                    },
                },
            }
        )

    def waiting():
        return {
            p["metadata"]["name"].rsplit("-", 1)[0]: ((p.get("status") or {}).get("containerStatuses") or [{}])[0].get(
                "state"
            )
            for p in api.list("v1", "Pod")
        }

    deadline = time.monotonic() + 10
    while len([s for s in waiting().values() if s]) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    states = waiting()
    assert states["held"] == {"running": {}} and states["by-tag"] == {"running": {}}
    missing = "127.0.0.1:31999/fluxcd/source-controller@sha256:" + "c" * 64
    assert states["other-digest"]["waiting"]["message"] == (
        f'failed to pull and unpack image "{missing}": failed to resolve reference "{missing}": {missing}: not found'
    )
    plain = "ghcr.io/fluxcd/helm-controller:v1.6.3"
    assert states["unmutated"]["waiting"]["message"] == (
        f'failed to pull and unpack image "{plain}": failed to resolve reference "{plain}": failed to do request: '
        'Head "https://ghcr.io/v2/fluxcd/helm-controller/manifests/v1.6.3": dial tcp: lookup ghcr.io: no such host'
    )


def test_offline_flux_refuses_sources_outside_the_bundle(strict_cluster, tmp_path):
    api = strict_cluster("kind-offline", bundles=("flux",))
    world = World()
    world.add_cluster(api)
    FluxController(world, tmp_path, registry_aliases={"krops-registry:5000": "127.0.0.1:1"}, offline=True)
    for kind, name, spec in [
        (
            "OCIRepository",
            "podinfo",
            {"interval": "1m", "url": "oci://ghcr.io/stefanprodan/charts/podinfo", "ref": {"tag": "6.9.0"}},
        ),
        ("HelmRepository", "jetstack", {"interval": "1h", "url": "https://charts.jetstack.io"}),
    ]:
        api.create(
            {
                "apiVersion": "source.toolkit.fluxcd.io/v1",
                "kind": kind,
                "metadata": {"name": name, "namespace": "default"},
                "spec": spec,
            }
        )
    world.settle()
    oci = condition(api.get("source.toolkit.fluxcd.io/v1", "OCIRepository", "podinfo", "default"))
    helm = condition(api.get("source.toolkit.fluxcd.io/v1", "HelmRepository", "jetstack", "default"))
    assert (oci["status"], oci["reason"], oci["message"]) == (
        "False",
        "OCIArtifactPullFailed",
        "failed to determine artifact digest: oci://ghcr.io/stefanprodan/charts/podinfo: dial tcp: lookup ghcr.io: no such host",
    )
    assert (helm["status"], helm["reason"], helm["message"]) == (
        "False",
        "IndexationFailed",
        "failed to fetch Helm repository index: https://charts.jetstack.io: dial tcp: lookup charts.jetstack.io: no such host",
    )


PROVIDER_COMPONENTS = ["capi", "capd", "caaph"]
MANAGERS = {  # the providers' controller Deployments (tests/substrate/capi_world.PROVIDER_MANAGERS)
    "capi-system": "capi-controller-manager",
    "capi-kubeadm-bootstrap-system": "capi-kubeadm-bootstrap-controller-manager",
    "capi-kubeadm-control-plane-system": "capi-kubeadm-control-plane-controller-manager",
    "capd-system": "capd-controller-manager",
    "caaph-system": "caaph-controller-manager",
}


def _pulled_pod(api, ns, prefix, state="running", timeout=5.0):
    """The Kubelet's pod of the Deployment ``prefix`` once its container is in ``state`` (or at the timeout): the
    kubelet retries a failed pull, as a pod that started before its image was pushed does."""
    deadline = time.monotonic() + timeout
    while True:
        pods = [p for p in api.list("v1", "Pod", ns) if p["metadata"]["name"].startswith(prefix + "-")]
        statuses = pods and ((pods[0].get("status") or {}).get("containerStatuses") or [{}])
        if (statuses and state in (statuses[0].get("state") or {})) or time.monotonic() > deadline:
            [pod] = pods
            return pod
        time.sleep(0.05)


def _provider_world(root, tmp_path, strict_cluster, pinned=True):
    """The air-gapped management cluster: the operator reads components only from the bundle's artifacts and the
    kubelet pulls only from the Zarf registry. The providers are the offline configuration's (``pinned``) or the
    tree's own objects with fetchConfig.oci only."""
    inv = airgap.derive(str(root))
    served = {f["url"]: f["url"].encode() for e in inv.providers for f in e["files"]}  # recorded by the fixture
    written, _recorded = airgap.fetch_providers(str(root), inv, download=served.__getitem__)
    artifacts = ProviderRegistry()
    for path in written:
        with open(path, "rb") as handle:
            artifacts.push_layout(handle.read())
    staged = tmp_path / "staged"
    airgap_offline.stage_offline_tree(str(root), ["mgmt/local-host"], str(staged))
    api = strict_cluster("kind-airgap-mgmt", bundles=("capi-operator",))
    world = World()
    world.add_cluster(api)
    registry = ZarfRegistry()
    Kubelet(world, api, registry)
    CapiController(world, spawn=strict_cluster, registry=artifacts)
    world.start(interval=0.01, idle=0.2)
    boot = _boot()
    for rel in sorted((root / "mgmt" / "local-host").rglob("*-provider.yaml")):
        if pinned:
            (doc,) = yaml.safe_load_all((staged / rel.relative_to(root)).read_text())
        else:
            (doc,) = yaml.safe_load_all(rel.read_text())
            entry = airgap.provider_entry(boot, doc["kind"], doc["metadata"]["name"], doc["spec"]["version"])
            doc = airgap.with_fetch_config(doc, entry)
        ns = doc["metadata"]["namespace"]
        if not api.exists("v1", "Namespace", ns):
            api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        api.create(doc)
    return world, api, registry


def test_the_providers_run_their_controllers_from_the_zarf_registry_by_digest(ready, tmp_path, strict_cluster):
    world, api, registry = _provider_world(ready, tmp_path, strict_cluster)
    try:
        package = build(ready, tmp_path)
        zarf_deploy(api, package, PROVIDER_COMPONENTS, registry)  # health checks: the five providers Ready
        listed = airgap.read_inventory(str(ready / airgap.INVENTORY))
        for ns, name in MANAGERS.items():
            deployment = api.get("apps/v1", "Deployment", name, ns)
            [container] = deployment["spec"]["template"]["spec"]["containers"]
            repo_tag, digest = container["image"].split("@")
            assert listed[repo_tag][0] == digest  # the operator applied imageUrl = the packaged repo:tag@digest
            [status] = _pulled_pod(api, ns, name)["status"]["containerStatuses"]
            path = repo_tag.split("/", 1)[1].split(":")[0]
            assert (status["image"], status["imageID"]) == (f"{ZARF_REGISTRY}/{path}@{digest}", digest)
            # until Available is True, not merely there: a False condition stopped this wait early (a race that
            # failed under load)
            deadline = time.monotonic() + 30
            while (condition(api.get("apps/v1", "Deployment", name, ns), "Available") or {}).get(
                "status"
            ) != "True" and time.monotonic() < deadline:
                time.sleep(0.05)
            assert condition(api.get("apps/v1", "Deployment", name, ns), "Available")["status"] == "True"
    finally:
        assert world.stop() == []


def test_providers_without_the_pinned_image_do_not_pull(ready, tmp_path, strict_cluster):
    """The release's components run repo:tag; zarf pushed the digest-listed image under the digest only."""
    world, api, registry = _provider_world(ready, tmp_path, strict_cluster, pinned=False)
    try:
        package = build(ready, tmp_path)
        zarf_deploy(api, package, PROVIDER_COMPONENTS, registry)  # the providers are Ready: the operator installed
        image = "127.0.0.1:31999/cluster-api/capd-manager:v1.13.5-zarf-{}".format(
            zlib.crc32(b"registry.k8s.io/cluster-api/capd-manager") & 0xFFFFFFFF
        )
        [status] = _pulled_pod(api, "capd-system", "capd-controller-manager", "waiting")["status"]["containerStatuses"]
        assert status["state"]["waiting"] == {
            "reason": "ErrImagePull",
            "message": f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": {image}: not found',
        }
    finally:
        assert world.stop() == []


def _staged_doc(root, tmp_path, rel):
    staged = tmp_path / "staged-config"
    if not staged.exists():
        airgap_offline.stage_offline_tree(str(root), ["mgmt/local-host"], str(staged))
    (doc,) = yaml.safe_load_all((staged / rel).read_text())
    return doc


def test_flux_pulls_the_cert_manager_chart_from_the_zarf_registry(ready, tmp_path, airgapped):
    """The offline configuration reads cert-manager's OCI chart; the package carries it by tag, zarf pushes it, the
    agent rewrites the HelmRepository to its registry and the HelmRelease's chart and version are found there."""
    api, registry = airgapped
    repository = _staged_doc(ready, tmp_path, "mgmt/local-host/cert-manager/helmrepository.yaml")
    assert repository["spec"] == {"interval": "1h", "url": "oci://quay.io/jetstack/charts", "type": "oci"}
    release = _staged_doc(ready, tmp_path, "mgmt/local-host/cert-manager/helmrelease.yaml")
    chart = release["spec"]["chart"]["spec"]
    package = build(ready, tmp_path)
    artifact = "quay.io/jetstack/charts/cert-manager:v1.21.1"
    assert artifact in package["images"]  # by tag: a digest-listed artifact would be pushed under the digest only
    zarf_deploy(api, package, ["cert-manager"], registry)
    mutated = agent_mutate_helm_repository(repository, registry.host)
    assert mutated["spec"]["url"] == "oci://127.0.0.1:31999/jetstack/charts" and mutated["spec"]["insecure"] is True
    assert pull_chart(registry, mutated, chart["chart"], chart["version"]) == package["digests"][artifact]
    # the tree's own HelmRepository (an HTTP index) is not rewritten by the agent and is unreachable offline
    (tree,) = yaml.safe_load_all((ready / "mgmt/local-host/cert-manager/helmrepository.yaml").read_text())
    with pytest.raises(RefError) as failed:
        pull_chart(registry, agent_mutate_helm_repository(tree, registry.host), "cert-manager", "v1.21.1")
    assert str(failed.value) == (
        "failed to fetch Helm repository index: https://charts.jetstack.io: dial tcp: lookup charts.jetstack.io: "
        "no such host"
    )


def test_a_chart_artifact_listed_by_digest_is_not_found_by_its_version(ready, tmp_path, airgapped):
    api, registry = airgapped
    text = (ready / "airgap" / "zarf.yaml").read_text()
    artifact = "quay.io/jetstack/charts/cert-manager:v1.21.1"
    (ready / "airgap" / "zarf.yaml").write_text(
        text.replace(f"  - {artifact}\n", f"  - {artifact}@sha256:{'d' * 64}\n")
    )
    package = build(ready, tmp_path)
    zarf_deploy(api, package, ["cert-manager"], registry)
    mutated = agent_mutate_helm_repository(
        _staged_doc(ready, tmp_path, "mgmt/local-host/cert-manager/helmrepository.yaml"), registry.host
    )
    with pytest.raises(RefError) as failed:
        pull_chart(registry, mutated, "cert-manager", "v1.21.1")
    assert str(failed.value) == "127.0.0.1:31999/jetstack/charts/cert-manager:v1.21.1: not found"


def test_flux_pulls_the_packed_cluster_api_operator_chart_from_the_zarf_registry(ready, tmp_path, airgapped):
    """Upstream serves this chart only from an HTTP index: the package carries it as an OCI layout named
    krops-registry:5000/charts/cluster-api-operator:<version>, and the offline HelmRepository reads that repository."""
    api, registry = airgapped
    repository = _staged_doc(ready, tmp_path, "mgmt/local-host/capi-operator/helmrepository.yaml")
    assert (repository["spec"]["type"], repository["spec"]["url"]) == ("oci", "oci://krops-registry:5000/charts")
    chart = _staged_doc(ready, tmp_path, "mgmt/local-host/capi-operator/helmrelease.yaml")["spec"]["chart"]["spec"]
    package = build(ready, tmp_path)
    zarf_deploy(api, package, ["capi-operator"], registry)
    mutated = agent_mutate_helm_repository(repository, registry.host)
    assert mutated["spec"]["url"] == "oci://127.0.0.1:31999/charts"
    artifact = "krops-registry:5000/charts/cluster-api-operator:0.28.0"
    assert pull_chart(registry, mutated, chart["chart"], chart["version"]) == package["digests"][artifact]


def test_the_build_packs_the_chart_archive_only_with_the_recorded_sha256(ready):
    inv = airgap.derive(str(ready))
    url = "https://github.com/kubernetes-sigs/cluster-api-operator/releases/download/v0.28.0/cluster-api-operator-0.28.0.tgz"
    tgz = chart_tgz("cluster-api-operator", "0.28.0")
    got = hashlib.sha256(tgz).hexdigest()
    podinfo_url = "https://stefanprodan.github.io/podinfo/podinfo-6.14.1.tgz"
    podinfo = chart_tgz("podinfo", "6.14.1")
    served = {url: tgz, podinfo_url: podinfo}
    with pytest.raises(airgap.AirgapError) as refused:  # the committed lock holds the upstream indexes' digests
        airgap_charts.fetch_charts(str(ready), inv, download=served.__getitem__)
    assert str(refused.value) == (
        f"charts not bundled:\n  {url}: sha256 {got} differs from "
        "992d05cdc6a053688ce1edc711596aadff5eea7efa0024f42db90f0322de13ef recorded in airgap/digests.yaml chart-archives"
        f"\n  {podinfo_url}: sha256 {hashlib.sha256(podinfo).hexdigest()} differs from "
        "3d4a2ab092c83f39772de5f927aba6fb4f295a70e2b7302383edf249d44f78e3 recorded in airgap/digests.yaml chart-archives"
    )
    lock = yaml.safe_load((ready / airgap.LOCK_FILE).read_text())
    lock["chart-archives"][url]["sha256"] = got  # test data, never a pin
    lock["chart-archives"][podinfo_url]["sha256"] = hashlib.sha256(podinfo).hexdigest()
    (ready / airgap.LOCK_FILE).write_text(yaml.safe_dump(lock))
    path, podinfo_path = airgap_charts.fetch_charts(str(ready), inv, download=served.__getitem__)
    assert podinfo_path.endswith("build/charts/podinfo.tar")
    with tarfile.open(path) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    [entry] = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"] == {
        "org.opencontainers.image.ref.name": "krops-registry:5000/charts/cluster-api-operator:0.28.0"
    }
    manifest = json.loads(files["blobs/sha256/" + entry["digest"].split(":")[1]])
    assert manifest["config"]["mediaType"] == "application/vnd.cncf.helm.config.v1+json"
    assert json.loads(files["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])["version"] == "0.28.0"
    [layer] = manifest["layers"]
    assert (layer["mediaType"], files["blobs/sha256/" + layer["digest"].split(":")[1]]) == (
        "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
        tgz,
    )
