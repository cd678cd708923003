# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The profile's capabilities decide, never the platform's or the environment's name.

Each test gives an environment a platform under another name whose profile is a copy of a real one
(or of a real one with one capability changed), and checks that the code follows the capabilities.
"""

from __future__ import annotations

import dataclasses
import os
import types

import pytest

from ansible_collections.krops.platform.plugins.module_utils import (
    aws_targets,
    flux,
    ownership,
    profiles,
    teardown_plan,
)
from ansible_collections.krops.platform.plugins.module_utils import config as krops_config

REPO_FILE = os.path.join(os.path.dirname(__file__), *([os.pardir] * 4), "bootstrap.toml")
HOSTS = {
    "kind": {"host": "kind", "pivoted": False, "kind_reachable": True},
    "mgmt": {"host": "mgmt", "pivoted": True, "kind_reachable": True},
    "unreachable": {"host": "unreachable", "pivoted": False, "kind_reachable": False},
}


def _host(name):
    return dict(HOSTS[name], kind_marker={"owned": True, "reason": "marker"})


@pytest.fixture
def cfg():
    return krops_config.load(REPO_FILE, environ={})


def _with(cfg, name, env):
    """cfg with environment ``name`` set to ``env`` (a Config is frozen: a new one)."""
    return dataclasses.replace(cfg, environments=types.MappingProxyType({**cfg.environments, name: env}))


def _clone(monkeypatch, cfg, environment, new_name, **changes):
    """cfg with environment `new_name`: a copy of `environment` on platform '<new_name>-platform' (same profile +
    changes)."""
    original = profiles.of(cfg.environment(environment))
    platform = new_name + "-platform"
    monkeypatch.setitem(profiles.PROFILES, platform, original._replace(platform=platform, **changes))
    return _with(cfg, new_name, dataclasses.replace(cfg.environment(environment), platform=platform))


@pytest.mark.parametrize("environment", list(profiles.PLATFORMS))
@pytest.mark.parametrize("host", list(HOSTS))
def test_teardown_plan_follows_the_profile_not_the_name(monkeypatch, cfg, environment, host):
    expected_kept, kept = [], []
    expected = teardown_plan.build_plan(cfg, environment, _host(host), kept=expected_kept)
    cfg = _clone(monkeypatch, cfg, environment, "lab")
    assert teardown_plan.build_plan(cfg, "lab", _host(host), kept=kept) == expected
    assert kept == expected_kept


def test_teardown_plan_reads_each_capability(monkeypatch, cfg):
    # local containers without a local registry: the containers go, no registry step
    cfg = _clone(monkeypatch, cfg, "local-host", "lab", local_registry=False)
    actions = [s["action"] for s in teardown_plan.build_plan(cfg, "lab", _host("kind"))]
    assert "remove-containers" in actions and "remove-registry" not in actions
    # a cloud profile with another teardown step: that step, named by the profile
    cfg = _clone(monkeypatch, cfg, "gcp", "lab2", cloud="othercloud", cloud_teardown_step="aws-orphan-sweep")
    plan = teardown_plan.build_plan(cfg, "lab2", _host("unreachable"))
    assert [(s["action"], s["description"].split(" resources")[0]) for s in plan] == [
        ("aws-orphan-sweep", "remove the othercloud")
    ]


def test_reconcile_timeout_follows_the_profile(monkeypatch, cfg):
    cfg = _with(cfg, "local-host", dataclasses.replace(cfg.environment("local-host"), mgmt_ready_timeout=4321))
    cfg = _clone(monkeypatch, cfg, "local-host", "lab")
    assert flux.default_timeout(cfg, "lab") == cfg.bootstrap.local_reconcile_timeout != 4321
    cfg = _clone(monkeypatch, cfg, "local-host", "lab2", reconcile_timeout=("environment", "mgmt-ready-timeout"))
    assert flux.default_timeout(cfg, "lab2") == 4321


def test_aws_sweep_and_ownership_follow_the_cloud(monkeypatch, cfg):
    cfg = _clone(monkeypatch, cfg, "aws", "lab")
    targets, regions = aws_targets.targets_from_config(cfg, "lab")
    assert regions == aws_targets.targets_from_config(cfg, "aws")[1] and targets
    # the clone names the same account-global IAM user as aws: another aws-cloud environment that needs it
    (user,) = ownership.effective_globals(cfg, "aws")["iam-user"]
    assert ownership.aws_account_global(cfg, "aws", "iam-user", user) == ["lab"]
    cfg = _clone(monkeypatch, cfg, "aws", "lab2", cloud=None)
    with pytest.raises(aws_targets.SweepError) as err:
        aws_targets.targets_from_config(cfg, "lab2")
    assert "sweeps only environments of kind aws (valid: aws, aws-crossplane, lab)" in str(err.value)
