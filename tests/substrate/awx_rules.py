# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""What an AWX server rejects when awx.awx's modules write to it, for the stand-in awx.awx collection
of tests/integration/test_awx.py. Read from ansible/awx tag 24.6.1 (each rule names its source); the
error texts are AWX's. The stand-in keeps the objects it was given in one JSON file, so a rule that
depends on another object (a project's credential, a job template's credentials) sees it.

Rules:
- credential types: a custom one is of kind 'cloud' or 'net' (awx/api/serializers.py
  CredentialTypeSerializer.validate); the managed types and their kinds are
  awx/main/models/credential/__init__.py ManagedCredentialType(...) declarations;
- credentials: their type exists; a custom type's `required` inputs are given (awx/main/fields.py
  CredentialInputField: "required for ...");
- projects: a Git project's credential is of kind 'scm' (awx/main/models/projects.py
  ProjectOptions.clean_credential);
- job templates: each credential's kind is ssh, vault, cloud, net or kubernetes, and at most one per
  credential type (awx/api/views/__init__.py JobTemplateCredentialsList.is_valid_relation); the survey
  spec's shape (JobTemplateSurveySpec._validate_spec_data; SURVEY_TYPE_MAPPING in awx/main/constants.py);
- schedules: the rrule (awx/api/serializers.py SchedulePreviewSerializer.validate_rrule);
- instance groups: a credential only with is_container_group (InstanceGroupSerializer.validate); a
  pod_spec_override parses as YAML or JSON into a mapping (awx/main/tasks/receptor.py pod_definition
  merges it into the default pod spec).
"""

from __future__ import annotations

import json
import os
import re

import yaml

# ManagedCredentialType(namespace=..., kind=..., name=...) in awx/main/models/credential/__init__.py.
MANAGED_CREDENTIAL_TYPES = {
    "Machine": "ssh",
    "Source Control": "scm",
    "Vault": "vault",
    "Network": "net",
    "Amazon Web Services": "cloud",
    "OpenStack": "cloud",
    "VMware vCenter": "cloud",
    "Red Hat Satellite 6": "cloud",
    "Google Compute Engine": "cloud",
    "Microsoft Azure Resource Manager": "cloud",
    "GitHub Personal Access Token": "token",
    "GitLab Personal Access Token": "token",
    "Bitbucket Data Center HTTP Access Token": "token",
    "Insights": "insights",
    "Red Hat Virtualization": "cloud",
    "Red Hat Ansible Automation Platform": "cloud",
    "OpenShift or Kubernetes API Bearer Token": "kubernetes",
    "Container Registry": "registry",
    "Ansible Galaxy/Automation Hub API Token": "galaxy",
    "GPG Public Key": "cryptography",
    "Terraform backend configuration": "cloud",
}
# awx/main/models/credential/__init__.py CredentialType.KIND_CHOICES.
CREDENTIAL_KINDS = (
    "ssh",
    "vault",
    "net",
    "scm",
    "cloud",
    "registry",
    "token",
    "insights",
    "external",
    "kubernetes",
    "galaxy",
    "cryptography",
)
# awx/main/constants.py SURVEY_TYPE_MAPPING.
SURVEY_TYPE_MAPPING = {
    "text": str,
    "textarea": str,
    "password": str,
    "multiplechoice": str,
    "multiselect": str,
    "integer": int,
    "float": (float, int),
}


class Rejected(Exception):
    """AWX answered 400: the module fails with this message."""


def missing(endpoint, name):
    # controller_api.py ControllerAPIModule.get_one, when a name matches nothing (the real message
    # shows the endpoint with its name filter).
    return f"Request to /api/v2/{endpoint}/?name={name} returned 0 items, expected 1"


# --- credential types and credentials --------------------------------------------------------


def check_credential_type(params):
    kind = params.get("kind")
    if kind is not None and kind not in ("cloud", "net"):
        raise Rejected("Must be 'cloud' or 'net', not %s" % kind)
    for field in (params.get("inputs") or {}).get("fields", []):
        if field.get("ask_at_runtime"):
            raise Rejected("'ask_at_runtime' is not supported for custom credentials.")


def check_credential(params, state):
    type_name = params["credential_type"]
    kind = credential_type_kind(state, type_name)
    custom = state["credential_types"].get(type_name)
    inputs = params.get("inputs") or {}
    if custom:
        missing = [f for f in custom.get("inputs", {}).get("required", []) if not inputs.get(f)]
        if missing:
            raise Rejected("{}: required for {}".format(", ".join(missing), type_name))
    return {"credential_type": type_name, "kind": kind}


def credential_type_kind(state, name):
    if name in MANAGED_CREDENTIAL_TYPES:
        return MANAGED_CREDENTIAL_TYPES[name]
    if name in state["credential_types"]:
        return state["credential_types"][name]["kind"]
    raise Rejected(missing("credential_types", name))


def credential(state, name):
    if name not in state["credentials"]:
        raise Rejected(missing("credentials", name))
    return state["credentials"][name]


# --- projects ------------------------------------------------------------------------------------


def check_project(params, state):
    if params.get("scm_type") and params.get("credential"):
        kind = credential(state, params["credential"])["kind"]
        wanted = "insights" if params["scm_type"] == "insights" else "scm"
        if kind != wanted:
            raise Rejected("Credential kind must be '%s'." % wanted)


# --- job templates -------------------------------------------------------------------------------


def check_job_template_credentials(names, state):
    seen = set()
    for name in names or []:
        cred = credential(state, name)
        if cred["credential_type"] in seen:
            raise Rejected("Cannot assign multiple {} credentials.".format(cred["credential_type"]))
        seen.add(cred["credential_type"])
        if cred["kind"] not in ("ssh", "vault", "cloud", "net", "kubernetes"):
            raise Rejected("Cannot assign a Credential of kind `{}`.".format(cred["kind"]))


def check_survey_spec(spec):
    """JobTemplateSurveySpec._validate_spec_data: the first error AWX reports, or None."""
    for field, expect, label in (
        ("name", str, "string"),
        ("description", str, "string"),
        ("spec", list, "list of items"),
    ):
        if field not in spec:
            return f"Field '{field}' is missing from survey spec."
        if not isinstance(spec[field], expect):
            return f"Expected {label} for field '{field}', received {type(spec[field]).__name__} type."
    if not spec["spec"]:
        return "'spec' doesn't contain any items."
    variables = set()
    for idx, item in enumerate(spec["spec"]):
        if not isinstance(item, dict):
            return "Survey question %s is not a json object." % idx
        for name in ("type", "question_name", "variable", "required"):
            if name not in item:
                return f"'{name}' missing from survey question {idx}"
            kind, label = (bool, "boolean") if name == "required" else (str, "string")
            if not isinstance(item[name], kind):
                return f"'{name}' in survey question {idx} expected to be {label}."
        if item["variable"] in variables:
            return "'variable' '{}' duplicated in survey question {}.".format(item["variable"], idx)
        variables.add(item["variable"])
        qtype = item["type"]
        if qtype not in SURVEY_TYPE_MAPPING:
            return "'{}' in survey question {} is not one of '{}' allowed question types.".format(
                qtype, idx, ", ".join(SURVEY_TYPE_MAPPING)
            )
        if "default" in item and item["default"] != "" and not isinstance(item["default"], SURVEY_TYPE_MAPPING[qtype]):
            label = qtype if qtype in ("integer", "float") else "string"
            return "Default value {} in survey question {} expected to be {}.".format(item["default"], idx, label)
        for key in ("min", "max"):
            if item.get(key) is not None and not isinstance(item[key], int):
                return f"The {key} limit in survey question {idx} expected to be integer."
        if qtype in ("multiselect", "multiplechoice"):
            if "choices" not in item:
                return f"Survey question {idx} of type {qtype} must specify choices."
            choices = item["choices"]
            if isinstance(choices, str):
                choices = [c for c in choices.splitlines() if c.strip()]
            if "default" in item:
                default = item["default"]
                defaults = [d for d in default.splitlines() if d.strip()] if isinstance(default, str) else default
                if qtype == "multiplechoice" and len(defaults) > 1:
                    return "Multiple Choice (Single Select) can only have one default value."
                if any(d not in choices for d in defaults):
                    return "Default choice must be answered from the choices listed."
    return None


# --- schedules -----------------------------------------------------------------------------------


def rrule_errors(value):
    """SchedulePreviewSerializer.validate_rrule's checks, in its order (parsing by dateutil, which AWX's
    Schedule.rrulestr builds on)."""
    if not value:
        return ["This field may not be blank."]
    errors = []
    dtstarts = re.findall(r".*?(DTSTART(;[^:]+)?\:[0-9]+T[0-9]+Z?)", value)
    naive = re.findall(r".*?(DTSTART:[0-9]+T[0-9]+) ", value)
    rules = re.findall(r".*?(RULE\:[^\s]*)", value)
    if not dtstarts:
        errors.append("Valid DTSTART required in rrule. Value should start with: DTSTART:YYYYMMDDTHHMMSSZ")
    if naive:
        errors.append("DTSTART cannot be a naive datetime.  Specify ;TZINFO= or YYYYMMDDTHHMMSSZZ.")
    if len(dtstarts) > 1:
        errors.append("Multiple DTSTART is not supported.")
    if "rrule:" not in value.lower():
        errors.append("One or more rule required in rrule.")
    if "exdate:" in value.lower():
        return ["EXDATE not allowed in rrule."]
    if "rdate:" in value.lower():
        return ["RDATE not allowed in rrule."]
    for rule in rules:
        if "interval" not in rule.lower():
            errors.append("INTERVAL required in rrule: " + rule)
        elif "secondly" in rule.lower():
            errors.append("SECONDLY is not supported: " + rule)
        if re.match(r".*?BYDAY[\:\=][0-9]+[a-zA-Z]{2}", rule):
            errors.append("BYDAY with numeric prefix not supported: " + rule)
        if "COUNT" in rule and "UNTIL" in rule:
            errors.append("RRULE may not contain both COUNT and UNTIL: " + rule)
        count = re.match(r".*?(COUNT\=[0-9]+)", rule)
        if count and int(count.group(1).split("=")[1]) > 999:
            errors.append("COUNT > 999 is unsupported: " + rule)
    if not errors:
        from dateutil import rrule as dateutil_rrule

        try:
            dateutil_rrule.rrulestr(value.replace(" ", "\n"), forceset=True)
        except Exception as exc:  # dateutil raises ValueError and others
            errors.append(f"rrule parsing failed validation: {exc}")
    return errors


# --- instance groups -----------------------------------------------------------------------------


def check_instance_group(params, state):
    if params.get("credential"):
        if not params.get("is_container_group"):
            raise Rejected("is_container_group must be True when associating a credential to an Instance Group")
        if credential(state, params["credential"])["kind"] != "kubernetes":
            raise Rejected("Only Kubernetes credentials can be associated with an Instance Group")
    override = params.get("pod_spec_override")
    if override:
        try:
            parsed = yaml.safe_load(override)
        except yaml.YAMLError as exc:
            raise Rejected(f"pod_spec_override: {exc}") from exc
        if not isinstance(parsed, dict):
            raise Rejected("pod_spec_override must be a mapping (the pod spec AWX merges into its default)")


# --- the server's objects ------------------------------------------------------------------------

KINDS = (
    "credential_types",
    "credentials",
    "execution_environments",
    "projects",
    "inventories",
    "hosts",
    "instance_groups",
    "job_templates",
    "schedules",
)


def load(path):
    if os.path.exists(path):
        with open(path) as handle:
            return json.load(handle)
    return {kind: {} for kind in KINDS}


def save(path, state):
    with open(path, "w") as handle:
        json.dump(state, handle)


def need(state, kind, name):
    if name not in state[kind]:
        raise Rejected(missing(kind, name))


def apply(module, params, state):
    """Validate one module call against the server's objects and record it; raise Rejected."""
    name = params.get("name")
    if module == "credential_type":
        check_credential_type(params)
        state["credential_types"][name] = {"kind": params.get("kind"), "inputs": params.get("inputs") or {}}
    elif module == "credential":
        state["credentials"][name] = check_credential(params, state)
    elif module == "execution_environment":
        state["execution_environments"][name] = {"image": params.get("image")}
    elif module == "project":
        check_project(params, state)
        if params.get("default_environment"):
            need(state, "execution_environments", params["default_environment"])
        state["projects"][name] = {"credential": params.get("credential")}
    elif module == "inventory":
        state["inventories"][name] = {}
    elif module == "host":
        need(state, "inventories", params["inventory"])
        state["hosts"]["{}/{}".format(params["inventory"], name)] = {}
    elif module == "instance_group":
        check_instance_group(params, state)
        state["instance_groups"][name] = {"is_container_group": bool(params.get("is_container_group"))}
    elif module == "job_template":
        for kind, key in (
            ("projects", "project"),
            ("inventories", "inventory"),
            ("execution_environments", "execution_environment"),
        ):
            if params.get(key):
                need(state, kind, params[key])
        for group in params.get("instance_groups") or []:
            need(state, "instance_groups", group)
        check_job_template_credentials(params.get("credentials"), state)
        if params.get("survey_spec"):
            error = check_survey_spec(params["survey_spec"])
            if error:
                raise Rejected(f"Failed to update survey: {error}")
        state["job_templates"][name] = {"credentials": params.get("credentials") or []}
    elif module == "schedule":
        need(state, "job_templates", params["unified_job_template"])
        errors = rrule_errors(params.get("rrule") or "")
        if errors:
            raise Rejected("Unable to create schedule {}: {}".format(name, {"rrule": errors}))
        state["schedules"][name] = {"enabled": params.get("enabled", True)}
