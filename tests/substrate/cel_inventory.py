# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Which CEL rules of the vendored CRDs (schemas/crds) the emulator's independent path cannot run, by cause.

    .venv/bin/python -m tests.substrate.cel_inventory [--baseline]

A rule is listed when cel-python cannot parse it or when it calls a function that neither cel-python nor
tests/substrate/cel_k8s_library.py provides (read from the rule's text, so a call on a branch the data never
reaches counts too). A rule on a node that holds a ``format: duration/date/date-time/byte`` string is listed
apart, uncounted: it is refused at run time only if it reads one (cel_independent.FormattedString). ``--baseline`` counts
with cel-python's own functions only: the state before the Kubernetes libraries were added. Transition rules
(``oldSelf`` without ``optionalOldSelf``) are counted apart: they run on update only, with an old object the
emulator never hands.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict

from tests.substrate import cel_independent
from tests.substrate.fixtures import REPO

SCHEMAS = REPO / "schemas" / "crds"
_MACROS = {"has", "all", "exists", "exists_one", "map", "filter", "dyn"}
_FORMATTED_NOTE = "on a node holding format-typed strings (refused at run time only if it reads one)"
_NOT_COUNTED = ("transition", "on a node")


def _rules(node, formatted=False):
    """(rule entry, whether the node's subtree holds a format-typed string) of every x-kubernetes-validations."""
    if isinstance(node, list):
        for item in node:
            yield from _rules(item)
        return
    if not isinstance(node, dict):
        return
    entries = node.get("x-kubernetes-validations")
    if isinstance(entries, list):
        typed = _has_formatted(node)
        for entry in entries:
            if isinstance(entry, dict) and isinstance(entry.get("rule"), str):
                yield entry, typed
    for value in node.values():
        yield from _rules(value)


def _has_formatted(node):
    if isinstance(node, dict):
        if node.get("type") == "string" and node.get("format") in ("duration", "date", "date-time", "byte"):
            return True
        return any(_has_formatted(v) for k, v in node.items() if k != "x-kubernetes-validations")
    if isinstance(node, list):
        return any(_has_formatted(v) for v in node)
    return False


def _baseline_reason(rule):
    """The reason with cel-python's own functions only (before the library)."""
    import celpy

    try:
        celpy.Environment().compile(rule)
    except Exception as exc:  # noqa: BLE001
        return f"cel-python cannot parse it: {str(exc).splitlines()[0]}"
    known = set(celpy.evaluation.base_functions) | _MACROS
    stripped = re.sub(r"'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"", "''", rule)
    missing = sorted(set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(", stripped)) - known)
    return f"no function {', '.join(missing)}" if missing else None


def inventory(baseline=False):
    """{cause: sorted rules} for the rules the independent path cannot run; 'transition (update only)' apart."""
    found = defaultdict(set)
    for path in sorted(SCHEMAS.rglob("*.json")):
        with open(path, encoding="utf-8") as handle:
            schema = json.load(handle)
        for entry, typed in _rules(schema):
            rule = entry["rule"]
            if "oldSelf" in rule and entry.get("optionalOldSelf") is not True:
                found["transition rule (update only: not run by either engine)"].add(rule)
                continue
            if "oldSelf" in rule and baseline:
                found["optionalOldSelf rule (cel-python path skipped oldSelf)"].add(rule)
                continue
            reason = _baseline_reason(rule) if baseline else cel_independent.unsupported_reason(rule)
            if reason is None and typed and not baseline:
                found[_FORMATTED_NOTE].add(rule)
            if reason:
                for cause in reason.removeprefix("no function ").split(", ") if "no function" in reason else [reason]:
                    found[cause].add(rule)
    return {cause: sorted(rules) for cause, rules in sorted(found.items())}


def unrunnable_count(found):
    return len({r for cause, rules in found.items() if not cause.startswith(_NOT_COUNTED) for r in rules})


def main(argv):
    found = inventory(baseline="--baseline" in argv)
    for cause, rules in found.items():
        print(f"{cause}: {len(rules)}")
        for rule in rules:
            print(f"    {rule}")
    print(f"rules the independent path cannot run: {unrunnable_count(found)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
