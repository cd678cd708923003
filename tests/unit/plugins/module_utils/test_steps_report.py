# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The orphan report of the steps engine (cloud_report.orphans, cloud_report.created_at) on a fake cloud: discovery only, each
owned item with its age, nothing acted on."""

from __future__ import annotations

import datetime

import pytest

from ansible_collections.krops.platform.plugins.module_utils import cloud_report, steps

UTC = datetime.UTC
AT = datetime.datetime(2026, 12, 7, 6, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2020-12-17T07:06:33.9173186Z", datetime.datetime(2020, 12, 17, 7, 6, 33, 917318, tzinfo=UTC)),  # ARM
        ("2026-12-03T22:00:00.000-08:00", datetime.datetime(2026, 12, 4, 6, 0, tzinfo=UTC)),  # Compute Engine
        ("2012-11-15T16:19:00.094Z", datetime.datetime(2012, 11, 15, 16, 19, 0, 94000, tzinfo=UTC)),  # Cloud SQL
        ("2026-12-05T06:00:00+00:00", datetime.datetime(2026, 12, 5, 6, 0, tzinfo=UTC)),
        ("2026-12-05t06:00:00z", datetime.datetime(2026, 12, 5, 6, 0, tzinfo=UTC)),
        (" 2026-12-05T06:00:00+05:30 ", datetime.datetime(2026, 12, 5, 0, 30, tzinfo=UTC)),
    ],
)
def test_a_creation_time_is_read_as_the_clouds_write_it(text, expected):
    assert cloud_report.created_at(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        1733558400,
        "yesterday",
        "2026-12-05",
        "2026-12-05T06:00:00",
        "2026-13-05T06:00:00Z",
        "2026-12-05T06:00:00+25:00",
        "9999-12-31T23:59:59-01:00",  # past datetime's range once in UTC (OverflowError, review)
        "0001-01-01T00:00:00+01:00",
    ],
)
def test_what_is_not_a_creation_time_is_none(text):
    assert cloud_report.created_at(text) is None


class Cloud:
    """Things of two types; each act is recorded (a report must make none)."""

    def __init__(self):
        self.acts = []
        self.things = {
            "vm": [("old", "2026-12-06T00:00:00Z"), ("young", "2026-12-07T04:00:00Z"), ("ageless", None)],
            "net": [("n1", "2026-12-01T06:00:00.5+01:00"), ("bad", "last week")],
        }

    def discover(self, rtype):
        return lambda scan: [
            {"type": rtype, "name": n, "reason": "ours", "_created": created} for n, created in self.things[rtype]
        ]

    def act(self, run, item):
        self.acts.append(item["name"])
        return "deleted", None

    def run(self, check_mode=True, **options):
        rows = [steps.Row("net", self.discover("net"), self.act, after=["vm"], group="networks")]
        rows.append(steps.Row("vm", self.discover("vm"), self.act))
        return steps.Run(rows, self, lambda: self, check_mode=check_mode, **options)


def test_the_report_is_every_owned_item_old_enough_in_table_order_and_nothing_is_acted_on():
    cloud = Cloud()
    result, entries = cloud_report.orphans(cloud.run(), AT, 6)
    assert cloud.acts == []
    assert entries == [
        {
            "type": "vm",
            "name": "old",
            "reason": "ours",
            "outcome": "orphan",
            "stage": "vm",
            "created": "2026-12-06T00:00:00+00:00",
            "age_hours": 30.0,
        },
        {
            "type": "vm",
            "name": "ageless",
            "reason": "ours",
            "outcome": "orphan",
            "stage": "vm",
            "created": None,
            "age_hours": None,
        },
        {
            "type": "net",
            "name": "n1",
            "reason": "ours",
            "outcome": "orphan",
            "stage": "networks",
            "created": "2026-12-01T05:00:00.500000+00:00",
            "age_hours": 145.0,
        },
        {
            "type": "net",
            "name": "bad",
            "reason": "ours",
            "outcome": "orphan",
            "stage": "networks",
            "created": None,
            "age_hours": None,
        },
    ]
    # the run's own result is check mode's: the plan of everything, with outcome planned and no creation time
    assert result["plan"] == [
        f"delete {t} {n} (ours)" for t, n in (("vm", "old"), ("vm", "young"), ("vm", "ageless"))
    ] + [
        "delete net n1 (ours)",
        "delete net bad (ours)",
    ]
    assert all("_created" not in r and r["outcome"] == "planned" for r in result["results"])
    # a threshold of 0 reports the young one too; a higher one leaves only what has no known age
    assert [e["name"] for e in cloud_report.orphans(cloud.run(), AT, 0)[1]] == ["old", "young", "ageless", "n1", "bad"]
    assert [e["name"] for e in cloud_report.orphans(cloud.run(), AT, 1000)[1]] == ["ageless", "bad"]
    assert cloud.acts == []


def test_a_report_refuses_a_run_that_would_delete_and_a_deletion_never_shows_the_creation_time():
    cloud = Cloud()
    with pytest.raises(ValueError, match="cloud_report.orphans needs a run in check mode: a report writes nothing"):
        cloud_report.orphans(cloud.run(check_mode=False), AT, 6)
    assert cloud.acts == []
    result = cloud.run(check_mode=False, wait=False).execute()
    assert cloud.acts == ["old", "young", "ageless", "n1", "bad"]
    assert [sorted(r) for r in result["results"]] == [["name", "outcome", "reason", "type"]] * 5


def test_an_item_created_in_the_future_is_reported_with_no_age():
    """A clock skew or a bogus stamp must not hide an owned resource at any threshold (review): a creation time
    after now is no age at all, and an item of unknown age is always reported."""
    cloud = Cloud()
    cloud.things = {"vm": [("skewed", "2999-01-01T00:00:00Z")], "net": []}
    result, entries = cloud_report.orphans(cloud.run(), AT, 0)
    assert [(e["name"], e["created"], e["age_hours"]) for e in entries] == [
        ("skewed", "2999-01-01T00:00:00+00:00", None)
    ]
    assert cloud.acts == []


def test_a_run_the_caller_executed_first_is_reported_with_the_items_it_completed_and_not_discovered_again():
    # the AWS sweep's report (issue 24): its runs discover first, a resource without a creation time of its own
    # takes its cluster's oldest, then cloud_report.orphans reads each run as it is
    cloud, scans = Cloud(), []
    rows = [steps.Row("vm", cloud.discover("vm"), cloud.act)]
    run = steps.Run(rows, cloud, lambda: scans.append(1) or cloud, check_mode=True)
    run.execute()
    run.plan["vm"][2]["_created"] = "2026-12-06T00:00:00Z"  # the ageless one, completed by the caller
    result, entries = cloud_report.orphans(run, AT, 6)
    assert scans == [1] and cloud.acts == [] and result is run.result
    assert [(e["name"], e["age_hours"]) for e in entries] == [("old", 30.0), ("ageless", 30.0)]
