# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Docs completeness: what ansible-doc shows users is complete.

- Every module documents the attributes check_mode, diff_mode and platform (the keys of ansible-core's
  action_common_attributes fragment) with a support level validate-modules accepts, and platform names
  its platforms.
- Every RETURN key, nested ones included, has a sample.
- Every role option whose variable has a value in defaults/main.yml shows that value as its argument-spec
  default, and every role variable of defaults/main.yml is an option of the role.

The module docs are read as ansible-doc builds them (fragments merged), from the collection this checkout
links into .collections. Each check is also run on a planted defect, so none of them can pass vacuously.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.substrate.fixtures import REPO

MODULES = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())
# validate-modules' schema (ansible_test validate_modules/schema.py): the support levels an attribute may have.
SUPPORT = {"full", "partial", "none", "N/A"}
REQUIRED_ATTRIBUTES = ("check_mode", "diff_mode", "platform")


def attribute_problems(name, doc):
    problems = []
    attributes = doc.get("attributes") or {}
    for key in REQUIRED_ATTRIBUTES:
        attribute = attributes.get(key)
        if not isinstance(attribute, dict):
            problems.append(f"{name}: attributes.{key} is missing; add it to DOCUMENTATION")
            continue
        if attribute.get("support") not in SUPPORT:
            problems.append(
                f"{name}: attributes.{key}.support is {attribute.get('support')!r}; use one of {sorted(SUPPORT)}"
            )
        if not attribute.get("description"):
            problems.append(f"{name}: attributes.{key} has no description")
    platform = attributes.get("platform")
    if isinstance(platform, dict) and not platform.get("platforms"):
        problems.append(f"{name}: attributes.platform names no platforms (e.g. platforms: posix)")
    return problems


def sample_problems(name, returns, prefix=""):
    """One line per RETURN key (nested `contains` keys too) without a sample."""
    problems = []
    for key, spec in (returns or {}).items():
        if "sample" not in spec:
            problems.append(f"{name}: RETURN {prefix}{key} has no sample")
        problems += sample_problems(name, spec.get("contains"), f"{prefix}{key}.")
    return problems


def _computed(value, option):
    return isinstance(value, str) and "{{" in value and option.get("type", "str") not in ("str", "path", "raw")


def argument_spec_problems(role, spec_text, defaults_text):
    """One line per defaults/main.yml variable the argument spec does not show as its option's default."""
    spec = yaml.safe_load(spec_text)["argument_specs"]
    defaults = yaml.safe_load(defaults_text) or {}
    problems = []
    for entry, body in spec.items():
        options = body.get("options") or {}
        for variable, value in defaults.items():
            if variable not in options:
                problems.append(f"{role}: {variable} (defaults/main.yml) is no option of entry point {entry}")
            elif _computed(value, options[variable]):
                # A typed option computed by a Jinja expression: a docs site cannot render that as its
                # default (antsibull-docs lint-collection-docs), so the description says where it comes from.
                if "default" in options[variable]:
                    problems.append(f"{role}: option {variable} shows the expression {value!r} as a typed default")
                elif "default" not in str(options[variable].get("description", "")).lower():
                    problems.append(f"{role}: option {variable} is computed but its description does not say how")
            elif "default" not in options[variable]:
                problems.append(f"{role}: option {variable} does not show its default {value!r} (defaults/main.yml)")
            elif options[variable]["default"] != value:
                problems.append(
                    f"{role}: option {variable} shows default {options[variable]['default']!r}, "
                    f"defaults/main.yml has {value!r}"
                )
        for variable, option in options.items():
            if "default" in option and variable not in defaults:
                problems.append(f"{role}: option {variable} shows a default that defaults/main.yml does not set")
            if "default" in option and option.get("required"):
                problems.append(f"{role}: option {variable} is required and has a default")
    return problems


@pytest.fixture(scope="module")
def module_docs():
    """ansible-doc's JSON for every module, as users see it (one process for all of them)."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"), ANSIBLE_NOCOLOR="1")
    ansible_doc = Path(sys.executable).with_name("ansible-doc")
    proc = subprocess.run(
        [str(ansible_doc), "--json", "-t", "module"] + [f"krops.platform.{m}" for m in MODULES],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    docs = json.loads(proc.stdout)
    assert sorted(docs) == [f"krops.platform.{m}" for m in MODULES], proc.stderr
    return docs


def test_every_module_documents_check_mode_diff_mode_and_platform(module_docs):
    problems = []
    for name, entry in sorted(module_docs.items()):
        problems += attribute_problems(name, entry["doc"])
    assert problems == []


def test_every_return_key_has_a_sample(module_docs):
    problems = []
    for name, entry in sorted(module_docs.items()):
        problems += sample_problems(name, entry.get("return"))
    assert problems == []


@pytest.mark.parametrize("role", ROLES)
def test_role_argument_spec_shows_every_default(role):
    folder = REPO / "roles" / role
    problems = argument_spec_problems(
        role, (folder / "meta" / "argument_specs.yml").read_text(), (folder / "defaults" / "main.yml").read_text()
    )
    assert problems == []


def test_the_checks_find_planted_defects():
    """Each check reports what it exists for: a missing attribute, a sample-less nested key, a hidden default."""
    doc = {
        "attributes": {
            "check_mode": {"support": "full", "description": "x"},
            "diff_mode": {"support": "maybe", "description": "x"},
            "platform": {"support": "full", "description": "x"},
        }
    }
    assert attribute_problems("m", doc) == [
        "m: attributes.diff_mode.support is 'maybe'; use one of ['N/A', 'full', 'none', 'partial']",
        "m: attributes.platform names no platforms (e.g. platforms: posix)",
    ]
    assert attribute_problems("m", {}) == [
        f"m: attributes.{key} is missing; add it to DOCUMENTATION" for key in REQUIRED_ATTRIBUTES
    ]
    returns = {"a": {"sample": 1, "contains": {"b": {"type": "str"}}}, "c": {"type": "int"}}
    assert sample_problems("m", returns) == ["m: RETURN a.b has no sample", "m: RETURN c has no sample"]
    spec = "argument_specs:\n  main:\n    options:\n      r_a: {type: str}\n      r_b: {type: int, default: 2}\n      r_c: {type: str, default: x}\n"
    defaults = "r_a: '{{ other }}'\nr_b: 3\nr_d: 1\n"
    assert argument_spec_problems("r", spec, defaults) == [
        "r: option r_a does not show its default '{{ other }}' (defaults/main.yml)",
        "r: option r_b shows default 2, defaults/main.yml has 3",
        "r: r_d (defaults/main.yml) is no option of entry point main",
        "r: option r_c shows a default that defaults/main.yml does not set",
    ]
    # A typed option computed by an expression: no default in the spec, and a description that says so.
    spec = (
        "argument_specs:\n  main:\n    options:\n      r_e: {type: bool, default: '{{ x }}'}\n"
        "      r_f: {type: int, description: a number}\n      r_g: {type: dict, description: By default the table}\n"
    )
    defaults = "r_e: '{{ x }}'\nr_f: '{{ y }}'\nr_g: '{{ z }}'\n"
    assert argument_spec_problems("r", spec, defaults) == [
        "r: option r_e shows the expression '{{ x }}' as a typed default",
        "r: option r_f is computed but its description does not say how",
    ]
