# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The playbooks: one body, thin shims, runnable from a checkout and by name from an installed collection.

Real ansible-playbook runs (the read-only validate phase, and the checks that run before any role).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml

from tests.substrate.fixtures import REPO, VENV_BIN, playbook_env, task_results

ENVIRONMENTS = ("local-host", "aws", "azure", "gcp", "local-talos")
VALID_TAGS = "validate, bootstrap, pivot, secrets, kubeconfigs, oci-push, teardown"
# ansible-core's AnsibleCollectionRef.VALID_FQCR_RE: a playbook's name must be made of \w characters.
FQCR_NAME = re.compile(r"^\w+$")


def load(name):
    return yaml.safe_load((REPO / "playbooks" / name).read_text())


def run(args, tmp_path, env=None, cwd=REPO):
    argv = [str(VENV_BIN / "ansible-playbook")] + list(args)
    proc = subprocess.run(
        argv, cwd=cwd, env=playbook_env(tmp_path, env), capture_output=True, text=True, timeout=300, check=False
    )
    try:
        output = json.loads(proc.stdout)
    except ValueError:
        output = {"raw": proc.stdout}
    return proc.returncode, output, proc.stderr


def failed_msg(output):
    failed = [r for r in task_results(output).values() if r.get("failed")]
    assert len(failed) == 1, output
    return failed[0]["msg"]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_each_environment_is_a_thin_shim_of_one_body(env):
    name = env.replace("-", "_")
    assert FQCR_NAME.match(name)
    assert load(name + ".yml") == [
        {
            "name": f"Krops {env}",
            "ansible.builtin.import_playbook": "environment.yml",
            "vars": {"krops_playbook_environment": env},
        }
    ]
    if "-" in env:
        # The README's checkout command keeps working.
        assert load(env + ".yml") == [{"name": f"Krops {env}", "ansible.builtin.import_playbook": name + ".yml"}]


def test_every_packed_playbook_has_a_name_ansible_can_resolve():
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    checkout_only = {p.split("/", 1)[1] for p in galaxy["build_ignore"] if p.startswith("playbooks/")}
    assert checkout_only == {"local-host.yml", "local-talos.yml"}
    imported = {"orphan-report.yml"}  # the body of orphan_report.yml, imported by path
    for path in (REPO / "playbooks").glob("*.yml"):
        if path.name in checkout_only | imported:
            continue
        assert FQCR_NAME.match(path.stem), path.name


def test_inventories_hold_only_what_differs():
    for env in ENVIRONMENTS:
        data = yaml.safe_load((REPO / "inventories" / env / "group_vars" / "all.yml").read_text())
        extra = {"azure": {"bootstrap_azure_identity_name"}, "gcp": {"bootstrap_gcp_pool"}}.get(env, set())
        assert set(data) == {"krops_environment"} | extra, env
        assert data["krops_environment"] == env


def test_unknown_tag_fails_with_the_valid_tags(tmp_path):
    rc, output, _err = run(["playbooks/local-host.yml", "--tags", "validat,secrets", "--skip-tags", "zz"], tmp_path)
    assert rc == 2
    assert failed_msg(output) == (f"unknown tag(s) validat, zz (--tags/--skip-tags): the valid tags are {VALID_TAGS}")


def test_another_environments_inventory_is_refused(tmp_path):
    rc, output, _err = run(["-i", "inventories/aws", "playbooks/local-host.yml", "--tags", "validate"], tmp_path)
    assert rc == 2
    assert failed_msg(output) == (
        "the local-host playbook needs the local-host inventory, but the inventory sets krops_environment to aws: "
        "run ansible-playbook -i inventories/local-host playbooks/local-host.yml"
    )


def test_body_without_environment_says_which_playbooks_exist(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n")
    rc, output, _err = run(["-i", str(inventory), "playbooks/environment.yml", "--tags", "validate"], tmp_path)
    assert rc == 2
    assert failed_msg(output) == (
        "no environment: run one of the playbooks krops.platform.local_host, aws, azure, gcp or local_talos "
        "(playbooks/<environment>.yml in a checkout), or pass -e krops_environment=<environment>"
    )


@pytest.mark.slow
def test_checkout_command_validates_the_tree(tmp_path):
    rc, output, stderr = run(
        ["playbooks/local-host.yml", "--tags", "validate"], tmp_path, env={"KROPS_SCHEMA_LOCATION": ""}
    )
    assert rc == 0, (output, stderr)
    results = task_results(output)
    summary = results["krops.platform.validate : Show the validation summary"]["msg"]
    assert (
        len(summary) == 1
        and summary[0].startswith("local-host: 12 directories, ")
        and summary[0].endswith(" 0 findings")
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The built tarball installed into a collections folder of its own; a user's empty ansible.cfg."""
    root = tmp_path_factory.mktemp("installed")
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "build_collection.py"), "--output", str(root / "dist")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    tarball = proc.stdout.strip()
    (root / "ansible.cfg").write_text("[defaults]\n")
    # Away from the checkout (whose ansible.cfg finds krops.platform in .collections already).
    proc = subprocess.run(
        [
            str(VENV_BIN / "ansible-galaxy"),
            "collection",
            "install",
            "--no-deps",
            "--force",
            "-p",
            str(root / "collections"),
            tarball,
        ],
        cwd=root,
        env=playbook_env(root, installed_env(root)),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (root / "collections" / "ansible_collections" / "krops" / "platform" / "MANIFEST.json").is_file()
    (root / "work").mkdir()
    return root


def installed_env(root, **extra):
    env = {
        "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(root / "collections"),
        "KROPS_REPO_ROOT": "",
        "BOOTSTRAP_CONFIG": "",
        "KROPS_SCHEMA_LOCATION": "",
    }
    env.update(extra)
    return env


@pytest.mark.slow
def test_installed_collection_runs_by_name_and_asks_for_the_repository(installed, tmp_path):
    collection = installed / "collections" / "ansible_collections" / "krops" / "platform"
    assert not (collection / "mgmt").exists() and not (collection / "bootstrap.toml").exists()
    rc, output, _err = run(
        ["krops.platform.local_host", "--tags", "validate"],
        tmp_path,
        env=installed_env(installed),
        cwd=installed / "work",
    )
    assert rc == 2
    assert failed_msg(output) == (
        f"the GitOps repository is missing: {collection}/bootstrap.toml does not exist. An installed collection holds no GitOps "
        "trees: pass the checkout of your GitOps repository with -e krops_repo_root=/path/to/checkout (or "
        "KROPS_REPO_ROOT=/path/to/checkout), and BOOTSTRAP_CONFIG when its bootstrap.toml is elsewhere"
    )

    for args, env in ((["-e", f"krops_repo_root={REPO}"], {}), ([], {"KROPS_REPO_ROOT": str(REPO)})):
        rc, output, stderr = run(
            ["krops.platform.local_host", "--tags", "validate"] + args,
            tmp_path,
            env=installed_env(installed, **env),
            cwd=installed / "work",
        )
        assert rc == 0, (output, stderr)
        summary = task_results(output)["krops.platform.validate : Show the validation summary"]["msg"]
        assert summary[0].startswith("local-host: 12 directories, ")


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["local_host", "aws", "azure", "gcp", "local_talos", "validate", "orphan_report", "environment"]
)
def test_every_playbook_resolves_by_name(installed, tmp_path, name):
    rc, output, stderr = run(
        [f"krops.platform.{name}", "--syntax-check"],
        tmp_path,
        env=installed_env(installed, ANSIBLE_STDOUT_CALLBACK="default"),
        cwd=installed / "work",
    )
    assert rc == 0, (output, stderr)
