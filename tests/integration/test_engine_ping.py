# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""No container engine: one line naming the socket, before anything that needs the engine (issue 23).

Real ansible-playbook runs of the environment playbooks (bootstrap of every environment, local-host's
teardown in check mode) and `molecule test -s default`, with DOCKER_HOST at a closed loopback port and at
a unix socket that does not exist; and the probe against the Docker Engine API double (which answers
GET /_ping with OK, as an engine does) and against a server that is not an engine.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.substrate.docker_double import DockerDouble
from tests.substrate import prewarm
from tests.substrate.fixtures import REPO, SHIPPED_ENVIRONMENTS, VENV_BIN, playbook_env, task_results

ENVIRONMENTS = SHIPPED_ENVIRONMENTS


def one_line(host):
    return f"no container engine answers at {host}: start Docker (or Podman's socket) or set DOCKER_HOST"


def closed_port():
    # A port nothing listens on: bound, then closed, so connecting is refused.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(params=["closed-tcp-port", "missing-unix-socket"])
def no_engine(request, tmp_path):
    if request.param == "closed-tcp-port":
        return f"tcp://127.0.0.1:{closed_port()}"
    return f"unix://{tmp_path}/no-engine/docker.sock"


def run(args, tmp_path, env):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    base = {"HOME": str(home), "KUBECONFIG": str(home / ".kube" / "config"), "ENGINE_SOCK": ""}
    proc = subprocess.run(
        [prewarm.playbook_command()] + list(args) + prewarm.playbook_args(),
        cwd=REPO,
        env=playbook_env(tmp_path, dict(base, **env)),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = json.loads(proc.stdout)
    return proc.returncode, output, home


def failed(output):
    return [(name, r["msg"]) for name, r in task_results(output).items() if r.get("failed")]


def changed(output):
    return [name for name, r in task_results(output).items() if r.get("changed")]


def files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_bootstrap_of_every_environment_ends_with_one_line_before_preflight(tmp_path, no_engine, env):
    rc, output, home = run(
        ["-i", f"inventories/{env}", f"playbooks/{env.replace('-', '_')}.yml"], tmp_path, {"DOCKER_HOST": no_engine}
    )
    assert rc == 2
    assert failed(output) == [("Check that the container engine answers", one_line(no_engine))]
    assert "Check the prerequisites" not in task_results(output)  # preflight (and all after it) never ran
    assert changed(output) == [] and files(home) == []


def test_without_docker_host_the_bootstrap_probes_the_socket_it_mounts(tmp_path):
    socket_path = tmp_path / "podman" / "podman.sock"
    env = {"DOCKER_HOST": "", "ENGINE_SOCK": str(socket_path)}
    rc, output, _home = run(["-i", "inventories/local-host", "playbooks/local_host.yml"], tmp_path, env)
    assert rc == 2
    assert failed(output) == [("Check that the container engine answers", one_line(f"unix://{socket_path}"))]


def test_local_host_teardown_in_check_mode_prints_the_plan_then_one_line(tmp_path, no_engine):
    rc, output, home = run(
        ["-i", "inventories/local-host", "playbooks/local-host.yml", "--tags", "teardown", "--check"],
        tmp_path,
        {"DOCKER_HOST": no_engine},
    )
    assert rc == 2
    results = task_results(output)
    plan = results["krops.platform.teardown : Show the teardown plan"]["msg"]
    assert plan[0].endswith("[check mode: nothing is deleted]")
    assert plan[1].startswith("1. remove the Docker containers labelled io.x-k8s.kind.cluster=")
    assert failed(output) == [
        (
            "krops.platform.teardown : Check that the container engine answers (the plan has steps that need it)",
            one_line(no_engine),
        )
    ]
    names = list(results)
    assert (
        names[-1]
        == "krops.platform.teardown : Check that the container engine answers (the plan has steps that need it)"
    )
    assert changed(output) == [] and files(home) == []


def test_the_engine_steps_are_named_once_and_each_is_a_plan_action():
    """The roles' registry: only plans with kind or container steps ping the engine."""
    import yaml

    actions = yaml.safe_load((REPO / "roles" / "teardown" / "vars" / "main.yml").read_text())
    assert set(actions["teardown_engine_actions"]) == {"delete-kind", "remove-containers", "remove-registry"}
    assert set(actions["teardown_engine_actions"]) <= set(actions["teardown_step_files"])


# --- the probe itself, against the engine double and against what is not an engine --------------------


def ping(tmp_path, docker_host):
    rc, output, _home = run(
        ["-i", "inventories/local-host", str(tmp_path / "ping.yml")],
        tmp_path,
        {"DOCKER_HOST": docker_host},
    )
    return rc, task_results(output)["ping"]


@pytest.fixture
def ping_play(tmp_path):
    (tmp_path / "ping.yml").write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - name: ping\n      krops.platform.engine_ping:\n"
    )


@pytest.mark.parametrize("over", ["tcp", "unix"])
def test_the_engine_double_answers_the_ping_as_an_engine_does(tmp_path, ping_play, over):
    sock_dir = None
    if over == "unix":
        import tempfile

        sock_dir = tempfile.mkdtemp(prefix="krops-ping-", dir="/tmp")  # unix socket paths are short
    docker = DockerDouble(socket_path=os.path.join(sock_dir, "docker.sock") if sock_dir else None)
    try:
        rc, result = ping(tmp_path, docker.url)
    finally:
        docker.stop()
    assert rc == 0, result
    assert result["docker_host"] == docker.url and result["api_version"] == "1.45" and result["probed"] is True
    assert result["changed"] is False
    assert ("GET", "/_ping", {}) in docker.calls


def test_a_server_that_is_not_an_engine_is_named(tmp_path, ping_play):
    class NotAnEngine(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(404)
            self.send_header("Content-Length", "9")
            self.end_headers()
            self.wfile.write(b"not found")

        def log_message(self, *args):
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotAnEngine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = "tcp://127.0.0.1:%d" % server.server_address[1]
    try:
        rc, result = ping(tmp_path, host)
    finally:
        server.shutdown()
        server.server_close()
    assert rc == 2
    assert result["msg"] == (
        f"{host} answers, but not as a container engine (GET /_ping gave 404 'not found'): "
        "point DOCKER_HOST at Docker's or Podman's socket"
    )


def test_an_address_that_is_not_an_engine_address_is_named(tmp_path, ping_play):
    rc, result = ping(tmp_path, "fd://3")
    assert rc == 2
    assert result["msg"] == (
        "DOCKER_HOST fd://3 is not an engine address: use unix:///path/to/docker.sock or tcp://host:port"
    )


# --- molecule's default scenario ----------------------------------------------------------------------


@pytest.mark.slow
def test_molecule_default_scenario_without_engine_ends_with_one_line_and_no_warnings(tmp_path):
    host = f"tcp://127.0.0.1:{closed_port()}"
    env = dict(
        os.environ,
        HOME=str(tmp_path),
        PATH="{}:{}".format(VENV_BIN, os.environ["PATH"]),
        ANSIBLE_HOME=str(tmp_path / ".ansible"),
        DOCKER_HOST=host,
        NO_COLOR="1",
    )
    proc = subprocess.run(
        [str(VENV_BIN / "molecule"), "test", "-s", "default"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f'"msg": "{one_line(host)}"' in text, text[-3000:]
    assert "requirements file" not in text and "Missing playbook" not in text, text[-3000:]
    assert "default > prepare: Executed: Failed" in text
    assert "default > cleanup: Executed: Successful" in text
    assert "can_talk_to_docker" not in text and "Cannot connect to the Docker daemon" not in text
