#!/usr/bin/env python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Write awx/objects.yml in awxkit's import format (`awx import < awx/krops-awx-import.json`).

    scripts/awx_import_format.py [--scm-url URL] [--ee-image IMAGE] [--organization NAME]
        [--aws-credential NAME] [--azure-credential NAME] [--gcp-credential NAME] [--output FILE]

The objects are the ones awx/krops-awx.yml declares with awx.awx, minus the credentials themselves and
the container group: an import file carries no secrets, and awxkit exports no instance groups. The
project and the job templates refer to the credentials by natural key, so create them first (with
krops-awx.yml, or by hand with the same names: docs/awx.md); `awx import` then attaches them. The
--*-credential options name existing AWX cloud credentials for that environment's job templates; without
a cloud's credential option its orphan report's schedule is imported disabled. Each asset has awxkit's natural key
(the NATURAL_KEY fields of its awxkit page class, and its type). Without --scm-url the URL is
bootstrap.toml's git-url.
"""

import argparse
import json
import os
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _git_url():
    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python < 3.11
        return ""
    with open(os.path.join(ROOT, "bootstrap.toml"), "rb") as handle:
        return tomllib.load(handle)["bootstrap"]["git-url"]


def convert(objects, scm_url, ee_image, organization=None, cloud=None):
    org = {"name": organization or objects["organization"], "type": "organization"}
    cloud = {env: name for env, name in (cloud or {}).items() if name}
    kinds = {c["name"]: (c["credential_type"], c["kind"]) for c in objects["credentials"]}
    for env, name in cloud.items():
        kinds[name] = (objects["cloud_credentials"][env]["credential_type"], objects["cloud_credentials"][env]["kind"])

    def credential_key(name):
        # awxkit Credential.NATURAL_KEY: organization, name, credential_type (whose key is name, kind).
        type_name, kind = kinds[name]
        return {
            "organization": org,
            "name": name,
            "credential_type": {"name": type_name, "kind": kind, "type": "credential_type"},
            "type": "credential",
        }

    ee_key = {"name": objects["execution_environment"]["name"], "type": "execution_environment"}
    project = objects["project"]
    project_key = {"organization": org, "name": project["name"], "type": "project"}

    def inventory_key(name):
        return {"organization": org, "name": name, "type": "inventory"}

    def yaml_text(data):
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=False) if data else ""

    host = objects["host"]
    data = {
        "credential_types": [
            dict(
                {k: ct[k] for k in ("name", "description", "kind", "inputs", "injectors")},
                natural_key={"name": ct["name"], "kind": ct["kind"], "type": "credential_type"},
            )
            for ct in objects["credential_types"]
        ],
        "execution_environments": [
            {
                "name": ee_key["name"],
                "description": objects["execution_environment"]["description"],
                "image": ee_image,
                "pull": objects["execution_environment"]["pull"],
                "organization": org,
                "natural_key": ee_key,
            }
        ],
        "projects": [
            {
                "name": project["name"],
                "description": project["description"],
                "organization": org,
                "scm_type": project["scm_type"],
                "scm_url": scm_url,
                "scm_branch": project["scm_branch"],
                "scm_update_on_launch": project["scm_update_on_launch"],
                "credential": credential_key(project["credential"]),
                "default_environment": ee_key,
                "natural_key": project_key,
            }
        ],
        "inventory": [
            {
                "name": inv["name"],
                "description": inv["description"],
                "organization": org,
                "variables": yaml_text(inv["variables"]),
                "related": {
                    "hosts": [
                        {
                            "name": host["name"],
                            "variables": yaml_text(host["variables"]),
                            "enabled": True,
                            "natural_key": {
                                "name": host["name"],
                                "inventory": inventory_key(inv["name"]),
                                "type": "host",
                            },
                        }
                    ]
                },
                "natural_key": inventory_key(inv["name"]),
            }
            for inv in objects["inventories"]
        ],
        "job_templates": [],
    }
    schedules = {}
    for schedule in objects["schedules"]:
        schedules.setdefault(schedule["unified_job_template"], []).append(schedule)
    for jt in objects["job_templates"]:
        key = {"organization": org, "name": jt["name"], "type": "job_template"}
        related = {}
        credentials = jt["credentials"] + (
            [cloud[jt["cloud_credential"]]] if jt.get("cloud_credential") in cloud else []
        )
        if credentials:
            related["credentials"] = [credential_key(name) for name in credentials]
        if jt.get("survey"):
            related["survey_spec"] = jt["survey"]
        if jt["name"] in schedules:
            related["schedules"] = [
                {
                    "name": s["name"],
                    "rrule": s["rrule"],
                    "enabled": s["enabled_when_credential"] in cloud,
                    "extra_data": {},
                    "natural_key": {"unified_job_template": key, "name": s["name"], "type": "schedule"},
                }
                for s in schedules.pop(jt["name"])
            ]
        data["job_templates"].append(
            dict(
                {
                    "name": jt["name"],
                    "description": jt["description"],
                    "job_type": "run",
                    "inventory": inventory_key(jt["inventory"]),
                    "project": project_key,
                    "playbook": jt["playbook"],
                    "job_tags": jt["job_tags"],
                    "extra_vars": yaml_text(jt.get("extra_vars") or {}),
                    "survey_enabled": bool(jt.get("survey")),
                    "execution_environment": ee_key,
                    "natural_key": key,
                },
                **({"related": related} if related else {}),
            )
        )
    if schedules:
        raise SystemExit(
            "awx_import_format: schedules for unknown job templates: {}".format(", ".join(sorted(schedules)))
        )
    return data


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", default=os.path.join(ROOT, "awx", "objects.yml"))
    parser.add_argument("--scm-url", default=None)
    parser.add_argument("--ee-image", default="krops-ee:0.1.0")
    parser.add_argument("--organization", default=None)
    for env in ("aws", "azure", "gcp"):
        parser.add_argument(
            f"--{env}-credential", default="", help=f"an existing AWX credential for the {env} job templates"
        )
    parser.add_argument("--output", default="-")
    args = parser.parse_args(argv)
    with open(args.objects, encoding="utf-8") as handle:
        objects = yaml.safe_load(handle)
    cloud = {"aws": args.aws_credential, "azure": args.azure_credential, "gcp": args.gcp_credential}
    data = convert(objects, args.scm_url or _git_url(), args.ee_image, args.organization, cloud)
    text = json.dumps(data, indent=2, sort_keys=False) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
