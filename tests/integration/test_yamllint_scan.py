# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""validate_yamllint.lint scans each file once and gives exactly yamllint.linter.run's problems (issue 26).

The reference is yamllint itself: ``yamllint.linter.run`` called outside lint() takes yamllint's own code
paths (the shared scan only serves the buffer lint() is linting). The corpus: every YAML file of the
repository, files written to break the scanner and the parser at many places, and seeded mutations of the
trees' files (a character deleted, doubled or replaced), each linted with the repository's .yamllint.
"""

from __future__ import annotations

import random

import pytest

from ansible_collections.krops.platform.plugins.module_utils import validate_yamllint, yamllint_scan
from tests.substrate.fixtures import REPO

yamllint_linter = pytest.importorskip("yamllint.linter")

CONF = validate_yamllint.load_config(str(REPO))
BROKEN = {
    "tab-indent": "a:\n\tb: 1\n",
    "unclosed-quote": 'a: "b\nc: d\n',
    "unclosed-single": "a: 'b\n",
    "bad-escape": 'a: "\\q"\n',
    "mapping-in-scalar": "a: b: c\n",
    "dedent-sequence": "a:\n  - b\n c: d\n",
    "sequence-then-mapping": "- a\nb: c\n",
    "flow-unclosed": "a: [b, c\nd: e\n",
    "flow-mapping-unclosed": "a: {b: c\n",
    "block-scalar-bad-indent": "a: |\n  x\n y: 1\n",
    "alias-undefined": "a: *nothing\n",
    "anchor-twice": "a: &x 1\nb: &x 2\n",
    "document-markers": "---\na: 1\n...\n---\n- b\n...\n",
    "directive-late": "a: 1\n%YAML 1.1\n---\nb: 2\n",
    "disable-file": "# yamllint disable-file\na:   b\n\tc\n",
    "disable-line": "a:   b  # yamllint disable-line rule:colons\nc:   d\n",
    "disable-block": "# yamllint disable rule:trailing-spaces\na: b   \n# yamllint enable\nc: d   \n",
    "problems-before-error": "a:   b   \nc: [d,e]\nf: g: h\n",
    "error-before-problems": "a: b: c\nd:   e   \n",
    "empty": "",
    "only-comment": "# just a comment\n",
    "no-final-newline": "a: b",
    "crlf": "a: b\r\nc: d\r\n",
    "unicode": "name: Grüße 🚀\n",
    "long-line": "a: " + "x" * 200 + "\n",
    "truthy-and-octal": "a: yes\nb: 0777\nc: 0o17\n",
    "duplicate-key": "a: 1\na: 2\n",
    "key-without-value": "? a\n: b\n?\n",
    "tag": "a: !!str 1\nb: !custom x\n",
    "nested-flow": "a: {b: [c, {d: e}], f: g}\n",
    "simple-key-too-long": "a" * 1100 + ": b\n",
    "colon-in-plain": "a: b:c\nd: http://x\n",
}


def _problems(run, text, rel):
    try:
        return [(p.line, p.column, p.level, p.desc, p.rule) for p in run(text, CONF, rel)]
    except Exception as exc:  # noqa: BLE001 - yamllint 1.38.0 itself fails on some inputs: so must lint()
        return [("raised", type(exc).__name__, str(exc), "-")]


def _same(text, rel):
    reference = _problems(yamllint_linter.run, text, rel)
    assert _problems(validate_yamllint.lint, text, rel) == reference, rel
    return reference


def _repository_files():
    return sorted(
        p
        for pattern in ("**/*.yaml", "**/*.yml")
        for p in REPO.glob(pattern)
        if not any(part in (".venv", ".collections", "node_modules", ".git", ".sanity-venvs") for part in p.parts)
        and p.is_file()
    )


def test_the_installed_yamllint_is_one_the_shared_scan_was_compared_with():
    assert validate_yamllint.YAMLLINT_VERSION in yamllint_scan.SHARED_SCAN_VERSIONS


def test_every_yaml_file_of_the_repository_lints_the_same():
    files = _repository_files()
    assert len(files) > 300
    for path in files:
        _same(path.read_text(encoding="utf-8", errors="replace"), str(path.relative_to(REPO)))


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_files_give_the_same_problems_and_syntax_errors(name):
    _same(BROKEN[name], f"mgmt/x/{name}.yaml")


def test_broken_files_do_find_syntax_errors():
    """The corpus reaches the syntax check: a scanner and a parser error are among its problems."""
    found = {name: _same(text, f"mgmt/x/{name}.yaml") for name, text in BROKEN.items()}
    assert any("found character '\\t'" in p[3] for p in found["tab-indent"])
    assert any(p[3].startswith("syntax error: mapping values are not allowed here") for p in found["mapping-in-scalar"])
    assert any(p[3].startswith("syntax error:") for p in found["sequence-then-mapping"])


def test_seeded_mutations_of_the_trees_files_lint_the_same():
    rng = random.Random(26)
    files = [p for p in _repository_files() if p.parts[len(REPO.parts)] in ("mgmt", "workload")]
    syntax = 0
    for path in rng.sample(files, min(40, len(files))):
        text = path.read_text(encoding="utf-8")
        for _mutation in range(12):
            at = rng.randrange(len(text) or 1)
            how = rng.choice(("delete", "double", "replace"))
            char = rng.choice(":-[]{}'\"#\t &*!|> \n")
            mutated = {
                "delete": text[:at] + text[at + 1 :],
                "double": text[:at] + text[at : at + 1] * 2 + text[at + 1 :],
                "replace": text[:at] + char + text[at + 1 :],
            }[how]
            problems = _same(mutated, str(path.relative_to(REPO)))
            syntax += any(str(p[-2]).startswith("syntax error") for p in problems)
    assert syntax > 20  # the mutations reach the syntax check, not only the cosmetic rules


def test_a_file_yamllint_itself_fails_on_is_a_finding_not_a_traceback(tmp_path):
    """yamllint 1.38.0's indentation rule raises TypeError on a stray ']' before a key (found by the mutations
    above); validate names the file and yamllint's error instead of failing with a traceback."""
    path = tmp_path / "mgmt" / "x" / "namespace.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("apiVersion: v1\nkind: Namespace\nmetadata:\n  ]ame: podinfo\n")
    found = []
    env = type("Env", (), {})()
    env.yaml_files, env.lint_conf, env.texts, env.over_bounds = [str(path)], CONF, {}, set()
    env.rel = lambda p: str(tmp_path.joinpath(p).relative_to(tmp_path))
    env.add = lambda *finding: found.append(finding)
    validate_yamllint.check(env)  # no env.finish: linted at once, in this process
    assert found == [
        (
            "mgmt/x/namespace.yaml",
            "-",
            "yamllint",
            "yamllint %s failed on this file (TypeError: '<' not supported between instances of 'NoneType' and "
            "'int'), so it is not linted: fix its YAML (kustomize and yamllint's syntax check read it too)"
            % validate_yamllint.YAMLLINT_VERSION,
        )
    ]


def _env_of(files, root, finish):
    env = type("Env", (), {})()
    env.yaml_files, env.lint_conf, env.texts, env.over_bounds = [str(p) for p in files], CONF, {}, set()
    env.rel = lambda p: str(root.joinpath(p).relative_to(root))
    found = []
    env.add = lambda *finding: found.append(finding)
    if finish is not None:
        env.finish = finish
    return env, found


@pytest.mark.parametrize("broken_worker", [False, True])
def test_worker_processes_report_what_linting_here_reports(tmp_path, monkeypatch, broken_worker):
    """validate's yamllint workers (PARALLEL_FILES files or more): the same findings as linting in-process, and
    the same again when a worker cannot answer (its files are linted here)."""
    files = []
    for index in range(validate_yamllint.PARALLEL_FILES + 7):
        path = tmp_path / "mgmt" / "x" / f"f{index:03d}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = BROKEN[sorted(BROKEN)[index % len(BROKEN)]] if index % 3 else f"a:   {index}   \nb: [c,d]\n"
        path.write_text(text)
        files.append(path)
    monkeypatch.setattr(validate_yamllint, "_LINT_CACHE", {})
    inline_env, inline = _env_of(files, tmp_path, None)
    validate_yamllint.check(inline_env)
    monkeypatch.setattr(validate_yamllint, "_LINT_CACHE", {})
    started, original_lint_one = [], yamllint_scan.lint_one
    original = validate_yamllint._Worker.__init__

    def worker(self, conf, part):
        started.append(len(part))
        original(self, conf, part)
        if broken_worker:
            self.proc.kill()

    monkeypatch.setattr(validate_yamllint._Worker, "__init__", worker)
    here = []
    monkeypatch.setattr(yamllint_scan, "lint_one", lambda *a: here.append(a[1]) or original_lint_one(*a))
    finish = []
    env, found = _env_of(files, tmp_path, finish)
    validate_yamllint.check(env)
    assert found == [] and len(finish) == 1  # handed to the workers; collected after the object rules
    finish[0]()
    assert sum(started) == len(files) and found == inline
    assert len(here) == (len(files) if broken_worker else 0)  # linted here only when a worker did not answer
    assert len(inline) > len(files)  # the files do have problems
