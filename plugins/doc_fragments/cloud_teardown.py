# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""What azure_teardown and gcp_teardown share (module_utils.cloud_teardown): the wait and check mode."""


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
attributes:
  check_mode:
    support: full
    description: Discovers and returns RV(plan); deletes nothing.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
"""
