# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""validate's ``yamllint`` rule: yamllint, with the repository's .yamllint, over mgmt/ and workload/.

A file rule: it reads the YAML files as committed (``env.yaml_files``), runs while kustomize renders and
also on the files that belong to no environment. Registered in validate.REGISTRY.
"""

from __future__ import annotations

import hashlib
import os

from ansible_collections.krops.platform.plugins.module_utils import render
from ansible_collections.krops.platform.plugins.module_utils import validate_common as common

try:
    from yamllint import config as yamllint_config
    from yamllint import linter as yamllint_linter

    HAS_YAMLLINT = True
except ImportError:  # reported as a finding
    HAS_YAMLLINT = False

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
                conf.krops_key = digest
                return conf
            except yamllint_config.YamlLintConfigError as exc:
                raise common.ValidateError(f"{path}: invalid yamllint configuration: {exc}")
    return yamllint_config.YamlLintConfig("extends: default")


def _problems(conf, rel, text):
    key = (getattr(conf, "krops_key", id(conf)), rel, hashlib.sha256(text.encode("utf-8")).hexdigest())
    problems = _LINT_CACHE.get(key)
    if problems is None:
        problems = [(p.line, p.column, p.level, p.desc, p.rule) for p in yamllint_linter.run(text, conf, rel)]
        if len(_LINT_CACHE) > 20000:
            _LINT_CACHE.clear()
        _LINT_CACHE[key] = problems
    return problems


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
        for line, column, level, desc, rule in _problems(conf, rel, text):
            env.add(
                rel,
                "line %d" % line,
                RULE,
                "%d:%d %s %s%s" % (line, column, level, desc, f" ({rule})" if rule else ""),
            )
