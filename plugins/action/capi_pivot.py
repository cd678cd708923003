# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Action plugin for krops.platform.capi_pivot: progress on the controller during the pivot's long waits.

A module cannot print while it runs, so the pivot runs in bounded steps: each call may spend at
most one step (hidden option ``_wait_budget``, about progress_interval seconds) before a wait that
is not done returns ``_krops_pending`` with ``_krops_wait`` (phase, what is pending, time waited,
the wait's timeout). The plugin then displays a status line and calls the module again; the
pivot is idempotent up to the move, so the next step re-runs it from the start, with the time
each wait already took (measured here, on the controller) passed as ``_wait_spent`` so that every
timeout keeps its meaning. A wait whose remaining time fits in the step runs to its end, so the
final result (success, or a timeout with the single-run message) is that of one call; results of
the steps are merged by pivot.merge_steps (changed from any step, states of the step that wrote).
Only waits are cut: commands (helm, clusterctl move) always run to their end.
"""

from __future__ import annotations

import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.krops.platform.plugins.module_utils import pivot

display = Display()

MODULE = "krops.platform.capi_pivot"
# Seconds kept free in a step for starting the module, so that lines come at least every progress_interval.
STEP_MARGIN = 1
FIRST_STEP_MARGIN = 3
_HIDDEN = ("_wait_budget", "_wait_spent")
_INTERNAL = ("_krops_pending", "_krops_wait")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = {k: v for k, v in self._task.args.items() if k not in _HIDDEN}
        try:
            interval = int(args.get("progress_interval") or 30)
        except (TypeError, ValueError):
            interval = 0  # let the module report the bad value
        if self._task.check_mode or interval < 1:
            result.update(self._run_step(args, task_vars))
            return self._clean(result)

        host = (task_vars or {}).get("inventory_hostname", "localhost")
        step = self._run_step(dict(args, _wait_budget=max(1, interval - FIRST_STEP_MARGIN)), task_vars)
        merged, origins, spent = None, {}, {}
        overhead = STEP_MARGIN
        while step.get("_krops_pending") and not step.get("failed"):
            merged = pivot.merge_steps(merged, step)
            wait = step.get("_krops_wait") or {}
            key = wait.get("key", "")
            # When each wait began, on the controller's clock (the time between steps counts too).
            origins.setdefault(key, time.monotonic() - float(wait.get("waited") or 0))
            display.display("capi_pivot [%s] phase %s (%s): waited %ds of %ss: %s"
                            % (host, wait.get("phase_number", "?"), wait.get("title", wait.get("phase", "")),
                               int(time.monotonic() - origins[key]), wait.get("total", "?"), wait.get("state", "")),
                            stderr=True)
            began = time.monotonic()
            # Finished waits keep the time they had; the pending one counts from its start.
            spent[key] = round(began - origins[key], 3)
            budget = max(1, int(interval - overhead))
            step = self._run_step(dict(args, _wait_budget=budget, _wait_spent=dict(spent)), task_vars)
            if step.get("_krops_pending"):
                # A pending step used its whole budget: the rest is module start-up and transfer, kept free in the
                # next step so that the next line still comes within progress_interval.
                overhead = min(interval - 1, max(STEP_MARGIN, time.monotonic() - began - budget + 0.5))
        result.update(pivot.merge_steps(merged, step) if merged else step)
        return self._clean(result)

    def _run_step(self, args, task_vars):
        return self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)

    @staticmethod
    def _clean(result):
        for key in _INTERNAL:
            result.pop(key, None)
        return result
