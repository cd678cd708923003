# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""scripts/setup.sh on a checkout that is already set up: every run ends cleanly.

`ansible --version | head -1` made about half of the runs end with a BrokenPipeError traceback
after "setup complete" (head closes the pipe while ansible still writes). Ten runs in a row make
that race show; an already set-up checkout skips the installs, so each run takes about a second.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.substrate.fixtures import REPO, VENV_BIN


@pytest.mark.skipif(not (REPO / ".venv" / ".krops-requirements").is_file(), reason="needs `make setup` first")
def test_setup_runs_ten_times_with_a_clean_output():
    for attempt in range(10):
        proc = subprocess.run(
            ["bash", str(REPO / "scripts" / "setup.sh")],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, (attempt, proc.stdout, proc.stderr)
        assert proc.stderr == "", (attempt, proc.stderr)
        lines = proc.stdout.splitlines()
        # Already set up: nothing is installed, only the closing line is printed.
        assert len(lines) == 1, (attempt, proc.stdout)
        assert lines[0].startswith(">>> setup complete: Python 3."), lines
        assert ", ansible [core 2." in lines[0], lines
        assert "Traceback" not in proc.stdout
    assert (VENV_BIN / "python").exists()


def test_the_test_environment_imports_kubernetes_as_a_users_does():
    """The SBOM tool stays out of .venv (requirements-sbom.txt): its validation extra installs
    rfc3987-syntax, which jsonschema imports whenever it is there and which builds a grammar on import.
    Every kubernetes.core module process imports jsonschema (through kubernetes-validate), so with it a
    k8s_info task took 5.5 s instead of 2.3 s, and the whole suite about twice as long."""
    proc = subprocess.run(
        [str(VENV_BIN / "python"), "-c", "import sys, kubernetes.dynamic; print(sorted(sys.modules))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    loaded = proc.stdout
    assert "'jsonschema'" in loaded
    assert "'rfc3987_syntax'" not in loaded, "rfc3987-syntax is in .venv: scripts/setup.sh removes it"
    assert (VENV_BIN.parent / "sbom" / "bin" / "cyclonedx-py").exists(), "make setup installs .venv/sbom"


def test_a_fresh_checkout_links_the_shared_environment_and_installs_nothing(tmp_path):
    """A checkout whose .venv links into the shared cache (scripts/setup.sh, KROPS_VENV_CACHE): a new checkout with
    the same requirements and Python links the same environment in about a second, and prints only the closing
    line; its own .collections link is made."""
    venv = REPO / ".venv"
    if not venv.is_symlink():
        pytest.skip(".venv is a folder of this checkout (set up with KROPS_VENV_CACHE=off, or before the cache)")
    shared = venv.resolve()
    assert (shared / ".krops-ready").is_file(), shared
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    for name in ("scripts/setup.sh", "scripts/get-pip-offline.py", "requirements.txt", "requirements-test.txt"):
        (checkout / name).write_bytes((REPO / name).read_bytes())
    (checkout / "requirements-sbom.txt").write_bytes((REPO / "requirements-sbom.txt").read_bytes())
    python = (shared / "pyvenv.cfg").read_text()  # the environment's own Python, so the key is the same
    home = dict(line.split(" = ", 1) for line in python.splitlines() if " = " in line)["home"]
    env = {k: v for k, v in os.environ.items() if k != "KROPS_VENV_CACHE"}
    env.update(KROPS_VENV_CACHE=str(shared.parent), KROPS_PYTHON=str(Path(home) / "python3"))
    proc = subprocess.run(
        ["bash", "scripts/setup.sh"], cwd=checkout, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [line for line in proc.stdout.splitlines() if line.startswith(">>> setup")]
    assert (checkout / ".venv").resolve() == shared
    assert (checkout / ".collections/ansible_collections/krops/platform").resolve() == checkout
