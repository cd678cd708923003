# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Does a container engine answer at the socket a run will use? Once, for every playbook and molecule.

The endpoint is resolved as community.docker resolves it (5.4.0, plugins/module_utils/_util.py:
DOCKER_COMMON_ARGS docker_host, env fallback DOCKER_HOST, default unix:///var/run/docker.sock), which is also
what the docker CLI kind drives and the krops docker stand-in use when no context is set. The probe is the
Engine API's ping (GET /_ping answers 200 with the body OK; Docker Engine API reference, SystemPing), which
Podman's Docker-compatible socket answers too. One line says what is wrong and how to fix it.

Importable without Ansible.
"""

from __future__ import annotations

import http.client
import os
import socket
import ssl
from urllib.parse import urlsplit

from ansible_collections.krops.platform.plugins.module_utils import errors

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"


class EngineError(errors.ToolError):
    """No container engine answers at the endpoint (a tool error: the engine krops drives is not there)."""


def docker_host(value=None, environ=None):
    """The endpoint a run uses: the given value, else DOCKER_HOST, else the default socket."""
    environ = os.environ if environ is None else environ
    return (value or environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST).strip()


def unanswered(host):
    return f"no container engine answers at {host}: start Docker (or Podman's socket) or set DOCKER_HOST"


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def _tls_context(environ):
    # DOCKER_TLS_VERIFY / DOCKER_TLS and DOCKER_CERT_PATH (ca.pem, cert.pem, key.pem), as the docker CLI reads them.
    certs = environ.get("DOCKER_CERT_PATH") or os.path.expanduser("~/.docker")
    verify = environ.get("DOCKER_TLS_VERIFY", "") not in ("", "0", "false", "False")
    ca = os.path.join(certs, "ca.pem")
    context = ssl.create_default_context(cafile=ca if verify and os.path.isfile(ca) else None)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    cert, key = os.path.join(certs, "cert.pem"), os.path.join(certs, "key.pem")
    if os.path.isfile(cert) and os.path.isfile(key):
        context.load_cert_chain(cert, key)
    return context


def _connection(host, timeout, environ):
    parts = urlsplit(host if "://" in host else "tcp://" + host)
    if parts.scheme in ("unix", "http+unix"):
        return _UnixConnection((parts.netloc or "") + parts.path, timeout)
    if parts.scheme in ("tcp", "http", "https") and parts.hostname:
        tls = parts.scheme == "https" or (
            parts.scheme == "tcp"
            and any(environ.get(k, "") not in ("", "0") for k in ("DOCKER_TLS", "DOCKER_TLS_VERIFY"))
        )
        if tls:
            return http.client.HTTPSConnection(
                parts.hostname, parts.port or 2376, timeout=timeout, context=_tls_context(environ)
            )
        return http.client.HTTPConnection(parts.hostname, parts.port or 2375, timeout=timeout)
    return None


def ping(host, timeout=5, environ=None):
    """{docker_host, api_version, probed} when the engine at ``host`` answers; EngineError (one line) otherwise.

    An ssh:// endpoint is not probed (reaching it needs the ssh client community.docker would use): probed False.
    """
    environ = os.environ if environ is None else environ
    if host.startswith("ssh://"):
        return {"docker_host": host, "api_version": None, "probed": False}
    conn = _connection(host, timeout, environ)
    if conn is None:
        raise EngineError(
            f"DOCKER_HOST {host} is not an engine address: use unix:///path/to/docker.sock or tcp://host:port",
            {"docker_host": host},
        )
    try:
        conn.request("GET", "/_ping", headers={"Accept": "text/plain"})
        reply = conn.getresponse()
        body = reply.read(64).decode("utf-8", "replace").strip()
    except (OSError, http.client.HTTPException):
        raise EngineError(unanswered(host), {"docker_host": host})
    finally:
        conn.close()
    if reply.status != 200 or body != "OK":
        raise EngineError(
            f"{host} answers, but not as a container engine (GET /_ping gave {reply.status} {body[:40]!r}): "
            "point DOCKER_HOST at Docker's or Podman's socket",
            {"docker_host": host},
        )
    return {"docker_host": host, "api_version": reply.getheader("Api-Version"), "probed": True}
