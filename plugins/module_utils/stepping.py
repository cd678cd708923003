# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The resume state of a stepped wait, from the action plugin to its module, outside the module's options.

The action plugins of capi_pivot, flux_handoff and aws_orphan_sweep (plugins/plugin_utils/stepped.py) call their
module several times and hand each call the state of the wait (its budget, what was spent, the sweep's
progress): the steps engine's one shape, steps.STEP_STATE (``_wait_budget`` and ``_resume``), for every one of
them. That state is no user option, so
it is no module option either (it would appear in the public docs): it travels in one environment variable of the
module's process, which the action plugin sets for that call only, as ansible-core's ActionBase._execute_module sets ANSIBLE_ASYNC_DIR for async_wrapper
(lib/ansible/plugins/action/__init__.py, 2.21). The value is base64 of JSON, so the task's environment
templating leaves it alone. The module validates it with Ansible's own argument spec validator.

Importable without Ansible's module runtime (the validator is imported when read).
"""

from __future__ import annotations

import base64
import binascii
import json
import os

from ansible_collections.krops.platform.plugins.module_utils import errors

ENV = "KROPS_STEP_STATE"


def encode(state):
    return base64.b64encode(json.dumps(state or {}, sort_keys=True).encode()).decode("ascii")


def read(spec, environ=None):
    """The state in ENV, checked against ``spec`` (an argument spec: type, choices, default); {} when unset."""
    from ansible.module_utils.common.arg_spec import (  # pylint: disable=import-outside-toplevel
        ArgumentSpecValidator,
    )

    raw = (os.environ if environ is None else environ).get(ENV) or ""
    try:
        state = json.loads(base64.b64decode(raw.encode("ascii"), validate=True) or b"{}") if raw else {}
    except (ValueError, binascii.Error, UnicodeError):
        state = None
    if not isinstance(state, dict):
        raise errors.ConfigError(f"{ENV} is not a resume state: it is set by the module's action plugin only; unset it")
    result = ArgumentSpecValidator(spec).validate(state)
    if result.error_messages:
        raise errors.ConfigError(
            "{} is not a resume state ({}): it is set by the module's action plugin only; unset it".format(
                ENV, "; ".join(result.error_messages)
            )
        )
    return result.validated_parameters
