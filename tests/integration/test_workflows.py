"""The GitHub workflows a security reviewer would pass (issue 29): every action pinned to a full
commit SHA with its tag beside it, no checkout that keeps the token, no token scope at the
workflow level, and zizmor clean (its config ignores nothing without a reason)."""

import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<ref>\S+)(?P<rest>.*)$")
PINNED = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+@[0-9a-f]{40}$")
TAG_COMMENT = re.compile(r"^\s+#\s+v\d+\.\d+\.\d+\b")
# Jobs that push to the repository and so keep the checkout's credentials: none today.
PUSHING_JOBS = set()


def _load(path):
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _uses_lines():
    for path in WORKFLOWS:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            match = USES.match(line)
            if match:
                yield path.name, number, match


def test_there_are_workflows_to_check():
    names = {p.name for p in WORKFLOWS}
    assert {"ci.yml", "konflate.yml", "render-diff.yml", "docs.yml", "release.yml"} <= names


@pytest.mark.parametrize("where", [f"{line[0]}:{line[1]}" for line in _uses_lines()])
def test_every_action_is_pinned_to_a_commit_with_its_tag(where):
    name, number = where.split(":")
    line = (ROOT / ".github" / "workflows" / name).read_text(encoding="utf-8").splitlines()[int(number) - 1]
    match = USES.match(line)
    ref = match.group("ref")
    if ref.startswith("./"):
        return
    assert PINNED.match(ref), f"{where}: {ref} is not pinned to a full commit SHA"
    assert TAG_COMMENT.match(match.group("rest")), f"{where}: no '# vX.Y.Z' comment naming the tag of {ref}"


def test_one_tag_one_sha():
    """The same tag never stands beside two SHAs (a copy that was not bumped with the rest)."""
    seen = {}
    for where, number, match in _uses_lines():
        ref = match.group("ref")
        if "@" not in ref:
            continue
        action, sha = ref.split("@", 1)
        tag = match.group("rest").split("#", 1)[-1].split()[0]
        seen.setdefault((action, tag), set()).add(sha)
    assert {k: v for k, v in seen.items() if len(v) > 1} == {}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_no_workflow_level_token_scope_and_each_job_declares_its_own(path):
    data = _load(path)
    assert data.get("permissions") == {}, f"{path.name}: workflow-level permissions must be {{}}"
    for job, spec in data["jobs"].items():
        assert isinstance(spec.get("permissions"), dict), f"{path.name}: job {job} declares no permissions"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_checkouts_drop_the_token(path):
    for job, spec in _load(path)["jobs"].items():
        for step in spec.get("steps", []):
            if str(step.get("uses", "")).startswith("actions/checkout@") and job not in PUSHING_JOBS:
                assert (step.get("with") or {}).get("persist-credentials") is False, (
                    f"{path.name}: job {job} checks out with the token persisted"
                )


def test_only_release_and_pages_jobs_may_write():
    writers = {}
    for path in WORKFLOWS:
        for job, spec in _load(path)["jobs"].items():
            scopes = {k for k, v in spec["permissions"].items() if v == "write"}
            if scopes:
                writers[f"{path.name}:{job}"] = scopes
    assert writers == {
        "render-diff.yml:render-diff": {"pull-requests"},
        "docs.yml:deploy": {"pages", "id-token"},
        "release.yml:ee-image": {"packages", "id-token"},
        "release.yml:publish": {"contents", "id-token"},
    }


def _zizmor():
    found = pathlib.Path(sys.executable).with_name("zizmor")
    return str(found) if found.exists() else shutil.which("zizmor")


@pytest.mark.skipif(_zizmor() is None, reason="zizmor is not installed (requirements-test.txt pins it)")
def test_zizmor_pedantic_finds_nothing():
    run = subprocess.run(
        [_zizmor(), "--offline", "--persona=pedantic", "--no-progress", "--format=plain", ".github/workflows"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_zizmor_ignores_have_reasons():
    config = (ROOT / ".github" / "zizmor.yml").read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(config):
        if re.match(r"^\s+-\s+\S+\.ya?ml", line):
            above = config[number - 1].strip()
            assert above.startswith("#"), f"zizmor.yml:{number + 1}: ignore without a reason comment above it"


def test_release_signs_keylessly_and_verifies_what_it_signed():
    text = (ROOT / ".github" / "workflows" / "release.yml").read_text(encoding="utf-8")
    assert "cosign sign --yes" in text and "cosign sign-blob --yes --bundle" in text
    assert "cosign verify-blob --bundle" in text and "cosign verify " in text
    # Keyless: no key file or key secret anywhere.
    assert "--key" not in text and "COSIGN_PRIVATE_KEY" not in text
    release = _load(ROOT / ".github" / "workflows" / "release.yml")
    assert release["on"] == {"push": {"tags": ["[0-9]+.[0-9]+.[0-9]+"]}}
    assert release["env"]["PLATFORMS"] == "linux/amd64,linux/arm64"
    assert release["jobs"]["publish"]["environment"] == "release"
