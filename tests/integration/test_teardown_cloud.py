"""azure_teardown and gcp_teardown against local HTTP doubles of ARM and the Google APIs.

No emulator exists for either cloud here, so each double is a small stateful server written for
these tests: it keeps resources, enforces the dependencies the real APIs enforce (a VPC in use,
a non-empty bucket, deletion protection), and records every call so the tests can assert the
order and that nothing outside the ownership filter was touched.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
from urllib.parse import parse_qs

import pytest

from ansible_collections.krops.platform.plugins.modules import azure_teardown, gcp_teardown
from tests.substrate.arm_double import ArmDouble
from tests.substrate.fixtures import REPO
from tests.substrate.google_double import GoogleDouble
from tests.substrate.http_double import HttpDouble, Reply

SUB = "00000000-0000-0000-0000-000000000001"
PLANTED = "planted-Secret-4711"


class Double(HttpDouble):
    """An HTTP double dispatching to handle(method, path, query, body) -> (status, body)."""

    def __init__(self, tls=None):
        self.calls = []
        super().__init__(tls)

    def respond(self, request):
        is_json = (request.headers.get("Content-Type") or "").startswith("application/json")
        body = (request.json() if is_json else request.raw.decode()) if request.raw else None
        self.last_headers = dict(request.headers.items())
        self.calls.append((request.method, request.path, request.authorization))
        return Reply(*self.handle(request.method, request.path, request.query, body))

    def writes(self):
        return [(m, p) for m, p, dummy in self.calls if m != "GET"]


# --- Azure Resource Manager double ---------------------------------------------------------


class Arm(ArmDouble):
    """The ARM double (tests/substrate/arm_double.py), optionally quoting the credential back in its errors."""

    def __init__(self):
        super().__init__(token={"arm-token", "from-login", "from-managed-identity", PLANTED}, subscription=SUB)
        self.echo_auth = False  # refuse writes, quoting the Authorization header back

    def handle(self, method, path, query, body, auth):
        if method == "DELETE" and self.echo_auth:
            return 403, {"error": {"code": "AuthorizationFailed", "message": f"denied for {auth}"}}, {}
        return super().handle(method, path, query, body, auth)


class Login(Double):
    """Microsoft Entra for one tenant over TLS: OpenID discovery and the client-credentials grant.

    Like the real token endpoint it rejects a wrong secret (401 invalid_client) and a scope other than
    the resource's /.default.
    """

    def __init__(self, tls, resource, secret="s3cret", client_id="app-1", tenant="tenant-1"):
        super().__init__(tls=tls)
        self.resource, self.secret, self.client_id, self.tenant = resource, secret, client_id, tenant
        self.assertion = None  # the federated token a workload identity presents

    def handle(self, method, path, query, body):
        base = f"{self.url}/{self.tenant}"
        if method == "GET" and path == f"/{self.tenant}/v2.0/.well-known/openid-configuration":
            return 200, {
                "issuer": f"{base}/v2.0",
                "token_endpoint": f"{base}/oauth2/v2.0/token",
                "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
            }
        if method == "POST" and path == f"/{self.tenant}/oauth2/v2.0/token":
            form = {k: v[0] for k, v in parse_qs(body or "").items()}
            if form.get("grant_type") != "client_credentials":
                return 400, {"error": "unsupported_grant_type", "error_description": "AADSTS70003: grant"}
            if form.get("client_id") != self.client_id:
                return 400, {"error": "unauthorized_client", "error_description": "AADSTS700016: unknown client"}
            if "client_assertion" in form:
                jwt_bearer = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
                if form.get("client_assertion_type") != jwt_bearer or form["client_assertion"] != self.assertion:
                    return 400, {
                        "error": "invalid_client",
                        "error_description": "AADSTS70021: No matching federated identity record found.",
                    }
            elif form.get("client_secret") != self.secret:
                return 401, {"error": "invalid_client", "error_description": "AADSTS7000215: Invalid client secret."}
            if form.get("scope") != f"{self.resource}/.default":
                return 400, {"error": "invalid_scope", "error_description": "AADSTS70011: scope"}
            return 200, {"access_token": "from-login", "token_type": "Bearer", "expires_in": 3599}
        return 404, {"error": "not_found", "error_description": path}


@pytest.fixture(scope="module")
def tls_files():
    """(cert, key) files for 127.0.0.1 that the SDKs trust through REQUESTS_CA_BUNDLE: the emulated API
    servers' self-signed certificate (strict_api.tls_material), made once per process."""
    from tests.substrate.strict_api import tls_material

    dummy, dummy2, folder = tls_material()
    return os.path.join(folder, "ca.crt"), os.path.join(folder, "server.key")


@pytest.fixture
def login(arm, tls_files, monkeypatch):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", tls_files[0])
    # the chain must never reach past the credentials under test (IMDS, the az CLI, the public cloud)
    monkeypatch.setenv("AZURE_TOKEN_CREDENTIALS", "EnvironmentCredential")
    for name in ("AZURE_AUTHORITY_HOST", "AZURE_FEDERATED_TOKEN_FILE", "AZURE_CLIENT_CERTIFICATE_PATH"):
        monkeypatch.delenv(name, raising=False)
    double = Login(tls_files, arm.url)
    yield double
    double.stop()


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
        ident + "/federatedIdentityCredentials/krops-kind-capz-manager",
        properties={"issuer": "https://kind.example/issuer", "subject": "system:serviceaccount:capz-system:capz"},
    )
    # a credential whose name only shares the hook's prefix: exact names decide, it stays
    arm.add(
        ident + "/federatedIdentityCredentials/krops-kind-capz-manager-old",
        properties={"issuer": "https://old.example/issuer", "subject": "system:serviceaccount:capz-system:capz"},
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
        ("federated-credential", "krops-kind-capz-manager"),
        ("arc-connected-cluster", "krops-kind-mgmt"),
        ("resource-group", "swedencentral-workload"),
        ("resource-group", "krops-identities"),
        ("resource-group", "swedencentral-management"),
    ]
    assert [n["name"] for n in planned["not_owned"]] == ["team-billing"]
    result = run_module(azure_teardown, args)
    assert not result.failed, result
    assert arm.writes() == [
        ("DELETE", ident + "/federatedIdentityCredentials/krops-kind-capz-manager"),
        ("DELETE", arc),
        ("DELETE", rg("swedencentral-workload")),
        ("DELETE", rg("krops-identities")),
        ("DELETE", rg("swedencentral-management")),
    ]
    assert all(auth == "Bearer arm-token" for dummy, dummy2, auth in arm.calls)
    assert arm.groups() == ["other-env", "team-billing"]
    assert arm.exists(rg("team-billing") + "/providers/Microsoft.Kubernetes/connectedClusters/their-arc")
    assert arm.exists(
        rg("team-billing")
        + "/providers/Microsoft.ManagedIdentity/userAssignedIdentities/billing/federatedIdentityCredentials/krops-kind-x"
    )
    again = run_module(azure_teardown, args)
    assert again["changed"] is False and again["results"] == []


def test_azure_default_groups_come_from_bootstrap_toml_and_leftovers_fail(arm, run_module):
    arm.add(rg("swedencentral-management"), tags={"krops-environment": "azure"})
    arm.add(rg("swedencentral-workload"), tags={})  # named, but not provably ours
    arm.slow[rg("swedencentral-management").lower()] = 10**6  # never finishes deleting
    result = run_module(azure_teardown, azure_args(arm, wait_timeout=0))
    assert result.failed
    assert result["msg"] == (
        "Azure resources of azure left behind: {}; see results for the reason of each, then run "
        "the teardown again".format(rg("swedencentral-management"))
    )
    assert result["not_owned"][0]["name"] == "swedencentral-workload"
    assert ("DELETE", rg("swedencentral-workload")) not in arm.writes()


def test_azure_an_operation_that_failed_on_a_resource_its_group_took_along_leaves_nothing(arm, run_module):
    """The Arc resource's delete ends Failed, but its group goes meanwhile (after the Arc operation ended):
    gone is gone, asked once every wait has ended, so nothing is left and the run succeeds."""
    arc, dummy = azure_world(arm)
    arm.fail[arc.lower()] = ("Conflict", "the resource group is being deleted")
    arm.slow[rg("krops-identities").lower()] = 3  # its group's deletion ends two polls after the Arc operation
    result = run_module(azure_teardown, azure_args(arm))
    assert not result.failed, result
    assert result["leftovers"] == [] and {r["outcome"] for r in result["results"]} == {"deleted"}
    assert not arm.exists(arc)


def test_azure_what_is_still_there_or_appeared_after_the_deletions_fails_the_run(arm, run_module, monkeypatch):
    """The final pass discovers again: a credential whose delete answered 200 but stays is failed (still present);
    an owned Arc resource that appeared meanwhile is a leftover, without a result entry of its own."""
    azure_world(arm)
    ident = rg("team-billing") + "/providers/Microsoft.ManagedIdentity/userAssignedIdentities/kept"
    arm.add(ident, tags={"krops-environment": "azure"})  # in a group that stays
    kept = ident + "/federatedIdentityCredentials/krops-kind-capz-manager"
    arm.add(kept, properties={"issuer": "https://kind.example/issuer"})
    late = rg("team-billing") + "/providers/Microsoft.Kubernetes/connectedClusters/late-arc"
    drop = arm._drop

    def sticky(low):
        if low != kept.lower():
            return drop(low)
        arm.add(late, tags={"krops-environment": "azure"})  # a controller made another one meanwhile
        return None

    monkeypatch.setattr(arm, "_drop", sticky)
    result = run_module(azure_teardown, azure_args(arm))
    assert result.failed
    assert ("DELETE", kept) in arm.writes() and arm.exists(kept) and arm.exists(late)
    assert [(r["id"], r["outcome"], r.get("error")) for r in result["results"] if r["outcome"] != "deleted"] == [
        (kept, "failed", "still present after the teardown")
    ]
    assert late not in [r["id"] for r in result["results"]]
    assert result["leftovers"] == [kept, late]
    assert result["msg"] == (
        f"Azure resources of azure left behind: {kept}, {late}; see results for the reason of each, then run "
        "the teardown again"
    )


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


# --- Google APIs (tests/substrate/google_double.py) -------------------------------------------

P = "/projects/p1"
MGMT_VPC, WORKLOAD_VPC, TEAM_VPC = "europe-north1-management", "europe-north1-workload", "team-vpc"


@pytest.fixture
def google():
    double = GoogleDouble(polls=2, page_size=2)
    yield double
    double.stop()


def gcp_world(g):
    """What the gcp tree leaves in a project, plus decoys: ours by label or exact name only."""
    # a VPC is ours only with proof: the krops label, or CAPG's description for a cluster of the environment
    g.add_network(MGMT_VPC, labels={"krops-environment": "gcp"})
    g.add_network(WORKLOAD_VPC, description=f"capg-cluster-{WORKLOAD_VPC}")
    for name in (TEAM_VPC, "europe-north1-workload-2", "default"):
        g.add_network(name)
    g.add_connection(WORKLOAD_VPC, ranges=["krops-psa"])
    g.add_compute("addresses", "krops-psa", WORKLOAD_VPC, purpose="VPC_PEERING", labels={"krops-environment": "gcp"})
    g.add_connection(TEAM_VPC, ranges=["team-psa"])
    g.add_compute("addresses", "team-psa", TEAM_VPC, purpose="VPC_PEERING")
    g.add_gke(MGMT_VPC, "europe-north1", MGMT_VPC)  # CAPG labels no GKE cluster: owned by its exact name
    g.add_gke(WORKLOAD_VPC, "europe-north1", WORKLOAD_VPC)
    g.add_gke("europe-north1-management-2", "europe-north1", TEAM_VPC)  # a lookalike name, not ours
    g.add_gke(WORKLOAD_VPC, "us-central1", TEAM_VPC, labels={"krops-environment": "gcp-staging"})
    g.add_sql("krops-db", WORKLOAD_VPC, labels={"krops-environment": "gcp"}, protected=True)
    g.add_sql("team-db", TEAM_VPC, protected=True)  # deletion protection, not named by bootstrap.toml
    g.add_sql("aws-db", None, labels={"krops-environment": "aws"})
    g.add_bucket(
        "krops-p1-data", labels={"krops-environment": "gcp"}, objects=[("state/a.json", 1), ("state/a.json", 2)]
    )
    g.add_bucket("team-bucket")
    g.add_compute("firewalls", "allow-internal", MGMT_VPC)
    g.add_compute("firewalls", "team-ssh", TEAM_VPC)
    for vpc in (MGMT_VPC, WORKLOAD_VPC):
        g.add_compute("routers", f"{vpc}-nat", vpc, region="europe-north1")
        g.add_compute("subnetworks", f"{vpc}-nodes", vpc, region="europe-north1")
    g.add_compute("subnetworks", "team-subnet", TEAM_VPC, region="us-central1")
    g.add_compute("subnetworks", "lookalike-nodes", "europe-north1-workload-2", region="europe-north1")


def gcp_decoys(g):
    return {("compute", f"global/networks/{n}") for n in (TEAM_VPC, "europe-north1-workload-2", "default")} | {
        ("compute", "global/addresses/team-psa"),
        ("compute", "global/firewalls/team-ssh"),
        ("compute", "regions/us-central1/subnetworks/team-subnet"),
        ("compute", "regions/europe-north1/subnetworks/lookalike-nodes"),
        ("container", "locations/europe-north1/clusters/europe-north1-management-2"),
        ("container", f"locations/us-central1/clusters/{WORKLOAD_VPC}"),
        ("sqladmin", "team-db"),
        ("sqladmin", "aws-db"),
        ("storage", "team-bucket"),
        ("servicenetworking", f"global/networks/{TEAM_VPC}"),
    }


def gcp_toml(tmp_path, unprotect=("krops-db",)):
    """The repository's bootstrap.toml with teardown.disable-deletion-protection replaced for the gcp environment."""
    text = (REPO / "bootstrap.toml").read_text()
    line = re.search(r"(?m)^disable-deletion-protection = \[.*\]\n", text)
    assert line, "bootstrap.toml gcp teardown names no disable-deletion-protection"
    path = tmp_path / "bootstrap.toml"
    path.write_text(text.replace(line.group(0), f"disable-deletion-protection = {json.dumps(list(unprotect))}\n"))
    if not (tmp_path / "mgmt" / "gcp").exists():  # the tree gcp_teardown checks the IAM names against
        shutil.copytree(REPO / "mgmt" / "gcp", tmp_path / "mgmt" / "gcp")
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


GCP_PLAN = [
    ("cloudsql-instance", "krops-db"),
    ("private-services-connection", "servicenetworking-googleapis-com"),
    ("private-services-range", "krops-psa"),
    ("gke-cluster", MGMT_VPC),
    ("gke-cluster", WORKLOAD_VPC),
    ("bucket", "krops-p1-data"),
    ("firewall-rule", "allow-internal"),
    ("router", f"{MGMT_VPC}-nat"),
    ("router", f"{WORKLOAD_VPC}-nat"),
    ("subnetwork", f"{MGMT_VPC}-nodes"),
    ("subnetwork", f"{WORKLOAD_VPC}-nodes"),
    ("network", MGMT_VPC),
    ("network", WORKLOAD_VPC),
]


def test_gcp_deletes_only_owned_resources_in_dependency_order(google, run_module, tmp_path):
    gcp_world(google)
    before = google.inventory()
    toml = gcp_toml(tmp_path)
    planned = run_module(
        gcp_teardown, gcp_args(google, config_file=toml, networks=[MGMT_VPC, WORKLOAD_VPC, "default"]), check_mode=True
    )
    assert not planned.failed, planned
    assert not google.writes()
    assert google.inventory() == before
    assert [(r["type"], r["name"]) for r in planned["results"]] == GCP_PLAN
    assert {r["outcome"] for r in planned["results"]} == {"planned"}
    gke = {r["name"]: r["reason"] for r in planned["results"] if r["type"] == "gke-cluster"}
    assert gke == {
        MGMT_VPC: f"named in bootstrap.toml, in owned VPC {MGMT_VPC}",
        WORKLOAD_VPC: f"named in bootstrap.toml, in owned VPC {WORKLOAD_VPC}",
    }
    assert planned["not_owned"] == [
        {"type": "network", "name": "default", "reason": "the default VPC is never deleted"},
        {
            "type": "cloudsql-instance",
            "name": "aws-db",
            "reason": "labelled krops-environment=aws (another environment)",
        },
        {
            "type": "gke-cluster",
            "name": WORKLOAD_VPC,
            "reason": "labelled krops-environment=gcp-staging (another environment)",
        },
    ]
    result = run_module(gcp_teardown, gcp_args(google, config_file=toml))
    assert not result.failed, result
    assert {r["outcome"] for r in result["results"]} == {"deleted"}
    p = "/projects/p1"
    sn = "/servicenetworking/services/servicenetworking.googleapis.com/connections"
    assert google.writes() == [
        ("PATCH", f"/sqladmin{p}/instances/krops-db"),
        ("DELETE", f"/sqladmin{p}/instances/krops-db"),
        ("POST", f"{sn}/servicenetworking-googleapis-com:deleteConnection"),
        ("DELETE", f"/compute{p}/global/addresses/krops-psa"),
        ("DELETE", f"/container{p}/locations/europe-north1/clusters/{MGMT_VPC}"),
        ("DELETE", f"/container{p}/locations/europe-north1/clusters/{WORKLOAD_VPC}"),
        ("DELETE", "/storage/b/krops-p1-data/o/state%2Fa.json"),
        ("DELETE", "/storage/b/krops-p1-data/o/state%2Fa.json"),
        ("DELETE", "/storage/b/krops-p1-data"),
        ("DELETE", f"/compute{p}/global/firewalls/allow-internal"),
        ("DELETE", f"/compute{p}/regions/europe-north1/routers/{MGMT_VPC}-nat"),
        ("DELETE", f"/compute{p}/regions/europe-north1/routers/{WORKLOAD_VPC}-nat"),
        ("DELETE", f"/compute{p}/regions/europe-north1/subnetworks/{MGMT_VPC}-nodes"),
        ("DELETE", f"/compute{p}/regions/europe-north1/subnetworks/{WORKLOAD_VPC}-nodes"),
        ("DELETE", f"/compute{p}/global/networks/{MGMT_VPC}"),
        ("DELETE", f"/compute{p}/global/networks/{WORKLOAD_VPC}"),
    ]
    # the connection was named by project number; every operation was polled until DONE
    [conn] = [r for r in google.requests if r[1].endswith(":deleteConnection")]
    assert conn[3] == {"consumerNetwork": f"projects/{google.number}/global/networks/{WORKLOAD_VPC}"}
    assert all(op["left"] == 0 for op in google.operations.values())
    assert all(auth == "Bearer gcp-token" for dummy, dummy2, auth in google.calls)
    assert google.inventory() == gcp_decoys(google)
    assert google.sql["team-db"]["settings"]["deletionProtectionEnabled"] is True
    again = run_module(gcp_teardown, gcp_args(google, config_file=toml))
    assert again["changed"] is False and again["results"] == []


def test_gcp_decoys_inside_our_vpc_survive_and_the_vpc_they_hold_stays_whole(google, run_module, tmp_path):
    """Unlabelled or other environments' resources in an owned VPC are never touched, and neither is anything
    else of that VPC (no firewall rule, router, subnet, peering or cluster goes first): the run fails naming it."""
    gcp_world(google)
    google.add_gke("other-env-gke", "europe-north1", MGMT_VPC, labels={"krops-environment": "gcp-staging"})
    google.add_gke("team-gke-in-vpc", "europe-north1", MGMT_VPC)
    google.add_compute("firewalls", "labelled-other", MGMT_VPC, labels={"krops-environment": "gcp-staging"})
    result = run_module(gcp_teardown, gcp_args(google, config_file=gcp_toml(tmp_path)))
    assert result.failed
    assert result["stopped_at"] == "networks"
    assert result["leftovers"] == [f"network/{MGMT_VPC}"]
    assert result["held_networks"] == [MGMT_VPC]
    assert not [r for r in result["results"] if r["outcome"] == "failed"]
    assert not [w for w in google.writes() if MGMT_VPC in w[1]]
    held = f"VPC {MGMT_VPC} holds what krops does not own (firewall-rule/labelled-other, gke-cluster/other-env-gke, "
    held += "gke-cluster/team-gke-in-vpc): the VPC and everything in it stay"
    assert [(n["type"], n["name"], n["reason"]) for n in result["not_owned"] if n["type"] != "cloudsql-instance"] == [
        ("gke-cluster", "other-env-gke", "labelled krops-environment=gcp-staging (another environment)"),
        (
            "gke-cluster",
            "team-gke-in-vpc",
            f"in owned VPC {MGMT_VPC} but without the label krops-environment=gcp: not proven krops'",
        ),
        ("gke-cluster", WORKLOAD_VPC, "labelled krops-environment=gcp-staging (another environment)"),
        ("firewall-rule", "labelled-other", "labelled krops-environment=gcp-staging (another environment)"),
        ("gke-cluster", MGMT_VPC, held),
        ("firewall-rule", "allow-internal", held),
        ("router", f"{MGMT_VPC}-nat", held),
        ("subnetwork", f"{MGMT_VPC}-nodes", held),
        ("network", MGMT_VPC, held),
    ]
    assert google.inventory() == gcp_decoys(google) | {
        ("compute", f"global/networks/{MGMT_VPC}"),
        ("compute", "global/firewalls/labelled-other"),
        ("compute", "global/firewalls/allow-internal"),
        ("compute", f"regions/europe-north1/routers/{MGMT_VPC}-nat"),
        ("compute", f"regions/europe-north1/subnetworks/{MGMT_VPC}-nodes"),
        ("container", f"locations/europe-north1/clusters/{MGMT_VPC}"),
        ("container", "locations/europe-north1/clusters/other-env-gke"),
        ("container", "locations/europe-north1/clusters/team-gke-in-vpc"),
    }


def test_gcp_never_switches_off_a_deletion_protection_bootstrap_toml_does_not_name(google, run_module, tmp_path):
    gcp_world(google)
    result = run_module(gcp_teardown, gcp_args(google, config_file=gcp_toml(tmp_path, unprotect=())))
    assert result.failed
    assert result["stopped_at"] == "databases"
    assert not [w for w in google.writes() if w[0] in ("PATCH", "DELETE", "POST")]
    [failed] = [r for r in result["results"] if r["outcome"] == "failed"]
    assert failed["name"] == "krops-db"
    assert failed["error"] == (
        "Cloud SQL instance krops-db has deletion protection on; krops switches it off only when "
        "bootstrap.toml lists it in teardown.disable-deletion-protection"
    )
    assert "krops-db" in google.sql


def test_gcp_a_foreign_database_in_our_vpc_leaves_the_vpc_whole(google, run_module, tmp_path):
    """A Cloud SQL instance krops does not own in an owned VPC: nothing of that VPC is touched (not its private
    services access, range, peering or subnet); krops' own labelled database still goes; the run fails naming the VPC."""
    gcp_world(google)
    google.add_sql("team-db-in-our-vpc", WORKLOAD_VPC, protected=True)
    result = run_module(gcp_teardown, gcp_args(google, config_file=gcp_toml(tmp_path)))
    assert result.failed
    assert result["msg"] == (
        f"GCP resources of project p1 left behind at stage networks: network/{WORKLOAD_VPC}; see results for the "
        "reason of each, then run the teardown again"
    )
    assert {
        "type": "cloudsql-instance",
        "name": "team-db-in-our-vpc",
        "reason": (f"in owned VPC {WORKLOAD_VPC} but without the label krops-environment=gcp: not proven krops'"),
        "network": WORKLOAD_VPC,
    } in result["not_owned"]
    assert (
        "team-db-in-our-vpc" in google.sql and google.sql["team-db-in-our-vpc"]["settings"]["deletionProtectionEnabled"]
    )
    assert "krops-db" not in google.sql  # labelled for this environment: its label proves it, not the VPC
    assert not [w for w in google.writes() if WORKLOAD_VPC in w[1] or ":deleteConnection" in w[1]]
    assert google.compute[f"global/networks/{WORKLOAD_VPC}"]["peerings"]
    assert ("compute", "global/addresses/krops-psa") in google.inventory()


def test_gcp_a_vpc_named_in_bootstrap_toml_without_proof_is_never_touched(google, run_module, tmp_path):
    """A team's VPC that happens to carry a network name of bootstrap.toml (no krops label, no CAPG description for
    a cluster of the environment): neither it nor anything in it is deleted, and it is listed with the reason."""
    google.add_network(MGMT_VPC, description="capg-cluster-europe-north1-management-2")  # another cluster's
    google.add_compute("firewalls", "team-ssh", MGMT_VPC)
    google.add_compute("subnetworks", "team-subnet", MGMT_VPC, region="europe-north1")
    google.add_network(WORKLOAD_VPC, labels={"krops-environment": "gcp-staging"})
    google.add_compute("routers", "team-nat", WORKLOAD_VPC, region="europe-north1")
    before = google.inventory()
    result = run_module(gcp_teardown, gcp_args(google, config_file=gcp_toml(tmp_path)))
    assert not result.failed, result
    assert google.inventory() == before and not google.writes()
    reason = (
        "named in bootstrap.toml but carries neither the label krops-environment=gcp nor CAPG's description "
        "capg-cluster-<cluster> for a cluster of the environment: a name alone proves nothing"
    )
    assert [(n["type"], n["name"], n["reason"]) for n in result["not_owned"] if n["type"] == "network"] == [
        ("network", MGMT_VPC, reason),
        ("network", WORKLOAD_VPC, reason),
    ]


def test_gcp_phase_before_clusters_removes_the_database_and_private_services_access_only(google, run_module, tmp_path):
    gcp_world(google)
    result = run_module(gcp_teardown, gcp_args(google, config_file=gcp_toml(tmp_path), phase="before-clusters"))
    assert not result.failed, result
    assert [(r["type"], r["name"], r["outcome"]) for r in result["results"]] == [
        (t, n, "deleted") for t, n in GCP_PLAN[:3]
    ]
    assert "krops-db" not in google.sql and not google.compute[f"global/networks/{WORKLOAD_VPC}"]["peerings"]
    # now CAPG can delete the workload VPC: nothing holds it but its own subnet and router
    assert f"global/networks/{WORKLOAD_VPC}" in google.compute
    assert f"locations/europe-north1/clusters/{WORKLOAD_VPC}" in google.gke


def test_gcp_an_operation_that_never_finishes_fails_the_stage(google, run_module, tmp_path):
    gcp_world(google)
    google.polls = 10_000
    result = run_module(gcp_teardown, gcp_args(google, config_file=gcp_toml(tmp_path, unprotect=()), wait_timeout=0))
    assert result.failed and result["stopped_at"] == "databases"
    google.sql["krops-db"]["settings"]["deletionProtectionEnabled"] = False
    result = run_module(gcp_teardown, gcp_args(google, config_file=gcp_toml(tmp_path), wait_timeout=0))
    assert result.failed and result["stopped_at"] == "databases"
    [entry] = result["results"]
    assert entry["outcome"] == "failed" and entry["error"] == "still deleting after 0s (wait_timeout)"


def test_gcp_what_is_still_there_or_appeared_after_the_stages_fails_the_run(google, run_module, tmp_path, monkeypatch):
    """After the last stage discovery runs again: a bucket recreated after its delete is left (still present), a
    labelled bucket that appeared meanwhile is left too, with its own result entry; stopped_at names their stage."""
    gcp_world(google)
    storage = google._storage

    def recreating(method, path, query, body):
        answer = storage(method, path, query, body)
        if method == "DELETE" and path == "/storage/b/krops-p1-data":  # a controller puts it back, and one more
            google.add_bucket("krops-p1-data", labels={"krops-environment": "gcp"})
            google.add_bucket("krops-late", labels={"krops-environment": "gcp"})
        return answer

    monkeypatch.setattr(google, "_storage", recreating)
    result = run_module(gcp_teardown, gcp_args(google, config_file=gcp_toml(tmp_path)))
    assert result.failed
    assert result["stopped_at"] == "buckets"
    assert result["leftovers"] == ["bucket/krops-late", "bucket/krops-p1-data"]  # in the order discovery lists them
    assert [(r["name"], r["outcome"], r.get("error")) for r in result["results"] if r["outcome"] != "deleted"] == [
        ("krops-p1-data", "left", "still present after the teardown"),
        ("krops-late", "left", "appeared during the teardown"),
    ]
    assert result["msg"] == (
        "GCP resources of project p1 left behind at stage buckets: bucket/krops-late, bucket/krops-p1-data; see "
        "results for the reason of each, then run the teardown again"
    )


def test_gcp_unauthenticated_calls_are_refused_by_the_double(google, run_module, tmp_path):
    gcp_world(google)
    result = run_module(gcp_teardown, gcp_args(google, access_token="wrong"))
    assert result.failed
    assert result["msg"].endswith(
        "answered 401: Request had invalid authentication credentials. Expected OAuth 2 access token"
    )
    assert not google.writes()


SA = "krops-europe-north1-workload@p1.iam.gserviceaccount.com"  # bootstrap.toml teardown.service-accounts


def gcp_iam_world(g):
    """The IAM side of a gcp run (the tree's account and grants, providers kind and mgmt in pool krops) with
    decoys: an account sharing the prefix, other members of the same roles, a provider bootstrap.toml does not name
    in pool krops, one named alike in another pool."""
    lookalike = "krops-europe-north1-workload-2@p1.iam.gserviceaccount.com"
    for email in (SA, lookalike):
        g.service_accounts[email] = {"email": email, "uniqueId": str(abs(hash(email)))}
    g.project_policy["bindings"] = [
        {"role": "roles/cloudsql.client", "members": [f"serviceAccount:{SA}", "user:dba@example.com"]},
        {"role": "roles/cloudsql.instanceUser", "members": [f"serviceAccount:{SA}"]},
        {"role": "roles/editor", "members": [f"serviceAccount:{lookalike}", "group:team@example.com"]},
    ]
    for pool in ("krops", "team"):
        g.pools[pool] = {"name": g._pool_name(pool), "state": "ACTIVE"}
    for pool, provider in (("krops", "kind"), ("krops", "mgmt"), ("krops", "ci-01"), ("team", "kind")):
        g.providers[(pool, provider)] = {"name": f"{g._pool_name(pool)}/providers/{provider}", "state": "ACTIVE"}


GCP_IAM_PLAN = [
    ("iam-grant", f"roles/cloudsql.client serviceAccount:{SA}"),
    ("iam-grant", f"roles/cloudsql.instanceUser serviceAccount:{SA}"),
    ("service-account", SA),
    ("workload-identity-provider", "krops/kind"),
    ("workload-identity-provider", "krops/mgmt"),
]


def test_gcp_deletes_the_named_service_accounts_their_grants_and_providers_and_nothing_else(
    google, run_module, tmp_path
):
    gcp_iam_world(google)
    before = google.inventory_objects()
    planned = run_module(gcp_teardown, gcp_args(google, networks=[]), check_mode=True)
    assert not planned.failed and planned["changed"], planned
    assert [(r["type"], r["name"], r["outcome"]) for r in planned["results"]] == [
        t + ("planned",) for t in GCP_IAM_PLAN
    ]
    assert not google.writes() and google.inventory_objects() == before
    # another writer changes the policy after the discovery's read and after the first grant's read: that
    # grant's write (stale etag) answers 409 ABORTED, and the teardown re-reads and retries
    google.policy_races = 2
    result = run_module(gcp_teardown, gcp_args(google, networks=[]))
    assert not result.failed, result.get("msg")
    assert [(r["type"], r["name"], r["outcome"]) for r in result["results"]] == [t + ("deleted",) for t in GCP_IAM_PLAN]
    assert SA not in google.service_accounts
    assert sorted(google.service_accounts) == ["krops-europe-north1-workload-2@p1.iam.gserviceaccount.com"]
    members = {b["role"]: b["members"] for b in google.project_policy["bindings"]}
    assert members["roles/cloudsql.client"] == ["user:dba@example.com"] and "roles/cloudsql.instanceUser" not in members
    assert members["roles/editor"] == [
        "serviceAccount:krops-europe-north1-workload-2@p1.iam.gserviceaccount.com",
        "group:team@example.com",
    ]
    assert len(members["roles/viewer"]) == 2  # the concurrent writer's members survived the retry
    assert {k: v["state"] for k, v in google.providers.items()} == {
        ("krops", "kind"): "DELETED",  # soft-deleted (undeletable for 30 days), as the API does
        ("krops", "mgmt"): "DELETED",
        ("krops", "ci-01"): "ACTIVE",
        ("team", "kind"): "ACTIVE",
    }
    assert google.pools["krops"]["state"] == "ACTIVE"  # the pool is a prerequisite and stays
    sets = [p for m, p in google.writes() if p.endswith(":setIamPolicy")]
    assert len(sets) == 3  # one refused with 409 (stale etag), then one per grant
    again = run_module(gcp_teardown, gcp_args(google, networks=[]))
    assert not again.failed and not again["changed"] and again["results"] == []


def test_gcp_a_named_account_that_cannot_be_deleted_fails_the_run_naming_it(google, run_module, tmp_path):
    gcp_iam_world(google)
    google.refuse_sa_delete.add(SA)
    result = run_module(gcp_teardown, gcp_args(google, networks=[]))
    assert result.failed and result["stopped_at"] == "service-accounts"
    assert result["leftovers"] == [f"service-account/{SA}"]
    assert result["msg"] == (
        f"GCP resources of project p1 left behind at stage service-accounts: service-account/{SA}; see results for "
        "the reason of each, then run the teardown again"
    )
    [entry] = [r for r in result["results"] if r["type"] == "service-account"]
    assert entry["error"].endswith(
        "answered 403: Permission 'iam.serviceAccounts.delete' denied on resource (or it may not exist)."
    )
    assert SA in google.service_accounts and google.providers[("krops", "kind")]["state"] == "ACTIVE"


def test_gcp_iam_names_given_as_options_are_checked(run_module):
    result = run_module(gcp_teardown, {"environment": "gcp", "project": "p1", "service_accounts": ["a@b.com"]})
    assert result.failed and result["msg"] == (
        "option service_accounts[0]: expected a GCP service account id (the part before '@'): 6 to 30 lowercase "
        "letters, digits and '-', starting with a letter and not ending with '-' (IAM projects.serviceAccounts.create "
        "accountId rule), got 'a@b.com'"
    )
    result = run_module(gcp_teardown, {"environment": "gcp", "project": "p1", "workload_identity_providers": ["kind"]})
    assert result.failed and result["msg"] == (
        "option workload_identity_providers[0]: expected <pool>/<provider>, e.g. krops/kind: two workload identity "
        "IDs of 4 to 32 lowercase letters, digits and '-', not starting with 'gcp-' (IAM workloadIdentityPools and "
        "providers ID rule), got 'kind'"
    )


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("service-accounts", '["krops@p1.iam.gserviceaccount.com"]', "a GCP service account id"),
        ("service-accounts", '["ab"]', "a GCP service account id"),
        ("workload-identity-providers", '["kind"]', "<pool>/<provider>"),
        ("workload-identity-providers", '["projects/p1/locations/global/workloadIdentityPools/krops"]', "<pool>/"),
        ("workload-identity-providers", '["gcp-x/kind"]', "<pool>/<provider>"),
    ],
)
def test_gcp_iam_names_in_bootstrap_toml_are_checked_by_the_loader(run_module, tmp_path, key, value, expected):
    text = (REPO / "bootstrap.toml").read_text()
    line = re.search(rf"(?m)^{key} = \[.*\]\n", text)
    path = tmp_path / "bootstrap.toml"
    path.write_text(text.replace(line.group(0), f"{key} = {value}\n"))
    result = run_module(gcp_teardown, {"environment": "gcp", "config_file": str(path), "project": "p1"})
    assert result.failed and f"environments.gcp.teardown.{key}[0]" in result["msg"] and expected in result["msg"]


AZURE_LOGIN_FAILED = (
    "Azure login failed (%s). Set access_token, or client_id/secret/tenant, or the variables DefaultAzureCredential "
    "reads (AZURE_CLIENT_ID, AZURE_TENANT_ID with AZURE_CLIENT_SECRET or AZURE_FEDERATED_TOKEN_FILE; a managed "
    "identity; `az login`); see docs/teardown.md"
)


def sp_args(arm, login):
    args = azure_args(arm, login_endpoint=login.url)
    del args["access_token"]
    return args


def test_azure_service_principal_login_keeps_the_secret_out_of_urls(arm, login, run_module, monkeypatch):
    arm.add(rg("swedencentral-workload"), tags={"krops-environment": "azure"})
    # the names azure.azcollection and AWX's Azure credential use: an explicit service principal
    for key, value in {"AZURE_CLIENT_ID": "app-1", "AZURE_SECRET": "s3cret", "AZURE_TENANT": "tenant-1"}.items():
        monkeypatch.setenv(key, value)
    result = run_module(azure_teardown, sp_args(arm, login))
    assert not result.failed, result
    assert [r["name"] for r in result["results"]] == ["swedencentral-workload"]
    assert ("POST", "/tenant-1/oauth2/v2.0/token") in [c[:2] for c in login.calls]
    assert {auth for dummy, dummy2, auth in arm.calls} == {"Bearer from-login"}
    assert not [c for c in login.calls + arm.calls if "s3cret" in c[1]]
    monkeypatch.setenv("AZURE_SECRET", "wrong")
    failed = run_module(azure_teardown, sp_args(arm, login))
    assert failed.failed
    assert failed["msg"] == AZURE_LOGIN_FAILED % "Authentication failed: AADSTS7000215: Invalid client secret"


def test_azure_default_chain_reads_the_sdk_variables(arm, login, run_module, monkeypatch):
    """No option names a credential: DefaultAzureCredential's EnvironmentCredential logs in."""
    arm.add(rg("swedencentral-workload"), tags={"krops-environment": "azure"})
    for name in ("AZURE_SECRET", "AZURE_TENANT", "AZURE_ACCESS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for key, value in {
        "AZURE_CLIENT_ID": "app-1",
        "AZURE_CLIENT_SECRET": "s3cret",
        "AZURE_TENANT_ID": "tenant-1",
    }.items():
        monkeypatch.setenv(key, value)
    result = run_module(azure_teardown, sp_args(arm, login))
    assert not result.failed, result
    assert ("POST", "/tenant-1/oauth2/v2.0/token") in [c[:2] for c in login.calls]
    assert {auth for dummy, dummy2, auth in arm.calls} == {"Bearer from-login"}


def test_azure_default_chain_workload_identity(arm, login, run_module, monkeypatch, tmp_path):
    """The Azure workload identity webhook's variables: a federated token file, exchanged at the token endpoint."""
    arm.add(rg("swedencentral-workload"), tags={"krops-environment": "azure"})
    token_file = tmp_path / "azure-identity-token"
    token_file.write_text("projected-sa-token")
    login.assertion = "projected-sa-token"
    for name in ("AZURE_SECRET", "AZURE_TENANT", "AZURE_ACCESS_TOKEN", "AZURE_CLIENT_SECRET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_TOKEN_CREDENTIALS", "WorkloadIdentityCredential")
    for key, value in {
        "AZURE_CLIENT_ID": "app-1",
        "AZURE_TENANT_ID": "tenant-1",
        "AZURE_FEDERATED_TOKEN_FILE": str(token_file),
        "AZURE_AUTHORITY_HOST": login.url,
    }.items():
        monkeypatch.setenv(key, value)
    result = run_module(azure_teardown, sp_args(arm, login))
    assert not result.failed, result
    assert {auth for dummy, dummy2, auth in arm.calls} == {"Bearer from-login"}
    token_file.write_text("someone-elses-token")
    failed = run_module(azure_teardown, sp_args(arm, login))
    assert failed["msg"] == AZURE_LOGIN_FAILED % (
        "DefaultAzureCredential failed to retrieve a token from the included credentials; WorkloadIdentityCredential: "
        "Microsoft Entra ID error '(invalid_client) AADSTS70021: No matching federated identity record found.'"
    )


class ManagedIdentity(Double):
    """A managed identity token endpoint: App Service's (IDENTITY_ENDPOINT, secret header X-IDENTITY-HEADER,
    api-version 2019-08-01) or IMDS's (/metadata/identity/oauth2/token, header Metadata: true, api-version
    2018-02-01), as azure-identity 1.27.0 calls them (_credentials/app_service.py, imds.py). Like the real ones
    it refuses a request without its header, and a client_id that is not one of its identities."""

    def __init__(self, resource, secret=None, client_ids=("mi-client",)):
        super().__init__()
        self.resource, self.secret, self.client_ids = resource, secret, set(client_ids)
        self.seen = []
        self.echo = False

    def handle(self, method, path, query, body):
        return self._do_token(path, query, self.last_headers)

    def _do_token(self, path, query, headers):
        self.seen.append((path, {k: v[0] for k, v in query.items()}, headers))
        if path == "/metadata/identity/oauth2/token":
            if headers.get("Metadata") != "true" or query.get("api-version") != ["2018-02-01"]:
                return 400, {"error": "invalid_request", "error_description": "Required metadata header not specified"}
        elif path == "/msi/token":
            if headers.get("X-IDENTITY-HEADER") != self.secret or query.get("api-version") != ["2019-08-01"]:
                if self.echo:  # a broken endpoint that answers 200 and quotes the header back
                    return 200, {"message": "X-IDENTITY-HEADER {} is wrong".format(headers.get("X-IDENTITY-HEADER"))}
                return 401, {"error": "unauthorized", "error_description": "X-IDENTITY-HEADER is wrong"}
        else:
            return 404, {"error": "not_found", "error_description": path}
        if query.get("resource") != [self.resource] or (query.get("client_id") or [None])[0] not in self.client_ids:
            return 400, {"error": "invalid_request", "error_description": "Identity not found"}
        expires = int(datetime.datetime.now(datetime.UTC).timestamp()) + 3600
        # IMDS answers expires_in (msal reads it there), App Service expires_on; both as strings
        return 200, {
            "access_token": "from-managed-identity",
            "expires_on": str(expires),
            "expires_in": "3600",
            "resource": self.resource,
            "token_type": "Bearer",
        }


@pytest.fixture
def identity_endpoint(arm, monkeypatch):
    double = ManagedIdentity(arm.url, secret="mi-header-Secret-1")
    yield double
    double.stop()


def mi_env(monkeypatch, **values):
    for name in (
        "AZURE_SECRET",
        "AZURE_TENANT",
        "AZURE_ACCESS_TOKEN",
        "AZURE_CLIENT_SECRET",
        "AZURE_TENANT_ID",
        "AZURE_FEDERATED_TOKEN_FILE",
        "AZURE_AUTHORITY_HOST",
        "IDENTITY_ENDPOINT",
        "IDENTITY_HEADER",
        "IDENTITY_SERVER_THUMBPRINT",
        "IMDS_ENDPOINT",
        "MSI_ENDPOINT",
        "MSI_SECRET",
        "AZURE_POD_IDENTITY_AUTHORITY_HOST",
    ):
        monkeypatch.delenv(name, raising=False)
    # the chain stops at managed identity (never the az CLI, never the real IMDS address)
    monkeypatch.setenv("AZURE_TOKEN_CREDENTIALS", "ManagedIdentityCredential")
    for key, value in values.items():
        monkeypatch.setenv(key, value)


def mi_args(arm):
    args = azure_args(arm)
    del args["access_token"]
    return args


def test_azure_default_chain_app_service_managed_identity(arm, identity_endpoint, run_module, monkeypatch):
    """IDENTITY_ENDPOINT + IDENTITY_HEADER: azure-identity's App Service managed identity; AZURE_CLIENT_ID picks
    the user-assigned identity, and the endpoint's secret never shows in a result."""
    arm.add(rg("swedencentral-workload"), tags={"krops-environment": "azure"})
    mi_env(
        monkeypatch,
        IDENTITY_ENDPOINT=identity_endpoint.url + "/msi/token",
        IDENTITY_HEADER="mi-header-Secret-1",
        AZURE_CLIENT_ID="mi-client",
    )
    result = run_module(azure_teardown, mi_args(arm))
    assert not result.failed, result
    [(path, query, headers)] = identity_endpoint.seen
    assert path == "/msi/token" and query["client_id"] == "mi-client" and query["resource"] == arm.url
    assert {auth for dummy, dummy2, auth in arm.calls} == {"Bearer from-managed-identity"}
    monkeypatch.setenv("AZURE_CLIENT_ID", "someone-else")
    refused = run_module(azure_teardown, mi_args(arm))
    assert refused.failed and refused["msg"].startswith("Azure login failed (")
    # azure-identity reports the endpoint's 400 as a token request error of the managed identity
    assert (
        "ManagedIdentityCredential: App Service managed identity configuration not found in environment. "
        in refused["msg"]
    )
    assert "Token request error: (invalid_scope)" in refused["msg"]


def test_azure_default_chain_imds_managed_identity(arm, identity_endpoint, run_module, monkeypatch):
    """No App Service variables: IMDS, at AZURE_POD_IDENTITY_AUTHORITY_HOST instead of 169.254.169.254."""
    arm.add(rg("swedencentral-workload"), tags={"krops-environment": "azure"})
    mi_env(monkeypatch, AZURE_POD_IDENTITY_AUTHORITY_HOST=identity_endpoint.url, AZURE_CLIENT_ID="mi-client")
    result = run_module(azure_teardown, mi_args(arm))
    assert not result.failed, result
    [(path, query, headers)] = identity_endpoint.seen
    assert path == "/metadata/identity/oauth2/token" and headers["Metadata"] == "true"
    assert {auth for dummy, dummy2, auth in arm.calls} == {"Bearer from-managed-identity"}


def test_the_managed_identity_secret_is_masked(arm, identity_endpoint, capsys, monkeypatch):
    """IDENTITY_HEADER is a secret read from the environment: masked like a no_log parameter, even when the
    endpoint quotes it back in its refusal."""
    identity_endpoint.secret, identity_endpoint.echo = "the-right-one", True
    mi_env(
        monkeypatch,
        IDENTITY_ENDPOINT=identity_endpoint.url + "/msi/token",
        IDENTITY_HEADER="mi-header-Secret-1",
        AZURE_CLIENT_ID="mi-client",
    )
    result = run_real(azure_teardown, mi_args(arm), capsys)
    assert result["failed"] is True and result["msg"].startswith("Azure login failed (")
    assert "X-IDENTITY-HEADER ******** is wrong" in result["msg"]
    assert "mi-header-Secret-1" not in json.dumps(result)
    assert identity_endpoint.seen[0][2]["X-IDENTITY-HEADER"] == "mi-header-Secret-1"  # it was sent


def run_real(module, args, capsys):
    """main() with AnsibleModule's own exit_json/fail_json: the JSON it prints, masking applied."""
    from ansible.module_utils.testing import patch_module_args

    with patch_module_args(dict(args)):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)


def test_secrets_from_the_environment_never_appear_in_a_result(arm, google, run_module, monkeypatch, capsys):
    """A secret taken from an environment variable is masked like a no_log parameter, everywhere."""
    planted = PLANTED
    arm.add(rg("swedencentral-workload"), tags={"krops-environment": "azure"})
    arm.echo_auth = True  # an API that quotes the credential back in its errors
    monkeypatch.setenv("AZURE_ACCESS_TOKEN", planted)
    args = azure_args(arm)
    del args["access_token"]
    result = run_real(azure_teardown, args, capsys)
    assert result["failed"] is True
    assert result["leftovers"] == [rg("swedencentral-workload")]
    assert "********" in json.dumps(result)
    assert planted not in json.dumps(result)
    assert ("DELETE", rg("swedencentral-workload"), f"Bearer {planted}") in arm.calls  # it was used
    gcp_world(google)
    google.sql["krops-db"]["settings"]["deletionProtectionEnabled"] = False
    google.echo_auth = True
    google.tokens.add(planted)
    monkeypatch.setenv("GCP_ACCESS_TOKEN", planted)
    gargs = gcp_args(google)
    del gargs["access_token"]
    gresult = run_real(gcp_teardown, gargs, capsys)
    assert gresult["failed"] is True and gresult["stopped_at"] == "databases"
    assert "denied for Bearer ********" in json.dumps(gresult)
    assert planted not in json.dumps(gresult)
    assert any(auth == f"Bearer {planted}" for dummy, dummy2, auth in google.calls)


def service_account_file(tmp_path, token_uri):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    info = {
        "type": "service_account",
        "project_id": "p1",
        "private_key_id": "k1",
        "private_key": pem.decode(),
        "client_email": "krops-teardown@p1.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": token_uri,
    }
    path = tmp_path / "sa.json"
    path.write_text(json.dumps(info))
    return str(path), key.public_key()


def logs_in_with_a_jwt_grant(google, run_module):
    """gcp_teardown without a token: its first call signs a JWT grant at the token endpoint, and every other call
    carries the token it got. Returns the module arguments, for another run."""
    args = gcp_args(google, networks=[])
    del args["access_token"]
    result = run_module(gcp_teardown, args)
    assert not result.failed, result
    assert google.calls[0][:2] == ("POST", "/token")
    assert {auth for dummy, dummy2, auth in google.calls[1:]} == {"Bearer from-jwt-grant"}
    return args


def test_gcp_application_default_credentials_from_a_service_account_file(google, run_module, monkeypatch, tmp_path):
    """No token given: google.auth.default loads GOOGLE_APPLICATION_CREDENTIALS and signs a JWT grant."""
    path, public = service_account_file(tmp_path, google.url + "/token")
    google.token_key = public
    monkeypatch.delenv("GCP_ACCESS_TOKEN", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", path)
    args = logs_in_with_a_jwt_grant(google, run_module)
    google.token_key = service_account_file(tmp_path / "..", google.url + "/token")[1]  # another key
    failed = run_module(gcp_teardown, args)
    assert failed.failed
    assert failed["msg"] == "GCP login (google.oauth2.service_account) failed: invalid_grant: Invalid JWT Signature."


def test_gcp_takes_the_key_file_awxs_google_compute_engine_credential_injects(
    google, run_module, monkeypatch, tmp_path
):
    """AWX's Google Compute Engine credential writes the service account key to a file and names it in
    GCE_CREDENTIALS_FILE_PATH and GCP_SERVICE_ACCOUNT_FILE (ansible/awx awx/main/models/credential/injectors.py,
    gce), never GOOGLE_APPLICATION_CREDENTIALS, which google.auth.default reads: a job template's GCP runs log in
    with it. GOOGLE_APPLICATION_CREDENTIALS, when also set, comes first."""
    path, public = service_account_file(tmp_path, google.url + "/token")
    google.token_key = public
    for name in ("GCP_ACCESS_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(name, raising=False)
    awx = {"GCE_EMAIL": "krops-teardown@p1.iam.gserviceaccount.com", "GCE_PROJECT": "p1", "GCP_PROJECT": "p1"}
    awx.update(GCE_CREDENTIALS_FILE_PATH=path, GCP_SERVICE_ACCOUNT_FILE=path, GCP_AUTH_KIND="serviceaccount")
    for name, value in awx.items():
        monkeypatch.setenv(name, value)
    args = logs_in_with_a_jwt_grant(google, run_module)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    failed = run_module(gcp_teardown, args)
    assert failed["msg"].startswith("no GCP credentials: File "), failed["msg"]


def test_gcp_without_credentials_says_how_to_give_them(run_module, monkeypatch, tmp_path):
    monkeypatch.delenv("GCP_ACCESS_TOKEN", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    args = {"environment": "gcp", "config_file": str(REPO / "bootstrap.toml"), "project": "p1"}
    result = run_module(gcp_teardown, args)
    assert result.failed
    assert result["msg"].startswith("no GCP credentials: File ")
    assert result["msg"].endswith(
        "Set access_token (or GCP_ACCESS_TOKEN), GOOGLE_APPLICATION_CREDENTIALS (or AWX's GCP_SERVICE_ACCOUNT_FILE), "
        "run `gcloud auth application-default login`, or run where a metadata server serves a service account; see "
        "docs/teardown.md"
    )


def test_azure_ownership_another_environments_tag_vetoes_a_capz_tag():
    from ansible_collections.krops.platform.plugins.module_utils import azure

    capz = {"sigs.k8s.io_cluster-api-provider-azure_cluster_swedencentral-workload": "owned"}
    assert azure.azure_owned({"tags": capz}, "azure", ["swedencentral-workload"])
    assert (
        azure.azure_owned(
            {"tags": dict(capz, **{"krops-environment": "azure-staging"})}, "azure", ["swedencentral-workload"]
        )
        is None
    )
    assert azure.azure_owned({"tags": {"krops-environment": "azure"}}, "azure", []) == ("tag krops-environment=azure")
    # a name alone, or a CAPZ tag for a cluster that merely shares a prefix, proves nothing
    assert (
        azure.azure_owned({"name": "swedencentral-workload", "tags": {}}, "azure", ["swedencentral-workload"]) is None
    )
    assert (
        azure.azure_owned(
            {"tags": {"sigs.k8s.io_cluster-api-provider-azure_cluster_swedencentral-workload-2": "owned"}},
            "azure",
            ["swedencentral-workload"],
        )
        is None
    )


# --- GCP credentials through google.auth.default: the metadata server and workload identity federation -----


def gcp_module_play(google, **extra):
    """One gcp_teardown task in its own ansible-playbook process (google-auth reads GCE_METADATA_* at import)."""
    args = {
        "environment": "gcp",
        "config_file": str(REPO / "bootstrap.toml"),
        "project": "p1",
        "base_url": google.url,
        "networks": [],
        "poll_interval": 0,
    }
    args.update(extra)
    return [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [{"name": "gcp", "krops.platform.gcp_teardown": args, "register": "gcp"}],
        }
    ]


def adc_env(tmp_path, **extra):
    """An environment in which google.auth.default finds only what the test gives it."""
    env = {
        "HOME": str(tmp_path / "home"),
        "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),  # no `gcloud auth application-default login` file
        "GOOGLE_APPLICATION_CREDENTIALS": "",
        "GCP_ACCESS_TOKEN": "",
        "GCE_METADATA_HOST": "127.0.0.1:9",  # nothing answers: the metadata server is not found
        "GCE_METADATA_IP": "127.0.0.1:9",
        "GCE_METADATA_TIMEOUT": "1",
        "GCE_METADATA_DETECT_RETRIES": "1",
    }
    env.update(extra)
    return env


def gcp_task_result(out):
    return [t["hosts"]["localhost"] for p in out.get("plays", []) for t in p["tasks"] if t["task"]["name"] == "gcp"][0]


def test_gcp_credentials_from_the_gce_metadata_server(google, ansible_playbook, tmp_path):
    """GCE_METADATA_HOST / GCE_METADATA_IP point google-auth at a local metadata server double."""
    from tests.substrate.google_double import MetadataDouble

    metadata = MetadataDouble("from-metadata")
    google.tokens.add("from-metadata")
    try:
        env = adc_env(tmp_path, GCE_METADATA_HOST=metadata.host, GCE_METADATA_IP=metadata.host)
        rc, out, err = ansible_playbook(gcp_module_play(google), env=env)
        result = gcp_task_result(out)
        assert rc == 0, (result.get("msg"), err[-2000:])
        assert {auth for dummy, dummy2, auth in google.calls} == {"Bearer from-metadata"}
        paths = [p for p, dummy in metadata.calls]
        assert "/" in paths and "/computeMetadata/v1/instance/service-accounts/default/token" in paths
        assert all(flavor == "Google" for p, flavor in metadata.calls if p != "/")
        # without a metadata server (and nothing else) the message says how to give credentials
        rc, out, err = ansible_playbook(gcp_module_play(google), env=adc_env(tmp_path))
        assert rc != 0
        assert gcp_task_result(out)["msg"].startswith("no GCP credentials: Your default credentials were not found.")
    finally:
        metadata.stop()


def test_gcp_credentials_through_workload_identity_federation(google, run_module, monkeypatch, tmp_path):
    """An external_account file: the pod token goes to STS, the federated token impersonates krops-capg.

    google-auth 2.63.0 does not check token_url or service_account_impersonation_url against Google's host
    names (external_account.py has no such validation), so both can point at the local doubles. google.auth.default
    also looks the project up in Cloud Resource Manager by number, at a URL fixed in google-auth
    (external_account._CLOUD_RESOURCE_MANAGER): the test points that one constant at the double too,
    which is why this test runs in-process.
    """
    from google.auth import external_account
    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa
    from jwt.algorithms import RSAAlgorithm

    issuer = "https://kubernetes.default.svc.cluster.local"
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = dict(json.loads(RSAAlgorithm.to_jwk(key.public_key())), kid="k1")
    google.pools["krops"] = {"name": google._pool_name("krops"), "state": "ACTIVE"}
    google.providers[("krops", "kind")] = {
        "name": google._pool_name("krops") + "/providers/kind",
        "state": "ACTIVE",
        "attributeMapping": {"google.subject": "assertion.sub"},
        "oidc": {"issuerUri": issuer, "allowedAudiences": [issuer], "jwksJson": json.dumps({"keys": [jwk]})},
    }
    subject = "system:serviceaccount:capg-system:capg-manager"
    email = "krops-capg@p1.iam.gserviceaccount.com"
    principal = (
        f"principal://iam.googleapis.com/projects/{google.number}/locations/global/workloadIdentityPools/krops/"
        f"subject/{subject}"
    )
    google.sa_policies[email] = {
        "etag": "x",
        "bindings": [{"role": "roles/iam.workloadIdentityUser", "members": [principal]}],
    }
    now = int(datetime.datetime.now(datetime.UTC).timestamp())
    token_file = tmp_path / "token"
    token_file.write_text(
        jwt.encode(
            {"iss": issuer, "aud": [issuer], "sub": subject, "iat": now, "exp": now + 600},
            key,
            algorithm="RS256",
            headers={"kid": "k1"},
        )
    )
    credentials = tmp_path / "credentials.json"
    credentials.write_text(
        json.dumps(
            {
                "type": "external_account",
                "audience": f"//iam.googleapis.com/projects/{google.number}/locations/global/workloadIdentityPools/krops/providers/kind",
                "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
                "token_url": f"{google.url}/sts/v1/token",
                "service_account_impersonation_url": f"{google.url}/iamcredentials/v1/projects/-/serviceAccounts/{email}:generateAccessToken",
                "credential_source": {"file": str(token_file)},
            }
        )
    )
    for name, value in adc_env(tmp_path, GOOGLE_APPLICATION_CREDENTIALS=str(credentials)).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(external_account, "_CLOUD_RESOURCE_MANAGER", f"{google.url}/cloudresourcemanager/v1/projects/")
    args = gcp_args(google, networks=[])
    del args["access_token"]
    result = run_module(gcp_teardown, args)
    assert not result.failed, (result.get("msg"), result.get("results"))
    # bootstrap.toml names krops/kind: it goes last, after the token was issued (issued tokens stay valid)
    assert google.providers[("krops", "kind")]["state"] == "DELETED"
    # google-auth exchanges the pod token once, then impersonates (for its project lookup and the teardown's token)
    login = [(m, p, auth) for m, p, auth in google.calls if p.startswith(("/sts/", "/iamcredentials/"))]
    assert login[0][:2] == ("POST", "/sts/v1/token")
    impersonation = ("POST", f"/iamcredentials/v1/projects/-/serviceAccounts/{email}:generateAccessToken")
    assert login[1:] and all(c[:2] == impersonation for c in login[1:])
    assert all(c[2].startswith("Bearer sts-") for c in login[1:])  # the federated token, only for impersonation
    apis = {auth for m, p, auth in google.calls if p.startswith("/compute/")}
    assert len(apis) == 1 and apis.pop().startswith("Bearer impersonated-")
    # a subject the service account's policy does not admit is refused, and the message says so
    google.providers[("krops", "kind")]["state"] = "ACTIVE"  # (undeleted, so STS still accepts the pod token)
    google.sa_policies[email]["bindings"][0]["members"] = [principal.replace("capg-manager", "someone-else")]
    result = run_module(gcp_teardown, args)
    assert result.failed
    assert result["msg"] == "GCP credentials could not be loaded: Unable to acquire impersonated credentials"
    assert google.calls[-1][1].endswith(":generateAccessToken")  # refused there (403)
