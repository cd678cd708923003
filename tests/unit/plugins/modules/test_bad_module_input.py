# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Bad module arguments, table-driven: each must fail with a message naming the bad option (before any
cluster, registry or tool is contacted), never a traceback, never silently accepted.

The loader's table is in tests/unit/plugins/module_utils/test_config_hardening.py; the two together are
the bad-input table that tests/benchmarks/bad_input_table.py prints.
"""

from __future__ import annotations

import importlib
import os
import shutil

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *([os.pardir] * 4)))
CONFIG = os.path.join(REPO, "bootstrap.toml")
NO_KUBECONFIG = "/nonexistent/kubeconfig"
NO_KIND = {"environment": "local-host", "kind_binary": "/nonexistent/kind"}
KIND_RULE = "option name: expected a kind cluster name: at most 50 characters of a-z, 0-9, '.' and '-'"
LONG = "a" * 10000


def below_one(module, option, value, prefix="", low=1, high=604800, **args):
    """A case giving ``option`` a value below its range: refused by the input contract before anything runs,
    naming the option (plugins/module_utils/options.py)."""
    case_id = "{}-{}-{}".format(module, option.replace("_", "-"), value)
    message = f"{prefix}option {option}: expected an integer from {low} to {high}, got {value}"
    return case_id, module, dict(args, **{option: value}), message


# (id, module, arguments, what the message must contain)
MODULE_CASES = [
    below_one("teardown_host", "timeout", 0, config_file=CONFIG),
    below_one("teardown_host", "timeout", -1, config_file=CONFIG),
    below_one("teardown_host", "local_cluster_timeout", -5, config_file=CONFIG),
    (
        "teardown_host-request-timeout-0",
        "teardown_host",
        {"request_timeout": 0, "config_file": CONFIG},
        "request_timeout must be at least 1 second, got 0",
    ),
    below_one("capi_cluster_delete", "wait_timeout", -1, low=0, kubeconfig=NO_KUBECONFIG),
    (
        "capi_cluster_delete-request-timeout-0",
        "capi_cluster_delete",
        {"request_timeout": 0, "kubeconfig": NO_KUBECONFIG},
        "request_timeout must be at least 1 second, got 0",
    ),
    below_one("capi_provider_delete", "wait_timeout", -1, low=0, kubeconfig=NO_KUBECONFIG),
    (
        "capi_provider_delete-wait-timeout-0",
        "capi_provider_delete",
        {"wait_timeout": 0, "kubeconfig": NO_KUBECONFIG},
        "wait_timeout must be at least 1 second, got 0",
    ),
    below_one("tinkerbell_release", "wait_timeout", -1, low=0, clusters=["x"], kubeconfig=NO_KUBECONFIG),
    below_one("cloud_teardown", "wait_timeout", -1, low=0, config_file=CONFIG),
    below_one("cloud_teardown", "poll_interval", -1, low=0, high=3600, config_file=CONFIG),
    below_one("kind_cluster", "wait_timeout", -1, name="mgmt", **NO_KIND),
    below_one("kind_cluster", "wait_timeout", 0, name="mgmt", **NO_KIND),
    below_one("flux_handoff", "wait_timeout", -1, prefix="flux_handoff: ", low=0),
    below_one("flux_handoff", "progress_interval", 0, prefix="flux_handoff: ", high=3600),
    (
        "flux_handoff-request-timeout--1",
        "flux_handoff",
        {"request_timeout": -1},
        "flux_handoff: request_timeout must be at least 1 second, got -1",
    ),
    ("kind-name-10000", "kind_cluster", dict(NO_KIND, name=LONG), KIND_RULE + " of at most 50 characters, got 'aaaa"),
    (
        "kind-name-list",
        "kind_cluster",
        dict(NO_KIND, name=["a", "b"]),
        KIND_RULE + " (kind's cluster-name rule), got \"['a', 'b']\"",
    ),
    (
        "kind-name-uppercase",
        "kind_cluster",
        dict(NO_KIND, name="Mgmt"),
        KIND_RULE + " (kind's cluster-name rule), got 'Mgmt'",
    ),
    (
        "kind-name-traversal",
        "kind_cluster",
        dict(NO_KIND, name="../../etc"),
        KIND_RULE + " (kind's cluster-name rule), got '../../etc'",
    ),
    (
        "kind-name-unicode",
        "kind_cluster",
        dict(NO_KIND, name="mgmt²"),
        KIND_RULE + " (kind's cluster-name rule), got 'mgmt²'",
    ),
    ("kind-name-empty", "kind_cluster", dict(NO_KIND, name=""), KIND_RULE + ", got ''"),
    (
        "kind-name-absent-too",
        "kind_cluster",
        {"name": "Bad_Name", "state": "absent", "kind_binary": "/nonexistent/kind"},
        KIND_RULE + " (kind's cluster-name rule), got 'Bad_Name'",
    ),
    (
        "flux-unknown-environment",
        "flux_handoff",
        {"config_file": CONFIG, "environment": "nope", "kubeconfig": NO_KUBECONFIG},
        "nope",
    ),
    (
        "oci-bad-tag",
        "oci_artifact_push",
        {"registry": "127.0.0.1:1", "paths": ["."], "tag": "bad tag"},
        "option tag: expected an OCI tag: up to 128 of a-z, A-Z, 0-9, '_', '.', '-', not starting with '.' or '-' "
        "(OCI distribution-spec tag), got 'bad tag'",
    ),
    (
        "oci-path-traversal",
        "oci_artifact_push",
        {"registry": "127.0.0.1:1", "paths": ["../../etc"], "root": REPO},
        "option paths[0]: expected a directory inside the repository, got '../../etc'; it resolves to",
    ),
    (
        "oci-bad-repository",
        "oci_artifact_push",
        {"registry": "127.0.0.1:1", "paths": ["."], "repository": "Krops"},
        "'Krops'",
    ),
    (
        "archive-bad-reference",
        "airgap_config_archive",
        {"root": REPO, "paths": ["mgmt"], "dest": "/nonexistent/x.tar", "reference": "no-tag"},
        "reference 'no-tag' is not <registry>/<repository>:<tag>",
    ),
    (
        "archive-path-traversal",
        "airgap_config_archive",
        {
            "root": REPO,
            "paths": ["../../etc"],
            "dest": "/nonexistent/x.tar",
            "reference": "r:5000/krops:latest",
            "revision": "x",
        },
        "option paths[0]: expected a directory inside the repository, got '../../etc'; it resolves to",
    ),
    (
        "validate-no-tree",
        "validate",
        {"path": "/nonexistent"},
        "option path: expected an existing directory (the krops checkout), got '/nonexistent'",
    ),
    (
        "validate-unknown-environment",
        "validate",
        {"path": "<a tree with mgmt/>", "environments": ["nope"]},
        "validate could not run: environment nope has no folder mgmt/nope",
    ),
    (
        "render-diff-no-git",
        "render_diff",
        {"base": "HEAD", "repo": "/"},
        "render_diff could not run: / is not a Git repository",
    ),
    (
        "preflight-eips-negative",
        "preflight_check",
        {"eips_per_cluster": -1},
        "option eips_per_cluster: expected an integer from 1 to 100, got -1",
    ),
    (
        "preflight-tool-path",
        "preflight_check",
        {"tools": ["../../bin/sh"]},
        "option tools[0]: expected a tool name such as kubectl, got '../../bin/sh'",
    ),
    (
        "pivot-wait-zero",
        "capi_pivot",
        {"config_file": CONFIG, "wait_timeout": 0},
        "wait_timeout must be at least 1, got 0",
    ),
    (
        "pivot-lb-port-too-big",
        "capi_pivot",
        {"config_file": CONFIG, "lb_port": 70000},
        "option lb_port: expected an integer from 1 to 65535, got 70000",
    ),
    (
        "pivot-stop-after-unknown",
        "capi_pivot",
        {"config_file": CONFIG, "stop_after": "everything"},
        "value of stop_after must be one of",
    ),
]


def with_tree(args, folder):
    """args with the placeholder path replaced by ``folder`` holding an empty mgmt/ and a loadable
    bootstrap.toml (the collection copy that ansible-test units runs in carries neither)."""
    if args.get("path") != "<a tree with mgmt/>":
        return args
    os.makedirs(os.path.join(folder, "mgmt"), exist_ok=True)
    fixture = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "bootstrap-local-host.toml")
    shutil.copyfile(fixture, os.path.join(folder, "bootstrap.toml"))
    return dict(args, path=str(folder))


def module_of(name):
    return importlib.import_module(f"ansible_collections.krops.platform.plugins.modules.{name}")


def classify(result, expected):
    """'clear' (it failed naming the bad input), 'traceback' (an unexpected failure) or 'accepted'."""
    message = result.get("msg") or ""
    if "failed unexpectedly" in message or "Traceback" in message:
        return "traceback"
    if result.get("failed") and expected in message:
        return "clear"
    return "accepted"


@pytest.mark.parametrize("case", MODULE_CASES, ids=[c[0] for c in MODULE_CASES])
def test_bad_module_arguments_are_clear_errors(run_module, case, tmp_path):
    _id, name, args, expected = case
    result = run_module(module_of(name), with_tree(args, tmp_path))
    assert classify(result, expected) == "clear", result.get("msg")
    assert "exception" not in result
