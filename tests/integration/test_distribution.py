# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Distribution: what the tarball holds, and a clone that needs nothing beside it.

- The tarball built from a working copy full of local debris (an age key at the root and in a
  role, test caches, a virtual environment) holds none of it.
- A key pasted into a file build_ignore cannot name is found by content: the build fails, names
  the file and leaves no tarball.
- The schema-dependent tests pass in a copy of the repository that has no parent folder to lean on.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.substrate.fixtures import REPO

BUILD = REPO / "scripts" / "build_collection.py"
# A well-formed age identity (age-keygen's format); not a key anyone uses.
SECRET = "AGE-SECRET-KEY-1" + "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L" + "QPZRY9X8GF2TVDW0S3JN54KHCE6M"
KEY_FILE = f"# created: 2026-01-01T00:00:00Z\n# public key: age1example\n{SECRET}\n"


def working_files():
    """The checkout's files as git sees them (tracked and new, ignored ones left out)."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [name for name in out.split("\0") if name and (REPO / name).is_file() and not (REPO / name).is_symlink()]


def copy_checkout(target, skip=("mgmt/", "workload/", "schemas/")):
    for name in working_files():
        if name.startswith(skip):
            continue
        dest = target / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest)
    return target


def build(source, output):
    return subprocess.run(
        [sys.executable, str(BUILD), "--source", str(source), "--output", str(output)],
        capture_output=True,
        text=True,
        check=False,
    )


def members(tarball):
    with tarfile.open(tarball) as archive:
        return {m.name for m in archive.getmembers()}


DEBRIS = {
    "age.agekey": KEY_FILE,
    "roles/bootstrap/files/dev.agekey": KEY_FILE,
    ".hypothesis/examples/0a/1b": "x",
    "tests/unit/.hypothesis/constants/aa": "x",
    ".pytest_cache/v/cache/lastfailed": "{}",
    "tests/unit/.pytest_cache/README.md": "x",
    "tests/output/pytest.log": "x",
    ".venv/bin/activate": "x",
    # scripts/sanity_matrix.sh: one virtual environment per ansible-core release
    ".sanity-venvs/2.18/lib/python3.12/site-packages/ansible/config/base.yml": "x",
    ".collections/ansible_collections/krops/README": "x",
    "build/krops-platform-0.0.1.tar.gz": "x",
}


def test_tarball_leaves_out_keys_caches_and_development_files(tmp_path):
    source = copy_checkout(tmp_path / "src")
    for name, text in DEBRIS.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(text)
    proc = build(source, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    tarball = Path(proc.stdout.strip())
    assert tarball == tmp_path / "out" / "krops-platform-0.1.0.tar.gz"
    names = members(tarball)
    for name in DEBRIS:
        top = name.split("/")[0]
        assert not any(n == name or (n.startswith(top + "/") and top.startswith(".")) for n in names), name
        assert name not in names
    leaked = [
        n
        for n in names
        if n.endswith(".agekey")
        or "/.hypothesis" in "/" + n
        or ".pytest_cache" in n
        or n.startswith(("tests/output", ".venv", ".collections", "build/"))
    ]
    assert leaked == []
    # Development-only and GitOps-repository files stay in the checkout.
    for name in (
        "Makefile",
        "pytest.ini",
        "bootstrap.toml",
        "scripts/setup.sh",
        "tests/conftest.py",
        "tests/integration/test_distribution.py",
        "tests/substrate/kube_emulator.py",
        ".ci/run",
    ):
        assert name not in names, name
    assert not any(n.startswith(("mgmt/", "workload/", "molecule/", "inventories/", ".github/")) for n in names)
    # What a user installs is there.
    for name in (
        "meta/runtime.yml",
        "plugins/modules/validate.py",
        "roles/validate/tasks/main.yml",
        "roles/validate/README.md",
        "tests/sanity/ignore-2.21.txt",
        "LICENSE",
        "README.md",
    ):
        assert name in names, name
    # Nothing in it holds a key, by content.
    with tarfile.open(tarball) as archive:
        for member in archive.getmembers():
            if member.isfile():
                assert b"AGE-SECRET-KEY-1" + SECRET[16:].encode() not in archive.extractfile(member).read()


def test_key_pasted_into_any_file_fails_the_build(tmp_path):
    source = copy_checkout(tmp_path / "src")
    (source / "docs" / "notes.md").write_text(f"scratch\n{SECRET}\n")
    (source / "roles" / "validate" / "vars").mkdir(parents=True)
    (source / "roles" / "validate" / "vars" / "main.yml").write_text(f"key: {SECRET}\n")
    proc = build(source, tmp_path / "out")
    assert proc.returncode == 1
    tarball = tmp_path / "out" / "krops-platform-0.1.0.tar.gz"
    assert proc.stderr.splitlines() == [
        "build_collection: docs/notes.md: holds an age secret key (AGE-SECRET-KEY-1...); remove the key from the "
        "file (keep keys outside the repository, e.g. ~/.config/krops/age.agekey)",
        "build_collection: roles/validate/vars/main.yml: holds an age secret key (AGE-SECRET-KEY-1...); remove the "
        "key from the file (keep keys outside the repository, e.g. ~/.config/krops/age.agekey)",
        f"build_collection: refused {tarball} (2 finding(s)); the tarball was deleted",
    ]
    assert not tarball.exists()
    assert SECRET not in proc.stdout + proc.stderr


def test_tarball_check_refuses_forbidden_names(tmp_path):
    """The second line of defence: a tarball built without krops' build_ignore is refused by name."""
    staged = tmp_path / "staged"
    (staged / ".pytest_cache").mkdir(parents=True)
    (staged / ".pytest_cache" / "x").write_text("x")
    (staged / "ops.agekey").write_text("# empty\n")
    tarball = tmp_path / "t.tar.gz"
    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(staged / ".pytest_cache" / "x", arcname=".pytest_cache/x")
        archive.add(staged / "ops.agekey", arcname="ops.agekey")
    proc = subprocess.run(
        [sys.executable, str(BUILD), "--check", str(tarball)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[:2] == [
        "build_collection: .pytest_cache/x: must not be packed (key file, test cache or local environment); "
        "add it to build_ignore in galaxy.yml",
        "build_collection: ops.agekey: must not be packed (key file, test cache or local environment); "
        "add it to build_ignore in galaxy.yml",
    ]
    assert tarball.exists()


def test_default_age_key_lives_outside_the_repository():
    """bootstrap.toml points the age key out of the checkout; git ignores key files anyway."""
    import tomllib

    config = tomllib.loads((REPO / "bootstrap.toml").read_text())
    key = config["bootstrap"]["age-key-file"]
    assert key.startswith("~/"), key
    proc = subprocess.run(
        ["git", "check-ignore", "age.agekey", "roles/x/files/k.agekey", "README.md"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.stdout.splitlines() == ["age.agekey", "roles/x/files/k.agekey"]


def test_galaxy_yml_is_what_the_importer_reads():
    meta = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert {
        "*.agekey",
        ".hypothesis",
        "*/.hypothesis",
        ".pytest_cache",
        "tests/output",
        ".venv",
        ".collections",
    } <= set(meta["build_ignore"])


@pytest.mark.slow
def test_schema_tests_pass_in_a_copy_with_nothing_beside_it(tmp_path):
    """A fresh clone: tmp/x/repo with no parent folder; validate finds its schemas in the copy."""
    root = tmp_path / "x" / "repo"
    copy_checkout(root, skip=())
    (root / ".collections" / "ansible_collections" / "krops").mkdir(parents=True)
    os.symlink("../../..", root / ".collections" / "ansible_collections" / "krops" / "platform")
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["repo"]
    env = {k: v for k, v in os.environ.items() if k not in ("KROPS_SCHEMA_LOCATION", "BOOTSTRAP_CONFIG")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:xdist",
            "-p",
            "no:randomly",
            "tests/integration/test_validate.py",
            "-k",
            "not slow and not playbook",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    tail = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in tail and "failed" not in tail and "error" not in tail, tail
    # validate itself, with no schema location given, uses the copy's schemas/crds.
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from ansible_collections.krops.platform.plugins.module_utils import validate;"
            " sys.exit(validate.main(['--path', '.']))",
        ],
        cwd=root,
        env=dict(env, PYTHONPATH=str(root / ".collections")),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("local-host: ") for line in lines), proc.stdout
    # One line an environment, each with 0 findings; the rest are warnings, which do not fail validate.
    summaries = [line for line in lines if re.fullmatch(r"[a-z-]+: \d+ directories, \d+ objects, \d+ findings", line)]
    environments = sorted(tomllib.loads((root / "bootstrap.toml").read_text())["environments"])
    assert [line.split(":")[0] for line in summaries] == environments, proc.stdout  # every shipped environment
    assert all(line.endswith(" 0 findings") for line in summaries), proc.stdout
    assert all("] WARNING " in line for line in lines if line not in summaries), proc.stdout


def test_every_plugin_and_role_documents_itself():
    """What galaxy-importer runs first: ansible-doc must parse every module's, lookup's and role's documentation."""
    modules = sorted("krops.platform." + p.stem for p in (REPO / "plugins" / "modules").glob("*.py"))
    roles = sorted("krops.platform." + p.name for p in (REPO / "roles").iterdir() if (p / "meta").is_dir())
    lookups = sorted("krops.platform." + p.stem for p in (REPO / "plugins" / "lookup").glob("*.py"))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"), ANSIBLE_NOCOLOR="1")
    for kind, names in (("module", modules), ("role", roles), ("lookup", lookups)):
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-doc"), "-t", kind, "--json"] + names,
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert "[ERROR]" not in proc.stderr and "krops.platform" not in proc.stderr, proc.stderr


def test_declared_collections_are_exactly_the_used_ones():
    """galaxy.yml and requirements.yml declare the collections whose content the collection calls, no more."""
    import re

    used = set()
    for path in (
        list((REPO / "roles").rglob("*.yml"))
        + list((REPO / "playbooks").glob("*.yml"))
        + list((REPO / "plugins").rglob("*.py"))
    ):
        text = path.read_text()
        used |= set(re.findall(r"^\s*(?:- )?([a-z_]+\.[a-z_]+)\.[a-z_0-9]+:\s*$", text, re.M))
        used |= set(re.findall(r"ansible_collections\.([a-z_]+)\.([a-z_]+)\.", text))
    used = {u if isinstance(u, str) else ".".join(u) for u in used} - {"ansible.builtin", "krops.platform"}
    meta = yaml.safe_load((REPO / "galaxy.yml").read_text())
    requirements = yaml.safe_load((REPO / "requirements.yml").read_text())
    assert set(meta["dependencies"]) == used
    assert {c["name"]: c["version"] for c in requirements["collections"]} == meta["dependencies"]


def test_sanity_ignores_and_workflow_cover_every_admitted_ansible_core():
    """requires_ansible admits 2.18 and later: each release up to the one tested has its ignore file and a job."""
    import re
    from ansible.release import __version__ as core

    runtime = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())
    low = re.fullmatch(r">=(\d+)\.(\d+)\.\d+", runtime["requires_ansible"])
    assert low, runtime["requires_ansible"]
    major, first = int(low.group(1)), int(low.group(2))
    last = int(core.split(".")[1])
    releases = ["%d.%d" % (major, minor) for minor in range(first, last + 1)]
    files = sorted(p.name for p in (REPO / "tests" / "sanity").glob("ignore-*.txt"))
    assert files == sorted(f"ignore-{r}.txt" for r in releases)
    texts = {(REPO / "tests" / "sanity" / name).read_text() for name in files}
    assert len(texts) == 1, "the ignore files differ; keep them in step"
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "sanity.yml").read_text())
    assert workflow["jobs"]["sanity"]["strategy"]["matrix"]["ansible-core"] == releases


@pytest.mark.parametrize(
    "argv, env, message",
    [
        (
            ["2.17"],
            {},
            "ERROR: no tests/sanity/ignore-2.17.txt: add one (copy ignore-2.21.txt) for each release requires_ansible admits",
        ),
        (
            ["--test", "pylint"],
            {},
            "ERROR: unknown argument '--test': give releases (e.g. 2.18) and then -- and ansible-test arguments",
        ),
        (
            ["2.18"],
            {"SANITY_PYTHON": "/nonexistent/python3.12"},
            "ERROR: SANITY_PYTHON=/nonexistent/python3.12 does not run",
        ),
    ],
)
def test_sanity_matrix_script_refuses_bad_input_before_installing_anything(tmp_path, argv, env, message):
    """scripts/sanity_matrix.sh names what is wrong and creates no virtual environment."""
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "sanity_matrix.sh"), *argv],
        capture_output=True,
        text=True,
        env=dict(os.environ, SANITY_BUILD=str(tmp_path / "build"), **env),
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == message
    assert not (tmp_path / "build").exists()


def changelog_entries():
    """Every change entry of changelogs/changelog.yaml and of the pending fragments, as (source, text)."""
    entries = []
    releases = yaml.safe_load((REPO / "changelogs" / "changelog.yaml").read_text())["releases"]
    for version, release in releases.items():
        for section, items in (release.get("changes") or {}).items():
            for item in [items] if isinstance(items, str) else items:
                entries.append((f"changelog.yaml {version} {section}", item))
    for fragment in sorted((REPO / "changelogs" / "fragments").glob("*.yml")):
        for section, items in (yaml.safe_load(fragment.read_text()) or {}).items():
            for item in [items] if isinstance(items, str) else items:
                entries.append((f"fragments/{fragment.name} {section}", item))
    return entries


def test_changelog_names_every_role_and_playbook_and_announces_no_module():
    """antsibull-changelog lists new modules itself (from version_added) but not roles or playbooks."""
    import re

    entries = changelog_entries()
    text = "\n".join(item for dummy, item in entries)
    missing = []
    for role in sorted(p.name for p in (REPO / "roles").iterdir() if p.is_dir()):
        if not re.search(rf"(\b{role} role\b|^{role} - new role|krops\.platform\.{role}\b)", text, re.M | re.I):
            missing.append(f"role {role}")
    for playbook in sorted(p.stem for p in (REPO / "playbooks").glob("*.yml")):
        pattern = rf"(playbooks/{re.escape(playbook)}\.yml|``{re.escape(playbook)}(\.yml)?``|krops\.platform\.{re.escape(playbook)}\b)"
        if not re.search(pattern, text):
            missing.append(f"playbook {playbook}")
    assert missing == [], "add a changelog fragment (changelogs/fragments/) for: " + ", ".join(missing)
    modules = {p.stem for p in (REPO / "plugins" / "modules").glob("*.py")}
    announced = [
        f"{source}: {item.split(' - ', 1)[0]}"
        for source, item in entries
        if item.split(" - ", 1)[0] in modules and re.match(r"new module\b", item.split(" - ", 1)[-1])
    ]
    assert announced == [], "antsibull-changelog adds new modules itself; drop these entries"
