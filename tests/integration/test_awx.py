# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""AWX as code: awx/krops-awx.yml runs non-interactively against a stand-in awx.awx collection, the
import file holds the same objects in awxkit's format, and the job templates' playbooks refuse a
teardown without confirmation and report missing credentials.

awx.awx cannot be installed here. The stand-in modules are generated from the real modules'
documented options (tests/integration/fixtures/awx_module_options.json, read from ansible/awx tag
24.6.1), and AnsibleModule rejects what the real modules reject: unknown options, missing required
options, values outside `choices`, wrong types.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import yaml

from tests.integration.test_playbooks import failed_msg, run
from tests.substrate.fixtures import REPO, task_results

OBJECTS = yaml.safe_load((REPO / "awx" / "objects.yml").read_text())
OPTIONS = json.loads((REPO / "tests" / "integration" / "fixtures" / "awx_module_options.json").read_text())
ENVIRONMENTS = ("local-host", "aws", "azure", "gcp", "local-talos")
PHASES = ("bootstrap", "pivot", "validate", "teardown")
# awxkit 24.6.1, awxkit/api/pages/*.py: NATURAL_KEY of each page class the import file uses.
NATURAL_KEYS = {
    "credential_type": ("name", "kind"),
    "execution_environment": ("name",),
    "project": ("organization", "name"),
    "inventory": ("organization", "name"),
    "host": ("name", "inventory"),
    "job_template": ("organization", "name"),
    "schedule": ("unified_job_template", "name"),
    "organization": ("name",),
}
# awxkit/api/pages/api.py EXPORTABLE_RESOURCES (the top-level keys `awx import` reads).
EXPORTABLE = {
    "users",
    "organizations",
    "teams",
    "credential_types",
    "credentials",
    "notification_templates",
    "projects",
    "inventory",
    "inventory_sources",
    "job_templates",
    "workflow_job_templates",
    "execution_environments",
    "applications",
    "schedules",
}

STUB = """#!/usr/bin/python
# Stand-in for awx.awx.{name}: the real module's documented options, validated by AnsibleModule.
import json, os
from ansible.module_utils.basic import AnsibleModule
SPEC = {spec!r}
def main():
    module = AnsibleModule(argument_spec=SPEC, supports_check_mode=True)
    with open(os.environ["KROPS_AWX_STUB_LOG"], "a") as log:
        log.write(json.dumps({{"module": "{name}", "params": {{k: v for k, v in module.params.items() if v is not None}}}}) + "\\n")
    module.exit_json(changed=True)
if __name__ == "__main__":
    main()
"""


@pytest.fixture(scope="module")
def awx_stub(tmp_path_factory):
    root = tmp_path_factory.mktemp("awxstub")
    collection = root / "ansible_collections" / "awx" / "awx"
    (collection / "plugins" / "modules").mkdir(parents=True)
    (collection / "meta").mkdir()
    (collection / "meta" / "runtime.yml").write_text("requires_ansible: '>=2.15'\n")
    (collection / "MANIFEST.json").write_text(
        json.dumps({"collection_info": {"namespace": "awx", "name": "awx", "version": "24.6.1"}})
    )
    for name, options in OPTIONS["modules"].items():
        spec = {k: dict(o.items()) for k, o in options.items()}
        for auth in OPTIONS["auth"]:
            spec.setdefault(auth, {"type": "raw"})
        for option in spec.values():
            option.setdefault("type", "str")
            if option["type"] in ("list",) and "elements" not in option:
                option["elements"] = "raw"
        (collection / "plugins" / "modules" / (name + ".py")).write_text(STUB.format(name=name, spec=spec))
    return root


def awx_env(tmp_path, stub, **extra):
    age = tmp_path / "age.agekey"
    age.write_text("# created: 2026-01-01T00:00:00Z\n# public key: age1x\nAGE-SECRET-KEY-1XYZ\n")
    env = {
        "ANSIBLE_COLLECTIONS_PATH": "{}:{}".format(stub, REPO / ".collections"),
        "KROPS_AWX_STUB_LOG": str(tmp_path / "calls.jsonl"),
        "CONTROLLER_HOST": "https://awx.example.test",
        "CONTROLLER_OAUTH_TOKEN": "oauth-token",
        "CONTROLLER_USERNAME": "",
        "CONTROLLER_PASSWORD": "",
        "GITHUB_TOKEN": "ghp_example",
        "AGE_KEY_FILE": str(age),
        "KROPS_EE_IMAGE": "registry.test/krops-ee:0.1.0",
        "KROPS_AWX_SCM_URL": "",
        "KROPS_AWX_ORGANIZATION": "",
    }
    env.update(extra)
    return env


def calls(tmp_path):
    path = tmp_path / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_playbook_declares_every_object(awx_stub, tmp_path):
    rc, output, stderr = run(["awx/krops-awx.yml"], tmp_path, env=awx_env(tmp_path, awx_stub))
    assert rc == 0, (output, stderr)
    made = calls(tmp_path)
    by_module = {}
    for call in made:
        by_module.setdefault(call["module"], []).append(call["params"])
    assert {m: len(c) for m, c in by_module.items()} == {
        "credential_type": 2,
        "credential": 2,
        "execution_environment": 1,
        "project": 1,
        "inventory": 5,
        "host": 5,
        "job_template": 21,
        "schedule": 1,
    }
    types = {c["name"]: c for c in by_module["credential_type"]}
    # The injectors reach AWX as written (data, not templates).
    assert types["krops GitHub PAT"]["injectors"] == {"env": {"GITHUB_TOKEN": "{{ token }}"}}
    assert types["krops age key"]["injectors"] == {
        "file": {"template.age_key": "{{ age_key }}"},
        "env": {"AGE_KEY_FILE": "{{ tower.filename.age_key }}"},
    }
    creds = {c["name"]: c for c in by_module["credential"]}
    assert creds["krops GitHub PAT"]["inputs"] == {"token": "ghp_example"}
    assert creds["krops age key"]["inputs"]["age_key"].startswith("# created: ")
    assert "ghp_example" not in json.dumps(output) and "AGE-SECRET-KEY" not in json.dumps(output)
    project = by_module["project"][0]
    assert project["scm_url"] == "https://github.com/krops/krops" and project["organization"] == "Default"
    assert by_module["execution_environment"][0]["image"] == "registry.test/krops-ee:0.1.0"
    jts = {c["name"]: c for c in by_module["job_template"]}
    teardown = jts["krops aws teardown"]
    assert teardown["job_tags"] == "teardown" and teardown["survey_enabled"] is True
    assert teardown["survey_spec"]["spec"][0]["variable"] == "krops_teardown_confirm"
    assert teardown["extra_vars"] == {"krops_require_confirmation": True}
    assert (
        jts["krops local-host validate"]["survey_enabled"] is False
        and jts["krops local-host validate"]["credentials"] == []
    )
    assert by_module["schedule"][0]["unified_job_template"] == "krops aws orphan report"
    assert {h["inventory"] for h in by_module["host"]} == {f"krops {e}" for e in ENVIRONMENTS}


def test_playbook_names_every_missing_input_before_changing_anything(awx_stub, tmp_path):
    env = awx_env(
        tmp_path,
        awx_stub,
        CONTROLLER_HOST="",
        CONTROLLER_OAUTH_TOKEN="",
        GITHUB_TOKEN="",
        AGE_KEY_FILE=str(tmp_path / "missing.agekey"),
        KROPS_EE_IMAGE="",
    )
    rc, output, _err = run(["awx/krops-awx.yml"], tmp_path, env=env)
    assert rc == 2
    assert failed_msg(output) == (
        "krops-awx: CONTROLLER_HOST (the AWX URL) is not set; neither CONTROLLER_OAUTH_TOKEN nor CONTROLLER_USERNAME "
        "and CONTROLLER_PASSWORD are set; GITHUB_TOKEN (the value of the 'krops GitHub PAT' credential) is not set; "
        "AGE_KEY_FILE (the age identity of the 'krops age key' credential) is not set or is not a readable file; "
        "KROPS_EE_IMAGE (the execution environment image built from execution-environment.yml) is not set"
    )
    assert calls(tmp_path) == []


def test_stand_in_rejects_what_awx_awx_rejects(awx_stub, tmp_path):
    """The stand-in is only worth something if an option the real module lacks fails."""
    play = tmp_path / "bad.yml"
    play.write_text(
        textwrap.dedent("""\
        - hosts: localhost
          gather_facts: false
          tasks:
            - awx.awx.job_template:
                name: x
                job_tag: bootstrap
            - awx.awx.project:
                name: x
                scm_type: github
        """)
    )
    env = awx_env(tmp_path, awx_stub)
    rc, output, _err = run([str(play)], tmp_path, env=env)
    assert rc == 2
    assert "Unsupported parameters for (awx.awx.job_template) module: job_tag" in failed_msg(output)


def test_objects_cover_every_environment_and_phase():
    jts = {jt["name"]: jt for jt in OBJECTS["job_templates"]}
    valid_tags = set(
        yaml.safe_load((REPO / "playbooks" / "environment.yml").read_text())[0]["vars"]["krops_playbook_tags"]
    )
    for env in ENVIRONMENTS:
        assert {
            "name": f"krops {env}",
            "description": f"krops {env}: the controller runs everything",
            "variables": {"krops_environment": env},
        } in OBJECTS["inventories"]
        for phase in PHASES:
            jt = jts.pop(f"krops {env} {phase}")
            assert jt["playbook"] == "playbooks/{}.yml".format(env.replace("-", "_"))
            assert (REPO / jt["playbook"]).is_file()
            assert jt["job_tags"] == phase and phase in valid_tags
            assert jt["inventory"] == f"krops {env}"
            assert ("survey" in jt) == (phase == "teardown")
            if phase == "validate":
                assert jt["credentials"] == []
            else:
                assert "krops age key" in jt["credentials"]
                assert ("krops GitHub PAT" in jt["credentials"]) == (env != "local-host")
    assert list(jts) == ["krops aws orphan report"]
    assert (REPO / jts["krops aws orphan report"]["playbook"]).is_file()
    assert (
        OBJECTS["schedules"][0]["rrule"].startswith("DTSTART:")
        and "RRULE:FREQ=HOURLY;INTERVAL=6" in OBJECTS["schedules"][0]["rrule"]
    )
    # The credential types inject exactly what the playbooks read.
    injected = {var for ct in OBJECTS["credential_types"] for var in ct["injectors"]["env"]}
    assert injected == {"GITHUB_TOKEN", "AGE_KEY_FILE"}


def test_import_file_is_the_same_objects_in_awxkit_format():
    shipped = json.loads((REPO / "awx" / "krops-awx-import.json").read_text())
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "awx_import_format.py")], capture_output=True, text=True, check=True
    )
    assert json.loads(proc.stdout) == shipped, (
        "regenerate: scripts/awx_import_format.py --output awx/krops-awx-import.json"
    )
    assert set(shipped) <= EXPORTABLE

    declared = []

    def walk(asset):
        key = asset["natural_key"]
        assert set(key) == set(NATURAL_KEYS[key["type"]]) | {"type"}, key
        for field in NATURAL_KEYS[key["type"]]:
            if not isinstance(key[field], dict):
                assert key[field] == asset[field], (key, field)
        declared.append(key)
        for related in (asset.get("related") or {}).values():
            for child in related if isinstance(related, list) else []:
                walk(child)

    for assets in shipped.values():
        for asset in assets:
            walk(asset)
    known = declared + [{"name": "Default", "type": "organization"}]

    def references(node):
        if isinstance(node, dict):
            if (
                "type" in node
                and set(node) - {"type"} <= {"name", "organization", "inventory", "kind", "unified_job_template"}
                and len(node) > 1
            ):
                yield node
            for value in node.values():
                yield from references(value)
        elif isinstance(node, list):
            for value in node:
                yield from references(value)

    for ref in references(shipped):
        assert ref in known, ref

    def names(key):
        return sorted(a["name"] for a in shipped[key])

    assert names("job_templates") == sorted(jt["name"] for jt in OBJECTS["job_templates"])
    assert names("inventory") == sorted(i["name"] for i in OBJECTS["inventories"])
    assert names("credential_types") == sorted(c["name"] for c in OBJECTS["credential_types"])
    aws_report = next(a for a in shipped["job_templates"] if a["name"] == "krops aws orphan report")
    assert [s["name"] for s in aws_report["related"]["schedules"]] == ["krops aws orphan report every 6 hours"]
    teardown = next(a for a in shipped["job_templates"] if a["name"] == "krops gcp teardown")
    assert (
        teardown["survey_enabled"] is True
        and teardown["related"]["survey_spec"]["spec"][0]["variable"] == "krops_teardown_confirm"
    )
    assert "secret" not in json.dumps(shipped["projects"]) and "ghp_" not in json.dumps(shipped)


# --- what the job templates run -------------------------------------------------------------


@pytest.mark.parametrize("confirm", [None, "aws", ""])
def test_teardown_from_awx_needs_the_environment_name(tmp_path, confirm):
    args = ["playbooks/local-host.yml", "--tags", "teardown", "-e", "krops_require_confirmation=true"]
    if confirm is not None:
        args += ["-e", f"krops_teardown_confirm={confirm}"]
    rc, output, _err = run(args, tmp_path)
    assert rc == 2
    assert failed_msg(output) == (
        "the teardown was not confirmed: krops_teardown_confirm must be the environment's name 'local-host' (the "
        "survey of the job template asks for it), but it is '%s'; nothing was deleted" % (confirm or "")
    )
    names = list(task_results(output))
    assert names[-1] == "Check the teardown confirmation"
    assert not any(name.startswith("krops.platform.teardown") for name in names)


@pytest.mark.slow
def test_job_without_its_credentials_fails_naming_them(tmp_path):
    """A Git-synced bootstrap with no GITHUB_TOKEN and no age key: preflight names both, nothing runs after it."""
    home = tmp_path / "home"
    home.mkdir()
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        "      ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
    )
    env = {"GITHUB_TOKEN": "", "AGE_KEY_FILE": "", "HOME": str(home), "KROPS_SCHEMA_LOCATION": ""}
    rc, output, _err = run(
        ["-i", str(inventory), "playbooks/local_talos.yml", "--tags", "bootstrap"], tmp_path, env=env
    )
    assert rc == 2
    msg = failed_msg(output)
    key = home / ".config" / "krops" / "age.agekey"
    assert msg.startswith("preflight found ")
    lines = msg.splitlines()[1:]
    assert (
        f"- age key file {key} does not exist: create it with `age-keygen -o {key}` (and keep it out of Git)" in lines
    )
    assert "- GITHUB_TOKEN is not set: Flux needs a personal access token that can read krops/krops" in lines
