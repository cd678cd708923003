# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Action plugin for krops.platform.flux_handoff: progress on the controller while Flux reconciles.

The stepped-wait protocol is plugin_utils.stepped, with the steps engine's resume state. The first
call does the whole handoff and waits at most one step; while the module answers ``_krops_pending``,
the plugin displays the FluxInstance state and the Kustomization table, then calls the module again
with the remaining budget and the resume state (the setup done, the time the wait took so far,
measured here). The step that can wait for all that is left of wait_timeout is final, so the final
result (success, stall or timeout with the table) is the one a single call would give; ``changed``,
``actions``, ``run_tags`` and ``diff`` come from the first step.
"""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.krops.platform.plugins.module_utils import flux_status
from ansible_collections.krops.platform.plugins.plugin_utils.stepped import PENDING, SteppedAction

_FROM_FIRST_STEP = ("changed", "actions", "operator", "sync", "sops_namespaces", "run_tags", "diff", "environment")


class ActionModule(SteppedAction):
    MODULE = "krops.platform.flux_handoff"

    def interval(self, args):
        try:
            wait = boolean(args.get("wait", True), strict=True)
        except (TypeError, ValueError):
            return None  # let the module report the bad value
        if not wait or args.get("scope") == "secrets":
            return None
        return super().interval(args)

    def start(self, args, first):
        if first.get("failed") or not first.get(PENDING):
            return False
        self.first = first
        self.total = int(first.get("wait_timeout") or self.interval(args))
        return True

    def status(self, host, step):
        return "flux_handoff [%s] waited %ds of %ds: %s" % (
            host,
            int(self.waited(self.wait(step))),
            self.total,
            flux_status.summary(step),
        )

    def overhead(self, step, elapsed, budget, interval, previous):
        # Keep each step short enough that the next line comes within progress_interval.
        return max(self.STEP_MARGIN, elapsed - float(self.wait(step).get("took") or 0) + 0.5)

    def combine(self, step):
        for key in _FROM_FIRST_STEP:
            if key in self.first:
                step[key] = self.first[key]
        return step
