"""Copies of the GitOps tree for the validate, tree, CEL and air-gap tests.

Each test edits its own copy, so a planted defect never reaches the repository or another test.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.substrate.fixtures import REPO

# The vendored schemas (schemas/crds), or KROPS_SCHEMA_LOCATION when a run points elsewhere.
SCHEMAS = Path(os.environ.get("KROPS_SCHEMA_LOCATION") or REPO / "schemas" / "crds")
if not SCHEMAS.is_absolute():
    SCHEMAS = (REPO / SCHEMAS).resolve()
# What validate reads beside the trees.
REPO_FILES = ("bootstrap.toml", ".yamllint")


def copy_repo(tmp_path, parts, files=REPO_FILES, ignore=None):
    """Copy the folders `parts` and the `files` of the repository to tmp_path/repo; return that root."""
    root = tmp_path / "repo"
    for part in parts:
        shutil.copytree(REPO / part, root / part, ignore=ignore)
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, root / name)
    return root


def edit(root, rel, old, new, count=1):
    """Replace `old` by `new` in root/rel (`count` times, -1 for all); fail when `old` is not there."""
    path = root / rel
    text = path.read_text()
    assert text.count(old) >= max(count, 1), f"{rel} does not contain {old!r}"
    path.write_text(text.replace(old, new, count))


def findings(result):
    """validate's findings as (file, object, rule, message) tuples."""
    return [(f["file"], f["object"], f["rule"], f["message"]) for f in result["findings"]]


# A defect both validate tables plant (test_validate.PLANTED, test_validate_rules.RULES): a secretGenerator in a
# kustomization renders a plaintext Secret. (file, text, replacement, the one finding validate reports)
SECRET_GENERATOR_PLAINTEXT = (
    "mgmt/local-host/cni/kustomization.yaml",
    "configMapGenerator:",
    "secretGenerator:\n  - name: token\n    namespace: default\n    literals: [token=hunter2]\n"
    "    options:\n      disableNameSuffixHash: true\nconfigMapGenerator:",
    (
        "mgmt/local-host/cni/kustomization.yaml",
        "Secret/default/token",
        "secrets",
        "Secret rendered in plaintext by mgmt/local-host/cni/kustomization.yaml (secretGenerator?): commit it "
        "as a *.sops.yaml file instead",
    ),
)
