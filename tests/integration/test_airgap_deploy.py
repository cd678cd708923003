"""The air-gapped deploy for real: ``playbooks/airgap.yml --tags deploy`` on the emulated disconnected host.

The test plays the connected build host (in-process, with the zarf stand-in and the chart/provider/config
builders of plugins/module_utils), then runs the deploy with ansible-playbook on tests/substrate/airgap_host.py:
nothing outside the host answers, the kind cluster's kubelet pulls only from the Zarf registry and the workload
cluster's only what was imported into its nodes. The tree is the repository's own (the ``ready`` fixture adds
made-up digests and checksums only: test data, never pins).
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
import time

import pytest
import yaml

from ansible_collections.krops.platform.plugins.module_utils import airgap, airgap_charts, airgap_offline
from tests.substrate import airgap_fixtures
from tests.substrate import zarf_standin
from tests.substrate.airgap_host import AirgapHost, image_config, save_archive
from tests.substrate.fixtures import REPO
from tests.substrate.kube_emulator import ApiError
from tests.substrate.lifecycle import failed_tasks

# the shared fixtures of the air-gapped bundle's tests (tests/substrate/airgap_fixtures.py)
ready = airgap_fixtures.ready

pytestmark = pytest.mark.slow

KEY = "krops-test"
CHART_VALUES = {
    "podinfo": {"image": {"repository": "ghcr.io/stefanprodan/podinfo", "tag": "6.14.1"}},
    "flux-operator": {"image": {"repository": "ghcr.io/controlplaneio-fluxcd/flux-operator", "tag": ""}},
}


def chart_tgz(name, version):
    """A chart archive as the chart index serves it: <name>/Chart.yaml and values.yaml (test data)."""
    files = {
        f"{name}/Chart.yaml": yaml.safe_dump(
            {"apiVersion": "v2", "name": name, "version": version, "appVersion": version}
        ),
        f"{name}/values.yaml": yaml.safe_dump(CHART_VALUES.get(name, {})),
    }
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        for path, text in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return data.getvalue()


def connected_build(root, host, tmp_path, monkeypatch, drop=None):
    """What --tags build makes on the connected host, played in-process: providers, packed charts, the offline
    configuration, the host archive, the signed package (zarf stand-in, its downloads from a map) and the init
    package. ``drop``: one image line removed from zarf.yaml first. Returns the package path."""
    build = root / "airgap" / "build"
    inv = airgap.derive(str(root))
    served = {f["url"]: f["url"].encode() for e in inv.providers for f in e["files"]}  # recorded by the fixture
    airgap.fetch_providers(str(root), inv, download=served.__getitem__)
    charts = {
        "https://github.com/kubernetes-sigs/cluster-api-operator/releases/download/v0.28.0/cluster-api-operator-0.28.0.tgz": chart_tgz(
            "cluster-api-operator", "0.28.0"
        ),
        "https://stefanprodan.github.io/podinfo/podinfo-6.14.1.tgz": chart_tgz("podinfo", "6.14.1"),
    }
    lock = yaml.safe_load((root / airgap.LOCK_FILE).read_text())
    for url, tgz in charts.items():  # test data, never a pin
        lock["chart-archives"][url]["sha256"] = hashlib.sha256(tgz).hexdigest()
    (root / airgap.LOCK_FILE).write_text(yaml.safe_dump(lock))
    airgap_charts.fetch_charts(str(root), inv, download=charts.__getitem__)
    layout, _digest = airgap_offline.config_archive(
        str(root), ["mgmt/local-host", "workload/local-host"], "krops-registry:5000/krops:latest", revision="test"
    )
    (build / "krops-config.tar").write_bytes(layout)
    doc = yaml.safe_load((root / airgap.ZARF_FILE).read_text())
    host_images = [i for c in doc["components"] for f in ("x-host-images", "x-workload-import") for i in c.get(f) or []]
    (build / "host-images.tar").write_bytes(
        save_archive([(ref, zarf_standin._pulled_digest(ref), image_config(ref)) for ref in dict.fromkeys(host_images)])
    )
    artifacts = tmp_path / "internet"
    artifacts.mkdir(exist_ok=True)
    downloads = {"files": {}, "artifacts": {}}
    for arch in airgap.ARCHITECTURES:
        downloads["files"][f"https://github.com/kubernetes-sigs/kind/releases/download/v0.32.0/kind-linux-{arch}"] = (
            str(host.bin / "kind")
        )
    for ref, chart, version in (
        ("ghcr.io/controlplaneio-fluxcd/charts/flux-operator:0.58.1", "flux-operator", "0.58.1"),
        ("quay.io/jetstack/charts/cert-manager:v1.21.1", "cert-manager", "v1.21.1"),
    ):
        data, _digest = airgap_charts.chart_archive(ref, chart_tgz(chart, version))
        (artifacts / f"{chart}.tar").write_bytes(data)
        downloads["artifacts"][ref] = str(artifacts / f"{chart}.tar")
    (tmp_path / "downloads.json").write_text(json.dumps(downloads))
    monkeypatch.setenv("ZARF_STANDIN_DOWNLOADS", str(tmp_path / "downloads.json"))
    if drop:
        text = (root / airgap.ZARF_FILE).read_text()
        assert text.count(f"  - {drop}\n") == 1, drop
        (root / airgap.ZARF_FILE).write_text(text.replace(f"  - {drop}\n", ""))
    (tmp_path / "zarf.key").write_text(f"PRIVATE {KEY}")
    (tmp_path / "zarf.pub").write_text(f"PUBLIC {KEY}")
    zarf_standin.create(
        {
            "architecture": ["amd64"],
            "output": [str(build)],
            "set": ["VERSION=0.1.0", "KIND_VERSION=v0.32.0"],
            "signing-key": [str(tmp_path / "zarf.key")],
        },
        [str(root / "airgap")],
    )
    zarf_standin.download_init({"output-directory": [str(build)], "architecture": ["amd64"]}, [])
    [package] = build.glob("zarf-package-*.tar.zst")
    return package


def deploy(host, root, tmp_path, package, wait="90s"):
    return host.playbook(
        str(root / "playbooks" / "airgap.yml"),
        "--tags",
        "deploy",
        "-e",
        f"airgap_public_key={tmp_path / 'zarf.pub'}",
        "-e",
        f"airgap_package={package}",
        "-e",
        f"airgap_wait_timeout={wait}",
        inventory=REPO / "inventories" / "local-host" / "hosts.yml",
        env={"KROPS_PYTHON": sys.executable},
        timeout=900,
    )


def results(output):
    return {t["task"]["name"]: t["hosts"]["localhost"] for p in output.get("plays", []) for t in p["tasks"]}


@pytest.fixture
def host(tmp_path):
    world = AirgapHost(tmp_path / "host").start()
    yield world
    world.stop()


def hold_the_workload_cluster(host, seconds):
    """Flux's first applies of the workload Cluster fail for ``seconds`` (its Kustomization is retried), as on a
    loaded host where Flux creates the Cluster some time after `zarf package deploy` has returned."""
    apply, since = host.flux._apply, []

    def late(api, obj, *args):
        if obj.get("kind") == "Cluster" and obj["metadata"]["name"] == "local-workload":
            since.append(since[0] if since else time.monotonic())
            if time.monotonic() - since[0] < seconds:
                raise ApiError(503, "ServiceUnavailable", "held by the test: the Cluster comes late")
        return apply(api, obj, *args)

    host.flux._apply = late
    return since


def test_the_deploy_reaches_ready_and_podinfo_answers(ready, host, tmp_path, monkeypatch):
    """Every pod of the kind cluster runs from the Zarf registry by digest, the workload cluster's from its nodes.

    The workload Cluster comes late: the deploy waits for it to exist before it waits for it to be Available
    (`kubectl wait --for=condition` alone fails at once, NotFound, on an object not there yet)."""
    package = connected_build(ready, host, tmp_path, monkeypatch)
    held = hold_the_workload_cluster(host, 8)
    rc, output, stderr = deploy(host, ready, tmp_path, package)
    done = results(output)
    assert rc == 0, (
        failed_tasks(output),
        stderr[-3000:],
        host.errors,
        {k: v.held for k, v in host.node_images.items()},
    )
    assert len(held) > 1  # the Cluster was refused at least once before Flux created it
    summary = done["PASS/FAIL summary"]["msg"]
    assert summary[0] == "signature and SBOMs verified: PASS"
    assert summary[1].startswith("pod images from 127.0.0.1:31999: PASS (")
    assert summary[2:] == ["Flux Ready: PASS", "cluster local-workload Available: PASS", "Podinfo answers: PASS"]
    assert json.loads(done["Ask Podinfo (through the workload API server's service proxy)"]["stdout"]) == {
        "status": "OK"
    }
    # the kind cluster ran every pod of the charts and providers from the Zarf registry, by the packaged digest
    kind = host.cluster("mgmt")
    listed = airgap.read_inventory(str(ready / airgap.INVENTORY))
    pods = {p["metadata"]["name"].rsplit("-", 1)[0]: p for p in kind.list("v1", "Pod")}
    assert {
        "cert-manager-webhook",
        "capi-operator-cluster-api-operator",
        "flux-operator",
        "capd-controller-manager",
    } <= set(pods)
    for pod in pods.values():
        for status in pod["status"]["containerStatuses"]:
            assert status["image"].startswith("127.0.0.1:31999/") and "@sha256:" in status["image"], status
            assert status["state"] == {"running": {}}
    repo_tag = pods["cert-manager-webhook"]["metadata"]["annotations"]["zarf.dev/original-image-cert-manager-webhook"]
    assert repo_tag.split("@")[1] == listed["quay.io/jetstack/cert-manager-webhook:v1.21.1"][0]
    # the workload cluster: Podinfo and the Flux Operator from the images imported into its node, by digest
    workload = host.cluster("local-workload")
    running = {s["image"]: s["state"] for p in workload.list("v1", "Pod") for s in p["status"]["containerStatuses"]}
    for key in ("ghcr.io/stefanprodan/podinfo:6.14.1", "ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1"):
        assert running[f"{key}@{listed[key][0]}"] == {"running": {}}
    assert host.errors == []


def test_one_image_missing_from_the_bundle_fails_the_deploy_naming_it(ready, host, tmp_path, monkeypatch):
    [ref] = [
        line.split()[0]
        for line in (ready / airgap.INVENTORY).read_text().splitlines()
        if line.startswith("quay.io/jetstack/cert-manager-webhook:v1.21.1@sha256:")
    ]
    package = connected_build(ready, host, tmp_path, monkeypatch, drop=ref)
    rc, output, _stderr = deploy(host, ready, tmp_path, package, wait="5s")
    assert rc == 2
    [(task, _msg, stderr)] = failed_tasks(output)
    assert task == "Deploy the package"
    image = "127.0.0.1:31999/jetstack/cert-manager-webhook@" + ref.split("@")[1]
    [pod] = [
        p["metadata"]["name"]
        for p in host.cluster("mgmt").list("v1", "Pod", "cert-manager")
        if p["metadata"]["name"].startswith("cert-manager-webhook-")
    ]
    assert stderr == (
        "Error: component cert-manager: health checks did not pass: Deployment cert-manager/cert-manager-webhook: "
        f'pod {pod}: ErrImagePull: failed to pull and unpack image "{image}": failed to resolve reference '
        f'"{image}": {image}: not found'
    )
