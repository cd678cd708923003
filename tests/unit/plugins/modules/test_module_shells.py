# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Every krops module runs in the one module shell (module_utils.shell): an expected error (an
errors.KropsError) is a failure with the module's wording and partial result; anything else is a
clear failure naming the module and its step, never a traceback. The verb each module calls is
replaced, so these tests reach the shell without a cluster, a registry or a tool."""

from __future__ import annotations

import pytest

from ansible_collections.krops.platform.plugins.module_utils import (
    airgap,
    airgap_offline,
    cli,
    cloud_teardown,
    errors,
    flux,
    kind,
    kube,
    kube_rows,
    oci,
    preflight,
    render_diff,
    teardown,
    teardown_crossplane,
    teardown_objects,
    tinkerbell,
    validate,
)
from ansible_collections.krops.platform.plugins.modules import (
    airgap_config_archive,
    bootstrap_secrets_delete,
    capi_cluster_delete,
    capi_provider_delete,
    crossplane_resources_delete,
    flux_handoff,
    flux_release_quiesce,
    kind_cluster,
    oci_artifact_push,
    preflight_check,
    teardown_host,
    tinkerbell_release,
)
from ansible_collections.krops.platform.plugins.modules import cloud_teardown as cloud_teardown_module
from ansible_collections.krops.platform.plugins.modules import render_diff as render_diff_module
from ansible_collections.krops.platform.plugins.modules import validate as validate_module

ARCHIVE = {"paths": ["."], "reference": "krops-registry:5000/krops:latest", "revision": "r1"}
PUSH = {"registry": "127.0.0.1:5000", "paths": ["."]}

# (module, where its verb lives, the verb, arguments, the step the verb runs in)
MODULES = [
    (airgap_config_archive, airgap_offline, "config_archive", ARCHIVE, "packing the configuration archive"),
    (capi_cluster_delete, kube_rows, "delete_clusters", {}, "deleting the Clusters"),
    (capi_provider_delete, kube_rows, "delete_providers", {}, "deleting the providers"),
    (
        crossplane_resources_delete,
        teardown_crossplane,
        "delete_managed",
        {"environment": "aws-crossplane"},
        "deleting the managed resources",
    ),
    (cloud_teardown_module, cloud_teardown, "load_rows", {}, "reading bootstrap.toml"),
    (flux_handoff, flux, "handoff", {}, "handing the cluster to Flux"),
    (
        flux_release_quiesce,
        teardown_objects,
        "quiesce_releases",
        {"namespace": "ack-system", "releases": ["ack-s3"]},
        "stopping the releases' controllers",
    ),
    (
        bootstrap_secrets_delete,
        teardown_objects,
        "delete_named",
        {"namespace": "flux-system", "secrets": ["sops-age"]},
        "deleting the bootstrap secrets and run tags",
    ),
    (
        kind_cluster,
        kind,
        "ensure",
        {"name": "mgmt", "environment": "local-host"},
        "bringing the kind cluster to its state",
    ),
    (oci_artifact_push, oci, "push_artifact", PUSH, "pushing the artifact"),
    (preflight_check, preflight, "run", {}, "running the checks"),
    (render_diff_module, render_diff, "run", {"base": "HEAD"}, "rendering and comparing the revisions"),
    (teardown_host, teardown_host, "run", {}, "finding the controller host and planning the teardown"),
    (tinkerbell_release, tinkerbell, "release_hardware", {"clusters": ["x"]}, "releasing the Hardware"),
    (validate_module, validate, "run", {}, "validating the trees"),
]


def _args(module, args, tmp_path):
    args = dict(args)
    if module is airgap_config_archive:  # the archive goes outside the packed tree (the input contract)
        (tmp_path / "repo").mkdir(exist_ok=True)
        args.update(root=str(tmp_path / "repo"), dest=str(tmp_path / "config.tar"))
    return args


def _raise(exc):
    def verb(*_args, **_kwargs):
        raise exc

    return verb


@pytest.mark.parametrize(
    "module, owner, verb, args, step", MODULES, ids=[m[0].__name__.rsplit(".")[-1] for m in MODULES]
)
def test_an_unexpected_error_names_the_module_and_its_step(
    run_module, monkeypatch, tmp_path, module, owner, verb, args, step
):
    monkeypatch.setattr(owner, verb, _raise(ZeroDivisionError("division by zero")))
    result = run_module(module, _args(module, args, tmp_path))
    assert result.failed
    assert result["msg"] == (
        f"{module.NAME} failed unexpectedly while {step}: ZeroDivisionError: division by zero. This is a krops "
        "defect, not a problem with your input; run with -vvv for the traceback and report it"
    )
    assert result["failed_step"] == step
    assert "Traceback (most recent call last)" in result["exception"]


@pytest.mark.parametrize(
    "module, owner, verb, args, step", MODULES, ids=[m[0].__name__.rsplit(".")[-1] for m in MODULES]
)
def test_an_expected_error_keeps_its_partial_result(run_module, monkeypatch, tmp_path, module, owner, verb, args, step):
    monkeypatch.setattr(owner, verb, _raise(errors.TeardownError("it cannot go on", {"done": ["a"], "changed": True})))
    result = run_module(module, _args(module, args, tmp_path))
    assert result.failed and result["done"] == ["a"] and result["changed"] is True
    assert result["msg"].endswith("it cannot go on") and "exception" not in result


# (module, verb owner, verb, arguments, raised, the message, extra result keys)
WORDED = [
    (
        flux_handoff,
        flux,
        "handoff",
        {},
        flux.FluxError("not Ready", {"ready": False}),
        "flux_handoff: not Ready",
        {"ready": False},
    ),
    (
        flux_handoff,
        flux,
        "handoff",
        {},
        cli.ToolMissing("helm", "helm not found on PATH"),
        "flux_handoff: helm not found on PATH (set helm_binary, or install_operator=false when the operator is installed)",
        {},
    ),
    (
        flux_handoff,
        flux,
        "handoff",
        {},
        cli.CliError("helm exited 1", command=["helm", "install"], rc=1, stderr="no"),
        "flux_handoff: installing the Flux Operator failed: helm exited 1",
        {"cmd": ["helm", "install"], "rc": 1, "stderr": "no"},
    ),
    (
        flux_handoff,
        flux,
        "handoff",
        {"kubeconfig": "/k", "context": "c"},
        kube.ApiException(status=403, reason="Forbidden"),
        "flux_handoff: the Kubernetes API of context c in /k answered an error: Forbidden",
        {},
    ),
    (
        kind_cluster,
        kind,
        "ensure",
        {"name": "mgmt", "environment": "local-host"},
        cli.CliError("kind exited 1", command=["kind"], rc=1),
        "kind cluster mgmt: kind exited 1",
        {"rc": 1},
    ),
    (
        kind_cluster,
        kind,
        "ensure",
        {"name": "mgmt", "environment": "local-host"},
        cli.ToolMissing("kind", "kind not found on PATH"),
        "kind cluster mgmt: kind not found on PATH (kind_binary=)",
        {},
    ),
    (
        kind_cluster,
        kind,
        "ensure",
        {"name": "mgmt", "environment": "local-host"},
        kind.KindError("kind cluster mgmt is unhealthy", {"nodes": []}),
        "kind cluster mgmt is unhealthy",
        {"nodes": []},
    ),
    (
        oci_artifact_push,
        oci,
        "push_artifact",
        PUSH,
        oci.OciError("refused"),
        "oci://127.0.0.1:5000/krops:latest: refused",
        {},
    ),
    (
        render_diff_module,
        render_diff,
        "run",
        {"base": "HEAD"},
        render_diff.RenderDiffError("no Git"),
        "render_diff could not run: no Git",
        {},
    ),
    (validate_module, validate, "run", {}, validate.ValidateError("no tree"), "validate could not run: no tree", {}),
    (airgap_config_archive, airgap_offline, "config_archive", ARCHIVE, airgap.AirgapError("bad lock"), "bad lock", {}),
]


@pytest.mark.parametrize("module, owner, verb, args, raised, message, extra", WORDED)
def test_each_module_keeps_its_wording(
    run_module, monkeypatch, tmp_path, module, owner, verb, args, raised, message, extra
):
    monkeypatch.setattr(owner, verb, _raise(raised))
    result = run_module(module, _args(module, args, tmp_path))
    assert result.failed and result["msg"] == message
    for key, value in extra.items():
        assert result[key] == value, key
    assert "exception" not in result
    if isinstance(raised, cli.ToolMissing):
        assert "rc" not in result  # nothing ran


def test_every_area_error_has_the_one_root():
    for area in (
        cli.CliError,
        cli.ToolMissing,
        flux.FluxError,
        kind.KindError,
        oci.OciError,
        teardown.TeardownError,
        teardown.UnknownState,
        render_diff.RenderDiffError,
        validate.ValidateError,
        airgap.AirgapError,
    ):
        assert issubclass(area, errors.KropsError), area


def test_module_level_refusals_are_expected_errors(run_module, tmp_path):
    result = run_module(
        airgap_config_archive,
        dict(_args(airgap_config_archive, ARCHIVE, tmp_path), dest=str(tmp_path / "c"), reference="x"),
    )
    assert (
        result["msg"]
        == "reference 'x' is not <registry>/<repository>:<tag> (for example krops-registry:5000/krops:latest)"
    )
    result = run_module(flux_handoff, {"wait_timeout": 0})
    assert result["msg"] == "flux_handoff: wait_timeout must be at least 1 second, got 0"


# The one-verb modules (module_utils.kube_shell): (module, verb owner, verb, arguments, {verb argument: option})
ONE_VERB = [
    (m[0], m[1], m[2], m[3], {"names": "clusters"} if m[0] is capi_cluster_delete else {})
    for m in MODULES
    if hasattr(m[0], "kube_shell")
]


@pytest.mark.parametrize(
    "module, owner, verb, args, renamed", ONE_VERB, ids=[m[0].__name__.rsplit(".")[-1] for m in ONE_VERB]
)
def test_a_one_verb_module_hands_every_option_of_its_own_to_its_verb(
    run_module, monkeypatch, module, owner, verb, args, renamed
):
    """kube_shell passes each option the module declares beyond KUBE_ARGS (under the verb's name for it where
    renamed) and checks request_timeout and each *_timeout option of its own: no module lists its option names a
    second time."""
    calls = []
    monkeypatch.setattr(owner, verb, lambda *a, **k: calls.append((a, k)) or {"changed": False})
    args = dict(args, **{option: ["w"] for option in renamed.values()})
    result = run_module(module, dict(args, kubeconfig="/k", context="c"))
    assert not result.failed and len(calls) == 1
    positional, keywords = calls[0]
    own = set(module.argument_spec()) - set(kube.KUBE_ARGS)
    assert positional == ("/k", "c")
    assert set(keywords) == {"check_mode", "connect_options"} | (own - set(renamed.values())) | set(renamed)
    assert all(keywords[argument] == ["w"] for argument in renamed)
    for option in sorted(o for o in own if o.endswith("_timeout")) + ["request_timeout"]:
        refused = run_module(module, dict(args, **{option: 0}))
        assert refused.failed and refused["msg"].endswith(f"{option} must be at least 1 second, got 0"), option
