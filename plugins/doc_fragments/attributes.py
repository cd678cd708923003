# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The attributes every krops module shares: check mode supported, no diff mode, POSIX hosts.

A module extends ``krops.platform.attributes`` and gives only its own ``details`` (and a ``support`` where it
differs: flux_handoff's partial diff mode); one with an action plugin also extends
``krops.platform.attributes.action``. The descriptions are ansible-core's
(ansible.builtin.action_common_attributes), each ended with a full stop.
"""


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
  platform:
    description: Target OS/families that can be operated against.
    support: full
    platforms: posix
"""

    # A module with an action plugin that runs it (krops.platform.attributes.action).
    ACTION = r"""
attributes:
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
"""
