# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""scripts/refresh_schemas.py: only the API groups the trees use, from a catalog commit or from CRDs."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from tests.substrate.fixtures import REPO

SCRIPT = REPO / "scripts" / "refresh_schemas.py"
OLD = "0" * 40


def refresh(root, *args):
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root)] + list(args), capture_output=True, text=True, check=False
    )


def test_every_group_the_trees_use_is_vendored():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--list"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines["kustomize.toolkit.fluxcd.io"] == "ok" and lines["cluster.x-k8s.io"] == "ok"
    assert not any(state.startswith("MISSING") for state in lines.values())


def make_tree(root):
    (root / "mgmt" / "x").mkdir(parents=True)
    (root / "mgmt" / "x" / "objects.yaml").write_text(
        yaml.safe_dump_all(
            [
                {"apiVersion": "a.example.io/v1", "kind": "Foo", "metadata": {"name": "f"}},
                {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}},
                {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "i"}},
                {
                    "apiVersion": "b.example.io/v1",
                    "kind": "Set",
                    "spec": {
                        "resources": [
                            {"apiVersion": "c.example.io/v1beta1", "kind": "Bar", "metadata": {"name": "nested"}}
                        ]
                    },
                },
            ]
        )
    )
    schemas = root / "schemas" / "crds"
    for group, name in (("a.example.io", "stale_v0.json"), ("old.example.io", "keep_v1.json")):
        (schemas / group).mkdir(parents=True)
        (schemas / group / name).write_text("{}")
    (schemas / "README.md").write_text(f"Source: the catalog, commit `{OLD}` (2026-08-20), MIT licence.\n")
    return schemas


def make_catalog(path):
    files = {
        "LICENSE": "MIT catalog licence\n",
        "a.example.io/foo_v1.json": '{"type": "object"}\n',
        "c.example.io/bar_v1beta1.json": '{"type": "object"}\n',
        "z.example.io/zed_v1.json": "{}\n",
    }
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "catalog"], check=True)
    return subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


def tree_files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_catalog_commit_refreshes_only_the_used_groups(tmp_path):
    root = tmp_path / "repo"
    schemas = make_tree(root)
    commit = make_catalog(tmp_path / "catalog")
    proc = refresh(root, "--list")
    assert proc.stdout.splitlines() == [
        "a.example.io ok",
        "b.example.io MISSING (used, not vendored)",
        "c.example.io MISSING (used, not vendored)",
        "old.example.io unused (vendored, no tree uses it)",
    ]
    assert proc.returncode == 1

    proc = refresh(root, "--commit", commit, "--catalog", str(tmp_path / "catalog"))
    assert proc.returncode == 1
    assert proc.stderr == f"refresh_schemas: the catalog has no folder b.example.io at {commit}\n"
    assert tree_files(schemas) == [
        "LICENSE",
        "README.md",
        "a.example.io/foo_v1.json",
        "c.example.io/bar_v1beta1.json",
        "old.example.io/keep_v1.json",
    ]
    date = subprocess.run(
        ["git", "-C", str(tmp_path / "catalog"), "log", "-1", "--format=%cs"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert (schemas / "README.md").read_text() == f"Source: the catalog, commit `{commit}` ({date}), MIT licence.\n"
    assert (schemas / "LICENSE").read_text() == "MIT catalog licence\n"

    proc = refresh(root, "--commit", "main", "--catalog", str(tmp_path / "catalog"))
    assert proc.returncode == 1
    assert "refresh_schemas: --commit needs a full 40-character commit id, got 'main'" in proc.stderr


def test_schemas_generated_from_crds_are_strict_and_limited_to_used_groups(tmp_path):
    root = tmp_path / "repo"
    schemas = make_tree(root)
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "spec": {
            "group": "c.example.io",
            "names": {"kind": "Bar"},
            "versions": [
                {
                    "name": "v1beta1",
                    "served": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                                "status": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                    "properties": {"x": {"type": "string"}},
                                },
                            },
                        }
                    },
                },
                {"name": "v1alpha1", "served": False, "schema": {"openAPIV3Schema": {"type": "object"}}},
            ],
        },
    }
    unused = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "spec": {
            "group": "z.example.io",
            "names": {"kind": "Zed"},
            "versions": [{"name": "v1", "served": True, "schema": {"openAPIV3Schema": {"type": "object"}}}],
        },
    }
    (tmp_path / "crds.yaml").write_text(yaml.safe_dump_all([crd, unused]))
    proc = refresh(root, "--from-crds", str(tmp_path / "crds.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "wrote schemas/crds/c.example.io/bar_v1beta1.json\n"
    schema = json.loads((schemas / "c.example.io" / "bar_v1beta1.json").read_text())
    assert schema["additionalProperties"] is False
    assert schema["properties"]["spec"]["additionalProperties"] is False
    assert "additionalProperties" not in schema["properties"]["status"]
    assert not (schemas / "z.example.io").exists()
