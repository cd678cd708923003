# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The changelog follows antsibull-changelog's model: changelogs/changelog.yaml records published
releases; pending changes are fragments; the version in galaxy.yml is either recorded with no fragment
left over, or not recorded yet."""

from __future__ import annotations

import os
import subprocess

import yaml

from tests.substrate.fixtures import REPO, VENV_BIN


def test_the_galaxy_version_is_not_recorded_while_fragments_are_pending():
    version = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
    releases = yaml.safe_load((REPO / "changelogs" / "changelog.yaml").read_text())["releases"] or {}
    pending = sorted(p.name for p in (REPO / "changelogs" / "fragments").glob("*.yml"))
    if version in releases:
        assert pending == [], (
            f"changelog.yaml records {version} as released, but fragments are pending: {pending}. Fold them in "
            f"(antsibull-changelog release --version {version} --update-existing) or bump galaxy.yml's version"
        )
    else:
        # Not released yet: every recorded release is older, and the changes wait as fragments.
        assert pending, "galaxy.yml's version is unreleased but no fragment describes its changes"


def test_the_fragments_lint_clean():
    proc = subprocess.run(
        [str(VENV_BIN / "antsibull-changelog"), "lint"],
        cwd=REPO,
        env=dict(os.environ, PATH=f"{VENV_BIN}:{os.environ['PATH']}"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
