# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""validate's ``yamllint`` rule: yamllint, with the repository's .yamllint, over mgmt/ and workload/.

A file rule: it reads the YAML files as committed (``env.yaml_files``), runs while kustomize renders and
also on the files that belong to no environment. Registered in validate.REGISTRY.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading

from ansible_collections.krops.platform.plugins.module_utils import render
from ansible_collections.krops.platform.plugins.module_utils import validate_common as common
from ansible_collections.krops.platform.plugins.module_utils import yamllint_scan

try:
    from yamllint import config as yamllint_config

    HAS_YAMLLINT = True
except ImportError:  # reported as a finding
    HAS_YAMLLINT = False

YAMLLINT_VERSION = yamllint_scan.YAMLLINT_VERSION
lint = yamllint_scan.lint

RULE = "yamllint"
# (configuration, file name, content) -> problems; yamllint is pure Python and the slowest check.
_LINT_CACHE = {}


def load_config(root):
    """The yamllint configuration of the repository at ``root`` (default: extends default), None without yamllint."""
    if not HAS_YAMLLINT:
        return None
    for name in (".yamllint", ".yamllint.yaml", ".yamllint.yml"):
        path = os.path.join(root, name)
        if os.path.isfile(path):
            try:
                with open(path, "rb") as handle:
                    digest = hashlib.sha256(handle.read()).hexdigest()
                conf = yamllint_config.YamlLintConfig(file=path)
                conf.krops_key, conf.krops_file = digest, path
                return conf
            except yamllint_config.YamlLintConfigError as exc:
                raise common.ValidateError(f"{path}: invalid yamllint configuration: {exc}")
    conf = yamllint_config.YamlLintConfig("extends: default")
    conf.krops_file = None
    return conf


def _cache_key(conf, rel, text):
    return (getattr(conf, "krops_key", id(conf)), rel, hashlib.sha256(text.encode("utf-8")).hexdigest())


# Linting in a worker process: yamllint is pure Python and the costliest file rule (docs/scale.md), and a thread
# would hold the GIL the object rules need. check() hands the files to lint to WORKERS child processes (this
# interpreter, this sys.path) when there are at least PARALLEL_FILES, and validate collects their problems after
# the object rules (env.finish). The child lints with lint() and the same configuration file; if it cannot be
# started or fails, the files are linted here: the problems are the same either way.
PARALLEL_FILES = 60
_WORKER = (
    "import json, sys\n"
    "job = json.load(sys.stdin)\n"
    "sys.path[:0] = job['path']\n"
    "from ansible_collections.krops.platform.plugins.module_utils import yamllint_scan as v\n"
    "from yamllint import config\n"
    "conf = config.YamlLintConfig(file=job['config']) if job['config'] else config.YamlLintConfig('extends: default')\n"
    "json.dump([v.lint_one(conf, rel, text) for rel, text in job['files']], sys.stdout)\n"
)


class _Worker:
    """One child process linting a list of (rel, text)."""

    def __init__(self, conf, files):
        self.files, self.output, self.proc = files, None, None
        job = json.dumps({"path": sys.path, "config": conf.krops_file, "files": files})
        try:
            # waited for in result(); a worker of this process, not a command a module runs (run_command)
            self.proc = subprocess.Popen(  # pylint: disable=consider-using-with,ansible-bad-function
                [sys.executable, "-c", _WORKER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        except OSError:
            return
        self.thread = threading.Thread(target=self._talk, args=(job,), daemon=True)
        self.thread.start()

    def _talk(self, job):
        try:
            self.output = self.proc.communicate(job)[0]
        except (OSError, ValueError):
            self.output = None

    def result(self):
        """[(problems, failure)] per file, or None when the child did not answer (then lint here)."""
        if self.proc is None:
            return None
        left = render.remaining()
        self.thread.join(None if left is None else max(left, 0.1))
        if self.thread.is_alive():
            self.proc.kill()
            self.thread.join()
            render.check_deadline("linting")
            return None
        if self.proc.returncode != 0 or not self.output:
            return None
        try:
            answer = json.loads(self.output)
        except ValueError:
            return None
        if not isinstance(answer, list) or len(answer) != len(self.files):
            return None
        return [(None if p is None else [tuple(x) for x in p], None if f is None else tuple(f)) for p, f in answer]


def _workers():
    return 2 if (os.cpu_count() or 1) > 1 else 1


def check(env):
    """Every YAML file of mgmt/ and workload/ passes yamllint with the repository's configuration.

    Enforces the repository's .yamllint (yamllint's own rules and messages). A file over the YAML bounds
    (render.check_yaml_text) is reported once, as a render finding, and not linted.
    """
    conf = env.lint_conf
    if conf is None:
        env.add("-", "-", RULE, "the yamllint Python package is not installed")
        return
    texts, over = getattr(env, "texts", {}), getattr(env, "over_bounds", set())
    todo = []  # (rel, text) in the order of env.yaml_files
    for path in env.yaml_files:
        rel = env.rel(path)
        if path in over or conf.is_file_ignored(rel):
            continue  # over a bound: reported once by validate._index_files; linting it would take as long
        render.check_deadline(f"linting {rel}")
        text = texts.get(path)
        if text is None:  # not read and bounded by _index_files (unreadable, or not YAML to libyaml)
            try:
                with open(path, encoding="utf-8") as handle:
                    text = handle.read()
            except (OSError, UnicodeDecodeError) as exc:
                env.add(rel, "-", RULE, f"cannot read: {exc}")
                continue
            try:
                render.check_yaml_text(text, rel)
            except render.YAMLLimitError:
                continue
            except common.YAML_ERRORS:
                pass  # yamllint reports it with its position
        todo.append((rel, text))
    missing = [(rel, text) for rel, text in todo if _cache_key(conf, rel, text) not in _LINT_CACHE]
    finish = getattr(env, "finish", None)
    if finish is None or len(missing) < PARALLEL_FILES or not hasattr(conf, "krops_file"):
        _report(env, conf, todo, {})
        return
    count = min(_workers(), len(missing))
    workers = [_Worker(conf, missing[i::count]) for i in range(count)]

    def collect():
        linted = {}
        for worker in workers:
            answer = worker.result()
            if answer is not None:
                linted.update(zip((rel for rel, _text in worker.files), answer))
        _report(env, conf, todo, linted)

    finish.append(collect)


def _report(env, conf, todo, linted):
    """The findings of each (rel, text): from ``linted`` (rel -> (problems, failure)), the cache, or lint here."""
    for rel, text in todo:
        key = _cache_key(conf, rel, text)
        problems, failure = _LINT_CACHE.get(key), None
        if problems is None:
            render.check_deadline(f"linting {rel}")
            problems, failure = linted.get(rel) or yamllint_scan.lint_one(conf, rel, text)
            if problems is not None:
                if len(_LINT_CACHE) > 20000:
                    _LINT_CACHE.clear()
                _LINT_CACHE[key] = problems
        if failure is not None:
            env.add(
                rel,
                "-",
                RULE,
                f"yamllint {YAMLLINT_VERSION} failed on this file ({failure[0]}: {failure[1]}), so it is not linted: "
                "fix its YAML (kustomize and yamllint's syntax check read it too)",
            )
            continue
        for line, column, level, desc, rule in problems:
            env.add(
                rel,
                "line %d" % line,
                RULE,
                "%d:%d %s %s%s" % (line, column, level, desc, f" ({rule})" if rule else ""),
            )
