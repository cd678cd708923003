# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""--tags secrets: the operator's age key, and each Secret of the environment written from environment
variables and encrypted with the real sops (community.sops), in a copy of the tree; never a value in the output.

Also: every committed *.sops.yaml in mgmt/ is encrypted (sops metadata, no plaintext value) and its
path has a creation rule in .sops.yaml that lists the recipients it is encrypted to.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import stat
import subprocess

import pytest
import yaml

from tests.substrate import prewarm
from tests.substrate.fixtures import REPO, VENV_BIN, playbook_env, task_results

SOPS_FILES = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "mgmt").rglob("*.sops.yaml"))
AWS_VARIABLES = (
    "AWS_B64ENCODED_CREDENTIALS",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "GITHUB_TOKEN",
    "KONFLATE_TOKEN",
    "KONFLATE_WRITE_TOKEN",
)
ENCRYPTED = re.compile(r"^ENC\[AES256_GCM,data:.*,type:\w+\]$")
pytestmark = pytest.mark.skipif(shutil.which("age-keygen") is None, reason="age-keygen is not installed")


def sops_rules():
    return yaml.safe_load((REPO / ".sops.yaml").read_text())["creation_rules"]


def decrypt(path, key):
    proc = subprocess.run(
        [str(VENV_BIN / "sops"), "--decrypt", str(path)],
        env={"SOPS_AGE_KEY_FILE": str(key), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)


@pytest.fixture
def tree(tmp_path):
    """A copy of what --tags secrets reads and writes: bootstrap.toml, .sops.yaml, the aws *.sops.yaml."""
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("bootstrap.toml", ".sops.yaml"):
        shutil.copy(REPO / name, root / name)
    for rel in SOPS_FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, root / rel)
    return root


def secrets_run(tmp_path, root, key, env, *extra):
    argv = [
        str(VENV_BIN / "ansible-playbook"),
        "-i",
        "inventories/aws",
        "playbooks/aws.yml",
        "--tags",
        "secrets",
        "-e",
        f"krops_repo_root={root}",
        "-e",
        f"krops_age_key_file={key}",
        "-e",
        "krops_secrets_in_cluster=false",
        *extra,
        *prewarm.playbook_args(),
    ]
    base = {name: "" for name in AWS_VARIABLES}
    base.update(env)
    proc = subprocess.run(
        argv, cwd=REPO, env=playbook_env(tmp_path, base), capture_output=True, text=True, timeout=300, check=False
    )
    return proc.returncode, json.loads(proc.stdout), proc.stdout + proc.stderr


def recap(output):
    return output["stats"]["localhost"]


def failure(output):
    """The message of the one failed task (of its first failed item, for a loop)."""
    failed = [r for r in task_results(output).values() if r.get("failed")]
    assert len(failed) == 1, failed
    items = [r for r in failed[0].get("results", []) if r.get("failed") or r.get("evaluated_to") is False]
    return items[0]["msg"] if items else failed[0]["msg"]


def test_secrets_tag_generates_the_key_then_round_trips_every_value_unprinted(tmp_path, tree):
    key = tmp_path / "home" / ".config" / "krops" / "age.agekey"
    values = {name: f"{name.lower()}-{secrets.token_hex(12)}" for name in AWS_VARIABLES}
    values["GITHUB_TOKEN"] += "-{{ 7 * 7 }}-${KONFLATE_TOKEN}"  # written as is: never templated nor substituted

    # First run: no key yet. It is generated (0600), its public key printed, and since .sops.yaml does not
    # list it, nothing is written.
    before = {rel: (tree / rel).read_bytes() for rel in SOPS_FILES}
    rc, output, text = secrets_run(tmp_path, tree, key, values)
    assert rc == 2
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    public = subprocess.run(["age-keygen", "-y", str(key)], capture_output=True, text=True, check=True).stdout.strip()
    shown = task_results(output)["krops.platform.secrets : Show the public key"]["msg"]
    assert shown == f"age public key of {key}: {public} (the recipient to list in the aws creation rule of .sops.yaml)"
    assert "AGE-SECRET-KEY" not in text
    assert failure(output) == (
        f"your age key {key} (public key {public}) is not a recipient of the creation rule of {tree}/.sops.yaml for "
        "mgmt/aws/capa-system/aws-credentials.sops.yaml, so Flux could not decrypt it with that key: put the public "
        "key in the age list of that rule and run --tags secrets again"
    )
    assert {rel: (tree / rel).read_bytes() for rel in SOPS_FILES} == before

    # The operator puts the public key in .sops.yaml (the aws rule only).
    config = yaml.safe_load((tree / ".sops.yaml").read_text())
    config["creation_rules"][0]["age"] = public
    (tree / ".sops.yaml").write_text(yaml.safe_dump(config))

    # Check mode: plans four rewrites, writes nothing.
    rc, output, text = secrets_run(tmp_path, tree, key, values, "--check")
    assert rc == 0, text[-3000:]
    assert task_results(output)["krops.platform.secrets : Show what was written"]["msg"].startswith(
        "aws: 4 of 4 Secret file(s) would be rewritten ("
    )
    assert {rel: (tree / rel).read_bytes() for rel in SOPS_FILES} == before

    rc, output, text = secrets_run(tmp_path, tree, key, values)
    assert rc == 0, text[-3000:]
    for value in values.values():
        assert value not in text
    assert recap(output)["changed"] > 0

    pat = decrypt(tree / "mgmt/aws/flux-apps/workload-flux/flux-github-pat.sops.yaml", key)
    assert pat == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "flux-github-pat", "namespace": "flux-system"},
        "type": "Opaque",
        "stringData": {"username": "git", "password": values["GITHUB_TOKEN"]},
    }
    ack = decrypt(tree / "mgmt/aws/ack-controllers/aws-credentials.sops.yaml", key)
    assert ack["stringData"]["credentials"] == (
        "[default]\n"
        f"aws_access_key_id = {values['AWS_ACCESS_KEY_ID']}\n"
        f"aws_secret_access_key = {values['AWS_SECRET_ACCESS_KEY']}\n"
    )
    capa = decrypt(tree / "mgmt/aws/capa-system/aws-credentials.sops.yaml", key)
    assert capa["stringData"] == {"AWS_B64ENCODED_CREDENTIALS": values["AWS_B64ENCODED_CREDENTIALS"]}
    konflate = decrypt(tree / "mgmt/aws/konflate/konflate-token.sops.yaml", key)
    assert konflate["stringData"] == {k: values[k] for k in ("KONFLATE_TOKEN", "KONFLATE_WRITE_TOKEN")}
    for rel in SOPS_FILES:
        if rel.startswith("mgmt/aws/"):
            written = (tree / rel).read_text()
            assert [r["recipient"] for r in yaml.safe_load(written)["sops"]["age"]] == [public]
            for value in values.values():
                assert value not in written
        else:
            assert (tree / rel).read_bytes() == before[rel]  # other environments untouched

    # Same inputs again: nothing is rewritten.
    after = {rel: (tree / rel).read_bytes() for rel in SOPS_FILES}
    rc, output, text = secrets_run(tmp_path, tree, key, values)
    assert rc == 0, text[-3000:]
    assert recap(output)["changed"] == 0
    assert {rel: (tree / rel).read_bytes() for rel in SOPS_FILES} == after

    # One value changes: only its file is rewritten.
    values["KONFLATE_WRITE_TOKEN"] = "rotated-" + secrets.token_hex(12)
    rc, output, text = secrets_run(tmp_path, tree, key, values)
    assert rc == 0, text[-3000:]
    assert task_results(output)["krops.platform.secrets : Show what was written"]["msg"] == (
        "aws: 1 of 4 Secret file(s) rewritten (mgmt/aws/konflate/konflate-token.sops.yaml)"
    )
    assert values["KONFLATE_WRITE_TOKEN"] not in text
    assert (
        decrypt(tree / "mgmt/aws/konflate/konflate-token.sops.yaml", key)["stringData"]["KONFLATE_WRITE_TOKEN"]
        == (values["KONFLATE_WRITE_TOKEN"])
    )


def test_a_missing_variable_fails_naming_it_and_writes_nothing(tmp_path, tree):
    key = tmp_path / "age.agekey"
    subprocess.run(["age-keygen", "-o", str(key)], capture_output=True, check=True)
    public = subprocess.run(["age-keygen", "-y", str(key)], capture_output=True, text=True, check=True).stdout.strip()
    config = yaml.safe_load((tree / ".sops.yaml").read_text())
    config["creation_rules"][0]["age"] = public
    (tree / ".sops.yaml").write_text(yaml.safe_dump(config))
    before = {rel: (tree / rel).read_bytes() for rel in SOPS_FILES}
    values = {
        name: "v-" + secrets.token_hex(8) for name in AWS_VARIABLES if name not in ("GITHUB_TOKEN", "KONFLATE_TOKEN")
    }
    rc, output, text = secrets_run(tmp_path, tree, key, values)
    assert rc == 2
    assert failure(output) == (
        "missing environment variable(s) GITHUB_TOKEN, KONFLATE_TOKEN: the aws Secrets are written from them; "
        "export them and run --tags secrets again (docs/secrets.md)"
    )
    assert {rel: (tree / rel).read_bytes() for rel in SOPS_FILES} == before
    for value in values.values():
        assert value not in text


def first_rule(rel):
    for rule in sops_rules():
        if "path_regex" not in rule or re.search(rule["path_regex"], rel):
            return rule
    return None


@pytest.mark.parametrize("rel", SOPS_FILES)
def test_every_committed_sops_file_is_encrypted_to_its_creation_rule(rel):
    doc = yaml.safe_load((REPO / rel).read_text())
    meta = doc.get("sops")
    assert meta and meta.get("mac") and meta.get("age"), f"{rel} has no sops metadata"
    assert meta["encrypted_regex"] == "^(data|stringData)$"
    payload = {k: v for k, v in doc.items() if k in ("data", "stringData")}
    assert payload, f"{rel} holds neither data nor stringData"
    for section in payload.values():
        for name, value in section.items():
            if value == "":
                continue  # sops leaves an empty value as it is (nothing to encrypt), as validate accepts
            assert isinstance(value, str) and ENCRYPTED.match(value), f"{rel}: {name} is not encrypted"
    rule = first_rule(rel)
    assert rule is not None, f"no creation rule of .sops.yaml matches {rel}"
    assert rule["encrypted_regex"] == meta["encrypted_regex"]
    assert sorted(r["recipient"] for r in meta["age"]) == sorted(k.strip() for k in rule["age"].split(","))


def test_the_test_recipients_are_the_fixture_keys():
    """The recipients committed in .sops.yaml are the public halves of the test keys, nothing else."""
    fixtures = {}
    for path in (REPO / "tests/integration/fixtures").glob("*.agekey"):
        match = re.search(r"^# public key: (age1\w+)$", path.read_text(), re.M)
        fixtures[match.group(1)] = path.name
    recipients = {k.strip() for rule in sops_rules() for k in rule["age"].split(",")}
    assert recipients <= set(fixtures)
