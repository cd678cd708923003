"""Renovate covers every pin (issue 29).

The scan finds every version and digest in the pin-bearing files; each must be extracted by a rule
of renovate.json5 or listed in .github/renovate-manual.yaml with a reason. The custom managers'
regexes are applied the way Renovate 44 applies them (lib/modules/manager/custom/regex/strategies.ts,
handleAny: each matchString compiled with the "g" flag only, run over the whole file; the named
groups currentValue/currentDigest/depName are the dependency; RE2 syntax). The built-in managers
the config enables are emulated narrowly for what they extract here (github-actions: the ref of
`uses:` and setup-python's python-version; pip_requirements: one requirement a line; ansible-galaxy:
collection versions). Then a grouped update is simulated the way Renovate's autoReplace writes it
(lib/workers/repository/update/branch/auto-replace.ts: the currentValue replaced inside the matched
string, every occurrence since autoReplaceGlobalMatch defaults to true) and validate's chart-pin rule
must agree with the result.
"""

from __future__ import annotations

import fnmatch
import json
import os
import pathlib
import re

import json5
import pytest
import yaml

from ansible_collections.krops.platform.plugins.module_utils import validate
from tests.substrate.trees import SCHEMAS, copy_repo, findings

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = json5.loads((ROOT / "renovate.json5").read_text(encoding="utf-8"))
MANUAL = yaml.safe_load((ROOT / ".github" / "renovate-manual.yaml").read_text(encoding="utf-8"))["manual"]

# The files that hold pins (globs relative to the root). SOPS files are left out: their
# `version:` is the sops release that encrypted them, metadata and not a pin.
PIN_FILES = (
    "bootstrap.toml",
    "mgmt/**/*.yaml",
    "workload/**/*.yaml",
    "meta/*.yml",
    "galaxy.yml",
    "requirements.yml",
    "requirements.txt",
    "requirements-test.txt",
    "requirements-sbom.txt",
    "execution-environment.yml",
    ".github/workflows/*.yml",
    "airgap/*.yaml",
    "airgap/images.txt",
    "airgap/manifests/*.yaml",
    "playbooks/*.yml",
    "roles/*/defaults/main.yml",
)
# A version (1.2, v1.2.3, 1.2.3-rc.1, 2.9.x), a digest, or a commit SHA; not part of a longer
# dotted token (so 10.0.0.0/16 is not a version).
TOKEN = re.compile(
    r"(?<![\w.\-/])v?\d+\.\d+(?:\.\d+)?(?:-[0-9A-Za-z.]+)?(?:\.x)?(?![\w.])"
    r"|sha256:[0-9a-f]{64}"
    r"|(?<![0-9a-f])(?:[0-9a-f]{64}|[0-9a-f]{40})(?![0-9a-f])"
)
COMMENT = re.compile(r"(^|\s)#.*$")
# RE2 has no lookaround and no backreferences; a matchString using them would fail in Renovate.
NOT_RE2 = re.compile(r"\(\?[=!]|\(\?<[=!]|\\[1-9]")


def _pin_files():
    found = set()
    for pattern in PIN_FILES:
        for path in ROOT.glob(pattern):
            if path.is_file() and not path.name.endswith(".sops.yaml"):
                found.add(path.relative_to(ROOT).as_posix())
    return sorted(found)


def _file_pattern(pattern):
    """managerFilePatterns: "/regex/" is a regex searched in the path, anything else a glob."""
    if pattern.startswith("/") and pattern.endswith("/"):
        regex = re.compile(pattern[1:-1])
        return lambda rel: regex.search(rel) is not None
    return lambda rel: fnmatch.fnmatch(rel, pattern)


def _python_regex(match_string):
    assert not NOT_RE2.search(match_string), f"not RE2 syntax: {match_string}"
    # JavaScript/RE2 (?<name>...) is Python's (?P<name>...).
    return re.compile(re.sub(r"\(\?<([A-Za-z]\w*)>", r"(?P<\1>", match_string))


class Dep:
    def __init__(self, rel, manager, match, dep_name):
        self.rel = rel
        self.manager = manager
        self.match = match
        self.dep_name = dep_name

    @property
    def spans(self):
        return [self.match.span(g) for g in ("currentValue", "currentDigest") if self.match.groupdict().get(g)]


def _custom_deps(rel, text):
    deps = []
    for manager in CONFIG["customManagers"]:
        if not any(_file_pattern(p)(rel) for p in manager["managerFilePatterns"]):
            continue
        for match_string in manager["matchStrings"]:
            for match in _python_regex(match_string).finditer(text):
                name = manager.get("depNameTemplate") or match.groupdict().get("depName")
                deps.append(Dep(rel, manager["description"], match, name))
    return deps


GH_USES = re.compile(r"uses: (?P<depName>[\w.-]+/[\w./-]+)@(?P<currentDigest>[0-9a-f]{40})")
GH_PYTHON = re.compile(r"python-version: \"(?P<currentValue>[^\"]+)\"")
GH_NODE = re.compile(r"node-version: \"(?P<currentValue>[^\"]+)\"")
PIP = re.compile(r"(?m)^(?P<depName>[A-Za-z0-9_.-]+)(?:\[[^\]]+\])?\s*(?:==|>=|~=)\s*(?P<currentValue>[^\s;#]+)")
GALAXY_DEP = re.compile(r"(?m)^  (?P<depName>[a-z0-9_]+\.[a-z0-9_]+): \"(?P<currentValue>[^\"]+)\"")
GALAXY_REQ = re.compile(
    r"(?m)^  - name: (?P<depName>[a-z0-9_]+\.[a-z0-9_]+)\n    version: \"(?P<currentValue>[^\"]+)\""
)


_KNOWN_INPUT = {GH_PYTHON: "python", GH_NODE: "node"}


def _builtin_deps(rel, text):
    """What the enabled built-in managers extract from this file (their default or configured patterns)."""
    rules = []
    if re.search(r"(^|/)\.github/workflows/[^/]+\.ya?ml$", rel):
        rules.append(("github-actions", GH_USES))
        if "actions/setup-python@" in text:  # known action: its python-version input is a dependency
            rules.append(("github-actions", GH_PYTHON))
        if "actions/setup-node@" in text:  # likewise node-version
            rules.append(("github-actions", GH_NODE))
    if any(_file_pattern(p)(rel) for p in CONFIG["pip_requirements"]["managerFilePatterns"]):
        rules.append(("pip_requirements", PIP))
    if any(_file_pattern(p)(rel) for p in CONFIG["ansible-galaxy"]["managerFilePatterns"]):
        rules.append(("ansible-galaxy", GALAXY_DEP if rel == "galaxy.yml" else GALAXY_REQ))
    return [
        Dep(rel, name, m, m.groupdict().get("depName") or _KNOWN_INPUT[regex])
        for name, regex in rules
        for m in regex.finditer(text)
    ]


def _deps(rel, text):
    return _custom_deps(rel, text) + _builtin_deps(rel, text)


def _tokens(text):
    offset = 0
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        code = COMMENT.sub("", line.rstrip("\n"))
        for match in TOKEN.finditer(code):
            yield number, code, offset + match.start(), offset + match.end(), match.group(0)
        offset += len(line)


def _manual(rel, code):
    for entry in MANUAL:
        if fnmatch.fnmatch(rel, entry["file"]) and re.search(entry["line"], code):
            return entry
    return None


def _coverage():
    uncovered, manual_used, deps_of = [], set(), {}
    for rel in _pin_files():
        text = (ROOT / rel).read_text(encoding="utf-8")
        deps = _deps(rel, text)
        deps_of[rel] = deps
        spans = [span for dep in deps for span in dep.spans]
        for number, code, start, end, token in _tokens(text):
            if any(s <= start and end <= e for s, e in spans):
                continue
            entry = _manual(rel, code)
            if entry is None:
                uncovered.append(f"{rel}:{number}: {token} ({code.strip()})")
            else:
                manual_used.add(id(entry))
    return uncovered, manual_used, deps_of


def test_every_pin_is_renovated_or_listed_as_manual():
    uncovered = _coverage()[0]
    assert uncovered == [], "versions no Renovate rule extracts and .github/renovate-manual.yaml does not list"


def test_every_manual_entry_has_a_reason_and_still_matches():
    used = _coverage()[1]
    for entry in MANUAL:
        assert len(entry.get("reason", "").split()) >= 5, f"{entry['file']}: no reason given"
        assert id(entry) in used, f"{entry['file']} {entry['line']!r} matches no pin any more: remove it"


def test_every_custom_manager_extracts_something():
    deps_of = _coverage()[2]
    used = {dep.manager for deps in deps_of.values() for dep in deps}
    for manager in CONFIG["customManagers"]:
        assert manager["description"] in used, f"custom manager extracts nothing: {manager['description']}"
        assert "{{" not in manager.get("depNameTemplate", ""), "the test reads depNameTemplate literally"


def test_every_custom_manager_names_its_type():
    # Renovate's config validator (--strict, as make renovate runs it) fails with "Config migration
    # necessary" on a custom manager without customType: it migrates the entry to customType "regex"
    # (found by running renovate 44.121.2's config-validator.js; docs.renovatebot.com/modules/manager/regex).
    untyped = [m["description"] for m in CONFIG["customManagers"] if m.get("customType") not in ("regex", "jsonata")]
    assert untyped == [], f"custom managers without customType: {untyped}"


def test_scan_sees_what_it_should():
    """The scan is not blind: a pin added without a rule is reported."""
    text = "spec:\n  version: v9.9.9\n  image: example.org/app:1.2.3@sha256:" + "a" * 64 + "\n"
    tokens = [t[-1] for t in _tokens(text)]
    assert tokens == ["v9.9.9", "1.2.3", "sha256:" + "a" * 64]
    assert _deps("mgmt/local-host/new/thing.yaml", text) == []
    assert [t[-1] for t in _tokens("cidrBlocks: [10.0.0.0/16]  # v1.2.3 in a comment\n")] == []


def _deps_named(deps_of, name):
    return [dep for deps in deps_of.values() for dep in deps if dep.dep_name == name]


def test_chart_pins_are_one_dependency_each_across_bootstrap_and_trees():
    """Renovate puts updates of one depName (and one group) in one branch: bootstrap.toml's pin and
    every tree pin of the chart must come out as the same dependency, or the PR would split them."""
    deps_of = _coverage()[2]
    for name, pin in (
        ("cert-manager", "cert-manager"),
        ("cluster-api-operator", "capi-operator"),
        ("ghcr.io/controlplaneio-fluxcd/charts/flux-operator", "flux-operator"),
    ):
        deps = _deps_named(deps_of, name)
        files = {dep.rel for dep in deps}
        assert "bootstrap.toml" in files, name
        assert any(f.startswith("mgmt/local-host/") for f in files), name
        values = {dep.match.group("currentValue") for dep in deps}
        assert len(values) == 1, f"{name}: several current versions {values}"


def test_groups():
    rules = {r.get("groupName"): r for r in CONFIG["packageRules"] if r.get("groupName")}
    capi = set(rules["cluster-api"]["matchPackageNames"])
    deps_of = _coverage()[2]
    providers = {
        dep.dep_name
        for deps in deps_of.values()
        for dep in deps
        if "Provider" in dep.match.group(0) and dep.rel.startswith("mgmt/")
    }
    assert providers and providers <= capi, providers - capi
    assert {"ghcr.io/controlplaneio-fluxcd/charts/flux-operator", "fluxcd/flux2"} <= set(
        rules["flux"]["matchPackageNames"]
    )


def _renovate_update(root, deps, new_value):
    """Write one update the way Renovate's autoReplace does, file by file, match by match."""
    by_file = {}
    for dep in deps:
        by_file.setdefault(dep.rel, []).append(dep)
    for rel, items in by_file.items():
        path = root / rel
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        for dep in items:
            replace_string = dep.match.group(0)
            current = dep.match.group("currentValue")
            new = new_value if current.startswith("v") == new_value.startswith("v") else new_value.lstrip("v")
            index = text.index(replace_string)
            text = text[:index] + replace_string.replace(current, new) + text[index + len(replace_string) :]
        path.write_text(text, encoding="utf-8")
    return sorted(by_file)


CHARTS = {
    "cert-manager": ("cert-manager", "v1.99.0"),
    "cluster-api-operator": ("capi-operator", "0.99.0"),
    "ghcr.io/controlplaneio-fluxcd/charts/flux-operator": ("flux-operator", "0.99.0"),
}


def _chart_findings(result):
    return [f for f in findings(result) if f[2] == "bootstrap" and "differs from bootstrap.toml [charts]" in f[3]]


@pytest.mark.parametrize("chart", sorted(CHARTS))
def test_grouped_update_keeps_validate_chart_pins_agreeing(tmp_path, chart):
    pin, new_version = CHARTS[chart]
    root = copy_repo(tmp_path, ("mgmt/local-host", "workload/local-host"))
    deps_of = _coverage()[2]
    deps = [d for d in _deps_named(deps_of, chart) if d.rel == "bootstrap.toml" or d.rel.startswith("mgmt/local-host/")]
    written = _renovate_update(root, deps, new_version)
    assert "bootstrap.toml" in written and len(written) >= 2
    text = (root / "bootstrap.toml").read_text(encoding="utf-8")
    assert f'\n{pin} = "{new_version}"' in text
    result = validate.run(str(root), environments=["local-host"], schema_location=str(SCHEMAS))
    assert _chart_findings(result) == []


def test_a_half_update_is_what_validate_rejects(tmp_path):
    """The same simulation on bootstrap.toml alone: validate reports the drift, so the test above can fail."""
    root = copy_repo(tmp_path, ("mgmt/local-host", "workload/local-host"))
    deps_of = _coverage()[2]
    deps = [d for d in _deps_named(deps_of, "cert-manager") if d.rel == "bootstrap.toml"]
    _renovate_update(root, deps, "v1.99.0")
    result = validate.run(str(root), environments=["local-host"], schema_location=str(SCHEMAS))
    assert [f[3] for f in _chart_findings(result)] == [
        "chart cert-manager version v1.21.1 differs from bootstrap.toml [charts] cert-manager = v1.99.0"
    ]


def _normalise(value):
    return re.sub(r"^[<>=~!^]+", "", str(value or ""))


def _emulated():
    deps_of = _coverage()[2]
    found = set()
    for rel, deps in deps_of.items():
        for dep in deps:
            groups = dep.match.groupdict()
            # github-actions: the commit is the pin (the tag is its comment); elsewhere the version.
            if dep.manager == "github-actions":
                value = groups.get("currentDigest") or groups.get("currentValue")
            else:
                value = groups.get("currentValue") or groups.get("currentDigest")
            found.add((rel, dep.dep_name, _normalise(value)))
    return found


@pytest.mark.skipif(
    not os.environ.get("KROPS_RENOVATE_REPORT"),
    reason="KROPS_RENOVATE_REPORT unset: make renovate writes Renovate's own extraction and runs this",
)
def test_emulation_equals_renovates_own_extraction():
    """Renovate itself (--platform=local --dry-run=extract) finds exactly what the emulation above finds."""
    report = json.loads(pathlib.Path(os.environ["KROPS_RENOVATE_REPORT"]).read_text(encoding="utf-8"))
    (repository,) = report["repositories"].values()
    real = set()
    for manager, files in repository["packageFiles"].items():
        for package_file in files:
            rel = package_file["packageFile"]
            if not any(fnmatch.fnmatch(rel, pattern) for pattern in PIN_FILES):
                continue
            for dep in package_file["deps"]:
                if dep.get("skipReason") == "local-dependency" or dep.get("depType") == "github-runner":
                    continue
                value = dep.get("currentDigest") if manager == "github-actions" and dep.get("currentDigest") else None
                real.add(
                    (rel, dep["depName"], _normalise(value or dep.get("currentValue") or dep.get("currentDigest")))
                )
    emulated = _emulated()
    assert sorted(real - emulated) == [] and sorted(emulated - real) == []


def test_a_tools_bump_rewrites_every_platforms_asset_and_no_digest(tmp_path):
    """meta/tools.yml: one dependency per tool, whose match spans every platform's asset, so a bump moves
    the version in each asset URL together; the digests stay (a person writes them, the manual list)."""
    deps = list(_coverage()[2]["meta/tools.yml"])
    tools = yaml.safe_load((ROOT / "meta" / "tools.yml").read_text(encoding="utf-8"))["tools"]
    assert sorted(dep.match.group("currentValue") for dep in deps) == sorted(t["version"] for t in tools.values())
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "tools.yml").write_text((ROOT / "meta" / "tools.yml").read_text(encoding="utf-8"))
    _renovate_update(tmp_path, deps, "v9.99.0")
    bumped = yaml.safe_load((tmp_path / "meta" / "tools.yml").read_text(encoding="utf-8"))["tools"]
    for name, tool in bumped.items():
        assert tool["version"] == "v9.99.0", name
        for platform, asset in tool["assets"].items():
            old = tools[name]["assets"][platform]
            assert asset["url"] == old["url"].replace(tools[name]["version"], "v9.99.0"), (name, platform)
            assert asset["sha256"] == old["sha256"], (name, platform)
