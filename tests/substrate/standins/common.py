# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""What the stand-ins share: their call log, the host they act on, and clients for kubeconfigs and the engine.

A stand-in runs as ``<bin>/<tool>`` (a wrapper script, lifecycle.install_standin): it logs
each call to ``<bin>/calls.jsonl`` (tool, argv, stdin; the format of fixtures.FakeBins) and finds the
emulated host in ``<bin>/world.json`` (tests/substrate/lifecycle.py writes it).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import ssl
import sys
import tempfile
import urllib.error
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
for _path in (os.path.join(REPO, ".collections"), REPO):
    if _path not in sys.path:
        sys.path.insert(0, _path)


def bin_dir():
    """The folder the stand-in was installed in (lifecycle.install_standin), where its log and host file are."""
    return os.environ.get("KROPS_STANDIN_BIN") or os.path.dirname(os.path.abspath(sys.argv[0]))


def read_stdin():
    return "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()


def record(tool, argv, stdin=""):
    if not os.environ.get("KROPS_STANDIN_BIN"):
        return  # run by hand (python helm.py ...): no folder of its own to log into
    with open(os.path.join(bin_dir(), "calls.jsonl"), "a", encoding="utf-8") as log:
        log.write(json.dumps({"tool": tool, "argv": argv, "env": {}, "cwd": os.getcwd(), "stdin": stdin}) + "\n")


def host():
    path = os.path.join(bin_dir(), "world.json")
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def exit_with(message, rc=1):
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.exit(rc)


def control(method, path, body=None):
    """A call to the host's control server: (status, JSON answer)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(host()["control"] + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


# --- the engine (Docker Engine API over DOCKER_HOST) ---------------------------------------


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=60):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def engine(method, path, body=None):
    """(status, JSON or text) from the engine at DOCKER_HOST (unix:// or tcp://); None when it does not answer."""
    docker_host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        if docker_host.startswith("unix://"):
            conn = _UnixConnection(docker_host[len("unix://") :])
        elif docker_host.startswith("tcp://"):
            address = docker_host[len("tcp://") :]
            conn = http.client.HTTPConnection(address.rsplit(":", 1)[0], int(address.rsplit(":", 1)[1]), timeout=60)
        else:
            return None, f"unsupported DOCKER_HOST {docker_host}"
        conn.request(
            method,
            "/v1.45" + path,
            body=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        reply = conn.getresponse()
        raw = reply.read()
        conn.close()
    except OSError as exc:
        return None, f"Cannot connect to the Docker daemon at {docker_host}. Is the docker daemon running? ({exc})"
    try:
        return reply.status, json.loads(raw) if raw else None
    except ValueError:
        return reply.status, raw.decode()


# --- Kubernetes API servers from a kubeconfig -------------------------------------------------


class Cluster:
    """The API server a kubeconfig context points at, with the kubeconfig's CA; ``call`` returns (status, body)."""

    def __init__(self, kubeconfig_path=None, context=None, fail=exit_with):
        paths = (
            [kubeconfig_path]
            if kubeconfig_path
            else ((os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")).split(os.pathsep))
        )
        config = {}
        for path in paths:
            try:
                with open(path, encoding="utf-8") as handle:
                    loaded = yaml.safe_load(handle) or {}
            except OSError:
                continue
            for key in ("clusters", "contexts", "users"):
                config.setdefault(key, []).extend(loaded.get(key) or [])
            config.setdefault("current-context", loaded.get("current-context"))
        contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
        name = context or config.get("current-context")
        if name not in contexts:
            fail(f'Kubernetes cluster unreachable: context "{name}" does not exist')
        clusters = {c["name"]: c["cluster"] for c in config.get("clusters") or []}
        cluster = clusters.get(contexts[name].get("cluster")) or {}
        self.server = (cluster.get("server") or "").rstrip("/")
        # the TLS context kubectl would use; none for plain HTTP (a default one loads every CA certificate)
        self.context = None
        if cluster.get("insecure-skip-tls-verify"):
            self.context = ssl._create_unverified_context()
        elif cluster.get("certificate-authority-data"):
            self.context = ssl.create_default_context(
                cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
            )
        elif cluster.get("certificate-authority"):
            self.context = ssl.create_default_context(cafile=cluster["certificate-authority"])
        elif self.server.startswith("https"):
            self.context = ssl.create_default_context()
        self.fail = fail

    def call(self, method, path, body=None, ok=(200, 201), content_type=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.server + path,
            data=data,
            method=method,
            headers={
                "Content-Type": content_type
                or ("application/merge-patch+json" if method == "PATCH" else "application/json")
            },
        )
        try:
            with urllib.request.urlopen(
                request, timeout=30, context=self.context if self.server.startswith("https") else None
            ) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            payload = json.loads(exc.read() or b"{}")
            if exc.code in ok:
                return exc.code, payload
            self.fail("{} {}: {}".format(method, path, payload.get("message", exc.code)))
        except OSError as exc:
            self.fail(f"Kubernetes cluster unreachable: {exc}")
        return None, None


def write_private(path, text):
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def kill_the_run():
    """SIGKILL the whole ansible-playbook run this stand-in was called from (a host dying mid-task).

    Walks up the process tree to the topmost ansible-playbook, which must lead its own process group
    (the lifecycle world starts every run in a new session), and kills that group and the group of every
    ansible-playbook process between (ansible's workers lead groups of their own), the stand-in included.
    Refuses, exiting 1, when there is no such leader: it never kills a group it cannot prove is the run's.
    """
    import signal

    pid, runs = os.getpid(), []
    while pid > 1:
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as handle:
                argv = handle.read().split(b"\0")
            with open("/proc/%d/stat" % pid, encoding="utf-8") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
        if any(part.endswith(b"ansible-playbook") for part in argv[:2]):
            runs.append(pid)
        pid = parent
    if not runs or os.getpgid(runs[-1]) != runs[-1]:
        exit_with("stand-in: kill requested but no ansible-playbook process group leader above this process")
    sys.stdout.flush()
    groups = list(dict.fromkeys(os.getpgid(p) for p in reversed(runs)))
    for group in groups + [os.getpgid(0)]:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
