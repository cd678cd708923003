# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The stepped waits' resume state travels outside the module options (module_utils/stepping.py), so no module
documents or accepts an internal option; a state that is not the action plugin's is refused by name."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

from ansible_collections.krops.platform.plugins.module_utils import errors, stepping, steps
from ansible_collections.krops.platform.plugins.modules import aws_orphan_sweep, capi_pivot, flux_handoff

MODULES = Path(__file__).resolve().parents[4] / "plugins" / "modules"


@pytest.mark.parametrize("name", sorted(p.stem for p in MODULES.glob("*.py") if p.stem != "__init__"))
def test_no_module_documents_or_accepts_an_internal_option(name):
    module = importlib.import_module(f"ansible_collections.krops.platform.plugins.modules.{name}")
    documented = yaml.safe_load(module.DOCUMENTATION).get("options") or {}
    assert [o for o in documented if o.startswith("_")] == []
    assert [o for o in module.argument_spec() if o.startswith("_")] == []


def test_the_state_round_trips_with_its_defaults():
    state = {"_wait_budget": 5, "_resume": {"spent": {"flux": 12.5}, "done": ["setup"]}}
    assert stepping.read(flux_handoff.STEP_STATE, {stepping.ENV: stepping.encode(state)}) == state
    env = {stepping.ENV: stepping.encode({"_resume": {"pending": ["x"]}})}
    assert stepping.read(aws_orphan_sweep.STEP_STATE, env)["_resume"] == {"pending": ["x"]}
    assert stepping.read(capi_pivot.STEP_STATE, {}) == {"_wait_budget": None, "_resume": None}


def test_the_pivot_the_flux_handoff_and_the_aws_sweep_carry_the_engines_one_state():
    # issue 24: one resume protocol, the steps engine's (the AWS sweep's own _sweep_state is gone)
    assert capi_pivot.STEP_STATE is flux_handoff.STEP_STATE is aws_orphan_sweep.STEP_STATE is steps.STEP_STATE
    assert sorted(steps.STEP_STATE) == ["_resume", "_wait_budget"]


def test_a_template_in_the_state_is_not_templated_by_the_task_environment():
    # Ansible templates the task's environment; base64 carries no '{{'.
    assert "{" not in stepping.encode({"_resume": {"note": "{{ lookup('env', 'HOME') }}"}})


@pytest.mark.parametrize(
    "raw, detail",
    [
        ("not base64!", ""),
        (stepping.encode([1, 2]), ""),
        (
            stepping.encode({"_resume": "later"}),
            " (argument '_resume' is of type str and we were unable to convert to dict: dictionary requested, "
            "could not parse JSON or key=value)",
        ),
        (stepping.encode({"wait_timeout": 1}), " (wait_timeout. Supported parameters include: _resume, _wait_budget.)"),
    ],
)
def test_a_state_that_is_not_the_action_plugins_is_refused_by_name(raw, detail):
    with pytest.raises(errors.ConfigError) as caught:
        stepping.read(flux_handoff.STEP_STATE, {stepping.ENV: raw})
    message = str(caught.value)
    assert message.startswith(f"{stepping.ENV} is not a resume state{detail}")
    assert message.endswith("it is set by the module's action plugin only; unset it")


def test_the_aws_sweeps_action_plugin_exchanges_the_engines_state():
    from ansible_collections.krops.platform.plugins.action import aws_orphan_sweep as action
    from ansible_collections.krops.platform.plugins.plugin_utils import stepped

    assert action.ActionModule.HIDDEN == stepped.SteppedAction.HIDDEN == tuple(steps.STEP_STATE)
    assert action.ActionModule.INTERNAL == (steps.PENDING_KEY, steps.RESUME_KEY)
