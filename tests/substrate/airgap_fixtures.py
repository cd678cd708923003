"""The trees the air-gapped bundle's tests work on, written once (tests/integration/test_airgap*.py import them).

- ``tree``: a copy of what the inventory generator reads (the local-host trees, bootstrap.toml, airgap/, the
  registry default);
- ``ready``: a checkout of the tree as it is with every digest and provider checksum present (test data only),
  and its generated files written;
- ``zarf``: the zarf stand-in as an executable plus a key pair it understands;
- ``pin_made_up_digests``: a made-up digest for every unconfirmed image (test data, never a pin);
- ``chart_tgz``: a Helm chart archive holding only its Chart.yaml.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile

import pytest
import yaml
from ansible_collections.krops.platform.plugins.module_utils import airgap, airgap_package

from tests.substrate.fixtures import REPO, python_executable
from tests.substrate.trees import REPO_FILES, copy_repo


@pytest.fixture
def tree(tmp_path):
    """A copy of what the generator reads: the local-host trees, bootstrap.toml, airgap/, the registry default."""
    return copy_repo(
        tmp_path,
        ("mgmt/local-host", "workload/local-host", "airgap"),
        files=(*REPO_FILES, "roles/bootstrap/defaults/main.yml"),
        ignore=shutil.ignore_patterns("build"),
    )


def pin_made_up_digests(root):
    """Record in root's digests.yaml a made-up digest (the sha256 of the reference) for every image the tree's
    inventory has none for: test data, never a pin (source "test fixture"). Returns {repo:tag: digest}."""
    lock = yaml.safe_load((root / airgap.LOCK_FILE).read_text())
    digests = {}
    for key in airgap.derive(str(root)).unconfirmed:
        digests[key] = "sha256:" + hashlib.sha256(key.encode()).hexdigest()
        lock["images"][key] = {"digest": digests[key], "source": "test fixture"}
    (root / airgap.LOCK_FILE).write_text(yaml.safe_dump(lock))
    return digests


@pytest.fixture
def ready(tmp_path):
    """A checkout of the tree as it is, with every digest present (test data only): the air-gapped configuration
    serves what the connected tree reads from outside (airgap.OFFLINE_HELM_REPOSITORIES, PACKED_CHARTS,
    PROXIED_CHARTS, WORKLOAD_CHARTS), so the tree itself needs no edit."""
    root = tmp_path / "repo"
    for part in (
        "mgmt/local-host",
        "workload/local-host",
        "airgap",
        "playbooks",
        "scripts",
        "roles/bootstrap/defaults",
    ):
        shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("build"))
    for name in ("bootstrap.toml", ".yamllint", "galaxy.yml", "ansible.cfg"):
        shutil.copy(REPO / name, root / name)
    os.symlink(REPO / "schemas", root / "schemas")
    os.symlink(REPO / ".collections", root / ".collections")
    pin_made_up_digests(root)
    inv = airgap.derive(str(root))
    assert inv.problems == [] and inv.unconfirmed == []
    # the providers' release files "recorded" by a connected build: not real checksums, a fixture
    served = {f["url"]: f["url"].encode() for e in inv.providers for f in e["files"]}
    airgap.fetch_providers(str(root), inv, download=served.__getitem__, record=True)
    shutil.rmtree(root / "airgap" / "build")
    airgap_package.write(str(root), inv)
    return root


@pytest.fixture
def zarf(tmp_path):
    """The stand-in as an executable plus a key pair it understands; calls land in zarf.jsonl."""
    folder = tmp_path / "zarf-bin"
    folder.mkdir()
    python_executable(folder / "zarf", REPO / "tests" / "substrate" / "zarf_standin.py")
    (folder / "zarf.key").write_text("PRIVATE krops-test")
    (folder / "zarf.pub").write_text("PUBLIC krops-test")
    return folder


def chart_tgz(name, version, app_version=True):
    """A Helm chart archive holding only <name>/Chart.yaml (appVersion = version unless ``app_version`` is False)."""
    chart = {"apiVersion": "v2", "name": name, "version": version} | ({"appVersion": version} if app_version else {})
    body = yaml.safe_dump(chart).encode()
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        info = tarfile.TarInfo(f"{name}/Chart.yaml")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    return data.getvalue()
