# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""render_directories builds directories with the same inputs once (issue 26: validate at 50 clusters).

Sibling overlays that differ only in comments (workload/<env>/<cluster> with ``resources: [../base]``) have
the same inputs; everything a build may read is part of its key: the base they reach with "..", what that
base reaches in turn, and the overlays' own files. Each test builds with the real kustomize and counts the
builds.
"""

from __future__ import annotations

import pytest

from ansible_collections.krops.platform.plugins.module_utils import render

BASE = """apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - namespace.yaml
"""
NAMESPACE = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: apps\n"


def _overlay(comment, extra=""):
    return f"# {comment}\napiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../base\n{extra}"


@pytest.fixture
def tree(tmp_path, monkeypatch):
    (tmp_path / "env" / "base").mkdir(parents=True)
    (tmp_path / "env" / "base" / "kustomization.yaml").write_text(BASE)
    (tmp_path / "env" / "base" / "namespace.yaml").write_text(NAMESPACE)
    for name in ("a", "b", "c"):
        (tmp_path / "env" / name).mkdir()
        (tmp_path / "env" / name / "kustomization.yaml").write_text(_overlay(f"synced by cluster {name}"))
    monkeypatch.setattr(render, "_BUILD_CACHE", {})
    built = []
    original = render.build

    def counting(directory, *args, **kwargs):
        built.append(directory)
        return original(directory, *args, **kwargs)

    monkeypatch.setattr(render, "build", counting)
    return tmp_path, built


def _dirs(root, *names):
    return [str(root / "env" / n) for n in names]


def test_siblings_differing_in_comments_are_built_once_with_the_same_objects(tree):
    root, built = tree
    result = render.render_directories(_dirs(root, "a", "b", "c"))
    assert len(built) == 1
    assert [result[d] for d in _dirs(root, "a", "b", "c")] == [[{**yaml_ns()}]] * 3
    uncached = render.render_directories(_dirs(root, "a", "b", "c"), cache=False)
    assert uncached == result and len(built) == 4


def yaml_ns():
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}


def test_a_sibling_with_other_content_and_a_changed_base_are_built_again(tree):
    root, built = tree
    (root / "env" / "c" / "kustomization.yaml").write_text(_overlay("c", "commonAnnotations:\n  team: c\n"))
    result = render.render_directories(_dirs(root, "a", "b", "c"))
    assert len(built) == 2
    assert result[_dirs(root, "c")[0]][0]["metadata"]["annotations"] == {"team": "c"}
    assert "annotations" not in result[_dirs(root, "a")[0]][0]["metadata"]
    (root / "env" / "base" / "namespace.yaml").write_text(NAMESPACE.replace("apps", "apps2"))
    result = render.render_directories(_dirs(root, "a", "b"))
    assert len(built) == 3 and result[_dirs(root, "b")[0]][0]["metadata"]["name"] == "apps2"


def test_what_the_base_reaches_in_turn_is_part_of_the_key(tree):
    root, built = tree
    (root / "common").mkdir()
    (root / "common" / "kustomization.yaml").write_text(BASE.replace("namespace.yaml", "cm.yaml"))
    (root / "common" / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: one\n")
    (root / "env" / "base" / "kustomization.yaml").write_text(BASE + "  - ../../common\n")
    first = render.render_directories(_dirs(root, "a", "b"))
    assert len(built) == 1 and sorted(o["kind"] for o in first[_dirs(root, "a")[0]]) == ["ConfigMap", "Namespace"]
    (root / "common" / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: two\n")
    second = render.render_directories(_dirs(root, "a", "b"))
    assert len(built) == 2
    assert {o["metadata"]["name"] for o in second[_dirs(root, "b")[0]]} == {"two", "apps"}


def test_a_failed_shared_build_is_redone_so_each_error_names_its_directory(tree):
    root, built = tree
    (root / "env" / "base" / "namespace.yaml").unlink()
    result = render.render_directories(_dirs(root, "a", "b"))
    assert len(built) == 2
    for directory in _dirs(root, "a", "b"):
        assert isinstance(result[directory], render.RenderError) and result[directory].directory == directory


def test_remote_bases_absolute_paths_and_symlinks_are_never_shared(tree):
    root, _built = tree
    assert render._content_key(_dirs(root, "a")[0], ["kustomize"]) is not None
    (root / "env" / "a" / "kustomization.yaml").write_text(_overlay("a", "  - https://example.invalid/x\n"))
    assert render._content_key(_dirs(root, "a")[0], ["kustomize"]) is None
    (root / "env" / "b" / "kustomization.yaml").write_text(_overlay("b", "  - /etc/krops\n"))
    assert render._content_key(_dirs(root, "b")[0], ["kustomize"]) is None
    (root / "env" / "base" / "link.yaml").symlink_to(root / "env" / "base" / "namespace.yaml")
    assert render._content_key(_dirs(root, "c")[0], ["kustomize"]) is None


@pytest.mark.parametrize("wrapper", ["prlimit", "python"])
def test_a_renderer_that_cannot_start_is_named_the_same_through_either_memory_wrapper(tmp_path, monkeypatch, wrapper):
    """kustomize runs under its address-space limit through util-linux's prlimit when it is on PATH, else a Python
    interpreter; a renderer that cannot be executed is the same RenderError either way."""
    import shutil

    if wrapper == "prlimit" and not shutil.which("prlimit"):
        pytest.skip("util-linux prlimit is not installed")
    if wrapper == "python":
        which = shutil.which
        monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "prlimit" else which(name, *a, **k))
    folder = tmp_path / "tree"
    folder.mkdir()
    (folder / "kustomization.yaml").write_text("resources: []\n")
    broken = tmp_path / "gone" / "kustomize"  # removed after find_kustomize found it, say
    argv = render._limited([str(broken), "build"], 1 << 30)
    assert argv[0].endswith("prlimit") == (wrapper == "prlimit")
    with pytest.raises(render.RenderError) as caught:
        render.build(str(folder), [str(broken), "build"])
    assert caught.value.reason == f"cannot run {broken}: No such file or directory"
    assert render.build(str(folder), render.find_kustomize()) == []  # and a real one builds
