# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""One engine for stepped deletions (issue 24): a table of rows (``Row``, one step each), run by a ``Run``.

A row says what one resource type is: how its owned resources are found (``discover``), how one is
deleted (``act``), the line check mode prints for it (``plan``), how a deletion that takes time is
followed (``poll``), which rows must be finished first (``after``) and what share of the wait timeout
its wait may take (``budget``). The rows files (gcp_rows.py; aws_rows.ResourceType is the AWS sweep's
older form of the same row) hold the rows; the engine owns the rest:

- order: rows in table order, each after the rows it names in ``after``;
- check mode: discovery only, the plan and ``planned`` results, nothing is written;
- waits: a row's deletions are followed (``poll``) before any row that depends on it starts, and
  the rest at the end; a deletion that failed on an item gone since (``gone``) left nothing;
- stops: with ``stop`` (the default), a row whose dependency left anything does not run, nor the
  verification pass (``stopped_at`` names the ``group`` of the first row that left anything); without
  it every row runs and the verification pass decides;
- the budget: with ``budget`` seconds, a wait still running when they are spent is cut, and the
  result's ``resume`` is the one resume state that lets the next call go on from there without
  discovering again (``Run(..., resume=state)``);
- progress lines (``progress``) and partial results: an expected error (errors.KropsError) raised
  after the first discovery carries the result so far;
- the verification pass: once everything ran, discovery runs again, and whatever it still finds is
  a leftover (``left``), which fails the run.

The orphan report (``report``) is the same table read only: a run in check mode gives every owned item the
discovery found, and each one's age comes from the creation time its row put in the item (``_created``, the
cloud's own text: RFC 3339). Every cloud on this engine gets its report from this one function.

Importable without Ansible and without any cloud SDK.
"""

from __future__ import annotations

import datetime
import re
import time

from ansible_collections.krops.platform.plugins.module_utils import errors, ownership

DONE, PENDING, FAILED = "done", "pending", "failed"  # what a row's poll answers about one deletion


class Row:
    """One row: a resource type, how it is found, deleted and followed. See the module docstring.

    ``discover(scan)`` returns the owned items (dicts with ``type``, ``name`` and ``reason``);
    ``act(run, item)`` returns ``(outcome, handle)``, where ``handle`` (JSON) is what ``poll(run,
    handle)`` follows, or None when the deletion is final; it raises an errors.KropsError when the
    item cannot go. ``poll`` answers ``(DONE | PENDING | FAILED, error)``; ``gone(run, item)``, asked
    after the wait about an item whose deletion failed, says it is gone all the same. ``plan`` is a
    format string over the item, or a callable of the item. An item may carry ``_created``, the resource's
    creation time as its cloud states it, for the orphan report (``report``); no result entry shows it.
    """

    def __init__(self, name, discover, act, plan="delete {type} {name} ({reason})", poll=None, after=(), **kw):
        self.name, self.discover, self.act, self.plan, self.poll, self.after = name, discover, act, plan, poll, after
        self.group = kw.pop("group", None) or name  # the name a stop is reported by (stopped_at)
        self.budget = float(kw.pop("budget", 1.0))  # the share of the wait timeout this row's wait may take
        self.gone = kw.pop("gone", None)
        if kw:
            raise TypeError("Row {}: unknown {}".format(name, ", ".join(sorted(kw))))
        if not 0 < self.budget <= 1:
            raise ValueError(f"Row {name}: budget is a share of the wait timeout, above 0 and at most 1")

    def plan_line(self, item):
        return self.plan(item) if callable(self.plan) else self.plan.format_map(item)


def _shown(item):
    """An item without its creation time (``_created``, which only the orphan report reads)."""
    return {k: v for k, v in item.items() if k != "_created"}


def ordered(steps):
    """The rows in table order, each moved after the rows it depends on; a cycle or unknown name refuses."""
    by_name = {s.name: s for s in steps}
    out, placing = [], []

    def place(step):
        if step in out:
            return
        if step in placing:
            raise ValueError("rows {} depend on each other".format(" -> ".join(s.name for s in placing + [step])))
        placing.append(step)
        for name in step.after:
            if name not in by_name:
                raise ValueError(f"row {step.name} runs after {name!r}, which is no row")
            place(by_name[name])
        placing.pop()
        out.append(step)

    for step in steps:
        place(step)
    return out


def _seconds(value):
    return int(value) if float(value).is_integer() else round(value, 3)


_OPTIONS = dict(check_mode=False, wait=True, timeout=1800, poll_interval=10, budget=None, resume=None, progress=None)
_OPTIONS.update(sleep=time.sleep, clock=time.monotonic, stop=True, left=ownership.LEFT, appeared=True, public=None)
_OPTIONS.update(label=None)


class Run:
    """One run over a table of rows (see the module docstring).

    ``ctx`` is what the rows' ``act`` and ``poll`` use (``run.ctx``: the API client); ``scan()`` makes
    a fresh discovery context, which each row's ``discover`` gets. ``settle(scan, plan)`` may take
    items out of ``plan`` ({row: items}) once every row is discovered, and returns ``[(row, label)]``
    of what stays although owned (each a leftover); ``facts(scan)`` adds keys to the result. Rows
    outside ``only`` are discovered (settle sees them) but never acted on; rows outside ``listed`` are
    not even discovered. ``public(item, outcome, **extra)`` is an item's result entry, ``label(item)``
    its name in ``leftovers`` and its identity. ``_OPTIONS`` are the options: timeout is what a wait may
    take (each row's ``budget`` share of it), budget what this call may spend, resume an earlier result's
    ``resume``, progress a hook given each line, left the outcome of an item still there at the
    verification pass, appeared whether one that appeared meanwhile gets a result entry.
    """

    def __init__(self, steps, ctx, scan, only=None, listed=None, settle=None, facts=None, **options):
        self.steps = ordered(steps)
        self.by_name = {s.name: s for s in self.steps}
        self.ctx, self.scan, self.settle, self.facts = ctx, scan, settle, facts
        names = [s.name for s in self.steps]
        self.only, self.listed = list(names if only is None else only), list(names if listed is None else listed)
        self.acting = [s for s in self.steps if s.name in self.only]
        if set(options) - set(_OPTIONS):
            raise TypeError("Run: unknown {}".format(", ".join(sorted(set(options) - set(_OPTIONS)))))
        for name, default in _OPTIONS.items():
            setattr(self, "_hook" if name == "progress" else name, options.get(name, default))
        self.public = self.public or (lambda item, outcome, **extra: dict(_shown(item), outcome=outcome, **extra))
        self.label = self.label or (lambda item: "{}/{}".format(item["type"], item["name"]))
        self.resume = dict(self.resume or {})
        self.started = self.clock()
        self.deadline = None if self.budget is None else self.started + max(0.0, float(self.budget))
        self.plan, self.held, self.result, self.progress_lines = {}, [], {}, []
        self.acted = list(self.resume.get("acted") or ())
        self.pending = [list(p) for p in self.resume.get("pending") or ()]  # [row, item index, handle, waited]

    def progress(self, text):
        self.progress_lines.append(f"{self.clock() - self.started:.1f}s {text}")
        if self._hook is not None:
            self._hook(text)

    def discover(self):
        """(scan, {row: items}, held): every row's owned items, in table order, then settled."""
        scan = self.scan()
        plan = {s.name: list(s.discover(scan)) if s.name in self.listed else [] for s in self.steps}
        held = [tuple(h) for h in self.settle(scan, plan) or ()] if self.settle else []
        return scan, plan, held

    def execute(self):
        """The result: plan, results, leftovers, changed (and stopped_at, resume, the facts)."""
        if self.resume:  # a later call of a run the budget cut: no discovery, the state says where it was
            self.plan, self.held = self.resume["plan"], [tuple(h) for h in self.resume["held"]]
            self.result = dict(self.resume["result"])
        else:
            scan, self.plan, self.held = self.discover()
            self.result = dict(self.facts(scan) if self.facts else {})
            self.result["plan"] = [s.plan_line(i) for s in self.acting for i in self.plan[s.name]]
            self.result.update(results=[], leftovers=[], changed=bool(self.result["plan"]))
        if self.check_mode:
            self.result["results"] = [self.public(i, ownership.PLANNED) for s in self.acting for i in self.plan[s.name]]
            return self.result
        try:
            if self._steps():
                self._keep_held()
                if self.wait and self.result["changed"]:
                    self._verify()
        except errors.KropsError as exc:
            if not exc.result:
                exc.result = dict(self.result)
            raise
        return self.result

    def _steps(self):
        """Act on every row in order; False when one stopped the run or the budget cut a wait."""
        for step in self.acting:
            before = self._before(step)
            if not self._await(before):
                return False
            blocked = [d for d in before if self.stop and self._left(d)]
            if blocked:
                self.result["stopped_at"] = self.by_name[blocked[0]].group
                return False
            if step.name not in self.acted:
                self._act(step)
        if not self._await([s.name for s in self.acting]):
            return False
        left = [s for s in self.acting if self.stop and self._left(s.name)]
        if left:
            self.result["stopped_at"] = left[0].group
        return not left

    def _before(self, step):
        """Every acting row ``step`` depends on, directly or through another, nearest first."""
        names, todo = [], list(step.after)
        while todo:
            name = todo.pop(0)
            if name not in names:
                names.append(name)
                todo.extend(self.by_name[name].after)
        return [n for n in names if n in self.only]

    def _left(self, name):
        return any(self.label(i) in self.result["leftovers"] for i in self.plan[name])

    def _act(self, step):
        self.progress(f"{step.name}: deleting {len(self.plan[step.name])}")
        for index, item in enumerate(self.plan[step.name]):
            try:
                outcome, handle = step.act(self, item)
            except errors.KropsError as exc:
                self._fail(item, str(exc), add=True)
                continue
            self.result["results"].append(self.public(item, outcome))
            if handle is not None and step.poll is not None:
                self.pending.append([step.name, index, handle, 0.0])
        self.acted.append(step.name)

    def _gone(self, step, item):
        return step.gone is not None and step.gone(self, item)

    def _fail(self, item, error, add=False, outcome=ownership.FAILED):
        if add:
            self.result["results"].append(self.public(item, outcome, error=error))
        else:
            for entry in self.result["results"]:
                if self.label(entry) == self.label(item):
                    entry.update(outcome=outcome, error=error)
        self.result["leftovers"].append(self.label(item))

    def _await(self, names):
        """Follow the pending deletions of rows ``names`` to their end; False when the budget cut the wait
        (``resume`` in the result is then the state the next call goes on from)."""
        mine = [p for p in self.pending if p[0] in names]
        self.pending = [p for p in self.pending if p[0] not in names]
        if not mine or not self.wait:
            return True
        self.progress(f"waiting for {len(mine)} deletion(s)")
        failed, cut = _follow(self, mine)  # a watched row's deletions are watched, the rest polled
        failed_ids = {id(entry) for dummy, entry in failed}  # asked once every wait ended, in the order they began
        gone = {id(e) for e in mine if id(e) in failed_ids and self._gone(self.by_name[e[0]], self.plan[e[0]][e[1]])}
        for error, entry in failed:
            if id(entry) not in gone:
                self._fail(self.plan[entry[0]][entry[1]], error)
        if not cut:
            return True
        self.pending += cut
        self.result["resume"] = {
            "plan": self.plan,
            "held": self.held,
            "acted": self.acted,
            "pending": self.pending,
            "result": {k: v for k, v in self.result.items() if k != "resume"},
        }
        self.progress(f"budget spent: {len(self.pending)} deletion(s) still running, the next call goes on")
        return False

    def wait_for(self, entries):
        """Poll [row, index, handle, seconds waited] until each is done: ([(error, entry)] of those that failed or
        ran out of their row's share of the timeout, [entry] the budget cut, with the seconds each waited)."""
        start = self.clock()
        left = [(e, self.timeout * self.by_name[e[0]].budget) for e in entries]
        failed, cut = [], []
        while left:
            still = []
            for entry, limit in left:
                state, error = self.by_name[entry[0]].poll(self, entry[2])
                if state == FAILED:
                    failed.append((error, entry))
                elif state != DONE:
                    still.append((entry, limit))
            now = self.clock()
            left = []
            for entry, limit in still:
                if now - start + entry[3] >= limit:
                    failed.append((f"still deleting after {_seconds(limit)}s (wait_timeout)", entry))
                elif self.deadline is not None and now >= self.deadline:
                    cut.append(entry[:3] + [round(entry[3] + now - start, 3)])
                else:
                    left.append((entry, limit))
            if left:
                self.sleep(self.poll_interval)
        return failed, cut

    def _keep_held(self):
        for name, label in self.held:
            self.result["leftovers"].append(label)
            self.result["stopped_at"] = self.result.get("stopped_at") or self.by_name[name].group

    def _verify(self):
        """Discover again: every owned item still there is a leftover (``left``), or one that appeared meanwhile."""
        self.progress("verifying: discovering again")
        dummy, again, dummy2 = self.discover()
        seen = {self.label(e) for e in self.result["results"]}
        for step in self.acting:
            for item in again[step.name]:
                if self.label(item) in self.result["leftovers"]:
                    continue  # failed already, and says why
                if self.stop:
                    self.result["stopped_at"] = self.result.get("stopped_at") or step.group
                if self.label(item) in seen:
                    self._fail(item, "still present after the teardown", outcome=self.left)
                elif self.appeared:
                    self._fail(item, "appeared during the teardown", add=True, outcome=self.left)
                else:
                    self.result["leftovers"].append(self.label(item))


# --- rows followed by a watch: one blocking call per row instead of a poll per deletion ---------------------------


def _unpolled(run, handle):
    raise TypeError("a WatchedRow is watched, never polled")


class WatchedRow(Row):
    """A row whose pending deletions are followed together by one blocking call, ``watch(run, handles, seconds)``,
    instead of a poll each: a Kubernetes watch wakes on each change, where a poll sleeps ``poll_interval``
    between looks. ``watch`` returns, for each handle in order, what a poll answers: ``(DONE, None)``, ``(FAILED,
    error)``, or ``(PENDING, state)`` when ``seconds`` ran out with the deletion still going (``state``: how it
    stands, or None). Everything else (order, stops, the budget and resume, the verification pass) is the engine's,
    as for any row."""

    def __init__(self, name, discover, act, watch, **kw):
        if "poll" in kw:
            raise TypeError(f"Row {name}: a WatchedRow is followed by its watch, it takes no poll")
        super().__init__(name, discover, act, poll=_unpolled, **kw)  # a poll, so that the engine keeps the handles
        self.watch = watch


def _follow(run, entries):
    """Run.wait_for, the entries of WatchedRows watched row by row (each for its share of the timeout, less what
    it waited before a cut, and never past the budget), the rest polled: ([(error, entry)], [entry cut])."""
    watched = [e for e in entries if isinstance(run.by_name[e[0]], WatchedRow)]
    polled = [e for e in entries if not isinstance(run.by_name[e[0]], WatchedRow)]
    failed, cut = run.wait_for(polled) if polled else ([], [])
    for name in dict.fromkeys(e[0] for e in watched):
        mine = [e for e in watched if e[0] == name]
        limit = run.timeout * run.by_name[name].budget
        seconds = limit - max(e[3] for e in mine)
        budget_left = None if run.deadline is None else run.deadline - run.clock()
        by_budget = budget_left is not None and budget_left < seconds
        start = run.clock()
        answers = run.by_name[name].watch(run, [e[2] for e in mine], max(0.0, budget_left if by_budget else seconds))
        spent = run.clock() - start
        for entry, (state, text) in zip(mine, answers):
            if state == FAILED:
                failed.append((text, entry))
            elif state != DONE and by_budget:
                cut.append(entry[:3] + [round(entry[3] + spent, 3)])
            elif state != DONE:
                failed.append(
                    (f"still deleting after {_seconds(limit)}s (wait_timeout)" + (f": {text}" if text else ""), entry)
                )
    return failed, cut


# --- the orphan report: discovery only, with each owned item's age --------------------------------------------

ORPHAN = "orphan"  # the outcome of an entry of an orphan report (the AWS sweep's report says the same)
_RFC3339 = re.compile(r"^(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d+))?([Zz]|[+-]\d\d:\d\d)$")


def created_at(text):
    """An aware UTC datetime of a creation time as a cloud states it (RFC 3339: ARM's systemData.createdAt with
    seven fractional digits, Google's creationTimestamp with an offset); None when absent or not such a time."""
    match = _RFC3339.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        zone_of = datetime.UTC
        if zone not in "Zz":
            sign = -1 if zone[0] == "-" else 1
            zone_of = datetime.timezone(sign * datetime.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
        micro = int((fraction or "0")[:6].ljust(6, "0"))
        when = datetime.datetime(*map(int, (year, month, day, hour, minute, second)), micro, tzinfo=zone_of)
        return when.astimezone(datetime.UTC)
    except (ValueError, OverflowError):  # a month 13, an offset of 25 hours, a year 9999 past UTC: not a time
        return None


def report(run, now, min_age_hours):
    """The orphan report of a table of rows: (the run's result, the entries).

    ``run`` must be in check mode: it discovers and plans, and writes nothing. Each owned item of an acting row
    that is at least ``min_age_hours`` old (``now``: an aware datetime) is an entry, in the table's order: its
    result entry (``run.public``) with outcome ``orphan``, its row's ``stage`` (``group``), ``created`` (UTC, ISO
    8601) and ``age_hours`` (to a tenth). An item whose row found no creation time (the cloud gives none for
    that type, or gave none) has both None, and one created after ``now`` has no age: both are always reported, the
    report does not know they are young.
    """
    if not run.check_mode:
        raise ValueError("steps.report needs a run in check mode: a report writes nothing")
    result = run.execute()
    entries = []
    for step in run.acting:
        for item in run.plan[step.name]:
            created = created_at(item.get("_created"))
            # a creation time after now (a skewed clock, a bogus stamp) is no age: the item is always reported
            age = None if created is None or created > now else round((now - created).total_seconds() / 3600.0, 1)
            if age is not None and age < min_age_hours:
                continue
            entry = run.public(item, ORPHAN)
            entry.update(stage=step.group, created=created.isoformat() if created else None, age_hours=age)
            entries.append(entry)
    return result, entries
