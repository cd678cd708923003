# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The shape of plugins/ (issue 24): no file over 700 lines, no function over 100 lines, none over a McCabe
complexity of 25 (the one exception root is test_error_tree.py's).

- The validate files meet the limits outright, so a new rule goes into a function of its own in its area's file
  (docs/extending.md).
- Elsewhere, what is over a limit today is listed in DEBT with its size: an entry may shrink, never grow, no new
  one may appear, and an entry back within its limit must be removed (so the table only ever gets shorter).

The complexity is counted with the stdlib ``ast`` (no radon needed): 1, plus 1 for each if, loop, except,
conditional expression, comprehension ``for`` and ``if``, match case, and each extra operand of ``and``/``or``;
a nested function counts towards the function around it. That is radon's count or a little above it.
"""

from __future__ import annotations

import ast
import pathlib

PLUGINS = pathlib.Path(__file__).resolve().parents[4] / "plugins"
MODULE_UTILS = PLUGINS / "module_utils"
MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 100
MAX_COMPLEXITY = 25
_BRANCHES = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.IfExp, ast.ExceptHandler, ast.Assert)

# (file under plugins/, function or "" for the file, measure) -> the size it may not exceed
DEBT = {}
LIMITS = {"lines": MAX_FILE_LINES, "function lines": MAX_FUNCTION_LINES, "complexity": MAX_COMPLEXITY}


def complexity(node):
    """McCabe complexity of a function node (its nested functions included)."""
    count = 1
    for sub in ast.walk(node):
        if isinstance(sub, _BRANCHES):
            count += 1
        elif isinstance(sub, ast.BoolOp):
            count += len(sub.values) - 1
        elif isinstance(sub, ast.comprehension):
            count += 1 + len(sub.ifs)
        elif isinstance(sub, ast.match_case):
            count += 1
    return count


def functions(tree):
    """(qualified name, node) of every function and method, nested ones excluded (they count in their parent)."""
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((prefix + child.name, child))
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(tree, "")
    return found


def measures(path):
    """{(function or "", measure): size} of what in ``path`` is over a limit."""
    text = path.read_text(encoding="utf-8")
    out = {}
    if len(text.splitlines()) > MAX_FILE_LINES:
        out[("", "lines")] = len(text.splitlines())
    for name, node in functions(ast.parse(text, str(path))):
        if node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
            out[(name, "lines")] = node.end_lineno - node.lineno + 1
        if complexity(node) > MAX_COMPLEXITY:
            out[(name, "complexity")] = complexity(node)
    return out


def problems(paths):
    out = []
    for path in paths:
        for (name, measure), size in measures(path).items():
            if not name:
                out.append(f"{path.name}: {size} lines (at most {MAX_FILE_LINES})")
            elif measure == "lines":
                out.append(f"{path.name}: {name} has {size} lines (at most {MAX_FUNCTION_LINES})")
            else:
                out.append(f"{path.name}: {name} has complexity {size} (at most {MAX_COMPLEXITY})")
    return out


def debt_problems(root, debt):
    """What breaks the DEBT rule under ``root``: a new offender, one grown past its entry, an entry paid off."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        for (name, measure), size in measures(path).items():
            found[(path.relative_to(root).as_posix(), name, measure)] = size
    out = []
    for key, size in sorted(found.items()):
        where = f"{key[0]}{' ' + key[1] if key[1] else ''} ({key[2]})"
        if key not in debt:
            out.append(f"new: {where} is {size}; split it (the limits are in this file's docstring)")
        elif size > debt[key]:
            out.append(f"grown: {where} is {size}, was {debt[key]}; it may only shrink")
    out += [
        f"paid: {k[0]}{' ' + k[1] if k[1] else ''} ({k[2]}) is within its limit now; remove it from DEBT"
        for k in sorted(set(debt) - set(found))
    ]
    return out


def validate_files():
    return sorted(MODULE_UTILS.glob("validate*.py"))


def test_validate_files_keep_their_shape():
    paths = validate_files()
    assert {p.name for p in paths} >= {"validate.py", "validate_bootstrap.py", "validate_flux.py"}
    assert problems(paths) == []


def test_the_shape_check_catches_a_long_complex_function(tmp_path):
    body = "".join(f"    if x == {i} or x == -{i}:\n        x += 1\n" for i in range(60))
    (tmp_path / "validate_bad.py").write_text("def ladder(x):\n" + body + "    return x\n" + "\n" * 600)
    assert problems([tmp_path / "validate_bad.py"]) == [
        "validate_bad.py: 722 lines (at most 700)",
        "validate_bad.py: ladder has 122 lines (at most 100)",
        "validate_bad.py: ladder has complexity 121 (at most 25)",
    ]


def test_plugins_debt_only_shrinks():
    assert debt_problems(PLUGINS, DEBT) == []


def test_the_debt_rule_names_new_grown_and_paid_entries(tmp_path):
    body = "".join(f"    if x == {i}:\n        x += 1\n" for i in range(30))
    (tmp_path / "a.py").write_text("def f(x):\n" + body + "    return x\n")
    (tmp_path / "b.py").write_text("def g(x):\n" + body + "    return x\n")
    debt = {("a.py", "f", "complexity"): 20, ("c.py", "", "lines"): 900}
    assert debt_problems(tmp_path, debt) == [
        "grown: a.py f (complexity) is 31, was 20; it may only shrink",
        "new: b.py g (complexity) is 31; split it (the limits are in this file's docstring)",
        "paid: c.py (lines) is within its limit now; remove it from DEBT",
    ]
