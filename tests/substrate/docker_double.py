"""A Docker Engine API double over real HTTP, for the community.docker modules the teardown uses.

It enforces the parts of the Engine API contract a teardown depends on (Docker Engine API v1.45 reference,
https://docs.docker.com/reference/api/engine/version/v1.45/):
- ``filters`` is a JSON-encoded map[string][]string (the legacy map[string]map[string]bool form is accepted too);
  anything else answers 400 "invalid filter", an unknown filter key 400 "invalid filter '<key>'".
- ``label`` filters are exact: ``key`` (present) or ``key=value`` (equal); several label filters must all match.
  ``name`` filters are unanchored regular expressions on the name (which is why a teardown must not rely on them).
- ``DELETE /containers/{id}`` refuses a running container without ``force`` (409); ``v=1`` removes the
  container's anonymous volumes, never named ones.
- ``DELETE /volumes/{name}`` answers 409 while a container uses the volume, 404 when it does not exist.
- ``DELETE /networks/{id}`` answers 403 while endpoints are attached.

Only what docker_host_info, docker_container (state=absent), docker_network(_info) and docker_volume use.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

FILTER_KEYS = {
    "containers": {"label", "name", "id", "status", "network", "volume", "ancestor"},
    "volumes": {"label", "name", "dangling", "driver"},
    "networks": {"label", "name", "id", "driver", "scope", "type", "dangling"},
}


class ApiError(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


def parse_filters(query, kind):
    raw = query.get("filters", [""])[0]
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        raise ApiError(400, f"invalid filter: {raw} is not JSON")
    if not isinstance(data, dict):
        raise ApiError(400, "invalid filter: expected a JSON object")
    filters = {}
    for key, values in data.items():
        if key not in FILTER_KEYS[kind]:
            raise ApiError(400, f"invalid filter '{key}'")
        if isinstance(values, dict):  # legacy {"value": true}
            values = [v for v, on in values.items() if on]
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ApiError(400, f"invalid filter '{key}': values must be strings")
        filters[key] = values
    return filters


def labels_match(labels, wanted):
    for item in wanted:
        key, sep, value = item.partition("=")
        if key not in labels or (sep and labels[key] != value):
            return False
    return True


class DockerDouble:
    def __init__(self, on_call=None):
        self.containers = {}  # name -> {"Id", "labels", "networks", "volumes": [names], "running"}
        self.volumes = {}  # name -> {"labels", "anonymous"}
        self.networks = {}  # name -> {"Id", "labels"}
        self.calls = []  # (method, path, query)
        self.on_call = on_call
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
                query = parse_qs(parts.query)
                double.calls.append((method, path, query))
                if double.on_call:
                    double.on_call(method, path)
                try:
                    status, body = double.handle(method, path, query, raw)
                except ApiError as exc:
                    status, body = exc.status, {"message": exc.message}
                data = (
                    body.encode() if isinstance(body, str) else (json.dumps(body).encode() if body is not None else b"")
                )
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Api-Version", "1.45")
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._do("GET")

            def do_HEAD(self):
                self._do("HEAD")

            def do_POST(self):
                self._do("POST")

            def do_DELETE(self):
                self._do("DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = "tcp://127.0.0.1:%d" % self.server.server_address[1]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    # --- state ------------------------------------------------------------------------------
    def add_container(self, name, labels=None, networks=(), volumes=(), anonymous_volumes=0):
        """A running container; ``volumes`` are named volumes it mounts, plus ``anonymous_volumes`` of its own."""
        cid = "%064x" % (len(self.calls) * 1000 + len(self.containers) + 1)
        mounted = list(volumes)
        for index in range(anonymous_volumes):
            anon = "%064x" % (int(cid, 16) * 10 + index + 1)
            self.volumes[anon] = {"labels": {}, "anonymous": True}
            mounted.append(anon)
        for vol in volumes:
            self.volumes.setdefault(vol, {"labels": {}, "anonymous": False})
        self.containers[name] = {
            "Id": cid,
            "labels": dict(labels or {}),
            "networks": list(networks),
            "volumes": mounted,
            "running": True,
        }
        return cid

    def _container(self, ref):
        for name, c in self.containers.items():
            if ref in (name, c["Id"], "/" + name) or (len(ref) >= 12 and c["Id"].startswith(ref)):
                return name, c
        return None, None

    def _summary(self, name, c):
        return {
            "Id": c["Id"],
            "Names": ["/" + name],
            "Image": "kindest/node",
            "ImageID": "sha256:" + "0" * 64,
            "Command": "",
            "Created": 0,
            "Status": "Up" if c["running"] else "Exited",
            "State": "running" if c["running"] else "exited",
            "Ports": [],
            "Labels": dict(c["labels"]),
            "Mounts": [{"Type": "volume", "Name": v, "Destination": "/var"} for v in c["volumes"]],
            "NetworkSettings": {"Networks": {n: {} for n in c["networks"]}},
        }

    def _inspect(self, name, c):
        return {
            "Id": c["Id"],
            "Name": "/" + name,
            "Image": "sha256:" + "0" * 64,
            "State": {
                "Status": "running" if c["running"] else "exited",
                "Running": c["running"],
                "Paused": False,
                "Restarting": False,
                "Pid": 42 if c["running"] else 0,
            },
            "Config": {"Image": "kindest/node", "Labels": dict(c["labels"])},
            "HostConfig": {"AutoRemove": False},
            "NetworkSettings": {"Networks": {n: {} for n in c["networks"]}},
            "Mounts": [{"Type": "volume", "Name": v, "Destination": "/var"} for v in c["volumes"]],
        }

    def _in_use(self, volume):
        return [n for n, c in self.containers.items() if volume in c["volumes"]]

    # --- API --------------------------------------------------------------------------------
    def handle(self, method, path, query, raw):
        if path == "/_ping":
            return 200, "OK"
        if path == "/version":
            return 200, {
                "ApiVersion": "1.45",
                "MinAPIVersion": "1.24",
                "Version": "27.0.0",
                "Os": "linux",
                "Arch": "amd64",
            }
        if path == "/info":
            return 200, {"ServerVersion": "27.0.0"}
        if path == "/containers/json" and method == "GET":
            filters = parse_filters(query, "containers")
            everything = query.get("all", ["0"])[0] in ("1", "true", "True")
            found = []
            for name, c in sorted(self.containers.items()):
                if not everything and not c["running"]:
                    continue
                if not labels_match(c["labels"], filters.get("label", [])):
                    continue
                if filters.get("name") and not any(re.search(p, "/" + name) for p in filters["name"]):
                    continue
                found.append(self._summary(name, c))
            return 200, found
        match = re.match(r"^/containers/([^/]+)(?:/(json|kill|stop|wait))?$", path)
        if match:
            name, c = self._container(unquote(match.group(1)))
            if c is None:
                return 404, {"message": f"No such container: {match.group(1)}"}
            action = match.group(2)
            if method == "GET" and action == "json":
                return 200, self._inspect(name, c)
            if method == "POST" and action in ("kill", "stop"):
                c["running"] = False
                return 204, None
            if method == "POST" and action == "wait":
                return 200, {"StatusCode": 0}
            if method == "DELETE" and action is None:
                force = query.get("force", ["0"])[0] in ("1", "true", "True")
                if c["running"] and not force:
                    return 409, {
                        "message": "You cannot remove a running container {}. Stop the container before "
                        "attempting removal or force remove".format(c["Id"])
                    }
                remove_volumes = query.get("v", ["0"])[0] in ("1", "true", "True")
                del self.containers[name]
                if remove_volumes:
                    for vol in c["volumes"]:
                        if self.volumes.get(vol, {}).get("anonymous") and not self._in_use(vol):
                            del self.volumes[vol]
                return 204, None
        if path == "/volumes" and method == "GET":
            filters = parse_filters(query, "volumes")
            found = [
                {
                    "Name": n,
                    "Driver": "local",
                    "Labels": dict(v["labels"]),
                    "Mountpoint": f"/var/lib/docker/volumes/{n}/_data",
                    "Scope": "local",
                }
                for n, v in sorted(self.volumes.items())
                if labels_match(v["labels"], filters.get("label", []))
            ]
            return 200, {"Volumes": found, "Warnings": []}
        match = re.match(r"^/volumes/([^/]+)$", path)
        if match:
            name = unquote(match.group(1))
            if name not in self.volumes:
                return 404, {"message": f"get {name}: no such volume"}
            if method == "GET":
                vol = self.volumes[name]
                return 200, {"Name": name, "Driver": "local", "Labels": dict(vol["labels"]), "Scope": "local"}
            if method == "DELETE":
                users = self._in_use(name)
                if users:
                    return 409, {
                        "message": "remove {}: volume is in use - [{}]".format(
                            name, ", ".join(self.containers[u]["Id"] for u in users)
                        )
                    }
                del self.volumes[name]
                return 204, None
        if path == "/networks" and method == "GET":
            filters = parse_filters(query, "networks")
            return 200, [
                {"Name": n, "Id": v["Id"], "Driver": "bridge", "Scope": "local", "Labels": dict(v["labels"])}
                for n, v in sorted(self.networks.items())
                if labels_match(v["labels"], filters.get("label", []))
            ]
        match = re.match(r"^/networks/([^/]+)(?:/(disconnect))?$", path)
        if match:
            ref = unquote(match.group(1))
            name = next((n for n, v in self.networks.items() if ref in (n, v["Id"])), None)
            if name is None:
                return 404, {"message": f"network {ref} not found"}
            net = self.networks[name]
            attached = {c["Id"]: {"Name": n} for n, c in self.containers.items() if name in c["networks"]}
            if method == "GET":
                return 200, {
                    "Name": name,
                    "Id": net["Id"],
                    "Driver": "bridge",
                    "Scope": "local",
                    "Containers": attached,
                    "Options": {},
                    "Labels": dict(net["labels"]),
                    "IPAM": {"Driver": "default", "Config": []},
                    "Internal": False,
                }
            if method == "POST":
                body = json.loads(raw or b"{}")
                dummy, c = self._container(body.get("Container"))
                if c is not None and name in c["networks"]:
                    c["networks"].remove(name)
                return 200, None
            if method == "DELETE":
                if attached:
                    return 403, {"message": f"error while removing network: network {name} has active endpoints"}
                del self.networks[name]
                return 204, None
        return 404, {"message": f"page not found: {method} {path}"}
