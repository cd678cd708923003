# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""An HTTP double of the dummy cloud docs/extending.md adds (Adding a cloud): machines and the volumes they use.

- ``GET /machines``, ``GET /volumes``: ``{"items": [{"name", "labels", "created", ...}]}``;
- ``DELETE /<kind>s/<name>``: 202 and ``{"operation": "<kind>/<name>"}``; 404 when absent; 409 for a volume while
  the machine it is attached to is there;
- ``GET /operations/<kind>/<name>``: ``{"done": false}`` ``polls`` times, then the resource is gone and
  ``{"done": true}``;
- every call needs ``Authorization: Bearer <token>`` (401 otherwise), and is recorded in ``calls``.
"""

from __future__ import annotations

from tests.substrate.http_double import HttpDouble, Reply

KINDS = ("machine", "volume")
CREATED = "2026-01-01T00:00:00Z"


class DummyCloud(HttpDouble):
    def __init__(self, token, polls=1):
        super().__init__()
        self.token, self.polls = token, polls
        self.items = {}  # (kind, name) -> the resource
        self.operations = {}  # "<kind>/<name>" -> polls answered so far
        self.calls = []

    def add(self, kind, name, environment=None, **fields):
        labels = {} if environment is None else {"krops-environment": environment}
        self.items[(kind, name)] = dict(name=name, labels=labels, created=CREATED, **fields)

    def inventory(self):
        return sorted(f"{kind}/{name}" for kind, name in self.items)

    def respond(self, request):
        self.calls.append(f"{request.method} {request.path}")
        if request.authorization != f"Bearer {self.token}":
            return Reply(401, {"error": {"message": "the token is not valid"}})
        parts = request.path.strip("/").split("/")
        if request.method == "GET" and len(parts) == 1 and parts[0].rstrip("s") in KINDS:
            kind = parts[0].rstrip("s")
            return Reply(200, {"items": [r for (k, n), r in sorted(self.items.items()) if k == kind]})
        if request.method == "DELETE" and len(parts) == 2 and parts[0].rstrip("s") in KINDS:
            return self._delete(parts[0].rstrip("s"), parts[1])
        if request.method == "GET" and parts[0] == "operations" and len(parts) == 3:
            return self._operation("/".join(parts[1:]))
        return Reply(404, {"error": {"message": f"no such path {request.path}"}})

    def _delete(self, kind, name):
        resource = self.items.get((kind, name))
        if resource is None:
            return Reply(404, {"error": {"message": f"{kind} {name} not found"}})
        if ("machine", resource.get("machine")) in self.items:
            return Reply(409, {"error": {"message": f"{kind} {name} is attached to machine {resource['machine']}"}})
        self.operations.setdefault(f"{kind}/{name}", 0)
        return Reply(202, {"operation": f"{kind}/{name}"})

    def _operation(self, key):
        if key not in self.operations:
            return Reply(404, {"error": {"message": f"no operation {key}"}})
        self.operations[key] += 1
        if self.operations[key] <= self.polls:
            return Reply(200, {"done": False})
        self.items.pop(tuple(key.split("/", 1)), None)
        return Reply(200, {"done": True})
