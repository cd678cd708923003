# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""One error tree (issue 24): an AST walk of plugins/ that fails when a class name is defined twice, when an
exception class does not derive (through its bases, followed by name) from errors.KropsError through exactly one
of the area classes errors.py defines (ConfigError, KubeError, ...), or when a krops exception other than that
root takes Exception itself as a base. A second walk holds the modules to the one shell: no module catches an
error to raise another, and only module_utils/shell.py calls fail_json.

Classes defined in an ``except ImportError`` block stand in for a library's exceptions when it is missing
(kubernetes, ansible-core) and are not krops errors; the names Ansible's plugin loader requires of every
plugin file (ActionModule, ModuleDocFragment, ...) may repeat, one per file.
"""

from __future__ import annotations

import ast
import builtins
import pathlib

PLUGINS = pathlib.Path(__file__).resolve().parents[4] / "plugins"
ROOT = ("KropsError", "module_utils/errors.py")
# Ansible finds a plugin by these class names: each plugin file defines its own.
LOADER_NAMES = {"ActionModule", "CallbackModule", "FilterModule", "InventoryModule", "LookupModule"}
LOADER_NAMES |= {"ModuleDocFragment", "TestModule"}
BUILTIN_EXCEPTIONS = {
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
}


def _stand_ins(tree):
    """ClassDef nodes inside an ``except ImportError`` handler."""
    found = set()
    for handler in ast.walk(tree):
        if isinstance(handler, ast.ExceptHandler):
            found.update(id(node) for node in ast.walk(handler) if isinstance(node, ast.ClassDef))
    return found


def classes(sources):
    """[(name, where, bases (last name of each), stand-in)] of every class in ``sources`` {where: text}."""
    out = []
    for where, text in sources.items():
        tree = ast.parse(text, where)
        stand_ins = _stand_ins(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases]
                out.append((node.name, where, bases, id(node) in stand_ins))
    return out


def problems(sources):
    """What breaks the one error tree in ``sources`` {path relative to plugins/: text}, one line each."""
    found = classes(sources)
    out = []
    seen = {}
    for name, where, _bases, stand_in in found:
        if name in LOADER_NAMES:
            continue
        if name in seen:
            out.append(f"class {name} is defined twice: {seen[name]} and {where}")
        seen.setdefault(name, where)
    bases_of = {name: bases for name, _where, bases, stand_in in found if not stand_in}

    def ancestors(name, trail=()):
        """Every name ``name`` derives from (through the krops classes, by name), builtins included."""
        out_names = set()
        for base in bases_of.get(name, ()):
            if base not in trail:
                out_names.add(base)
                out_names |= ancestors(base, (*trail, name))
        return out_names

    areas = {name for name, where, _bases, _stand_in in found if where == ROOT[1] and name != ROOT[0]}
    for name, where, bases, stand_in in found:
        if stand_in:
            continue
        lineage = ancestors(name) | {name}
        if not lineage & BUILTIN_EXCEPTIONS:
            continue  # not an exception
        if (name, where) == ROOT:
            continue
        if ROOT[0] not in lineage:
            out.append(f"{where}: exception {name} does not derive from errors.{ROOT[0]}")
        elif {"Exception", "BaseException"} & set(bases):
            out.append(f"{where}: exception {name} takes Exception as a base; only errors.{ROOT[0]} does")
        elif where == ROOT[1] and bases != [ROOT[0]]:
            out.append(f"{where}: area {name} derives from {', '.join(bases)}; an area class derives from {ROOT[0]}")
        elif where != ROOT[1] and len(lineage & areas) != 1:
            found_areas = ", ".join(sorted(lineage & areas)) or "none"
            out.append(f"{where}: exception {name} derives from areas {found_areas}; it takes one area of errors.py")
    if not any((name, where) == ROOT for name, where, _bases, _stand_in in found):
        out.append(f"no {ROOT[0]} in {ROOT[1]}")
    return out


def shell_problems(sources):
    """Modules that catch an error to raise another (a handler with a raise in it) or call fail_json, and
    module_utils files other than the shell that call fail_json: what the one module shell alone does."""
    out = []
    for where, text in sources.items():
        tree = ast.parse(text, where)
        module = where.startswith("modules/")
        for node in ast.walk(tree):
            if module and isinstance(node, ast.ExceptHandler) and any(isinstance(n, ast.Raise) for n in ast.walk(node)):
                out.append(f"{where}:{node.lineno}: a module catches an error and raises another; let it through")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "fail_json"
                and where != "module_utils/shell.py"
                and where.startswith(("modules/", "module_utils/"))
            ):
                out.append(f"{where}:{node.lineno}: fail_json outside the module shell (module_utils/shell.py)")
    return out


def _plugins():
    return {str(path.relative_to(PLUGINS)): path.read_text(encoding="utf-8") for path in sorted(PLUGINS.rglob("*.py"))}


def test_plugins_have_one_error_root_and_no_class_defined_twice():
    assert problems(_plugins()) == []


def test_modules_leave_errors_to_the_one_shell():
    assert shell_problems(_plugins()) == []


def test_the_shell_walk_sees_a_translation_and_a_fail_json():
    sources = {
        "modules/a.py": "try:\n    run()\nexcept OSError as exc:\n    raise errors.ConfigError(str(exc))\n",
        "modules/b.py": "try:\n    run()\nexcept KeyError:\n    value = None\nmodule.fail_json(msg='x')\n",
        "module_utils/c.py": "module.fail_json(msg='x')\n",
        "module_utils/shell.py": "module.fail_json(msg='x')\n",
        "filter/d.py": "try:\n    run()\nexcept errors.KropsError as exc:\n    raise AnsibleFilterError(exc)\n",
    }
    assert shell_problems(sources) == [
        "modules/a.py:3: a module catches an error and raises another; let it through",
        "modules/b.py:5: fail_json outside the module shell (module_utils/shell.py)",
        "module_utils/c.py:1: fail_json outside the module shell (module_utils/shell.py)",
    ]


def test_the_walk_sees_every_breach():
    sources = {
        ROOT[1]: (
            "class KropsError(Exception):\n    pass\nclass CloudError(KropsError):\n    pass\n"
            "class ToolError(KropsError):\n    pass\nclass Nested(CloudError):\n    pass\n"  # an area under an area
        ),
        "module_utils/a.py": (
            "class Finding:\n    pass\n"
            "class SecondRoot(Exception):\n    pass\n"  # a second root
            "class Late(errors.CloudError, ValueError):\n    pass\n"  # fine: a krops error and a ValueError
            "class Stray(ValueError):\n    pass\n"  # an exception outside the tree
            "class Twice(KropsError, Exception):\n    pass\n"  # Exception itself as a base
            "try:\n    import lib\nexcept ImportError:\n    class ApiException(Exception):\n        pass\n"
            "class Bare(KropsError):\n    pass\n"  # no area
            "class Both(errors.CloudError, ToolError):\n    pass\n"  # two areas
        ),
        "module_utils/b.py": "class Finding:\n    pass\n",  # a name defined twice
        "action/x.py": "class ActionModule(Base):\n    pass\n",
        "action/y.py": "class ActionModule(Base):\n    pass\n",
    }
    assert problems(sources) == [
        "class Finding is defined twice: module_utils/a.py and module_utils/b.py",
        "module_utils/errors.py: area Nested derives from CloudError; an area class derives from KropsError",
        "module_utils/a.py: exception SecondRoot does not derive from errors.KropsError",
        "module_utils/a.py: exception Stray does not derive from errors.KropsError",
        "module_utils/a.py: exception Twice takes Exception as a base; only errors.KropsError does",
        "module_utils/a.py: exception Bare derives from areas none; it takes one area of errors.py",
        "module_utils/a.py: exception Both derives from areas CloudError, ToolError; it takes one area of errors.py",
    ]
    assert problems({"module_utils/a.py": "class A:\n    pass\n"}) == ["no KropsError in module_utils/errors.py"]


def test_the_tree_holds_when_imported():
    from ansible_collections.krops.platform.plugins.module_utils import (
        aws,
        aws_targets,
        cloud_teardown,
        config,
        errors,
        flux,
        pivot,
        teardown,
        validate_schema,
    )

    for cls in (
        aws.AwsError,
        aws.UnsupportedOperation,
        aws_targets.SweepError,
        config.ConfigKeyError,
        validate_schema.SchemaError,
        validate_schema.SchemaMissing,
        validate_schema.SchemaUnreachable,
    ):
        assert issubclass(cls, errors.KropsError), cls
    # Control flow is not an error: a wait cut by the step budget is a value the pivot returns (issue 24).
    assert not issubclass(pivot.Pending, BaseException)
    # The areas' errors are the errors module's own classes, not copies of the same name.
    assert (
        cloud_teardown.CloudError,
        flux.FluxError,
        pivot.PivotError,
        teardown.TeardownError,
        config.ConfigError,
    ) == (
        errors.CloudError,
        errors.FluxError,
        errors.PivotError,
        errors.TeardownError,
        errors.ConfigError,
    )
