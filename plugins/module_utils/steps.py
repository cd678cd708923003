# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""One engine for stepped deletions (issue 24): a table of rows (``Row``, one step each), run by a ``Run``.

A row says what one resource type is: how its owned resources are found (``discover``), how one is
deleted (``act``), the line check mode prints for it (``plan``), how a deletion that takes time is
followed (``poll``), which rows must be finished first (``after``) and what share of the wait timeout
its wait may take (``budget``). The rows files (gcp_rows.py, azure_rows.py; the AWS sweep's per-service
files through aws_delete.sweep_row) hold the rows; the engine owns the rest:

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

Side by side (what a sweep of many resources needs, the AWS sweep's): rows of one ``chain`` run in table
order, each row's deletions followed to their end before the next row of its chain, the chains side by
side in threads, the rows without a chain after every chain, and the results in table order; a row's
``workers`` (else the run's) act on its items side by side; ``before(run, items)`` gives the items to act
on right before the row acts (re-listed, reordered; they become the row's plan); a timed row's deletions
(``poll_all``: one call for all of them, ``first_poll``: seconds before the first poll, ``interval``) are
followed by ``Run.wait_timed``; ``execute_each`` runs several runs (one per region) side by side; and
``verify=False`` leaves the verification pass to the caller (``Run.verification``, once every run ended), which may
discover through a scan of its own (``rescan``) and let it alone decide what is left (``decides``: every owned
item it finds, in ``found``; a failed deletion whose item is gone left nothing).

The orphan report (cloud_report.orphans) is the same table read only: a run in check mode gives every owned item
the discovery found, and each one's age comes from the creation time its row put in the item (``_created``, the
cloud's own text: RFC 3339). Every cloud on this engine gets its report from that one function.

The stepped modules (capi_pivot's phases, flux_handoff's setup and wait) run a ``Sequence`` of ``Phase``s, each once
and in order, with ``stop_after``; their long waits go through ``Waits``, which the call's budget may cut (a
``Pending``, a value): the same resume protocol, in the one shape the action plugins carry (``STEP_STATE``).

Importable without Ansible and without any cloud SDK.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

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
        self._side_by_side_options(kw)
        if kw:
            raise TypeError("Row {}: unknown {}".format(name, ", ".join(sorted(kw))))
        if not 0 < self.budget <= 1:
            raise ValueError(f"Row {name}: budget is a share of the wait timeout, above 0 and at most 1")

    def _side_by_side_options(self, kw):
        """The options of a row in a sweep of many resources (the AWS sweep's): see ``Run`` (side by side)."""
        self.chain = kw.pop("chain", None)  # the rows of one chain run in table order, the chains side by side
        self.workers = kw.pop("workers", None)  # items acted on at a time (None: the run's ``workers``)
        self.before = kw.pop("before", None)  # before(run, items): the items to act on now (re-listed, reordered)
        self.poll_all = kw.pop("poll_all", None)  # poll_all(run, handles): [(state, detail)], one call for them all
        self.first_poll = kw.pop("first_poll", 0)  # seconds before the first poll (or a callable giving them)
        self.interval = kw.pop("interval", None)  # seconds between polls, or a callable of the polls made so far
        if (self.first_poll or self.interval) and self.poll is None and self.poll_all is None:
            raise ValueError(f"Row {self.name}: a first poll or an interval needs a poll or poll_all")

    @property
    def followed(self):
        """Whether the row's deletions can be followed (a poll, one by one or all at once)."""
        return self.poll is not None or self.poll_all is not None

    @property
    def timed(self):
        """Whether its waits are Run.wait_timed's (a first poll delay, an interval of its own, or poll_all)."""
        return bool(self.first_poll or self.interval is not None or self.poll_all is not None)

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
_OPTIONS.update(workers=1, verify=True, rescan=None, decides=False)  # a row's ``workers`` wins; the verification pass


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
        self.plan, self.held, self.result, self.progress_lines, self.found = {}, [], {}, [], []
        self.acted = list(self.resume.get("acted") or ())
        self.pending = [list(p) for p in self.resume.get("pending") or ()]  # [row, item index, handle, waited]
        self._lock = threading.Lock()  # rows side by side (chains) share the pending deletions

    def progress(self, text):
        self.progress_lines.append(f"{self.clock() - self.started:.1f}s {text}")
        if self._hook is not None:
            self._hook(text)

    def discover(self, scan=None):
        """(scan, {row: items}, held): every row's owned items (through ``scan``, else the run's), then settled."""
        scan = (scan or self.scan)()
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
                if self.wait and self.result["changed"] and self.verify:
                    self.verification()
        except errors.KropsError as exc:
            if not exc.result:
                exc.result = dict(self.result)
            raise
        return self.result

    def _steps(self):
        """Act on every row in order; False when one stopped the run or the budget cut a wait."""
        if any(s.chain for s in self.acting):  # the chains side by side, then the rest (Run._chains)
            try:
                return self._chains() and self._in_order([s for s in self.acting if not s.chain])
            finally:
                self._table_order()
        return self._in_order(self.acting)

    def _in_order(self, rows):
        """Act on ``rows`` in order; False when one stopped the run or the budget cut a wait."""
        for step in rows:
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
        if step.before is not None:  # the items as they are now, in the order to act on them (Row ``before``)
            found = step.before(self, self.plan[step.name])
            self.plan[step.name] = self.plan[step.name] if found is None else list(found)
        if self.plan[step.name]:
            self.progress(f"{step.name}: deleting {len(self.plan[step.name])}")
        workers = step.workers or self.workers
        answers = side_by_side(lambda item: _act_one(self, step, item), self.plan[step.name], workers)
        for index, (item, (outcome, handle, error)) in enumerate(zip(self.plan[step.name], answers)):
            if error is not None:
                self._fail(item, error, add=True)
                continue
            self.result["results"].append(self.public(item, outcome))
            if handle is not None and step.followed:
                with self._lock:
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
        with self._lock:
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
        with self._lock:
            self.pending += cut
        self._suspend()
        self.progress(f"budget spent: {len(self.pending)} deletion(s) still running, the next call goes on")
        return False

    def _suspend(self):
        self.result["resume"] = self.state()

    def state(self):
        """The state a later call goes on from (``resume``): the result's when the budget cut a wait."""
        result = {k: v for k, v in self.result.items() if k != "resume"}
        return {"plan": self.plan, "held": self.held, "acted": self.acted, "pending": self.pending, "result": result}

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

    def verification(self):
        """Discover again (``rescan``): every owned item still there is a leftover (``left``), or one that appeared
        meanwhile; with ``decides``, exactly what it finds (``found``), and no result entry changes."""
        self.progress("verifying: discovering again")
        dummy, again, dummy2 = self.discover(self.rescan)
        if self.decides:
            self.found = [item for step in self.acting for item in again[step.name]]
            self.result["leftovers"] = [self.label(item) for item in self.found]
            return
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

    # --- side by side: chains, timed waits (the options of Row._side_by_side_options) ---------------------------

    def _chains(self):
        """The rows that have a ``chain``: each chain's rows in table order, each row's deletions followed to their
        end before the next row of its chain starts, the chains side by side (threads); False when a chain stopped
        or the budget cut one of its waits (the rows without a chain then wait for the next call)."""
        chains = {}
        for step in self.acting:
            if step.chain:
                chains.setdefault(step.chain, []).append(step)
        ends = side_by_side(self._chain, list(chains.values()), len(chains))
        if "resume" in self.result:  # a cut chain wrote it while others ran on: the state once every chain ended
            self._suspend()
        return all(ends)

    def _chain(self, rows):
        for step in rows:
            if step.name not in self.acted:
                self._act(step)
            if not self._await([step.name]):
                return False
            if self.stop and self._left(step.name):
                with self._lock:
                    self.result.setdefault("stopped_at", step.group)
                return False
        return True

    def _table_order(self):
        """The results in table order (rows side by side report in the order they end)."""
        order = {self.label(i): n for n, s in enumerate(self.steps) for i in self.plan[s.name]}
        self.result["results"].sort(key=lambda entry: order.get(self.label(entry), len(order)))

    def wait_timed(self, entries):
        """wait_for for rows with a first poll delay, an interval or poll_all (Row ``timed``), with the same answer:
        each row's deletions are polled together (one poll_all call, else one poll each), the first time
        ``first_poll`` seconds after they began (the seconds waited before a cut count), then every ``interval``
        (else the run's poll_interval); a wait never sleeps past its timeout or the budget."""
        waits = {}
        for entry in entries:
            waits.setdefault(entry[0], []).append(entry)
        waits = [_Wait(self, self.by_name[name], group) for name, group in waits.items()]
        failed, cut = [], []
        while any(w.left for w in waits):
            for wait in waits:
                if wait.left and self.clock() >= wait.next:
                    failed += wait.poll()
            now = self.clock()
            for wait in (w for w in waits if w.left):
                if now >= wait.deadline:
                    failed += wait.timed_out()
                elif self.deadline is not None and now >= self.deadline:
                    cut += wait.cut(now)
            busy = [w for w in waits if w.left]
            if busy:
                ends = [w.deadline for w in busy] + ([] if self.deadline is None else [self.deadline])
                self.sleep(max(0.0, min(min(w.next for w in busy), *ends) - now))
        return failed, cut


class _Wait:
    """The deletions of one row that Run.wait_timed follows."""

    def __init__(self, run, step, entries):
        self.run, self.step, self.left, self.details, self.polls = run, step, list(entries), {}, 0
        self.limit = run.timeout * step.budget
        self.began = run.clock() - max(e[3] for e in entries)
        self.deadline = self.began + self.limit
        first = step.first_poll() if callable(step.first_poll) else step.first_poll
        self.next = self.began + min(float(first or 0), self.limit)

    def poll(self):
        """Poll what is left once; [(error, entry)] of what failed."""
        run, step = self.run, self.step
        handles = [e[2] for e in self.left]
        answers = step.poll_all(run, handles) if step.poll_all else [step.poll(run, h) for h in handles]
        self.polls += 1
        failed, still = [], []
        for entry, (state, detail) in zip(self.left, answers):
            if state == FAILED:
                failed.append((detail, entry))
            elif state != DONE:
                still.append(entry)
                self.details[id(entry)] = detail
        self.left = still
        if still and self.polls > 1:
            names = ", ".join(run.label(run.plan[e[0]][e[1]]) for e in still[:5])
            run.progress(f"{step.name}: still deleting {names}")
        pause = step.interval if step.interval is not None else run.poll_interval
        self.next = run.clock() + (pause(self.polls) if callable(pause) else pause)
        return failed

    def timed_out(self):
        failed = [
            (f"still {self.details.get(id(e)) or 'deleting'} after {_seconds(self.limit)}s (wait_timeout)", e)
            for e in self.left
        ]
        self.left = []
        return failed

    def cut(self, now):
        cut = [e[:3] + [round(now - self.began, 3)] for e in self.left]
        self.left = []
        return cut


def _act_one(run, step, item):
    """(outcome, handle, None) of one item's deletion, or (None, None, error) when it cannot go."""
    try:
        outcome, handle = step.act(run, item)
    except errors.KropsError as exc:
        return None, None, str(exc)
    return outcome, handle, None


def side_by_side(func, items, workers):
    """[func(item) for item in items], up to ``workers`` at a time (in this thread when 1); the answers in the order
    of items, and the first item's error in that order raised."""
    items = list(items)
    if workers <= 1 or len(items) <= 1:
        return [func(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(func, items))


def execute_each(runs, workers):
    """The results of several runs (one per region, say) side by side, up to ``workers`` at a time, in order."""
    return side_by_side(lambda run: run.execute(), runs, workers)


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
    failed, cut = [], []
    if polled:  # a timed row's deletions (a first poll delay, an interval, poll_all) by wait_timed
        timed = any(run.by_name[e[0]].timed for e in polled)
        failed, cut = run.wait_timed(polled) if timed else run.wait_for(polled)
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


# --- a sequence: steps run once each, in order, with waits the call's budget may cut -------------------------------
#
# The stepped modules (capi_pivot's phases, flux_handoff's setup and wait) are not deletions: each step runs once, in
# table order, and a long wait in it may outlast the budget of one call (the action plugin runs the module in calls of
# about progress_interval seconds, plugin_utils/stepped.py). The resume protocol is the one above (a ``budget``, the
# result's resume state, ``resume=state`` on the next call), in one shape for every stepped module: STEP_STATE.

STEP_STATE = dict(_wait_budget=dict(type="int"), _resume=dict(type="dict"))  # module_utils/stepping.py carries it
PENDING_KEY, RESUME_KEY = "_krops_pending", "_krops_resume"  # a pending result: True, and the state to resume from


class Pending:
    """A wait that ran out of the call's budget, not of its timeout: a value, not an error (``Waits.wait`` returns it,
    the step returns at once, and the sequence returns a pending result). ``info`` names the wait (``key``, the
    ``step`` it is in and that step's ``number``, ``title``) and says its whole timeout (``total``), the seconds spent on
    it in all calls so far (``waited``) and in this one (``took``), and what it still waits for (``state``)."""

    def __init__(self, **info):
        self.info = info


class Waits:
    """The waits of one call: ``budget`` is what the call may spend (None: each wait may take its whole timeout) and
    ``resume`` the state of the previous call's pending result: ``spent`` ({wait key: seconds spent on it so far}),
    ``done`` (the steps that are not run again) and ``wait`` (the wait that was cut). ``cut`` is the exception a
    watch raises when its limit passes, with the last state it saw in ``state``."""

    def __init__(self, budget=None, resume=None, cut=TimeoutError, clock=time.monotonic):
        resume = dict(resume or {})
        self.cut, self.clock = cut, clock
        self.deadline = None if budget is None else clock() + max(0.0, float(budget))
        self.spent, self.done = dict(resume.get("spent") or {}), list(resume.get("done") or ())
        self.pending = None

    def left(self, key, timeout):
        """Seconds the wait ``key`` may still take: ``timeout`` less what earlier calls spent on it."""
        try:
            spent = float(self.spent.get(key) or 0)
        except (TypeError, ValueError):
            spent = 0.0
        return timeout if spent <= 0 else max(0.0, timeout - spent)

    def wait(self, key, total, seconds, watch, describe, final=None, **names):
        """``watch(limit)`` for the wait ``key``, which may still take ``seconds`` of ``total``; None when it ended.

        When the budget left covers ``seconds`` (or ``final`` says so), this is ``watch(seconds)`` and its timeout
        propagates as in a single call. Otherwise the watch stops when the budget runs out: the Pending returned
        (also ``self.pending``) says ``describe(state)`` and the time spent; ``names`` name the wait in it."""
        if final is None:
            final = self.deadline is None or self.deadline - self.clock() >= seconds
        if final:
            watch(seconds)
            return None
        began = self.clock()
        try:
            watch(max(0.1, self.deadline - began))
        except self.cut as exc:
            took = self.clock() - began
            waited = round(float(total - seconds + took), 3)
            info = dict(key=key, **names, total=int(total), waited=waited, took=round(took, 3))
            self.pending = Pending(**info, state=describe(exc.state))
        return self.pending

    def pause(self, result):
        """``result`` made pending: the resume state the next call goes on from, the cut wait's time in ``spent``."""
        info = self.pending.info
        result[PENDING_KEY] = True
        result[RESUME_KEY] = {
            "spent": dict(self.spent, **{info["key"]: info["waited"]}),
            "done": self.done,
            "wait": info,
        }
        return result


class Phase:
    """One step of a sequence: ``run(state)`` does it; ``title`` names it. A call that resumes runs it again (it is
    idempotent and sets up what later steps read) unless ``redo`` is false: then a phase done is not run again.
    (shell.Step is the other step: the one a module's body announces.)"""

    def __init__(self, name, run, title="", redo=True):
        self.name, self.run, self.title, self.redo = name, run, title, redo


class Sequence:
    """Steps run in table order over one ``state`` (what ``run`` gets), filling ``result``.

    ``stop_after`` names the last step to run, and ``reached`` the result key that names the last step done. A wait
    the budget cut (``waits.pending``) ends the call with a pending result (``Waits.pause``). An expected error
    (errors.KropsError) raised by a step carries the result so far, merged under its own, and the step's name in
    ``step`` unless it names one; ``translate`` is ``(classes, make)``: a foreign library's error of those classes
    becomes ``make(error)``, an errors.KropsError, at the step's boundary (a step need not catch it)."""

    def __init__(self, table, state, result, waits, stop_after=None, reached=None, translate=((), None)):
        self.table, self.state, self.result, self.waits = list(table), state, result, waits
        self.stop_after, self.reached, self.translate = stop_after, reached, translate
        names = [step.name for step in self.table]
        if stop_after is not None and stop_after not in names:
            raise ValueError("stop_after must be one of {}, got {!r}".format(", ".join(names), stop_after))

    def execute(self):
        """The result: of every step up to ``stop_after``, or pending when a wait was cut."""
        names = [step.name for step in self.table]
        for step in self.table:
            if not step.redo and step.name in self.waits.done:
                continue
            self._run(step)
            if self.waits.pending is not None:  # nothing failed: the next call resumes
                info = self.waits.pending.info
                info["step"] = info.get("step") or step.name
                info["number"] = names.index(info["step"])
                return self.waits.pause(self.result)
            if step.name not in self.waits.done:
                self.waits.done.append(step.name)
            if self.reached:
                self.result[self.reached] = step.name
            if step.name == self.stop_after:
                break
        return self.result

    def _run(self, step):
        classes, make = self.translate
        try:
            try:
                step.run(self.state)
            except classes as exc:
                raise make(exc) from exc
        except errors.KropsError as exc:
            exc.step = exc.step or step.name
            merged = dict(self.result)
            merged.update(exc.result or {})
            exc.result = merged
            raise
