# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Action plugin for krops.platform.capi_pivot: progress on the controller during the pivot's long waits.

The stepped-wait protocol is plugin_utils.stepped. The pivot is idempotent up to the move,
so each step re-runs it from the start, with the time each wait already took (measured
here, on the controller) passed as ``_wait_spent`` so that every timeout keeps its
meaning. A wait whose remaining time fits in the step runs to its end, so the final result
(success, or a timeout with the single-run message) is that of one call; results of the
steps are merged by pivot.merge_steps (changed from any step, states of the step that
wrote). Only waits are cut: commands (helm, clusterctl move) always run to their end.
"""

from __future__ import annotations

import time

from ansible_collections.krops.platform.plugins.module_utils import pivot
from ansible_collections.krops.platform.plugins.plugin_utils.stepped import SteppedAction


class ActionModule(SteppedAction):
    MODULE = "krops.platform.capi_pivot"
    HIDDEN = ("_wait_budget", "_wait_spent")
    INTERNAL = ("_krops_pending", "_krops_wait")

    def start(self, args, first):
        self.merged, self.origins, self.spent = None, {}, {}
        return True  # a final first step skips the loop; final() returns it as it is

    def observe(self, step):
        self.merged = pivot.merge_steps(self.merged, step)
        wait = step.get("_krops_wait") or {}
        self.key = wait.get("key", "")
        # When each wait began, on the controller's clock (the time between steps counts too).
        self.origins.setdefault(self.key, time.monotonic() - float(wait.get("waited") or 0))

    def status(self, host, step):
        wait = step.get("_krops_wait") or {}
        return "capi_pivot [%s] phase %s (%s): waited %ds of %ss: %s" % (
            host,
            wait.get("phase_number", "?"),
            wait.get("title", wait.get("phase", "")),
            int(time.monotonic() - self.origins[self.key]),
            wait.get("total", "?"),
            wait.get("state", ""),
        )

    def next_args(self, args, step, budget):
        # Finished waits keep the time they had; the pending one counts from its start.
        self.spent[self.key] = round(time.monotonic() - self.origins[self.key], 3)
        return dict(args, _wait_budget=budget, _wait_spent=dict(self.spent))

    def final(self, step):
        return pivot.merge_steps(self.merged, step) if self.merged else step
