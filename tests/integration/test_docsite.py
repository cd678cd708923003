"""The docs site's link checker, page staging and Sphinx cache (docs/docsite/make_site.py). The full
build is make docs (in make test's static side, and .github/workflows/docs.yml); these tests hold the
parts that decide whether a broken link fails it."""

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
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


@pytest.mark.skipif(not os.environ.get("KROPS_DOCS_BUILD"), reason="the full build is make docs (make test runs it)")
def test_full_build(tmp_path):
    result = build.build(tmp_path / "site", Path.home() / ".cache" / "krops" / "docsite")
    html = Path(result["html"])
    assert (html / "index.html").exists()
    assert (html / "collections" / "krops" / "platform" / "index.html").exists()
    assert (html / "docs" / "architecture.html").exists()
    assert result["diagrams"] >= 3 and list((html / "_images").glob("*.svg"))


def test_make_test_builds_the_docs_beside_the_integration_suite():
    """make test: after set-up, integration and static run side by side, and docs is on the static side."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipes = dict(re.findall(r"(?m)^([a-z][\w-]*):[^\n]*\n\t([^\n]+)", makefile))
    assert "-j $(TEST_JOBS)" in recipes["test"] and " integration static" in recipes["test"]
    assert recipes["static"].split("-j 1 ", 1)[1].split() == ["sanity", "units", "lint", "importer", "docs"]
    # ansible-lint runs once: the importer's run is off beside lint's (Makefile, static)
    assert recipes["static"].startswith("@IMPORTER_LINT=false nice -n 10 ")  # the suite first (Makefile, static)
    assert "make_site.py" in recipes["docs"]


def test_sync_tree_rewrites_only_what_changed(tmp_path):
    source, dest = tmp_path / "new", tmp_path / "kept"
    for rel, text in {"a.rst": "same", "sub/b.rst": "old", "gone/c.rst": "x"}.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text)
    os.utime(dest / "a.rst", (1_000_000, 1_000_000))
    for rel, text in {"a.rst": "same", "sub/b.rst": "new", "d.md": "added"}.items():
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_text(text)
    assert build.sync_tree(source, dest) == 2
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*")) == ["a.rst", "d.md", "sub", "sub/b.rst"]
    assert (dest / "a.rst").stat().st_mtime == 1_000_000  # unchanged: Sphinx does not re-read it
    assert (dest / "sub" / "b.rst").read_text() == "new"


def test_a_kept_environment_still_fails_a_reference_broken_by_another_page(tmp_path):
    """Sphinx keeps its parsed pages between builds (make_site.run_sphinx); a page whose target another,
    changed page removed is not re-read, yet -a writes it again, so the broken reference still fails."""
    src, conf = tmp_path / "src", tmp_path / "conf"
    src.mkdir()
    conf.mkdir()
    (conf / "conf.py").write_text('project = "t"\nnitpicky = True\n')
    (src / "index.rst").write_text("Index\n=====\n\n.. toctree::\n\n   a\n   b\n")
    (src / "a.rst").write_text(".. _target:\n\nA\n=\n\ntext\n")
    (src / "b.rst").write_text("B\n=\n\nsee :ref:`target`\n")
    doctrees = tmp_path / "doctrees"
    assert build.run_sphinx(src, tmp_path / "html1", doctrees, conf, dict(os.environ)).returncode == 0
    (src / "a.rst").write_text("A\n=\n\ntext\n")
    run = build.run_sphinx(src, tmp_path / "html2", doctrees, conf, dict(os.environ))
    assert run.returncode != 0
    assert "b.rst" in run.stderr and "undefined label: 'target'" in run.stderr


def test_the_filter_plugin_lists_without_importing_the_kubernetes_client():
    """ansible-doc (so antsibull-docs and docs-lint) imports every filter file to list its filters; the
    kubernetes client costs seconds to import, so render_kubeconfig imports it on use."""
    code = (
        "import sys; sys.path.insert(0, {!r}); "
        "from ansible_collections.krops.platform.plugins.filter import render_kubeconfig; "
        "print(sorted(render_kubeconfig.FilterModule().filters()), 'kubernetes' in sys.modules)"
    ).format(str(ROOT / ".collections"))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "['render_kubeconfig'] False"


def test_every_tool_the_site_starts_gets_its_own_stdin():
    """The first fresh-clone run of round 9 failed make docs: antsibull-docs' `ansible --version` exited 1.
    npm and mermaid-cli ran beside it on the stdin they shared, Node.js leaves an inherited pipe
    non-blocking (nodejs/node#14752), and ansible refuses a non-blocking stdin (ansible/ansible#77639).
    So each process make_site.py starts reads /dev/null."""
    read_end, write_end = os.pipe()
    try:
        os.set_blocking(read_end, False)
        refused = subprocess.run(
            [str(Path(sys.executable).with_name("ansible")), "--version"],
            stdin=read_end,
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        os.close(read_end)
        os.close(write_end)
    assert refused.returncode == 1 and "requires blocking IO" in refused.stderr, refused.stderr
    tree = ast.parse((ROOT / "docs" / "docsite" / "make_site.py").read_text(encoding="utf-8"))
    starts = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("subprocess.run", "subprocess.Popen")
    ]
    assert len(starts) >= 4
    lacking = [
        node.lineno
        for node in starts
        if not any(k.arg == "stdin" and ast.unparse(k.value) == "subprocess.DEVNULL" for k in node.keywords)
    ]
    assert not lacking, f"make_site.py lines {lacking} start a process on the shared stdin"


def test_kept_pages_are_shared_by_checkouts_one_build_at_a_time(tmp_path):
    """One kept folder whatever the checkout's path (a fresh clone re-reads only what differs by content),
    held by one build at a time: a second build's lock waits until the first is done."""
    lock = tmp_path / "sphinx" / "site.lock"
    try_lock = "import fcntl, sys; fcntl.flock(open(sys.argv[1]), fcntl.LOCK_EX | fcntl.LOCK_NB)"
    with build._site_cache(tmp_path) as site:
        assert site == tmp_path / "sphinx" / "site" and site.is_dir()
        held = subprocess.run([sys.executable, "-c", try_lock, str(lock)], capture_output=True, text=True, check=False)
        assert held.returncode == 1 and "BlockingIOError" in held.stderr
    free = subprocess.run([sys.executable, "-c", try_lock, str(lock)], capture_output=True, text=True, check=False)
    assert free.returncode == 0, free.stderr
