# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""SOPS decryption of the emulated kustomize-controller (flux_world.FluxController), with the real sops CLI.

What it plays (kustomize-controller, internal/decryptor/decryptor.go; the constants are the same in
fluxcd's cue-flux-controller port, found with the search tool):

- ``spec.decryption.provider`` must be ``sops``; ``spec.decryption.secretRef.name`` is a Secret in the
  Kustomization's namespace. Every data key whose extension is ``.agekey`` (DecryptionAgeExt) is an
  age identity (several are joined, one per line, as sops reads SOPS_AGE_KEY).
- After the build, each ``v1`` Secret carrying a top-level ``sops`` key (IsEncryptedSecret) is
  decrypted as JSON (DecryptResource: res.MarshalJSON, so keys come sorted) without the MAC check
  (checkSopsMac is off by default: "arbitrary data gets injected into most resources"); anything else
  passes untouched. A wrong key or a missing Secret is a failed build with sops's own error.

The decryption itself is ``sops --decrypt --ignore-mac`` (.venv/bin/sops, the version the trees were
encrypted with), fed the identities through SOPS_AGE_KEY, so the key handling and the error texts are sops's.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile


from tests.substrate.fixtures import VENV_BIN
from tests.substrate.kube_emulator import ApiError

AGE_EXT = ".agekey"  # kustomize-controller DecryptionAgeExt
PROVIDER = "sops"  # kustomize-controller DecryptionProviderSOPS


def _sops():
    path = VENV_BIN / "sops"
    return str(path) if path.exists() else (shutil.which("sops") or "sops")


def is_encrypted_secret(obj):
    return obj.get("apiVersion") == "v1" and obj.get("kind") == "Secret" and "sops" in obj


def decrypt_objects(api, kustomization, objects, failure):
    """The objects of a build with their SOPS Secrets decrypted; ``failure(reason, message)`` builds the error."""
    decryption = (kustomization.get("spec") or {}).get("decryption")
    if not decryption:
        return objects
    if decryption.get("provider") != PROVIDER:
        raise failure("BuildFailed", "unsupported decryption provider {!r}".format(decryption.get("provider")))
    encrypted = [o for o in objects if is_encrypted_secret(o)]
    if not encrypted:
        return objects
    ns = kustomization["metadata"]["namespace"]
    identities = []
    ref = decryption.get("secretRef")
    if ref:
        try:
            secret = api.get("v1", "Secret", ref["name"], ns)
        except ApiError as exc:
            raise failure("BuildFailed", f"decryption secret error: {exc.message}")
        for key, value in sorted((secret.get("data") or {}).items()):
            if os.path.splitext(key)[1] == AGE_EXT:
                identities.append(base64.b64decode(value).decode("utf-8").strip())
    home = tempfile.mkdtemp(prefix="krops-sops-")  # no ~/.ssh or key file of the machine is found
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "SOPS_AGE_KEY": "\n".join(identities)}
    try:
        return [_decrypt(obj, ns, env, failure) if is_encrypted_secret(obj) else obj for obj in objects]
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _decrypt(obj, ns, env, failure):
    meta = obj.get("metadata") or {}
    name = "{}/{}".format(meta.get("namespace", ns), meta.get("name"))
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(obj, handle, sort_keys=True)
        path = handle.name
    try:
        proc = subprocess.run(
            [_sops(), "--decrypt", "--ignore-mac", "--input-type", "json", "--output-type", "json", path],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=60,
        )
    finally:
        os.unlink(path)
    if proc.returncode != 0:
        raise failure(
            "BuildFailed",
            "decryption failed for '{}': failed to decrypt and format '{}' Secret data: {}".format(
                meta.get("name"), name, proc.stderr.strip()
            ),
        )
    return json.loads(proc.stdout)
