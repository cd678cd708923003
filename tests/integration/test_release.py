"""The release dry run (scripts/release_dry_run.py): the workflow's build, SBOM, sign and verify
steps on this checkout, the signer stood in for by an ephemeral key (cosign keyless needs Fulcio
and Rekor). One real run is shared by the tests; they then tamper with its output."""

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "release_dry_run.py"
_spec = importlib.util.spec_from_file_location("release_dry_run", SCRIPT)
release = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(release)
VERSION = release.galaxy_version()


def _cli(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False, cwd=ROOT)


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    out = tmp_path_factory.mktemp("release")
    run = _cli("--output", str(out), "--platforms", "linux/amd64")
    return out, run


def test_dry_run_passes_every_step_for_amd64(released):
    out, run = released
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "PASS version",
        "PASS changelog",
        "PASS build",
        "SKIP importer",
        "PASS sbom",
        "PASS ee-context",
        "PASS sign",
        "PASS verify",
    ]
    for name in (
        f"dist/krops-platform-{VERSION}.tar.gz",
        f"dist/krops-platform-{VERSION}.tar.gz.sig",
        f"krops-platform-{VERSION}.python.cdx.json",
        "SHA256SUMS",
        "SHA256SUMS.sig",
        "release-notes.md",
        "ee/context/Containerfile",
    ):
        assert (out / name).exists(), name


def test_sbom_lists_every_runtime_requirement_at_the_tested_version(released):
    out = released[0]
    sbom = json.loads((out / f"krops-platform-{VERSION}.python.cdx.json").read_text(encoding="utf-8"))
    assert sbom["bomFormat"] == "CycloneDX" and sbom["specVersion"] == "1.6"
    components = {c["name"].lower(): (c["version"], c["purl"]) for c in sbom["components"]}
    for name, version in release.pinned_runtime():
        assert components[name.lower()] == (version, f"pkg:pypi/{name.lower()}@{version}")


def test_release_notes_are_the_versions_changelog(released):
    out = released[0]
    notes = (out / "release-notes.md").read_text(encoding="utf-8")
    assert notes.startswith(f"# krops.platform {VERSION}\n\n## Summary\n")
    assert "## Minor changes" in notes


def test_verify_catches_a_changed_tarball(released, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(released[0], out)
    tarball = out / "dist" / f"krops-platform-{VERSION}.tar.gz"
    tarball.write_bytes(tarball.read_bytes() + b"\0")
    run = _cli("--output", str(out), "--verify-only")
    assert run.returncode == 1
    assert run.stdout.splitlines() == [
        f"FAIL verify: krops-platform-{VERSION}.tar.gz: signature does not verify",
        f"FAIL verify: krops-platform-{VERSION}.tar.gz: SHA-256 differs from SHA256SUMS",
    ]


def test_verify_catches_an_sbom_that_is_not_the_tested_lock(released, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(released[0], out)
    requirements = out / "python-requirements.txt"
    text = requirements.read_text(encoding="utf-8")
    requirements.write_text(re.sub(r"^PyYAML==\S+", "PyYAML==0.0.1", text, flags=re.M), encoding="utf-8")
    problems = release.verify(out, VERSION)
    assert [p for p in problems if p.startswith("SBOM:")] == ["SBOM: PyYAML 6.0.4 is not the tested 0.0.1"]


def test_verify_passes_on_the_untouched_output(released):
    run = _cli("--output", str(released[0]), "--verify-only")
    assert (run.returncode, run.stdout.strip()) == (
        0,
        "PASS verify: checksums, signatures, SBOM components and tarball content",
    )


def test_a_tag_that_is_not_galaxy_version_stops_everything(tmp_path):
    lines = []
    results = release.dry_run(tmp_path / "out", tag="9.9.9", platforms=["linux/amd64"], report=lines.append)
    assert lines[0] == (
        f"FAIL version: tag 9.9.9 is not galaxy.yml's version {VERSION}: set version: 9.9.9 in galaxy.yml or tag {VERSION}"
    )
    assert set(results.values()) == {"FAIL", "SKIP"}
    assert not (tmp_path / "out" / "dist").exists()


def test_arm64_is_refused_naming_exactly_the_tools_without_an_arm64_asset(tmp_path):
    ctx = {"root": ROOT, "platforms": ("linux/amd64", "linux/arm64"), "out": tmp_path, "tarball": None}
    with pytest.raises(release.StepError) as error:
        release.step_ee(ctx)
    assert str(error.value) == (
        "meta/tools.yml pins no asset for linux/arm64: clusterctl. The image cannot be built for that platform "
        "until each of these tools pins its url, sha256 and checksum_source there (docs/release.md, Platforms); "
        "or release --platforms linux/amd64"
    )


def test_arm64_is_accepted_once_every_tool_has_an_arm64_asset(tmp_path):
    tools = yaml.safe_load((ROOT / "meta" / "tools.yml").read_text(encoding="utf-8"))
    clusterctl = tools["tools"]["clusterctl"]["assets"]
    clusterctl["linux/arm64"] = dict(clusterctl["linux/amd64"], url=clusterctl["linux/amd64"]["url"][:-5] + "arm64")
    pins = tmp_path / "tools.yml"
    pins.write_text(yaml.safe_dump(tools, sort_keys=False), encoding="utf-8")
    gaps, given = release.platform_gaps(pins, release.PLATFORMS)
    assert gaps == {}
    # Its digest is not confirmed either: the build must be given it, per platform.
    assert given == [
        "clusterctl linux/amd64 (build argument KROPS_TOOL_SHA256_CLUSTERCTL_AMD64)",
        "clusterctl linux/arm64 (build argument KROPS_TOOL_SHA256_CLUSTERCTL_ARM64)",
    ]
    del tools["tools"]["kind"]["assets"]["linux/arm64"]
    pins.write_text(yaml.safe_dump(tools, sort_keys=False), encoding="utf-8")
    assert release.platform_gaps(pins, release.PLATFORMS)[0] == {"linux/arm64": ["kind"]}


def test_the_ee_step_names_the_digests_the_build_is_given(released):
    line = next(line for line in released[1].stdout.splitlines() if line.startswith("PASS ee-context"))
    assert line.endswith(
        "for linux/amd64 (the image is built by release.yml); digests the build is given: "
        "clusterctl linux/amd64 (build argument KROPS_TOOL_SHA256_CLUSTERCTL_AMD64)"
    )


def test_unknown_platform_is_a_usage_error(tmp_path):
    run = _cli("--output", str(tmp_path), "--platforms", "linux/s390x")
    assert run.returncode == 2
    assert "unknown platform linux/s390x: choose from linux/amd64, linux/arm64" in run.stderr
