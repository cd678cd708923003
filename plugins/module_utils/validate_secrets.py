# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""validate's ``secrets`` rules: every Secret of the repository is committed SOPS-encrypted.

The two file rules read the YAML files as committed (``env.raw_docs``) and also run on the files of mgmt/
and workload/ that belong to no environment; the third reads what kustomize renders. Each rule is
registered in validate.REGISTRY; a rule is ``check(env)`` and reports through ``env.add``.
"""

from __future__ import annotations

import os
import re

from ansible_collections.krops.platform.plugins.module_utils import render
from ansible_collections.krops.platform.plugins.module_utils import validate_common as common

RULE = "secrets"
SOPS_SUFFIXES = (".sops.yaml", ".sops.yml")
_ENC = re.compile(r"^ENC\[[A-Za-z0-9_]+,data:.*\]$", re.S)
_SOPS_KEY_GROUPS = ("age", "pgp", "kms", "gcp_kms", "azure_kv", "hc_vault", "key_groups")


def sops_problem(doc):
    """What is wrong with a document of a *.sops.yaml file, or None."""
    meta = doc.get("sops")
    if not isinstance(meta, dict) or not meta.get("mac") or not any(meta.get(k) for k in _SOPS_KEY_GROUPS):
        return "SOPS file without sops metadata (mac and a key group): encrypt it with sops"
    for field in ("data", "stringData"):
        values = doc.get(field)
        if not isinstance(values, dict):
            continue
        for name, value in values.items():
            if value == "":
                continue  # sops leaves an empty value as it is (sops 3.11: nothing to encrypt)
            if not isinstance(value, str) or not _ENC.match(value):
                return f"{field}.{name} is not encrypted (expected ENC[...]): re-encrypt with --encrypted-regex '^(data|stringData)$'"
    return None


def check_sops_files(env):
    """Every document of a *.sops.yaml file has sops metadata and ENC[...] values in data and stringData.

    Upstream fact: sops writes a ``sops`` block (mac and the key groups) and replaces each value the
    --encrypted-regex selects by ENC[<cipher>,data:...]; it leaves an empty value as it is.
    """
    for rel, doc in env.raw_docs:
        if rel.endswith(SOPS_SUFFIXES):
            problem = sops_problem(doc)
            if problem:
                env.add(rel, common.object_id(doc), RULE, problem)


def _committed_plaintext(env):
    """(rel, doc) of every Secret committed outside a *.sops.yaml file."""
    return [(rel, doc) for rel, doc in env.raw_docs if not rel.endswith(SOPS_SUFFIXES) and doc.get("kind") == "Secret"]


def check_committed_plaintext(env):
    """No Secret is committed outside a *.sops.yaml file.

    Enforces krops' contract (docs/secrets.md): kustomize-controller decrypts SOPS files with the age key
    (spec.decryption); a plain Secret in Git is a leaked secret.
    """
    for rel, doc in _committed_plaintext(env):
        env.add(
            rel,
            common.object_id(doc),
            RULE,
            "Secret committed unencrypted: encrypt it with sops "
            "(age, --encrypted-regex '^(data|stringData)$') into a *.sops.yaml file",
        )


def check_rendered_plaintext(env):
    """No kustomization renders a plaintext Secret with data (a secretGenerator, say).

    Enforces krops' contract (docs/secrets.md): a Secret's values are in Git only SOPS-encrypted. A Secret
    that check_committed_plaintext already reports (same name and namespace) is not reported again.
    """
    flagged = {
        ((doc.get("metadata") or {}).get("name"), (doc.get("metadata") or {}).get("namespace") or "")
        for _rel, doc in _committed_plaintext(env)
    }
    for item in env.items:
        if item.kind != "Secret" or item.virtual or isinstance(item.obj.get("sops"), dict):
            continue
        if (item.name, item.namespace) in flagged:
            continue
        if item.obj.get("data") or item.obj.get("stringData"):
            kustomization = env.rel(render.kustomization_file(os.path.join(env.root, item.directory)))
            common.flag(
                env,
                item,
                RULE,
                f"Secret rendered in plaintext by {kustomization} (secretGenerator?): "
                "commit it as a *.sops.yaml file instead",
            )
