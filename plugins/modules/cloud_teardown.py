#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: cloud_teardown
author:
  - krops developers (@krops)
version_added: 0.1.0
short_description: Remove what a krops environment created in a cloud whose profile names a rows file
description:
  - The teardown and the orphan report of a cloud that has no module of its own. The environment's profile
    (C(plugins/module_utils/profiles.py), field C(cloud_rows)) names the cloud's rows file, and this module runs
    its rows on the steps engine, as M(krops.platform.gcp_teardown) and M(krops.platform.azure_teardown) run
    theirs; an environment whose profile names none (aws, azure, gcp, the local platforms) is refused.
  - Each row discovers the resources the environment owns (ownership labels, tags or exact names; read-only,
    first), deletes them in the table's order, each row after the rows it depends on, and follows each deletion
    to its end before a row that depends on it starts. Then discovery runs again, and whatever owned is still
    there is a leftover, which fails the module.
  - "O(settings) are the cloud's own settings and credentials: the keys its rows file declares (its C(SETTINGS),
    an argument spec with types, defaults and required keys), checked before any call. An unknown or missing key
    fails naming it and the valid keys. The values of the keys the rows file marks C(no_log) are masked in results,
    messages and warnings."
  - "With O(mode=report) nothing is changed, in or out of check mode: the same discovery runs (as in check mode)
    and the owned resources at least O(min_age_hours) old are returned as Markdown and JSON in RV(report) (and
    written to O(report_path)), the orphan report of C(playbooks/orphan_report.yml). The age comes from the creation
    time each row gives; a resource without one is always reported."
extends_documentation_fragment:
  - krops.platform.attributes
  - krops.platform.bootstrap_config
  - krops.platform.cloud_teardown
options:
  settings:
    description:
      - The cloud's own settings and credentials (an API endpoint, a project, a token...), as the keys the rows
        file's C(SETTINGS) declares; see the cloud's page in docs/ for its keys.
      - The teardown role passes C(teardown_cloud_settings), the orphan report C(orphan_report_cloud_settings).
    type: dict
    default: {}
attributes:
  platform:
    details: Calls the cloud's API from the host it runs on (the teardown role delegates to localhost).
notes:
  - A cloud with a module of its own (M(krops.platform.aws_orphan_sweep), M(krops.platform.azure_teardown),
    M(krops.platform.gcp_teardown)) keeps it; docs/extending.md (Adding a cloud) says what a rows file declares.
"""

EXAMPLES = r"""
- name: Remove the lab environment's resources in its cloud
  krops.platform.cloud_teardown:
    environment: lab
    settings:
      url: https://api.cloud.example
      token: "{{ lookup('ansible.builtin.env', 'LAB_CLOUD_TOKEN') }}"
  register: cloud_teardown

- name: Report what the lab environment owns there, older than 12 hours
  krops.platform.cloud_teardown:
    environment: lab
    settings: "{{ teardown_cloud_settings }}"
    mode: report
    min_age_hours: 12
    report_path: reports/orphans-lab.md
"""

RETURN = r"""
cloud:
  description: The cloud of the environment's profile.
  returned: always
  type: str
  sample: dummy
environment:
  description: The environment torn down.
  returned: always
  type: str
  sample: lab
plan:
  description: The deletions in the rows' dependency order, each with the label or tag that proves krops owns it.
  returned: always
  type: list
  elements: str
  sample: ["delete machine m1 (label krops-environment=lab)", "delete volume v1 (label krops-environment=lab)"]
results:
  description: One entry per resource with type, name, reason and outcome (V(planned) in check mode, V(deleted),
    V(absent), V(failed) with C(error), V(left) when the final discovery still found it), and what else its row
    puts in the entry.
  returned: always
  type: list
  elements: dict
  sample:
    - type: machine
      name: m1
      reason: label krops-environment=lab
      outcome: deleted
report:
  description:
    - With O(mode=report), the orphan report as C(markdown) and C(json) (cloud, environment, scope,
      generated_at, min_age_hours, count, resources, not_owned, held_networks); each resource has type,
      name, reason, outcome V(orphan), stage, created (UTC, or null) and age_hours (or null when its row gives no
      creation time).
  returned: when O(mode=report)
  type: dict
  sample:
    markdown: "# krops dummy orphan report ..."
    json: {cloud: dummy, environment: lab, scope: "url=https://api.cloud.example", count: 0}
report_files:
  description: The report's two files, markdown and json (O(report_path) and the C(.json) beside it).
  returned: when O(mode=report) writes O(report_path) (not in check mode)
  type: dict
  sample: {markdown: reports/orphans-lab.md, json: reports/orphans-lab.json}
leftovers:
  description: Resources still present or that failed (C(type/name)); the module fails when not empty.
  returned: always
  type: list
  elements: str
  sample: []
"""

from ansible_collections.krops.platform.plugins.module_utils import cloud_report, cloud_teardown, errors, shell
from ansible_collections.krops.platform.plugins.module_utils import config as krops_config

NAME = "cloud_teardown"


def argument_spec():
    return dict(
        **krops_config.ARGS,
        settings=dict(type="dict", default={}),
        **cloud_teardown.REPORT_ARGS,
        **cloud_teardown.WAIT_ARGS,
    )


def run(p, check_mode, mask, step):
    """The result of the teardown (or the report) of the environment's cloud; ``mask`` gets the settings' secrets."""
    step("reading bootstrap.toml")
    cfg, profile, rows = cloud_teardown.load_rows(p["config_file"], p["environment"])
    cloud = profile.cloud
    step(f"checking the {cloud} settings")
    settings = cloud_teardown.cloud_settings(rows.SETTINGS, p["settings"], cloud, mask)
    report = p["mode"] == "report"
    options = cloud_teardown.run_options(
        check_mode=check_mode or report,  # a report is the discovery of check mode: it writes nothing
        wait_timeout=p["wait_timeout"],
        poll_interval=p["poll_interval"],
    )
    # the HTTP client is handed over, not imported by the rows file: every module that imports profiles.py packs the
    # rows files it names, and with them what they import (ansible's urls.py through cloud_teardown.py)
    run = rows.cloud_run(settings, cfg.selected, cloud_teardown.Http, **options)
    if report:
        step(f"listing what the environment owns in {cloud} (report)")
        shown = ", ".join(f"{k}={v}" for k, v in sorted(settings.items()) if v is not None and k not in _secret(rows))
        found = cloud_report.orphan_report(
            run, cloud, cfg.selected, shown, p["min_age_hours"], p["report_path"], check_mode
        )
        return dict(found, cloud=cloud)
    step(f"deleting what the environment owns in {cloud}")
    result = dict(run.execute(), cloud=cloud, environment=cfg.selected)
    if result["leftovers"]:
        raise errors.CloudError(
            "{} resources of {} left behind: {}; see results for the reason of each, then run the teardown "
            "again".format(cloud, cfg.selected, ", ".join(result["leftovers"])),
            result,
        )
    return result


def _secret(rows):
    return {key for key, spec in rows.SETTINGS.items() if spec.get("no_log")}


def body(module, step):
    return run(module.params, module.check_mode, module.no_log_values.update, step)


def main():
    shell.run(NAME, argument_spec(), body)


if __name__ == "__main__":
    main()
