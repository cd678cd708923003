# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""pytest fixtures: the test substrate every krops test reuses.

- ``kube_cluster``: factory of Kubernetes API emulators (one per name), each with its
  own kubeconfig file; ``kind_api`` / ``mgmt_api`` are the two usual ones.
- ``moto``: moto in server mode (one per session, reset before each test).
- ``oci_registry``: Debian's docker-registry on 127.0.0.1.
- ``fake_bins``: recording stand-ins for kind, helm, clusterctl, flux and docker.
- ``run_module``: runs a krops module's main() in-process (fast, with check mode).
- ``ansible_playbook``: runs a real ansible-playbook against the checkout.

Servers are started, awaited until they answer and stopped by PID; no test leaks a
process or a port.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.substrate import prewarm
from tests.substrate.kube_emulator import KubeEmulator

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
# The environments of the shipped bootstrap.toml, in its order: tests that go over every environment read them here,
# so a new one is covered without editing a list (a hand-written list missed aws-crossplane).
SHIPPED_ENVIRONMENTS = tuple(tomllib.loads((REPO / "bootstrap.toml").read_text())["environments"])


def copy_playbook(name, root):
    """playbooks/<name> into root/playbooks, with the task and vars files the playbooks share."""
    target = root / "playbooks"
    for shared in ("tasks", "vars"):
        shutil.copytree(REPO / "playbooks" / shared, target / shared, dirs_exist_ok=True)
    shutil.copy(REPO / "playbooks" / name, target / name)
    return target / name


def python_executable(path, script, environ=None):
    """Make ``path`` an executable that runs the Python ``script`` as __main__ with this interpreter (a stand-in
    for a command-line tool), with ``environ`` set first. runpy puts the script's own path in sys.argv[0], so a
    stand-in finds its folder through the environment, not its argv."""
    lines = [f"#!{sys.executable}", "import os, runpy"]
    lines += [f"os.environ[{key!r}] = {str(value)!r}" for key, value in (environ or {}).items()]
    lines.append(f"runpy.run_path({str(script)!r}, run_name='__main__')")
    path = Path(path)
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return path


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_answers(url, timeout=30.0, process=None):
    """Poll url until any HTTP answer arrives; fail with the server's output otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"server for {url} exited with {process.returncode}")
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"server at {url} did not answer within {timeout:.0f}s")


class ManagedProcess:
    """A server subprocess in its own process group, stopped by PID."""

    def __init__(self, argv, log_path, env=None):
        self.log = open(log_path, "wb")
        self.process = subprocess.Popen(
            argv, stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        self.pid = self.process.pid

    def stop(self):
        if self.process.poll() is None:
            os.killpg(self.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.process.wait(5)
        self.log.close()


# --- Kubernetes API emulators --------------------------------------------------------


@pytest.fixture(scope="session", autouse=True)
def _isolated_tempdir(tmp_path_factory):
    """Client discovery caches (osrcp-*, k8srcp-*) live in a private temp folder."""
    folder = tmp_path_factory.mktemp("tmp")
    previous = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = None
    yield folder
    if previous is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = previous
    tempfile.tempdir = None


@pytest.fixture
def kube_cluster(tmp_path):
    """Factory: kube_cluster('kind-mgmt') -> a started KubeEmulator with .kubeconfig_path."""
    started = {}

    def make(name="kind-mgmt", crds=True):
        if name in started:
            return started[name]
        emulator = KubeEmulator(name)
        if crds:
            emulator.load_krops_crds()
        emulator.start()
        emulator.kubeconfig_path = emulator.write_kubeconfig(tmp_path / (f"{name}.kubeconfig"), context=name)
        started[name] = emulator
        return emulator

    yield make
    for emulator in started.values():
        emulator.stop()


@pytest.fixture
def kind_api(kube_cluster):
    return kube_cluster("kind-mgmt")


@pytest.fixture
def mgmt_api(kube_cluster):
    return kube_cluster("krops-mgmt")


# --- moto ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def _moto_server(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    argv = [str(VENV_BIN / "python"), "-m", "tests.substrate.moto_server", "-H", "127.0.0.1", "-p", str(port)]
    server = ManagedProcess(argv, log, env=dict(os.environ, PYTHONPATH=str(REPO)))
    url = "http://127.0.0.1:%d" % port
    try:
        wait_until_answers(url + "/moto-api/", process=server.process)
        yield url
    finally:
        server.stop()


@pytest.fixture
def moto(_moto_server, monkeypatch):
    """A clean moto account: endpoint URL, with dummy AWS credentials in the environment."""
    request = urllib.request.Request(_moto_server + "/moto-api/reset", method="POST")
    urllib.request.urlopen(request, timeout=10).close()
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "eu-north-1",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return _moto_server


# --- OCI registry -------------------------------------------------------------------


def _registry_binary():
    found = shutil.which("docker-registry") or "/usr/bin/docker-registry"
    if not os.path.exists(found):
        pytest.fail("docker-registry is missing: run `make setup` (installs the Debian package docker-registry)")
    return found


@pytest.fixture
def oci_registry(tmp_path):
    """A real OCI registry (Debian docker-registry 2.8) on 127.0.0.1; yields 'host:port'."""
    port = free_port()
    root = tmp_path / "registry"
    root.mkdir()
    config = tmp_path / "registry.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": 0.1,
                "log": {"level": "warn"},
                "storage": {"filesystem": {"rootdirectory": str(root)}, "delete": {"enabled": True}},
                "http": {"addr": "127.0.0.1:%d" % port},
            }
        )
    )
    server = ManagedProcess([_registry_binary(), "serve", str(config)], tmp_path / "registry.log")
    try:
        wait_until_answers("http://127.0.0.1:%d/v2/" % port, process=server.process)
        yield "127.0.0.1:%d" % port
    finally:
        server.stop()


# --- recording stand-ins for external binaries ---------------------------------------

_STAND_IN = '''#!{python}
"""Recording stand-in for `{name}`: logs argv, environment and stdin, then answers from rules."""
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
stdin = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
with open(os.path.join(here, "calls.jsonl"), "a") as log:
    log.write(json.dumps({{"tool": "{name}", "argv": sys.argv[1:], "env": dict(os.environ),
                          "cwd": os.getcwd(), "stdin": stdin}}) + "\\n")
# helm, clusterctl and kubectl refuse what the pinned real tool refuses (tests/substrate/tool_contracts.py).
sys.path.insert(0, {root!r})
from tests.substrate import tool_contracts
strict = tool_contracts.STRICT.get("{name}")
rules_path = os.path.join(here, "rules.json")
rules = json.load(open(rules_path)) if os.path.exists(rules_path) else {{}}
if strict:
    # A test that makes helm answer `version` as another major gets that major's flags.
    claimed = [r["stdout"] for r in rules.get("{name}", []) if r.get("match") == "version"]
    major = int(claimed[0].split('Version:"v', 1)[-1].lstrip("v")[:1]) if claimed and "{name}" == "helm" else 4
    try:
        strict(sys.argv[1:], major) if "{name}" == "helm" else strict(sys.argv[1:])
    except tool_contracts.Refused as exc:
        sys.stderr.write(str(exc) + "\\n")
        sys.exit(exc.rc)
joined = " ".join(sys.argv[1:])
for rule in rules.get("{name}", []):
    if rule.get("match", "") in joined:
        sys.stdout.write(rule.get("stdout", ""))
        sys.stderr.write(rule.get("stderr", ""))
        sys.exit(rule.get("rc", 0))
# What the pinned tools print for their version, unless a rule answered.
# helm pkg/cmd/version.go formatVersion: --short is v<ver>+g<commit7>, else %#v of BuildInfo.
if "{name}" == "helm" and sys.argv[1:2] == ["version"]:
    if "--short" in sys.argv:
        print("v%s+g0000000" % tool_contracts.HELM_VERSION)
    else:
        print('version.BuildInfo{{Version:"v%s", GitCommit:"0000000000000000000000000000000000000000", '
              'GitTreeState:"clean", GoVersion:"go1.25.0", KubeClientVersion:"v1.35"}}' % tool_contracts.HELM_VERSION)
elif "{name}" == "clusterctl" and sys.argv[1:2] == ["version"]:
    print("v%s" % tool_contracts.CLUSTERCTL_VERSION)
sys.exit(0)
'''


class FakeBins:
    """Stand-ins on PATH for kind, helm, clusterctl, flux and docker; each call is recorded."""

    TOOLS = ("kind", "helm", "clusterctl", "flux", "docker", "kubectl", "sops")

    def __init__(self, folder):
        self.dir = Path(folder)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.rules = {}
        for name in self.TOOLS:
            self.install(name)

    def install(self, name, script=None):
        """Install the recording stand-in for name (or a custom Python script body)."""
        path = self.dir / name
        path.write_text(script or _STAND_IN.format(python=sys.executable, name=name, root=str(REPO)))
        path.chmod(0o755)
        return path

    def remove(self, name):
        (self.dir / name).unlink(missing_ok=True)

    def answer(self, name, match="", stdout="", stderr="", rc=0):
        """When argv of `name` contains `match`, print stdout/stderr and exit rc (first rule wins)."""
        self.rules.setdefault(name, []).append({"match": match, "stdout": stdout, "stderr": stderr, "rc": rc})
        (self.dir / "rules.json").write_text(json.dumps(self.rules))

    def calls(self, name=None):
        log = self.dir / "calls.jsonl"
        if not log.exists():
            return []
        entries = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        return [e for e in entries if name is None or e["tool"] == name]

    @property
    def path_env(self):
        return "{}{}{}".format(self.dir, os.pathsep, os.environ.get("PATH", ""))


@pytest.fixture
def fake_bins(tmp_path, monkeypatch):
    """Stand-in CLIs on PATH. A fake kind or docker implies a container engine behind them, and the plays ping
    it first (krops.platform.engine_ping at DOCKER_HOST): a Docker double answers there unless the test set
    DOCKER_HOST itself (bins.engine is then None)."""
    from tests.substrate.docker_double import DockerDouble

    bins = FakeBins(tmp_path / "bin")
    monkeypatch.setenv("PATH", bins.path_env)
    bins.engine = None
    if not os.environ.get("DOCKER_HOST"):
        bins.engine = DockerDouble()
        monkeypatch.setenv("DOCKER_HOST", bins.engine.url)
    yield bins
    if bins.engine is not None:
        bins.engine.stop()


# --- running modules ----------------------------------------------------------------


class ModuleResult(dict):
    @property
    def failed(self):
        return bool(self.get("failed"))


@pytest.fixture
def run_module(monkeypatch):
    """run_module(module, args, check_mode=False) -> the result dict of exit_json/fail_json."""
    from ansible.module_utils import basic
    from ansible.module_utils.testing import patch_module_args

    class _Exit(Exception):
        pass

    def run(module, args, check_mode=False, diff=False):
        captured = {}

        def exit_json(self, **kwargs):
            captured.update(kwargs)
            captured.setdefault("changed", False)
            raise _Exit()

        def fail_json(self, msg, **kwargs):
            captured.update(kwargs, msg=msg, failed=True)
            raise _Exit()

        monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
        monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
        full = dict(args)
        full["_ansible_check_mode"] = check_mode
        full["_ansible_diff"] = diff
        with patch_module_args(full):
            try:
                module.main()
            except _Exit:
                pass
        return ModuleResult(captured)

    return run


# multiprocessing's listener under TMPDIR: pymp-XXXXXXXX/listener-XXXXXXXX, and a unix socket path
# has at most 107 bytes (sun_path[108] with its NUL)
_SOCKET_ROOM = 107 - len("/pymp-xxxxxxxx/listener-xxxxxxxx")


@functools.cache
def _short_tempdir(folder):  # noqa: ARG001 - the folder is the cache key: one short folder each
    short = tempfile.mkdtemp(prefix="krops-t-", dir="/tmp")
    atexit.register(shutil.rmtree, short, ignore_errors=True)
    return short


def socket_safe_tempdir(folder):
    """FOLDER, or a short folder under /tmp (removed when the test process ends) when a unix socket
    made under FOLDER would have too long a path. ansible-core's controller binds its local RPC server
    there and, when the bind fails, stops after 5 s with "Local RPC server did not start"."""
    folder = str(folder)
    if len(folder) <= _SOCKET_ROOM:
        return folder
    return _short_tempdir(folder)


def playbook_env(tmp_path, extra=None):
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
            "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
            "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
            "ANSIBLE_NOCOLOR": "1",
            "TMPDIR": socket_safe_tempdir(tmp_path),
            "PATH": "{}{}{}".format(VENV_BIN, os.pathsep, env.get("PATH", "")),
        }
    )
    env.update(extra or {})
    return env


def keep_for_profile(stdout):
    """With KROPS_PLAYBOOK_LOG=DIR, each run's JSON callback output goes to DIR, named by the test
    (suite_time.py --tasks DIR prints the slowest tasks: where a playbook test spends its time)."""
    folder = os.environ.get("KROPS_PLAYBOOK_LOG")
    if not folder:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "unknown").split(" ")[0]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", test)
    Path(folder).mkdir(parents=True, exist_ok=True)
    for n in itertools.count():
        path = Path(folder) / f"{name}.{n}.json"
        if not path.exists():
            path.write_text(stdout, encoding="utf-8")
            return


@pytest.fixture
def ansible_playbook(tmp_path):
    """ansible_playbook(play_or_path, *args, env=None) -> (rc, parsed JSON callback output, stderr)."""

    def run(playbook, *args, env=None, inventory=None):
        if not isinstance(playbook, (str, Path)):
            path = tmp_path / "play.yml"
            path.write_text(yaml.safe_dump(playbook, sort_keys=False))
            playbook = path
        argv = [prewarm.playbook_command(), str(playbook)]
        if inventory is None:
            inventory = localhost_inventory(tmp_path / "hosts.yml")
        argv += ["-i", str(inventory)]
        argv += list(args) + prewarm.playbook_args()
        proc = subprocess.run(
            argv, cwd=REPO, env=playbook_env(tmp_path, env), capture_output=True, text=True, timeout=600, check=False
        )
        try:
            output = json.loads(proc.stdout)
        except json.JSONDecodeError:
            output = {"raw": proc.stdout}
        keep_for_profile(proc.stdout)
        return proc.returncode, output, proc.stderr

    return run


def task_results(output, host="localhost"):
    """Task name -> that task's result on host, from the json callback's output."""
    results = {}
    for play in output.get("plays", []):
        for task in play.get("tasks", []):
            results[task["task"]["name"]] = task["hosts"].get(host, {})
    return results


def dedent(text):
    return textwrap.dedent(text).lstrip()


# --- the strict world (issue 15) -----------------------------------------------------------


@pytest.fixture
def strict_cluster(tmp_path):
    """Factory: strict_cluster('kind-mgmt', bundles=(...)) -> a started StrictKubeEmulator with .kubeconfig_path."""
    from tests.substrate.strict_api import StrictKubeEmulator

    started = {}

    def make(name="kind-mgmt", bundles=(), default_field_validation="Warn"):
        if name in started:
            return started[name]
        emulator = StrictKubeEmulator(name, default_field_validation=default_field_validation)
        emulator.install_bundle(*bundles)
        emulator.start()
        emulator.kubeconfig_path = emulator.write_kubeconfig(tmp_path / (f"{name}.kubeconfig"), context=name)
        started[name] = emulator
        return emulator

    yield make
    for emulator in started.values():
        emulator.stop()


# --- inventories -------------------------------------------------------------------------------


def localhost_inventory(path):
    """Write the inventory of the one host the tests' plays run on (localhost, the local connection, the play's
    own Python) to ``path`` and return it."""
    path = Path(path)
    path.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "localhost": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                        }
                    }
                }
            }
        )
    )
    return path
