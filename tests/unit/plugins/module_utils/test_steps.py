# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The steps engine on its own (plugins/module_utils/steps.py): a fake cloud of named things, rows over it."""

from __future__ import annotations

import json

import pytest

from ansible_collections.krops.platform.plugins.module_utils import errors, steps


class World:
    """Things by type; a deletion takes ``slow`` polls (0: final at once); ``calls`` records every act and poll."""

    def __init__(self, **things):
        self.things = {t: list(names) for t, names in things.items()}
        self.slow, self.failing, self.calls, self.scans, self.now = {}, {}, [], 0, 0.0

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += 1.0

    def discover(self, rtype):
        def listed(scan):
            return [{"type": rtype, "name": n, "reason": "ours"} for n in self.things.get(rtype, [])]

        return listed

    def act(self, run, item):
        self.calls.append(("act", item["type"], item["name"]))
        if item["name"] in self.failing:
            raise errors.CloudError(self.failing[item["name"]])
        if self.slow.get(item["name"]):
            return "deleted", {"name": item["name"], "type": item["type"]}
        self.things[item["type"]].remove(item["name"])
        return "deleted", None

    def poll(self, run, handle):
        self.calls.append(("poll", handle["type"], handle["name"]))
        self.slow[handle["name"]] -= 1
        if self.slow[handle["name"]] > 0:
            return steps.PENDING, None
        self.things[handle["type"]].remove(handle["name"])
        return steps.DONE, None

    def scan(self):
        self.scans += 1
        return self

    def row(self, rtype, after=(), **kw):
        return steps.Row(rtype, self.discover(rtype), self.act, poll=self.poll, after=after, **kw)

    def run(self, rows, **options):
        options.setdefault("timeout", 10)
        return steps.Run(rows, self, self.scan, sleep=self.sleep, clock=self.clock, poll_interval=1, **options)


def acts(world):
    return [(t, n) for kind, t, n in world.calls if kind == "act"]


def test_rows_run_in_table_order_each_after_the_rows_it_depends_on():
    w = World(net=["n1"], subnet=["s1"], vm=["v1", "v2"])
    rows = [w.row("net", after=["subnet"]), w.row("subnet", after=["vm"]), w.row("vm")]
    result = w.run(rows).execute()
    assert acts(w) == [("vm", "v1"), ("vm", "v2"), ("subnet", "s1"), ("net", "n1")]
    assert result["plan"] == [
        "delete vm v1 (ours)",
        "delete vm v2 (ours)",
        "delete subnet s1 (ours)",
        "delete net n1 (ours)",
    ]
    assert result["leftovers"] == [] and "stopped_at" not in result and result["changed"] is True
    with pytest.raises(ValueError, match="rows a -> b -> a depend on each other"):
        steps.ordered([w.row("a", after=["b"]), w.row("b", after=["a"])])
    with pytest.raises(ValueError, match="row a runs after 'c', which is no row"):
        steps.ordered([w.row("a", after=["c"])])


def test_a_row_waits_for_its_dependencies_deletions_and_rows_without_one_do_not_wait():
    w = World(vm=["v1"], disk=["d1"], net=["n1"])
    w.slow = {"v1": 3, "d1": 2}
    w.run([w.row("vm"), w.row("disk"), w.row("net", after=["vm", "disk"])]).execute()
    # both deletions started before either was polled; net only once both were done
    assert w.calls == [
        ("act", "vm", "v1"),
        ("act", "disk", "d1"),
        ("poll", "vm", "v1"),
        ("poll", "disk", "d1"),
        ("poll", "vm", "v1"),
        ("poll", "disk", "d1"),
        ("poll", "vm", "v1"),
        ("act", "net", "n1"),
    ]


def test_check_mode_discovers_and_plans_and_writes_nothing():
    w = World(vm=["v1"], net=["n1"])
    rows = [w.row("vm"), w.row("net", after=["vm"], plan="remove {type} {name} ({reason})")]
    result = w.run(rows, check_mode=True).execute()
    assert w.calls == [] and w.things == {"vm": ["v1"], "net": ["n1"]}
    assert result["plan"] == ["delete vm v1 (ours)", "remove net n1 (ours)"]
    assert [(r["name"], r["outcome"]) for r in result["results"]] == [("v1", "planned"), ("n1", "planned")]
    assert w.scans == 1  # no verification pass


def test_a_failing_action_keeps_the_partial_result_and_stops_what_depends_on_it():
    w = World(vm=["v1", "v2"], net=["n1"])
    w.failing = {"v1": "v1 is protected"}
    result = w.run([w.row("vm", group="machines"), w.row("net", after=["vm"])]).execute()
    assert acts(w) == [("vm", "v1"), ("vm", "v2")]  # the row goes on; what depends on it does not start
    assert [(r["name"], r["outcome"], r.get("error")) for r in result["results"]] == [
        ("v1", "failed", "v1 is protected"),
        ("v2", "deleted", None),
    ]
    assert result["leftovers"] == ["vm/v1"] and result["stopped_at"] == "machines"
    assert w.scans == 1  # a stopped run has no verification pass


def test_without_stop_every_row_runs_and_the_verification_pass_decides():
    w = World(vm=["v1"], net=["n1"])
    w.failing = {"v1": "refused"}
    result = w.run([w.row("vm"), w.row("net")], stop=False).execute()
    assert acts(w) == [("vm", "v1"), ("net", "n1")]
    assert result["leftovers"] == ["vm/v1"] and "stopped_at" not in result and w.scans == 2


def test_an_error_after_the_discovery_carries_the_result_so_far():
    w = World(vm=["v1"], net=["n1"])
    w.slow = {"n1": 2}

    def broken(run, handle):
        raise errors.CloudError("the API answered 500")

    rows = [w.row("vm"), steps.Row("net", w.discover("net"), w.act, poll=broken, after=["vm"])]
    with pytest.raises(errors.CloudError) as caught:
        w.run(rows).execute()
    assert caught.value.message == "the API answered 500"
    assert [(r["name"], r["outcome"]) for r in caught.value.result["results"]] == [("v1", "deleted"), ("n1", "deleted")]
    assert caught.value.result["plan"] == ["delete vm v1 (ours)", "delete net n1 (ours)"]


def test_the_verification_pass_fails_on_a_leftover_and_on_what_appeared():
    w = World(vm=["v1", "v2"])

    def sticky(run, item):  # answers deleted, but v2 stays, and v3 appears
        w.calls.append(("act", item["type"], item["name"]))
        if item["name"] == "v1":
            w.things["vm"].remove("v1")
        if item["name"] == "v2":
            w.things["vm"].append("v3")
        return "deleted", None

    result = w.run([steps.Row("vm", w.discover("vm"), sticky)]).execute()
    assert result["leftovers"] == ["vm/v2", "vm/v3"] and result["stopped_at"] == "vm"
    assert [(r["name"], r["outcome"], r.get("error")) for r in result["results"]] == [
        ("v1", "deleted", None),
        ("v2", "left", "still present after the teardown"),
        ("v3", "left", "appeared during the teardown"),
    ]
    w = World(vm=["v2"])  # the same world, where each item stays a leftover, not a result entry of its own
    quiet = w.run([steps.Row("vm", w.discover("vm"), sticky)], left="failed", appeared=False, stop=False).execute()
    assert quiet["leftovers"] == ["vm/v2", "vm/v3"] and "stopped_at" not in quiet
    assert [(r["name"], r["outcome"], r.get("error")) for r in quiet["results"]] == [
        ("v2", "failed", "still present after the teardown")
    ]


def test_a_wait_past_the_rows_share_of_the_timeout_fails_and_a_gone_item_is_forgiven():
    w = World(vm=["v1"], disk=["d1"])
    w.slow = {"v1": 100, "d1": 100}

    def gone(run, item):  # asked once the waits ended: its parent took it along meanwhile
        w.things["disk"].remove(item["name"])
        return True

    rows = [w.row("vm", budget=0.5), w.row("disk", gone=gone)]
    result = w.run(rows, timeout=4, stop=False).execute()
    [vm, disk] = result["results"]
    assert (vm["outcome"], vm["error"]) == ("failed", "still deleting after 2s (wait_timeout)")
    assert disk["outcome"] == "deleted"  # its wait ran out too (after 4 s), but it is gone
    assert result["leftovers"] == ["vm/v1"] and w.now == 4.0


def test_the_budget_cuts_a_wait_and_the_resume_state_goes_on_without_acting_or_discovering_again():
    w = World(vm=["v1", "v2"], net=["n1"])
    w.slow = {"v1": 5, "v2": 2}
    rows = [w.row("vm"), w.row("net", after=["vm"])]
    first = w.run(rows, budget=2).execute()
    state = json.loads(json.dumps(first["resume"]))  # what the next call gets is JSON
    assert acts(w) == [("vm", "v1"), ("vm", "v2")] and w.scans == 1
    assert [p[:3] for p in state["pending"]] == [["vm", 0, {"name": "v1", "type": "vm"}]]
    assert first["leftovers"] == [] and "stopped_at" not in first
    w.calls = []
    second = w.run(rows, resume=state).execute()
    assert acts(w) == [("net", "n1")]  # vm was acted on already: only its wait goes on
    assert [c for c in w.calls if c[0] == "poll"] == [("poll", "vm", "v1")] * 2
    assert w.scans == 2  # no discovery again: the verification pass only
    assert [(r["name"], r["outcome"]) for r in second["results"]] == [
        ("v1", "deleted"),
        ("v2", "deleted"),
        ("n1", "deleted"),
    ]
    assert second["leftovers"] == [] and "resume" not in second and w.things == {"vm": [], "net": []}


def test_the_seconds_a_wait_spent_before_the_cut_count_against_its_timeout():
    w = World(vm=["v1"])
    w.slow = {"v1": 100}
    first = w.run([w.row("vm")], budget=3, timeout=5).execute()
    assert first["resume"]["pending"][0][3] == 3.0
    second = w.run([w.row("vm")], timeout=5, resume=first["resume"]).execute()
    assert second["results"][0]["error"] == "still deleting after 5s (wait_timeout)"
    assert w.now == 5.0  # 3 s in the first call, 2 in the second


def test_rows_and_runs_refuse_what_they_do_not_know():
    with pytest.raises(TypeError, match="Row x: unknown colour"):
        steps.Row("x", None, None, colour="red")
    with pytest.raises(ValueError, match="budget is a share of the wait timeout"):
        steps.Row("x", None, None, budget=2)
    with pytest.raises(TypeError, match="Run: unknown speed"):
        steps.Run([], None, None, speed=1)


def test_the_engine_imports_no_cloud_library():
    import ast
    import pathlib

    tree = ast.parse(pathlib.Path(steps.__file__).read_text(encoding="utf-8"))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not [n for n in names if n and n.split(".")[0] in ("boto3", "botocore", "google", "azure", "kubernetes")]


class Watcher:
    """A WatchedRow's watch over World: each call takes ``seconds`` of the clock and removes the things not in
    ``stuck``; those stay PENDING with the state "Deleting"."""

    def __init__(self, world, stuck=()):
        self.world, self.stuck, self.calls = world, set(stuck), []

    def __call__(self, run, handles, seconds):
        self.calls.append(([h["name"] for h in handles], seconds))
        self.world.now += seconds if self.stuck else 1.0
        answers = []
        for h in handles:
            if h["name"] in self.stuck:
                answers.append((steps.PENDING, "Deleting"))
            else:
                self.world.things[h["type"]].remove(h["name"])
                answers.append((steps.DONE, None))
        return answers

    def row(self, rtype, **kw):
        return steps.WatchedRow(rtype, self.world.discover(rtype), self.world.act, self, **kw)


def test_a_watched_rows_deletions_are_followed_by_one_watch_not_polled():
    """steps.WatchedRow (the Kubernetes rows, kube_rows.py): one blocking call follows the row's pending deletions,
    for the row's share of the timeout; nothing polls them and nothing sleeps."""
    w = World(vm=["v1", "v2"], net=["n1"])
    w.slow = {"v1": 1, "v2": 1, "n1": 1}
    watcher = Watcher(w)
    result = w.run([watcher.row("vm", budget=0.5), w.row("net", after=["vm"])]).execute()
    assert watcher.calls == [(["v1", "v2"], 5.0)]  # half of the 10 s timeout
    assert acts(w) == [("vm", "v1"), ("vm", "v2"), ("net", "n1")]
    assert [c for c in w.calls if c[0] == "poll"] == [("poll", "net", "n1")]
    assert result["leftovers"] == [] and w.things == {"vm": [], "net": []}
    with pytest.raises(TypeError, match="Row x: a WatchedRow is followed by its watch, it takes no poll"):
        steps.WatchedRow("x", None, None, watcher, poll=w.poll)


def test_what_a_watch_leaves_fails_with_its_state_and_stops_what_depends_on_it():
    w = World(vm=["v1", "v2"], net=["n1"])
    w.slow = {"v1": 1, "v2": 1}
    watcher = Watcher(w, stuck={"v2"})
    result = w.run([watcher.row("vm"), w.row("net", after=["vm"])]).execute()
    assert [(r["name"], r["outcome"], r.get("error")) for r in result["results"]] == [
        ("v1", "deleted", None),
        ("v2", "failed", "still deleting after 10s (wait_timeout): Deleting"),
    ]
    assert acts(w) == [("vm", "v1"), ("vm", "v2")]  # net depends on vm, which left v2
    assert result["leftovers"] == ["vm/v2"] and result["stopped_at"] == "vm"


def test_a_budget_that_ends_first_cuts_a_watch_and_the_resume_goes_on_with_what_is_left_of_its_share():
    w = World(vm=["v1"])
    w.slow = {"v1": 1}
    watcher = Watcher(w, stuck={"v1"})
    first = w.run([watcher.row("vm")], budget=3).execute()
    assert watcher.calls == [(["v1"], 3.0)] and first["resume"]["pending"][0][3] == 3.0
    assert first["leftovers"] == []
    watcher.stuck = set()
    second = w.run([watcher.row("vm")], resume=json.loads(json.dumps(first["resume"]))).execute()
    assert watcher.calls[1] == (["v1"], 7.0)  # the 10 s timeout less the 3 s the first call watched
    assert second["leftovers"] == [] and w.things == {"vm": []}
