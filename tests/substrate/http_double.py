# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The HTTP plumbing every cloud API double shares, written once.

A double subclasses ``HttpDouble`` and implements ``respond(request)``; the base runs a threaded
HTTP server on 127.0.0.1 (HTTPS when ``tls`` is a (cert, key) pair, since msal and azure-identity
refuse an http authority), serialises the double's state behind one lock, and writes the reply.
"""

from __future__ import annotations

import json
import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

METHODS = ("GET", "PUT", "POST", "PATCH", "DELETE")


@dataclass
class Request:
    method: str
    path: str
    query: dict  # parse_qs form: name -> [values]
    headers: object  # the request's http.client.HTTPMessage: get() ignores the case of names
    raw: bytes

    @property
    def authorization(self):
        return self.headers.get("Authorization")

    def json(self):
        """The body as JSON; ValueError when it is not."""
        return json.loads(self.raw) if self.raw else None


@dataclass
class Reply:
    status: int
    body: object = None  # JSON-serialised unless str or bytes
    headers: dict = None
    content_type: str = "application/json"

    def encoded(self):
        if self.body is None:
            return b""
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body).encode()


class HttpDouble:
    """A threaded HTTP(S) server that answers through ``respond`` under ``self.lock``."""

    def __init__(self, tls=None):
        self.lock = threading.Lock()
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                return

            def _do(self):
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                request = Request(
                    self.command,
                    parts.path,
                    parse_qs(parts.query),
                    self.headers,
                    self.rfile.read(length) if length else b"",
                )
                with double.lock:
                    reply = double.respond(request)
                data = reply.encoded()
                self.send_response(reply.status)
                for key, value in (reply.headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        for method in METHODS:
            setattr(Handler, "do_" + method, Handler._do)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.port = self.server.server_address[1]
        self.url = "%s://127.0.0.1:%d" % ("https" if tls else "http", self.port)

    def respond(self, request):  # pragma: no cover - every double implements it
        raise NotImplementedError

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
