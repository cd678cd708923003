# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""A test callback for tests/benchmarks/crash_matrix.py: logs every task boundary and can kill the run at one.

KROPS_CRASH_LOG=<file>  append one JSON line per task start: {"n": ordinal, "task": name, "role": role or ""}
KROPS_CRASH_AT=<n>      SIGKILL the run's process group when task n starts (after task n-1 ended)
KROPS_CRASH_AT=<n>+<s>  ... s seconds after task n started (the host dying in the middle of that task)

The run must lead its own process group (tests/substrate/lifecycle.py starts it in a new session): the
callback refuses to kill a group it does not lead.
"""

from __future__ import annotations

import json
import os
import signal
import threading

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: krops_crash
type: aggregate
short_description: task boundary log and SIGKILL at a task boundary (tests only)
description: Used by tests/benchmarks/crash_matrix.py.
"""


def _kill():
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpgrp(), signal.SIGKILL)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "krops_crash"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._n = 0
        self._log = os.environ.get("KROPS_CRASH_LOG")
        at = os.environ.get("KROPS_CRASH_AT") or ""
        ordinal, _plus, delay = at.partition("+")
        self._at = int(ordinal) if ordinal else None
        self._delay = float(delay) if delay else 0.0

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._n += 1
        if self._log:
            role = task._role.get_name() if getattr(task, "_role", None) else ""
            with open(self._log, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"n": self._n, "task": task.get_name(), "role": role}) + "\n")
        if self._at == self._n:
            if self._delay:
                timer = threading.Timer(self._delay, _kill)
                timer.daemon = True
                timer.start()
            else:
                _kill()

    v2_playbook_on_handler_task_start = v2_playbook_on_task_start
