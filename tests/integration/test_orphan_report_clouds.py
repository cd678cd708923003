"""The orphan report of the clouds on the steps engine (azure_teardown and gcp_teardown with mode=report, and
playbooks/orphan-report.yml picking the cloud from the environment's profile), over the ARM and Google doubles.

The report is the teardown's own discovery in check mode (cloud_report.orphans): every owned resource at least
min_age_hours old, its age from the creation time the cloud states (ARM systemData.createdAt; Compute Engine
creationTimestamp, GKE and Cloud SQL createTime, Cloud Storage timeCreated), always reported when the cloud states
none. Every test asserts the report's exact content and that no write reached the double.
"""

from __future__ import annotations

import copy
import datetime
import json

import pytest

from ansible_collections.krops.platform.plugins.module_utils import cloud_report
from ansible_collections.krops.platform.plugins.modules import azure_teardown, gcp_teardown
from tests.integration import test_teardown_cloud as cloud
from tests.integration.test_e2e_azure import seed_azure
from tests.substrate.arm_double import ArmDouble
from tests.substrate.fixtures import REPO, task_results
from tests.substrate.google_double import GoogleDouble

SUB = "00000000-0000-0000-0000-000000000001"
AT = datetime.datetime(2026, 12, 7, 6, 0, tzinfo=datetime.UTC)  # the report's "now" in-process
CONFIG = str(REPO / "bootstrap.toml")
VALID = "local-host, aws, aws-crossplane, azure, gcp, local-talos"


def ago(hours, at=AT, fraction=""):
    """The ARM form of a creation time ``hours`` before ``at`` (seven fractional digits when given)."""
    return (at - datetime.timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%S") + fraction + "Z"


@pytest.fixture
def fixed_now(monkeypatch):
    monkeypatch.setattr(cloud_report, "now", lambda: AT)


# --- Azure ------------------------------------------------------------------------------------------------------


@pytest.fixture
def arm():
    double = ArmDouble(token="arm-token", subscription=SUB)
    yield double
    double.stop()


def rg(name):
    return f"/subscriptions/{SUB}/resourceGroups/{name}"


IDENT = rg("swedencentral-management") + "/providers/Microsoft.ManagedIdentity/userAssignedIdentities/krops-capz"
CRED = IDENT + "/federatedIdentityCredentials/krops-kind-capz-manager"
ARC = rg("swedencentral-management") + "/providers/Microsoft.Kubernetes/connectedClusters/krops-kind-mgmt"


def azure_world(arm, at=AT):
    """What an azure run leaves (bootstrap.toml's groups, the identity's kind credentials, the Arc resource), with
    creation times where ARM states one (systemData.createdAt; the resource groups of 2021-04-01 state none), and
    decoys the report must not list."""
    capz = "sigs.k8s.io_cluster-api-provider-azure_cluster_%s"
    arm.add(rg("swedencentral-management"), location="swedencentral", tags={"krops-environment": "azure"})
    arm.add(rg("swedencentral-workload"), location="swedencentral", tags={capz % "swedencentral-workload": "owned"})
    arm.add(rg("swedencentral-data"), location="swedencentral", tags={})  # named in bootstrap.toml, not proven ours
    arm.add(rg("team-billing"), location="swedencentral", tags={})
    arm.add(rg("other-env"), location="swedencentral", tags={"krops-environment": "azure-staging"})
    arm.add(IDENT, tags={"krops-environment": "azure"}, systemData={"createdAt": ago(200, at)})
    arm.add(
        CRED,
        properties={"issuer": "https://kind.example/issuer", "subject": "system:serviceaccount:capz-system:capz"},
        systemData={"createdAt": ago(30, at, ".1234567"), "createdByType": "Application"},
    )
    arm.add(  # young: made two hours ago, under the threshold
        IDENT + "/federatedIdentityCredentials/krops-kind-azureserviceoperator-default",
        properties={"issuer": "https://kind.example/issuer"},
        systemData={"createdAt": ago(2, at)},
    )
    arm.add(  # a name that only shares the hook's prefix: not ours, however old
        IDENT + "/federatedIdentityCredentials/krops-kind-capz-manager-old",
        properties={"issuer": "https://old.example/issuer"},
        systemData={"createdAt": ago(900, at)},
    )
    arm.add(ARC, tags={"krops-environment": "azure"}, systemData={"createdAt": ago(50.5, at)})
    arm.add(
        rg("team-billing") + "/providers/Microsoft.Kubernetes/connectedClusters/their-arc",
        tags={},
        systemData={"createdAt": ago(900, at)},
    )


def azure_args(arm, **extra):
    return dict(
        {
            "environment": "azure",
            "config_file": CONFIG,
            "subscription_id": SUB,
            "access_token": "arm-token",
            "endpoint": arm.url,
            "mode": "report",
        },
        **extra,
    )


def azure_resources(generated_at_created=None):
    """The report's resources of azure_world (credentials, Arc resource, workload groups before the management
    cluster's), each with the creation time and age ARM gave."""
    return [
        {
            "type": "federated-credential",
            "id": CRED,
            "name": "krops-kind-capz-manager",
            "reason": "bootstrap credential on identity krops-capz (tag krops-environment=azure)",
            "outcome": "orphan",
            "stage": "federated-credential",
            "created": "2026-12-06T00:00:00.123456+00:00",
            "age_hours": 30.0,
        },
        {
            "type": "arc-connected-cluster",
            "id": ARC,
            "name": "krops-kind-mgmt",
            "reason": "tag krops-environment=azure",
            "outcome": "orphan",
            "stage": "arc-connected-cluster",
            "created": "2026-12-05T03:30:00+00:00",
            "age_hours": 50.5,
        },
        {
            "type": "resource-group",
            "id": rg("swedencentral-workload"),
            "name": "swedencentral-workload",
            "reason": "tag sigs.k8s.io_cluster-api-provider-azure_cluster_swedencentral-workload=owned",
            "outcome": "orphan",
            "stage": "resource-group",
            "created": None,
            "age_hours": None,
        },
        {
            "type": "resource-group",
            "id": rg("swedencentral-management"),
            "name": "swedencentral-management",
            "reason": "tag krops-environment=azure",
            "outcome": "orphan",
            "stage": "resource-group",
            "created": None,
            "age_hours": None,
        },
    ]


AZURE_NOT_OWNED = [
    {
        "type": "resource-group",
        "id": rg("swedencentral-data"),
        "name": "swedencentral-data",
        "reason": "named in bootstrap.toml but carries neither krops-environment=azure nor a CAPZ owned tag for "
        "swedencentral-workload, swedencentral-management",
    }
]


def azure_markdown(generated, threshold="6"):
    return f"""# krops Azure orphan report

- Environment: `azure`
- Subscription: `{SUB}`
- Generated: {generated}
- Threshold: owned resources older than {threshold} hours (no creation time: always reported)

Found 4 orphaned resources.

| Type | Name | Created | Age (hours) | Reason |
|---|---|---|---|---|
| federated-credential | `krops-kind-capz-manager` | 2026-12-06T00:00:00.123456+00:00 | 30 | bootstrap credential on identity krops-capz (tag krops-environment=azure) |
| arc-connected-cluster | `krops-kind-mgmt` | 2026-12-05T03:30:00+00:00 | 50.5 | tag krops-environment=azure |
| resource-group | `swedencentral-workload` | unknown | unknown | tag sigs.k8s.io_cluster-api-provider-azure_cluster_swedencentral-workload=owned |
| resource-group | `swedencentral-management` | unknown | unknown | tag krops-environment=azure |

## Not proven owned (never deleted)

- resource-group `swedencentral-data`: named in bootstrap.toml but carries neither krops-environment=azure nor a CAPZ owned tag for swedencentral-workload, swedencentral-management
"""


def test_azure_report_lists_every_owned_resource_old_enough_with_its_age_and_writes_nothing(
    arm, run_module, fixed_now, tmp_path
):
    azure_world(arm)
    before = copy.deepcopy(arm.objects)
    path = tmp_path / "out" / "orphans-azure.md"
    result = run_module(azure_teardown, azure_args(arm, report_path=str(path)))
    assert not result.failed, result
    assert result["changed"] is False
    data = result["report"]["json"]
    assert data == {
        "cloud": "azure",
        "environment": "azure",
        "subscription_id": SUB,
        "generated_at": "2026-12-07T06:00:00+00:00",
        "min_age_hours": 6.0,
        "count": 4,
        "resources": azure_resources(),
        "not_owned": AZURE_NOT_OWNED,
        "held_networks": [],
    }
    assert result["report"]["markdown"] == azure_markdown("2026-12-07T06:00:00+00:00")
    assert result["msg"] == (
        f"orphan report: 4 owned resources older than the threshold in subscription {SUB}; 1 resources not proven "
        "owned, left alone (not_owned)"
    )
    assert result["results"] == [] and result["leftovers"] == [] and result["not_owned"] == AZURE_NOT_OWNED
    assert result["report_files"] == {"markdown": str(path), "json": str(tmp_path / "out" / "orphans-azure.json")}
    assert path.read_text() == result["report"]["markdown"]
    assert json.loads((tmp_path / "out" / "orphans-azure.json").read_text()) == data
    # read-only: nothing but GETs reached ARM, and every resource is as it was
    assert arm.writes() == [] and {m for m, dummy, dummy2 in arm.calls} == {"GET"}
    assert arm.objects == before


def test_azure_report_in_check_mode_writes_no_file_and_a_threshold_of_zero_lists_the_young_too(
    arm, run_module, fixed_now, tmp_path
):
    azure_world(arm)
    path = tmp_path / "orphans.md"
    checked = run_module(azure_teardown, azure_args(arm, report_path=str(path)), check_mode=True)
    assert not checked.failed and "report_files" not in checked and not path.exists()
    assert checked["report"]["json"]["resources"] == azure_resources()
    everything = run_module(azure_teardown, azure_args(arm, min_age_hours=0))
    assert [(r["name"], r["age_hours"]) for r in everything["report"]["json"]["resources"]] == [
        ("krops-kind-azureserviceoperator-default", 2.0),  # ARM lists the credentials by name
        ("krops-kind-capz-manager", 30.0),
        ("krops-kind-mgmt", 50.5),
        ("swedencentral-workload", None),
        ("swedencentral-management", None),
    ]
    assert everything["report"]["markdown"].splitlines()[5] == (
        "- Threshold: owned resources older than 0 hours (no creation time: always reported)"
    )
    assert arm.writes() == []


def test_azure_report_of_a_subscription_with_nothing_owned_says_so(arm, run_module, fixed_now):
    arm.add(rg("team-billing"), location="swedencentral", tags={})
    result = run_module(azure_teardown, azure_args(arm))
    assert not result.failed, result
    assert result["report"]["markdown"] == (
        "# krops Azure orphan report\n\n"
        "- Environment: `azure`\n"
        f"- Subscription: `{SUB}`\n"
        "- Generated: 2026-12-07T06:00:00+00:00\n"
        "- Threshold: owned resources older than 6 hours (no creation time: always reported)\n\n"
        "No orphaned resources found.\n"
    )
    assert result["msg"] == f"orphan report: 0 owned resources older than the threshold in subscription {SUB}"
    assert arm.writes() == []


# --- GCP --------------------------------------------------------------------------------------------------------

MGMT_VPC, WORKLOAD_VPC, TEAM_VPC = "europe-north1-management", "europe-north1-workload", "team-vpc"
SA = "krops-europe-north1-workload@p1.iam.gserviceaccount.com"  # bootstrap.toml teardown.service-accounts


@pytest.fixture
def google():
    double = GoogleDouble(polls=2, page_size=2)
    yield double
    double.stop()


def gcp_world(g, at=AT):
    """What a gcp run leaves in a project, with the creation times Google states (Compute Engine in its offset
    form), a young VPC, GKE cluster and subnet under the threshold, and decoys the report must not list."""

    def stamp(hours, fmt="%Y-%m-%dT%H:%M:%S+00:00"):
        return (at - datetime.timedelta(hours=hours)).strftime(fmt)

    pacific = datetime.timezone(datetime.timedelta(hours=-8))
    g.add_network(
        MGMT_VPC,
        labels={"krops-environment": "gcp"},
        creationTimestamp=(at - datetime.timedelta(hours=72)).astimezone(pacific).isoformat(timespec="milliseconds"),
    )
    g.add_network(WORKLOAD_VPC, description=f"capg-cluster-{WORKLOAD_VPC}", creationTimestamp=stamp(2))
    g.add_network(TEAM_VPC, creationTimestamp=stamp(900))
    g.add_network("default")
    g.add_connection(WORKLOAD_VPC, ranges=["krops-psa"])
    g.add_compute(
        "addresses",
        "krops-psa",
        WORKLOAD_VPC,
        purpose="VPC_PEERING",
        labels={"krops-environment": "gcp"},
        creationTimestamp=stamp(48),
    )
    g.add_compute("addresses", "team-psa", TEAM_VPC, purpose="VPC_PEERING", creationTimestamp=stamp(900))
    g.add_gke(MGMT_VPC, "europe-north1", MGMT_VPC)  # CAPG labels no GKE cluster: ours by its exact name
    g.gke[f"locations/europe-north1/clusters/{MGMT_VPC}"]["createTime"] = stamp(24)
    g.add_gke(WORKLOAD_VPC, "europe-north1", WORKLOAD_VPC)
    g.gke[f"locations/europe-north1/clusters/{WORKLOAD_VPC}"]["createTime"] = stamp(1)
    g.add_gke("team-gke", "us-central1", TEAM_VPC, labels={"krops-environment": "gcp-staging"})
    g.add_sql("krops-db", WORKLOAD_VPC, labels={"krops-environment": "gcp"}, protected=True)
    g.sql["krops-db"]["createTime"] = stamp(12, "%Y-%m-%dT%H:%M:%S.094Z")
    g.add_sql("aws-db", None, labels={"krops-environment": "aws"})
    g.add_bucket("krops-p1-data", labels={"krops-environment": "gcp"}, objects=[("state/a.json", 1)])
    g.buckets["krops-p1-data"]["timeCreated"] = stamp(100, "%Y-%m-%dT%H:%M:%S.000Z")
    g.add_bucket("team-bucket")
    g.add_compute("firewalls", "allow-internal", MGMT_VPC)  # no creation time: always reported
    g.add_compute("firewalls", "team-ssh", TEAM_VPC, creationTimestamp=stamp(900))
    g.add_compute("routers", f"{MGMT_VPC}-nat", MGMT_VPC, region="europe-north1", creationTimestamp=stamp(30))
    g.add_compute("subnetworks", f"{MGMT_VPC}-nodes", MGMT_VPC, region="europe-north1")
    g.add_compute(
        "subnetworks", f"{WORKLOAD_VPC}-nodes", WORKLOAD_VPC, region="europe-north1", creationTimestamp=stamp(3)
    )
    g.service_accounts[SA] = {"email": SA, "uniqueId": "111"}
    g.project_policy["bindings"] = [
        {"role": "roles/cloudsql.client", "members": [f"serviceAccount:{SA}", "user:dba@example.com"]}
    ]
    g.pools["krops"] = {"name": g._pool_name("krops"), "state": "ACTIVE"}
    g.providers[("krops", "kind")] = {"name": g._pool_name("krops") + "/providers/kind", "state": "ACTIVE"}


def gcp_args(g, **extra):
    return dict(
        {
            "environment": "gcp",
            "config_file": CONFIG,
            "project": "p1",
            "access_token": "gcp-token",
            "base_url": g.url,
            "mode": "report",
        },
        **extra,
    )


def gcp_entry(rtype, name, rid, reason, stage, created, age, network=None):
    entry = {"type": rtype, "name": name, "reason": reason}
    if network:
        entry["network"] = network
    entry.update(id=rid, outcome="orphan", stage=stage, created=created, age_hours=age)
    return entry


P = "/projects/p1"
GCP_RESOURCES = [
    gcp_entry(
        "cloudsql-instance",
        "krops-db",
        f"/sqladmin{P}/instances/krops-db",
        "label krops-environment=gcp",
        "databases",
        "2026-12-06T18:00:00.094000+00:00",
        12.0,
        WORKLOAD_VPC,
    ),
    gcp_entry(
        "private-services-connection",
        "servicenetworking-googleapis-com",
        "/servicenetworking/services/servicenetworking.googleapis.com/connections/servicenetworking-googleapis-com"
        ":deleteConnection",
        f"private services access of owned VPC {WORKLOAD_VPC}",
        "private-services-access",
        None,
        None,
        WORKLOAD_VPC,
    ),
    gcp_entry(
        "private-services-range",
        "krops-psa",
        f"/compute{P}/global/addresses/krops-psa",
        f"VPC_PEERING range of owned VPC {WORKLOAD_VPC}",
        "private-services-ranges",
        "2026-12-05T06:00:00+00:00",
        48.0,
        WORKLOAD_VPC,
    ),
    gcp_entry(
        "gke-cluster",
        MGMT_VPC,
        f"/container{P}/locations/europe-north1/clusters/{MGMT_VPC}",
        f"named in bootstrap.toml, in owned VPC {MGMT_VPC}",
        "gke-clusters",
        "2026-12-06T06:00:00+00:00",
        24.0,
        MGMT_VPC,
    ),
    gcp_entry(
        "bucket",
        "krops-p1-data",
        "/storage/b/krops-p1-data",
        "label krops-environment=gcp",
        "buckets",
        "2026-12-03T02:00:00+00:00",
        100.0,
    ),
    gcp_entry(
        "firewall-rule",
        "allow-internal",
        f"/compute{P}/global/firewalls/allow-internal",
        f"rule of owned VPC {MGMT_VPC}",
        "firewalls-routers-peerings",
        None,
        None,
        MGMT_VPC,
    ),
    gcp_entry(
        "router",
        f"{MGMT_VPC}-nat",
        f"/compute{P}/regions/europe-north1/routers/{MGMT_VPC}-nat",
        f"router of owned VPC {MGMT_VPC}",
        "firewalls-routers-peerings",
        "2026-12-06T00:00:00+00:00",
        30.0,
        MGMT_VPC,
    ),
    gcp_entry(
        "subnetwork",
        f"{MGMT_VPC}-nodes",
        f"/compute{P}/regions/europe-north1/subnetworks/{MGMT_VPC}-nodes",
        f"subnet of owned VPC {MGMT_VPC}",
        "subnetworks",
        None,
        None,
        MGMT_VPC,
    ),
    gcp_entry(
        "network",
        MGMT_VPC,
        f"/compute{P}/global/networks/{MGMT_VPC}",
        "named in bootstrap.toml (teardown.networks)",
        "networks",
        "2026-12-04T06:00:00+00:00",
        72.0,
    ),
    gcp_entry(
        "iam-grant",
        f"roles/cloudsql.client serviceAccount:{SA}",
        "/cloudresourcemanager/projects/p1",
        "project grant to service account krops-europe-north1-workload (teardown.service-accounts)",
        "iam-grants",
        None,
        None,
    ),
    gcp_entry(
        "service-account",
        SA,
        "/iam/projects/p1/serviceAccounts/krops-europe-north1-workload%40p1.iam.gserviceaccount.com",
        "named in bootstrap.toml (teardown.service-accounts)",
        "service-accounts",
        None,
        None,
    ),
    gcp_entry(
        "workload-identity-provider",
        "krops/kind",
        "/iam/projects/p1/locations/global/workloadIdentityPools/krops/providers/kind",
        "named in bootstrap.toml (teardown.workload-identity-providers)",
        "workload-identity-providers",
        None,
        None,
    ),
]
GCP_NOT_OWNED = [
    {"type": "cloudsql-instance", "name": "aws-db", "reason": "labelled krops-environment=aws (another environment)"},
    {
        "type": "gke-cluster",
        "name": "team-gke",
        "reason": "labelled krops-environment=gcp-staging (another environment)",
    },
]

GCP_MARKDOWN = f"""# krops GCP orphan report

- Environment: `gcp`
- Project: `p1`
- Generated: 2026-12-07T06:00:00+00:00
- Threshold: owned resources older than 6 hours (no creation time: always reported)

Found 12 orphaned resources.

| Type | Name | Created | Age (hours) | Reason |
|---|---|---|---|---|
| cloudsql-instance | `krops-db` | 2026-12-06T18:00:00.094000+00:00 | 12 | label krops-environment=gcp |
| private-services-connection | `servicenetworking-googleapis-com` | unknown | unknown | private services access of owned VPC {WORKLOAD_VPC} |
| private-services-range | `krops-psa` | 2026-12-05T06:00:00+00:00 | 48 | VPC_PEERING range of owned VPC {WORKLOAD_VPC} |
| gke-cluster | `{MGMT_VPC}` | 2026-12-06T06:00:00+00:00 | 24 | named in bootstrap.toml, in owned VPC {MGMT_VPC} |
| bucket | `krops-p1-data` | 2026-12-03T02:00:00+00:00 | 100 | label krops-environment=gcp |
| firewall-rule | `allow-internal` | unknown | unknown | rule of owned VPC {MGMT_VPC} |
| router | `{MGMT_VPC}-nat` | 2026-12-06T00:00:00+00:00 | 30 | router of owned VPC {MGMT_VPC} |
| subnetwork | `{MGMT_VPC}-nodes` | unknown | unknown | subnet of owned VPC {MGMT_VPC} |
| network | `{MGMT_VPC}` | 2026-12-04T06:00:00+00:00 | 72 | named in bootstrap.toml (teardown.networks) |
| iam-grant | `roles/cloudsql.client serviceAccount:{SA}` | unknown | unknown | project grant to service account krops-europe-north1-workload (teardown.service-accounts) |
| service-account | `{SA}` | unknown | unknown | named in bootstrap.toml (teardown.service-accounts) |
| workload-identity-provider | `krops/kind` | unknown | unknown | named in bootstrap.toml (teardown.workload-identity-providers) |

## Not proven owned (never deleted)

- cloudsql-instance `aws-db`: labelled krops-environment=aws (another environment)
- gke-cluster `team-gke`: labelled krops-environment=gcp-staging (another environment)
"""


def read_only(google):
    """Every call the double got was a read: a GET, or getIamPolicy (a POST that reads)."""
    return google.writes() == [] and all(m == "GET" or p.endswith(":getIamPolicy") for m, p, dummy in google.calls)


def test_gcp_report_lists_every_owned_resource_old_enough_with_its_age_and_writes_nothing(
    google, run_module, fixed_now, tmp_path
):
    gcp_world(google)
    before = copy.deepcopy(google.inventory_objects())
    path = tmp_path / "orphans-gcp.md"
    result = run_module(gcp_teardown, gcp_args(google, report_path=str(path)))
    assert not result.failed, result
    assert result["changed"] is False
    data = result["report"]["json"]
    assert data["resources"] == GCP_RESOURCES
    assert data == {
        "cloud": "gcp",
        "environment": "gcp",
        "project": "p1",
        "generated_at": "2026-12-07T06:00:00+00:00",
        "min_age_hours": 6.0,
        "count": 12,
        "resources": GCP_RESOURCES,
        "not_owned": GCP_NOT_OWNED,
        "held_networks": [],
    }
    assert result["report"]["markdown"] == GCP_MARKDOWN
    assert result["msg"] == (
        "orphan report: 12 owned resources older than the threshold in project p1; 2 resources not proven owned, "
        "left alone (not_owned)"
    )
    assert path.read_text() == GCP_MARKDOWN
    assert json.loads((tmp_path / "orphans-gcp.json").read_text()) == data
    # read-only: no operation was started, nothing changed, the deletion protection is still on
    assert read_only(google) and google.operations == {}
    assert google.inventory_objects() == before
    assert google.sql["krops-db"]["settings"]["deletionProtectionEnabled"] is True


def test_gcp_report_of_a_vpc_holding_what_krops_does_not_own_names_it_and_lists_none_of_its_parts(
    google, run_module, fixed_now
):
    """A team's GKE cluster in the owned management VPC: the teardown leaves that VPC whole, so the report lists
    none of its parts as orphans, names the VPC as left whole and says why each part stays."""
    gcp_world(google)
    google.add_gke("team-gke-in-vpc", "europe-north1", MGMT_VPC)
    result = run_module(gcp_teardown, gcp_args(google))
    assert not result.failed, result
    data = result["report"]["json"]
    assert data["resources"] == [r for r in GCP_RESOURCES if r.get("network") != MGMT_VPC and r["name"] != MGMT_VPC]
    assert data["held_networks"] == [MGMT_VPC]
    held = (
        f"VPC {MGMT_VPC} holds what krops does not own (gke-cluster/team-gke-in-vpc): the VPC and everything in it stay"
    )
    assert data["not_owned"] == GCP_NOT_OWNED[:1] + [
        {
            "type": "gke-cluster",
            "name": "team-gke-in-vpc",
            "reason": f"in owned VPC {MGMT_VPC} but without the label krops-environment=gcp: not proven krops'",
            "network": MGMT_VPC,
        },
        GCP_NOT_OWNED[1],
        {"type": "gke-cluster", "name": MGMT_VPC, "reason": held},
        {"type": "firewall-rule", "name": "allow-internal", "reason": held},
        {"type": "router", "name": f"{MGMT_VPC}-nat", "reason": held},
        {"type": "subnetwork", "name": f"{MGMT_VPC}-nodes", "reason": held},
        {"type": "network", "name": MGMT_VPC, "reason": held},
    ]
    markdown = result["report"]["markdown"]
    assert "Found 7 orphaned resources." in markdown
    assert (
        "## Owned VPCs left whole\n\n"
        "They hold what krops does not own (below), so no teardown deletes them or anything in them: "
        f"`{MGMT_VPC}`\n\n## Not proven owned (never deleted)\n\n"
    ) in markdown
    assert markdown.endswith(f"- network `{MGMT_VPC}`: {held}\n")
    assert result["msg"] == (
        f"orphan report: 7 owned resources older than the threshold in project p1; owned VPCs left whole: {MGMT_VPC}; "
        "8 resources not proven owned, left alone (not_owned)"
    )
    assert read_only(google)


def test_gcp_report_of_phase_before_clusters_lists_only_those_stages(google, run_module, fixed_now):
    gcp_world(google)
    result = run_module(gcp_teardown, gcp_args(google, phase="before-clusters"))
    assert not result.failed, result
    assert [(r["type"], r["name"]) for r in result["report"]["json"]["resources"]] == [
        ("cloudsql-instance", "krops-db"),
        ("private-services-connection", "servicenetworking-googleapis-com"),
        ("private-services-range", "krops-psa"),
    ]
    assert read_only(google)


# --- the report is the teardown's plan ---------------------------------------------------------------------------


def test_at_threshold_zero_the_report_is_exactly_what_the_teardown_would_delete(run_module, fixed_now):
    """Over the teardown tests' worlds (test_teardown_cloud.py) and the azure lifecycle's seed (test_e2e_azure.py):
    the report lists the check-mode plan's resources, in its order, and neither call writes."""
    for seed in (cloud.azure_world, seed_azure):
        arm = ArmDouble(token="arm-token", subscription=SUB)
        try:
            seed(arm)
            planned = run_module(azure_teardown, azure_args(arm, mode="delete"), check_mode=True)
            report = run_module(azure_teardown, azure_args(arm, min_age_hours=0))
            assert not planned.failed and not report.failed, (planned, report)
            assert planned["results"], seed
            assert [(r["type"], r["id"]) for r in report["report"]["json"]["resources"]] == [
                (r["type"], r["id"]) for r in planned["results"]
            ]
            assert report["not_owned"] == planned["not_owned"] and report["plan"] == planned["plan"]
            assert arm.writes() == []
        finally:
            arm.stop()
    google = GoogleDouble(polls=2, page_size=2)
    try:
        cloud.gcp_world(google)
        cloud.gcp_iam_world(google)
        planned = run_module(gcp_teardown, gcp_args(google, mode="delete"), check_mode=True)
        report = run_module(gcp_teardown, gcp_args(google, min_age_hours=0))
        assert not planned.failed and not report.failed, (planned, report)
        assert len(planned["results"]) == 18
        assert [(r["type"], r["id"]) for r in report["report"]["json"]["resources"]] == [
            (r["type"], r["id"]) for r in planned["results"]
        ]
        assert report["not_owned"] == planned["not_owned"] and report["plan"] == planned["plan"]
        assert read_only(google)
    finally:
        google.stop()


# --- bad input: a clear message, nothing called ------------------------------------------------------------------


def test_a_report_of_an_unknown_environment_or_another_clouds_fails_clearly_before_any_call(arm, google, run_module):
    unknown = run_module(azure_teardown, azure_args(arm, environment="nope"))
    assert unknown.failed and unknown["msg"] == (
        f"{CONFIG}: environments.nope: expected a defined environment (the requested environment); unknown "
        f"environment 'nope' (valid environments: {VALID})"
    )
    other = run_module(gcp_teardown, gcp_args(google, environment="azure"))
    assert other.failed and other["msg"] == "environment azure is of kind azure, not gcp"
    negative = run_module(azure_teardown, azure_args(arm, min_age_hours=-1))
    assert (
        negative.failed
        and negative["msg"] == "option min_age_hours: expected a number of hours from 0 to 8784, got -1.0"
    )
    assert arm.calls == [] and google.calls == []
    assert "exception" not in unknown and "exception" not in other and "exception" not in negative


# --- the playbook: the environment's profile picks the cloud ---------------------------------------------------


def report_playbook(ansible_playbook, tmp_path, profile, extra_env=None, args=()):
    out = tmp_path / "reports"
    env = {"BOOTSTRAP_CONFIG": CONFIG, "ORPHAN_REPORT_DIR": str(out), "KROPS_PROFILE": profile}
    env.update(extra_env or {})
    rc, output, stderr = ansible_playbook("playbooks/orphan-report.yml", *args, env=env)
    return rc, output, stderr, out


def test_the_orphan_report_playbook_reports_an_azure_environment_through_its_rows(arm, ansible_playbook, tmp_path):
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    azure_world(arm, at=now)
    before = copy.deepcopy(arm.objects)
    rc, output, stderr, out = report_playbook(
        ansible_playbook,
        tmp_path,
        "azure",
        {"AZURE_ACCESS_TOKEN": "arm-token", "AZURE_SUBSCRIPTION_ID": SUB},
        ("-e", f"orphan_report_endpoint_url={arm.url}"),
    )
    assert rc == 0, (output, stderr)
    results = task_results(output)
    assert results["List owned resources older than the threshold (read-only)"]["changed"] is False
    data = json.loads((out / "orphans-azure.json").read_text())
    generated = datetime.datetime.fromisoformat(data["generated_at"])
    assert now <= generated <= now + datetime.timedelta(minutes=5)
    # seeded relative to the real clock: the ages are the seeded ones to the tenth (a run takes seconds)
    expected = azure_resources()
    for entry in expected:
        if entry["created"]:
            entry["created"] = (datetime.datetime.fromisoformat(entry["created"]) + (now - AT)).isoformat()
    assert data["resources"] == expected and data["count"] == 4 and data["not_owned"] == AZURE_NOT_OWNED
    markdown = azure_markdown(data["generated_at"]).replace("2026-12-06T00:00:00.123456+00:00", expected[0]["created"])
    markdown = markdown.replace("2026-12-05T03:30:00+00:00", expected[1]["created"])
    assert (out / "orphans-azure.md").read_text() == markdown
    assert results["Summarise the report"]["msg"] == (
        f"orphan report: 4 owned resources older than the threshold in subscription {SUB}; 1 resources not proven "
        f"owned, left alone (not_owned). Markdown: {out}/orphans-azure.md; JSON: {out}/orphans-azure.json"
    )
    assert arm.writes() == [] and arm.objects == before


def test_the_orphan_report_playbook_reports_a_gcp_environment_through_its_rows(google, ansible_playbook, tmp_path):
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    gcp_world(google, at=now)
    before = copy.deepcopy(google.inventory_objects())
    rc, output, stderr, out = report_playbook(
        ansible_playbook,
        tmp_path,
        "",
        {"GCP_ACCESS_TOKEN": "gcp-token", "GCP_PROJECT": "p1", "ORPHAN_MIN_AGE_HOURS": "6"},
        ("-e", "krops_environment=gcp", "-e", f"orphan_report_endpoint_url={google.url}"),
    )
    assert rc == 0, (output, stderr)
    results = task_results(output)
    assert results["List owned resources older than the threshold (read-only)"]["changed"] is False
    data = json.loads((out / "orphans-gcp.json").read_text())
    assert [(r["type"], r["name"], r["age_hours"]) for r in data["resources"]] == [
        (r["type"], r["name"], r["age_hours"]) for r in GCP_RESOURCES
    ]
    markdown = GCP_MARKDOWN.replace("2026-12-07T06:00:00+00:00", data["generated_at"])
    for entry, seeded in zip(data["resources"], GCP_RESOURCES):
        if seeded["created"]:
            markdown = markdown.replace(f"| {seeded['created']} |", f"| {entry['created']} |", 1)
    assert (out / "orphans-gcp.md").read_text() == markdown
    assert results["Summarise the report"]["msg"].startswith(
        "orphan report: 12 owned resources older than the threshold in project p1; 2 resources not proven owned"
    )
    assert read_only(google) and google.inventory_objects() == before


def test_the_orphan_report_playbook_refuses_an_unknown_environment_and_a_cloud_without_a_report(
    ansible_playbook, tmp_path
):
    rc, output, stderr, out = report_playbook(ansible_playbook, tmp_path, "nope")
    assert rc == 2, (output, stderr)
    failed = [r for r in task_results(output).values() if r.get("failed")]
    assert failed[-1]["msg"] == (
        f"orphan report: {CONFIG}: environments.nope: expected a defined environment (the requested environment); "
        f"unknown environment 'nope' (valid environments: {VALID})"
    )
    assert "Traceback" not in stderr and "Traceback" not in json.dumps(output)
    rc, output, stderr, out = report_playbook(ansible_playbook, tmp_path, "local-talos")
    assert rc == 2, (output, stderr)
    failed = [r for r in task_results(output).values() if r.get("failed")]
    assert [r["msg"] for r in failed] == [
        "orphan report: environment local-talos (platform local-talos) creates no cloud resources, so there is "
        "nothing to report; the orphan report covers the environments on aws, azure, gcp and on the clouds whose "
        "profile names a rows file"
    ]
    # a cloud the registry has no report for (here the registry narrowed to aws by an extra variable)
    only_aws = json.dumps({"orphan_report_task_files": {"aws": "tasks/orphan-report-aws.yml"}})
    rc, output, stderr, out = report_playbook(ansible_playbook, tmp_path, "gcp", args=("-e", only_aws))
    assert rc == 2, (output, stderr)
    failed = [r for r in task_results(output).values() if r.get("failed")]
    assert [r["msg"] for r in failed] == [
        "orphan report: environment gcp (platform gcp) is on cloud gcp, which has no orphan report; the orphan report "
        "covers the environments on aws and on the clouds whose profile names a rows file"
    ]
    assert not out.exists()
