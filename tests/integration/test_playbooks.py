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

from tests.substrate import prewarm
from tests.substrate.fixtures import REPO, SHIPPED_ENVIRONMENTS, VENV_BIN, playbook_env, task_results

ENVIRONMENTS = SHIPPED_ENVIRONMENTS
VALID_TAGS = "validate, bootstrap, pivot, secrets, kubeconfigs, oci-push, teardown"
# ansible-core's AnsibleCollectionRef.VALID_FQCR_RE: a playbook's name must be made of \w characters.
FQCR_NAME = re.compile(r"^\w+$")


def load(name):
    return yaml.safe_load((REPO / "playbooks" / name).read_text())


def run(args, tmp_path, env=None, cwd=REPO):
    argv = [prewarm.playbook_command()] + list(args) + prewarm.playbook_args()
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
    # The hyphenated spellings are checkout shims of the underscored playbooks, never packed.
    assert checkout_only == {"aws-crossplane.yml", "local-host.yml", "local-talos.yml", "orphan-report.yml"}
    for name in checkout_only:
        body = name.replace("-", "_")
        assert [p["ansible.builtin.import_playbook"] for p in load(name)] == [body], name
    for path in (REPO / "playbooks").glob("*.yml"):
        if path.name in checkout_only:
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
        "no environment: run one of the playbooks krops.platform.local_host, aws, aws_crossplane, azure, gcp or local_talos "
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


RESOLVED_BY_NAME = (
    "local_host",
    "aws",
    "aws_crossplane",
    "azure",
    "gcp",
    "local_talos",
    "validate",
    "orphan_report",
    "environment",
)
_SYNTAX_CHECK = []  # the (rc, output, stderr) of the one --syntax-check run of them all


@pytest.mark.slow
@pytest.mark.parametrize("name", RESOLVED_BY_NAME)
def test_every_playbook_resolves_by_name(installed, tmp_path, name):
    if not _SYNTAX_CHECK:  # one ansible-playbook run checks them all (it stops at the first it cannot resolve)
        _SYNTAX_CHECK.append(
            run(
                [f"krops.platform.{n}" for n in RESOLVED_BY_NAME] + ["--syntax-check"],
                tmp_path,
                env=installed_env(installed, ANSIBLE_STDOUT_CALLBACK="default"),
                cwd=installed / "work",
            )
        )
    rc, output, stderr = _SYNTAX_CHECK[0]
    assert rc == 0, (output, stderr)
    playbook = installed / "collections" / "ansible_collections" / "krops" / "platform" / "playbooks" / f"{name}.yml"
    assert f"playbook: {playbook}" in output["raw"].splitlines(), output


# --- every packed playbook, by name, with the repository given either way ------------------------

REPO_GIVEN = {
    "extra var": lambda: (["-e", f"krops_repo_root={REPO}"], {}),
    "KROPS_REPO_ROOT": lambda: ([], {"KROPS_REPO_ROOT": str(REPO)}),
}


def packed_playbooks():
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    ignored = {p.split("/", 1)[1] for p in galaxy["build_ignore"] if p.startswith("playbooks/")}
    return sorted(p.stem for p in (REPO / "playbooks").glob("*.yml") if p.name not in ignored)


def test_the_probes_cover_every_packed_playbook():
    assert sorted(PROBES) == packed_playbooks()


def _checks_only(name):
    # The checks every environment playbook runs first (tagged always); --skip-tags validate stops after them.
    extra = ["-e", "krops_environment=aws"] if name == "environment" else []
    return ["--tags", "validate", "--skip-tags", "validate"] + extra, None


# playbook -> (arguments, what the run must show), beyond the repository.
PROBES = {
    "airgap": lambda ctx: ([], lambda rc, out: rc == 0 and "Explain the tags" in task_results(out)),
    "render_diff": lambda ctx: (
        ["-e", "render_diff_base=HEAD"],
        lambda rc, out: rc == 0 and "markdown" in task_results(out)["Render and compare both revisions"],
    ),
    "podinfo": lambda ctx: (
        [],
        lambda rc, out: (
            rc == 2
            and failed_msg(out).startswith(
                f"{ctx['home']}/.kube/krops-local-workload.yaml does not exist: run the bootstrap"
            )
        ),
    ),
    "validate": lambda ctx: (
        [],
        lambda rc, out: (
            rc == 0
            and [
                line.split(":")[0]
                for line in task_results(out)["krops.platform.validate : Show the validation summary"]["msg"]
                if ": [" not in line  # the environment lines; the warnings (path: object: [group] ...) follow
            ]
            == ["aws", "aws-crossplane", "azure", "gcp", "local-host", "local-talos"]
        ),
    ),
    "orphan_report": lambda ctx: (
        ["-e", f"orphan_report_endpoint_url={ctx['moto']}"],
        lambda rc, out: rc == 0 and (ctx["reports"] / "orphans-aws.json").is_file(),
    ),
    **{
        name: (lambda ctx, name=name: (_checks_only(name)[0], lambda rc, out: rc == 0))
        for name in ("local_host", "aws", "aws_crossplane", "azure", "gcp", "local_talos", "environment")
    },
}


# The repository given by extra var reads the same tree: the two costliest probes check one environment of it
# there (their KROPS_REPO_ROOT runs check all six).
NARROWED = {
    "validate": lambda ctx: (
        ["-e", json.dumps({"validate_all_environments": False, "validate_environment": "local-host"})],
        lambda rc, out: (
            rc == 0
            and task_results(out)["krops.platform.validate : Show the validation summary"]["msg"][0].startswith(
                "local-host: 12 directories, "
            )
        ),
    ),
    "render_diff": lambda ctx: (
        ["-e", "render_diff_base=HEAD", "-e", json.dumps({"render_diff_environments": ["local-host"]})],
        lambda rc, out: (
            rc == 0
            and "markdown" in task_results(out)["Render and compare both revisions"]
            and list(task_results(out)["Render and compare both revisions"]["environments"]) == ["local-host"]
        ),
    ),
}


# playbook -> (rc, failure message) of its run without the repository (run by the first of its two tests)
_WITHOUT_REPOSITORY = {}


@pytest.mark.slow
@pytest.mark.parametrize("given", sorted(REPO_GIVEN))
@pytest.mark.parametrize("name", sorted(PROBES))
def test_every_packed_playbook_runs_by_name_with_the_repository_given(installed, tmp_path, moto, name, given):
    """From the installed collection, away from any checkout: the playbook reads the repository it is given
    (and, without one, says how to give it)."""
    home = tmp_path / "home"
    home.mkdir()
    ctx = {"home": home, "moto": moto, "reports": tmp_path / "reports"}
    base_env = {"HOME": str(home), "ORPHAN_REPORT_DIR": str(ctx["reports"]), "KROPS_PROFILE": ""}
    args, check = (NARROWED if given == "extra var" and name in NARROWED else PROBES)[name](ctx)
    if name not in _WITHOUT_REPOSITORY:  # the same run for either way of giving it: once per playbook
        rc, output, _err = run(
            [f"krops.platform.{name}"] + args,
            tmp_path,
            env=installed_env(installed, **base_env),
            cwd=installed / "work",
        )
        _WITHOUT_REPOSITORY[name] = (rc, failed_msg(output))
    rc, msg = _WITHOUT_REPOSITORY[name]
    assert rc == 2
    assert msg.startswith("the GitOps repository is missing: "), msg
    repo_args, repo_env = REPO_GIVEN[given]()
    rc, output, stderr = run(
        [f"krops.platform.{name}"] + args + repo_args,
        tmp_path,
        env=installed_env(installed, **base_env, **repo_env),
        cwd=installed / "work",
    )
    assert task_results(output)["Check that the GitOps repository is there"].get("failed") is not True, output
    assert check(rc, output), (rc, output, stderr)
