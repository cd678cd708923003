"""The docs site's link checker and page staging (docs/docsite/make_site.py). The full build takes
minutes here, so make docs and .github/workflows/docs.yml run it; these tests hold the parts that
decide whether a broken link fails it."""

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("docsite_build", ROOT / "docs" / "docsite" / "make_site.py")
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)


@pytest.fixture
def repo(tmp_path):
    """A copy of docs/ and galaxy.yml, plus a few files the pages link to."""
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", root / "docs", ignore=shutil.ignore_patterns("docsite"))
    shutil.copy(ROOT / "galaxy.yml", root / "galaxy.yml")
    for rel in ("bootstrap.toml", "meta/tools.yml"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, root / rel)
    return root


def test_the_real_docs_have_no_broken_link():
    assert build.check_links(ROOT / "docs") == []


def test_github_heading_slugs():
    assert build.slug("Tool checksums (meta/tools.yml)") == "tool-checksums-metatoolsyml"
    assert build.slug("`make test` and **CI**") == "make-test-and-ci"
    assert build.anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


def test_broken_file_anchor_and_escape_are_all_reported(repo):
    page = repo / "docs" / "extra.md"
    page.write_text(
        "# Extra\n\nSee [gone](gone.md), [bad anchor](release.md#no-such-heading), "
        "[ok](release.md#tool-pins), [out](../../outside.txt), [top](#extra), [web](https://example.org/x), "
        "`[not a link](nowhere.md)`\n\n```\n[in code](nowhere.md)\n```\n",
        encoding="utf-8",
    )
    (repo.parent / "outside.txt").write_text("x", encoding="utf-8")
    assert build.check_links(repo / "docs", repo) == [
        "docs/extra.md: gone.md (no such file)",
        "docs/extra.md: release.md#no-such-heading (no heading with anchor #no-such-heading in release.md)",
        "docs/extra.md: ../../outside.txt (outside the repository)",
    ]


def test_build_stops_on_a_broken_link_before_anything_else(repo, tmp_path):
    (repo / "docs" / "extra.md").write_text("# Extra\n[gone](gone.md)\n", encoding="utf-8")
    with pytest.raises(build.BuildError) as error:
        build.build(tmp_path / "out", tmp_path / "cache", root=repo)
    assert str(error.value) == "broken links in docs/:\n  docs/extra.md: gone.md (no such file)"
    assert not (tmp_path / "out").exists()


def test_staging_renders_diagrams_as_images_and_points_repo_files_at_github(repo, tmp_path):
    page = repo / "docs" / "environments" / "demo.md"
    page.write_text(
        "# Demo\n\n```mermaid\nflowchart LR\n  a --> b\n```\n\n"
        "[pins](../../bootstrap.toml), [tools](../../meta/tools.yml#L3), [release](../release.md), "
        "`[code](../../bootstrap.toml)`\n",
        encoding="utf-8",
    )
    diagrams = {}
    build.stage_page(page, repo / "docs", tmp_path / "rst" / "docs", diagrams, "https://github.com/krops/krops", repo)
    text = (tmp_path / "rst" / "docs" / "environments" / "demo.md").read_text(encoding="utf-8")
    assert len(diagrams) == 1
    digest = next(iter(diagrams))
    assert diagrams[digest] == "flowchart LR\n  a --> b\n"
    assert f"![demo diagram 1](../../_diagrams/{digest}.svg)" in text
    assert "```mermaid" not in text
    assert "[pins](https://github.com/krops/krops/blob/main/bootstrap.toml)" in text
    assert "[tools](https://github.com/krops/krops/blob/main/meta/tools.yml#L3)" in text
    assert "[release](../release.md)" in text
    assert "`[code](../../bootstrap.toml)`" in text


def test_no_browser_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(build.BuildError) as error:
        build.find_browser()
    assert "no Chromium or Chrome found to render the diagrams" in str(error.value)
    assert "apt-get install chromium" in str(error.value)


@pytest.mark.skipif(not os.environ.get("KROPS_DOCS_BUILD"), reason="the full build takes minutes: make docs")
def test_full_build(tmp_path):
    result = build.build(tmp_path / "site", Path.home() / ".cache" / "krops" / "docsite")
    html = Path(result["html"])
    assert (html / "index.html").exists()
    assert (html / "collections" / "krops" / "platform" / "index.html").exists()
    assert (html / "docs" / "architecture.html").exists()
    assert result["diagrams"] >= 3 and list((html / "_images").glob("*.svg"))
