#!/usr/bin/env python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Refresh the vendored custom-resource schemas in schemas/crds on a connected machine.

    scripts/refresh_schemas.py --list                      # API groups the trees use, and what is vendored
    scripts/refresh_schemas.py --commit SHA [--catalog URL_OR_DIR]
    scripts/refresh_schemas.py --from-crds CRD.yaml [...]

--commit copies `{group}/*.json` of the datreeio CRDs catalog at that commit (a git clone of
--catalog, default https://github.com/datreeio/CRDs-catalog, or a local checkout), for the API
groups the trees use only, replaces those group folders, copies the catalog's LICENSE and records
the commit in schemas/crds/README.md. --from-crds writes `{group}/{kind}_{version}.json` for every
served version of the CustomResourceDefinitions given (e.g. the pinned providers' CRDs), strict as
the catalog's are: objects with properties get `additionalProperties: false` unless they preserve
unknown fields. Groups the trees do not use are never written; --list shows the difference.
"""

import argparse
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMAS = os.path.join(ROOT, "schemas", "crds")
TREES = ("mgmt", "workload")
CATALOG = "https://github.com/datreeio/CRDs-catalog"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_README_COMMIT = re.compile(r"commit `[0-9a-f]{40}`( \([0-9-]+\))?")


def is_builtin_group(group):
    """The rule validate uses (validate_schema.is_builtin_group): built-in kinds come from kubernetes-validate."""
    return group == "" or "." not in group or group.endswith(".k8s.io")


def _objects(node):
    if isinstance(node, dict):
        if isinstance(node.get("apiVersion"), str) and isinstance(node.get("kind"), str):
            yield node
        for value in node.values():
            yield from _objects(value)
    elif isinstance(node, list):
        for value in node:
            yield from _objects(value)


def used_groups(root=ROOT):
    """API groups of every custom resource in the trees (nested ones too, e.g. ResourceSet templates)."""
    groups = set()
    for tree in TREES:
        for folder, _dirs, files in os.walk(os.path.join(root, tree)):
            for name in files:
                if not name.endswith((".yaml", ".yml")):
                    continue
                with open(os.path.join(folder, name), encoding="utf-8") as handle:
                    try:
                        docs = list(yaml.safe_load_all(handle))
                    except yaml.YAMLError:
                        continue  # templated or encrypted files: validate reports them
                for doc in docs:
                    for obj in _objects(doc):
                        group = obj["apiVersion"].rpartition("/")[0]
                        if not is_builtin_group(group) and "${" not in group:
                            groups.add(group)
    return groups


def vendored_groups(schemas=SCHEMAS):
    return {name for name in os.listdir(schemas) if os.path.isdir(os.path.join(schemas, name))}


def _strict(schema):
    """The catalog's strictness: closed objects, unless Kubernetes keeps unknown fields."""
    if isinstance(schema, dict):
        if (
            schema.get("type") == "object"
            and "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        for value in schema.values():
            _strict(value)
    elif isinstance(schema, list):
        for value in schema:
            _strict(value)
    return schema


def from_crds(paths, groups, schemas=SCHEMAS):
    written = []
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            docs = [d for d in yaml.safe_load_all(handle) if isinstance(d, dict)]
        for crd in docs:
            if crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            if spec["group"] not in groups:
                continue
            for version in spec["versions"]:
                schema = (version.get("schema") or {}).get("openAPIV3Schema")
                if not version.get("served") or not schema:
                    continue
                name = "{}_{}.json".format(spec["names"]["kind"].lower(), version["name"])
                target = os.path.join(schemas, spec["group"], name)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "w", encoding="utf-8") as handle:
                    json.dump(_strict(copy.deepcopy(schema)), handle, indent=2, sort_keys=True)
                    handle.write("\n")
                written.append(os.path.relpath(target, schemas))
    return sorted(written)


def from_catalog(catalog, commit, groups, schemas=SCHEMAS):
    if not _COMMIT.match(commit):
        raise SystemExit(f"refresh_schemas: --commit needs a full 40-character commit id, got {commit!r}")
    with tempfile.TemporaryDirectory() as work:
        if os.path.isdir(catalog):
            source = catalog
        else:
            source = os.path.join(work, "catalog")
            subprocess.run(
                ["git", "clone", "--quiet", "--filter=blob:none", "--no-checkout", catalog, source], check=True
            )
        tree = os.path.join(work, "tree")
        os.makedirs(tree)
        archive = subprocess.run(
            ["git", "-C", source, "archive", "--format=tar", commit, "LICENSE"]
            + sorted(g for g in groups if _exists(source, commit, g)),
            capture_output=True,
            check=False,
        )
        if archive.returncode != 0:
            raise SystemExit(
                "refresh_schemas: cannot read commit {} of {}: {}".format(
                    commit, catalog, archive.stderr.decode(errors="replace").strip()
                )
            )
        subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, check=True)
        missing = sorted(g for g in groups if not os.path.isdir(os.path.join(tree, g)))
        for group in sorted(groups - set(missing)):
            shutil.rmtree(os.path.join(schemas, group), ignore_errors=True)
            shutil.copytree(os.path.join(tree, group), os.path.join(schemas, group))
        shutil.copy(os.path.join(tree, "LICENSE"), os.path.join(schemas, "LICENSE"))
        date = subprocess.run(
            ["git", "-C", source, "log", "-1", "--format=%cs", commit], capture_output=True, text=True, check=False
        ).stdout.strip()
    readme = os.path.join(schemas, "README.md")
    with open(readme, encoding="utf-8") as handle:
        text = handle.read()
    with open(readme, "w", encoding="utf-8") as handle:
        handle.write(_README_COMMIT.sub("commit `{}`{}".format(commit, f" ({date})" if date else ""), text, count=1))
    return missing


def _exists(source, commit, path):
    return (
        subprocess.run(
            ["git", "-C", source, "cat-file", "-e", f"{commit}:{path}"], capture_output=True, check=False
        ).returncode
        == 0
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="print the groups the trees use and the vendored ones")
    action.add_argument("--commit", help="datreeio catalog commit to copy from")
    action.add_argument("--from-crds", nargs="+", metavar="CRD_YAML", help="generate from CRD manifests")
    parser.add_argument("--catalog", default=CATALOG, help="catalog git URL or local checkout")
    parser.add_argument("--root", default=ROOT, help="repository root (the trees and schemas/crds)")
    args = parser.parse_args(argv)
    schemas = os.path.join(args.root, "schemas", "crds")
    groups = used_groups(args.root)
    if args.list:
        vendored = vendored_groups(schemas)
        for group in sorted(groups | vendored):
            state = (
                "ok"
                if group in groups and group in vendored
                else ("MISSING (used, not vendored)" if group in groups else "unused (vendored, no tree uses it)")
            )
            print(f"{group} {state}")
        return 1 if groups - vendored else 0
    if args.commit:
        missing = from_catalog(args.catalog, args.commit, groups, schemas)
        for group in missing:
            sys.stderr.write(f"refresh_schemas: the catalog has no folder {group} at {args.commit}\n")
        return 1 if missing else 0
    for name in from_crds(args.from_crds, groups, schemas):
        print(f"wrote schemas/crds/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
