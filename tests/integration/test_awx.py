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
import tomllib

import pytest
import yaml

from tests.integration.test_playbooks import failed_msg, run
from tests.substrate import awx_rules
from tests.substrate.docker_double import DockerDouble
from tests.substrate.fixtures import REPO, task_results

OBJECTS = yaml.safe_load((REPO / "awx" / "objects.yml").read_text())
OPTIONS = json.loads((REPO / "tests" / "integration" / "fixtures" / "awx_module_options.json").read_text())
# Every environment of the shipped bootstrap.toml, and its platform (kind): a new environment needs its AWX objects.
PLATFORMS = {
    name: env["kind"] for name, env in tomllib.loads((REPO / "bootstrap.toml").read_text())["environments"].items()
}
ENVIRONMENTS = tuple(PLATFORMS)
CLOUDS = ("aws", "azure", "gcp")  # the platforms whose jobs get the AWX cloud credential of that platform
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
    "credential": ("organization", "name", "credential_type"),
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
# Stand-in for awx.awx.{name}: the real module's documented options, validated by AnsibleModule, then
# the AWX server's own rules (tests/substrate/awx_rules.py) against the objects written so far.
import json, os, sys
from ansible.module_utils.basic import AnsibleModule
sys.path.insert(0, os.environ["KROPS_AWX_RULES_PATH"])
import awx_rules
SPEC = {spec!r}
def main():
    module = AnsibleModule(argument_spec=SPEC, supports_check_mode=True)
    params = {{k: v for k, v in module.params.items() if v is not None}}
    state_path = os.environ["KROPS_AWX_STUB_LOG"] + ".state.json"
    state = awx_rules.load(state_path)
    try:
        awx_rules.apply("{name}", params, state)
    except awx_rules.Rejected as exc:
        module.fail_json(msg=str(exc))
    awx_rules.save(state_path, state)
    with open(os.environ["KROPS_AWX_STUB_LOG"], "a") as log:
        log.write(json.dumps({{"module": "{name}", "params": params}}) + "\\n")
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
        "KROPS_AWX_RULES_PATH": str(REPO / "tests" / "substrate"),
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
        "credential": 3,
        "execution_environment": 1,
        "project": 1,
        "instance_group": 1,
        "inventory": len(ENVIRONMENTS),
        "host": len(ENVIRONMENTS),
        "job_template": len(ENVIRONMENTS) * len(PHASES) + len(CLOUDS),  # and each cloud's orphan report
        "schedule": len(CLOUDS),
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
    # The project's credential is a Source Control one (AWX refuses any other kind there).
    assert creds["krops GitHub source control"]["credential_type"] == "Source Control"
    assert creds["krops GitHub source control"]["inputs"] == {"username": "git", "password": "ghp_example"}
    assert by_module["project"][0]["credential"] == "krops GitHub source control"
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
    schedules = {c["unified_job_template"]: c for c in by_module["schedule"]}
    assert list(schedules) == [f"krops {cloud} orphan report" for cloud in CLOUDS]
    assert {h["inventory"] for h in by_module["host"]} == {f"krops {e}" for e in ENVIRONMENTS}
    # No cloud credential named: each orphan report runs with none, so its schedule waits, and says why.
    for cloud, kind in (("aws", "Amazon Web Services"), ("azure", "Microsoft Azure Resource Manager")):
        assert schedules[f"krops {cloud} orphan report"]["enabled"] is False
        assert jts[f"krops {cloud} orphan report"]["credentials"] == []
        assert jts[f"krops {cloud} orphan report"]["extra_vars"] == {"krops_environment": cloud}
        assert (
            f"the schedule 'krops {cloud} orphan report every 6 hours' was created disabled: its job template needs an "
            f"AWX {kind} credential. Set KROPS_AWX_{cloud.upper()}_CREDENTIAL to its name and run krops-awx.yml again"
        ) in json.dumps(output)
    assert schedules["krops gcp orphan report"]["enabled"] is False
    # The local-host jobs run in the container group that reaches the node's engine.
    group = by_module["instance_group"][0]
    pod = yaml.safe_load(group["pod_spec_override"])
    assert group["is_container_group"] is True and pod["spec"]["hostNetwork"] is True
    assert pod["spec"]["volumes"] == [
        {"name": "engine-socket", "hostPath": {"path": "/var/run/docker.sock", "type": "Socket"}}
    ]
    for phase in ("bootstrap", "pivot", "teardown"):
        assert jts[f"krops local-host {phase}"]["instance_groups"] == ["krops local-host engine"]
    assert "instance_groups" not in jts["krops local-host validate"]


def seed(tmp_path, credentials):
    """Objects the AWX server already holds (the cloud credentials krops-awx.yml only names)."""
    state = awx_rules.load(str(tmp_path / "calls.jsonl.state.json"))
    for name, type_name in credentials.items():
        state["credentials"][name] = {
            "credential_type": type_name,
            "kind": awx_rules.MANAGED_CREDENTIAL_TYPES[type_name],
        }
    awx_rules.save(str(tmp_path / "calls.jsonl.state.json"), state)


@pytest.mark.slow
def test_cloud_credentials_are_attached_and_the_schedule_enabled(awx_stub, tmp_path):
    seed(
        tmp_path,
        {
            "ops aws": "Amazon Web Services",
            "ops azure": "Microsoft Azure Resource Manager",
            "ops gcp": "Google Compute Engine",
        },
    )
    env = awx_env(
        tmp_path,
        awx_stub,
        KROPS_AWX_AWS_CREDENTIAL="ops aws",
        KROPS_AWX_AZURE_CREDENTIAL="ops azure",
        KROPS_AWX_GCP_CREDENTIAL="ops gcp",
        KROPS_AWX_SCM_USERNAME="krops-bot",
    )
    rc, output, stderr = run(["awx/krops-awx.yml"], tmp_path, env=env)
    assert rc == 0, (output, stderr)
    made = calls(tmp_path)
    jts = {c["params"]["name"]: c["params"] for c in made if c["module"] == "job_template"}
    clouds = [(env_name, f"ops {PLATFORMS[env_name]}") for env_name in ENVIRONMENTS if PLATFORMS[env_name] in CLOUDS]
    assert [c for _e, c in clouds].count("ops aws") >= 2  # aws and aws-crossplane: one AWX AWS credential
    for env_name, cred in clouds:
        for phase in ("bootstrap", "pivot", "teardown"):
            assert jts[f"krops {env_name} {phase}"]["credentials"] == [
                "krops GitHub PAT",
                "krops age key",
                cred,
            ]
        assert jts[f"krops {env_name} validate"]["credentials"] == []
    for cloud in CLOUDS:
        assert jts[f"krops {cloud} orphan report"]["credentials"] == [f"ops {cloud}"]
    assert jts["krops local-host bootstrap"]["credentials"] == ["krops age key"]
    schedules = [c["params"] for c in made if c["module"] == "schedule"]
    assert [s["enabled"] for s in schedules] == [True] * len(CLOUDS)
    creds = {c["params"]["name"]: c["params"] for c in made if c["module"] == "credential"}
    assert creds["krops GitHub source control"]["inputs"]["username"] == "krops-bot"
    assert "created disabled" not in json.dumps(output)


@pytest.mark.slow
def test_a_credential_awx_refuses_on_a_job_template_fails_the_play(awx_stub, tmp_path):
    """A Source Control credential named as the AWS one: AWX refuses its kind on a job template."""
    seed(tmp_path, {"git only": "Source Control"})
    env = awx_env(tmp_path, awx_stub, KROPS_AWX_AWS_CREDENTIAL="git only")
    rc, output, _err = run(["awx/krops-awx.yml"], tmp_path, env=env)
    assert rc == 2
    failed = [r for r in task_results(output).values() if r.get("failed")]
    assert len(failed) == 1
    # The json callback keeps each failed item's msg (the loop's own msg is "One or more items failed").
    aws_jobs = [
        f"krops {e} {p}" for e in ENVIRONMENTS if PLATFORMS[e] == "aws" for p in ("bootstrap", "pivot", "teardown")
    ]
    assert {i["item"]["name"]: i["msg"] for i in failed[0]["results"] if "msg" in i} == {
        job: "Cannot assign a Credential of kind `scm`." for job in aws_jobs + ["krops aws orphan report"]
    }


# --- the stand-in's server-side rules, on AWX's own test cases (ansible/awx 24.6.1) ----------------

# awx/main/tests/functional/api/test_schedules.py test_invalid_rrules (its `rrule, error` table).
INVALID_RRULES = [
    ("", "This field may not be blank"),
    ("DTSTART:NONSENSE", "Valid DTSTART required in rrule"),
    ("DTSTART:20300308T050000 RRULE:FREQ=DAILY;INTERVAL=1", "DTSTART cannot be a naive datetime"),
    ("DTSTART:20300308T050000Z DTSTART:20310308T050000", "Multiple DTSTART is not supported"),
    ("DTSTART:20300308T050000Z", "One or more rule required in rrule"),
    ("DTSTART:20300308T050000Z RRULE:FREQ=MONTHLY;INTERVAL=1; EXDATE:20220401", "EXDATE not allowed in rrule"),
    ("DTSTART:20300308T050000Z RRULE:FREQ=MONTHLY;INTERVAL=1; RDATE:20220401", "RDATE not allowed in rrule"),
    ("DTSTART:20300308T050000Z RRULE:FREQ=SECONDLY;INTERVAL=5;COUNT=6", "SECONDLY is not supported"),
    ("DTSTART:20300308T050000Z RRULE:NONSENSE", "INTERVAL required in rrule"),
    ("DTSTART:20300308T050000Z RRULE:FREQ=YEARLY;INTERVAL=1;BYDAY=5MO", "BYDAY with numeric prefix not supported"),
    (
        "DTSTART:20030925T104941Z RRULE:FREQ=DAILY;INTERVAL=10;COUNT=500;UNTIL=20040925T104941Z",
        "RRULE may not contain both COUNT and UNTIL",
    ),
    ("DTSTART:20300308T050000Z RRULE:FREQ=DAILY;INTERVAL=1;COUNT=2000", "COUNT > 999 is unsupported"),
    (
        "DTSTART:20300308T050000Z RRULE:NONSENSE RRULE:INTERVAL=1;FREQ=DAILY EXRULE:FREQ=WEEKLY;INTERVAL=1;BYDAY=SU",
        "INTERVAL required in rrule",
    ),
    (
        "DTSTART:NONSENSE RRULE:NONSENSE RRULE:FREQ=MONTHLY;INTERVAL=1;BYMONTHDAY=3,4",
        "Valid DTSTART required in rrule",
    ),
    ("DTSTART:20300308T050000Z RRULE:FREQ=REGULARLY;INTERVAL=1", "rrule parsing failed validation: invalid 'FREQ'"),
]


@pytest.mark.parametrize(("rrule", "error"), INVALID_RRULES)
def test_stand_in_refuses_the_rrules_awx_refuses(rrule, error):
    assert any(e.startswith(error) for e in awx_rules.rrule_errors(rrule)), awx_rules.rrule_errors(rrule)


def test_the_schedules_rrules_are_valid():
    for schedule in OBJECTS["schedules"]:
        assert awx_rules.rrule_errors(schedule["rrule"]) == [], schedule


# awx/main/tests/functional/api/test_credential_type.py test_create_valid_kind / test_create_invalid_kind.
@pytest.mark.parametrize("kind", ["ssh", "vault", "scm", "insights", "kubernetes", "galaxy"])
def test_stand_in_refuses_custom_credential_type_kinds(kind):
    with pytest.raises(awx_rules.Rejected, match=f"^Must be 'cloud' or 'net', not {kind}$"):
        awx_rules.check_credential_type({"name": "x", "kind": kind})
    for ok in ("cloud", "net"):
        awx_rules.check_credential_type({"name": "x", "kind": ok})


def _question(**fields):
    return dict({"type": "text", "question_name": "q", "variable": "v", "required": True}, **fields)


def _survey(*questions):
    return {"name": "n", "description": "", "spec": list(questions)}


# JobTemplateSurveySpec._validate_spec_data, one case per rule; the last one is test_survey_spec.py
# test_survey_spec_default_not_allowed.
BAD_SURVEYS = [
    ({"description": "", "spec": []}, "Field 'name' is missing from survey spec."),
    (_survey(), "'spec' doesn't contain any items."),
    ({"name": "n", "description": "", "spec": "x"}, "Expected list of items for field 'spec', received str type."),
    (_survey({"type": "text", "question_name": "q", "variable": "v"}), "'required' missing from survey question 0"),
    (_survey(_question(required="yes")), "'required' in survey question 0 expected to be boolean."),
    (
        _survey(_question(type="date")),
        "'date' in survey question 0 is not one of 'text, textarea, password, multiplechoice, multiselect, integer, "
        "float' allowed question types.",
    ),
    (_survey(_question(type="integer", default="1")), "Default value 1 in survey question 0 expected to be integer."),
    (_survey(_question(min="1")), "The min limit in survey question 0 expected to be integer."),
    (_survey(_question(), _question(question_name="r")), "'variable' 'v' duplicated in survey question 1."),
    (
        _survey(_question(type="multiplechoice", choices="a\nb", default="c")),
        "Default choice must be answered from the choices listed.",
    ),
]


@pytest.mark.parametrize(("spec", "error"), BAD_SURVEYS)
def test_stand_in_refuses_the_survey_specs_awx_refuses(spec, error):
    assert awx_rules.check_survey_spec(spec) == error


def test_the_teardown_surveys_are_valid():
    for jt in OBJECTS["job_templates"]:
        if "survey" in jt:
            assert awx_rules.check_survey_spec(jt["survey"]) is None, jt["name"]


def test_stand_in_refuses_credentials_awx_refuses():
    """ProjectOptions.clean_credential and JobTemplateCredentialsList.is_valid_relation."""
    state = awx_rules.load("/nonexistent")
    state["credential_types"]["krops GitHub PAT"] = {"kind": "cloud", "inputs": {"required": ["token"]}}
    state["credentials"] = {
        "pat": {"credential_type": "krops GitHub PAT", "kind": "cloud"},
        "pat2": {"credential_type": "krops GitHub PAT", "kind": "cloud"},
        "git": {"credential_type": "Source Control", "kind": "scm"},
        "aws": {"credential_type": "Amazon Web Services", "kind": "cloud"},
    }
    with pytest.raises(awx_rules.Rejected, match=r"^Credential kind must be 'scm'\.$"):
        awx_rules.check_project({"scm_type": "git", "credential": "pat"}, state)
    awx_rules.check_project({"scm_type": "git", "credential": "git"}, state)
    with pytest.raises(awx_rules.Rejected, match=r"^Cannot assign a Credential of kind `scm`\.$"):
        awx_rules.check_job_template_credentials(["git"], state)
    with pytest.raises(awx_rules.Rejected, match=r"^Cannot assign multiple krops GitHub PAT credentials\.$"):
        awx_rules.check_job_template_credentials(["pat", "pat2"], state)
    awx_rules.check_job_template_credentials(["pat", "aws"], state)
    with pytest.raises(awx_rules.Rejected, match=r"^token: required for krops GitHub PAT$"):
        awx_rules.check_credential({"credential_type": "krops GitHub PAT", "inputs": {}}, state)


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
            # The cloud environments' jobs that touch the cloud get its AWX credential.
            cloud = PLATFORMS[env] in CLOUDS and phase != "validate"
            assert jt.get("cloud_credential") == (PLATFORMS[env] if cloud else None), jt["name"]
            assert ("instance_groups" in jt) == (env == "local-host" and phase != "validate"), jt["name"]
    # Each cloud's orphan report: the one playbook, which picks the cloud by the environment's profile.
    assert list(jts) == [f"krops {cloud} orphan report" for cloud in CLOUDS]
    for cloud in CLOUDS:
        report = jts[f"krops {cloud} orphan report"]
        assert report["playbook"] == "playbooks/orphan_report.yml" and (REPO / report["playbook"]).is_file()
        assert (report["inventory"], report["cloud_credential"]) == (f"krops {cloud}", cloud)
        assert report["extra_vars"] == {"krops_environment": cloud} and report["job_tags"] == ""
    assert [s["unified_job_template"] for s in OBJECTS["schedules"]] == list(jts)
    for schedule in OBJECTS["schedules"]:
        assert schedule["rrule"].startswith("DTSTART:") and "RRULE:FREQ=HOURLY;INTERVAL=6" in schedule["rrule"]
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
            # A list of assets is a create set; a list of bare natural keys (credentials) an attach set.
            for child in related if isinstance(related, list) else []:
                if "natural_key" in child:
                    walk(child)

    for assets in shipped.values():
        for asset in assets:
            walk(asset)
    org = {"name": "Default", "type": "organization"}
    # The credentials are not in the file (no secrets); krops-awx.yml or the user creates them first.
    credentials = [
        {
            "organization": org,
            "name": c["name"],
            "credential_type": {"name": c["credential_type"], "kind": c["kind"], "type": "credential_type"},
            "type": "credential",
        }
        for c in OBJECTS["credentials"]
    ]
    known = declared + [org] + credentials + [c["credential_type"] for c in credentials]

    def references(node):
        if isinstance(node, dict):
            if (
                "type" in node
                and set(node) - {"type"}
                <= {"name", "organization", "inventory", "kind", "unified_job_template", "credential_type"}
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
    # The project's credential is the Source Control one; every job template gets its credentials.
    assert shipped["projects"][0]["credential"]["credential_type"] == {
        "name": "Source Control",
        "kind": "scm",
        "type": "credential_type",
    }
    by_name = {jt["name"]: jt for jt in OBJECTS["job_templates"]}
    for asset in shipped["job_templates"]:
        attached = [c["name"] for c in (asset.get("related") or {}).get("credentials", [])]
        assert attached == by_name[asset["name"]]["credentials"], asset["name"]
    # No AWS credential named: the orphan report's schedule is imported disabled.
    assert aws_report["related"]["schedules"][0]["enabled"] is False


def test_import_file_with_cloud_credentials_attaches_them_and_enables_the_schedule():
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "awx_import_format.py"), "--aws-credential", "ops aws"],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(proc.stdout)
    jts = {a["name"]: a for a in data["job_templates"]}
    aws_key = {
        "organization": {"name": "Default", "type": "organization"},
        "name": "ops aws",
        "credential_type": {"name": "Amazon Web Services", "kind": "cloud", "type": "credential_type"},
        "type": "credential",
    }
    for name in ("krops aws bootstrap", "krops aws pivot", "krops aws teardown", "krops aws orphan report"):
        assert aws_key in jts[name]["related"]["credentials"], name
    assert aws_key not in jts["krops aws validate"].get("related", {}).get("credentials", [])
    assert aws_key not in jts["krops azure bootstrap"]["related"]["credentials"]
    assert jts["krops aws orphan report"]["related"]["schedules"][0]["enabled"] is True
    for cloud in ("azure", "gcp"):  # their credentials not named: their reports' schedules wait
        assert jts[f"krops {cloud} orphan report"]["related"]["schedules"][0]["enabled"] is False


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
def test_job_without_its_credentials_fails_naming_them(tmp_path, request):
    """A Git-synced bootstrap with no GITHUB_TOKEN and no age key: preflight names both, nothing runs after it.

    The job's EE reaches an engine (docs/awx.md: a container group that mounts the engine socket), so the
    engine ping before preflight passes and the credentials are what is missing."""
    engine = DockerDouble()
    request.addfinalizer(engine.stop)
    home = tmp_path / "home"
    home.mkdir()
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        "      ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
    )
    env = {
        "GITHUB_TOKEN": "",
        "AGE_KEY_FILE": "",
        "HOME": str(home),
        "KROPS_SCHEMA_LOCATION": "",
        "DOCKER_HOST": engine.url,
    }
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
