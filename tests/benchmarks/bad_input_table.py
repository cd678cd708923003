#!/usr/bin/env python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The bad-input table of issue 12: cases tried, clear errors, tracebacks, silently accepted.

Runs the same cases the tests run, and classifies each outcome:
- loader: every case of tests/unit/plugins/module_utils/test_config_hardening.py (mutations of the
  repository's bootstrap.toml: syntax, types, unicode, BOM, NUL, deep nesting, long names, traversal,
  placeholders, ranges); clear = config.ConfigError;
- modules: every case of tests/unit/plugins/modules/test_bad_module_input.py (bad module arguments), run
  through each module's main(); clear = a failure whose message names the bad input;
- hostile options: every case of tests/integration/test_hostile_options.py (issue 22: URLs, path segments,
  symlinks, numbers, duplicates, GitOps-tree writes over all 15 modules); clear = the exact expected message.
A traceback is any other exception, or the module shell's "failed unexpectedly"; silently accepted is a
run that did not fail (or failed for another reason than the bad input). Targets: 0 and 0.

  .venv/bin/python tests/benchmarks/bad_input_table.py [--list]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from unittest import mock

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [REPO, os.path.join(REPO, ".collections")]

from ansible.module_utils import basic  # noqa: E402
from ansible.module_utils.testing import patch_module_args  # noqa: E402

from tests.unit.plugins.module_utils import test_config_hardening as loader_cases  # noqa: E402
from tests.integration import test_hostile_options as hostile_cases  # noqa: E402
from tests.unit.plugins.modules import test_bad_module_input as module_cases  # noqa: E402

OUTCOMES = ("clear", "traceback", "accepted")


class _Exit(Exception):
    pass


def run_module(module, args):
    """The result dict of one run of module.main() (exit_json/fail_json captured, as the tests do)."""
    captured = {}

    def exit_json(_self, **kwargs):
        captured.update(kwargs)
        raise _Exit()

    def fail_json(_self, msg, **kwargs):
        captured.update(kwargs, msg=msg, failed=True)
        raise _Exit()

    with (
        mock.patch.object(basic.AnsibleModule, "exit_json", exit_json),
        mock.patch.object(basic.AnsibleModule, "fail_json", fail_json),
        patch_module_args(dict(args, _ansible_check_mode=False)),
    ):
        try:
            module.main()
        except _Exit:
            pass
    return captured


def loader_rows():
    for case in loader_cases.CASES:
        outcome, message = loader_cases._run(case)
        yield "loader", case[0], outcome, message


def module_rows():
    tree = tempfile.mkdtemp(prefix="krops-bad-input-")
    try:
        for case_id, name, args, expected in module_cases.MODULE_CASES:
            try:
                result = run_module(module_cases.module_of(name), module_cases.with_tree(args, tree))
            except Exception as exc:  # pylint: disable=broad-except  # what the table counts
                yield name, case_id, "traceback", f"{type(exc).__name__}: {exc}"
                continue
            yield name, case_id, module_cases.classify(result, expected), result.get("msg")
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def hostile_rows():
    import pathlib  # pylint: disable=import-outside-toplevel

    for case_id, name, args, expected in hostile_cases.CASES:
        tmp = pathlib.Path(tempfile.mkdtemp(prefix="krops-hostile-"))
        try:
            hostile_cases.world(tmp)
            try:
                result = run_module(hostile_cases.module_of(name), hostile_cases.place(args, tmp))
            except Exception as exc:  # pylint: disable=broad-except  # what the table counts
                yield "hostile:" + name, case_id, "traceback", f"{type(exc).__name__}: {exc}"
                continue
            message = result.get("msg") or ""
            if "exception" in result or "failed unexpectedly" in message:
                outcome = "traceback"
            elif result.get("failed") and message == hostile_cases.place(expected, tmp):
                outcome = "clear"
            else:
                outcome = "accepted"
            yield "hostile:" + name, case_id, outcome, message
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print every case with its outcome")
    options = parser.parse_args()
    rows = list(loader_rows()) + list(module_rows()) + list(hostile_rows())
    if options.list:
        for where, case_id, outcome, message in rows:
            print(f"{outcome:9} {where:22} {case_id:40} {(message or '')[:100]!r}")
        print()
    print("| input | cases tried | clear errors | tracebacks | silently accepted |")
    print("|---|---|---|---|---|")
    for label, part in (
        ("bootstrap.toml (loader)", [r for r in rows if r[0] == "loader"]),
        ("module arguments", [r for r in rows if r[0] != "loader" and not r[0].startswith("hostile:")]),
        ("hostile module options (15 modules)", [r for r in rows if r[0].startswith("hostile:")]),
        ("total", rows),
    ):
        counts = [sum(1 for r in part if r[2] == outcome) for outcome in OUTCOMES]
        print(f"| {label} | {len(part)} | {counts[0]} | {counts[1]} | {counts[2]} |")
    bad = [r for r in rows if r[2] != "clear"]
    for where, case_id, outcome, message in bad:
        print(f"{outcome}: {where} {case_id}: {message}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
