"""The nightly bundle build (.github/workflows/airgap-nightly.yml) in dry-run mode: the script the workflow runs,
scripts/airgap-nightly, against a registry stand-in for the internet (a real docker-registry holding the
upstream images by <host>/<path>, read by the crane stand-in) and the zarf stand-in.

One run per behaviour: every unconfirmed image resolved and the build's check mode passing; one image the
registry does not hold left unconfirmed, and the build stopping at the pin check naming it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from ansible_collections.krops.platform.plugins.module_utils import airgap, airgap_package, oci
from tests.substrate import airgap_fixtures
from tests.substrate.fixtures import REPO, VENV_BIN, playbook_env, python_executable

# the shared fixtures of the air-gapped bundle's tests (tests/substrate/airgap_fixtures.py)
ready = airgap_fixtures.ready
zarf = airgap_fixtures.zarf

pytestmark = pytest.mark.playbook

WORKFLOW = REPO / ".github" / "workflows" / "airgap-nightly.yml"


def _unresolve(root):
    """The ready tree with the digests its fixture made up taken out again: what the nightly must resolve."""
    lock_path = root / airgap.LOCK_FILE
    lock = yaml.safe_load(lock_path.read_text())
    made_up = sorted(k for k, v in lock["images"].items() if v["source"] == "test fixture")
    for key in made_up:
        del lock["images"][key]
    lock_path.write_text(yaml.safe_dump(lock))
    airgap_package.write(str(root), airgap.derive(str(root)))
    return made_up


def _seed(registry, refs, platforms=("amd64", "arm64")):
    """Push each reference into the stand-in under <host>/<path> as an index of one small image per platform;
    {ref: (index digest, {platform: image digest})}."""
    client = oci.Registry(registry, insecure=True)
    served = {}
    for ref in refs:
        repo, tag = ref.rsplit(":", 1)
        children = []
        for arch in platforms:
            config = json.dumps({"architecture": arch, "os": "linux", "ref": ref}).encode()
            layer = (ref + arch).encode()
            client.push_blob(repo, config)
            client.push_blob(repo, layer)
            manifest = json.dumps(
                {
                    "schemaVersion": 2,
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": {
                        "mediaType": "application/vnd.oci.image.config.v1+json",
                        "digest": oci.sha256_digest(config),
                        "size": len(config),
                    },
                    "layers": [
                        {
                            "mediaType": "application/vnd.oci.image.layer.v1.tar",
                            "digest": oci.sha256_digest(layer),
                            "size": len(layer),
                        }
                    ],
                }
            ).encode()
            digest = oci.sha256_digest(manifest)
            client.put_manifest(repo, digest, manifest)
            children.append(
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": digest,
                    "size": len(manifest),
                    "platform": {"os": "linux", "architecture": arch},
                }
            )
        index = json.dumps(
            {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": children}
        ).encode()
        client.request(
            "PUT",
            f"/v2/{repo}/manifests/{tag}",
            data=index,
            headers={"Content-Type": "application/vnd.oci.image.index.v1+json"},
            ok=(201,),
        )
        served[ref] = (
            oci.sha256_digest(index),
            {"linux/" + c["platform"]["architecture"]: c["digest"] for c in children},
        )
    return served


def _crane(tmp_path):
    folder = tmp_path / "crane-bin"
    folder.mkdir()
    python_executable(folder / "crane", REPO / "tests" / "substrate" / "standins" / "crane.py")
    return folder


def nightly(root, tmp_path, zarf, registry):
    """scripts/airgap-nightly --dry-run as the workflow calls it -> (rc, stdout before the build, build JSON)."""
    out = tmp_path / "out"
    env = playbook_env(
        tmp_path,
        {
            "CRANE_STANDIN_REGISTRY": registry,
            "AIRGAP_ZARF": str(zarf / "zarf"),
            "ZARF_STANDIN_LOG": str(zarf / "zarf.jsonl"),
            "KROPS_PYTHON": sys.executable,
            "ANSIBLE_PLAYBOOK": str(VENV_BIN / "ansible-playbook"),
        },
    )
    env["PATH"] = "{}:{}".format(_crane(tmp_path), env["PATH"])
    argv = [str(root / "scripts" / "airgap-nightly"), "--architecture", "arm64", "--out", str(out), "--dry-run"]
    argv += ["--signing-key", str(zarf / "zarf.key"), "--public-key", str(zarf / "zarf.pub")]
    proc = subprocess.run(
        argv, cwd=root, env=env, capture_output=True, text=True, timeout=600, check=False, stdin=subprocess.DEVNULL
    )
    head, _sep, build = proc.stdout.partition("\n{\n")
    return proc.returncode, head, json.loads("{\n" + build) if build else {}, proc.stderr, out


def _summary(build):
    return [
        h["msg"]
        for p in build["plays"]
        for t in p["tasks"]
        if t["task"]["name"] == "PASS/FAIL summary"
        for h in t["hosts"].values()
    ]


def test_the_nightly_dry_run_resolves_every_digest_and_builds_in_check_mode(ready, zarf, oci_registry, tmp_path):
    unresolved = _unresolve(ready)
    assert len(unresolved) >= 10  # every image the lock has no upstream digest for
    served = _seed(oci_registry, unresolved)
    rc, head, build, stderr, out = nightly(ready, tmp_path, zarf, oci_registry)
    assert rc == 0, (head, stderr[-2000:])
    assert "== dry run: the providers' release files are not downloaded" in head
    listed = airgap.read_inventory(str(ready / airgap.INVENTORY))
    assert {k: listed[k][0] for k in unresolved} == {k: v[0] for k, v in served.items()}
    # the lock holds them now, one digest per platform, so the next --write keeps them
    lock = airgap.load_lock(str(ready))
    assert {k: (lock["images"][k]["digest"], lock["images"][k]["platforms"]) for k in unresolved} == served
    assert {lock["images"][k]["source"] for k in unresolved} == {"crane digest (registry), --resolve"}
    diff = (out / "lock.diff").read_text()
    for ref, (digest, platforms) in served.items():
        assert f"+{ref}@{digest}  # " in diff
        assert (
            f"+  {ref}:\n+    digest: {digest}\n" in diff
            and f"+      linux/arm64: {platforms['linux/arm64']}\n" in diff
        )
    # the charts' image values follow the lock, so their diff is reviewed too
    webhook = "quay.io/jetstack/cert-manager-webhook:v1.21.1"
    assert "+++ b/airgap/values/cert-manager-images.yaml" in diff and f"+    digest: {served[webhook][0]}\n" in diff
    assert _summary(build) == [
        [
            "zarf v0.84.0: PASS",
            "validate and pin check: PASS",
            "package signed and verified: SKIPPED (check mode)",
            "SBOMs written: SKIPPED (check mode)",
        ]
    ]
    create = next(
        json.loads(line)["argv"]
        for line in (zarf / "zarf.jsonl").read_text().splitlines()
        if json.loads(line)["argv"][:2] == ["package", "create"]
    )
    assert create[create.index("--architecture") + 1] == "arm64" and create[-1] == "--help"
    assert not (ready / "airgap" / "build").exists() and sorted(p.name for p in out.iterdir()) == ["lock.diff"]


def test_an_image_the_registry_does_not_hold_stops_the_nightly_at_the_pin_check(ready, zarf, oci_registry, tmp_path):
    unresolved = _unresolve(ready)
    missing, amd64_only = "ghcr.io/stefanprodan/podinfo:6.14.1", "docker.io/kindest/kindnetd:v20260528-9350166c"
    assert {missing, amd64_only} <= set(unresolved)
    _seed(oci_registry, [ref for ref in unresolved if ref not in (missing, amd64_only)])
    _seed(oci_registry, [amd64_only], platforms=("amd64",))
    rc, _head, build, stderr, out = nightly(ready, tmp_path, zarf, oci_registry)
    assert rc == 2
    [(task, msg)] = [
        (t["task"]["name"], h["msg"])
        for p in build["plays"]
        for t in p["tasks"]
        for h in t["hosts"].values()
        if h.get("failed")
    ]
    assert task == "Stop when the pin check fails"
    assert msg == [
        f"airgap/images.txt: {ref}: [airgap] UNCONFIRMED digest: read it upstream or run --write --resolve on a "
        "connected machine"
        for ref in (amd64_only, missing)
    ] + ["%d images, 0 findings, 2 unconfirmed digests" % len(airgap.read_inventory(str(ready / airgap.INVENTORY)))]
    assert (
        f"{amd64_only}: not resolved: linux/arm64: Error: no child with platform {{Architecture:arm64 OS:linux"
        in stderr
    )
    assert (
        f"{missing}: not resolved: Error: GET http://{oci_registry}/v2/ghcr.io/stefanprodan/podinfo/manifests/6.14.1"
        in stderr
    )
    assert amd64_only not in airgap.load_lock(str(ready))["images"]
    assert f"+{missing}  # UNCONFIRMED" not in (out / "lock.diff").read_text()  # the line was already unconfirmed


def test_the_workflow_runs_the_script_for_both_architectures_and_publishes_the_bundle():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert set(workflow["on"]) == {"schedule", "workflow_dispatch"}
    job = workflow["jobs"]["bundle"]
    assert job["strategy"]["matrix"]["architecture"] == ["amd64", "arm64"]
    assert job["permissions"] == {"contents": "read"}
    runs = [s.get("run", "") for s in job["steps"]]
    [build] = [r for r in runs if "scripts/airgap-nightly" in r]
    assert "--dry-run" not in build and '--architecture "$ARCHITECTURE"' in build
    uploads = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    assert [u["with"]["name"] for u in uploads] == ["airgap-bundle-${{ matrix.architecture }}"]


# --- scripts/airgap-tools: zarf and crane checked against their releases' checksums.txt --------------------


@pytest.fixture
def releases(tmp_path):
    """The two releases the workflow downloads, served on 127.0.0.1: each asset with the release's checksums.txt
    (goreleaser's format: "<sha256>  <asset>", one line an asset). Returns (URL, folder of each release)."""
    import functools
    import hashlib
    import io
    import tarfile
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    root = tmp_path / "releases"
    zarf_dir = root / "zarf-dev/zarf/releases/download/v0.84.0"
    crane_dir = root / "google/go-containerregistry/releases/download/v0.21.9"
    for folder in (zarf_dir, crane_dir):
        folder.mkdir(parents=True)
    (zarf_dir / "zarf_v0.84.0_Linux_amd64").write_bytes(b"#!/bin/sh\necho v0.84.0\n")
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        body = b"#!/bin/sh\necho crane\n"
        info = tarfile.TarInfo("crane")
        info.size, info.mode = len(body), 0o755
        tar.addfile(info, io.BytesIO(body))
    (crane_dir / "go-containerregistry_Linux_x86_64.tar.gz").write_bytes(archive.getvalue())
    for folder in (zarf_dir, crane_dir):
        lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n" for p in sorted(folder.iterdir())]
        (folder / "checksums.txt").write_text("".join(lines))

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            return

    handler = functools.partial(Quiet, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield "http://127.0.0.1:%d" % server.server_address[1], zarf_dir, crane_dir
    server.shutdown()
    server.server_close()


def _tools(tmp_path, url, **pins):
    env = {"PATH": "/usr/bin:/bin", "ZARF_VERSION": "v0.84.0", "CRANE_VERSION": "v0.21.9", "AIRGAP_RELEASES": url}
    env.update(pins)
    return subprocess.run(
        [str(REPO / "scripts" / "airgap-tools"), "--bin", str(tmp_path / "bin")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_tools_are_installed_only_when_their_release_checksums_match(releases, tmp_path):
    import hashlib

    url, zarf_dir, crane_dir = releases
    zarf_sha = hashlib.sha256((zarf_dir / "zarf_v0.84.0_Linux_amd64").read_bytes()).hexdigest()
    proc = _tools(tmp_path, url, ZARF_SHA256=zarf_sha)
    assert proc.returncode == 0, proc.stderr
    assert (
        subprocess.run([str(tmp_path / "bin" / "zarf")], capture_output=True, text=True, check=True).stdout
        == "v0.84.0\n"
    )
    assert (tmp_path / "bin" / "crane").is_file()
    assert (tmp_path / "bin" / "tools.sha256").read_text() == (
        (zarf_dir / "checksums.txt").read_text() + (crane_dir / "checksums.txt").read_text()
    )
    # a pin that differs from the release's checksum
    proc = _tools(tmp_path, url, CRANE_SHA256="0" * 64)
    assert proc.returncode == 1
    crane_sha = (crane_dir / "checksums.txt").read_text().split()[0]
    assert proc.stderr == (
        f"airgap-tools: go-containerregistry_Linux_x86_64.tar.gz has sha256 {crane_sha}, not the pinned {'0' * 64}\n"
    )
    # an asset changed after its checksum was published
    (zarf_dir / "zarf_v0.84.0_Linux_amd64").write_bytes(b"#!/bin/sh\necho tampered\n")
    proc = _tools(tmp_path, url)
    assert proc.returncode == 1 and proc.stdout == "zarf_v0.84.0_Linux_amd64: FAILED\n"
    assert proc.stderr == (
        "sha256sum: WARNING: 1 computed checksum did NOT match\n"
        f"airgap-tools: zarf_v0.84.0_Linux_amd64 does not match the sha256 of {url}/zarf-dev/zarf/releases/download/"
        "v0.84.0/checksums.txt\n"
    )
    # an asset the release's checksums.txt does not list
    (zarf_dir / "checksums.txt").write_text("")
    proc = _tools(tmp_path, url)
    assert proc.returncode == 1 and proc.stderr == (
        f"airgap-tools: zarf_v0.84.0_Linux_amd64 is not listed in {url}/zarf-dev/zarf/releases/download/v0.84.0/"
        "checksums.txt\n"
    )


def test_the_workflow_installs_the_tools_with_the_checked_script():
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["bundle"]
    [install] = [s for s in job["steps"] if "scripts/airgap-tools" in s.get("run", "")]
    assert install["run"].startswith('scripts/airgap-tools --bin "$RUNNER_TEMP/bin"\n')
    assert install["env"] == {"ZARF_SHA256": "${{ vars.ZARF_SHA256 }}", "CRANE_SHA256": "${{ vars.CRANE_SHA256 }}"}
    assert not any("curl" in s.get("run", "") for s in job["steps"])  # every download goes through the check
