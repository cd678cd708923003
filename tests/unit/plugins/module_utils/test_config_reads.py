# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Every consumer reads bootstrap.toml by attribute (issue 24, a typed environment).

The loader (plugins/module_utils/config.py and its config_*.py files) turns the file into frozen dataclasses;
nothing else in plugins/ reads the configuration as a dict by a dashed key (``env["mgmt-cluster"]``,
``boot.get("registry-port")``), where a typo would only show at run time. The check walks plugins/ with
``ast``: a subscript or a ``get``/``pop``/``setdefault`` whose key is a dashed key of a bootstrap.toml table
(taken from config_types, so a new key is covered at once) is a finding, unless NOT_CONFIG names it: the same
name used for something else (a chart of the airgap inventory, the kind marker ConfigMap's data). Kubernetes
keys such as ``current-context`` or annotation keys are no bootstrap.toml keys, so they are never findings.

The way back to plain data (config_types.as_toml_dict) is the Ansible side's only: Config.lookup uses it, and
Config.lookup is called by the lookup plugin and by teardown_host for the two tables its documented return
hands to the teardown role.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib

from ansible_collections.krops.platform.plugins.module_utils import config_types

PLUGINS = pathlib.Path(__file__).resolve().parents[4] / "plugins"
LOADER = {"module_utils/config.py", "module_utils/config_schema.py", "module_utils/config_names.py"}
LOADER |= {"module_utils/config_types.py"}
READS = ("get", "pop", "setdefault")

# (file under plugins/, the expression read from, key) -> what it is (a dashed name that is no config read)
NOT_CONFIG = {
    ("module_utils/airgap_package.py", "inv.charts", "cert-manager"): "the airgap inventory's charts, by chart name",
    ("module_utils/airgap_package.py", "inv.charts", "flux-operator"): "the airgap inventory's charts, by chart name",
    ("module_utils/kind.py", "data", "kind-cluster"): "the data of the kind marker ConfigMap kind.py writes",
    ("module_utils/ownership.py", "data", "kind-cluster"): "the data of the kind marker ConfigMap",
}
# Where Config.lookup (plain data with the TOML keys) may be called, and why.
LOOKUP_CALLERS = {
    "lookup/bootstrap_config.py": "the lookup plugin: the roles' and templates' read of the configuration",
    "modules/teardown_host.py": "its documented return value environment.bootstrap and environment.teardown",
}


def config_keys():
    """Every dashed key of a bootstrap.toml table (each dataclass of config_types, nested tables included)."""
    keys, seen, todo = set(), set(), list(config_types.TABLES.values())
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        for field in dataclasses.fields(cls):
            keys.add(config_types.toml_key(field.name))
            if field.metadata["nested"] is not None:
                todo.append(field.metadata["nested"])
    return {k for k in keys if "-" in k}


def _key_of(node):
    """(expression read from, key) of a constant-string subscript or get/pop/setdefault call, else None."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return ast.unparse(node.value), node.slice.value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in READS
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ):
        return ast.unparse(node.func.value), node.args[0].value
    return None


def dashed_reads(root, keys, skip=(), allowed=None):
    """(findings as "file:line: the read", the allowances that matched) under ``root``."""
    allowed = {} if allowed is None else allowed
    findings, used = [], set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in skip:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            found = _key_of(node)
            if found is None or found[1] not in keys:
                continue
            if (rel, *found) in allowed:
                used.add((rel, *found))
                continue
            findings.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return findings, used


def lookup_calls(root):
    """{file: [line, ...]} of every ``<x>.lookup(...)`` call and every reference to as_toml_dict under ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "lookup"
            named = isinstance(node, (ast.Name, ast.Attribute)) and "as_toml_dict" in (
                getattr(node, "id", None),
                getattr(node, "attr", None),
            )
            if call or named:
                out.setdefault(rel, []).append(node.lineno)
    return out


def test_the_keys_come_from_the_loader():
    keys = config_keys()
    assert {"mgmt-cluster", "registry-port", "cert-manager", "s3-bucket-pattern", "eks-cluster-name"} <= keys
    assert {"account-id", "role-arn", "move-fallbacks", "disable-deletion-protection"} <= keys
    assert "current-context" not in keys and all("-" in k for k in keys)


def test_no_consumer_reads_the_configuration_by_a_dashed_key():
    findings, used = dashed_reads(PLUGINS, config_keys(), skip=LOADER, allowed=NOT_CONFIG)
    assert findings == [], "read these by attribute (config_types: the TOML key with '_' for '-')"
    assert set(NOT_CONFIG) == used, "remove the allowances nothing needs any more"


def test_the_check_catches_a_planted_dashed_read(tmp_path):
    (tmp_path / "module_utils").mkdir()
    (tmp_path / "module_utils" / "planted.py").write_text(
        "def f(cfg, env, boot, doc, inv):\n"
        "    a = env['mgmt-cluster']\n"
        "    b = boot.get('registry-port', 5001)\n"
        "    c = cfg.environment('aws').teardown.aws_workloads\n"
        "    d = doc['current-context']\n"  # a kubeconfig key: no bootstrap.toml key
        "    e = inv.charts.get('cert-manager')\n"
        "    return a, b, c, d, e\n"
    )
    allowed = {("module_utils/planted.py", "inv.charts", "cert-manager"): "a chart name"}
    findings, used = dashed_reads(tmp_path, config_keys(), allowed=allowed)
    assert findings == [
        "module_utils/planted.py:2: env['mgmt-cluster']",
        "module_utils/planted.py:3: boot.get('registry-port', 5001)",
    ]
    assert used == set(allowed)
    # without the allowance the chart read is a finding too, and the loader's own files are never walked
    assert len(dashed_reads(tmp_path, config_keys())[0]) == 3
    assert dashed_reads(tmp_path, config_keys(), skip={"module_utils/planted.py"})[0] == []


def test_the_plain_data_path_is_the_ansible_sides_only():
    calls = lookup_calls(PLUGINS)
    assert sorted(set(calls) - LOADER) == sorted(LOOKUP_CALLERS)
    assert sorted(set(calls) & LOADER) == ["module_utils/config.py", "module_utils/config_types.py"]
