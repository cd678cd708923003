# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""krops.platform.cloud_teardown, the generic module of a cloud whose profile names a rows file (profiles.py,
cloud_rows), in process: its settings are checked against the keys the rows file declares before any call, and an
environment whose profile names no rows file is refused. The whole path on a real rows file (a copy of the
repository with a dummy cloud, its HTTP double, the teardown role and the orphan report) is
tests/integration/test_extension_cost.py's test_a_cloud_is_one_rows_file_and_one_profile_entry."""

from __future__ import annotations

import os
import types

import pytest

from ansible_collections.krops.platform.plugins.module_utils import ownership, profiles, steps
from ansible_collections.krops.platform.plugins.modules import cloud_teardown

CONFIG = os.path.join(os.path.dirname(__file__), *([os.pardir] * 4), "bootstrap.toml")
SETTINGS = {
    "url": dict(type="str", required=True),
    "token": dict(type="str", required=True, no_log=True),
    "zone": dict(type="str", choices=["a", "b"], default="a"),
}
GOOD = {"url": "https://api.cloud.example", "token": "s3cret-token"}


def _rows(world, seen):
    """A rows file of one row over ``world`` ({name: environment}); ``seen`` gets the settings it was run with."""

    def discover(scan):
        return [
            {"type": "machine", "name": name, "reason": f"label krops-environment={env}"}
            for name, env in sorted(world.items())
            if env == scan.environment
        ]

    def delete(run, item):
        world.pop(item["name"])
        return ownership.DELETED, None

    def cloud_run(settings, environment, http, **options):
        seen.append(settings)
        return steps.Run(
            [steps.Row("machine", discover, delete)],
            None,
            lambda: types.SimpleNamespace(environment=environment),
            **options,
        )

    return types.SimpleNamespace(SETTINGS=SETTINGS, cloud_run=cloud_run)


@pytest.fixture
def cloud(monkeypatch):
    """Environment local-talos of the repository's bootstrap.toml, its profile given cloud "dummy" and a rows file."""
    world, seen = {"m1": "local-talos", "team-m": "team"}, []
    rows = _rows(world, seen)
    profile = profiles.PROFILES["local-talos"]._replace(cloud="dummy", cloud_rows=lambda: rows)
    monkeypatch.setitem(profiles.PROFILES, "local-talos", profile)
    return types.SimpleNamespace(world=world, seen=seen)


def _args(**settings):
    return {"environment": "local-talos", "config_file": CONFIG, "settings": settings, "poll_interval": 0}


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            dict(GOOD, region="north"),
            "option settings: unknown key region for cloud dummy (valid keys: token, url, zone)",
        ),
        (
            dict(GOOD, region="north", Url="x"),
            "option settings: unknown key Url, region for cloud dummy (valid keys: token, url, zone)",
        ),
        ({"url": GOOD["url"]}, "option settings: missing key token for cloud dummy (valid keys: token, url, zone)"),
        ({}, "option settings: missing key token, url for cloud dummy (valid keys: token, url, zone)"),
        (
            dict(GOOD, zone="c"),
            "option settings of cloud dummy: value of zone must be one of: a, b, got: c (valid keys: token, url, zone)",
        ),
    ],
    ids=["unknown", "two-unknown", "missing", "empty", "bad-choice"],
)
def test_bad_settings_fail_naming_the_key_and_the_valid_keys_before_any_call(run_module, cloud, settings, message):
    result = run_module(cloud_teardown, _args(**settings))
    assert result.failed and result["msg"] == message
    assert "exception" not in result and cloud.seen == [] and cloud.world == {"m1": "local-talos", "team-m": "team"}


def test_the_settings_get_their_defaults_and_the_rows_run(run_module, cloud):
    planned = run_module(cloud_teardown, _args(**GOOD), check_mode=True)
    assert planned["plan"] == ["delete machine m1 (label krops-environment=local-talos)"]
    assert cloud.world == {"m1": "local-talos", "team-m": "team"}
    result = run_module(cloud_teardown, _args(**GOOD))
    assert not result.failed, result["msg"]
    assert [(r["name"], r["outcome"]) for r in result["results"]] == [("m1", "deleted")]
    assert result["cloud"] == "dummy" and result["environment"] == "local-talos" and result["changed"] is True
    assert cloud.world == {"team-m": "team"}
    assert cloud.seen[-1] == dict(GOOD, zone="a")


def test_the_report_names_the_settings_without_their_secrets(run_module, cloud):
    result = run_module(cloud_teardown, _args(**GOOD, zone="b") | {"mode": "report", "min_age_hours": 0})
    assert not result.failed, result["msg"]
    assert result["scope"] == "url=https://api.cloud.example, zone=b" and result["cloud"] == "dummy"
    assert result["report"]["json"]["count"] == 1 and "s3cret" not in result["report"]["markdown"]
    assert "- Settings: `url=https://api.cloud.example, zone=b`" in result["report"]["markdown"]
    assert cloud.world == {"m1": "local-talos", "team-m": "team"}


def test_the_secrets_of_the_settings_are_masked(cloud):
    masked = set()
    cloud_teardown.run(
        dict(_args(**GOOD), mode="delete", wait_timeout=10, report_path=None, min_age_hours=6),
        True,
        masked.update,
        lambda name: None,
    )
    assert masked == {"s3cret-token"}


def test_an_environment_whose_profile_names_no_rows_file_is_refused(run_module):
    result = run_module(cloud_teardown, dict(_args(**GOOD), environment="gcp"))
    assert result.failed and result["msg"] == (
        "environment gcp is of platform gcp, whose profile names no rows file (cloud_rows) for cloud_teardown; its "
        "step gcp-teardown has a module of its own"
    )
