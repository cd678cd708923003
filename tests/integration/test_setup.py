# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""scripts/setup.sh on a checkout that is already set up: every run ends cleanly.

`ansible --version | head -1` made about half of the runs end with a BrokenPipeError traceback
after "setup complete" (head closes the pipe while ansible still writes). Ten runs in a row make
that race show; an already set-up checkout skips the installs, so each run takes about a second.
"""

from __future__ import annotations

import subprocess

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
