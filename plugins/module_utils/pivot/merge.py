# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Stepped runs of the pivot (the action plugin): the result a single run would give, from its steps."""

from __future__ import annotations


def _merge_states(earlier, later, fields, quiet):
    """later's list, with an item's state taken from earlier when later only found it ``quiet`` (done by earlier)."""
    before = {tuple(item.get(f) for f in fields): item.get("state") for item in earlier or []}
    merged = []
    for item in later or []:
        state = before.get(tuple(item.get(f) for f in fields))
        if item.get("state") == quiet and state not in (None, quiet):
            item = dict(item, state=state)
        merged.append(item)
    return merged


def merge_steps(earlier, later):
    """The result a single run would give, from an earlier (pending) step and the later step that re-ran the pivot.

    ``changed`` is true when any step changed something; charts and applied objects keep the state the
    step that wrote them reported (the re-run finds them unchanged); progress lines the re-run repeats
    are kept once.
    """
    if not earlier:
        return dict(later)
    merged = dict(later)
    merged["changed"] = bool(earlier.get("changed") or later.get("changed"))
    for name, fields in (("charts", ("namespace", "release")), ("applied", ("kind", "namespace", "name", "file"))):
        if name in later:
            merged[name] = _merge_states(earlier.get(name), later[name], fields, "unchanged")
    if "progress" not in later:
        return merged
    lines = list(earlier.get("progress") or [])
    cursor = 0
    for line in later.get("progress") or []:
        if line in lines[cursor:]:
            cursor = lines.index(line, cursor) + 1
        else:
            lines.append(line)
            cursor = len(lines)
    merged["progress"] = lines
    return merged
