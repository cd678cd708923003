"""roles/teardown end to end for local-host: the Kubernetes side on the emulator, kind through a stand-in,
Docker through a small HTTP double of the Docker Engine API (no Docker engine here) that records every call.

The double implements only what community.docker's docker_host_info, docker_container (state=absent),
docker_network_info and docker_network (state=absent) use; it is written for this test.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from tests.integration.test_teardown_kube import CLUSTER, KS, FakeCapi, make_cluster, make_ks
from tests.substrate.fixtures import REPO, task_results

pytestmark = pytest.mark.slow


class DockerDouble:
    def __init__(self, kind_deleted):
        self.containers = {}  # name -> {"Id", "networks"}
        self.networks = {}  # name -> {"Id"}
        self.calls = []  # (method, path, kind already deleted?)
        self.kind_deleted = kind_deleted
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                return

            def _do(self, method):
                parts = urlsplit(self.path)
                path = re.sub(r"^/v1\.\d+", "", parts.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                double.calls.append((method, path, double.kind_deleted()))
                status, body = double.handle(method, path, parse_qs(parts.query), raw)
                data = body.encode() if isinstance(body, str) else (json.dumps(body).encode() if body is not None else b"")
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Api-Version", "1.45")
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802
                self._do("GET")

            def do_HEAD(self):  # noqa: N802
                self._do("HEAD")

            def do_POST(self):  # noqa: N802
                self._do("POST")

            def do_DELETE(self):  # noqa: N802
                self._do("DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = "tcp://127.0.0.1:%d" % self.server.server_address[1]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def add_container(self, name, networks=()):
        self.containers[name] = {"Id": "%064x" % (len(self.containers) + 1), "networks": list(networks)}

    def _container(self, ref):
        for name, c in self.containers.items():
            if ref in (name, c["Id"], "/" + name):
                return name, c
        return None, None

    def _inspect(self, name, c):
        return {"Id": c["Id"], "Name": "/" + name, "Image": "sha256:" + "0" * 64,
                "State": {"Status": "running", "Running": True, "Paused": False, "Restarting": False, "Pid": 42},
                "Config": {"Image": "kindest/node", "Labels": {}}, "HostConfig": {"AutoRemove": False},
                "NetworkSettings": {"Networks": {n: {} for n in c["networks"]}}, "Mounts": []}

    def handle(self, method, path, query, raw):
        if path == "/_ping":
            return 200, "OK"
        if path == "/version":
            return 200, {"ApiVersion": "1.45", "MinAPIVersion": "1.24", "Version": "27.0.0", "Os": "linux", "Arch": "amd64"}
        if path == "/info":
            return 200, {"ServerVersion": "27.0.0"}
        if path == "/containers/json":
            filters = json.loads(query.get("filters", ["{}"])[0] or "{}")
            patterns = list(filters.get("name") or [])
            found = [{"Id": c["Id"], "Names": ["/" + n], "Image": "kindest/node", "Command": "", "Created": 0,
                      "Status": "Up", "Ports": [], "State": "running"}
                     for n, c in sorted(self.containers.items())
                     if not patterns or any(re.search(p, "/" + n) for p in patterns)]
            return 200, found
        match = re.match(r"^/containers/([^/]+)(?:/(json|kill|stop|wait))?$", path)
        if match:
            name, c = self._container(unquote(match.group(1)))
            if c is None:
                return 404, {"message": "No such container: %s" % match.group(1)}
            action = match.group(2)
            if method == "GET" and action == "json":
                return 200, self._inspect(name, c)
            if method == "POST" and action in ("kill", "stop"):
                return 204, None
            if method == "POST" and action == "wait":
                return 200, {"StatusCode": 0}
            if method == "DELETE" and action is None:
                del self.containers[name]
                return 204, None
        if path == "/networks" and method == "GET":
            return 200, [{"Name": n, "Id": v["Id"], "Driver": "bridge", "Scope": "local"} for n, v in sorted(self.networks.items())]
        match = re.match(r"^/networks/([^/]+)(?:/(disconnect))?$", path)
        if match:
            ref = unquote(match.group(1))
            name = next((n for n, v in self.networks.items() if ref in (n, v["Id"])), None)
            if name is None:
                return 404, {"message": "network %s not found" % ref}
            net = self.networks[name]
            attached = {c["Id"]: {"Name": n} for n, c in self.containers.items() if name in c["networks"]}
            if method == "GET":
                return 200, {"Name": name, "Id": net["Id"], "Driver": "bridge", "Scope": "local", "Containers": attached,
                             "Options": {}, "Labels": {}, "IPAM": {"Driver": "default", "Config": []}, "Internal": False}
            if method == "POST":
                body = json.loads(raw or b"{}")
                cname, c = self._container(body.get("Container"))
                if c is not None:
                    c["networks"].remove(name)
                return 200, None
            if method == "DELETE":
                if attached:
                    return 403, {"message": "error while removing network: network %s has active endpoints" % name}
                del self.networks[name]
                return 204, None
        return 404, {"message": "page not found: %s %s" % (method, path)}


def test_local_host_teardown_order_before_the_pivot(kind_api, fake_bins, ansible_playbook, tmp_path):
    make_ks(kind_api, "flux-system")
    make_ks(kind_api, "local-workload")
    make_cluster(kind_api, "local-management")
    make_cluster(kind_api, "local-workload")
    fake_bins.answer("kind", "get clusters", stdout="mgmt\n")
    fake_bins.answer("kind", "version", stdout="kind v0.27.0 go1.23 linux/amd64\n")
    docker = DockerDouble(lambda: any(c["argv"][:1] == ["delete"] for c in fake_bins.calls("kind")))
    docker.networks["kind"] = {"Id": "n" * 64}
    for name in ("local-management-control-plane-abc", "local-management-lb"):
        docker.add_container(name, ["kind"])
    docker.add_container("krops-registry", ["kind"])
    docker.add_container("my-postgres")  # not krops': never touched
    docker.add_container("local-workload-lb", ["kind"])  # CAPD removes it when the Cluster goes

    def capd_removes_workload():
        kind_api.wait_for_event(lambda t, o: t == "DELETED" and o["metadata"]["name"] == "local-workload", timeout=60)
        docker.containers.pop("local-workload-lb", None)

    threading.Thread(target=capd_removes_workload, daemon=True).start()
    capi = FakeCapi(kind_api)
    try:
        rc, out, err = ansible_playbook(
            [{"hosts": "localhost", "gather_facts": False,
              "module_defaults": {"group/community.docker.docker": {"docker_host": docker.url, "tls": False,
                                                                    "validate_certs": False}},
              "vars": {"krops_environment": "local-host", "teardown_config_file": str(REPO / "bootstrap.toml"),
                       "teardown_kind_kubeconfig": kind_api.kubeconfig_path,
                       "teardown_mgmt_kubeconfig": str(tmp_path / "none.yaml")},
              "roles": [{"role": "krops.platform.teardown"}]}])
    finally:
        capi.stop()
        docker.stop()
    assert rc == 0, (_failed(out), err)
    results = task_results(out)
    assert results["krops.platform.teardown : Show the teardown plan"]["msg"][1:] == [
        "1. suspend every Flux Kustomization and Flux Operator object on the kind cluster",
        "2. delete the workload Clusters local-workload through the provider and wait (300s)",
        "3. delete the kind cluster mgmt (the controller host)",
        "4. remove the management cluster's containers (names starting with local-management)",
        "5. remove the kind Docker network kind when only krops containers use it",
        "6. remove the registry container krops-registry"]
    # Flux suspended before the workload Cluster was deleted; the management Cluster was never deleted.
    assert sorted(capi.suspended_before_delete["local-workload"]) == ["flux-system", "local-workload"]
    assert "local-management" not in capi.suspended_before_delete
    assert [c["metadata"]["name"] for c in kind_api.list(*CLUSTER)] == ["local-management"]
    assert all(k["spec"]["suspend"] for k in kind_api.list(*KS))
    # kind went first, then the management containers, the network, the registry last
    writes = [(m, p, kind_gone) for m, p, kind_gone in docker.calls if m in ("DELETE", "POST") and "/wait" not in p
              and "/kill" not in p and "/stop" not in p]
    ids = {c: "%064x" % i for i, c in enumerate(["local-management-control-plane-abc", "local-management-lb",
                                                 "krops-registry", "my-postgres", "local-workload-lb"], 1)}

    def names(path):
        for name, cid in ids.items():
            path = path.replace(cid, name)
        return path

    assert [(m, names(p)) for m, p, dummy in writes] == [
        ("DELETE", "/containers/local-management-control-plane-abc"),
        ("DELETE", "/containers/local-management-lb"),
        ("POST", "/networks/kind/disconnect"),
        ("DELETE", "/networks/kind"),
        ("DELETE", "/containers/krops-registry")]
    assert all(kind_gone for dummy, dummy2, kind_gone in writes)
    assert sorted(docker.containers) == ["my-postgres"]
    assert not docker.networks


def _failed(out):
    return [(t["task"]["name"], h.get("msg"), h.get("stderr")) for p in out.get("plays", []) for t in p["tasks"]
            for h in t["hosts"].values() if h.get("failed")]
