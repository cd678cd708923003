# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Action plugin for krops.platform.capi_pivot: progress on the controller during the pivot's long waits.

The stepped-wait protocol is plugin_utils.stepped, with the steps engine's resume state. The pivot
is idempotent up to the move, so each step re-runs it from the start, with the time each wait
already took (measured on the controller, in the resume state's ``spent``) counted, so that every
timeout keeps its meaning. A wait whose remaining time fits in the step runs to its end, so the
final result (success, or a timeout with the single-run message) is that of one call; results of
the steps are merged by pivot.merge_steps (changed from any step, states of the step that wrote).
Only waits are cut: commands (helm, clusterctl move) always run to their end.
"""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import pivot
from ansible_collections.krops.platform.plugins.plugin_utils.stepped import SteppedAction


class ActionModule(SteppedAction):
    MODULE = "krops.platform.capi_pivot"

    def start(self, args, first):
        self.merged = None
        return True  # a final first step skips the loop; final() returns it as it is

    def observe(self, step):
        self.merged = pivot.merge_steps(self.merged, step)
        super().observe(step)

    def status(self, host, step):
        wait = self.wait(step)
        return "capi_pivot [%s] phase %s (%s): waited %ds of %ss: %s" % (
            host,
            wait.get("number", "?"),
            wait.get("title", wait.get("step", "")),
            int(self.waited(wait)),
            wait.get("total", "?"),
            wait.get("state", ""),
        )

    def final(self, step):
        return pivot.merge_steps(self.merged, step) if self.merged else step
