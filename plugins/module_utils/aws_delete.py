# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The AWS orphan sweep's rows on the steps engine (steps.py): ``sweep_row`` makes one ``steps.Row`` of a
type's handlers, ``Scan`` is the engine's scan (``d``: one discovery of a region, in delete, plan, report or
verification mode) and ``Context`` its ctx (``x``: the region's clients, the dependency retries).

A row's handlers are the sweep's own: ``list(d, with_age)`` over a Scan of one region,
``delete(x, res)`` and, for a type whose deletion takes time, ``wait_state(x, pending)``, one call that
answers the state of every pending deletion of the row ("gone" once deleted). ``sweep_row`` turns them
into the engine's discover, act and poll_all. Each service's file lists its rows in ``ROWS``, in its deletion
order, and aws_sweep makes the table of them (aws_sweep.SERVICES, each row after the rows it names in
``after``). The engine runs the table in its order (a ``chain`` of rows that depend on each other runs beside
the other chains, the rows without a chain after them), acts on the items, follows the deletions (the first poll
after the row's ``expected`` time, scaled), cuts a wait at the step budget and resumes from its state.
"""

from __future__ import annotations

import itertools
import os

from ansible_collections.krops.platform.plugins.module_utils import aws, cloud_report, ownership, steps
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
FAILED_STATES = ("DELETE_FAILED", "FAILED", "failed")


def sweep_row(name, scope, listing, delete, wait_state=None, **options):
    """The steps.Row of one sweep type. Its options: ``chain``; ``after``, the names of the rows it comes after in
    the sweep's table (steps.Row's ``after``, aws_sweep.table); ``expected`` (typical seconds a deletion takes;
    tests/benchmarks/aws_latency_proxy.py cites the sources: it delays the first poll); ``before(x, batch)``
    (runs once per batch and may return the batch in the order to delete it: security groups and their rules);
    ``refresh(x, batch, resources)`` (re-lists a batch right before its deletion: interfaces detach meanwhile);
    and ``arn``: the ARN type(s) of the Resource Groups Tagging API the row handles ("<service>:<resource type>",
    aws_rows.arn_type; an owned ARN of a type no row handles is ``unsupported``). Only a row with a
    ``wait_state`` is ever awaited."""
    chain, expected, arn = options.pop("chain", None), options.pop("expected", 0), options.pop("arn", ())
    after = options.pop("after", ())
    before, refresh = options.pop("before", None), options.pop("refresh", None)
    if options:
        raise TypeError("sweep row {}: unknown {}".format(name, ", ".join(sorted(options))))
    if expected and wait_state is None:
        raise ValueError(f"sweep row {name}: an expected deletion time needs a wait_state")
    if scope not in (rows.REGION, rows.GLOBAL):
        raise ValueError(f"sweep row {name}: scope must be {rows.REGION!r} or {rows.GLOBAL!r}")
    timing = {}
    if wait_state is not None:
        timing = dict(poll_all=_poll_all(wait_state), first_poll=lambda: expected * EXPECTED_SCALE * FIRST_POLL_SHARE)
        timing["interval"] = lambda polls: _interval(expected * EXPECTED_SCALE, polls)
    row = steps.Row(
        name,
        _discover(name, listing),
        _act(delete, waited=wait_state is not None),
        plan="delete {type} {id} in {region}",
        chain=chain,
        after=(after,) if isinstance(after, str) else tuple(after),
        before=_before(before, refresh) if before or refresh else None,
        **timing,
    )
    row.scope, row.arns = scope, (arn,) if isinstance(arn, str) else tuple(arn)
    return row


def _interval(expected, polls):
    """Seconds after poll ``polls``: a part of the expected time, or doubling delays when it has none."""
    if expected:
        return max(POLL_FIRST, min(POLL_MAX, expected * POLL_SHARE))
    return min(POLL_FIRST * 2 ** (polls - 1), POLL_MAX)


def _discover(name, listing):
    return lambda d: d.guard(name, lambda: listing(d, d.with_age))


def _act(delete, waited):
    """The engine's act: (outcome, the resource to follow or None); a failure raises aws.AwsError, which the
    engine records as the item's failure."""

    def act(run, res):
        try:
            answer = delete(run.ctx, res)
        except (ClientError, BotoCoreError, aws.AwsError) as exc:
            if aws.is_not_found(exc):
                return rows.ABSENT, None
            raise aws.AwsError(f"delete failed: {aws.error_message(exc)}") from None
        if answer == rows.ABSENT:
            return rows.ABSENT, None
        return "deleted", (dict(res) if waited else None)

    return act


def _poll_all(wait_state):
    """The engine's poll_all: one wait_state call for every pending deletion of a row; each handle keeps the
    state AWS answered last (``state``: what the steps' ``waiting`` list shows)."""

    def poll_all(run, pending):
        try:
            found = wait_state(run.ctx, list(pending))
        except (ClientError, BotoCoreError, aws.AwsError) as exc:
            found = {r["id"]: f"unknown ({aws.error_message(exc)})" for r in pending}
        answers = []
        for res in pending:
            # by id, or by region|type|id where one id is in several regions (the clusterawsadm stack)
            res["state"] = state = found.get(rows.key(res), found.get(res["id"], "?"))
            if state == "gone":
                answers.append((steps.DONE, None))
            elif state in FAILED_STATES:
                answers.append((steps.FAILED, f"deletion failed: status {state}"))
            else:
                answers.append((steps.PENDING, state))
        return answers

    return poll_all


def _before(before, refresh):
    def hook(run, batch):
        if refresh:
            batch = refresh(run.ctx, batch, [r for items in run.plan.values() for r in items])
        if batch and before:  # it may also give the order to delete the batch in (security groups)
            batch = before(run.ctx, batch) or batch
        return batch

    return hook


def public(res, outcome, error=None):
    """A result entry of the engine's: an absent resource is "already gone", a failure says why, a planned one of a
    type no row can delete is undeletable, a leftover why it is owned (else that it is still there), and an orphan
    of the report whether its age is its cluster's (``_from_cluster``: AWS states no creation time of its own)."""
    if outcome == ownership.PLANNED and res["type"] == "unsupported":
        outcome = ownership.UNDELETABLE
    elif outcome == ownership.LEFT:
        error = res.get("reason") or "still present after the sweep"
    entry = rows.public(res, outcome, error or ("already gone" if outcome == rows.ABSENT else None))
    if outcome == cloud_report.ORPHAN:
        entry["age_from_cluster"] = bool(res.get("_from_cluster"))
    return entry


class Scan:
    """One discovery of a region (or of the global phase): the engine's scan, which the rows' listings read. Listings
    several rows share (EC2 tags, the Tagging API, EKS clusters, RDS) are made once (cached()).

    ``confirm`` False is delete mode's: a delete that finds nothing answers "absent" itself, so rows that list owned
    ids from a tag walk need not describe them first (aws_ec2, aws_elb); ``with_age`` the report's (each resource's
    creation time); ``final`` the verification pass's, which takes a wait's last whole listing (``listing``) and
    leaves out the EC2 ids in ``gone`` (deleted by this run: EC2 ids are never reused)."""

    def __init__(self, sweep, region, confirm=True, with_age=False, final=False, gone=()):
        self.sweep, self.region, self.confirm, self.with_age, self.final = sweep, region, confirm, with_age, final
        self.gone = set(gone)
        self.targets = [t for t in sweep.targets if t.region == region]
        self.errors, self.warnings, self.candidates, self._cache = [], [], [], {}

    def owner_of(self, tags):
        """The owning cluster ("" when only the krops environment tag proves it), or None (ownership.py)."""
        claim = self.sweep.ownership.owner(tags)
        return None if claim is None else claim[0]

    def client(self, service):
        return self.sweep.conn.client(service, self.region)

    def cached(self, key, func, guard=None, empty=()):
        """func() once per scan. With ``guard`` (a type name) a failure is recorded once under that name and every
        reader gets ``empty``; without, it is raised to each reader (and not retried)."""
        if key not in self._cache:
            if guard:
                self._cache[key] = (True, self.guard(guard, func, empty))
            else:
                try:
                    self._cache[key] = (True, func())
                except (ClientError, BotoCoreError, aws.AwsError) as exc:
                    self._cache[key] = (False, exc)
        ok, value = self._cache[key]
        if not ok:
            raise value
        return value

    def seed(self, key, value):
        self._cache[key] = (True, value)

    def listing(self, key, func, region=None):
        """func(): a whole listing (one call and its pages); in the final pass, the last poll of a wait that made the
        same call after the row's last deletion there (Context.watch): a second listing would repeat it."""
        found = self.sweep.take_watched((region or self.region, key)) if self.final else None
        return func() if found is None else found

    def guard(self, rtype, func, empty=()):
        empty = list(empty) if isinstance(empty, tuple) else empty
        try:
            found = func()
            return empty if found is None else found
        except aws.UnsupportedOperation as exc:
            self.warnings.append(f"{self.region}: {rtype} skipped: {exc}")
        except (ClientError, BotoCoreError, aws.AwsError) as exc:
            error = {
                "region": self.region,
                "type": rtype,
                "error": f"listing {rtype} in {self.region} failed: {aws.error_message(exc)}",
            }
            if error not in self.errors:
                self.errors.append(error)
        return empty


class Context:
    """What the rows' delete and wait_state handlers get for one region (or the global phase): client(),
    retry_dependency(), delete_dependent(), scan(), watch(), sweep, region."""

    def __init__(self, sweep, region):
        self.sweep = sweep
        self.region = region

    def client(self, service, region=None):
        return self.sweep.conn.client(service, region or self.region)

    def scan(self):
        """A fresh listing of the region (what a row re-lists right before its deletion reads)."""
        return Scan(self.sweep, self.region)

    def watch(self, key, value, region=None):
        """A wait's whole listing, made after every deletion of its row in the region, for the final pass."""
        self.sweep.remember_watched((region or self.region, key), value)

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
