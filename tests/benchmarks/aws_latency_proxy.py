"""An HTTP proxy in front of moto that adds per-call latency and holds slow deletions in a deleting state.

moto deletes at once (and answers EKS deletes with ACTIVE), which hides what a sweep's ordering and
waiting cost against AWS. This proxy forwards every request to moto after ``latency`` seconds; a
delete of a slow type (EKS node group, EKS cluster, RDS instance, NAT gateway) is answered at once
with the deleting state and replayed to moto only after its hold, so until then describe calls show
the resource still there, as AWS does while it deletes.

Holds (real durations, divided by ``scale``): EKS managed node group 10 min (cloud-nuke issue #339:
"EKS ASG's can take upwards of 10 minutes to delete"; the EKS user guide gives a 5 min drain timeout
per node), EKS cluster 12 min (astronomer-providers PR #1168: ``eksctl delete cluster`` with node
groups outgrew eksctl's 25 min default), RDS instance 10 min (cloud-nuke issue #964: the
DBInstanceDeleted waiter ran out within a 22 min run), NAT gateway 4 min (cluster-api-provider-aws
issue #1328: "over 4 minutes just to release the EIP" behind the NAT gateway).
"""

from __future__ import annotations

import functools
import re
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import botocore.exceptions
import botocore.session

MINUTE = 60.0
HOLDS = {
    "eks-nodegroup": 10 * MINUTE,
    "eks-cluster": 12 * MINUTE,
    "rds-instance": 10 * MINUTE,
    "nat-gateway": 4 * MINUTE,
}


def classify(method, path, body):
    """(slow type, fake response body, content type) for a delete the proxy holds, else None."""
    match = re.match(r"^/clusters/([^/]+)/node-groups/([^/?]+)$", path)
    if method == "DELETE" and match:
        return (
            "eks-nodegroup",
            f'{{"nodegroup": {{"nodegroupName": "{match.group(2)}", "clusterName": "{match.group(1)}", "status": "DELETING"}}}}',
            "application/json",
        )
    match = re.match(r"^/clusters/([^/?]+)$", path)
    if method == "DELETE" and match:
        return (
            "eks-cluster",
            f'{{"cluster": {{"name": "{match.group(1)}", "status": "DELETING"}}}}',
            "application/json",
        )
    if method == "POST" and body:
        form = parse_qs(body.decode("utf-8", "replace"))
        action = (form.get("Action") or [""])[0]
        if action == "DeleteDBInstance":
            ident = form.get("DBInstanceIdentifier", [""])[0]
            return (
                "rds-instance",
                "<DeleteDBInstanceResponse><DeleteDBInstanceResult><DBInstance>"
                f"<DBInstanceIdentifier>{ident}</DBInstanceIdentifier><DBInstanceStatus>deleting</DBInstanceStatus>"
                "</DBInstance></DeleteDBInstanceResult></DeleteDBInstanceResponse>",
                "text/xml",
            )
        if action == "DeleteNatGateway":
            ident = form.get("NatGatewayId", [""])[0]
            return (
                "nat-gateway",
                '<DeleteNatGatewayResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
                f"<requestId>held</requestId><natGatewayId>{ident}</natGatewayId></DeleteNatGatewayResponse>",
                "text/xml",
            )
    return None


# services whose signing name is shared: told apart by the API version in the request
_BY_VERSION = {("elasticloadbalancing", "2015-12-01"): "elbv2", ("elasticloadbalancing", "2012-06-01"): "elb"}
_SIGNING = {"elasticloadbalancing": "elbv2", "tagging": "resourcegroupstaggingapi"}


@functools.cache
def _rest_routes(service):
    """[(method, path regex, required query keys, specificity, operation)] of a REST service's model."""
    model = botocore.session.get_session().get_service_model(service)
    routes = []
    for name in model.operation_names:
        http = model.operation_model(name).http
        path, dummy, query = http["requestUri"].partition("?")
        pattern = "".join(
            (".+" if piece.endswith("+}") else "[^/]+") if piece.startswith("{") else re.escape(piece)
            for piece in re.split(r"(\{[^}]+\})", path)
        )
        keys = [q.split("=")[0] for q in query.split("&") if q]
        literal = len(re.sub(r"\{[^}]+\}", "", path))
        routes.append((http["method"], re.compile("^" + pattern + "$"), keys, (len(keys), literal), name))
    return routes


def operation(method, target, headers, body):
    """'service.Operation' of one request (from its SigV4 scope, then its Action, X-Amz-Target, RPC path or the
    REST routes of the service's botocore model): what the call table of the benchmark counts."""
    match = re.search(r"Credential=[^/]+/[^/]+/[^/]+/([^/]+)/", headers.get("Authorization") or "")
    signing = match.group(1) if match else "?"
    parts = urlsplit(target)
    form = parse_qs(body.decode("utf-8", "replace")) if body and method == "POST" else {}
    version = (form.get("Version") or [""])[0]
    service = _BY_VERSION.get((signing, version)) or _SIGNING.get(signing, signing)
    if form.get("Action"):
        return "{}.{}".format(service, form["Action"][0])
    if headers.get("X-Amz-Target"):
        return "{}.{}".format(service, headers["X-Amz-Target"].rsplit(".", 1)[-1])
    rpc = re.match(r"^/service/[^/]+/operation/([^/?]+)", parts.path)
    if rpc:
        return f"{service}.{rpc.group(1)}"
    query = parse_qs(parts.query, keep_blank_values=True)
    best = None
    try:
        routes = _rest_routes(service)
    except botocore.exceptions.BotoCoreError:  # a service without a model here: the raw request is named
        routes = []
    for verb, regex, keys, rank, name in routes:
        if verb == method and regex.match(parts.path) and all(k in query for k in keys):
            if best is None or rank > best[0]:
                best = (rank, name)
    return "{}.{}".format(service, best[1] if best else f"{method} {parts.path}")


class LatencyProxy:
    def __init__(self, upstream, latency=0.0, scale=100.0, holds=None):
        self.upstream = upstream.rstrip("/")
        self.latency = latency
        self.holds = {k: v / scale for k, v in (holds or HOLDS).items()}
        self.calls = 0
        self.by_operation = {}  # 'service.Operation' -> calls (the benchmark's call table)
        self.held = []  # (type, started, released)
        self.faults = []  # [operation, "error" or "reset", remaining]: inject_failure / inject_reset
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                return

            def _do(self):
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    body = b""
                    while True:  # botocore streams some bodies (S3 DeleteObjects) chunked
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if not size:
                            self.rfile.readline()
                            break
                        body += self.rfile.read(size)
                        self.rfile.readline()
                else:
                    length = int(self.headers.get("Content-Length") or 0)
                    body = self.rfile.read(length) if length else b""
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() not in ("host", "content-length", "connection", "transfer-encoding", "expect")
                }
                name = operation(self.command, self.path, self.headers, body)
                with proxy._lock:
                    proxy.calls += 1
                    proxy.by_operation[name] = proxy.by_operation.get(name, 0) + 1
                fault = proxy._fault(name)
                if fault == "reset":  # read, then closed with no answer: the caller cannot tell what happened
                    self.close_connection = True
                    return
                if fault == "error":
                    self._error()
                    return
                if proxy.latency:
                    time.sleep(proxy.latency)
                held = classify(self.command, self.path.split("?")[0], body)
                if held is not None:
                    rtype, fake, ctype = held
                    proxy._hold(rtype, self.command, self.path, headers, body)
                    status, data, answer = 200, fake.encode(), [("Content-Type", ctype)]
                else:
                    status, data, answer = proxy._forward(self.command, self.path, headers, body)
                self.send_response(status)
                for key, value in answer:
                    if key.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self):
                # AWS's answer to an internal error, in the query protocol's shape (botocore retries a 500 by
                # its status whatever the body: retryhandler's general_server_error, 500/502/503/504)
                data = (
                    b"<ErrorResponse><Error><Type>Receiver</Type><Code>InternalFailure</Code>"
                    b"<Message>injected by the crash matrix</Message></Error><RequestId>crash</RequestId></ErrorResponse>"
                )
                self.send_response(500)
                self.send_header("Content-Type", "text/xml")
                self.send_header("x-amzn-ErrorType", "InternalFailure")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PUT = do_HEAD = _do

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def inject_failure(self, operation, times=1):
        """The next ``times`` calls of ``operation`` ('service.Operation', as ``operation()`` names it) answer 500."""
        with self._lock:
            self.faults.append([operation, "error", times])

    def inject_reset(self, operation, times=1):
        """The next ``times`` calls of ``operation`` are read, then the connection is closed with no answer."""
        with self._lock:
            self.faults.append([operation, "reset", times])

    def _fault(self, name):
        with self._lock:
            for fault in self.faults:
                if fault[2] > 0 and fault[0] == name:
                    fault[2] -= 1
                    return fault[1]
        return None

    def _forward(self, method, path, headers, body):
        headers = dict(headers)
        if body and not any(k.lower() == "content-type" for k in headers):
            # urllib would add a form content type, and moto's server would then parse the body away
            headers["Content-Type"] = "binary/octet-stream"
        request = urllib.request.Request(self.upstream + path, data=body or None, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as resp:
                return resp.status, resp.read(), list(resp.headers.items())
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), list(exc.headers.items())

    def _hold(self, rtype, method, path, headers, body):
        started = time.monotonic()

        def release():
            # released: when the deletion goes on to moto, the earliest a client can see it done (taken after the
            # forward, a client that saw it done could already have started what waited for it)
            released = time.monotonic()
            self._forward(method, path, headers, body)
            with self._lock:
                self.held.append((rtype, started, released))

        timer = threading.Timer(self.holds[rtype], release)
        timer.daemon = True
        timer.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
