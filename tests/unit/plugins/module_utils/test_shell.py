# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The module shell (expected errors -> fail_json with their result; anything else -> a clear failure naming
the module and the step, traceback only in ``exception``) and a fuzz of capi_pivot's argument spec."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.krops.platform.plugins.module_utils import config, errors, kube, pivot, shell
from ansible_collections.krops.platform.plugins.modules import capi_pivot

REPO_FILE = os.path.join(os.path.dirname(__file__), *([os.pardir] * 4), "bootstrap.toml")


def test_every_area_error_is_a_krops_error():
    for area in (config.ConfigError, kube.KubeError, kube.WaitTimeout, pivot.PivotError, pivot.SubstitutionError):
        assert issubclass(area, errors.KropsError), area
    exc = pivot.PivotError("move", "it broke", {"moved": [1]})
    assert (str(exc), exc.phase, exc.result) == ("it broke", "move", {"moved": [1]})


def test_an_unexpected_error_names_the_module_and_the_step(run_module, monkeypatch):
    def boom(*_args, **_kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(pivot, "run", boom)
    result = run_module(capi_pivot, {"config_file": REPO_FILE})
    assert result.failed
    assert result["msg"] == (
        "krops.platform.capi_pivot failed unexpectedly while running the pivot phases: "
        "ZeroDivisionError: division by zero. This is a krops defect, not a problem with your "
        "input; run with -vvv for the traceback and report it"
    )
    assert result["failed_step"] == "running the pivot phases"
    assert "Traceback (most recent call last)" in result["exception"]  # ansible-playbook shows it at -vvv only
    assert "Traceback" not in result["msg"]


def test_an_expected_error_keeps_its_partial_result(run_module, monkeypatch):
    def refuse(*_args, **_kwargs):
        raise pivot.PivotError(
            "preflight", "the move cannot start", {"refusals": ["Cluster x: paused"], "changed": False}
        )

    monkeypatch.setattr(pivot, "run", refuse)
    result = run_module(capi_pivot, {"config_file": REPO_FILE})
    assert result["msg"] == "pivot phase preflight failed: the move cannot start"
    assert result["failed_phase"] == "preflight" and result["refusals"] == ["Cluster x: paused"]
    assert "exception" not in result


def test_an_error_a_phase_raises_is_not_translated_into_a_pivot_error(run_module, monkeypatch):
    """issue 24: the steps engine that runs the phases names the phase in a typed error and adds the result so far;
    nothing re-raises it as a PivotError, and the module still says which phase failed. A foreign API error becomes
    the kubernetes area's error at the phase's boundary."""

    def unanswered(pv):
        pv.say("asked the kind cluster")
        raise kube.KubeError("the kind cluster did not answer")

    def refused(pv):
        raise OSError("connection refused")

    def table(failing):
        return (
            pivot.Phase("preconditions", lambda pv: None),
            pivot.Phase("export", failing),
            pivot.Phase("move", None),
        )

    monkeypatch.setattr(pivot, "PHASE_TABLE", table(unanswered))
    with pytest.raises(errors.KubeError) as caught:
        pivot.run(config.load(REPO_FILE), {})
    assert not isinstance(caught.value, errors.PivotError) and caught.value.step == "export"
    assert caught.value.result["phase_reached"] == "preconditions"
    assert caught.value.result["progress"] == ["asked the kind cluster"]
    result = run_module(capi_pivot, {"config_file": REPO_FILE})
    assert result["msg"] == "pivot phase export failed: the kind cluster did not answer"
    assert result["failed_phase"] == "export" and result["progress"] == ["asked the kind cluster"]

    monkeypatch.setattr(pivot, "PHASE_TABLE", table(refused))
    result = run_module(capi_pivot, {"config_file": REPO_FILE})
    assert result["msg"].startswith("pivot phase export failed: Kubernetes API error: ")
    assert result["failed_phase"] == "export" and result["phase_reached"] == "preconditions"


def test_a_bad_config_is_a_preconditions_failure(run_module, tmp_path):
    path = tmp_path / "bootstrap.toml"
    path.write_text("[bootstrap\n")
    result = run_module(capi_pivot, {"config_file": str(path)})
    assert result["msg"].startswith(f"{path}: (top level): expected valid TOML")
    assert result["failed_phase"] == "preconditions"


# --- fuzz of the argument spec: every outcome is a clear failure, never a traceback ------------

_INTS = st.one_of(
    st.integers(min_value=-5, max_value=5),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.sampled_from(["0", "-1", "²", "", "1e3", "ten"]),
    st.lists(st.integers(), max_size=2),
)
_STRS = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["kind-other", "\x00", "../../etc", "a" * 10000]),
    st.lists(st.text(max_size=3), max_size=2),
    st.integers(),
)
_OPTIONS = {
    "wait_timeout": _INTS,
    "node_timeout": _INTS,
    "move_timeout": _INTS,
    "mgmt_ready_timeout": _INTS,
    "progress_interval": _INTS,
    "lb_port": _INTS,
    "request_timeout": _INTS,
    "source_context": _STRS,
    "stop_after": _STRS,
    "environment": _STRS,
    "target_server": _STRS,
    "manifest_vars": st.one_of(st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2), _STRS),
}


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(st.fixed_dictionaries({}, optional=_OPTIONS))
def test_fuzz_capi_pivot_arguments(run_module, params):
    # A source context other than kind's is refused before any cluster is contacted.
    args = dict(params, config_file=REPO_FILE, source_kubeconfig="/nonexistent/kubeconfig")
    args.setdefault("source_context", "not-the-kind-context")
    result = run_module(capi_pivot, args)
    assert result.failed
    message = result["msg"]
    assert "unexpectedly" not in message and "Traceback" not in message, message
    for name in capi_pivot._POSITIVE:
        value = params.get(name)
        if message.startswith(f"{name} must be at least 1"):
            assert int(value) < 1


def test_write_output_never_follows_a_symlink_planted_at_a_temporary_name(tmp_path):
    """The file goes through a new temporary file of a random name (review: a symlink at ``<path>.tmp`` was
    followed, and its target overwritten); it gets the mode open() would give, and nothing is left beside it."""
    victim = tmp_path / "victim"
    victim.write_text("keep")
    report = tmp_path / "r.md"
    (tmp_path / "r.md.tmp").symlink_to(victim)
    assert shell.write_output("report_path", str(report), b"# report\n") is True
    assert victim.read_text() == "keep"
    assert report.read_bytes() == b"# report\n"
    umask = os.umask(0)
    os.umask(umask)
    assert report.stat().st_mode & 0o777 == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.md", "r.md.tmp", "victim"]
    assert shell.write_output("report_path", str(report), b"# report\n") is False


def test_a_module_process_freezes_its_objects_before_python_ends(tmp_path):
    """The delay between a module's answer and its task's end (the Flux wait's figure): Python's last collections
    would walk every object the libraries made. run() has them frozen first; a probe registered before it runs
    after it (atexit is last in, first out) and sees them frozen (without the freeze: a few hundred)."""
    import json
    import subprocess
    import sys

    script = tmp_path / "module.py"
    script.write_text(
        "import atexit, gc\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count()))\n"
        "from ansible_collections.krops.platform.plugins.module_utils import shell\n"
        "shell.run('krops.platform.validate', {}, lambda module, step: {'changed': False})\n",
        encoding="utf-8",
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, str(script)],
        input=json.dumps({"ANSIBLE_MODULE_ARGS": {}}),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    answer, probe = done.stdout.strip().splitlines()
    assert json.loads(answer).get("changed") is False, answer
    assert probe.startswith("frozen ") and int(probe.split()[1]) > 10000, probe
