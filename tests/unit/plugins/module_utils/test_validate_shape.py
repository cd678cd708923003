# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The shape of validate (issue 24): no validate file over 700 lines, no function over 100 lines, none over a
McCabe complexity of 25, so a new rule goes into a function of its own in its area's file (docs/extending.md).

The complexity is counted with the stdlib ``ast`` (no radon needed): 1, plus 1 for each if, loop, except,
conditional expression, comprehension ``for`` and ``if``, match case, and each extra operand of ``and``/``or``;
a nested function counts towards the function around it. That is radon's count or a little above it.
"""

from __future__ import annotations

import ast
import pathlib

MODULE_UTILS = pathlib.Path(__file__).resolve().parents[4] / "plugins" / "module_utils"
MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 100
MAX_COMPLEXITY = 25
_BRANCHES = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.IfExp, ast.ExceptHandler, ast.Assert)


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


def problems(paths):
    out = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines > MAX_FILE_LINES:
            out.append(f"{path.name}: {lines} lines (at most {MAX_FILE_LINES})")
        for name, node in functions(ast.parse(text, str(path))):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                out.append(f"{path.name}: {name} has {length} lines (at most {MAX_FUNCTION_LINES})")
            score = complexity(node)
            if score > MAX_COMPLEXITY:
                out.append(f"{path.name}: {name} has complexity {score} (at most {MAX_COMPLEXITY})")
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
