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
- ``POST /containers/create`` needs an image the engine has (404 "No such image" otherwise; ``POST
  /images/create`` pulls only the images in ``IMAGES``, the engine here has no registry to pull from),
  a unique name (409), networks that exist (404) and well-formed port bindings; the image's declared
  volumes become anonymous volumes, as the engine creates them.
- A started container whose image has a ``program`` runs it (the registry image runs the real
  docker-registry on the published host port, its storage in the container's volume); stopping or
  removing the container stops it.

Served over TCP (``url``) or, with ``socket_path``, over a unix socket (``DOCKER_HOST=unix://...``).
Only what docker_host_info, docker_container, docker_container_info, docker_network(_info) and
docker_volume use.
"""

from __future__ import annotations

import copy
import json
import os
import re
import socketserver
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

FILTER_KEYS = {
    "images": {"reference", "label", "dangling", "before", "since"},
    "containers": {"label", "name", "id", "status", "network", "volume", "ancestor"},
    "volumes": {"label", "name", "dangling", "driver"},
    "networks": {"label", "name", "id", "driver", "scope", "type", "dangling"},
}


# Images the double can "pull" (no registry is reachable): the image config the engine would read from
# the image. registry:3 is the official image of distribution v3 (distribution/distribution-library-image
# Dockerfile @ a829ed8: EXPOSE 5000, VOLUME /var/lib/registry, ENTRYPOINT /entrypoint.sh, CMD
# /etc/distribution/config.yml; docker-library/official-images library/registry: tags 3.1.1, 3.1, 3).
IMAGES = {
    "registry:3": {
        "Id": "sha256:" + "3" * 64,
        "RepoTags": ["registry:3"],
        "Config": {
            "Entrypoint": ["/entrypoint.sh"],
            "Cmd": ["/etc/distribution/config.yml"],
            "ExposedPorts": {"5000/tcp": {}},
            "Volumes": {"/var/lib/registry": {}},
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "OTEL_TRACES_EXPORTER=none"],
            "Labels": None,
            "WorkingDir": "",
        },
        "program": "registry",
    },
}


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        request, _address = super().get_request()
        return request, ("local", 0)  # BaseHTTPRequestHandler wants a (host, port) client address


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


def _reference_matches(known, wanted):
    """An image reference filter: ``registry`` matches ``registry:<any tag>``, ``registry:3`` only itself."""
    return known == wanted or (":" not in wanted and known.rsplit(":", 1)[0] == wanted)


def _endpoint(config):
    config = copy.deepcopy(config or {})
    return {
        "Aliases": config.get("Aliases"),
        "Links": config.get("Links"),
        "IPAMConfig": config.get("IPAMConfig"),
        "DriverOpts": config.get("DriverOpts"),
        "MacAddress": "",
        "IPAddress": "172.18.0.%d" % (len(json.dumps(config)) % 200 + 2),
        "Gateway": "172.18.0.1",
        "IPPrefixLen": 16,
    }


_PORT = re.compile(r"^\d{1,5}(-\d{1,5})?(/(tcp|udp|sctp))?$")


def labels_match(labels, wanted):
    for item in wanted:
        key, sep, value = item.partition("=")
        if key not in labels or (sep and labels[key] != value):
            return False
    return True


class DockerDouble:
    def __init__(self, on_call=None, socket_path=None, programs=None, on_remove=None):
        self.containers = {}  # name -> {"Id", "labels", "networks", "volumes": [names], "running", ...}
        self.volumes = {}  # name -> {"labels", "anonymous"}
        self.networks = {}  # name -> {"Id", "labels"}
        self.images = {}  # reference -> image inspect (pulled)
        self.calls = []  # (method, path, query)
        self.on_call = on_call
        # image program name -> start(double, name, container) returning a stop() callable
        self.programs = dict(programs or {})
        self.on_remove = on_remove  # called with (name, container) after a container is removed
        self.exec_handler = None  # (name, container, argv, stdin) -> (rc, stdout, stderr), for the docker CLI
        self._running = {}  # container name -> stop() of its program
        self._lock = threading.RLock()
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

            def do_PUT(self):
                self._do("PUT")

        if socket_path:
            self.server = _UnixHTTPServer(str(socket_path), Handler)
            self.url = "unix://%s" % socket_path
        else:
            self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            self.url = "tcp://127.0.0.1:%d" % self.server.server_address[1]
        self.socket_path = socket_path
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        for name in list(self._running):
            self._stop_program(name)
        self.server.shutdown()
        self.server.server_close()
        if self.socket_path and os.path.exists(self.socket_path):
            os.unlink(self.socket_path)

    # --- state ------------------------------------------------------------------------------
    def add_container(self, name, labels=None, networks=(), volumes=(), anonymous_volumes=0, ports=None, image=None):
        """A running container; ``volumes`` are named volumes it mounts, plus ``anonymous_volumes`` of its own.

        ``ports``: {"6443/tcp": host port} published on 127.0.0.1 (what CAPD's load balancer publishes)."""
        self._serial = getattr(self, "_serial", 0) + 1
        cid = "%064x" % (len(self.calls) * 1000 + len(self.containers) + 1 + self._serial * 7919)
        mounted = list(volumes)
        for index in range(anonymous_volumes):
            anon = "%064x" % (int(cid, 16) * 10 + index + 1)
            self.volumes[anon] = {"labels": {}, "anonymous": True}
            mounted.append(anon)
        for vol in volumes:
            self.volumes.setdefault(vol, {"labels": {}, "anonymous": False})
        bindings = {p: [{"HostIp": "127.0.0.1", "HostPort": str(h)}] for p, h in (ports or {}).items()}
        self.containers[name] = {
            "Id": cid,
            "labels": dict(labels or {}),
            "networks": list(networks),
            "volumes": mounted,
            "running": True,
            "image": image or "kindest/node",
            "config": {
                "Image": image or "kindest/node",
                "Labels": dict(labels or {}),
                "ExposedPorts": {p: {} for p in bindings},
            },
            "host_config": {"AutoRemove": False, "PortBindings": bindings},
        }
        return cid

    def add_network(self, name, labels=None):
        if name not in self.networks:
            self.networks[name] = {
                "Id": "%064x" % (abs(hash(name)) * 31 + len(self.networks) + 1),
                "labels": dict(labels or {}),
            }
        return self.networks[name]["Id"]

    def add_volume(self, name, labels=None):
        self.volumes.setdefault(name, {"labels": dict(labels or {}), "anonymous": False})

    def remove_container(self, name, remove_volumes=True):
        """What `docker rm -f -v NAME` does (kind deleting its nodes, CAPD deleting its machines)."""
        with self._lock:
            c = self.containers.get(name)
            if c is None:
                return False
            self._stop_program(name)
            del self.containers[name]
            if remove_volumes:
                for vol in c["volumes"]:
                    if self.volumes.get(vol, {}).get("anonymous") and not self._in_use(vol):
                        del self.volumes[vol]
        if self.on_remove:
            self.on_remove(name, c)
        return True

    def volume_dir(self, volume):
        """Where a volume's data lives (the registry program keeps its storage there)."""
        return self.volumes[volume].setdefault("dir", None)

    def _start_program(self, name, c):
        image = self.images.get(c.get("image")) or {}
        program = image.get("program")
        if program and program in self.programs and name not in self._running:
            self._running[name] = self.programs[program](self, name, c)

    def _stop_program(self, name):
        stop = self._running.pop(name, None)
        if stop:
            stop()

    def _container(self, ref):
        for name, c in self.containers.items():
            if ref in (name, c["Id"], "/" + name) or (len(ref) >= 12 and c["Id"].startswith(ref)):
                return name, c
        return None, None

    def _ports(self, c):
        """NetworkSettings.Ports: every exposed port, with its bindings while the container runs."""
        config, host = c.get("config") or {}, c.get("host_config") or {}
        exposed = set((config.get("ExposedPorts") or {}).keys()) | set((host.get("PortBindings") or {}).keys())
        return {
            p: (copy.deepcopy((host.get("PortBindings") or {}).get(p)) if c["running"] else None) or None
            for p in sorted(exposed)
        }

    def _summary(self, name, c):
        return {
            "Id": c["Id"],
            "Names": ["/" + name],
            "Image": c.get("image", "kindest/node"),
            "ImageID": (self.images.get(c.get("image")) or {}).get("Id", "sha256:" + "0" * 64),
            "Command": "",
            "Created": 0,
            "Status": "Up" if c["running"] else "Exited",
            "State": "running" if c["running"] else "exited",
            "Ports": [
                {
                    "IP": b["HostIp"],
                    "PrivatePort": int(p.split("/")[0]),
                    "PublicPort": int(b["HostPort"]),
                    "Type": p.split("/")[1],
                }
                for p, binds in self._ports(c).items()
                for b in binds or []
            ],
            "Labels": dict(c["labels"]),
            "Mounts": [{"Type": "volume", "Name": v, "Destination": "/var"} for v in c["volumes"]],
            "NetworkSettings": {"Networks": {n: {} for n in c["networks"]}},
        }

    def _inspect(self, name, c):
        config = copy.deepcopy(c.get("config") or {"Image": "kindest/node"})
        config["Labels"] = dict(c["labels"])
        networks = {}
        for net in c["networks"]:
            endpoint = copy.deepcopy((c.get("endpoints") or {}).get(net) or {})
            endpoint.setdefault("Aliases", None)
            endpoint.setdefault("Links", None)
            endpoint.setdefault("IPAMConfig", None)
            endpoint["NetworkID"] = (self.networks.get(net) or {}).get("Id", "")
            networks[net] = endpoint
        return {
            "Id": c["Id"],
            "Name": "/" + name,
            "Image": (self.images.get(c.get("image")) or {}).get("Id", "sha256:" + "0" * 64),
            "State": {
                "Status": "running" if c["running"] else "exited",
                "Running": c["running"],
                "Paused": False,
                "Restarting": False,
                "Pid": 42 if c["running"] else 0,
            },
            "Config": config,
            "HostConfig": copy.deepcopy(c.get("host_config") or {"AutoRemove": False}),
            "NetworkSettings": {"Networks": networks, "Ports": self._ports(c)},
            "Mounts": [
                {"Type": "volume", "Name": v, "Destination": c.get("mount_points", {}).get(v, "/var"), "RW": True}
                for v in c["volumes"]
            ],
        }

    def _in_use(self, volume):
        return [n for n, c in self.containers.items() if volume in c["volumes"]]

    def _create(self, name, body):
        """POST /containers/create, as the engine checks it (API v1.45 ContainerCreate)."""
        if name and not re.match(r"^/?[a-zA-Z0-9][a-zA-Z0-9_.-]+$", name):
            return 400, {"message": f"Invalid container name ({name}), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed"}
        if name and name in self.containers:
            return 409, {
                "message": 'Conflict. The container name "/{}" is already in use by container "{}". You have to '
                "remove (or rename) that container to be able to reuse that name.".format(
                    name, self.containers[name]["Id"]
                )
            }
        image_ref = body.get("Image") or ""
        image = next(
            (
                img
                for ref, img in self.images.items()
                if image_ref in (ref, img["Id"])
                or _reference_matches(ref, image_ref)
                # by digest: the engine matches repo@digest against the image's RepoDigests (familiar names)
                or image_ref.removeprefix("docker.io/library/").removeprefix("docker.io/")
                in (img.get("RepoDigests") or ())
            ),
            None,
        )
        if image is None:
            return 404, {"message": f"No such image: {image_ref}"}
        host = copy.deepcopy(body.get("HostConfig") or {})
        for port, binds in (host.get("PortBindings") or {}).items():
            if not _PORT.match(port):
                return 400, {"message": f'invalid port specification: "{port}"'}
            for bind in binds or []:
                hp = str((bind or {}).get("HostPort") or "")
                if hp and (not hp.isdigit() or not 0 < int(hp) < 65536):
                    return 400, {"message": f'invalid port specification: "{hp}"'}
        endpoints = ((body.get("NetworkingConfig") or {}).get("EndpointsConfig") or {}).copy()
        mode = host.get("NetworkMode") or "default"
        if mode not in ("default", "bridge", "host", "none") and mode not in endpoints:
            endpoints[mode] = {}
        for net in endpoints:
            if net not in self.networks:
                return 404, {"message": f"network {net} not found"}
        host.setdefault("NetworkMode", "bridge" if mode == "default" else mode)
        host.setdefault("RestartPolicy", {"Name": "no", "MaximumRetryCount": 0})
        host.setdefault("AutoRemove", False)
        if not endpoints and host["NetworkMode"] == "bridge":
            self.add_network("bridge")
            endpoints = {"bridge": {}}
        config = {k: copy.deepcopy(v) for k, v in body.items() if k not in ("HostConfig", "NetworkingConfig")}
        image_config = image.get("Config") or {}
        for key in ("Entrypoint", "Cmd", "WorkingDir"):
            if config.get(key) in (None, [], ""):
                config[key] = copy.deepcopy(image_config.get(key))
        config["Env"] = list(image_config.get("Env") or []) + [
            e for e in config.get("Env") or [] if e not in (image_config.get("Env") or [])
        ]
        config["ExposedPorts"] = dict(image_config.get("ExposedPorts") or {}, **(config.get("ExposedPorts") or {}))
        config["Volumes"] = dict(image_config.get("Volumes") or {}, **(config.get("Volumes") or {})) or None
        labels = dict(image_config.get("Labels") or {}, **(config.get("Labels") or {}))
        self._serial = getattr(self, "_serial", 0) + 1
        cid = "%064x" % (0xC0FFEE * 100000 + self._serial)
        mounted, mount_points = [], {}
        for target in sorted(config.get("Volumes") or {}):  # the image's VOLUMEs: one anonymous volume each
            anon = "%064x" % (int(cid, 16) * 10 + len(mounted) + 1)
            self.volumes[anon] = {"labels": {}, "anonymous": True}
            mounted.append(anon)
            mount_points[anon] = target
        name = name.lstrip("/") or "container_%d" % self._serial
        self.containers[name] = {
            "Id": cid,
            "labels": labels,
            "networks": list(endpoints),
            "endpoints": {n: _endpoint(e) for n, e in endpoints.items()},
            "volumes": mounted,
            "mount_points": mount_points,
            "running": False,
            "image": next(ref for ref, img in self.images.items() if img is image),
            "config": config,
            "host_config": host,
        }
        return 201, {"Id": cid, "Warnings": []}

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
        if path == "/images/json" and method == "GET":
            filters = parse_filters(query, "images")
            wanted = filters.get("reference") or []
            return 200, [
                {
                    "Id": image["Id"],
                    "RepoTags": list(image["RepoTags"]),
                    "RepoDigests": list(image.get("RepoDigests") or []),  # a loaded image's, else none
                    "Labels": None,
                }
                for ref, image in sorted(self.images.items())
                if not wanted or any(_reference_matches(ref, w) for w in wanted)
            ]
        if path == "/images/create" and method == "POST":
            ref = "{}:{}".format(query.get("fromImage", [""])[0], query.get("tag", ["latest"])[0] or "latest")
            ref = ref.replace("docker.io/library/", "").replace("docker.io/", "")
            if ref not in IMAGES:
                return 404, {
                    "message": f"pull access denied for {ref.rsplit(':', 1)[0]}, repository does not exist or may "
                    "require 'docker login'"
                }
            self.images[ref] = copy.deepcopy(IMAGES[ref])
            # the engine streams one JSON object per progress line; the last one says what happened
            return 200, {"status": f"Status: Downloaded newer image for {ref}"}
        match = re.match(r"^/images/(.+)/json$", path)
        if match and method == "GET":
            ref = unquote(match.group(1))
            for known, image in self.images.items():
                if ref in (known, image["Id"]) or _reference_matches(known, ref):
                    body = {k: copy.deepcopy(v) for k, v in image.items() if k != "program"}
                    body["RepoDigests"] = list(image.get("RepoDigests") or [])
                    return 200, body
            return 404, {"message": f"No such image: {ref}"}
        if path == "/containers/create" and method == "POST":
            return self._create(query.get("name", [""])[0], json.loads(raw or b"{}"))
        match = re.match(r"^/_standin/containers/([^/]+)/exec$", path)
        if match and method == "POST":
            name, c = self._container(unquote(match.group(1)))
            if c is None:
                return 404, {"message": f"No such container: {match.group(1)}"}
            if not c["running"]:
                return 409, {"message": f"container {c['Id']} is not running"}
            body = json.loads(raw or b"{}")
            if self.exec_handler is None:
                return 500, {"message": "the double has no exec handler"}
            rc, out, err = self.exec_handler(name, c, body.get("argv") or [], body.get("stdin") or "")
            return 200, {"rc": rc, "stdout": out, "stderr": err}
        match = re.match(r"^/containers/([^/]+)(?:/(json|kill|stop|wait|start|restart|update))?$", path)
        if match:
            name, c = self._container(unquote(match.group(1)))
            if c is None:
                return 404, {"message": f"No such container: {match.group(1)}"}
            action = match.group(2)
            if method == "GET" and action == "json":
                return 200, self._inspect(name, c)
            if method == "POST" and action in ("kill", "stop"):
                if not c["running"] and action == "stop":
                    return 304, None
                c["running"] = False
                self._stop_program(name)
                return 204, None
            if method == "POST" and action in ("start", "restart"):
                if c["running"] and action == "start":
                    return 304, None
                for net in c["networks"]:
                    if net not in self.networks:
                        return 404, {"message": f"network {net} not found"}
                c["running"] = True
                self._start_program(name, c)
                return 204, None
            if method == "POST" and action == "update":
                body = json.loads(raw or b"{}")
                c.setdefault("host_config", {}).update({k: v for k, v in body.items() if k == "RestartPolicy"})
                return 200, {"Warnings": []}
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
                self.remove_container(name, remove_volumes)
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
        match = re.match(r"^/networks/([^/]+)(?:/(disconnect|connect))?$", path)
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
            if method == "POST" and match.group(2) == "connect":
                body = json.loads(raw or b"{}")
                dummy, c = self._container(body.get("Container") or "")
                if c is None:
                    return 404, {"message": "No such container: {}".format(body.get("Container"))}
                if name in c["networks"]:
                    return 403, {"message": f"endpoint with name {dummy} already exists in network {name}"}
                c["networks"].append(name)
                c.setdefault("endpoints", {})[name] = _endpoint(body.get("EndpointConfig"))
                return 200, None
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
