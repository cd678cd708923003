"""The Git side of a Git-synced lifecycle test: a clone of this repository as a user's GitOps repository.

Flux in the emulated world syncs from it (lifecycle.emulated_world's git_checkouts), so the test runs the
trees of this checkout, with the site values a user sets first committed on top.
"""

from __future__ import annotations

import subprocess

from tests.substrate.bootstrapped import KS
from tests.substrate.fixtures import REPO


def gitops_checkout(tmp_path, site=None):
    """(clone, commit): this repository's HEAD on branch main in tmp_path/gitops, with ``site`` (path inside
    the repository, placeholder, value) replaced and committed when given. The placeholder must be there."""
    repo = tmp_path / "gitops"
    subprocess.run(["git", "clone", "-q", str(REPO), str(repo)], check=True)
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-B", "main", head], check=True)
    if site is None:
        return repo, head
    path, placeholder, value = site
    target = repo / path
    text = target.read_text()
    assert placeholder in text, f"{path} no longer holds {placeholder!r}"
    target.write_text(text.replace(placeholder, value))
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(git + ["commit", "-qam", "site values"], check=True)
    return repo, subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


def ready_kustomizations(api, namespace="flux-system"):
    """Names of the Kustomizations of namespace whose Ready condition is True."""
    return sorted(
        k["metadata"]["name"]
        for k in api.list(*KS, namespace)
        if any(c["type"] == "Ready" and c["status"] == "True" for c in (k.get("status") or {}).get("conditions", []))
    )
