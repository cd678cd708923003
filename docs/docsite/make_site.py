#!/usr/bin/env python
"""Build the krops.platform docs site offline (make docs).

1. Check the links of docs/**/*.md: every relative link names an existing file, and every
   #anchor of a Markdown page names one of its headings (GitHub's slugs). All broken links are
   reported at once and fail the build.
2. antsibull-docs writes the collection reference (plugins, modules, roles) from the checkout while,
   beside it, each ```mermaid block is rendered to SVG with mermaid-cli (one browser run for all
   diagrams not yet in the cache) and replaced by an image.
3. Sphinx (myst-parser for the Markdown pages) builds HTML with -a -W -n: any warning, among them a
   cross-reference that does not resolve, fails the build. Its parsed pages are kept in the cache
   between builds (one folder for every checkout of this machine, so a fresh clone reuses what an
   earlier checkout parsed; a lock keeps two builds from sharing it at once), so it re-reads only the
   sources whose bytes changed; every page is still written, so every reference is resolved again; a
   failed build drops them.

Links to repository files outside docs/ become links to the file on GitHub (galaxy.yml repository).
mermaid-cli comes from npm (MERMAID_CLI below) into --cache; the browser is a local Chromium or
Chrome (--browser, else chromium/google-chrome on PATH); nothing is fetched while building.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MERMAID_CLI = "@mermaid-js/mermaid-cli@11.12.0"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
MERMAID = re.compile(r"^```mermaid\n(?P<body>.*?)^```\n", re.M | re.S)
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"(?<!\!)\[(?P<text>[^\]\n]*)\]\((?P<target>[^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(?P<title>.+?)\s*#*\s*$", re.M)


class BuildError(Exception):
    pass


def slug(title):
    """GitHub's heading anchor: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", title)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text):
    seen, found = {}, set()
    for match in HEADING.finditer(FENCE.sub("", text)):
        base = slug(match.group("title"))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def _prose(text):
    """The text without fenced blocks and inline code (where brackets are not links)."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def pages(docs):
    return sorted(p for p in docs.rglob("*.md") if "docsite" not in p.relative_to(docs).parts)


def check_links(docs, root=ROOT):
    """Every broken relative link of the Markdown pages, as 'file: target (why)'."""
    problems, cache = [], {}
    for page in pages(docs):
        text = page.read_text(encoding="utf-8")
        for match in LINK.finditer(_prose(text)):
            target = match.group("target")
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
                continue
            path_part, _sep, anchor = target.partition("#")
            where = page if not path_part else (page.parent / path_part).resolve()
            rel = page.relative_to(root)
            if not where.exists():
                problems.append(f"{rel}: {target} (no such file)")
                continue
            if root not in where.parents and where != root:
                problems.append(f"{rel}: {target} (outside the repository)")
                continue
            if anchor and where.suffix == ".md":
                if where not in cache:
                    cache[where] = anchors(where.read_text(encoding="utf-8"))
                if anchor not in cache[where]:
                    problems.append(f"{rel}: {target} (no heading with anchor #{anchor} in {where.name})")
    return problems


def _repository_url(root):
    text = (root / "galaxy.yml").read_text(encoding="utf-8")
    match = re.search(r"^repository:\s*(\S+)", text, re.M)
    return match.group(1).rstrip("/") if match else "https://github.com/krops/krops"


def stage_page(page, docs, dest, diagrams, repo_url, root=ROOT):
    """Copy one page to dest: diagrams replaced by images, links outside docs/ made absolute."""
    text = page.read_text(encoding="utf-8")
    rel = page.relative_to(docs)
    up = "../" * (len(rel.parts) - 1)
    number = 0

    def diagram(match):
        nonlocal number
        number += 1
        digest = hashlib.sha256(match.group("body").encode()).hexdigest()[:16]
        diagrams[digest] = match.group("body")
        return f"![{page.stem} diagram {number}]({up}../_diagrams/{digest}.svg)\n"

    text = MERMAID.sub(diagram, text)

    def link(match):
        target = match.group("target")
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            return match.group(0)
        path_part, hash_, anchor = target.partition("#")
        where = (page.parent / path_part).resolve()
        if docs in where.parents and where.suffix == ".md":
            return match.group(0)
        kind = "tree" if where.is_dir() else "blob"
        url = f"{repo_url}/{kind}/main/{where.relative_to(root).as_posix()}" + (hash_ + anchor if anchor else "")
        return f"[{match.group('text')}]({url})"

    parts = re.split(r"(^```.*?^```\n|`[^`\n]*`)", text, flags=re.M | re.S)
    text = "".join(p if i % 2 else LINK.sub(link, p) for i, p in enumerate(parts))
    out = dest / rel
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")


def find_browser(explicit=None):
    for candidate in (explicit,) if explicit else BROWSERS:
        found = shutil.which(candidate) if candidate else None
        if found:
            return found
    raise BuildError(
        "no Chromium or Chrome found to render the diagrams (looked for {}). Install one (Debian: "
        "apt-get install chromium) or pass --browser /path/to/chrome.".format(", ".join(BROWSERS))
    )


def mermaid_cli(cache):
    mmdc = cache / "node_modules" / ".bin" / "mmdc"
    if mmdc.exists():
        return mmdc
    if not shutil.which("npm"):
        raise BuildError(f"npm is needed once to install {MERMAID_CLI} into {cache} (Debian: apt-get install npm)")
    cache.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PUPPETEER_SKIP_DOWNLOAD="1")  # the browser is the local one
    run = subprocess.run(
        ["npm", "install", "--prefix", str(cache), "--no-audit", "--no-fund", MERMAID_CLI],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode != 0 or not mmdc.exists():
        raise BuildError(f"npm install {MERMAID_CLI} failed:\n{run.stderr[-2000:]}")
    return mmdc


def render_diagrams(diagrams, out, cache, browser):
    """SVG for each diagram; those not in the cache are rendered in one mermaid-cli run."""
    store = cache / "svg"
    store.mkdir(parents=True, exist_ok=True)
    missing = [d for d in sorted(diagrams) if not (store / f"{d}.svg").exists()]
    if missing:
        work = cache / "work"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        (work / "puppeteer.json").write_text(
            json.dumps({"executablePath": browser, "args": ["--no-sandbox", "--disable-gpu"]}), encoding="utf-8"
        )
        source = "".join(f"```mermaid\n{diagrams[d]}```\n\n" for d in missing)
        (work / "all.md").write_text(source, encoding="utf-8")
        run = subprocess.run(
            [str(mermaid_cli(cache)), "-q", "-p", "puppeteer.json", "-i", "all.md", "-o", "all.out.md"],
            cwd=work,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        if run.returncode != 0:
            raise BuildError(f"mermaid-cli could not render the diagrams:\n{(run.stderr or run.stdout)[-3000:]}")
        for number, digest in enumerate(missing, 1):
            rendered = work / f"all.out-{number}.svg"
            if not rendered.exists():
                raise BuildError(f"mermaid-cli wrote no {rendered.name} (diagram {digest})")
            shutil.copy(rendered, store / f"{digest}.svg")
    target = out / "_diagrams"
    target.mkdir(parents=True, exist_ok=True)
    for digest in diagrams:
        shutil.copy(store / f"{digest}.svg", target / f"{digest}.svg")
    return len(missing)


def _tool(name):
    found = Path(sys.executable).with_name(name)
    return str(found) if found.exists() else name


def sync_tree(source, dest):
    """Make dest a copy of source, rewriting only the files whose bytes differ and deleting the rest,
    so an unchanged page keeps its modification time (what Sphinx compares to decide what to re-read)."""
    wanted = {p.relative_to(source) for p in source.rglob("*") if p.is_file()}
    dest.mkdir(parents=True, exist_ok=True)
    for old in sorted(dest.rglob("*"), reverse=True):
        rel = old.relative_to(dest)
        if old.is_file() and rel not in wanted:
            old.unlink()
        elif old.is_dir() and not any(old.iterdir()):
            old.rmdir()
    changed = 0
    for rel in sorted(wanted):
        target = dest / rel
        data = (source / rel).read_bytes()
        if target.is_file() and target.read_bytes() == data:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        changed += 1
    return changed


def run_sphinx(source, html, doctrees, conf_dir, env):
    """sphinx-build -a -W -n with its parsed pages kept in doctrees: only changed sources are re-read,
    every page is written (so every cross-reference resolved, a broken one a warning, so an error)."""
    return subprocess.run(
        [_tool("sphinx-build"), "-b", "html", "-a", "-W", "--keep-going", "-n", "-q", "-c", str(conf_dir)]
        + ["-d", str(doctrees), str(source), str(html)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )


@contextlib.contextmanager
def _site_cache(cache):
    """The Sphinx sources and doctrees kept between builds, held for one build at a time.

    One folder for every checkout: the sources are synced into it by content (sync_tree), so a fresh
    clone of the same docs re-reads nothing, and a checkout that differs re-reads only what differs.
    The lock (flock, released when the process ends) makes a second build wait, not mix its files in."""
    folder = cache / "sphinx" / "site"
    folder.mkdir(parents=True, exist_ok=True)
    with open(cache / "sphinx" / "site.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield folder


def build(output, cache, browser=None, root=ROOT):
    started, timings = time.monotonic(), {}
    docs = root / "docs"
    problems = check_links(docs, root)
    if problems:
        raise BuildError("broken links in docs/:\n  " + "\n  ".join(problems))
    browser = find_browser(browser)
    shutil.rmtree(output, ignore_errors=True)
    rst = output / "rst"
    rst.mkdir(parents=True, mode=0o700)
    rst.chmod(0o700)  # antsibull-docs refuses a destination others can write to

    env = dict(os.environ)
    env["ANSIBLE_COLLECTIONS_PATH"] = str(root / ".collections")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    # antsibull-docs (ansible-doc of the collection) writes rst/collections/ while the pages are staged
    # and the diagrams rendered into rst/docs/ and rst/_diagrams/: independent work, run side by side.
    mark = time.monotonic()
    reference = subprocess.Popen(  # pylint: disable=consider-using-with
        [_tool("antsibull-docs"), "--config-file", str(HERE / "antsibull-docs.cfg"), "collection", "--use-current"]
        + ["--dest-dir", str(rst), "krops.platform"],
        env=env,
        # Its own stdin, not the one it shares with the Node.js processes beside it: Node leaves an
        # inherited pipe non-blocking (nodejs/node#14752) and ansible then refuses to start ("Ansible
        # requires blocking IO", ansible/ansible#77639), which antsibull-docs meets as `ansible --version` rc 1.
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        diagrams, repo_url = {}, _repository_url(root)
        for page in pages(docs):
            stage_page(page, docs, rst / "docs", diagrams, repo_url, root)
        rendered = render_diagrams(diagrams, rst, cache, browser)
        timings["diagrams"] = time.monotonic() - mark
    finally:
        stdout, stderr = reference.communicate()
    timings["antsibull-docs"] = time.monotonic() - mark
    if reference.returncode != 0:
        raise BuildError(f"antsibull-docs failed:\n{(stderr or stdout)[-3000:]}")
    shutil.copy(HERE / "index.rst", rst / "index.rst")

    # Sphinx keeps its environment (the parsed pages) between builds, and re-reads only the pages whose
    # sources changed; -a still writes every page, so every cross-reference is resolved (and a broken
    # one warned about) on each build. After a failed build the environment is dropped, so the next
    # build reads everything again and repeats every warning.
    mark = time.monotonic()
    html = output / "html"
    with _site_cache(cache) as site:
        changed = sync_tree(rst, site / "rst")
        run = run_sphinx(site / "rst", html, site / "doctrees", HERE, env)
        if run.returncode != 0:
            shutil.rmtree(site / "doctrees", ignore_errors=True)
    timings["sphinx"] = time.monotonic() - mark
    if run.returncode != 0:
        raise BuildError(f"sphinx-build failed:\n{(run.stderr or run.stdout)[-5000:]}")
    return {
        "html": str(html),
        "pages": len(pages(docs)),
        "diagrams": len(diagrams),
        "diagrams_rendered": rendered,
        "sources_changed": changed,
        "timings": ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()),
        "seconds": round(time.monotonic() - started, 1),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True, help="build folder (html/ ends up in it)")
    parser.add_argument(
        "--cache", type=Path, default=Path.home() / ".cache" / "krops" / "docsite", help="mermaid-cli and SVG cache"
    )
    parser.add_argument("--browser", help="Chromium or Chrome executable for mermaid-cli")
    parser.add_argument("--check-links", action="store_true", help="only check the links of docs/**/*.md")
    args = parser.parse_args(argv)
    try:
        if args.check_links:
            problems = check_links(ROOT / "docs")
            if problems:
                raise BuildError("broken links in docs/:\n  " + "\n  ".join(problems))
            print("docs links: all resolve")
            return 0
        result = build(args.output.resolve(), args.cache.resolve(), args.browser)
    except BuildError as exc:
        print(f"make docs: {exc}", file=sys.stderr)
        return 1
    print(
        "docs site: {html} ({pages} pages, {diagrams} diagrams, {diagrams_rendered} rendered now, {sources_changed} "
        "sources changed since the last build; {timings}; {seconds} s)".format(**result)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
