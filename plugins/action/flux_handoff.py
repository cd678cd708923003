# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Action plugin for krops.platform.flux_handoff: progress on the controller while Flux reconciles.

The module's wait is event-driven but a module cannot print while it runs, so the wait is
cut into bounded steps: the first call does the whole handoff and waits at most one step
(hidden option ``_wait_budget``); while the module answers ``_krops_pending``, the plugin
displays the FluxInstance state and the Kustomization table, then calls the module again
with ``_phase=wait`` and the remaining budget. The last step gets the whole remaining time,
so the final result (success, stall or timeout with the table) is the one a single call
would give; ``changed``, ``actions``, ``run_tags`` and ``diff`` come from the first step.
"""

from __future__ import annotations

import math
import time

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.krops.platform.plugins.module_utils import flux

display = Display()

MODULE = "krops.platform.flux_handoff"
# Seconds kept free in a step for starting the module (measured after the first step), so that lines
# come at least every progress_interval.
STEP_MARGIN = 1
FIRST_STEP_MARGIN = 3
_HIDDEN = ("_phase", "_wait_budget", "_wait_total")
_INTERNAL = ("_krops_pending", "_krops_waited")
_FROM_FIRST_STEP = ("changed", "actions", "operator", "sync", "sops_namespaces", "run_tags", "diff", "environment")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = {k: v for k, v in self._task.args.items() if k not in _HIDDEN}
        try:
            wait = boolean(args.get("wait", True), strict=True)
            interval = int(args.get("progress_interval") or 30)
        except (TypeError, ValueError):
            wait, interval = False, 0  # let the module report the bad value
        if self._task.check_mode or not wait or args.get("scope") == "secrets" or interval < 1:
            result.update(self._run_step(args, task_vars))
            return self._clean(result)

        started = time.monotonic()
        first = self._run_step(dict(args, _wait_budget=max(1, interval - FIRST_STEP_MARGIN)), task_vars)
        if first.get("failed") or not first.get("_krops_pending"):
            result.update(first)
            return self._clean(result)
        total = int(first.get("wait_timeout") or interval)
        wait_started = time.monotonic() - float(first.get("_krops_waited") or 0)
        deadline = wait_started + total
        host = (task_vars or {}).get("inventory_hostname", "localhost")
        step, overhead = first, STEP_MARGIN
        while True:
            display.display("flux_handoff [%s] waited %ds of %ds: %s"
                            % (host, int(time.monotonic() - wait_started), total, flux.summary(step)), stderr=True)
            remaining = max(1, int(math.ceil(deadline - time.monotonic())))
            # Keep each step short enough that the next line comes within progress_interval.
            budget = max(1, int(interval - overhead))
            begun = time.monotonic()
            step = self._run_step(dict(args, _phase="wait", wait_timeout=remaining,
                                       _wait_budget=min(budget, remaining), _wait_total=total), task_vars)
            overhead = max(STEP_MARGIN, time.monotonic() - begun - float(step.get("_krops_waited") or 0) + 0.5)
            for key in _FROM_FIRST_STEP:
                if key in first:
                    step[key] = first[key]
            if step.get("failed") or not step.get("_krops_pending"):
                result.update(step)
                return self._clean(result)

    def _run_step(self, args, task_vars):
        return self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)

    @staticmethod
    def _clean(result):
        for key in _INTERNAL:
            result.pop(key, None)
        return result
