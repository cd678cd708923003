# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The AWS orphan sweep's deletions: the rows of one region (or the global phase) deleted in table order, the
regional chains side by side, with the DependencyViolation retries and the waits of the rows that have a
wait_state. A wait the step budget cuts is handed back (Deleter.pending) for the next step to resume."""

from __future__ import annotations

import itertools
import os
import threading

from ansible_collections.krops.platform.plugins.module_utils import aws
from ansible_collections.krops.platform.plugins.module_utils import aws_rows as rows
from ansible_collections.krops.platform.plugins.module_utils.aws import BotoCoreError, ClientError

# Poll delays while waiting for a deletion or retrying a DependencyViolation (seconds).
POLL_FIRST = 0.5
POLL_MAX = 30.0
# The first poll of a wait comes after this part of the type's expected deletion time (times EXPECTED_SCALE,
# which the benchmark lowers with its scaled-down deletions): fewer calls, little lateness.
FIRST_POLL_SHARE = 1.0
# Then every this part of it (within POLL_FIRST..POLL_MAX).
POLL_SHARE = 0.05
EXPECTED_SCALE = 1.0
try:  # tests and benchmarks that hold deletions for a scaled-down time say so (a bad value is ignored)
    EXPECTED_SCALE = max(0.0, float(os.environ.get("KROPS_AWS_SWEEP_TIME_SCALE") or 1.0))
except ValueError:
    pass
DEPENDENCY_BUDGET = 180


class Deleter:
    """Deletes discovered resources of one region (or the global phase) in table order; the rows' delete and
    wait_state handlers get it (client(), retry_dependency(), discovery(), sweep, region)."""

    def __init__(self, sweep, region, parallel=False):
        self.sweep = sweep
        self.region = region
        self.parallel = parallel
        self.pending = []  # (resource, seconds waited) of waits the step budget cut
        self._lock = threading.Lock()

    def client(self, service, region=None):
        return self.sweep.conn.client(service, region or self.region)

    def discovery(self):
        return self.sweep.discovery(self.region)

    def watch(self, key, value, region=None):
        """A wait's whole listing, made after every deletion of its row in the region, for the final pass."""
        self.sweep.remember_watched((region or self.region, key), value)

    def run(self, resources, types):
        """Delete resources type by type in table order; regional chains run side by side, then the rows without
        a chain (volumes, the network), unless a chain is still waiting when the step budget runs out."""
        if self.region == rows.GLOBAL:
            return self._run_types(resources, types)
        chains = {}
        for rtype in types:
            if rtype.chain:
                chains.setdefault(rtype.chain, []).append(rtype)
        rest = [t for t in types if not t.chain]
        busy = [c for c in chains.values() if any(r["type"] in {t.name for t in c} for r in resources)]
        done = rows.in_order(lambda c: self._run_types(resources, c), busy, len(busy))
        results = [item for chunk in done for item in chunk]
        if not self.pending:
            results += self._run_types(resources, rest)
        return rows.in_table_order(results, types)

    def _run_types(self, resources, types):
        results = []
        for rtype in types:
            batch = [r for r in resources if r["type"] == rtype.name]
            if rtype.refresh:
                batch = rtype.refresh(self, batch, resources)
            if not batch:
                continue
            if rtype.before:  # it may also give the order to delete the batch in (security groups)
                batch = rtype.before(self, batch) or batch
            workers = self.sweep.concurrency if self.parallel else 1
            outcomes = rows.in_order(lambda r, t=rtype: self._delete_one(t, r), batch, workers)
            waiting = [res for res, outcome in zip(batch, outcomes) if outcome == "wait"]
            results.extend(o for o in outcomes if o != "wait")
            if waiting:
                self.sweep.progress(
                    "%s: waiting for %d %s deletion(s): %s"
                    % (self.region, len(waiting), rtype.name, ", ".join(r["id"] for r in waiting[:5]))
                )
                finished, cut = self._wait(rtype, waiting)
                results.extend(finished)
                if cut:
                    with self._lock:
                        self.pending.extend(cut)
                    return results  # the rest of this chain depends on what is still deleting
        return results

    def _delete_one(self, rtype, res):
        """'wait' when the deletion must be awaited (only rows with a wait_state), else the rows.public outcome."""
        if rtype.waited and rows.key(res) in self.sweep.started_keys:
            return "wait"  # started in an earlier step
        try:
            answer = rtype.delete(self, res)
        except (ClientError, BotoCoreError, aws.AwsError) as exc:
            if aws.is_not_found(exc):
                return rows.public(res, "absent", "already gone")
            return rows.public(res, "failed", f"delete failed: {aws.error_message(exc)}")
        if answer == rows.ABSENT:
            return rows.public(res, "absent", "already gone")
        return "wait" if rtype.waited else rows.public(res, "deleted")

    # --- retries and waits -------------------------------------------------------------
    def _delays(self, budget):
        """Sleep between attempts until budget seconds have passed; yields before each new attempt."""
        deadline = self.sweep.clock() + budget
        delay = POLL_FIRST
        while True:
            remaining = deadline - self.sweep.clock()
            if remaining <= 0:
                return
            self.sweep.sleep(min(delay, remaining))
            delay = min(delay * 2, POLL_MAX)
            yield

    def retry_dependency(self, res, func, codes=("DependencyViolation",)):
        """Run func, retrying while AWS says something still depends on the resource."""
        budget = min(self.sweep.wait_timeout, DEPENDENCY_BUDGET)
        last = None
        for dummy in itertools.chain((None,), self._delays(budget)):  # the first attempt at once, then delayed
            try:
                return func()
            except ClientError as exc:
                if aws.error_code(exc) not in codes:
                    raise
                last = exc
        raise aws.AwsError(
            "%s (still after %ds: something outside the sweep may depend on %s %s)"
            % (aws.error_message(last), budget, res["type"], res["id"])
        )

    def delete_dependent(self, res, service, operation, id_key, codes=("DependencyViolation",)):
        """``service``'s ``operation`` on ``res`` (its id as ``id_key``), retried while AWS answers one of ``codes``:
        something still depends on the resource (retry_dependency)."""
        return self.retry_dependency(
            res, lambda: aws.call(self.client(service), operation, **{id_key: res["id"]}), codes=codes
        )

    def _wait(self, rtype, pending):
        """Poll the pending deletions of one row, all of them in one wait_state call per poll, until each is gone,
        has failed or wait_timeout passes; (final results, [(resource, seconds waited)] cut by the step budget).

        A deletion with a typical duration is first polled after FIRST_POLL_SHARE of it, then every POLL_SHARE
        of it (within POLL_FIRST..POLL_MAX); one without is polled with doubling delays."""
        if not rtype.waited:
            raise ValueError(f"sweep row {rtype.name} has no wait_state: its deletions cannot be awaited")
        sweep = self.sweep
        clock, timeout = sweep.clock, sweep.wait_timeout
        start = clock() - max(sweep.waited.get(rows.key(r), 0.0) for r in pending)
        deadline = start + timeout
        expected = rtype.expected * EXPECTED_SCALE
        quiet_until = start + min(expected * FIRST_POLL_SHARE, timeout)
        # the global phase runs to its end within one step (its resources are not in the steps' plan)
        budget = None if rtype.scope == rows.GLOBAL else sweep.budget_deadline
        stop = deadline if budget is None else min(deadline, budget)
        interval = max(POLL_FIRST, min(POLL_MAX, expected * POLL_SHARE)) if expected else POLL_FIRST
        results, states, remaining = [], {}, list(pending)
        polls = 0
        while remaining:
            now = clock()
            if now < quiet_until:
                if now >= stop:
                    break
                sweep.sleep(min(quiet_until, stop) - now)
                continue
            try:
                found = rtype.wait_state(self, list(remaining))
            except (ClientError, BotoCoreError, aws.AwsError) as exc:
                found = {r["id"]: f"unknown ({aws.error_message(exc)})" for r in remaining}
            polls += 1
            for res in list(remaining):
                # by id, or by region|type|id where one id is in several regions (the clusterawsadm stack)
                state = found.get(rows.key(res), found.get(res["id"], "?"))
                states[rows.key(res)] = state
                if state == "gone":
                    remaining.remove(res)
                    results.append(rows.public(res, "deleted"))
                elif state in ("DELETE_FAILED", "FAILED", "failed"):
                    remaining.remove(res)
                    results.append(rows.public(res, "failed", f"deletion failed: status {state}"))
            if not remaining:
                break
            if polls > 1:
                sweep.progress(
                    "{}: still deleting {}".format(
                        self.region,
                        ", ".join(
                            "{} {} ({})".format(rtype.name, r["id"], states.get(rows.key(r), "?"))
                            for r in remaining[:5]
                        ),
                    )
                )
            now = clock()
            if now >= stop:
                break
            sweep.sleep(min(interval, stop - now))
            if not expected:
                interval = min(interval * 2, POLL_MAX)
        cut = []
        if remaining and clock() < deadline and budget is not None:  # the step budget ran out: the next step goes on
            waited = clock() - start
            cut = [(dict(r, state=states.get(rows.key(r), "deleting")), waited) for r in remaining]
        else:
            results.extend(
                rows.public(
                    res, "failed", "still %s after %ds (wait_timeout)" % (states.get(rows.key(res), "present"), timeout)
                )
                for res in remaining
            )
        order = {r["id"]: i for i, r in enumerate(pending)}
        results.sort(key=lambda r: order[r["id"]])
        return results, cut
