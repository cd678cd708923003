"""azure_teardown and gcp_teardown against local HTTP doubles of ARM and the Google APIs.

No emulator exists for either cloud here, so each double is a small stateful server written for
these tests: it keeps resources, enforces the dependencies the real APIs enforce (a VPC in use,
a non-empty bucket, deletion protection), and records every call so the tests can assert the
order and that nothing outside the ownership filter was touched.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from ansible_collections.krops.platform.plugins.modules import azure_teardown, gcp_teardown
from tests.substrate.fixtures import REPO

SUB = "00000000-0000-0000-0000-000000000001"


class Double:
    """A threaded HTTP server dispatching to handle(method, path, query, body) -> (status, body)."""

    def __init__(self):
        self.calls = []
        self.lock = threading.Lock()
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                return

            def _do(self, method):
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                is_json = (self.headers.get("Content-Type") or "").startswith("application/json")
                body = (json.loads(raw) if is_json else raw.decode()) if raw else None
                with double.lock:
                    double.calls.append((method, parts.path, self.headers.get("Authorization")))
                    status, reply = double.handle(method, parts.path, parse_qs(parts.query), body)
                data = json.dumps(reply).encode() if reply is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._do("GET")

            def do_DELETE(self):
                self._do("DELETE")

            def do_POST(self):
                self._do("POST")

            def do_PATCH(self):
                self._do("PATCH")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def writes(self):
        return [(m, p) for m, p, dummy in self.calls if m != "GET"]


# --- Azure Resource Manager double ---------------------------------------------------------


class Arm(Double):
    def __init__(self):
        super().__init__()
        self.objects = {}  # id -> resource
        self.deleting = {}  # id -> GETs left before it is gone

    def add(self, rid, **fields):
        obj = {"id": rid, "name": rid.rsplit("/", 1)[-1]}
        obj.update(fields)
        self.objects[rid] = obj

    def handle(self, method, path, query, body):
        low = path.lower()
        sub = f"/subscriptions/{SUB}"
        if method == "POST" and low == "/tenant-1/oauth2/v2.0/token":
            form = parse_qs(body)
            if form == {
                "grant_type": ["client_credentials"],
                "client_id": ["app-1"],
                "client_secret": ["s3cret"],
                "scope": [f"{self.url}/.default"],
            }:
                return 200, {"access_token": "from-login", "token_type": "Bearer"}
            return 401, {"error": "invalid_client", "error_description": "bad secret"}
        listings = {
            sub + "/resourcegroups": lambda i: i.count("/") == 4 and "/resourcegroups/" in i.lower(),
            sub + "/providers/microsoft.kubernetes/connectedclusters": lambda i: "/connectedclusters/" in i.lower(),
            sub + "/providers/microsoft.managedidentity/userassignedidentities": lambda i: (
                i.lower().count("/userassignedidentities/") == 1 and "/federatedidentitycredentials/" not in i.lower()
            ),
        }
        if method == "GET" and low in listings:
            items = [o for i, o in sorted(self.objects.items()) if listings[low](i)]
            page = int((query.get("page") or ["0"])[0])
            reply = {"value": items[page * 2 : page * 2 + 2]}
            if len(items) > page * 2 + 2:
                reply["nextLink"] = "%s%s?api-version=x&page=%d" % (self.url, path, page + 1)
            return 200, reply
        if method == "GET" and low.endswith("/federatedidentitycredentials"):
            prefix = path + "/"
            return 200, {"value": [o for i, o in sorted(self.objects.items()) if i.startswith(prefix)]}
        rid = next((i for i in self.objects if i.lower() == low), None)
        if rid is None:
            return 404, {"error": {"code": "NotFound", "message": f"{path} not found"}}
        if method == "GET":
            if rid in self.deleting:
                self.deleting[rid] -= 1
                if self.deleting[rid] < 0:
                    self._drop(rid)
                    return 404, {"error": {"code": "NotFound", "message": "gone"}}
            return 200, self.objects[rid]
        if method == "DELETE":
            if "/federatedidentitycredentials/" in low:
                self._drop(rid)
                return 200, None
            self.deleting.setdefault(rid, 1)
            return 202, None
        return 405, {"error": {"message": "unsupported"}}

    def _drop(self, rid):
        for other in [i for i in self.objects if i == rid or i.lower().startswith(rid.lower() + "/")]:
            del self.objects[other]
        self.deleting.pop(rid, None)


def rg(name):
    return f"/subscriptions/{SUB}/resourceGroups/{name}"


@pytest.fixture
def arm():
    double = Arm()
    yield double
    double.stop()


def azure_world(arm):
    capz = "sigs.k8s.io_cluster-api-provider-azure_cluster_%s"
    arm.add(rg("swedencentral-management"), location="swedencentral", tags={"krops-environment": "azure"})
    arm.add(rg("swedencentral-workload"), location="swedencentral", tags={capz % "swedencentral-workload": "owned"})
    arm.add(rg("krops-identities"), location="swedencentral", tags={"krops-environment": "azure"})
    arm.add(rg("team-billing"), location="swedencentral", tags={})
    arm.add(rg("other-env"), location="swedencentral", tags={"krops-environment": "azure-staging"})
    arc = rg("krops-identities") + "/providers/Microsoft.Kubernetes/connectedClusters/krops-kind-mgmt"
    arm.add(arc, tags={"krops-environment": "azure"})
    arm.add(rg("team-billing") + "/providers/Microsoft.Kubernetes/connectedClusters/their-arc", tags={})
    ident = rg("krops-identities") + "/providers/Microsoft.ManagedIdentity/userAssignedIdentities/capz"
    arm.add(ident, tags={"krops-environment": "azure"})
    arm.add(
        ident + "/federatedIdentityCredentials/krops-kind-capz",
        properties={"issuer": "https://kind.example/issuer", "subject": "system:serviceaccount:capz-system:capz"},
    )
    arm.add(
        ident + "/federatedIdentityCredentials/mgmt-oidc",
        properties={"issuer": "https://aks.example/mgmt", "subject": "system:serviceaccount:capz-system:capz"},
    )
    foreign = rg("team-billing") + "/providers/Microsoft.ManagedIdentity/userAssignedIdentities/billing"
    arm.add(foreign, tags={})
    arm.add(
        foreign + "/federatedIdentityCredentials/krops-kind-x", properties={"issuer": "https://kind.example/issuer"}
    )
    # the identities group is tagged: without an explicit list it would go; the test passes the list
    return arc, ident


def azure_args(arm, **extra):
    args = {
        "environment": "azure",
        "config_file": str(REPO / "bootstrap.toml"),
        "subscription_id": SUB,
        "access_token": "arm-token",
        "endpoint": arm.url,
        "poll_interval": 0,
        "wait_timeout": 10,
    }
    args.update(extra)
    return args


def test_azure_deletes_only_owned_resources_in_order(arm, run_module):
    arc, ident = azure_world(arm)
    # an explicitly listed group without an ownership tag stays
    args = azure_args(arm, resource_groups=["swedencentral-management", "swedencentral-workload", "team-billing"])
    planned = run_module(azure_teardown, args, check_mode=True)
    assert not planned.failed, planned
    assert not arm.writes()
    assert [(r["type"], r["name"]) for r in planned["results"]] == [
        ("federated-credential", "krops-kind-capz"),
        ("arc-connected-cluster", "krops-kind-mgmt"),
        ("resource-group", "swedencentral-workload"),
        ("resource-group", "krops-identities"),
        ("resource-group", "swedencentral-management"),
    ]
    assert [n["name"] for n in planned["not_owned"]] == ["team-billing"]
    result = run_module(azure_teardown, args)
    assert not result.failed, result
    assert arm.writes() == [
        ("DELETE", ident + "/federatedIdentityCredentials/krops-kind-capz"),
        ("DELETE", arc),
        ("DELETE", rg("swedencentral-workload")),
        ("DELETE", rg("krops-identities")),
        ("DELETE", rg("swedencentral-management")),
    ]
    assert all(auth == "Bearer arm-token" for dummy, dummy2, auth in arm.calls)
    left = sorted(o["name"] for i, o in arm.objects.items() if i.count("/") == 4)
    assert left == ["other-env", "team-billing"]
    assert any(i.endswith("/their-arc") for i in arm.objects)
    assert any(i.endswith("/billing/federatedIdentityCredentials/krops-kind-x") for i in arm.objects)
    again = run_module(azure_teardown, args)
    assert again["changed"] is False and again["results"] == []


def test_azure_default_groups_come_from_bootstrap_toml_and_leftovers_fail(arm, run_module):
    arm.add(rg("swedencentral-management"), tags={"krops-environment": "azure"})
    arm.add(rg("swedencentral-workload"), tags={})  # named, but not provably ours
    arm.deleting[rg("swedencentral-management")] = 10**6  # never finishes deleting
    result = run_module(azure_teardown, azure_args(arm, wait_timeout=0))
    assert result.failed
    assert result["msg"] == (
        "Azure resources of azure left behind: {}; see results for the reason of each, then run "
        "the teardown again".format(rg("swedencentral-management"))
    )
    assert result["not_owned"][0]["name"] == "swedencentral-workload"
    assert ("DELETE", rg("swedencentral-workload")) not in arm.writes()


def test_azure_needs_a_subscription_and_the_right_environment(run_module, monkeypatch):
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID", raising=False)
    result = run_module(
        azure_teardown, {"environment": "azure", "config_file": str(REPO / "bootstrap.toml"), "access_token": "t"}
    )
    assert result.failed and result["msg"] == "no Azure subscription: set subscription_id or AZURE_SUBSCRIPTION_ID"
    wrong = run_module(
        azure_teardown,
        {
            "environment": "aws",
            "config_file": str(REPO / "bootstrap.toml"),
            "subscription_id": SUB,
            "access_token": "t",
        },
    )
    assert wrong.failed and wrong["msg"] == "environment aws is of kind aws, not azure"


# --- Google APIs double ----------------------------------------------------------------------


class Google(Double):
    """Container, Cloud SQL, Storage and Compute for one project, with their delete preconditions."""

    def __init__(self, project="p1"):
        super().__init__()
        self.project = project
        self.res = {}  # path (without the service root) -> resource
        self.bucket_objects = {}

    def net_url(self, name):
        return f"{self.url}/compute/projects/{self.project}/global/networks/{name}"

    def put(self, path, obj):
        self.res[path] = obj

    def _items(self, prefix):
        return [o for p, o in sorted(self.res.items()) if p.startswith(prefix) and "/" not in p[len(prefix) :]]

    def handle(self, method, path, query, body):
        p = f"/projects/{self.project}"
        listings = {
            f"/container{p}/locations/-/clusters": (
                "clusters",
                lambda: [o for k, o in sorted(self.res.items()) if k.startswith(f"/container{p}/locations/")],
            ),
            f"/sqladmin{p}/instances": ("items", lambda: self._items(f"/sqladmin{p}/instances/")),
            "/storage/b": ("items", lambda: self._items("/storage/b/")),
            f"/compute{p}/global/addresses": ("items", lambda: self._items(f"/compute{p}/global/addresses/")),
            f"/compute{p}/global/firewalls": ("items", lambda: self._items(f"/compute{p}/global/firewalls/")),
        }
        if method == "GET" and path in listings:
            key, items = listings[path]
            found = items()
            start = int((query.get("pageToken") or ["0"])[0])
            reply = {key: found[start : start + 1]}  # one item per page: every listing is paged
            if start + 1 < len(found):
                reply["nextPageToken"] = str(start + 1)
            return 200, reply
        aggregated = re.match(rf"^/compute{p}/aggregated/(routers|subnetworks)$", path)
        if method == "GET" and aggregated:
            kind = aggregated.group(1)
            scoped = {}
            for k, o in sorted(self.res.items()):
                m = re.match(rf"^/compute{p}/regions/([^/]+)/{kind}/[^/]+$", k)
                if m:
                    scoped.setdefault("regions/" + m.group(1), {kind: []})[kind].append(o)
            return 200, {"items": scoped}
        objects = re.match(r"^/storage/b/([^/]+)/o(?:/(.+))?$", path)
        if objects:
            bucket = objects.group(1)
            if method == "GET":
                return 200, {"items": [{"name": n, "generation": g} for n, g in self.bucket_objects.get(bucket, [])]}
            if method == "DELETE":
                gen = int(query["generation"][0])
                self.bucket_objects[bucket].remove((unquote(objects.group(2)), gen))
                return 204, None
        peering = re.match(rf"^(/compute{p}/global/networks/[^/]+)/removePeering$", path)
        if peering and method == "POST":
            net = self.res[peering.group(1)]
            net["peerings"] = [x for x in net.get("peerings", []) if x["name"] != body["name"]]
            return 200, {"kind": "compute#operation", "status": "RUNNING"}
        obj = self.res.get(path)
        if obj is None:
            return 404, {"error": {"code": 404, "message": f"The resource '{path}' was not found"}}
        if method == "GET":
            return 200, obj
        if method == "PATCH":
            obj.setdefault("settings", {}).update(body.get("settings") or {})
            return 200, {"kind": "sql#operation"}
        if method == "DELETE":
            blocker = self._blocker(path, obj)
            if blocker:
                return 400, {"error": {"code": 400, "message": blocker}}
            del self.res[path]
            return 200, {"kind": "operation", "status": "DONE"}
        return 405, {"error": {"message": "unsupported"}}

    def _blocker(self, path, obj):
        if (obj.get("settings") or {}).get("deletionProtectionEnabled"):
            return "The instance is protected from deletion"
        if path.startswith("/storage/b/") and self.bucket_objects.get(obj["name"]):
            return "The bucket you tried to delete is not empty"
        if "/global/networks/" in path:
            url = self.net_url(obj["name"])
            users = [
                k
                for k, o in self.res.items()
                if o.get("network") == url
                or (o.get("settings") or {}).get("ipConfiguration", {}).get("privateNetwork") == url
            ]
            if users or obj.get("peerings"):
                return "The network resource '{}' is already being used by '{}'".format(
                    obj["name"],
                    (users or ["peering"])[0],
                )
        return None


@pytest.fixture
def google():
    double = Google()
    yield double
    double.stop()


def gcp_world(g):
    p = "/projects/p1"
    owned, foreign = "europe-north1-management", "team-vpc"
    for name in (owned, "europe-north1-workload", foreign, "default"):
        g.put(f"/compute{p}/global/networks/{name}", {"name": name, "selfLink": g.net_url(name), "peerings": []})
    g.res[f"/compute{p}/global/networks/{owned}"]["peerings"] = [{"name": "servicenetworking-googleapis-com"}]
    g.put(
        f"/container{p}/locations/europe-north1/clusters/europe-north1-management",
        {
            "name": "europe-north1-management",
            "location": "europe-north1",
            "network": owned,
            "resourceLabels": {"krops-environment": "gcp"},
        },
    )
    g.put(
        f"/container{p}/locations/europe-north1/clusters/team-gke",
        {"name": "team-gke", "location": "europe-north1", "network": foreign, "resourceLabels": {}},
    )
    g.put(
        f"/sqladmin{p}/instances/krops-db",
        {
            "name": "krops-db",
            "settings": {
                "deletionProtectionEnabled": True,
                "userLabels": {"krops-environment": "gcp"},
                "ipConfiguration": {"privateNetwork": f"projects/p1/global/networks/{owned}"},
            },
        },
    )
    # decoys inside the owned VPC: unlabelled, or labelled for another environment (issue 9)
    g.put(
        f"/sqladmin{p}/instances/team-db-in-vpc",
        {
            "name": "team-db-in-vpc",
            "settings": {
                "deletionProtectionEnabled": True,
                "userLabels": {},
                "ipConfiguration": {"privateNetwork": f"projects/p1/global/networks/{owned}"},
            },
        },
    )
    g.put(
        f"/container{p}/locations/europe-north1/clusters/other-env-gke",
        {
            "name": "other-env-gke",
            "location": "europe-north1",
            "network": owned,
            "resourceLabels": {"krops-environment": "gcp-staging"},
        },
    )
    g.put(
        f"/container{p}/locations/europe-north1/clusters/team-gke-in-vpc",
        {"name": "team-gke-in-vpc", "location": "europe-north1", "network": owned, "resourceLabels": {}},
    )
    g.put(
        f"/sqladmin{p}/instances/team-db",
        {"name": "team-db", "settings": {"userLabels": {"krops-environment": "aws"}}},
    )
    g.put("/storage/b/krops-p1-data", {"name": "krops-p1-data", "labels": {"krops-environment": "gcp"}})
    g.bucket_objects["krops-p1-data"] = [("state/a.json", 1), ("state/a.json", 2)]
    g.put("/storage/b/team-bucket", {"name": "team-bucket", "labels": {}})
    g.put(
        f"/compute{p}/global/addresses/krops-psa",
        {"name": "krops-psa", "purpose": "VPC_PEERING", "network": g.net_url(owned)},
    )
    g.put(
        f"/compute{p}/global/addresses/team-psa",
        {"name": "team-psa", "purpose": "VPC_PEERING", "network": g.net_url(foreign)},
    )
    g.put(f"/compute{p}/global/firewalls/allow-internal", {"name": "allow-internal", "network": g.net_url(owned)})
    g.put(f"/compute{p}/global/firewalls/team-ssh", {"name": "team-ssh", "network": g.net_url(foreign)})
    g.put(
        f"/compute{p}/regions/europe-north1/routers/krops-nat",
        {
            "name": "krops-nat",
            "region": "europe-north1",
            "network": g.net_url(owned),
            "selfLink": f"{g.url}/compute{p}/regions/europe-north1/routers/krops-nat",
        },
    )
    g.put(
        f"/compute{p}/regions/europe-north1/subnetworks/krops-nodes",
        {
            "name": "krops-nodes",
            "region": "europe-north1",
            "network": g.net_url(owned),
            "selfLink": f"{g.url}/compute{p}/regions/europe-north1/subnetworks/krops-nodes",
        },
    )
    g.put(
        f"/compute{p}/regions/europe-north1/subnetworks/team-subnet",
        {
            "name": "team-subnet",
            "region": "europe-north1",
            "network": g.net_url(foreign),
            "selfLink": f"{g.url}/compute{p}/regions/europe-north1/subnetworks/team-subnet",
        },
    )


def gcp_toml(tmp_path, unprotect=("krops-db",)):
    """The repository's bootstrap.toml, with teardown.disable-deletion-protection for the gcp environment."""
    text = (REPO / "bootstrap.toml").read_text()
    line = 'networks = ["europe-north1-management", "europe-north1-workload"]\n'
    assert line in text
    path = tmp_path / "bootstrap.toml"
    path.write_text(text.replace(line, line + f"disable-deletion-protection = {json.dumps(list(unprotect))}\n"))
    return str(path)


def gcp_args(g, **extra):
    args = {
        "environment": "gcp",
        "config_file": str(REPO / "bootstrap.toml"),
        "project": "p1",
        "access_token": "gcp-token",
        "base_url": g.url,
        "poll_interval": 0,
        "wait_timeout": 10,
    }
    args.update(extra)
    return args


def test_gcp_deletes_only_owned_resources_in_dependency_order(google, run_module, tmp_path):
    gcp_world(google)
    toml = gcp_toml(tmp_path)
    planned = run_module(
        gcp_teardown,
        gcp_args(google, networks=["europe-north1-management", "default"], config_file=toml),
        check_mode=True,
    )
    assert not planned.failed, planned
    assert not google.writes()
    assert [(r["type"], r["name"]) for r in planned["results"]] == [
        ("gke-cluster", "europe-north1-management"),
        ("cloudsql-instance", "krops-db"),
        ("bucket", "krops-p1-data"),
        ("vpc-peering", "servicenetworking-googleapis-com"),
        ("private-services-range", "krops-psa"),
        ("firewall-rule", "allow-internal"),
        ("router", "krops-nat"),
        ("subnetwork", "krops-nodes"),
        ("network", "europe-north1-management"),
    ]
    assert planned["not_owned"] == [
        {"type": "network", "name": "default", "reason": "the default VPC is never deleted"},
        {
            "type": "gke-cluster",
            "name": "other-env-gke",
            "reason": "labelled krops-environment=gcp-staging (another environment)",
        },
        {
            "type": "gke-cluster",
            "name": "team-gke-in-vpc",
            "reason": "in owned VPC europe-north1-management but without "
            "the label krops-environment=gcp: not proven krops'",
        },
        {
            "type": "cloudsql-instance",
            "name": "team-db",
            "reason": "labelled krops-environment=aws (another environment)",
        },
        {
            "type": "cloudsql-instance",
            "name": "team-db-in-vpc",
            "reason": "in owned VPC europe-north1-management but "
            "without the label krops-environment=gcp: "
            "not proven krops'",
        },
    ]
    result = run_module(gcp_teardown, gcp_args(google, config_file=toml))
    assert not result.failed, result
    p = "/projects/p1"
    assert google.writes() == [
        ("DELETE", f"/container{p}/locations/europe-north1/clusters/europe-north1-management"),
        ("PATCH", f"/sqladmin{p}/instances/krops-db"),
        ("DELETE", f"/sqladmin{p}/instances/krops-db"),
        ("DELETE", "/storage/b/krops-p1-data/o/state%2Fa.json"),
        ("DELETE", "/storage/b/krops-p1-data/o/state%2Fa.json"),
        ("DELETE", "/storage/b/krops-p1-data"),
        ("POST", f"/compute{p}/global/networks/europe-north1-management/removePeering"),
        ("DELETE", f"/compute{p}/global/addresses/krops-psa"),
        ("DELETE", f"/compute{p}/global/firewalls/allow-internal"),
        ("DELETE", f"/compute{p}/regions/europe-north1/routers/krops-nat"),
        ("DELETE", f"/compute{p}/regions/europe-north1/subnetworks/krops-nodes"),
        ("DELETE", f"/compute{p}/global/networks/europe-north1-management"),
        ("DELETE", f"/compute{p}/global/networks/europe-north1-workload"),
    ]
    assert all(auth == "Bearer gcp-token" for dummy, dummy2, auth in google.calls)
    left = sorted(google.res)
    assert left == sorted(
        [
            f"/compute{p}/global/networks/team-vpc",
            f"/compute{p}/global/networks/default",
            f"/container{p}/locations/europe-north1/clusters/team-gke",
            f"/sqladmin{p}/instances/team-db",
            f"/sqladmin{p}/instances/team-db-in-vpc",
            f"/container{p}/locations/europe-north1/clusters/other-env-gke",
            f"/container{p}/locations/europe-north1/clusters/team-gke-in-vpc",
            "/storage/b/team-bucket",
            f"/compute{p}/global/addresses/team-psa",
            f"/compute{p}/global/firewalls/team-ssh",
            f"/compute{p}/regions/europe-north1/subnetworks/team-subnet",
        ]
    )
    again = run_module(gcp_teardown, gcp_args(google, config_file=toml))
    assert again["changed"] is False and again["results"] == []
    assert google.res[f"/sqladmin{p}/instances/team-db-in-vpc"]["settings"]["deletionProtectionEnabled"] is True


def test_gcp_never_switches_off_a_deletion_protection_bootstrap_toml_does_not_name(google, run_module, tmp_path):
    gcp_world(google)
    result = run_module(gcp_teardown, gcp_args(google, config_file=gcp_toml(tmp_path, unprotect=())))
    assert result.failed
    assert not [w for w in google.writes() if w[0] == "PATCH"]
    [failed] = [r for r in result["results"] if r["outcome"] == "failed"]
    assert failed["name"] == "krops-db"
    assert failed["error"] == (
        "Cloud SQL instance krops-db has deletion protection on; krops switches it off only when "
        "bootstrap.toml lists it in teardown.disable-deletion-protection"
    )
    assert "/sqladmin/projects/p1/instances/krops-db" in google.res


def test_gcp_stage_failure_stops_before_the_vpc(google, run_module, tmp_path):
    gcp_world(google)
    # a foreign rule in our VPC we cannot delete: the stage fails and the VPC is not attempted
    google.put(
        "/compute/projects/p1/global/firewalls/locked",
        {
            "name": "locked",
            "network": google.net_url("europe-north1-management"),
            "settings": {"deletionProtectionEnabled": True},
        },
    )
    result = run_module(gcp_teardown, gcp_args(google, config_file=gcp_toml(tmp_path)))
    assert result.failed
    assert result["stopped_at"] == "firewalls-and-routers"
    assert result["msg"] == (
        "GCP resources of project p1 left behind at stage firewalls-and-routers: firewall-rule/locked; "
        "see results for the reason of each, then run the teardown again"
    )
    assert not [w for w in google.writes() if "/global/networks/europe-north1-management" in w[1] and w[0] == "DELETE"]
    failed = [r for r in result["results"] if r["outcome"] == "failed"]
    assert (
        failed[0]["name"] == "locked" and "answered 400: The instance is protected from deletion" in failed[0]["error"]
    )


def test_azure_service_principal_login_keeps_the_secret_out_of_urls(arm, run_module, monkeypatch):
    arm.add(rg("swedencentral-workload"), tags={"krops-environment": "azure"})
    for key, value in {"AZURE_CLIENT_ID": "app-1", "AZURE_SECRET": "s3cret", "AZURE_TENANT": "tenant-1"}.items():
        monkeypatch.setenv(key, value)
    args = azure_args(arm, login_endpoint=arm.url, endpoint=arm.url)
    del args["access_token"]
    result = run_module(azure_teardown, args)
    assert not result.failed, result
    assert [r["name"] for r in result["results"]] == ["swedencentral-workload"]
    assert arm.calls[0][:2] == ("POST", "/tenant-1/oauth2/v2.0/token")
    assert {auth for dummy, dummy2, auth in arm.calls[1:]} == {"Bearer from-login"}
    assert not [c for c in arm.calls if "s3cret" in c[1]]
    monkeypatch.setenv("AZURE_SECRET", "wrong")
    failed = run_module(azure_teardown, args)
    assert failed.failed
    assert failed["msg"] == "Azure login for client app-1 in tenant tenant-1 failed (401): invalid_client: bad secret"


def test_azure_ownership_another_environments_tag_vetoes_a_capz_tag():
    from ansible_collections.krops.platform.plugins.module_utils import cloud_teardown

    capz = {"sigs.k8s.io_cluster-api-provider-azure_cluster_swedencentral-workload": "owned"}
    assert cloud_teardown.azure_owned({"tags": capz}, "azure", ["swedencentral-workload"])
    assert (
        cloud_teardown.azure_owned(
            {"tags": dict(capz, **{"krops-environment": "azure-staging"})}, "azure", ["swedencentral-workload"]
        )
        is None
    )
    assert cloud_teardown.azure_owned({"tags": {"krops-environment": "azure"}}, "azure", []) == (
        "tag krops-environment=azure"
    )
    # a name alone, or a CAPZ tag for a cluster that merely shares a prefix, proves nothing
    assert (
        cloud_teardown.azure_owned({"name": "swedencentral-workload", "tags": {}}, "azure", ["swedencentral-workload"])
        is None
    )
    assert (
        cloud_teardown.azure_owned(
            {"tags": {"sigs.k8s.io_cluster-api-provider-azure_cluster_swedencentral-workload-2": "owned"}},
            "azure",
            ["swedencentral-workload"],
        )
        is None
    )
