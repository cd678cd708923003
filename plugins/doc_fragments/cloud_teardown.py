# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""What the cloud teardown modules share (module_utils.cloud_teardown): the wait and check mode (the other
attributes are krops.platform.attributes) and their orphan report mode (cloud_report.orphans). REPORT, where the
report is written, serves aws_orphan_sweep too."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  wait_timeout:
    description:
      - Seconds to wait for the deletions (in gcp_teardown, those of each stage); what is still there then
        is in RV(leftovers) and the module fails.
    type: int
    default: 1800
  poll_interval:
    description: Seconds between checks while waiting.
    type: int
    default: 10
  mode:
    description:
      - V(delete) deletes every owned resource (in check mode it returns the plan and changes nothing).
      - V(report) only lists the owned resources at least O(min_age_hours) old (the orphan report); it writes
        nothing to the cloud.
    type: str
    choices: [delete, report]
    default: delete
  min_age_hours:
    description:
      - With O(mode=report), report owned resources at least this old (V(0) or more). A resource without a creation
        time is always reported.
    type: float
    default: 6
  report_path:
    description:
      - With O(mode=report), write the Markdown report to this file and the JSON beside it (same name, C(.json)).
        Not written in check mode.
    type: path
attributes:
  check_mode:
    details: Discovers and returns RV(plan); deletes nothing.
"""

    # krops.platform.cloud_teardown.report: only the report's file (aws_orphan_sweep's report mode); a literal, as
    # ansible-test's yamllint check of doc fragments requires, so the option is written here twice
    REPORT = r"""
options:
  report_path:
    description:
      - With O(mode=report), write the Markdown report to this file and the JSON beside it (same name, C(.json)).
        Not written in check mode.
    type: path
"""
