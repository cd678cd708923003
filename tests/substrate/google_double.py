"""An HTTP double of the Google APIs the gcp teardown and the wif-federate hook call.

One threaded server on 127.0.0.1 serves every API under a path prefix (``<url>/compute``,
``/container``, ``/sqladmin``, ``/storage``, ``/iam``, ``/servicenetworking``,
``/cloudresourcemanager``), which is what ``gcp.gcp_roots(base_url)`` and the hook's
``bootstrap_gcp_iam_url`` point at. It keeps state and refuses what the real APIs refuse:

- Compute Engine v1 (reference: cloud.google.com/compute/docs/reference/rest/v1, the
  ``networks``, ``firewalls``, ``globalAddresses``, ``routers``, ``subnetworks``,
  ``globalOperations``/``regionOperations`` pages, and /compute/docs/api/how-tos/api-requests-responses
  for operations and errors): a delete answers a ``compute#operation`` that is RUNNING and turns
  DONE after ``polls`` GETs of it; the resource disappears then. Listings page with
  ``maxResults``/``pageToken``/``nextPageToken``; ``aggregated/*`` answers ``items`` keyed by
  ``regions/<r>`` (an empty scope carries a NO_RESULTS_ON_PAGE warning, as the real one). Absent:
  404 with reason ``notFound``. Insert of an existing name: 409 ``alreadyExists``. Deleting a network,
  subnetwork or address while something uses it: 400 ``resourceInUseByAnotherResource`` with the
  message the real API gives ("The network resource '...' is already being used by '...'").
- GKE (container v1, ``projects.locations.clusters.delete`` / ``projects.locations.operations.get``):
  delete answers an Operation (operationType DELETE_CLUSTER) and the cluster is STOPPING until
  the operation is DONE. The list has no paging (ListClustersResponse has none).
- Cloud SQL Admin v1 (``instances.delete``, ``instances.patch``, ``operations.get``; the
  deletion-protection page, /sql/docs/postgres/deletion-protection: "you must disable it before
  deleting the instance"): a protected instance refuses delete with 400 (the exact status code
  and message of the real API were not confirmed from a public source here: see
  docs/environments/gcp.md). Operations are ``sql#operation`` PENDING/RUNNING/DONE.
- Cloud Storage JSON API v1 (``buckets.delete``: "Deletes an empty bucket. The request fails if
  there are any live or noncurrent objects"; the XML reference names the status: 409 Conflict,
  BucketNotEmpty): objects listed with ``versions=true``, deleted per generation.
- IAM v1 (``projects.locations.workloadIdentityPools`` and ``.providers``: create, get, patch,
  undelete; IDs 4 to 32 of [a-z0-9-], not starting with ``gcp-``; create answers a long-running
  Operation ``{name, done}``; an existing ID: 409 ALREADY_EXISTS; a soft-deleted one keeps its ID
  (state DELETED) until undeleted; provider under an absent pool: 404), and
  ``projects.serviceAccounts.getIamPolicy``/``setIamPolicy`` with etag checks (409 ABORTED on a
  stale etag), ``projects.serviceAccounts.get``/``delete`` (name ``projects/<project or ->/
  serviceAccounts/<email>``; absent: 404; delete answers an empty body; a deleted account's
  project grants become ``deleted:serviceAccount:<email>?uid=<id>`` members, as the Policy
  reference describes). STS reads a provider's keys from ``oidc.jwksJson``, else from ``issuers`` (the keys a
  public issuer such as a GKE cluster's publishes); ``service_accounts`` and ``project_policy`` hold
  what Config Connector creates (tests/substrate/gcp_operators.py).
- Service Networking v1 (``services.connections.list`` with ``network=projects/<number>/global/
  networks/<name>``, ``services.connections.deleteConnection`` with body ``consumerNetwork`` in
  that form, "{project} is a project number"; ``operations.get``): refused with 400
  FAILED_PRECONDITION while a Cloud SQL instance still has a private IP in that network; on
  success the operation finishes after ``polls`` GETs and the compute peering goes with it.
- Cloud Resource Manager v1 (``projects.get``: projectNumber; ``projects.getIamPolicy`` /
  ``setIamPolicy``: POST ``projects/<id>:getIamPolicy``; a set whose ``policy.etag`` is not the
  current one answers 409 ABORTED; every change gets a new etag).

Every call needs ``Authorization: Bearer <token>`` with a token in ``tokens`` (401
UNAUTHENTICATED otherwise, as Google answers). Every call is recorded in ``calls``.
"""

from __future__ import annotations

import itertools
import json
import re
from urllib.parse import parse_qs, unquote

from tests.substrate.http_double import HttpDouble, Reply

_ID = re.compile(r"^(?!gcp-)[a-z0-9-]{4,32}$")
_RFC1035 = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


def _error(code, message, status=None, reason=None):
    body = {"code": code, "message": message}
    if status:
        body["status"] = status
    if reason:
        body["errors"] = [{"reason": reason, "domain": "global", "message": message}]
    return code, {"error": body}


class GoogleDouble(HttpDouble):
    """The Google APIs for one project; ``polls``: GETs an operation answers RUNNING before DONE."""

    def __init__(self, project="p1", project_number="123456789012", polls=2, page_size=2, tokens=("gcp-token",)):
        self.project = project
        self.number = project_number
        self.polls = polls
        self.page_size = page_size
        self.tokens = set(tokens)
        self.calls = []  # (method, path, Authorization header)
        self.requests = []  # (method, path, query dict, body)
        self.echo_auth = False  # refuse deletions, quoting the Authorization header back (masking tests)
        self.token_key = None  # public key of the service account whose JWT grants /token accepts
        self.sts_tokens = {}  # federated token -> subject (from STS), accepted only by iamcredentials
        self.compute = {}  # "global/networks/x" | "regions/r/subnetworks/x" -> resource
        self.gke = {}  # "locations/l/clusters/n" -> cluster
        self.sql = {}  # name -> instance
        self.buckets = {}  # name -> bucket
        self.objects = {}  # bucket -> [(name, generation)]
        self.pools = {}  # pool id -> pool
        self.providers = {}  # (pool id, provider id) -> provider
        self.sa_policies = {}  # email -> policy
        self.service_accounts = {}  # email -> service account (IAM v1 projects.serviceAccounts)
        self.project_policy = {"version": 1, "etag": "BwAAAA==", "bindings": []}  # the project's IAM policy
        self.policy_races = 0  # getIamPolicy answers after which another writer changes the policy (etag)
        self.refuse_sa_delete = set()  # emails whose delete answers 403 (the caller lacks the permission)
        self.issuers = {}  # public OIDC issuer URI -> its JWKS text (what Google fetches from a public issuer)
        self.operations = {}  # key -> {"left": polls, "done": callable, "body": dict, "error": dict|None}
        self._ids = itertools.count(1)
        super().__init__()

    def respond(self, request):
        method, path = request.method, request.path
        try:
            body = request.json()
        except ValueError:
            body = request.raw.decode()
        if isinstance(body, str) and "form-urlencoded" in (request.headers.get("Content-Type") or ""):
            body = {k: v[0] for k, v in parse_qs(body).items()}
        query = {k: v[0] for k, v in request.query.items()}
        auth = request.authorization or ""
        self.calls.append((method, path, auth or None))
        self.requests.append((method, path, query, body))
        if path in ("/token", "/sts/v1/token") or path.startswith("/iamcredentials/"):
            status, reply = self.tokens_endpoint(path, body, auth)
        elif method == "DELETE" and self.echo_auth and auth[len("Bearer ") :] in self.tokens:
            status, reply = _error(403, f"denied for {auth}", "PERMISSION_DENIED")
        elif auth[len("Bearer ") :] not in self.tokens or not auth.startswith("Bearer "):
            status, reply = _error(
                401,
                "Request had invalid authentication credentials. Expected OAuth 2 access token",
                "UNAUTHENTICATED",
            )
        else:
            try:
                status, reply = self.handle(method, path, query, body)
            except Exception as exc:  # pylint: disable=broad-except  # a double bug shows as 500
                status, reply = _error(500, f"double: {type(exc).__name__}: {exc}", "INTERNAL")
        return Reply(status, reply, content_type="application/json; charset=UTF-8")

    # --- seeding --------------------------------------------------------------------------

    def link(self, rel):
        return f"{self.url}/compute/projects/{self.project}/{rel}"

    def add_network(self, name, **extra):
        self.compute[f"global/networks/{name}"] = dict(
            {"kind": "compute#network", "name": name, "selfLink": self.link(f"global/networks/{name}"), "peerings": []},
            **extra,
        )

    def add_compute(self, collection, name, network, region=None, **extra):
        """collection: firewalls, addresses (global) or routers, subnetworks (regional)."""
        rel = f"regions/{region}/{collection}/{name}" if region else f"global/{collection}/{name}"
        obj = {"name": name, "network": self.link(f"global/networks/{network}"), "selfLink": self.link(rel)}
        if region:
            obj["region"] = self.link(f"regions/{region}")
        obj.update(extra)
        self.compute[rel] = obj
        return obj

    def add_gke(self, name, location, network, labels=None):
        self.gke[f"locations/{location}/clusters/{name}"] = {
            "name": name,
            "location": location,
            "network": network,
            "status": "RUNNING",
            "resourceLabels": dict(labels or {}),
        }

    def add_sql(self, name, network=None, labels=None, protected=False):
        ip = {"ipv4Enabled": network is None}
        if network:
            ip["privateNetwork"] = f"projects/{self.project}/global/networks/{network}"
        self.sql[name] = {
            "kind": "sql#instance",
            "name": name,
            "state": "RUNNABLE",
            "settings": {
                "userLabels": dict(labels or {}),
                "deletionProtectionEnabled": protected,
                "ipConfiguration": ip,
            },
        }

    def add_bucket(self, name, labels=None, objects=()):
        self.buckets[name] = {"kind": "storage#bucket", "name": name, "labels": dict(labels or {})}
        self.objects[name] = list(objects)

    def add_connection(self, network, ranges=("krops-psa",)):
        """A private services access connection: the servicenetworking peering on a compute network."""
        net = self.compute[f"global/networks/{network}"]
        net["peerings"].append(
            {"name": "servicenetworking-googleapis-com", "state": "ACTIVE", "network": "https://servicenetworking"}
        )
        net["_psa"] = list(ranges)

    def writes(self):
        # getIamPolicy is a POST that reads (its request body holds options only)
        return [(m, p) for m, p, dummy in self.calls if m != "GET" and not p.endswith(":getIamPolicy")]

    def inventory(self):
        """Every resource left, as (api, name)."""
        found = {("compute", k) for k in self.compute}
        found |= {("container", k) for k in self.gke}
        found |= {("sqladmin", k) for k in self.sql}
        found |= {("storage", k) for k in self.buckets}
        found |= {("servicenetworking", k) for k, n in self.compute.items() if n.get("_psa")}
        return found

    def inventory_objects(self):
        """Every resource and IAM binding there is, with its state: (api, name) -> resource."""
        found = {("compute", k): v for k, v in self.compute.items()}
        found.update({("container", k): v for k, v in self.gke.items()})
        found.update({("sqladmin", k): v for k, v in self.sql.items()})
        found.update({("storage", k): dict(v, objects=self.objects.get(k)) for k, v in self.buckets.items()})
        found.update({("iam", "workloadIdentityPools/" + k): v for k, v in self.pools.items()})
        found.update({("iam", "workloadIdentityPools/%s/providers/%s" % k): v for k, v in self.providers.items()})
        found.update({("iam", "serviceAccounts/" + k): v for k, v in self.service_accounts.items()})
        for resource, policy in [("projects/" + self.project, self.project_policy)] + [
            ("serviceAccounts/" + k, v) for k, v in self.sa_policies.items()
        ]:
            for binding in policy.get("bindings") or []:
                for member in binding.get("members") or []:
                    found[("iam-binding", f"{resource} {binding['role']} {member}")] = {}
        return found

    # --- operations -------------------------------------------------------------------------

    def _operation(self, key, body, done, error=None):
        self.operations[key] = {"left": self.polls, "done": done, "body": body, "error": error}
        if self.polls <= 0:
            self._finish(key)
        return self.operations[key]

    def _finish(self, key):
        op = self.operations[key]
        if op["done"] is not None:
            op["done"]()
            op["done"] = None
        op["left"] = 0

    def _poll(self, key):
        op = self.operations.get(key)
        if op is None:
            return None
        if op["left"] > 0:
            op["left"] -= 1
            if op["left"] == 0:
                self._finish(key)
        return op

    # --- dispatch ---------------------------------------------------------------------------

    def handle(self, method, path, query, body):
        for prefix, handler in (
            ("/compute/projects/", self._compute),
            ("/container/projects/", self._container),
            ("/sqladmin/projects/", self._sqladmin),
            ("/storage/b", self._storage),
            ("/iam/projects/", self._iam),
            ("/servicenetworking/", self._servicenetworking),
            ("/cloudresourcemanager/projects/", self._crm),
        ):
            if path.startswith(prefix):
                return handler(method, path, query, body)
        return _error(404, f"The requested URL {path} was not found on this server.")

    def _page(self, items, query, key):
        size = int(query.get("maxResults") or self.page_size)
        start = int(query.get("pageToken") or 0)
        reply = {key: items[start : start + size]}
        if start + size < len(items):
            reply["nextPageToken"] = str(start + size)
        return reply

    # --- Compute ------------------------------------------------------------------------------

    def _compute(self, method, path, query, body):
        prefix = f"/compute/projects/{self.project}/"
        if not path.startswith(prefix):
            return _error(403, "Required 'compute.networks.list' permission", reason="forbidden")
        rel = path[len(prefix) :]
        m = re.match(r"^(global|regions/([^/]+))/operations/([^/]+)$", rel)
        if m and method == "GET":
            op = self._poll(("compute", rel))
            if op is None:
                return _error(404, f"The resource 'projects/{self.project}/{rel}' was not found", reason="notFound")
            reply = dict(op["body"], status="DONE" if op["left"] == 0 else "RUNNING")
            if op["left"] == 0 and op["error"]:
                reply["error"] = {"errors": [op["error"]]}
            return 200, reply
        m = re.match(r"^aggregated/(routers|subnetworks|addresses)$", rel)
        if m and method == "GET":
            kind = m.group(1)
            scoped = {}
            for key, obj in sorted(self.compute.items()):
                r = re.match(rf"^regions/([^/]+)/{kind}/[^/]+$", key)
                if r:
                    scoped.setdefault("regions/" + r.group(1), []).append(obj)
            # every scope appears, one per page; empty ones with the real API's warning
            scopes = sorted(set(scoped) | {"regions/europe-north1", "regions/us-central1"})
            page = self._page(scopes, query, "scopes")
            items = {}
            for scope in page["scopes"]:
                if scoped.get(scope):
                    items[scope] = {kind: scoped[scope]}
                else:
                    items[scope] = {
                        "warning": {
                            "code": "NO_RESULTS_ON_PAGE",
                            "message": "There are no results for scope '%s' on this page." % scope,
                        }
                    }
            reply = {"kind": f"compute#{kind[:-1]}AggregatedList", "items": items}
            if "nextPageToken" in page:
                reply["nextPageToken"] = page["nextPageToken"]
            return 200, reply
        m = re.match(r"^global/networks/([^/]+)/removePeering$", rel)
        if m and method == "POST":
            net = self.compute.get(f"global/networks/{m.group(1)}")
            if net is None:
                return self._not_found(rel.rsplit("/", 1)[0])
            if not any(p["name"] == (body or {}).get("name") for p in net["peerings"]):
                return _error(400, "There is no peering with name '%s'." % (body or {}).get("name"), reason="invalid")
            net["peerings"] = [p for p in net["peerings"] if p["name"] != body["name"]]
            return 200, self._compute_op("global", "removePeering", net["selfLink"], None)[1]
        m = re.match(r"^(global|regions/([^/]+))/(networks|firewalls|addresses|routers|subnetworks)$", rel)
        if m:
            items = [o for k, o in sorted(self.compute.items()) if k.rsplit("/", 1)[0] == rel]
            if method == "GET":
                return 200, dict(self._page(items, query, "items"), kind=f"compute#{m.group(3)}List")
            if method == "POST":
                name = (body or {}).get("name") or ""
                if not _RFC1035.match(name):
                    return _error(400, f"Invalid value for field 'resource.name': '{name}'.", reason="invalid")
                if f"{rel}/{name}" in self.compute:
                    return _error(
                        409,
                        f"The resource 'projects/{self.project}/{rel}/{name}' already exists",
                        reason="alreadyExists",
                    )
                self.compute[f"{rel}/{name}"] = dict(body, selfLink=self.link(f"{rel}/{name}"))
                return 200, self._compute_op(m.group(1), "insert", self.link(f"{rel}/{name}"), None)[1]
        obj = self.compute.get(rel)
        if obj is None or not re.match(r"^(global|regions/[^/]+)/[a-z]+/[^/]+$", rel):
            return self._not_found(rel)
        if method == "GET":
            return 200, {k: v for k, v in obj.items() if not k.startswith("_")}
        if method == "DELETE":
            user = self._compute_user(rel, obj)
            if user:
                kind = {"networks": "network", "addresses": "address", "subnetworks": "subnetwork"}.get(
                    rel.split("/")[-2], rel.split("/")[-2][:-1]
                )
                message = f"The {kind} resource 'projects/{self.project}/{rel}' is already being used by '{user}'"
                return _error(400, message, reason="resourceInUseByAnotherResource")
            scope = rel.rsplit("/", 2)[0]
            if obj.get("_deleting"):
                return 200, self.operations[obj["_deleting"]]["body"]
            key, reply = self._compute_op(scope, "delete", obj["selfLink"], lambda: self.compute.pop(rel, None))
            obj["_deleting"] = key
            return 200, reply
        return _error(405, "method not allowed")

    def _compute_op(self, scope, kind, target, done):
        name = "operation-%d-%s" % (next(self._ids), kind.lower())
        key = ("compute", f"{scope}/operations/{name}")
        body = {
            "kind": "compute#operation",
            "name": name,
            "operationType": kind,
            "targetLink": target,
            "status": "RUNNING",
            "selfLink": self.link(f"{scope}/operations/{name}"),
        }
        if scope.startswith("regions/"):
            body["region"] = self.link(scope)
        op = self._operation(key, body, done)
        return key, dict(body, status="DONE" if op["left"] == 0 else "RUNNING")

    def _not_found(self, rel):
        return _error(404, f"The resource 'projects/{self.project}/{rel}' was not found", reason="notFound")

    def _compute_user(self, rel, obj):
        """What still uses a compute resource (its path), as the real API names it; None when nothing."""
        if rel.startswith("global/networks/"):
            name = obj["name"]
            link = obj["selfLink"]
            for key, other in sorted(self.compute.items()):
                if key != rel and other.get("network") == link:
                    return f"projects/{self.project}/{key}"
            for key, cluster in sorted(self.gke.items()):
                if cluster.get("network") == name:
                    return f"projects/{self.project}/{key}"
            if obj.get("peerings"):
                return f"projects/{self.project}/global/networks/{name}/peerings/{obj['peerings'][0]['name']}"
            for inst in self.sql.values():
                if (inst["settings"].get("ipConfiguration") or {}).get("privateNetwork", "").endswith(f"/{name}"):
                    return f"projects/{self.project}/instances/{inst['name']}"
        if rel.startswith("global/addresses/"):
            for key, net in sorted(self.compute.items()):
                if obj["name"] in (net.get("_psa") or []):
                    return f"projects/{self.project}/{key}/peerings/servicenetworking-googleapis-com"
        if "/subnetworks/" in rel:
            for key, cluster in sorted(self.gke.items()):
                if cluster.get("subnetwork") == obj["name"]:
                    return f"projects/{self.project}/{key}"
        return None

    # --- GKE -------------------------------------------------------------------------------------

    def _container(self, method, path, query, body):
        prefix = f"/container/projects/{self.project}/"
        rel = path[len(prefix) :] if path.startswith(prefix) else None
        if rel is None:
            return _error(403, "Permission denied on resource project.", "PERMISSION_DENIED")
        if rel == "locations/-/clusters" and method == "GET":
            return 200, {"clusters": [dict(c) for dummy, c in sorted(self.gke.items())]}
        m = re.match(r"^locations/([^/]+)/operations/([^/]+)$", rel)
        if m and method == "GET":
            op = self._poll(("container", rel))
            if op is None:
                return _error(404, "Not found: operation %s." % m.group(2), "NOT_FOUND")
            return 200, dict(op["body"], status="DONE" if op["left"] == 0 else "RUNNING")
        cluster = self.gke.get(rel)
        if cluster is None:
            return _error(404, "Not found: projects/%s/%s." % (self.project, rel), "NOT_FOUND")
        if method == "GET":
            return 200, dict(cluster)
        if method == "DELETE":
            if cluster["status"] == "STOPPING":
                return _error(400, "Cluster %s is already being deleted." % cluster["name"], "FAILED_PRECONDITION")
            cluster["status"] = "STOPPING"
            location = rel.split("/")[1]
            name = "operation-%d-delete-cluster" % next(self._ids)
            body = {
                "name": name,
                "zone": location,
                "operationType": "DELETE_CLUSTER",
                "status": "RUNNING",
                "selfLink": f"{self.url}/container/projects/{self.number}/locations/{location}/operations/{name}",
                "targetLink": f"{self.url}/container/projects/{self.number}/{rel}",
            }
            op = self._operation(
                ("container", f"locations/{location}/operations/{name}"), body, lambda: self.gke.pop(rel, None)
            )
            return 200, dict(body, status="DONE" if op["left"] == 0 else "RUNNING")
        return _error(405, "method not allowed")

    # --- Cloud SQL ----------------------------------------------------------------------------------

    def _sqladmin(self, method, path, query, body):
        prefix = f"/sqladmin/projects/{self.project}/"
        rel = path[len(prefix) :] if path.startswith(prefix) else None
        if rel is None:
            return _error(403, "The client is not authorized to make this request.", reason="notAuthorized")
        if rel == "instances" and method == "GET":
            return 200, dict(self._page([self.sql[n] for n in sorted(self.sql)], query, "items"))
        m = re.match(r"^operations/([^/]+)$", rel)
        if m and method == "GET":
            op = self._poll(("sql", m.group(1)))
            if op is None:
                return _error(404, "The Cloud SQL operation does not exist.", reason="operationDoesNotExist")
            return 200, dict(op["body"], status="DONE" if op["left"] == 0 else "RUNNING")
        m = re.match(r"^instances/([^/]+)$", rel)
        inst = self.sql.get(m.group(1)) if m else None
        if inst is None:
            return _error(404, "The Cloud SQL instance does not exist.", reason="instanceDoesNotExist")
        if method == "GET":
            return 200, inst
        if method == "PATCH":
            settings = (body or {}).get("settings") or {}
            inst["settings"].update(settings)
            return 200, self._sql_op(inst["name"], "UPDATE", None)
        if method == "DELETE":
            if inst["settings"].get("deletionProtectionEnabled"):
                # status: see the module docstring (not confirmed)
                return _error(
                    400,
                    "Invalid request: The instance is protected. Please disable the deletion protection and try again.",
                    reason="invalid",
                )
            inst["state"] = "PENDING_DELETE"
            return 200, self._sql_op(inst["name"], "DELETE", lambda: self.sql.pop(inst["name"], None))
        return _error(405, "method not allowed")

    def _sql_op(self, instance, kind, done):
        name = "op-%d-%s" % (next(self._ids), kind.lower())
        body = {
            "kind": "sql#operation",
            "name": name,
            "operationType": kind,
            "status": "PENDING",
            "targetId": instance,
            "targetLink": f"{self.url}/sqladmin/projects/{self.project}/instances/{instance}",
            "selfLink": f"{self.url}/sqladmin/projects/{self.project}/operations/{name}",
        }
        op = self._operation(("sql", name), body, done)
        return dict(body, status="DONE" if op["left"] == 0 else "PENDING")

    # --- Cloud Storage ---------------------------------------------------------------------------------

    def _storage(self, method, path, query, body):
        if path == "/storage/b" and method == "GET":
            if query.get("project") != self.project:
                return _error(400, "Invalid argument.", reason="invalid")
            return 200, self._page([self.buckets[n] for n in sorted(self.buckets)], query, "items")
        m = re.match(r"^/storage/b/([^/]+)(?:/o(?:/(.+))?)?$", path)
        if not m or m.group(1) not in self.buckets:
            return _error(404, "The specified bucket does not exist.", reason="notFound")
        bucket = m.group(1)
        if path.endswith("/o") and method == "GET":
            found = self.objects.get(bucket, [])
            if query.get("versions") != "true":
                latest = {}
                for name, gen in found:
                    latest[name] = max(gen, latest.get(name, 0))
                found = sorted(latest.items())
            items = [{"kind": "storage#object", "name": n, "generation": str(g)} for n, g in found]
            return 200, self._page(items, query, "items")
        if m.group(2) is not None and method == "DELETE":
            name = unquote(m.group(2))
            gen = query.get("generation")
            live = [(n, g) for n, g in self.objects[bucket] if n == name and (not gen or str(g) == gen)]
            if not live:
                return _error(404, "No such object: %s/%s" % (bucket, name), reason="notFound")
            self.objects[bucket].remove(live[-1])
            return 204, None
        if m.group(2) is None and "/o" not in path[len("/storage/b/") :]:
            if method == "GET":
                return 200, self.buckets[bucket]
            if method == "DELETE":
                if self.objects.get(bucket):
                    return _error(409, "The bucket you tried to delete is not empty.", reason="conflict")
                del self.buckets[bucket]
                self.objects.pop(bucket, None)
                return 204, None
        return _error(405, "method not allowed")

    # --- IAM ----------------------------------------------------------------------------------------------

    def _iam(self, method, path, query, body):
        m = re.match(r"^/iam/projects/[^/]+/serviceAccounts/([^/:]+):(getIamPolicy|setIamPolicy)$", path)
        if m and method == "POST":
            email = unquote(m.group(1))
            policy = self.sa_policies.setdefault(email, {"version": 1, "etag": "BwAAAA==", "bindings": []})
            if m.group(2) == "getIamPolicy":
                return 200, policy
            new = (body or {}).get("policy") or {}
            if new.get("etag") and new["etag"] != policy["etag"]:
                return _error(
                    409, "There were concurrent policy changes. Please retry the whole read-modify-write.", "ABORTED"
                )
            self.sa_policies[email] = dict(new, etag="BwA%04d=" % next(self._ids))
            return 200, self.sa_policies[email]
        m = re.match(r"^/iam/projects/([^/]+)/serviceAccounts/([^/:]+)$", path)
        if m and m.group(1) in (self.project, "-"):
            return self._service_account(method, unquote(m.group(2)))
        # the API takes the project id or number; operation names carry the number
        path = path.replace(f"/iam/projects/{self.number}/", f"/iam/projects/{self.project}/", 1)
        prefix = f"/iam/projects/{self.project}/locations/global/workloadIdentityPools"
        if not path.startswith(prefix):
            return _error(403, "Permission 'iam.workloadIdentityPools.get' denied on resource.", "PERMISSION_DENIED")
        rel = path[len(prefix) :]
        m = re.match(r"^/([^/:]+)(?:/providers/([^/:]+))?/operations/([^/]+)$", rel)
        if m and method == "GET":
            op = self._poll(("iam", path[len("/iam/") :].replace(self.project, self.number, 1)))
            if op is None:
                return _error(404, "Requested entity was not found.", "NOT_FOUND")
            reply = dict(op["body"], done=op["left"] == 0)
            if op["left"] == 0 and op["error"]:
                reply["error"] = op["error"]
            return 200, reply
        if rel == "" and method == "POST":
            return self._create_pool(query.get("workloadIdentityPoolId") or "", body or {})
        m = re.match(r"^/([^/:]+)(:undelete)?$", rel)
        if m:
            return self._pool(method, m.group(1), bool(m.group(2)), query, body or {})
        m = re.match(r"^/([^/:]+)/providers$", rel)
        if m and method == "POST":
            return self._create_provider(m.group(1), query.get("workloadIdentityPoolProviderId") or "", body or {})
        m = re.match(r"^/([^/:]+)/providers/([^/:]+)(:undelete)?$", rel)
        if m:
            return self._provider(method, m.group(1), m.group(2), bool(m.group(3)), query, body or {})
        return _error(404, "Requested entity was not found.", "NOT_FOUND")

    def _service_account(self, method, email):
        account = self.service_accounts.get(email)
        if account is None:
            return _error(
                404, f"Service account projects/{self.project}/serviceAccounts/{email} not found.", "NOT_FOUND"
            )
        if method == "GET":
            return 200, account
        if method != "DELETE":
            return _error(405, "method not allowed")
        if email in self.refuse_sa_delete:
            return _error(
                403,
                "Permission 'iam.serviceAccounts.delete' denied on resource (or it may not exist).",
                "PERMISSION_DENIED",
            )
        del self.service_accounts[email]
        self.sa_policies.pop(email, None)
        uid = account.get("uniqueId") or str(100000000000000000000 + next(self._ids))
        for binding in self.project_policy.get("bindings") or []:
            binding["members"] = [
                f"deleted:serviceAccount:{email}?uid={uid}" if m == f"serviceAccount:{email}" else m
                for m in binding.get("members") or []
            ]
        self.bump_project_policy()
        return 200, {}

    def bump_project_policy(self):
        """A new etag: the policy changed."""
        self.project_policy["etag"] = "BwP%04d=" % next(self._ids)

    def _project_policy(self, verb, body):
        if verb == "getIamPolicy":
            answer = json.loads(json.dumps(self.project_policy))
            if self.policy_races > 0:  # another writer changes the policy right after this read
                self.policy_races -= 1
                viewers = next((b for b in self.project_policy["bindings"] if b["role"] == "roles/viewer"), None)
                if viewers is None:
                    viewers = {"role": "roles/viewer", "members": []}
                    self.project_policy["bindings"].append(viewers)
                viewers["members"].append("user:concurrent-%d@example.com" % next(self._ids))
                self.bump_project_policy()
            return 200, answer
        new = (body or {}).get("policy")
        if not isinstance(new, dict):
            return _error(400, "Invalid JSON payload received. policy is required.", "INVALID_ARGUMENT")
        if new.get("etag") and new["etag"] != self.project_policy["etag"]:
            return _error(
                409, "There were concurrent policy changes. Please retry the whole read-modify-write.", "ABORTED"
            )
        self.project_policy = {
            "version": new.get("version", 1),
            "bindings": [b for b in new.get("bindings") or [] if b.get("members")],
        }
        self.bump_project_policy()
        return 200, self.project_policy

    def _pool_name(self, pool):
        return f"projects/{self.number}/locations/global/workloadIdentityPools/{pool}"

    def _iam_op(self, resource_path, done, response):
        name = "%s/operations/%s" % (resource_path, "bigop-%d" % next(self._ids))
        op = self._operation(("iam", name), {"name": name, "metadata": {}, "response": response}, done)
        return 200, {"name": name, "done": op["left"] == 0}

    def _create_pool(self, pool, body):
        if not _ID.match(pool):
            return _error(400, "Invalid workload identity pool ID: %r." % pool, "INVALID_ARGUMENT")
        if pool in self.pools:
            return _error(409, "Requested entity already exists", "ALREADY_EXISTS")
        self.pools[pool] = dict(body, name=self._pool_name(pool), state="ACTIVE")
        return self._iam_op(self._pool_name(pool), None, self.pools[pool])

    def _pool(self, method, pool, undelete, query, body):
        obj = self.pools.get(pool)
        if obj is None:
            return _error(404, "Requested entity was not found.", "NOT_FOUND")
        if method == "GET" and not undelete:
            return 200, obj
        if method == "POST" and undelete:
            if obj["state"] != "DELETED":
                return _error(400, "The workload identity pool is not deleted.", "FAILED_PRECONDITION")
            obj["state"] = "ACTIVE"
            return self._iam_op(obj["name"], None, obj)
        if method == "DELETE":
            obj["state"] = "DELETED"
            return self._iam_op(obj["name"], None, obj)
        return _error(405, "method not allowed")

    def _check_provider(self, body, partial_mask=None):
        fields = set((partial_mask or "").split(",")) if partial_mask else None
        oidc = body.get("oidc")
        if fields is None or any(f.startswith("oidc") for f in fields):
            if not isinstance(oidc, dict) or not oidc.get("issuerUri"):
                return "oidc.issuerUri is required."
            if not str(oidc["issuerUri"]).startswith("https://"):
                return "The issuer URI must use https."
            jwks = oidc.get("jwksJson")
            if jwks:
                try:
                    keys = json.loads(jwks).get("keys")
                except (ValueError, AttributeError):
                    keys = None
                if not keys:
                    return "oidc.jwksJson is not a valid JWK set."
        if fields is None or "attributeMapping" in fields:
            if "google.subject" not in (body.get("attributeMapping") or {}):
                return "attribute_mapping must contain a mapping for google.subject."
        return None

    def _create_provider(self, pool, provider, body):
        if pool not in self.pools or self.pools[pool]["state"] != "ACTIVE":
            return _error(404, "Requested entity was not found.", "NOT_FOUND")
        if not _ID.match(provider):
            return _error(400, "Invalid workload identity pool provider ID: %r." % provider, "INVALID_ARGUMENT")
        if (pool, provider) in self.providers:
            return _error(409, "Requested entity already exists", "ALREADY_EXISTS")
        problem = self._check_provider(body)
        if problem:
            return _error(400, problem, "INVALID_ARGUMENT")
        name = f"{self._pool_name(pool)}/providers/{provider}"
        self.providers[(pool, provider)] = dict(body, name=name, state="ACTIVE")
        return self._iam_op(name, None, self.providers[(pool, provider)])

    def _provider(self, method, pool, provider, undelete, query, body):
        obj = self.providers.get((pool, provider))
        if obj is None:
            return _error(404, "Requested entity was not found.", "NOT_FOUND")
        if method == "GET" and not undelete:
            return 200, obj
        if method == "POST" and undelete:
            if obj["state"] != "DELETED":
                return _error(400, "The provider is not deleted.", "FAILED_PRECONDITION")
            obj["state"] = "ACTIVE"
            return self._iam_op(obj["name"], None, obj)
        if method == "PATCH":
            mask = query.get("updateMask")
            if not mask:
                return _error(400, "update_mask is required.", "INVALID_ARGUMENT")
            if obj["state"] == "DELETED":
                return _error(400, "Cannot update a deleted provider.", "FAILED_PRECONDITION")
            problem = self._check_provider(body, mask)
            if problem:
                return _error(400, problem, "INVALID_ARGUMENT")
            for field in mask.split(","):
                top, dummy, sub = field.partition(".")
                if sub:
                    obj.setdefault(top, {})[sub] = (body.get(top) or {}).get(sub)
                else:
                    obj[top] = body.get(top)
            return self._iam_op(obj["name"], None, obj)
        if method == "DELETE":
            obj["state"] = "DELETED"
            return self._iam_op(obj["name"], None, obj)
        return _error(405, "method not allowed")

    # --- token endpoints: OAuth2 (service account JWT grant), STS (token exchange), IAM Credentials -------

    def tokens_endpoint(self, path, body, auth):
        body = body if isinstance(body, dict) else {}
        if path == "/token":
            return self._jwt_grant(body)
        if path == "/sts/v1/token":
            return self._sts(body)
        m = re.match(r"^/iamcredentials/v1/projects/-/serviceAccounts/([^/:]+):generateAccessToken$", path)
        if m:
            return self._generate_access_token(unquote(m.group(1)), body, auth)
        return _error(404, "Not found.", "NOT_FOUND")

    def _jwt_grant(self, form):
        """The OAuth2 JWT-bearer grant of Google's token endpoint (RFC 7523), for one service account."""
        import jwt  # pylint: disable=import-outside-toplevel

        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return 400, {"error": "unsupported_grant_type", "error_description": "Invalid grant_type"}
        try:
            # google-auth signs for Google's token endpoint whatever token_uri says; so does the real one check
            claims = jwt.decode(
                form.get("assertion", ""),
                self.token_key,
                algorithms=["RS256"],
                audience="https://oauth2.googleapis.com/token",
            )
        except jwt.PyJWTError:
            return 400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
        if "https://www.googleapis.com/auth/cloud-platform" not in claims.get("scope", "").split():
            return 400, {"error": "invalid_scope", "error_description": "Invalid OAuth scope"}
        self.tokens.add("from-jwt-grant")
        return 200, {"access_token": "from-jwt-grant", "token_type": "Bearer", "expires_in": 3599}

    def _sts(self, form):
        """STS token exchange (sts.googleapis.com/v1/token, RFC 8693) against the pools and providers here.

        The subject token must be a JWT from the provider's issuer, for one of its allowed audiences (by
        default the provider's own resource name), signed by a key of its jwksJson.
        """
        import jwt  # pylint: disable=import-outside-toplevel

        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:token-exchange":
            return 400, {"error": "unsupported_grant_type", "error_description": "Unsupported grant type."}
        if form.get("subject_token_type") not in (
            "urn:ietf:params:oauth:token-type:jwt",
            "urn:ietf:params:oauth:token-type:id_token",
        ):
            return 400, {"error": "invalid_request", "error_description": "Invalid subject token type."}
        m = re.match(
            r"^//iam\.googleapis\.com/projects/([^/]+)/locations/global/workloadIdentityPools/([^/]+)/providers/([^/]+)$",
            form.get("audience") or "",
        )
        provider = self.providers.get((m.group(2), m.group(3))) if m and m.group(1) == self.number else None
        if provider is None or provider["state"] != "ACTIVE" or self.pools[m.group(2)]["state"] != "ACTIVE":
            return 400, {
                "error": "invalid_target",
                "error_description": 'The target service indicated by the "audience" parameters is invalid.',
            }
        oidc = provider.get("oidc") or {}
        audiences = oidc.get("allowedAudiences") or ["https:" + form["audience"], form["audience"]]
        try:
            # without jwksJson Google reads the keys from the issuer's public discovery document
            keys = json.loads(oidc.get("jwksJson") or self.issuers.get(oidc.get("issuerUri")) or '{"keys": []}')["keys"]
            header = jwt.get_unverified_header(form.get("subject_token") or "")
            key = next(k for k in keys if k.get("kid") == header.get("kid"))
            claims = jwt.decode(
                form["subject_token"],
                jwt.PyJWK(key).key,
                algorithms=["RS256"],
                audience=audiences,
                issuer=oidc.get("issuerUri"),
            )
        except (jwt.PyJWTError, StopIteration, ValueError, KeyError) as exc:
            return 400, {"error": "invalid_grant", "error_description": f"The subject token is invalid: {exc}"}
        token = "sts-%d" % next(self._ids)
        self.sts_tokens[token] = (m.group(2), claims.get("sub"))
        return 200, {
            "access_token": token,
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "token_type": "Bearer",
            "expires_in": 3600,
        }

    def _generate_access_token(self, email, body, auth):
        """IAM Credentials generateAccessToken with a federated token: the SA's policy must grant
        roles/iam.workloadIdentityUser to the federated principal (or its pool principalSet)."""
        fed = self.sts_tokens.get(auth[len("Bearer ") :])
        if not fed:
            return _error(401, "Request had invalid authentication credentials.", "UNAUTHENTICATED")
        pool, subject = fed
        base = f"principal://iam.googleapis.com/projects/{self.number}/locations/global/workloadIdentityPools/{pool}"
        members = {f"{base}/subject/{subject}", base.replace("principal://", "principalSet://") + "/*"}
        policy = self.sa_policies.get(email) or {}
        if not any(
            b.get("role") == "roles/iam.workloadIdentityUser" and members & set(b.get("members") or [])
            for b in policy.get("bindings") or []
        ):
            return _error(
                403,
                "Permission 'iam.serviceAccounts.getAccessToken' denied on resource (or it may not exist).",
                "PERMISSION_DENIED",
            )
        token = "impersonated-%d" % next(self._ids)
        self.tokens.add(token)
        return 200, {"accessToken": token, "expireTime": "2099-01-01T00:00:00Z"}

    # --- Service Networking, Resource Manager -----------------------------------------------------------

    def _servicenetworking(self, method, path, query, body):
        base = "/servicenetworking/services/servicenetworking.googleapis.com/connections"
        m = re.match(r"^/servicenetworking/(operations/[^/]+)$", path)
        if m and method == "GET":
            op = self._poll(("sn", m.group(1)))
            if op is None:
                return _error(404, "Operation not found.", "NOT_FOUND")
            reply = dict(op["body"], done=op["left"] == 0)
            return 200, reply
        if path == base and method == "GET":
            net = self._consumer(query.get("network"))
            if isinstance(net, tuple):
                return net
            found = []
            if net and net.get("_psa"):
                found.append(
                    {
                        "network": query["network"],
                        "service": "services/servicenetworking.googleapis.com",
                        "peering": "servicenetworking-googleapis-com",
                        "reservedPeeringRanges": list(net["_psa"]),
                    }
                )
            return 200, {"connections": found}
        if path == base + "/servicenetworking-googleapis-com:deleteConnection" and method == "POST":
            net = self._consumer((body or {}).get("consumerNetwork"))
            if isinstance(net, tuple):
                return net
            if not net or not net.get("_psa"):
                return _error(404, "Connection not found.", "NOT_FOUND")
            users = [
                i["name"]
                for i in self.sql.values()
                if (i["settings"].get("ipConfiguration") or {}).get("privateNetwork", "").endswith("/" + net["name"])
            ]
            if users:
                return _error(
                    400,
                    "Failed to delete connection; Producer services (e.g. CloudSQL, Cloud Memstore, etc.) are "
                    "still using this connection.",
                    "FAILED_PRECONDITION",
                )

            def done():
                net["_psa"] = []
                net["peerings"] = [p for p in net["peerings"] if p["name"] != "servicenetworking-googleapis-com"]

            name = "operations/pssn.%d" % next(self._ids)
            op = self._operation(("sn", name), {"name": name}, done)
            return 200, {"name": name, "done": op["left"] == 0}
        return _error(404, "Method not found.", "NOT_FOUND")

    def _consumer(self, network):
        """The compute network named by projects/<number>/global/networks/<name> (the project NUMBER)."""
        m = re.match(r"^projects/([^/]+)/global/networks/([^/]+)$", network or "")
        if not m:
            return _error(400, "Invalid consumer network: %r." % network, "INVALID_ARGUMENT")
        if m.group(1) != self.number:
            return _error(
                400,
                "Project %s must be given as a project number (%s)." % (m.group(1), "projects/{number}"),
                "INVALID_ARGUMENT",
            )
        return self.compute.get(f"global/networks/{m.group(2)}")

    def _crm(self, method, path, query, body):
        # by id (krops) or by number under v1 (google-auth's project lookup of external_account credentials)
        if method == "GET" and path in (
            f"/cloudresourcemanager/projects/{self.project}",
            f"/cloudresourcemanager/v1/projects/{self.number}",
        ):
            return 200, {"projectId": self.project, "projectNumber": self.number, "lifecycleState": "ACTIVE"}
        m = re.match(r"^/cloudresourcemanager/projects/([^/:]+):(getIamPolicy|setIamPolicy)$", path)
        if method == "POST" and m and m.group(1) == self.project:
            return self._project_policy(m.group(2), body)
        return _error(403, "The caller does not have permission", "PERMISSION_DENIED")


class MetadataDouble(HttpDouble):
    """The GCE metadata server as google-auth uses it (GCE_METADATA_HOST / GCE_METADATA_IP).

    Like the real one it answers the root with ``Metadata-Flavor: Google`` and refuses requests that
    lack that header (403); service-account info and tokens under /computeMetadata/v1/
    (cloud.google.com/compute/docs/metadata/querying-metadata, .../access-authenticate-workloads).
    """

    def __init__(self, token, email="krops@p1.iam.gserviceaccount.com", project="p1"):
        self.token, self.email, self.project = token, email, project
        self.calls = []
        super().__init__()
        self.host = "127.0.0.1:%d" % self.port

    def respond(self, request):
        self.calls.append((request.path, request.headers.get("Metadata-Flavor")))
        if request.method != "GET":
            return Reply(405, "Method Not Allowed", {"Metadata-Flavor": "Google"}, "text/html")
        status, body, ctype = self.handle(request.path, request.query, request.headers)
        return Reply(status, body, {"Metadata-Flavor": "Google"}, ctype)

    def handle(self, path, query, headers):
        if path == "/":
            return 200, "", "application/text"
        if headers.get("Metadata-Flavor") != "Google":
            return 403, "Missing Metadata-Flavor:Google header.", "text/html"
        base = "/computeMetadata/v1/"
        sa = base + "instance/service-accounts/"
        if path == base + "project/project-id":
            return 200, self.project, "application/text"
        if path in (sa + "default/", sa + self.email + "/"):
            return (
                200,
                {
                    "aliases": ["default"],
                    "email": self.email,
                    "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
                },
                "application/json",
            )
        if path in (sa + "default/token", sa + self.email + "/token"):
            return 200, {"access_token": self.token, "expires_in": 3599, "token_type": "Bearer"}, "application/json"
        return 404, "Not found", "text/html"
