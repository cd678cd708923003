"""krops.platform.kind_cluster against a kind stand-in whose clusters are Kubernetes API emulators.

The stand-in (a Python script installed as `kind` on PATH) keeps its clusters in a JSON file and
writes kubeconfigs pointing at emulators, so create/reuse/recreate/delete, the kubeconfig export
and the node-readiness wait all run over real HTTP.
"""

import json
import os
import re
import stat
import sys
import threading

import pytest
import yaml

from ansible_collections.krops.platform.plugins.modules import kind_cluster
from tests.substrate import kind_engine, tool_contracts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

NODE = ("v1", "Node")


@pytest.fixture
def kind(fake_bins, kube_cluster):
    """The kind stand-in; kind.cluster(name) gives the emulator that plays that cluster's API."""

    class Kind:
        def __init__(self):
            self.emulators = {}
            script = kind_engine.SCRIPT.format(python=sys.executable, root=ROOT)
            fake_bins.install("kind", script)
            fake_bins.install("docker", script)

        def cluster(self, name, nodes=("control-plane",), ready=True):
            emulator = kube_cluster("kind-" + name, crds=False)
            self.emulators[name] = emulator
            (fake_bins.dir / "kind-servers.json").write_text(json.dumps({n: e.url for n, e in self.emulators.items()}))
            for role in nodes:
                node = f"{name}-{role}"
                emulator.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
                emulator.set_condition(
                    *NODE,
                    node,
                    type_="Ready",
                    status="True" if ready else "False",
                    reason="KubeletReady" if ready else "KubeletNotReady",
                    message="" if ready else "container runtime network not ready",
                )
            return emulator

        def existing(self):
            path = fake_bins.dir / "kind-state.json"
            return sorted(json.loads(path.read_text())["clusters"]) if path.exists() else []

        def state(self):
            path = fake_bins.dir / "kind-state.json"
            return json.loads(path.read_text()) if path.exists() else {"clusters": {}}

        def preexisting(self, name, nodes=("control-plane",)):
            path = fake_bins.dir / "kind-state.json"
            state = self.state()
            state["clusters"][name] = {
                "config": {},
                "image": None,
                "nodes": {f"{name}-{n}": {"files": {}, "dirs": []} for n in nodes},
            }
            path.write_text(json.dumps(state))

        def node_files(self, name):
            return {node: spec["files"] for node, spec in self.state()["clusters"][name]["nodes"].items()}

        def calls(self, *prefix):
            return [c for c in fake_bins.calls("kind") if c["argv"][: len(prefix)] == list(prefix)]

    return Kind()


def test_create_waits_for_ready_nodes_and_exports_a_private_kubeconfig(kind, run_module, tmp_path):
    api = kind.cluster("mgmt", nodes=("control-plane", "worker"))
    kubeconfig = tmp_path / "kube" / "kind-mgmt.yaml"
    result = run_module(
        kind_cluster,
        {
            "name": "mgmt",
            "environment": "local-host",
            "kubeconfig_path": str(kubeconfig),
            "node_image": "kindest/node:v1.32.2",
        },
    )
    assert not result.failed, result
    assert result["changed"] and result["created"] and not result["recreated"]
    assert result["context"] == "kind-mgmt" and result["kind_version"] == "0.32.0"
    assert result["nodes"] == [{"name": "mgmt-control-plane", "ready": True}, {"name": "mgmt-worker", "ready": True}]
    assert kind.existing() == ["mgmt"]
    assert stat.S_IMODE(os.stat(kubeconfig).st_mode) == 0o600
    exported = yaml.safe_load(kubeconfig.read_text())
    assert exported["current-context"] == "kind-mgmt"
    assert exported["clusters"][0]["cluster"]["server"] == api.url
    # the config went through stdin, with the socket mounted into every node
    create = kind.calls("create", "cluster")[0]
    assert create["argv"] == [
        "create",
        "cluster",
        "--name",
        "mgmt",
        "--config",
        "-",
        "--image",
        "kindest/node:v1.32.2",
        "--kubeconfig",
        str(kubeconfig),
    ]
    config = yaml.safe_load(create["stdin"])
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4" and config["kind"] == "Cluster"
    assert config["nodes"] == [
        {
            "role": "control-plane",
            "extraMounts": [{"hostPath": "/var/run/docker.sock", "containerPath": "/var/run/docker.sock"}],
        }
    ]
    assert "kind-secret-token" not in json.dumps(result)
    # readiness was read from the cluster's API over HTTP
    assert any(path.startswith("/api/v1/nodes") for method, path in api.requests)


def test_existing_healthy_cluster_is_reused_unchanged(kind, run_module, tmp_path):
    kind.cluster("mgmt")
    kubeconfig = tmp_path / "kind-mgmt.yaml"
    first = run_module(kind_cluster, {"name": "mgmt", "environment": "local-host", "kubeconfig_path": str(kubeconfig)})
    assert first["changed"] and first["created"]
    second = run_module(kind_cluster, {"name": "mgmt", "environment": "local-host", "kubeconfig_path": str(kubeconfig)})
    assert not second.failed, second
    assert second["changed"] is False and not second["created"] and not second["recreated"]
    assert second["nodes"] == [{"name": "mgmt-control-plane", "ready": True}]
    assert len(kind.calls("create", "cluster")) == 1
    # check mode on the reused cluster is also unchanged
    third = run_module(
        kind_cluster, {"name": "mgmt", "environment": "local-host", "kubeconfig_path": str(kubeconfig)}, check_mode=True
    )
    assert third["changed"] is False


def test_export_keeps_other_contexts_and_fixes_mode(kind, run_module, tmp_path):
    api = kind.cluster("mgmt")
    kind.preexisting("mgmt")
    kubeconfig = tmp_path / "config"
    other = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "prod",
        "clusters": [{"name": "prod", "cluster": {"server": "https://prod.example:6443"}}],
        "contexts": [{"name": "prod", "context": {"cluster": "prod", "user": "prod"}}],
        "users": [{"name": "prod", "user": {"token": "x"}}],
    }
    kubeconfig.write_text(yaml.safe_dump(other))
    kubeconfig.chmod(0o644)
    planned = run_module(
        kind_cluster, {"name": "mgmt", "environment": "local-host", "kubeconfig_path": str(kubeconfig)}, check_mode=True
    )
    assert planned["changed"] is True and not planned["created"]
    assert yaml.safe_load(kubeconfig.read_text()) == other  # check mode wrote nothing
    result = run_module(kind_cluster, {"name": "mgmt", "environment": "local-host", "kubeconfig_path": str(kubeconfig)})
    assert result["changed"] and not result["created"]
    merged = yaml.safe_load(kubeconfig.read_text())
    assert [c["name"] for c in merged["contexts"]] == ["prod", "kind-mgmt"]
    assert merged["current-context"] == "kind-mgmt"
    assert merged["clusters"][1]["cluster"]["server"] == api.url
    assert stat.S_IMODE(os.stat(kubeconfig).st_mode) == 0o600


def test_reused_cluster_with_unready_nodes_fails_suggesting_recreate(kind, run_module, tmp_path):
    kind.cluster("mgmt", ready=False)
    kind.preexisting("mgmt")
    result = run_module(
        kind_cluster,
        {"name": "mgmt", "environment": "local-host", "kubeconfig_path": str(tmp_path / "kc"), "wait_timeout": 1},
    )
    assert result.failed
    assert result["msg"] == (
        "kind cluster mgmt: nodes not Ready within 1s (not Ready: mgmt-control-plane (KubeletNotReady: container "
        "runtime network not ready)); the existing cluster looks unhealthy: set recreate: true to delete and create "
        "it again (or `kind delete cluster --name mgmt`)"
    )
    assert result["nodes"] == [{"name": "mgmt-control-plane", "ready": False}]
    assert kind.calls("create", "cluster") == []


def test_new_cluster_waits_for_nodes_event_driven(kind, run_module, tmp_path):
    api = kind.cluster("mgmt", ready=False)
    threading.Timer(0.5, lambda: api.set_condition(*NODE, "mgmt-control-plane", type_="Ready", status="True")).start()
    result = run_module(
        kind_cluster,
        {"name": "mgmt", "environment": "local-host", "kubeconfig_path": str(tmp_path / "kc"), "wait_timeout": 20},
    )
    assert not result.failed, result
    assert result["nodes"] == [{"name": "mgmt-control-plane", "ready": True}]


def test_recreate_deletes_then_creates(kind, run_module, tmp_path):
    kind.cluster("mgmt")
    kind.preexisting("mgmt")
    planned = run_module(kind_cluster, {"name": "mgmt", "environment": "local-host", "recreate": True}, check_mode=True)
    assert planned["changed"] and planned["recreated"] and kind.calls("delete", "cluster") == []
    result = run_module(
        kind_cluster,
        {"name": "mgmt", "environment": "local-host", "recreate": True, "kubeconfig_path": str(tmp_path / "kc")},
    )
    assert not result.failed, result
    assert result["changed"] and result["recreated"] and not result["created"]
    verbs = [c["argv"][:2] for c in kind.calls() if c["argv"][:1] in (["create"], ["delete"])]
    assert verbs == [["delete", "cluster"], ["create", "cluster"]]
    assert kind.existing() == ["mgmt"]


def test_check_mode_plans_a_create_without_calling_kind_create(kind, run_module, tmp_path):
    kind.cluster("mgmt")
    result = run_module(
        kind_cluster,
        {"name": "mgmt", "environment": "local-host", "kubeconfig_path": str(tmp_path / "kc")},
        check_mode=True,
    )
    assert result["changed"] and result["created"] and result["nodes"] == []
    assert kind.calls("create", "cluster") == [] and kind.existing() == []
    assert not (tmp_path / "kc").exists()


def test_registry_mirror_writes_hosts_toml_into_the_nodes_after_creation(kind, run_module, tmp_path):
    """The mirror file is not a mount: a mount of certs.d/localhost:5001/... fails in Docker (the stand-in
    hands each mount to the engine as kind's --volume spec, which Docker splits on ':')."""
    kind.cluster("mgmt", nodes=("control-plane", "worker"))
    config = {
        "nodes": [{"role": "control-plane"}, {"role": "worker"}],
        "containerdConfigPatches": ["[plugins.x]\n  y = 1\n"],
    }
    mirror = {"host": "localhost:5001", "endpoint": "http://krops-registry:5000"}
    result = run_module(
        kind_cluster,
        {
            "name": "mgmt",
            "environment": "local-host",
            "engine_socket": "/run/podman/podman.sock",
            "config": config,
            "registry_mirror": mirror,
            "kubeconfig_path": str(tmp_path / "kc"),
        },
    )
    assert not result.failed, result
    sent = yaml.safe_load(kind.calls("create", "cluster")[0]["stdin"])
    assert sent["containerdConfigPatches"] == [
        "[plugins.x]\n  y = 1\n",
        '[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "/etc/containerd/certs.d"\n',
    ]
    for node in sent["nodes"]:
        assert node["extraMounts"] == [
            {"hostPath": "/run/podman/podman.sock", "containerPath": "/run/podman/podman.sock"}
        ]
    hosts = "/etc/containerd/certs.d/localhost:5001/hosts.toml"
    assert kind.node_files("mgmt") == {
        "mgmt-control-plane": {hosts: '[host."http://krops-registry:5000"]\n'},
        "mgmt-worker": {hosts: '[host."http://krops-registry:5000"]\n'},
    }
    assert result["mirror_nodes"] == ["mgmt-control-plane", "mgmt-worker"]
    assert config == {
        "nodes": [{"role": "control-plane"}, {"role": "worker"}],
        "containerdConfigPatches": ["[plugins.x]\n  y = 1\n"],
    }  # caller's dict untouched
    # a second run finds the files in place: nothing changes, nothing is written
    writes = len(kind.calls("exec", "-i"))
    again = run_module(
        kind_cluster,
        {
            "name": "mgmt",
            "environment": "local-host",
            "registry_mirror": mirror,
            "kubeconfig_path": str(tmp_path / "kc"),
        },
    )
    assert not again.failed and again["changed"] is False and again["mirror_nodes"] == []
    assert len([c for c in kind.calls() if c["argv"][:2] == ["exec", "-i"]]) == writes


def test_reused_cluster_gets_a_missing_hosts_toml_and_check_mode_only_reports_it(kind, run_module, tmp_path):
    kind.cluster("mgmt")
    kind.preexisting("mgmt")
    mirror = {"host": "localhost:5001", "endpoint": "http://krops-registry:5000"}
    args = {
        "name": "mgmt",
        "environment": "local-host",
        "registry_mirror": mirror,
        "kubeconfig_path": str(tmp_path / "kc"),
    }
    run_module(kind_cluster, dict(args))  # exports the kubeconfig once
    kind.preexisting("mgmt")  # the node loses its files
    planned = run_module(kind_cluster, dict(args), check_mode=True)
    assert planned["changed"] is True and planned["mirror_nodes"] == ["mgmt-control-plane"]
    assert kind.node_files("mgmt") == {"mgmt-control-plane": {}}
    result = run_module(kind_cluster, dict(args))
    assert result["changed"] and result["mirror_nodes"] == ["mgmt-control-plane"]
    assert list(kind.node_files("mgmt")["mgmt-control-plane"]) == ["/etc/containerd/certs.d/localhost:5001/hosts.toml"]
    assert result["marker"] is None  # a reused cluster is never given an ownership marker


def test_creation_writes_the_ownership_marker_and_reuse_keeps_it(kind, run_module, tmp_path):
    api = kind.cluster("mgmt")
    result = run_module(
        kind_cluster, {"name": "mgmt", "environment": "local-host", "kubeconfig_path": str(tmp_path / "kc")}
    )
    assert not result.failed, result
    marker = api.get("v1", "ConfigMap", "krops-bootstrap", "kube-system")
    assert marker["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "krops"}
    assert set(marker["data"]) == {"environment", "kind-cluster", "created-at"}
    assert marker["data"]["environment"] == "local-host" and marker["data"]["kind-cluster"] == "mgmt"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", marker["data"]["created-at"])
    assert result["marker"] == marker["data"]
    again = run_module(
        kind_cluster, {"name": "mgmt", "environment": "local-host", "kubeconfig_path": str(tmp_path / "kc")}
    )
    assert again["changed"] is False and again["marker"] is None
    assert api.get("v1", "ConfigMap", "krops-bootstrap", "kube-system")["data"] == marker["data"]


def test_environment_is_required_to_create(kind, run_module):
    kind.cluster("mgmt")
    result = run_module(kind_cluster, {"name": "mgmt"})
    assert result.failed and result["msg"] == "state is present but all of the following are missing: environment"
    assert kind.calls("create", "cluster") == []


def test_config_is_checked_like_kind_decodes_it(kind, run_module):
    kind.cluster("mgmt")
    base = {"name": "mgmt", "environment": "local-host"}
    result = run_module(kind_cluster, dict(base, config={"nodes": [{"role": "control-plane", "extraMount": []}]}))
    assert result.failed and result["msg"] == (
        "config.nodes[0]: unknown field 'extraMount' (kind kind.x-k8s.io/v1alpha4 accepts extraMounts, "
        "extraPortMappings, image, kubeadmConfigPatches, kubeadmConfigPatchesJSON6902, labels, role)"
    )
    result = run_module(
        kind_cluster,
        dict(
            base,
            config={
                "nodes": [
                    {
                        "role": "control-plane",
                        "extraMounts": [
                            {"hostPath": "/tmp/certs.d/localhost:5001/hosts.toml", "containerPath": "/etc/x/hosts.toml"}
                        ],
                    }
                ]
            },
        ),
    )
    assert result.failed and result["msg"] == (
        "config.nodes[0].extraMounts[0].hostPath '/tmp/certs.d/localhost:5001/hosts.toml' contains ':'; kind hands "
        "mounts to the engine as --volume host:container[:ro], which Docker splits on ':'. Use a path without ':'"
    )
    result = run_module(kind_cluster, dict(base, config={"apiVersion": "kind.x-k8s.io/v1alpha3"}))
    assert (
        result.failed
        and result["msg"] == "config.apiVersion must be kind.x-k8s.io/v1alpha4, got 'kind.x-k8s.io/v1alpha3'"
    )
    assert kind.calls("create", "cluster") == []


# --- the stand-ins refuse what kind and Docker refuse ---------------------------------------


def test_kind_stand_in_refuses_a_colon_mount_as_docker_would(kind, fake_bins):
    import subprocess

    config = yaml.safe_dump(
        {
            "kind": "Cluster",
            "apiVersion": "kind.x-k8s.io/v1alpha4",
            "nodes": [
                {
                    "role": "control-plane",
                    "extraMounts": [
                        {
                            "hostPath": "/h/localhost:5001/hosts.toml",
                            "containerPath": "/etc/containerd/certs.d/localhost:5001/hosts.toml",
                            "readOnly": True,
                        }
                    ],
                }
            ],
        }
    )
    proc = subprocess.run(
        [str(fake_bins.dir / "kind"), "create", "cluster", "--name", "x", "--config", "-"],
        input=config,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1  # kind exits 1 after docker run exits 125
    assert (
        "exit status 125" in proc.stderr
        and "invalid volume specification: '/h/localhost:5001/hosts.toml:/etc/containerd/certs.d/localhost:5001/"
        "hosts.toml:ro'"
        in proc.stderr
    )
    proc = subprocess.run(
        [str(fake_bins.dir / "kind"), "create", "cluster", "--name", "x", "--config", "-"],
        input="kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnode: []\n",
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1 and "field node not found in type v1alpha4.Cluster" in proc.stderr
    proc = subprocess.run(
        [str(fake_bins.dir / "kind"), "create", "cluster", "--nmae", "x"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 1 and proc.stderr.strip() == "ERROR: unknown flag: --nmae"
    assert kind.existing() == []


@pytest.mark.parametrize(
    "spec, parsed",
    [
        ("/a:/b", ("/a", "/b", "")),
        ("/a:/b:ro", ("/a", "/b", "ro")),
        ("/a:/b:ro,Z,rshared", ("/a", "/b", "ro,Z,rshared")),
        ("/b", (None, "/b", "")),
    ],
)
def test_docker_volume_specs_docker_accepts(spec, parsed):
    assert tool_contracts.docker_volume(spec) == parsed


@pytest.mark.parametrize(
    "spec, message",
    [
        ("/a:/x/localhost:5001/hosts.toml:ro", "invalid volume specification: '/a:/x/localhost:5001/hosts.toml:ro'"),
        ("/a:/x/localhost:5001/hosts.toml", "invalid mode: 5001/hosts.toml"),
        ("/b:ro", "invalid volume specification: '/b:ro'"),
        (":/b", "invalid volume specification: ':/b'"),
        ("/a:/b:ro,rw", "invalid mode: ro,rw"),
    ],
)
def test_docker_volume_specs_docker_refuses(spec, message):
    with pytest.raises(tool_contracts.Refused) as refused:
        tool_contracts.docker_volume(spec)
    assert str(refused.value) == "docker: Error response from daemon: " + message and refused.value.rc == 125


def test_absent_deletes_and_is_idempotent(kind, run_module):
    kind.cluster("mgmt")
    kind.preexisting("mgmt")
    planned = run_module(kind_cluster, {"name": "mgmt", "state": "absent"}, check_mode=True)
    assert planned["changed"] and planned["deleted"] and kind.existing() == ["mgmt"]
    result = run_module(kind_cluster, {"name": "mgmt", "state": "absent"})
    assert result["changed"] and result["deleted"] and kind.existing() == []
    again = run_module(kind_cluster, {"name": "mgmt", "state": "absent"})
    assert again["changed"] is False and not again["deleted"]
    assert len(kind.calls("delete", "cluster")) == 1


def test_absent_with_a_registry_that_does_not_serve_is_refused_and_changes_nothing(kind, run_module):
    """The pivot deletes kind only while the local registry serves (Flux on the management cluster pulls from it)."""
    from tests.substrate.fixtures import free_port

    kind.cluster("mgmt")
    kind.preexisting("mgmt")
    url = f"http://127.0.0.1:{free_port()}"
    for check_mode in (True, False):
        result = run_module(
            kind_cluster, {"name": "mgmt", "state": "absent", "require_registry": url}, check_mode=check_mode
        )
        assert result.failed and result["changed"] is False
        assert result["msg"].startswith(
            f"Not deleting kind cluster mgmt: the registry {url} does not serve /v2/ (no answer: "
        )
        assert result["msg"].endswith("); Flux on the management cluster pulls from it. Start it, then run again.")
    assert kind.existing() == ["mgmt"] and kind.calls("delete", "cluster") == []


def test_absent_with_a_serving_registry_deletes(kind, run_module, oci_registry):
    kind.cluster("mgmt")
    kind.preexisting("mgmt")
    result = run_module(kind_cluster, {"name": "mgmt", "state": "absent", "require_registry": f"http://{oci_registry}"})
    assert not result.failed, result.get("msg")
    assert result["deleted"] and kind.existing() == []


def test_kind_failure_reports_command_rc_and_stderr(kind, run_module, monkeypatch, tmp_path):
    kind.cluster("mgmt")
    monkeypatch.setenv("FAKE_KIND_CREATE_FAIL", "1")
    result = run_module(
        kind_cluster, {"name": "mgmt", "environment": "local-host", "kubeconfig_path": str(tmp_path / "kc")}
    )
    assert result.failed
    assert result["msg"] == (
        "kind cluster mgmt: `kind create cluster --name mgmt --config - --kubeconfig %s` failed "
        "with exit code 1: ERROR: failed to create cluster: failed to pull image kindest/node" % (tmp_path / "kc")
    )
    assert result["rc"] == 1 and "failed to pull image" in result["stderr"]


def test_missing_kind_binary_is_named(fake_bins, run_module, tmp_path):
    result = run_module(
        kind_cluster, {"name": "mgmt", "environment": "local-host", "kind_binary": str(tmp_path / "nope" / "kind")}
    )
    assert result.failed
    assert result["msg"] == "kind cluster mgmt: kind binary %s does not exist or is not executable (kind_binary=)" % (
        tmp_path / "nope" / "kind"
    )
    fake_bins.remove("kind")
    result = run_module(kind_cluster, {"name": "mgmt", "environment": "local-host"})
    assert result.failed and result["msg"].startswith("kind cluster mgmt: kind was not found on PATH (")


def test_bad_config_is_reported_without_traceback(kind, run_module):
    kind.cluster("mgmt")
    result = run_module(kind_cluster, {"name": "mgmt", "environment": "local-host", "config": {"kind": "Pod"}})
    assert result.failed and result["msg"] == "config.kind must be Cluster, got 'Pod'"
    result = run_module(
        kind_cluster, {"name": "mgmt", "environment": "local-host", "config": {"nodes": "control-plane"}}
    )
    assert result.failed and result["msg"] == "config.nodes must be a list of node dicts"


# --- module_utils.cli, through the same stand-ins -----------------------------------------


def test_cli_probes_the_version_once_and_keeps_secrets_out_of_argv_and_errors(kind, fake_bins):
    from ansible_collections.krops.platform.plugins.module_utils import cli

    tool = cli.Cli("kind")
    assert tool.version() == "0.32.0"
    assert cli.Cli("kind").version() == "0.32.0"
    assert len(kind.calls("version")) == 1  # probed once per process and binary

    fake_bins.answer("flux", match="fail", stderr="Error: token hunter2 rejected\n", rc=3)
    flux_cli = cli.Cli("flux")
    with pytest.raises(cli.CliError) as failure:
        flux_cli.run(["fail", "--password-stdin"], stdin="hunter2\n", env={"FLUX_TOKEN": "hunter2"}, redact=["hunter2"])
    assert str(failure.value) == "`flux fail --password-stdin` failed with exit code 3: Error: token ******** rejected"
    assert failure.value.rc == 3 and "hunter2" not in json.dumps(failure.value.as_dict())
    call = fake_bins.calls("flux")[-1]
    assert call["argv"] == ["fail", "--password-stdin"] and call["stdin"] == "hunter2\n"
    assert call["env"]["FLUX_TOKEN"] == "hunter2"  # the secret went through stdin and the environment only


def test_cli_timeout_and_missing_tools(fake_bins):
    from ansible_collections.krops.platform.plugins.module_utils import cli

    fake_bins.install("slow", "#!/bin/sh\nsleep 5\n")
    with pytest.raises(cli.CliError) as failure:
        cli.Cli("slow").run(["x"], timeout=0.3)
    assert str(failure.value) == "`slow x` did not finish within 0.3s"
    found, missing = cli.missing_tools(["kind", "nope-1", "helm", "nope-2"])
    assert sorted(found) == ["helm", "kind"] and missing == ["nope-1", "nope-2"]


# helm v4.2.4, clusterctl v1.13.5 and kubectl refuse flags they do not have; so do their stand-ins.
@pytest.mark.parametrize(
    "tool, argv, message",
    [
        (
            "helm",
            ["upgrade", "--install", "x", "oci://ghcr.io/a/x", "--recreate-pods"],
            "Error: unknown flag: --recreate-pods",
        ),
        ("helm", ["list", "--all"], "Error: unknown flag: --all"),
        (
            "helm",
            ["upgrade", "--install", "x", "x", "--version", "1"],
            "Error: non-absolute URLs should be in form of repo_name/path_to_chart, got: x",
        ),
        ("helm", ["upgrade", "--install", "x"], 'Error: "helm upgrade" requires 2 arguments'),
        (
            "helm",
            ["upgrade", "--install", "x", "oci://ghcr.io/a/x", "--timeout"],
            "Error: flag needs an argument: --timeout",
        ),
        (
            "helm",
            [
                "upgrade",
                "--install",
                "capi-operator",
                "cluster-api-operator",
                "--repo",
                "https://kubernetes-sigs.github.io/cluster-api-operator",
                "--version",
                "0.29.0",
            ],
            'Error: chart "cluster-api-operator" version "0.29.0" not found in '
            "https://kubernetes-sigs.github.io/cluster-api-operator repository",
        ),
        (
            "helm",
            [
                "upgrade",
                "--install",
                "cert-manager",
                "cert-manager",
                "--repo",
                "https://charts.jetstack.io",
                "--version",
                "v1.21.2",
            ],
            'Error: chart "cert-manager" version "v1.21.2" not found in https://charts.jetstack.io repository',
        ),
        (
            "helm",
            [
                "upgrade",
                "--install",
                "flux-operator",
                "oci://ghcr.io/controlplaneio-fluxcd/charts/flux-operator",
                "--version",
                "v0.58.1",
            ],
            'Error: failed to perform "FetchReference" on source: ghcr.io/controlplaneio-fluxcd/charts/flux-operator:v0.58.1: '
            "not found",
        ),
        (
            "clusterctl",
            ["move", "--to-kubeconfig", "k", "--wait-providers"],
            "Error: unknown flag: --wait-providers\nRun 'clusterctl move --help' for usage.",
        ),
        ("clusterctl", ["moev"], 'Error: unknown command "moev" for "clusterctl"'),
        (
            "docker",
            ["run", "-d", "-v", "/h/certs.d/localhost:5001:/etc/certs.d/localhost:5001", "registry:2"],
            "docker: Error response from daemon: invalid volume specification: "
            "'/h/certs.d/localhost:5001:/etc/certs.d/localhost:5001'",
        ),
        (
            "kubectl",
            ["--kubeconfig", "k", "port-forward", "svc/podinfo", "9898:9898", "--addr", "0.0.0.0"],
            "Error: unknown flag: --addr\nSee 'kubectl port-forward --help' for usage.",
        ),
    ],
)
def test_strict_stand_ins_refuse_what_the_tool_refuses(fake_bins, tool, argv, message):
    import subprocess

    proc = subprocess.run([str(fake_bins.dir / tool)] + argv, capture_output=True, text=True, check=False)
    assert proc.returncode == (125 if tool == "docker" else 1) and proc.stderr.strip() == message


@pytest.mark.parametrize(
    "tool, argv",
    [
        (
            "helm",
            [
                "upgrade",
                "--install",
                "flux-operator",
                "oci://ghcr.io/controlplaneio-fluxcd/charts/flux-operator",
                "--version",
                "0.58.1",
                "--namespace",
                "flux-system",
                "--create-namespace",
                "--wait",
                "--timeout",
                "10m",
                "--kubeconfig",
                "k",
                "--kube-context",
                "c",
            ],
        ),
        ("helm", ["list", "-n", "cert-manager", "--filter", "^cert-manager$", "-o", "json"]),
        (
            "helm",
            [
                "upgrade",
                "--install",
                "cert-manager",
                "cert-manager",
                "--repo",
                "https://charts.jetstack.io",
                "--version",
                "v1.21.1",
                "--wait=watcher",
            ],
        ),
        (
            "clusterctl",
            [
                "move",
                "--kubeconfig",
                "a",
                "--kubeconfig-context",
                "b",
                "--to-kubeconfig",
                "c",
                "--to-kubeconfig-context",
                "d",
                "-n",
                "default",
                "--dry-run",
            ],
        ),
        ("clusterctl", ["version", "-o", "short"]),
        (
            "kubectl",
            [
                "--kubeconfig",
                "k",
                "--context",
                "c",
                "-n",
                "podinfo",
                "port-forward",
                "svc/podinfo",
                "9898:9898",
                "--address",
                "127.0.0.1",
            ],
        ),
    ],
)
def test_strict_stand_ins_accept_what_krops_runs(fake_bins, tool, argv):
    import subprocess

    proc = subprocess.run([str(fake_bins.dir / tool)] + argv, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_helm_stand_in_plays_the_major_a_test_makes_it_claim(fake_bins):
    import subprocess

    fake_bins.answer("helm", "version", stdout='version.BuildInfo{Version:"v3.17.0", GitCommit:"x"}\n')
    proc = subprocess.run([str(fake_bins.dir / "helm"), "list", "--all"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr  # helm 3 still has list --all
