# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Hardening round 2 (issue 22): nothing outside the repository is read, packed, pushed or echoed, and the
project's own YAML reading and kustomize runs are bounded in size, depth, alias expansion, memory and time.

Each leak test plants a secret where a hostile input points (behind a symbolic link, in the accept file, in
the environment) and asserts it appears nowhere in what krops produces (tarball, message, report, markdown).
"""

from __future__ import annotations

import io
import sys
import tarfile
import time
from contextlib import redirect_stderr, redirect_stdout

import pytest
from test_render_diff import commit, repo  # noqa: F401  # pylint: disable=unused-import

from ansible_collections.krops.platform.plugins.module_utils import (
    airgap,
    oci,
    render,
    render_diff,
    render_diff_rules,
    validate,
)
from tests.substrate.fixtures import REPO

PLANTED = "planted-Secret-0xC0FFEE"


@pytest.fixture
def outside(tmp_path):
    """A folder outside the repository holding a planted secret (an age key, say)."""
    folder = tmp_path / "home" / ".config" / "krops"
    folder.mkdir(parents=True)
    (folder / "age.agekey").write_text(f"AGE-SECRET-KEY-{PLANTED}\n")
    return folder


@pytest.fixture
def tree(tmp_path, outside):
    root = tmp_path / "repo"
    (root / "mgmt" / "local-host").mkdir(parents=True)
    (root / "mgmt" / "local-host" / "a.yaml").write_text("a: 1\n")
    (root / "workload").symlink_to(outside)  # a workload path linked to ~/.config/krops
    (root / "mgmt" / "local-host" / "key.yaml").symlink_to(outside / "age.agekey")  # a file link inside
    return root


def test_oci_layer_refuses_a_path_that_is_a_symlink_out_of_the_repository(tree):
    with pytest.raises(oci.OciError) as caught:
        oci.build_layer(str(tree), ["workload"])
    assert str(caught.value).startswith("path workload resolves to ")
    assert "outside root" in str(caught.value) and PLANTED not in str(caught.value)


def test_oci_layer_skips_a_linked_file_and_packs_nothing_it_points_at(tree):
    layer, names, skipped = oci.build_layer(str(tree), ["mgmt"])
    assert skipped == ["mgmt/local-host/key.yaml"]
    raw = io.BytesIO(layer)
    with tarfile.open(fileobj=raw, mode="r:gz") as tar:
        content = b"".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())
    assert PLANTED.encode() not in content and PLANTED.encode() not in layer


def test_airgap_config_archive_refuses_the_symlink_too(tree):
    with pytest.raises(oci.OciError):
        airgap.config_archive(str(tree), ["mgmt", "workload"], "r:5000/krops:latest", revision="x")


def test_oci_module_refuses_the_symlink_before_any_request(run_module, tree):
    from ansible_collections.krops.platform.plugins.modules import oci_artifact_push

    result = run_module(oci_artifact_push, {"registry": "127.0.0.1:1", "root": str(tree), "paths": ["workload"]})
    assert result.failed and result["msg"].startswith("option paths[0]: expected a directory inside the repository")
    assert PLANTED not in str(result)


# --- render_diff's accept file ---------------------------------------------------------------------


def test_accept_file_lines_are_reported_by_number_never_by_content(repo, tmp_path):  # noqa: F811
    root, base = repo
    accept = root / "accepted.txt"
    accept.write_text(f"# ok\nlocal-host/removed/Bucket/default/krops-data\nAWS_SECRET_ACCESS_KEY={PLANTED}\n")
    with pytest.raises(render_diff.RenderDiffError) as caught:
        render_diff.run(str(root), base, accept_file=str(accept), cel=False)
    assert str(caught.value) == (
        f"accept file {accept} line 3 is not a finding id (exact ids <environment>/<kind>/<object> such as "
        "local-host/removed/Bucket/default/data; no patterns); the line is not shown"
    )


def test_accept_file_that_is_a_symlink_or_outside_the_repository_is_refused(repo, tmp_path, outside):  # noqa: F811
    root, base = repo
    link = root / "accept.txt"
    link.symlink_to(outside / "age.agekey")
    for path, words in (
        (link, "is a symbolic link"),
        (outside / "age.agekey", "is outside the repository"),
        ("/proc/self/environ", "is outside the repository"),
    ):
        with pytest.raises(render_diff.RenderDiffError) as caught:
            render_diff.run(str(root), base, accept_file=str(path), cel=False)
        assert words in str(caught.value) and PLANTED not in str(caught.value)


def test_proc_self_environ_with_a_planted_secret_is_never_echoed_by_the_command(repo, monkeypatch):  # noqa: F811
    root, base = repo
    monkeypatch.setenv("KROPS_PLANTED", PLANTED)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = render_diff.main(["--repo", str(root), "--base", base, "--accept-file", "/proc/self/environ", "--no-cel"])
    assert rc == 2
    assert PLANTED not in out.getvalue() + err.getvalue()
    assert "is outside the repository" in err.getvalue()


def test_accept_file_from_the_base_revision_ignores_the_pull_requests_copy_and_refuses_a_symlink(
    repo,  # noqa: F811
    outside,
):
    root, base = repo
    accept = root / ".github" / "render-diff-accept.txt"
    accept.parent.mkdir()
    accept.write_text("local-host/removed/Bucket/default/krops-data\n")
    base = commit(root, "acknowledge the bucket's removal on the base branch")
    (root / "mgmt/local-host/data/bucket.yaml").unlink()
    kustomization = root / "mgmt/local-host/data/kustomization.yaml"
    kustomization.write_text(kustomization.read_text().replace("  - bucket.yaml\n", ""))
    accept.write_text(f"local-host/removed/Bucket/default/decoy\n{PLANTED}\n")  # the PR's own copy
    head = commit(root, "drop the bucket, rewrite the accept file")
    report = render_diff.run(str(root), base, head, accept_from_base=".github/render-diff-accept.txt", cel=False)
    assert [(f["id"], f["acknowledged"]) for f in report["findings"]] == [
        ("local-host/removed/Bucket/default/krops-data", True)
    ]
    assert PLANTED not in render_diff.markdown(report) + str(report)
    # a symbolic link committed on the base branch is refused, never followed
    accept.unlink()
    accept.symlink_to(outside / "age.agekey")
    linked = commit(root, "turn the accept file into a link")
    with pytest.raises(render_diff.RenderDiffError) as caught:
        render_diff.run(str(root), linked, head, accept_from_base=".github/render-diff-accept.txt", cel=False)
    assert "is not a regular file (mode 120000): a symbolic link is never followed" in str(caught.value)
    assert PLANTED not in str(caught.value)


def test_the_workflow_reads_the_accept_file_from_the_base_branch():
    text = (REPO / ".github" / "workflows" / "render-diff.yml").read_text()
    assert "--accept-from-base .github/render-diff-accept.txt" in text
    assert "--accept-file" not in text


# --- bounds: YAML, memory, deadline --------------------------------------------------------------

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    "{}: &{} [{}]\n".format(chr(98 + i), chr(98 + i), ", ".join(["*" + chr(97 + i)] * 9)) for i in range(8)
)


def test_the_yaml_bomb_is_one_kilobyte_and_ends_fast_with_a_clear_error(tmp_path):
    assert len(BOMB) < 1024
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    started = time.monotonic()
    with pytest.raises(render.YAMLLimitError) as caught:
        render.load_yaml_documents(str(path))
    assert time.monotonic() - started < 2
    assert str(caught.value) == (
        f"{path}: more than {render.MAX_YAML_NODES} nodes once its aliases are expanded (a YAML bomb?); write the "
        "repeated parts out or split the file"
    )


def test_deep_nesting_and_size_are_bounded(tmp_path):
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 50000 + "]" * 50000 + "\n")
    started = time.monotonic()
    with pytest.raises(render.YAMLLimitError) as caught:
        render.load_yaml_documents(str(deep))
    assert time.monotonic() - started < 2
    assert str(caught.value) == f"{deep}: nested deeper than {render.MAX_YAML_DEPTH} levels"
    big = tmp_path / "big.yaml"
    big.write_text("a: " + "x" * (37 * 1024 * 1024) + "\n")
    with pytest.raises(render.YAMLLimitError) as caught:
        render.load_yaml_documents(str(big))
    assert "more than the limit of 16777216 for one YAML file" in str(caught.value)


def _bomb_tree(tmp_path):
    root = tmp_path / "repo"
    shutil_copy = __import__("shutil")
    for part in ("mgmt/local-host", "workload/local-host"):
        shutil_copy.copytree(REPO / part, root / part)
    for name in ("bootstrap.toml", ".yamllint"):
        shutil_copy.copy(REPO / name, root / name)
    bomb = root / "mgmt/local-host/bomb"
    bomb.mkdir()
    (bomb / "kustomization.yaml").write_text("resources:\n  - cm.yaml\n")
    (bomb / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\ndata:\n  " + BOMB.replace("\n", "\n  ")
    )
    return root


def test_validate_ends_the_bomb_in_a_pr_fast_with_a_finding_before_kustomize_reads_it(tmp_path):
    root = _bomb_tree(tmp_path)
    started = time.monotonic()
    result = validate.run(str(root), environments=["local-host"], cel=False, deadline=300, memory=2 * 1024**3)
    assert time.monotonic() - started < 120
    bomb = [f for f in result["findings"] if "YAML bomb" in f["message"]]
    assert bomb and bomb[0]["file"] == "mgmt/local-host/bomb/cm.yaml", result["findings"]


def test_kustomize_runs_under_the_memory_limit(tmp_path):
    """A renderer that tries to take 1 GiB under a 256 MiB limit fails with a clear error, not the host."""
    hog = tmp_path / "kustomize"
    hog.write_text(f"#!{sys.executable}\nimport sys\nx = bytearray(1024 ** 3)\nprint('apiVersion: v1')\n")
    hog.chmod(0o755)
    folder = tmp_path / "tree"
    folder.mkdir()
    (folder / "kustomization.yaml").write_text("resources: []\n")
    with pytest.raises(render.RenderError) as caught:
        render.build(str(folder), [str(hog), "build"], memory=256 * 1024**2)
    assert caught.value.reason.startswith(
        "kustomize ran out of its memory limit of 256 MiB (KROPS_RENDER_MEMORY_LIMIT, docs/configuration.md): "
    )


def test_validate_and_render_diff_end_at_their_deadline(tmp_path):
    slow = tmp_path / "kustomize"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    root = _bomb_tree(tmp_path)
    started = time.monotonic()
    with pytest.raises(validate.ValidateError) as caught:
        validate.run(str(root), environments=["local-host"], renderer=[str(slow), "build"], cel=False, deadline=2)
    assert time.monotonic() - started < 10
    assert str(caught.value).startswith("validate did not finish within its deadline of 2 s")
    assert str(caught.value).endswith(
        "raise the deadline option (docs/configuration.md, Bounds) or make the tree smaller"
    )


def test_memory_limit_setting_is_checked():
    assert render.memory_limit({}) == 2 * 1024**3
    assert render.memory_limit({"KROPS_RENDER_MEMORY_LIMIT": "512Mi"}) == 512 * 1024**2
    with pytest.raises(render.RenderError) as caught:
        render.memory_limit({"KROPS_RENDER_MEMORY_LIMIT": "lots"})
    assert caught.value.reason == "KROPS_RENDER_MEMORY_LIMIT='lots' is not a positive size (bytes, or e.g. 512Mi, 2Gi)"


def test_every_finding_kind_render_diff_raises_is_an_accepted_id_shape():
    import re as _re

    source = "".join(p.read_text() for p in sorted((REPO / "plugins" / "module_utils").glob("render_diff*.py")))
    emitted = set(_re.findall(r'Finding\(\s*"([a-z-]+)"', source)) | {
        kind for kind, dummy in render_diff_rules.POLICIES
    }
    emitted |= set(_re.findall(r'^\s+"([a-z]+(?:-[a-z]+)+)",\n\s+env', source, _re.M))
    emitted |= set(_re.findall(r'_flag\(findings, "([a-z-]+)"', source))
    assert {"removed", "replaced", "prune-enabled", "ownership-dropped", "plaintext-secret"} <= emitted, emitted
    assert emitted <= set(render_diff.FINDING_KINDS), emitted - set(render_diff.FINDING_KINDS)
    assert render_diff.FINDING_ID.match("local-host/deletion-policy/Bucket/default/data")
    assert render_diff.FINDING_ID.match("head/render-failure")
