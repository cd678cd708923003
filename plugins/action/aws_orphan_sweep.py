# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Action plugin for krops.platform.aws_orphan_sweep: progress on the controller while deletions are awaited.

The stepped-wait protocol is plugin_utils.stepped, with the steps engine's resume state. The first step
lists the account and starts the deletions; when its budget runs out during a wait (EKS node groups and
clusters, RDS instances, NAT gateways, instances), the module answers ``_krops_pending`` with
``_krops_resume``: each cut region's steps.Run state (the plan, the results so far, the deletions started
and the seconds each wait took) and the regions that ended. The plugin displays what is still being
deleted and runs the next step with that state, so later steps do not list the account again and
every wait_timeout keeps its meaning. Report mode and check mode run once. ``api_calls`` and
``progress`` of all steps are summed into the final result.
"""

from __future__ import annotations

import time

from ansible_collections.krops.platform.plugins.plugin_utils.stepped import SteppedAction


class ActionModule(SteppedAction):
    MODULE = "krops.platform.aws_orphan_sweep"

    def interval(self, args):
        if (args.get("mode") or "delete") != "delete":
            return None
        return super().interval(args)

    def start(self, args, first):
        self.began = time.monotonic()
        self.calls, self.lines = 0, []
        return super().start(args, first)

    def observe(self, step):
        self.calls += int(step.get("api_calls") or 0)
        self.lines += list(step.get("progress") or [])

    def status(self, host, step):
        waiting = step.get("waiting") or []
        more = f" and {len(waiting) - 5} more" if len(waiting) > 5 else ""
        return "aws_orphan_sweep [%s] %ds: still deleting %s%s" % (
            host,
            int(time.monotonic() - self.began),
            ", ".join(waiting[:5]) or "?",
            more,
        )

    def final(self, step):
        if getattr(self, "lines", None) is not None and "api_calls" in step:
            step["api_calls"] = self.calls + int(step.get("api_calls") or 0)
            step["progress"] = self.lines + list(step.get("progress") or [])
        return step
