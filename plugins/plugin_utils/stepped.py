# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The stepped-wait protocol, once, for the action plugins of modules with long waits.

A module cannot print while it runs, so its waits run in bounded steps: each call may
spend at most one step. The resume state is the steps engine's, in one shape for every stepped
module (module_utils/steps.py STEP_STATE, which module_utils/stepping.py carries outside the
module's options): ``_wait_budget``, about progress_interval seconds, and ``_resume``, the state
of the previous step. A wait that is not done returns ``_krops_pending`` with ``_krops_resume``
(the time spent on each wait, the steps done, the wait that was cut: steps.Waits). The action
plugin then displays a status line and calls the module again with that state, the cut wait's
time measured here, on the controller, from the wait's start (the time between steps counts
too), until a step is final (done, failed or timed out). Each step's budget leaves room for the
module's start-up (measured on the controller), so that lines come at least every
progress_interval.

A subclass names its module and says how a step continues:
``observe(step)`` (bookkeeping of a pending step), ``status(host, step)`` (the line; ``wait(step)``
is the cut wait and ``waited(wait)`` its time on the controller), ``next_args(args, step, budget)``
and ``final(step)``; ``start(args, first)`` may end the run after the first step. The AWS sweep's state (its
regions' steps.Run states) names no cut wait, so ``next_args`` passes it on as it is.
Controller-side code shared by action plugins lives in plugins/plugin_utils (the layout
ansible.utils uses).
"""

from __future__ import annotations

import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.krops.platform.plugins.module_utils import stepping, steps

display = Display()

PENDING, RESUME = steps.PENDING_KEY, steps.RESUME_KEY


class SteppedAction(ActionBase):
    TRANSFERS_FILES = False

    MODULE = None
    # Task arguments only the plugin sets (the resume state), and result keys only the steps exchange.
    HIDDEN = tuple(steps.STEP_STATE)
    INTERNAL = (PENDING, RESUME)
    # Seconds kept free in a step for starting the module, so that lines come at least every progress_interval.
    STEP_MARGIN = 1
    FIRST_STEP_MARGIN = 3

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        self.task_vars = task_vars
        args = {k: v for k, v in self._task.args.items() if k not in self.HIDDEN}
        interval = self.interval(args)
        if self._task.check_mode or interval is None or interval < 1:
            result.update(self.run_step(args))
            return self.clean(result)
        host = (task_vars or {}).get("inventory_hostname", "localhost")
        self.origins = {}  # when each wait began, on the controller's clock
        step = self.run_step(dict(args, _wait_budget=max(1, interval - self.FIRST_STEP_MARGIN)))
        if not self.start(args, step):
            result.update(step)
            return self.clean(result)
        overhead = self.STEP_MARGIN
        while step.get(PENDING) and not step.get("failed"):
            self.observe(step)
            display.display(self.status(host, step), stderr=True)
            budget = max(1, int(interval - overhead))
            began = time.monotonic()
            following = self.run_step(self.next_args(args, step, budget))
            overhead = self.overhead(following, time.monotonic() - began, budget, interval, overhead)
            step = self.combine(following)
        result.update(self.final(step))
        return self.clean(result)

    # --- hooks -----------------------------------------------------------------------------

    def interval(self, args):
        """Seconds between progress lines; None (or < 1) runs the module once. A bad value is the module's to report."""
        try:
            return int(args.get("progress_interval") or 30)
        except (TypeError, ValueError):
            return None

    def start(self, args, first):
        """After the first step: False ends the run with it (not pending, failed, or nothing to wait for)."""
        return bool(first.get(PENDING)) and not first.get("failed")

    def observe(self, step):
        """Bookkeeping of a pending step before its status line: when its wait began here (the time between steps
        counts too)."""
        wait = self.wait(step)
        self.origins.setdefault(wait.get("key", ""), time.monotonic() - float(wait.get("waited") or 0))

    def status(self, host, step):
        raise NotImplementedError

    def next_args(self, args, step, budget):
        """The next step: its budget, and the pending step's resume state with the cut wait's time measured here
        (finished waits keep the time they had)."""
        resume = dict(step.get(RESUME) or {})
        wait = self.wait(step)
        if wait:
            resume["spent"] = dict(resume.get("spent") or {}, **{wait["key"]: self.waited(wait)})
        return dict(args, _wait_budget=budget, _resume=resume)

    def wait(self, step):
        """The wait the budget cut in a pending step ({} when it names none)."""
        return (step.get(RESUME) or {}).get("wait") or {}

    def waited(self, wait):
        """Seconds the wait has taken so far, on the controller's clock, from its start."""
        return round(time.monotonic() - self.origins[wait.get("key", "")], 3)

    def overhead(self, step, elapsed, budget, interval, previous):
        """Seconds of a step not spent waiting (module start-up, transfer), kept free in the next step."""
        if not step.get(PENDING):
            return previous
        return min(interval - 1, max(self.STEP_MARGIN, elapsed - budget + 0.5))

    def combine(self, step):
        return step

    def final(self, step):
        return step

    # --- plumbing --------------------------------------------------------------------------

    def run_step(self, args):
        # The HIDDEN keys are the wait's resume state, not module options (they stay out of the module's docs):
        # they reach the module in its environment, for this call only (module_utils/stepping.py).
        state = {k: args[k] for k in self.HIDDEN if k in args}
        options = {k: v for k, v in args.items() if k not in self.HIDDEN}
        original = self._task.environment
        before = original if isinstance(original, list) else ([original] if original else [])
        self._task.environment = before + [{stepping.ENV: stepping.encode(state)}]
        try:
            return self._execute_module(module_name=self.MODULE, module_args=options, task_vars=self.task_vars)
        finally:
            self._task.environment = original

    def clean(self, result):
        for key in self.INTERNAL:
            result.pop(key, None)
        return result
