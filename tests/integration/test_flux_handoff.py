"""krops.platform.flux_handoff on the Kubernetes emulator, with a fake Flux whose conditions flip over time.

helm is a recording stand-in (fake_bins): the emulator already serves the Flux CRDs, so the
"operator" in these tests is the FakeFlux thread, which answers the FluxInstance the module
creates with Kustomizations whose Ready conditions change on a timeline.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path

import pytest

from ansible_collections.krops.platform.plugins.module_utils import config, flux, flux_status, stepping
from ansible_collections.krops.platform.plugins.modules import flux_handoff
from tests.substrate.fixtures import REPO, task_results

NS = "flux-system"
KS = ("kustomize.toolkit.fluxcd.io/v1", "Kustomization")
FI = ("fluxcd.controlplane.io/v1", "FluxInstance")
CONFIG = str(REPO / "bootstrap.toml")
PINNED = config.load(CONFIG).charts.flux_operator
AGE_KEY = (
    "# created: 2026-11-30T05:00:00Z\n# public key: age1qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq\n"
    "AGE-SECRET-KEY-1QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ\n"
)
TOKEN = "ghp_s3cr3tT0kenValue0123456789"


class FakeFlux:
    """Plays the Flux Operator and Flux: once the FluxInstance exists, runs a timeline of changes."""

    def __init__(self, api, timeline):
        self.api = api
        self.timeline = sorted(timeline, key=lambda item: item[0])
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.errors = []

    def start(self):
        self.thread.start()
        return self

    def _run(self):
        try:
            found = self.api.wait_for_event(lambda _t, obj: obj.get("kind") == "FluxInstance", timeout=90)
            if found is None:
                return
            start = time.monotonic()
            for offset, action in self.timeline:
                delay = start + offset - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                action(self.api)
        except Exception as exc:  # surfaced by the tests through .errors
            self.errors.append(exc)


def after_reads(kind, count, action, timeout=120):
    """An action run once the emulator has served `count` more reads (GETs) of `kind`'s resource than when it started."""

    def wait_then(api):
        def reads():
            return sum(1 for method, path in list(api.requests) if method == "GET" and f"/{kind[1].lower()}s" in path)

        goal = reads() + count
        deadline = time.monotonic() + timeout
        while reads() < goal and time.monotonic() < deadline:
            time.sleep(0.1)
        action(api)

    return wait_then


def fi_ready(api, status="True", reason="ReconciliationSucceeded", message="Reconciliation finished"):
    api.set_condition(*FI, "flux", NS, status=status, reason=reason, message=message)


def ks(name, depends=(), status=None, reason="", message=""):
    def action(api):
        if not api.exists(*KS, name, NS):
            api.create(
                {
                    "apiVersion": KS[0],
                    "kind": KS[1],
                    "metadata": {"name": name, "namespace": NS},
                    "spec": {
                        "interval": "5m",
                        "path": "./x",
                        "prune": True,
                        "sourceRef": {"kind": "OCIRepository", "name": NS},
                        "dependsOn": [{"name": d} for d in depends],
                    },
                }
            )
        if status is not None:
            api.set_condition(*KS, name, NS, status=status, reason=reason, message=message)

    return action


def stalled(name, reason, message):
    def action(api):
        api.set_condition(*KS, name, NS, type_="Stalled", status="True", reason=reason, message=message)

    return action


HEALTHY = [
    (0.2, fi_ready),
    # Like Flux: the root applies its children before it reports Ready.
    (
        0.3,
        ks(
            "apps",
            depends=["infra"],
            status="False",
            reason="DependencyNotReady",
            message="dependency 'flux-system/infra' is not ready",
        ),
    ),
    (0.3, ks("infra", status="Unknown", reason="Progressing", message="Reconciliation in progress")),
    (
        0.3,
        ks("flux-system", status="True", reason="ReconciliationSucceeded", message="Applied revision: latest@sha256:1"),
    ),
    (0.8, ks("infra", status="True", reason="ReconciliationSucceeded", message="Applied revision")),
    (1.2, ks("apps", depends=["infra"], status="True", reason="ReconciliationSucceeded", message="Applied revision")),
]


def args(api, **extra):
    base = {
        "kubeconfig": api.kubeconfig_path,
        "context": "kind-mgmt",
        "environment": "local-host",
        "config_file": CONFIG,
        "wait_timeout": 20,
    }
    base.update(extra)
    return base


def deployed(version=PINNED):
    return json.dumps(
        [
            {
                "name": "flux-operator",
                "namespace": NS,
                "revision": "1",
                "status": "deployed",
                "chart": f"flux-operator-{version}",
                "app_version": f"v{version}",
            }
        ]
    )


def secret_text(api, name, namespace, key):
    return base64.b64decode(api.get("v1", "Secret", name, namespace)["data"][key]).decode()


def test_local_host_handoff_installs_creates_and_waits_in_dependency_order(kind_api, fake_bins, run_module):
    fake = FakeFlux(kind_api, HEALTHY).start()
    result = run_module(flux_handoff, args(kind_api))
    assert not result.failed, result.get("msg")
    assert not fake.errors
    assert result["ready"] is True and result["changed"] is True
    assert [k["name"] for k in result["kustomizations"]] == ["flux-system", "infra", "apps"]
    assert all(k["ready"] for k in result["kustomizations"])
    assert result["kustomizations"][2]["depends_on"] == ["infra"]
    assert result["fluxinstance"]["ready"] is True

    upgrade = [c["argv"] for c in fake_bins.calls("helm") if c["argv"][0] == "upgrade"]
    assert upgrade == [
        [
            "upgrade",
            "--install",
            "flux-operator",
            "oci://ghcr.io/controlplaneio-fluxcd/charts/flux-operator",
            "--version",
            PINNED,
            "--namespace",
            NS,
            "--create-namespace",
            "--wait",
            "--timeout",
            "10m",
            "--kubeconfig",
            kind_api.kubeconfig_path,
            "--kube-context",
            "kind-mgmt",
        ]
    ]

    instance = kind_api.get(*FI, "flux", NS)
    assert instance["spec"]["sync"] == {
        "kind": "OCIRepository",
        "url": "oci://krops-registry:5000/krops",
        "ref": "latest",
        "path": "mgmt/local-host",
    }
    assert instance["spec"]["kustomize"]["patches"] == [
        {"target": {"kind": "OCIRepository"}, "patch": "- op: add\n  path: /spec/insecure\n  value: true\n"}
    ]
    assert instance["spec"]["cluster"] == {
        "type": "kubernetes",
        "size": "small",
        "multitenant": False,
        "networkPolicy": True,
        "domain": "cluster.local",
    }
    assert instance["spec"]["distribution"] == {"version": "2.9.x", "registry": "ghcr.io/fluxcd"}
    tags = kind_api.get("v1", "ConfigMap", "krops-run", NS)["data"]
    assert tags == result["run_tags"]
    assert tags["KROPS_RUN_ID"].startswith("local-host-") and tags["KROPS_RUN_KIND"] == "manual"
    assert tags["KROPS_REVISION"] == "unknown" and tags["KROPS_EXPIRES_AT"].endswith("Z")
    assert not kind_api.exists("v1", "Secret", "flux-github-pat", NS)

    # Second run: the release is deployed at the pin and every object matches: nothing changes.
    fake_bins.answer("helm", "list", stdout=deployed())
    again = run_module(flux_handoff, args(kind_api))
    assert not again.failed, again.get("msg")
    assert again["changed"] is False and again["actions"] == []
    assert again["run_tags"] == tags
    assert len([c for c in fake_bins.calls("helm") if c["argv"][0] == "upgrade"]) == 1


def test_git_sync_writes_secrets_without_leaking_the_token(kind_api, fake_bins, run_module, tmp_path):
    key = tmp_path / "age.agekey"
    key.write_text(AGE_KEY)
    fake = FakeFlux(
        kind_api, [(0.1, fi_ready), (0.2, ks("flux-system", status="True", reason="ReconciliationSucceeded"))]
    )
    fake.start()
    result = run_module(
        flux_handoff,
        args(
            kind_api,
            environment="aws",
            github_token=TOKEN,
            age_key_file=str(key),
            run_tags={"KROPS_REVISION": "0123abc"},
        ),
    )
    assert not result.failed, result.get("msg")
    assert secret_text(kind_api, "flux-github-pat", NS, "username") == "git"
    assert secret_text(kind_api, "flux-github-pat", NS, "password") == TOKEN
    for namespace in (NS, "default"):
        assert secret_text(kind_api, "sops-age", namespace, "age.agekey") == AGE_KEY
    assert result["sops_namespaces"] == [NS, "default"]
    sync = kind_api.get(*FI, "flux", NS)["spec"]["sync"]
    assert sync == {
        "kind": "GitRepository",
        "url": "https://github.com/krops/krops",
        "ref": "refs/heads/main",
        "path": "mgmt/aws",
        "pullSecret": "flux-github-pat",
    }
    assert "kustomize" not in kind_api.get(*FI, "flux", NS)["spec"]
    assert result["run_tags"]["KROPS_REVISION"] == "0123abc"
    assert result["run_tags"]["KROPS_RUN_ID"].startswith("aws-")
    dumped = json.dumps(result)
    assert TOKEN not in dumped and "AGE-SECRET-KEY" not in dumped
    for call in fake_bins.calls("helm"):
        assert TOKEN not in " ".join(call["argv"]) and TOKEN not in json.dumps(call["env"])

    # A rotated token updates the Secret only; the run tags are reused.
    again = run_module(
        flux_handoff,
        args(kind_api, environment="aws", github_token=TOKEN + "2", age_key_file=str(key), scope="secrets"),
    )
    assert again["changed"] is True and again["actions"] == ["update Secret flux-system/flux-github-pat"]
    assert again["run_tags"] == result["run_tags"]
    assert secret_text(kind_api, "flux-github-pat", NS, "password") == TOKEN + "2"


def test_git_sync_without_a_token_fails_with_what_to_do(kind_api, fake_bins, run_module, monkeypatch):
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    result = run_module(flux_handoff, args(kind_api, environment="aws", install_operator=False))
    assert result.failed
    assert result["msg"] == (
        "flux_handoff: environment aws syncs from Git (https://github.com/krops/krops) and needs a "
        "GitHub token for Secret flux-system/flux-github-pat: set github_token (or the GITHUB_TOKEN "
        "environment variable)"
    )
    assert not kind_api.exists(*FI, "flux", NS)


def test_check_mode_plans_and_writes_nothing(kind_api, fake_bins, run_module, tmp_path):
    key = tmp_path / "age.agekey"
    key.write_text(AGE_KEY)
    result = run_module(
        flux_handoff, args(kind_api, environment="aws", github_token=TOKEN, age_key_file=str(key)), check_mode=True
    )
    assert not result.failed, result.get("msg")
    assert result["changed"] is True and result["ready"] is False
    assert result["actions"] == [
        f"would install Flux Operator chart {PINNED} (release flux-operator in flux-system)",
        "would create Namespace flux-system",
        "would create ConfigMap flux-system/krops-run",
        "would create Secret flux-system/flux-github-pat",
        "would create Secret flux-system/sops-age",
        "would create Secret default/sops-age",
        "would create FluxInstance flux-system/flux",
    ]
    assert [c["argv"][0] for c in fake_bins.calls("helm")] == ["list"]
    assert not kind_api.exists("v1", "Namespace", NS)
    assert TOKEN not in json.dumps(result)


def test_a_failing_kustomization_surfaces_its_message_on_timeout(kind_api, fake_bins, run_module):
    message = "kustomize build failed: accumulating resources: 'mgmt/local-host/capi-system/missing.yaml' not found"
    FakeFlux(
        kind_api,
        [
            (0.1, fi_ready),
            (0.2, ks("capi-system", status="False", reason="BuildFailed", message=message)),
            (
                0.2,
                ks(
                    "capd-system",
                    depends=["capi-system"],
                    status="False",
                    reason="DependencyNotReady",
                    message="dependency 'flux-system/capi-system' is not ready",
                ),
            ),
            (0.2, ks("flux-system", status="True", reason="ReconciliationSucceeded", message="Applied revision")),
        ],
    ).start()
    started = time.monotonic()
    result = run_module(flux_handoff, args(kind_api, wait_timeout=2))
    assert time.monotonic() - started < 6
    assert result.failed
    msg = result["msg"]
    assert msg.startswith(
        "flux_handoff: timed out after 2s waiting for the Flux Kustomizations on context kind-mgmt in "
        f"{kind_api.kubeconfig_path}: 1 of 3 Ready"
    )
    assert f"Failing:\n  capi-system: BuildFailed: {message}" in msg
    assert "capd-system" in msg and "DependencyNotReady" in msg
    # partial result: the table in dependsOn order, the run tags, what was done
    assert [(k["name"], k["ready"], k["reason"]) for k in result["kustomizations"]] == [
        ("flux-system", True, "ReconciliationSucceeded"),
        ("capi-system", False, "BuildFailed"),
        ("capd-system", False, "DependencyNotReady"),
    ]
    assert result["kustomizations"][1]["message"] == message
    assert result["run_tags"]["KROPS_RUN_ID"].startswith("local-host-")
    assert result["changed"] is True and result["ready"] is False


def test_a_stalled_kustomization_fails_at_once(kind_api, fake_bins, run_module):
    FakeFlux(
        kind_api,
        [
            (0.1, fi_ready),
            (0.2, ks("infra", status="False", reason="InvalidPath", message="path './nope' not found")),
            (0.3, ks("flux-system", status="True", reason="ReconciliationSucceeded")),
            (0.4, stalled("infra", "InvalidPath", "path './nope' not found")),
        ],
    ).start()
    started = time.monotonic()
    result = run_module(flux_handoff, args(kind_api, wait_timeout=30))
    assert time.monotonic() - started < 5
    assert result.failed
    assert result["msg"].startswith(
        "flux_handoff: Kustomization flux-system/infra is stalled (Flux will not retry it): "
        "InvalidPath: path './nope' not found\n"
    )
    assert result["kustomizations"][1] == {
        "name": "infra",
        "ready": False,
        "reason": "InvalidPath",
        "message": "path './nope' not found",
        "depends_on": [],
    }


def test_fluxinstance_that_never_becomes_ready_times_out_naming_it(kind_api, fake_bins, run_module):
    FakeFlux(
        kind_api,
        [
            (
                0.1,
                lambda api: fi_ready(
                    api,
                    status="False",
                    reason="ReconciliationFailed",
                    message="failed to pull ghcr.io/fluxcd/source-controller",
                ),
            )
        ],
    ).start()
    result = run_module(flux_handoff, args(kind_api, wait_timeout=1))
    assert result.failed
    assert (
        f"timed out after 1s waiting for FluxInstance flux-system/flux to be Ready on context kind-mgmt in {kind_api.kubeconfig_path}: "
        "ReconciliationFailed: failed to pull ghcr.io/fluxcd/source-controller"
    ) in result["msg"]
    assert result["kustomizations"] == []


def test_bounded_step_returns_pending_instead_of_failing(kind_api, fake_bins, run_module, monkeypatch):
    """The action plugin's step protocol: a step that runs out of budget before wait_timeout is not a failure.
    The resume state reaches the module in its environment, as the action plugin sets it (module_utils/stepping.py)."""
    FakeFlux(kind_api, [(0.1, fi_ready), (0.1, ks("flux-system", status="Unknown", reason="Progressing"))]).start()
    monkeypatch.setenv(stepping.ENV, stepping.encode({"_wait_budget": 1}))
    result = run_module(flux_handoff, args(kind_api, wait_timeout=30))
    assert not result.failed, result.get("msg")
    assert result["_krops_pending"] is True and result["ready"] is False
    assert result["kustomizations"][0]["reason"] == "Progressing"
    kind_api.set_condition(*KS, "flux-system", NS, reason="ReconciliationSucceeded")
    state = result["_krops_resume"]  # the engine's resume state: the setup done, the time the wait took
    assert state["done"] == ["setup"] and 0 < state["spent"]["flux"] == state["wait"]["waited"] < 3
    monkeypatch.setenv(stepping.ENV, stepping.encode({"_wait_budget": 1, "_resume": state}))
    done = run_module(flux_handoff, args(kind_api, wait_timeout=30))
    assert done["ready"] is True and "_krops_pending" not in done and done["changed"] is False


def test_bad_input_fails_cleanly(kind_api, fake_bins, run_module, tmp_path):
    bad_key = tmp_path / "age.agekey"
    bad_key.write_text("not a key\n")
    result = run_module(flux_handoff, args(kind_api, age_key_file=str(bad_key), install_operator=False))
    assert result["msg"] == (
        f"flux_handoff: the age key file {bad_key} holds no AGE-SECRET-KEY- line; it must be an age "
        "identity file (age-keygen output)"
    )
    result = run_module(flux_handoff, args(kind_api, environment="nope"))
    assert result["msg"].startswith(f"flux_handoff: {CONFIG}: environments.nope: expected a defined environment")
    result = run_module(flux_handoff, args(kind_api, run_tags={"OWNER": "me"}, install_operator=False))
    assert result["msg"] == (
        "flux_handoff: run_tags: unknown key OWNER; expected only KROPS_RUN_ID, KROPS_REVISION, "
        "KROPS_EXPIRES_AT, KROPS_RUN_KIND"
    )
    fake_bins.answer("helm", "upgrade", stderr="Error: failed to authorize: 403 Forbidden", rc=1)
    result = run_module(flux_handoff, args(kind_api))
    assert result["msg"].startswith(
        "flux_handoff: installing the Flux Operator failed: `helm upgrade --install "
        "flux-operator oci://ghcr.io/controlplaneio-fluxcd/charts/flux-operator"
    )
    assert result["msg"].endswith("failed with exit code 1: Error: failed to authorize: 403 Forbidden")
    assert result["rc"] == 1


def test_dependency_order_is_topological():
    objects = {
        name: {"spec": {"dependsOn": [{"name": d} for d in deps]}}
        for name, deps in {
            "flux-system": [],
            "apps": ["infra", "capi"],
            "infra": [],
            "capi": ["infra"],
            "remote": [],
            "cycle-a": ["cycle-b"],
            "cycle-b": ["cycle-a"],
        }.items()
    }
    objects["remote"]["spec"]["dependsOn"] = [{"name": "other", "namespace": "default"}]
    order = flux_status.order_kustomizations(objects, NS, "flux-system")
    assert order[0] == "flux-system"
    assert order.index("infra") < order.index("capi") < order.index("apps")
    assert set(order) == set(objects) and order[-2:] == ["cycle-a", "cycle-b"]
    assert flux_status.order_kustomizations({"b": {"spec": {"dependsOn": [{"name": "a"}]}}}, NS, "flux-system") == [
        "a",
        "b",
    ]


def handoff_play(ansible_playbook, kind_api, fake_bins, wait_timeout):
    """flux_handoff through ansible-playbook (its action plugin), progress every 3 s, on local-host."""
    args = {
        "kubeconfig": kind_api.kubeconfig_path,
        "context": "kind-mgmt",
        "environment": "local-host",
        "config_file": CONFIG,
        "progress_interval": 3,
        "wait_timeout": wait_timeout,
    }
    task = {"name": "handoff", "krops.platform.flux_handoff": args}
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [task]}]
    return ansible_playbook(play, env={"PATH": fake_bins.path_env})


@pytest.mark.slow
def test_playbook_shows_progress_on_the_controller_while_waiting(kind_api, fake_bins, ansible_playbook):
    FakeFlux(
        kind_api,
        [
            (0.2, fi_ready),
            (
                0.3,
                ks("infra", status="False", reason="HealthCheckFailed", message="timeout waiting for: [Deployment/x]"),
            ),
            (0.3, ks("flux-system", status="True", reason="ReconciliationSucceeded")),
            # ready once the wait has read the Kustomizations six times, in three intervals at least (each interval is one module
            # run, which a loaded machine stretches to seconds, so a clock here would leave fewer than the
            # two progress lines the test wants)
            (
                0.4,
                after_reads(
                    KS, 6, ks("infra", status="True", reason="ReconciliationSucceeded", message="Applied revision")
                ),
            ),
        ],
    ).start()
    rc, output, stderr = handoff_play(ansible_playbook, kind_api, fake_bins, wait_timeout=60)
    result = task_results(output)["handoff"]
    assert rc == 0, (result, stderr)
    assert result["ready"] is True and result["changed"] is True
    assert result["actions"][0].startswith(f"install Flux Operator chart {PINNED}")
    assert [k["name"] for k in result["kustomizations"]] == ["flux-system", "infra"]
    assert "_krops_pending" not in result and "_krops_resume" not in result
    progress = [line for line in stderr.splitlines() if line.startswith("flux_handoff [localhost] waited")]
    assert len(progress) >= 2, stderr
    assert "FluxInstance flux Ready; Kustomizations Ready: 1 of 2; pending: infra" in progress[0]
    assert "HealthCheckFailed" in stderr and "timeout waiting for: [Deployment/x]" in stderr


@pytest.mark.slow
def test_playbook_timeout_through_the_action_plugin_keeps_single_call_semantics(kind_api, fake_bins, ansible_playbook):
    FakeFlux(
        kind_api,
        [
            (0.1, fi_ready),
            (0.2, ks("infra", status="False", reason="BuildFailed", message="kustomize build failed: bad patch")),
            (0.2, ks("flux-system", status="True", reason="ReconciliationSucceeded")),
        ],
    ).start()
    rc, output, stderr = handoff_play(ansible_playbook, kind_api, fake_bins, wait_timeout=3)
    result = task_results(output)["handoff"]
    assert rc == 2
    assert result["failed"] is True
    assert "timed out after 3s waiting for the Flux Kustomizations" in result["msg"]
    assert "Failing:\n  infra: BuildFailed: kustomize build failed: bad patch" in result["msg"]
    assert result["changed"] is True and result["run_tags"]["KROPS_RUN_ID"].startswith("local-host-")
    assert [k["name"] for k in result["kustomizations"]] == ["flux-system", "infra"]
    assert Path(kind_api.kubeconfig_path).exists()


def test_wait_false_reports_the_current_state_without_waiting(kind_api, fake_bins, run_module):
    kind_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    kind_api.create({"apiVersion": FI[0], "kind": FI[1], "metadata": {"name": "flux", "namespace": NS}, "spec": {}})
    fi_ready(kind_api)
    ks("infra", depends=["flux-system"], status="False", reason="Progressing", message="applying")(kind_api)
    started = time.monotonic()
    result = run_module(flux_handoff, args(kind_api, wait=False, install_operator=False))
    assert time.monotonic() - started < 3
    assert not result.failed, result.get("msg")
    # the spec was just updated: the Ready condition is from the previous generation, so not Ready yet
    assert result["ready"] is False
    assert result["fluxinstance"] == {
        "name": "flux",
        "ready": False,
        "reason": "Progressing",
        "message": "generation 2 not observed yet (observed 1)",
    }
    assert [(k["name"], k["reason"]) for k in result["kustomizations"]] == [
        ("flux-system", "NotFound"),
        ("infra", "Progressing"),
    ]
    assert result["actions"] == ["create ConfigMap flux-system/krops-run", "update FluxInstance flux-system/flux"]


def test_registry_address_and_flux_version_come_from_bootstrap_toml(kind_api, fake_bins, run_module, tmp_path):
    """Nothing about the registry is hard-coded: another name, port and Flux version flow into the FluxInstance."""
    text = (REPO / "bootstrap.toml").read_text()
    text = text.replace('registry-name = "krops-registry"', 'registry-name = "my-registry"')
    text = text.replace("registry-container-port = 5000", "registry-container-port = 5555")
    text = text.replace('flux-version = "2.9.x"', 'flux-version = "2.8.x"')
    custom = tmp_path / "bootstrap.toml"
    custom.write_text(text)
    result = run_module(flux_handoff, args(kind_api, config_file=str(custom)), check_mode=True)
    assert not result.failed, result.get("msg")
    sync = flux.sync_settings(config.load(str(custom)), "local-host")
    assert sync["url"] == "oci://my-registry:5555/krops" and sync["insecure"] is True
    spec = flux.fluxinstance_spec(sync)
    assert spec["distribution"] == {"version": "2.8.x", "registry": "ghcr.io/fluxcd"}
    assert spec["kustomize"]["patches"][0]["patch"] == flux.OCI_INSECURE_PATCH
    # an OCI URL elsewhere keeps TLS
    other = flux.sync_settings(config.load(str(custom)), "local-host", sync_url="oci://ghcr.io/acme/krops")
    assert other["insecure"] is False and flux.fluxinstance_spec(other)["kustomize"] is None


def test_validate_holds_the_tree_to_the_flux_version_registry_and_node_image_of_bootstrap_toml(tmp_path):
    """The workload FluxInstance cannot drift from bootstrap.toml: validate reports each difference."""
    import shutil

    from ansible_collections.krops.platform.plugins.module_utils import validate

    root = tmp_path / "repo"
    for part in ("mgmt/local-host", "workload/local-host"):
        shutil.copytree(REPO / part, root / part)
    for name in ("bootstrap.toml", ".yamllint"):
        shutil.copy(REPO / name, root / name)
    text = (root / "bootstrap.toml").read_text()
    text = text.replace('registry-name = "krops-registry"', 'registry-name = "my-registry"')
    text = text.replace('flux-version = "2.9.x"', 'flux-version = "2.8.x"')
    text = text.replace("kindest/node:v1.35.5@", "kindest/node:v1.34.8@")
    (root / "bootstrap.toml").write_text(text)
    result = validate.run(str(root), environments=["local-host"], schema_location=str(REPO / "schemas" / "crds"))
    messages = sorted(f["message"] for f in result["findings"] if f["rule"] == "bootstrap")
    fi = "mgmt/local-host/flux-apps/workload-flux/fluxinstance.yaml"
    assert [f["file"] for f in result["findings"] if "FluxInstance" in f["message"]] == [fi, fi]
    assert (
        "FluxInstance distribution.version 2.9.x differs from bootstrap.toml bootstrap.flux-version = 2.8.x "
        "(management and workload run the same Flux)" in messages
    )
    assert (
        "FluxInstance sync.url oci://krops-registry:5000/krops differs from oci://my-registry:5000/krops "
        "(bootstrap.toml registry-name, registry-container-port, oci-repository)" in messages
    )
    assert (
        messages.count(
            "Kubernetes version v1.35.5 differs from the kind node image v1.34.8 "
            "(bootstrap.toml bootstrap.kind-node-image)"
        )
        == 4
    )


@pytest.mark.slow
def test_kustomizations_an_interrupted_pivot_suspended_are_not_waited_for_but_the_users_are(
    kind_api, fake_bins, run_module
):
    """Issue 30: a pivot killed during the move leaves kind's Kustomizations suspended; the bootstrap's handoff on a
    re-run must not wait 90 s for them (nothing resumes them but the pivot). A suspension without krops' mark is the
    user's and is still waited for."""
    from ansible_collections.krops.platform.plugins.module_utils import kube

    fake = FakeFlux(kind_api, HEALTHY).start()
    assert not run_module(flux_handoff, args(kind_api)).failed
    assert not fake.errors
    client = kube.connect(kind_api.kubeconfig_path, "kind-mgmt")
    for name in ("flux-system", "infra", "apps"):  # what capi_pivot's move phase does first
        kube.set_suspend(client, NS, name, True, by=kube.PIVOT_SUSPENDER)
    held = kind_api.get(*KS, "infra", NS)
    assert held["metadata"]["annotations"] == {"krops.io/suspended-by": "krops.platform.capi_pivot"}
    assert kube.readiness(held)[0] is False  # the suspension is a new generation nothing observes

    fake_bins.answer("helm", "list", stdout=deployed())
    started = time.monotonic()
    again = run_module(flux_handoff, args(kind_api, wait_timeout=30))
    assert not again.failed, again.get("msg")
    assert time.monotonic() - started < 10
    assert again["changed"] is False and again["ready"] is False
    assert again["held_by_pivot"] == ["flux-system", "infra", "apps"]
    assert [k["message"].split(")")[0] + ")" for k in again["kustomizations"]] == ["(suspended by the pivot)"] * 3
    assert again["warnings"] == [
        f"3 Kustomizations of flux-system on context kind-mgmt in {kind_api.kubeconfig_path} are suspended by an interrupted pivot "
        "(krops.io/suspended-by=krops.platform.capi_pivot): flux-system, infra, apps; not waited for. "
        "Run the pivot again: it completes the move (or resumes them on rollback)"
    ]

    # the user's own suspension (no krops mark) is waited for, and the timeout names it
    kube.merge_patch(client, *KS, "apps", NS, {"metadata": {"annotations": {kube.SUSPENDED_BY: None}}})
    user = run_module(flux_handoff, args(kind_api, wait_timeout=1))
    assert user.failed and "timed out after 1s waiting for the Flux Kustomizations" in user["msg"]
    assert "apps" in user["msg"] and "(suspended) generation" in user["msg"]
