# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The steps engine on its own (plugins/module_utils/steps.py): a fake cloud of named things, rows over it."""

from __future__ import annotations

import json
import threading

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


# --- a sequence of steps with budgeted waits (steps.Sequence, steps.Waits) ---------------------------------------


class Cut(Exception):
    def __init__(self, state):
        super().__init__(state)
        self.state = state


class Clock:
    """A clock and a thing that is ready once ``ready_at`` seconds have passed; ``watch(limit)`` waits for it."""

    def __init__(self, ready_at):
        self.now, self.ready_at, self.limits = 0.0, ready_at, []

    def __call__(self):
        return self.now

    def watch(self, limit):
        self.limits.append(limit)
        if self.now + limit < self.ready_at:
            self.now += limit
            raise Cut(f"{self.ready_at - self.now:g}s to go")
        self.now = max(self.now, self.ready_at)


def sequence(clock, ran, budget=None, resume=None, **options):
    waits = steps.Waits(budget, resume, cut=Cut, clock=clock)
    result = {"reached": None}

    def plain(name):
        return lambda state: ran.append(name)

    def waiting(state):
        ran.append("wait")
        key, total = "thing", 100
        if waits.wait(key, total, waits.left(key, total), clock.watch, lambda left: "not yet: " + left, title="thing"):
            return
        ran.append("waited")

    table = [
        steps.Phase("setup", plain("setup"), redo=False),
        steps.Phase("check", plain("check")),
        steps.Phase("wait", waiting, "the thing"),
        steps.Phase("after", plain("after")),
    ]
    return steps.Sequence(table, None, result, waits, reached="reached", **options), result


def test_a_sequence_runs_its_steps_in_order_up_to_stop_after():
    ran = []
    run, result = sequence(Clock(0), ran, stop_after="wait")
    assert run.execute() is result and result == {"reached": "wait"}
    assert ran == ["setup", "check", "wait", "waited"]
    with pytest.raises(ValueError, match="stop_after must be one of setup, check, wait, after, got 'later'"):
        sequence(Clock(0), [], stop_after="later")


def test_a_wait_the_budget_cuts_is_a_pending_result_and_the_next_call_resumes_it():
    clock, ran = Clock(ready_at=25), []
    first = sequence(clock, ran, budget=10)[0].execute()
    assert ran == ["setup", "check", "wait"] and first[steps.PENDING_KEY] is True and first["reached"] == "check"
    state = first[steps.RESUME_KEY]
    assert state == {
        "spent": {"thing": 10.0},
        "done": ["setup", "check"],
        "wait": {
            "key": "thing",
            "title": "thing",
            "total": 100,
            "waited": 10.0,
            "took": 10.0,
            "state": "not yet: 15s to go",
            "step": "wait",
            "number": 2,
        },
    }
    assert not isinstance(steps.Pending(), BaseException)  # control flow, not an error
    json.dumps(state)  # it travels to the next call
    # the next call: setup (redo=False) is not run again, the wait goes on with the 10 s it spent counted
    ran.clear()
    second, result = sequence(clock, ran, budget=10, resume=json.loads(json.dumps(state)))
    assert second.execute()[steps.RESUME_KEY]["wait"]["waited"] == 20.0 and ran == ["check", "wait"]
    # a call whose budget covers what the wait may still take waits to its end: the result of a single run
    ran.clear()
    third, result = sequence(clock, ran, budget=100, resume=result[steps.RESUME_KEY])
    assert third.execute() == {"reached": "after"} and ran == ["check", "wait", "waited", "after"]
    assert clock.limits == [10.0, 10.0, 80.0]  # the timeout (100) less the 20 s spent


def test_a_wait_past_its_timeout_fails_as_in_a_single_call():
    clock = Clock(ready_at=500)
    with pytest.raises(Cut):
        sequence(clock, [], budget=10, resume={"spent": {"thing": 95}})[0].execute()
    assert clock.limits == [5.0]  # the budget covers the 5 s left: the wait's own timeout ends it
    assert (
        steps.Waits().left("thing", 30) == 30 and steps.Waits(resume={"spent": {"thing": "x"}}).left("thing", 30) == 30
    )


def test_an_error_of_a_step_carries_the_result_so_far_and_names_the_step():
    def failing(state):
        raise errors.KubeError("the API said no", {"seen": 1})

    result = {"reached": None, "seen": 0}
    table = [steps.Phase("one", lambda state: None), steps.Phase("two", failing)]
    with pytest.raises(errors.KubeError) as caught:
        steps.Sequence(table, None, result, steps.Waits(), reached="reached").execute()
    assert (caught.value.step, caught.value.result) == ("two", {"reached": "one", "seen": 1})

    def named(state):
        error = errors.TeardownError("it broke")
        error.step = "elsewhere"
        raise error

    with pytest.raises(errors.TeardownError) as caught:
        steps.Sequence([steps.Phase("one", named)], None, {}, steps.Waits()).execute()
    assert caught.value.step == "elsewhere"  # an error that names its step keeps it


def test_a_foreign_error_is_translated_at_the_step_boundary():
    def broken(state):
        raise OSError("connection refused")

    translate = (OSError, lambda exc: errors.KubeError(f"API error: {exc}"))
    with pytest.raises(errors.KubeError, match="^API error: connection refused$") as caught:
        steps.Sequence([steps.Phase("one", broken)], None, {"a": 1}, steps.Waits(), translate=translate).execute()
    assert (caught.value.step, caught.value.result) == ("one", {"a": 1})


# --- side by side: chains, workers, before, timed waits (the options a sweep of many resources needs) -----------


def test_chains_run_side_by_side_each_in_table_order_and_the_rows_without_a_chain_after_them():
    w = World(node=["n1"], cluster=["c1"], db=["d1"], net=["v1"])
    w.slow = {"n1": 1}
    started = threading.Event()

    def act(run, item):  # the database's chain starts while the node's deletion is still followed
        if item["name"] == "d1":
            started.set()
        return w.act(run, item)

    def poll(run, handle):
        assert started.wait(5), "the db chain did not start beside the nodes' wait"
        return w.poll(run, handle)

    rows = [
        steps.Row("node", w.discover("node"), w.act, poll=poll, chain="eks"),
        steps.Row("cluster", w.discover("cluster"), w.act, poll=w.poll, chain="eks"),
        w.row("net"),
        steps.Row("db", w.discover("db"), act, chain="rds"),
    ]
    result = w.run(rows, stop=False).execute()
    assert acts(w).index(("node", "n1")) < acts(w).index(("cluster", "c1"))  # in its chain, after the wait
    assert acts(w)[-1] == ("net", "v1")  # the rows without a chain once every chain ended
    assert [r["name"] for r in result["results"]] == ["n1", "c1", "v1", "d1"]  # table order
    assert result["leftovers"] == [] and w.things == {"node": [], "cluster": [], "db": [], "net": []}


def test_a_cut_chain_lets_the_others_finish_and_the_next_call_goes_on_with_every_chain():
    w = World(node=["n1"], cluster=["c1"], db=["d1"], net=["v1"])
    w.slow = {"n1": 5, "d1": 1}
    rows = [
        w.row("node", chain="eks"),
        w.row("cluster", chain="eks"),
        w.row("db", chain="rds"),
        w.row("net"),
    ]
    first = w.run(rows, budget=2).execute()
    state = json.loads(json.dumps(first["resume"]))
    assert sorted(acts(w)) == [("db", "d1"), ("node", "n1")]  # the cut chain stops, the rest waits
    assert [p[0] for p in state["pending"]] == ["node"] and sorted(state["acted"]) == ["db", "node"]
    assert [(r["name"], r["outcome"]) for r in state["result"]["results"]] == [("n1", "deleted"), ("d1", "deleted")]
    w.calls = []
    second = w.run(rows, resume=state).execute()
    assert acts(w) == [("cluster", "c1"), ("net", "v1")]
    assert [r["name"] for r in second["results"]] == ["n1", "c1", "d1", "v1"]
    assert second["leftovers"] == [] and "resume" not in second


def test_a_rows_workers_act_on_its_items_side_by_side():
    w = World(bucket=["b1", "b2"])
    second = threading.Event()

    def act(run, item):
        if item["name"] == "b2":
            second.set()
        else:
            assert second.wait(5), "b2 was not acted on beside b1"
        return w.act(run, item)

    result = w.run([steps.Row("bucket", w.discover("bucket"), act, workers=2)]).execute()
    assert [(r["name"], r["outcome"]) for r in result["results"]] == [("b1", "deleted"), ("b2", "deleted")]
    w = World(bucket=["b1", "b2"])  # the run's workers, for every row without its own
    second.clear()
    result = w.run([steps.Row("bucket", w.discover("bucket"), act)], workers=2).execute()
    assert [(r["name"], r["outcome"]) for r in result["results"]] == [("b1", "deleted"), ("b2", "deleted")]


def test_without_verify_the_caller_makes_the_verification_pass():
    w = World(vm=["v1"])
    w.failing = {"v1": "refused"}
    result = w.run([w.row("vm")], stop=False, verify=False).execute()
    assert result["leftovers"] == ["vm/v1"] and w.scans == 1  # the failure, and no discovery again


def test_the_caller_verifies_once_every_run_ended_through_a_scan_of_its_own_which_alone_decides():
    # the AWS sweep's final pass (issue 24): after every run, a scan of the verification's own; what it finds is what
    # is left, a failed deletion whose item went anyway left nothing, and no result entry changes
    w = World(vm=["v1", "v2"])
    w.failing = {"v1": "refused"}
    rescans = []

    def rescan():
        rescans.append(run.result["results"][-1]["name"])  # it sees the run's results (the AWS sweep's EC2 ids gone)
        return w

    run = w.run([w.row("vm")], stop=False, verify=False, rescan=rescan, decides=True)
    result = run.execute()
    assert result["leftovers"] == ["vm/v1"] and w.scans == 1 and rescans == [] and run.found == []
    w.things["vm"] = ["v3"]  # v1 went anyway, v3 appeared
    run.verification()
    assert rescans == ["v2"] and w.scans == 1
    assert run.found == [{"type": "vm", "name": "v3", "reason": "ours"}] and result["leftovers"] == ["vm/v3"]
    assert [(r["name"], r["outcome"], r.get("error")) for r in result["results"]] == [
        ("v1", "failed", "refused"),
        ("v2", "deleted", None),
    ]


def test_a_finished_runs_state_goes_on_without_acting_or_discovering_and_verifies_as_the_run_would():
    w = World(vm=["v1"], net=["n1"])
    first = w.run([w.row("vm"), w.row("net", after=["vm"])], verify=False, decides=True)
    done = first.execute()
    state = json.loads(json.dumps(first.state()))  # JSON: it travels through the action plugin
    calls, scans = list(w.calls), w.scans
    again = w.run([w.row("vm"), w.row("net", after=["vm"])], verify=False, decides=True, resume=state)
    assert again.execute() == done and w.calls == calls and w.scans == scans
    w.things["net"].append("n2")
    again.verification()
    assert [i["name"] for i in again.found] == ["n2"] and w.scans == scans + 1


def test_before_gives_the_items_to_act_on_and_they_become_the_rows_plan():
    w = World(group=["g1", "g2"])
    seen = []

    def before(run, items):  # re-listed and reordered right before the row acts (g3 appeared meanwhile)
        seen.append([i["name"] for i in items])
        w.things["group"].append("g3")
        return [dict(i, name=n) for i, n in zip(items + items[:1], ["g3", "g2", "g1"])]

    rows = [steps.Row("group", w.discover("group"), w.act, before=before)]
    result = w.run(rows).execute()
    assert seen == [["g1", "g2"]] and acts(w) == [("group", "g3"), ("group", "g2"), ("group", "g1")]
    assert result["plan"] == ["delete group g1 (ours)", "delete group g2 (ours)"]  # the plan as discovered
    assert result["leftovers"] == []


def test_a_timed_wait_polls_a_rows_deletions_in_one_call_after_its_first_poll_delay():
    w = World(cluster=["c1", "c2"], node=["n1"])
    w.slow = {"c1": 2, "c2": 3, "n1": 1}
    batches = []

    def poll_all(run, handles):
        batches.append((w.now, [h["name"] for h in handles]))
        return [w.poll(run, h) for h in handles]

    rows = [
        w.row("node"),  # untimed: polled every poll_interval, from the start
        steps.Row("cluster", w.discover("cluster"), w.act, poll_all=poll_all, first_poll=3, interval=2),
    ]
    result = w.run(rows, stop=False).execute()
    assert batches == [(3.0, ["c1", "c2"]), (5.0, ["c1", "c2"]), (7.0, ["c2"])]
    assert [c for c in w.calls if c[1] == "node" and c[0] == "poll"] == [("poll", "node", "n1")]
    assert result["leftovers"] == [] and w.now == 7.0


def test_a_timed_wait_ends_at_its_timeout_with_the_last_state_and_the_budget_cuts_it():
    w = World(stack=["s1"])

    def poll_all(run, handles):
        return [(steps.PENDING, "DELETE_IN_PROGRESS") for h in handles]

    def act(run, item):
        return "deleted", {"name": item["name"]}

    row = steps.Row("stack", w.discover("stack"), act, poll_all=poll_all, first_poll=lambda: 2, interval=lambda n: n)
    result = w.run([row], timeout=6, stop=False).execute()
    assert result["results"][0]["error"] == "still DELETE_IN_PROGRESS after 6s (wait_timeout)"
    w.now = 0.0
    first = w.run([row], timeout=6, budget=3).execute()
    assert first["resume"]["pending"][0][3] == 3.0  # the first poll at 2 s, then 1 s: the budget cut it at 3 s
    w.now = 0.0
    second = w.run([row], timeout=6, resume=first["resume"]).execute()
    assert second["results"][0]["error"] == "still DELETE_IN_PROGRESS after 6s (wait_timeout)" and w.now == 3.0
    with pytest.raises(ValueError, match="a first poll or an interval needs a poll or poll_all"):
        steps.Row("x", None, None, first_poll=5)


def test_runs_side_by_side_answer_in_order():
    worlds = [World(vm=["a"]), World(vm=["b"])]
    results = steps.execute_each([w.run([w.row("vm")]) for w in worlds], workers=2)
    assert [[r["name"] for r in result["results"]] for result in results] == [["a"], ["b"]]


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
