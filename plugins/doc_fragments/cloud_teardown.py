# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""What azure_teardown and gcp_teardown share (module_utils.cloud_teardown): the wait and check mode (the other
attributes are krops.platform.attributes)."""


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
    details: Discovers and returns RV(plan); deletes nothing.
"""
