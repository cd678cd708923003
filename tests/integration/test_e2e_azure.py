"""azure end to end through ansible-playbook: `-i inventories/azure playbooks/azure.yml --tags teardown`.

The kind cluster is the Kubernetes emulator as a bootstrapped azure environment leaves it (the management
and workload Clusters, Kustomizations, CAPI operator provider objects, bootstrap secrets, the kind
marker); a thread plays CAPZ by letting the workload Cluster go once its deletion is requested; helm and
kind are recording stand-ins; Azure is the ARM double (tests/substrate/arm_double.py), seeded with what
the tree, CAPZ and the arc-federate hook create, and with decoys that must survive.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.integration.test_teardown_aws_role import capa, failed, ran, writes
from tests.substrate.arm_double import ArmDouble
from tests.substrate.bootstrapped import CLUSTER, KS, install_bootstrapped_tools, seed_bootstrapped_kind
from tests.substrate.fixtures import REPO
from tests.substrate.gitops import gitops_checkout, ready_kustomizations
from tests.substrate.http_double import HttpDouble, Reply

pytestmark = pytest.mark.slow
MGMT = "swedencentral-management"
WORKLOAD = "swedencentral-workload"
PROVIDERS = (
    ("CoreProvider", "capi-system", "cluster-api"),
    ("InfrastructureProvider", "capz-system", "azure"),
    ("AddonProvider", "caaph-system", "helm"),
)
TOKEN = "arm-token-e2e"
CAPZ = "sigs.k8s.io_cluster-api-provider-azure_cluster_%s"
OWNED_TAG = {"krops-environment": "azure"}
MI = "/providers/Microsoft.ManagedIdentity/userAssignedIdentities/"
ARC = "/providers/Microsoft.Kubernetes/connectedClusters/"


@pytest.fixture
def arm():
    double = ArmDouble(token=TOKEN, page_size=2, delete_polls=2)
    yield double
    double.stop()


def seed_azure(arm):
    """(owned ids, decoy ids): what krops, CAPZ and the hook created, and what only looks like it."""
    g = arm.rg_id
    owned = [
        arm.add_group(MGMT, tags=OWNED_TAG),
        arm.add_group(WORKLOAD, tags={CAPZ % WORKLOAD: "owned"}),
        arm.add_group("swedencentral-data", tags=OWNED_TAG),
        arm.add(g(MGMT) + ARC + "krops-mgmt", tags=OWNED_TAG, location="swedencentral"),
    ]
    ident = arm.add(g(MGMT) + MI + "krops-capz", tags=OWNED_TAG, location="swedencentral")
    for name, issuer in (
        ("krops-kind-capz-manager", "https://kind.example/issuer"),
        ("krops-kind-azureserviceoperator-default", "https://kind.example/issuer"),
        ("krops-mgmt-capz-manager", "https://aks.example/mgmt"),
    ):
        arm.add(ident + "/federatedIdentityCredentials/" + name, properties={"issuer": issuer})
    arm.add(g("swedencentral-data") + "/providers/Microsoft.Storage/storageAccounts/kropsdata", tags=OWNED_TAG)
    # decoys: another environment's group and Arc cluster, an unlabelled lookalike, a prefix-sharing CAPZ
    # cluster's group, a credential that only shares the hook's prefix on someone else's identity
    decoys = [
        arm.add_group("swedencentral-staging", tags={"krops-environment": "azure-staging"}),
        arm.add(g("swedencentral-staging") + ARC + "krops-mgmt", tags={"krops-environment": "azure-staging"}),
        arm.add_group("swedencentral-management-old"),
        arm.add_group(WORKLOAD + "-2", tags={CAPZ % (WORKLOAD + "-2"): "owned"}),
        arm.add_group("team-identities"),
    ]
    theirs = arm.add(g("team-identities") + MI + "shared", tags={})
    decoys += [theirs, arm.add(theirs + "/federatedIdentityCredentials/krops-kind-capz-manager-2")]
    return owned, decoys


@pytest.fixture
def world(kind_api, fake_bins, arm):
    seed_bootstrapped_kind(
        kind_api,
        "azure",
        [(*provider, "v1.25.1") for provider in PROVIDERS],
        clusters=(MGMT, WORKLOAD),
        kustomizations=("flux-system", "aso-workload-identity"),
    )
    install_bootstrapped_tools(fake_bins, kind_api)
    return seed_azure(arm)


def run_teardown(ansible_playbook, kind_api, fake_bins, arm, tmp_path, *args, env=None):
    extra = {
        "teardown_kind_kubeconfig": str(kind_api.kubeconfig_path),
        "teardown_mgmt_kubeconfig": str(tmp_path / "no-mgmt.yaml"),
        "teardown_azure_endpoint": arm.url,
        "teardown_azure_poll_interval": 1,
    }
    full_env = {
        "PATH": fake_bins.path_env,
        "HOME": str(tmp_path),
        "BOOTSTRAP_CONFIG": str(REPO / "bootstrap.toml"),
        "AZURE_SUBSCRIPTION_ID": arm.subscription,
        "AZURE_ACCESS_TOKEN": TOKEN,
    }
    full_env.update(env or {})
    return ansible_playbook(
        REPO / "playbooks" / "azure.yml",
        "--tags",
        "teardown",
        "-e",
        json.dumps(extra),
        *args,
        inventory=REPO / "inventories" / "azure",
        env=full_env,
    )


def snapshot(arm):
    return {i: json.dumps(o, sort_keys=True) for i, o in arm.objects.items()}


def test_azure_teardown_check_mode_prints_the_whole_plan_and_changes_nothing(
    world, kind_api, fake_bins, arm, ansible_playbook, tmp_path
):
    owned, decoys = world
    before = snapshot(arm)
    rc, out, err = run_teardown(ansible_playbook, kind_api, fake_bins, arm, tmp_path, "--check")
    assert rc == 0, (failed(out), err[-3000:])
    steps = ran(out, "Show the teardown plan")["msg"]
    assert steps[0] == "Teardown of azure on the kind cluster (context kind-mgmt) [check mode: nothing is deleted]"
    assert [s.split(". ", 1)[0] for s in steps[1:]] == [str(n) for n in range(1, len(steps))]
    assert any("delete the workload Clusters swedencentral-workload" in s for s in steps)
    assert any("remove the azure resources" in s for s in steps), steps
    assert steps[-1].endswith(
        "delete the kind cluster mgmt (marker kube-system/krops-bootstrap: environment azure, kind cluster mgmt)"
    )
    shown = ran(out, "Show the Azure teardown")["msg"]
    ident = arm.rg_id(MGMT) + MI + "krops-capz/federatedIdentityCredentials/"
    assert shown == [
        f"delete federated-credential {ident}krops-kind-azureserviceoperator-default (bootstrap credential on identity "
        "krops-capz (tag krops-environment=azure))",
        f"delete federated-credential {ident}krops-kind-capz-manager (bootstrap credential on identity krops-capz "
        "(tag krops-environment=azure))",
        f"delete arc-connected-cluster {arm.rg_id(MGMT)}{ARC}krops-mgmt (tag krops-environment=azure)",
        f"delete resource-group {arm.rg_id(WORKLOAD)} (tag {CAPZ % WORKLOAD}=owned)",
        f"delete resource-group {arm.rg_id('swedencentral-data')} (tag krops-environment=azure)",
        f"delete resource-group {arm.rg_id(MGMT)} (tag krops-environment=azure)",
        "left alone: ",
    ]
    assert not arm.writes(), arm.writes()
    assert snapshot(arm) == before
    assert not writes(kind_api), writes(kind_api)
    assert {k: len(kind_api.list(*k)) for k in (CLUSTER, KS)} == {CLUSTER: 2, KS: 2}
    assert not [c for c in fake_bins.calls("kind") if c["argv"][:1] == ["delete"]]


def test_azure_teardown_removes_what_krops_owns_and_every_decoy_survives(
    world, kind_api, fake_bins, arm, ansible_playbook, tmp_path
):
    owned, decoys = world
    threads = capa(kind_api, [WORKLOAD])
    rc, out, err = run_teardown(ansible_playbook, kind_api, fake_bins, arm, tmp_path)
    for t in threads:
        t.join(5)
    assert rc == 0, (failed(out), err[-3000:])
    assert [c["metadata"]["name"] for c in kind_api.list(*CLUSTER)] == [MGMT]
    assert not [o for o in owned if arm.exists(o)]
    assert [d for d in decoys if not arm.exists(d)] == []
    assert arm.groups() == sorted(
        ["swedencentral-management-old", "swedencentral-staging", "swedencentral-workload-2", "team-identities"]
    )
    # nothing outside the plan was written: only DELETEs, each of an owned id
    deletes = [p for m, p in arm.writes()]
    assert {m for m, p in arm.writes()} == {"DELETE"}
    assert deletes[-1] == arm.rg_id(MGMT), deletes  # the management cluster's group last
    assert all(d.startswith(arm.rg_id(MGMT)) or d in owned for d in deletes)
    # every accepted delete was followed through its operation, not by guessing
    assert any("/operationStatuses/" in p for m, p, a in arm.calls) and any(
        "/operationresults/" in p for m, p, a in arm.calls
    )
    sweep = ran(out, "Delete the federated credentials, the Arc resource and the resource groups")
    assert {r["outcome"] for r in sweep["results"]} == {"deleted"} and sweep["leftovers"] == []
    kind_deletes = [c for c in fake_bins.calls("kind") if c["argv"][:1] == ["delete"]]
    assert len(kind_deletes) == 1


def test_an_owned_resource_group_under_a_lock_fails_the_run_and_is_named(
    world, kind_api, fake_bins, arm, ansible_playbook, tmp_path
):
    owned, decoys = world
    data = arm.rg_id("swedencentral-data")
    lock = arm.add_lock(data + "/providers/Microsoft.Storage/storageAccounts/kropsdata", "keep-data")
    threads = capa(kind_api, [WORKLOAD])
    rc, out, err = run_teardown(ansible_playbook, kind_api, fake_bins, arm, tmp_path)
    for t in threads:
        t.join(5)
    assert rc != 0
    [(task, msg)] = failed(out)
    assert task.endswith("Delete the federated credentials, the Arc resource and the resource groups")
    assert msg == (
        f"Azure resources of azure left behind: {data}; see results for the reason of each, then run the teardown again"
    )
    sweep = ran(out, "Delete the federated credentials, the Arc resource and the resource groups")
    [refused] = [r for r in sweep["results"] if r["outcome"] == "failed"]
    assert refused["id"] == data
    assert refused["error"] == (
        f"resource-group swedencentral-data is under management lock(s) {lock}; krops never removes a lock: remove "
        "it if the group should go, then run the teardown again"
    )
    assert ("DELETE", data) not in arm.writes()  # known to fail: not even tried
    # krops never removes a lock: the group, its contents and the lock are all still there
    assert arm.exists(data) and arm.exists(lock)
    assert not [w for w in arm.writes() if "Microsoft.Authorization" in w[1]]
    # the rest of what krops owns is gone, the decoys are not; kind stays (the run stopped)
    assert not [o for o in owned if o != data and arm.exists(o)]
    assert all(arm.exists(d) for d in decoys)
    assert not [c for c in fake_bins.calls("kind") if c["argv"][:1] == ["delete"]]


def test_check_mode_shows_a_lock_in_the_plan(world, kind_api, fake_bins, arm, ansible_playbook, tmp_path):
    data = arm.rg_id("swedencentral-data")
    lock = arm.add_lock(data, "keep-data", level="ReadOnly")
    rc, out, err = run_teardown(ansible_playbook, kind_api, fake_bins, arm, tmp_path, "--check")
    assert rc == 0, (failed(out), err[-3000:])
    shown = ran(out, "Show the Azure teardown")["msg"]
    assert (
        f"delete resource-group {data} (tag krops-environment=azure) - locked by {lock}: this delete will fail" in shown
    )
    assert not arm.writes()


def test_a_delete_operation_that_ends_failed_is_a_leftover(world, kind_api, fake_bins, arm, ansible_playbook, tmp_path):
    owned, decoys = world
    data = arm.rg_id("swedencentral-data")
    arm.fail[data.lower()] = ("StorageAccountOperationInProgress", "a storage operation is still running")
    threads = capa(kind_api, [WORKLOAD])
    rc, out, err = run_teardown(ansible_playbook, kind_api, fake_bins, arm, tmp_path)
    for t in threads:
        t.join(5)
    assert rc != 0
    sweep = ran(out, "Delete the federated credentials, the Arc resource and the resource groups")
    [bad] = [r for r in sweep["results"] if r["outcome"] == "failed"]
    assert bad["id"] == data
    assert bad["error"].startswith("the delete operation failed: GET ")
    assert bad["error"].endswith("answered 409: a storage operation is still running")
    assert sweep["leftovers"] == [data] and arm.exists(data)


# --- the pivot waits for aso-workload-identity ----------------------------------------------------------

AZURE_PIVOT_ENV = """
[environments.azure]
kind = "azure"
mgmt-region = "swedencentral"
sync = "git"
sync-path = "mgmt/azure"
mgmt-cluster = "local-management"
mgmt-ready-timeout = "40m"
infra-provider-namespace = "capz-system"
infra-provider-name = "azure"
provider-manifests = ["mgmt/core-provider.yaml"]
pivot-wait-kustomizations = ["aso-workload-identity"]
"""


@pytest.fixture
def pivot_world(tmp_path, kind_api, mgmt_api, fake_bins, oci_registry):
    """test_pivot's source and target emulators, with an azure environment whose move waits for a Kustomization."""
    from tests.integration import test_pivot

    test_pivot.install_mover(fake_bins)
    operator = test_pivot.Operator(mgmt_api)  # plays the CAPI operator on the target
    world = test_pivot.World(tmp_path, kind_api, mgmt_api, fake_bins, oci_registry)
    toml = world.repo / "bootstrap.toml"
    toml.write_text(toml.read_text() + AZURE_PIVOT_ENV)
    kind_api.create(
        {
            "apiVersion": KS[0],
            "kind": KS[1],
            "metadata": {"name": "aso-workload-identity", "namespace": "flux-system"},
            "spec": {"interval": "5m", "path": "./mgmt/azure/aso-workload-identity", "prune": True},
        }
    )
    yield world
    operator.stop.set()
    operator.thread.join(2)


def pivot_args(world, **extra):
    return world.args(environment="azure", target_server=world.mgmt.url, **extra)


def test_the_azure_move_does_not_start_before_aso_workload_identity_is_ready(pivot_world, run_module):
    from ansible_collections.krops.platform.plugins.modules import capi_pivot

    world = pivot_world
    before = world.suspended()
    world.kind.set_condition(
        *KS,
        "aso-workload-identity",
        "flux-system",
        status="False",
        reason="HealthCheckFailed",
        message="FederatedIdentityCredential krops-mgmt-capz-manager not Ready",
    )
    result = run_module(capi_pivot, pivot_args(world, mgmt_ready_timeout=2))
    assert result.failed
    assert result["msg"] == (
        "pivot phase preflight failed: the move cannot start: Kustomizations not Ready on the kind cluster within 2s "
        "(mgmt-ready-timeout; "
        "bootstrap.toml pivot-wait-kustomizations): aso-workload-identity: HealthCheckFailed "
        "(FederatedIdentityCredential krops-mgmt-capz-manager not Ready); nothing was paused or suspended. Check them "
        "with `flux get kustomizations` on kind"
    ), result["msg"]
    assert not world.bins.calls("clusterctl")
    assert world.suspended() == before
    checked = run_module(capi_pivot, pivot_args(world), check_mode=True)
    assert checked.failed and "(check mode does not wait)" in checked["msg"]


def test_the_azure_move_waits_for_aso_workload_identity_then_moves(pivot_world, run_module):
    import threading
    import time

    from ansible_collections.krops.platform.plugins.modules import capi_pivot

    world = pivot_world
    became_ready = []

    def reconcile():  # Flux on kind: the health checks pass a moment after the pivot started waiting
        time.sleep(1.5)
        world.kind.set_condition(*KS, "aso-workload-identity", "flux-system")
        became_ready.append(time.monotonic())

    thread = threading.Thread(target=reconcile, daemon=True)
    thread.start()
    result = run_module(capi_pivot, pivot_args(world, mgmt_ready_timeout=30))
    thread.join(5)
    assert not result.failed, result.get("msg")
    assert became_ready
    assert ">>> waiting up to 30s for Kustomizations aso-workload-identity on the kind cluster" in result["progress"]
    assert [c for c in world.bins.calls("clusterctl") if "move" in c["argv"]]
    assert world.mgmt.exists(*CLUSTER, "local-management", "default")


# --- the arc-federate post-kind hook ------------------------------------------------------------------

# az stand-in for `az connectedk8s connect|delete`: checks the arguments the real command requires (name,
# resource group; for connect a kubeconfig file holding the context) and does what the real one does at ARM:
# PUT (or DELETE) the Microsoft.Kubernetes/connectedClusters resource. Arc publishing the issuer is the
# test's part (a moment later, as the real service does).
AZ = r"""#!{python}
import json, os, sys, urllib.request
import yaml
argv = sys.argv[1:]
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "calls.jsonl"), "a") as log:
    log.write(json.dumps({{"tool": "az", "argv": argv, "env": {{}}, "cwd": os.getcwd(), "stdin": ""}}) + "\n")
def opt(name):
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None
if argv[:1] != ["connectedk8s"] or argv[1:2] not in (["connect"], ["delete"]):
    sys.stderr.write("ERROR: 'x' is misspelled or not recognized by the system.\n"); sys.exit(2)
for required in ("--name", "--resource-group"):
    if not opt(required):
        sys.stderr.write("ERROR: the following arguments are required: %s\n" % required); sys.exit(2)
rid = "/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Kubernetes/connectedClusters/%s" % (
    os.environ["AZURE_SUBSCRIPTION_ID"], opt("--resource-group"), opt("--name"))
url = os.environ["AZ_STANDIN_ARM"] + rid + "?api-version=2024-07-15-preview"
headers = {{"Authorization": "Bearer " + os.environ["AZ_STANDIN_TOKEN"], "Content-Type": "application/json"}}
def follow(answer):  # az waits for the long-running operation, as the real CLI does (--no-wait not given)
    status_url = answer.headers.get("Azure-AsyncOperation")
    while status_url:
        with urllib.request.urlopen(urllib.request.Request(status_url, headers=headers), timeout=10) as poll:
            state = json.load(poll)["status"]
        if state in ("Succeeded", "Failed", "Canceled"):
            if state != "Succeeded":
                sys.stderr.write("ERROR: operation %s\n" % state); sys.exit(1)
            return
if argv[1] == "delete":
    follow(urllib.request.urlopen(urllib.request.Request(url, method="DELETE", headers=headers), timeout=10))
    sys.exit(0)
config = yaml.safe_load(open(opt("--kube-config")))
if opt("--kube-context") not in [c["name"] for c in config.get("contexts") or []]:
    sys.stderr.write("ERROR: context %s not found in %s\n" % (opt("--kube-context"), opt("--kube-config"))); sys.exit(1)
tags = dict(t.split("=", 1) for t in argv[argv.index("--tags") + 1 :] if "=" in t) if "--tags" in argv else {{}}
body = {{"location": opt("--location"), "identity": {{"type": "SystemAssigned"}}, "tags": tags,
        "properties": {{"oidcIssuerProfile": {{"enabled": "--enable-oidc-issuer" in argv}},
                        "securityProfile": {{"workloadIdentity": {{"enabled": "--enable-workload-identity" in argv}}}}}}}}
follow(urllib.request.urlopen(
    urllib.request.Request(url, data=json.dumps(body).encode(), method="PUT", headers=headers), timeout=10))
"""

ISSUER = "https://oidc.arc.example/tenant/krops-mgmt/"


def publish_issuer(arm, rid, issuer=ISSUER, delay=0.5):
    """Azure Arc: once the connected cluster is PUT (from now on), its OIDC issuer appears a moment later."""
    import threading
    import time

    start = len(arm.calls)

    def run():
        # Watch for the PUT for as long as a loaded machine may take to reach the hook (the lifecycle
        # calls this before bootstrap starts; 30 s was too short under load and the hook then timed out).
        end = time.monotonic() + 900
        while time.monotonic() < end:
            if any(m == "PUT" and p.lower() == rid.lower() for m, p, dummy in arm.calls[start:]):
                time.sleep(delay)
                with arm.lock:
                    obj = arm.get(rid)
                    profile = obj["properties"].setdefault("oidcIssuerProfile", {})
                    if profile.get("enabled"):
                        profile["issuerUrl"] = issuer
                return
            time.sleep(0.05)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def hook_play(kind_api, arm, created):
    return [
        {
            "name": "arc-federate hook",
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {
                "krops_environment": "azure",
                "bootstrap_config_file": str(REPO / "bootstrap.toml"),
                "bootstrap_kind": {"created": created},
                "bootstrap_kind_kubeconfig": str(kind_api.kubeconfig_path),
                "bootstrap_azure_endpoint": arm.url,
                "bootstrap_azure_poll_interval": 1,
                "bootstrap_azure_issuer_timeout": 20,
            },
            "tasks": [
                {
                    "name": "Run the hook",
                    "ansible.builtin.include_role": {
                        "name": "krops.platform.bootstrap",
                        "tasks_from": "hook_arc_federate",
                    },
                }
            ],
        }
    ]


def hook_tasks(out):
    return {
        t["task"]["name"].split(" : ", 1)[-1]: h
        for p in out.get("plays", [])
        for t in p["tasks"]
        for h in t["hosts"].values()
    }


def test_arc_federate_hook_creates_the_credentials_the_tree_and_teardown_expect(
    kind_api, fake_bins, arm, ansible_playbook, tmp_path
):
    import yaml

    arm.add_group(MGMT, tags=OWNED_TAG)
    ident = arm.add(arm.rg_id(MGMT) + MI + "krops-capz", tags=OWNED_TAG, location="swedencentral")
    arc = arm.rg_id(MGMT) + ARC + "krops-mgmt"
    fake_bins.install("az", AZ.format(python=sys.executable))
    env = {
        "PATH": fake_bins.path_env,
        "HOME": str(tmp_path),
        "AZURE_SUBSCRIPTION_ID": arm.subscription,
        "AZURE_ACCESS_TOKEN": TOKEN,
        "AZ_STANDIN_ARM": arm.url,
        "AZ_STANDIN_TOKEN": TOKEN,
    }
    thread = publish_issuer(arm, arc)
    rc, out, err = ansible_playbook(hook_play(kind_api, arm, created=True), env=env)
    thread.join(5)
    assert rc == 0, (failed(out), err[-3000:])
    connect = [c["argv"] for c in fake_bins.calls("az")]
    assert connect == [
        [
            "connectedk8s",
            "connect",
            "--name",
            "krops-mgmt",
            "--resource-group",
            MGMT,
            "--location",
            "swedencentral",
            "--kube-config",
            str(kind_api.kubeconfig_path),
            "--kube-context",
            "kind-mgmt",
            "--enable-oidc-issuer",
            "--enable-workload-identity",
            "--tags",
            "krops-environment=azure",
        ]
    ]  # no delete: nothing was connected before
    assert arm.get(arc)["tags"] == OWNED_TAG  # the teardown's ownership tag
    defaults = yaml.safe_load((REPO / "roles/bootstrap/defaults/main.yml").read_text())
    for item in defaults["bootstrap_azure_federated_subjects"]:
        cred = arm.get(ident + "/federatedIdentityCredentials/" + item["name"])
        assert cred["properties"] == {
            "issuer": ISSUER,
            "subject": item["subject"],
            "audiences": ["api://AzureADTokenExchange"],
            "provisioningState": "Succeeded",
        }
    federated = hook_tasks(out)["Federate the CAPZ and ASO service accounts with the krops identity"]
    assert federated["changed"] is True and {c["state"] for c in federated["credentials"]} == {"created"}
    # the same credentials are the ones the teardown deletes, by exact name
    teardown = yaml.safe_load((REPO / "roles/teardown/defaults/main.yml").read_text())
    assert sorted(teardown["teardown_azure_federated_credential_names"]) == sorted(
        c["name"] for c in federated["credentials"]
    )

    # kind reused: nothing is connected again and the credentials are unchanged
    rc, out, err = ansible_playbook(hook_play(kind_api, arm, created=False), env=env)
    assert rc == 0, (failed(out), err[-3000:])
    assert len(fake_bins.calls("az")) == 1
    again = hook_tasks(out)["Federate the CAPZ and ASO service accounts with the krops identity"]
    assert again["changed"] is False and {c["state"] for c in again["credentials"]} == {"unchanged"}
    puts = [w for w in arm.writes() if w[0] == "PUT"]
    assert len(puts) == 3  # the connect and two credentials, once

    # kind recreated: the old connection goes, a new one comes with a new issuer, the credentials follow it
    thread = publish_issuer(arm, arc, delay=1.5)
    rc, out, err = ansible_playbook(hook_play(kind_api, arm, created=True), env=env)
    thread.join(5)
    assert rc == 0, (failed(out), err[-3000:])
    assert [c["argv"][:2] for c in fake_bins.calls("az")][1:] == [
        ["connectedk8s", "delete"],
        ["connectedk8s", "connect"],
    ]


def test_arc_federate_hook_without_the_identity_says_what_to_create(
    kind_api, fake_bins, arm, ansible_playbook, tmp_path
):
    arm.add_group(MGMT, tags=OWNED_TAG)
    arc = arm.rg_id(MGMT) + ARC + "krops-mgmt"
    fake_bins.install("az", AZ.format(python=sys.executable))
    env = {
        "PATH": fake_bins.path_env,
        "HOME": str(tmp_path),
        "AZURE_SUBSCRIPTION_ID": arm.subscription,
        "AZURE_ACCESS_TOKEN": TOKEN,
        "AZ_STANDIN_ARM": arm.url,
        "AZ_STANDIN_TOKEN": TOKEN,
    }
    thread = publish_issuer(arm, arc)
    rc, out, err = ansible_playbook(hook_play(kind_api, arm, created=True), env=env)
    thread.join(5)
    assert rc != 0
    [(task, msg)] = failed(out)
    assert msg == (
        f"user-assigned identity krops-capz not found in resource group {MGMT}: create it once as "
        "docs/environments/azure.md describes (prerequisites)"
    )


# --- the ARM double refuses what ARM refuses ------------------------------------------------------------


def test_the_arm_double_answers_like_arm(arm):
    import urllib.error
    import urllib.request

    def call(method, path, body=None, token=TOKEN, version="2021-04-01"):
        url = arm.url + path + (f"?api-version={version}" if version else "")
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = json.dumps(body).encode() if body is not None else None
        try:
            with urllib.request.urlopen(urllib.request.Request(url, data, headers, method=method), timeout=10) as r:
                raw = r.read()
                return r.status, (json.loads(raw) if raw else None), dict(r.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read()), dict(exc.headers)

    group = arm.rg_id("g1")
    assert call("GET", group, version=None)[:2] == (
        400,
        {
            "error": {
                "code": "MissingApiVersionParameter",
                "message": "The api-version query parameter (?api-version=) is required for all requests.",
            }
        },
    )
    assert call("GET", group, version="2019-01-01")[1]["error"]["code"] == "InvalidApiVersionParameter"
    assert call("GET", group, token=None)[:2][0] == 401
    assert call("GET", group, token="stolen")[1]["error"]["code"] == "InvalidAuthenticationToken"
    assert call("GET", group)[1]["error"]["code"] == "ResourceGroupNotFound"
    assert call("PUT", group, {"tags": {}})[1]["error"]["code"] == "LocationRequired"
    assert (
        call("PUT", group, {"location": "swedencentral", "tags": {"krops.io/environment": "azure"}})[1]["error"]["code"]
        == "InvalidTagNameCharacters"
    )  # why Azure tags spell it krops-environment
    assert call("PUT", group, {"location": "swedencentral", "tags": OWNED_TAG})[0] == 201
    arc = group + ARC + "c1"
    assert call("GET", arc, version="2024-01-01")[1]["error"]["code"] == "ResourceNotFound"
    assert call("GET", arc, version="2021-04-01")[1]["error"]["code"] == "NoRegisteredProviderFound"
    assert call("DELETE", arc, version="2024-01-01")[0] == 204  # deleting an absent resource is not an error
    status, body, headers = call("PUT", arc, {"location": "swedencentral"}, version="2024-01-01")
    assert status == 201 and body["properties"]["provisioningState"] == "Accepted" and "Azure-AsyncOperation" in headers
    assert call("PUT", arc, {"location": "swedencentral"}, version="2024-01-01")[1]["error"]["code"] == (
        "AnotherOperationInProgress"
    )
    states = [
        call("GET", urlsplit_path(headers["Azure-AsyncOperation"]), version="2024-01-01")[1]["status"] for i in "12"
    ]
    assert states == ["InProgress", "Succeeded"] and arm.get(arc)["properties"]["provisioningState"] == "Succeeded"
    lock = arm.add_lock(arc)
    assert call("DELETE", group)[1]["error"]["code"] == "ScopeLocked"  # a lock inside blocks the group
    del arm.objects[lock.lower()]
    status, body, headers = call("DELETE", group)
    assert status == 202 and "Location" in headers and "Azure-AsyncOperation" not in headers
    assert call("GET", group)[1]["properties"]["provisioningState"] == "Deleting"
    assert call("PUT", arc, {"location": "swedencentral"}, version="2024-01-01")[1]["error"]["code"] == (
        "ResourceGroupBeingDeleted"
    )
    polls = [call("GET", urlsplit_path(headers["Location"]))[0] for dummy in range(2)]
    assert polls == [202, 204] and not arm.exists(group) and not arm.exists(arc)
    for name in ("a", "b", "c"):
        arm.add_group(name)
    first = call("GET", f"/subscriptions/{arm.subscription}/resourcegroups")[1]
    assert len(first["value"]) == 2 and "$skiptoken=2" in first["nextLink"] and "api-version=" in first["nextLink"]


def urlsplit_path(url):
    from urllib.parse import urlsplit

    return urlsplit(url).path


# --- the whole lifecycle on the emulated host (tests/substrate/lifecycle.py) ------------------------------


class GitHubDouble(HttpDouble):
    """The two GitHub REST calls preflight makes for Git sync: the repository and the branch (with its commit)."""

    def __init__(self, repository, branch, commit, token):
        self.token = token
        self.answers = {
            f"/repos/{repository}": {"full_name": repository},
            f"/repos/{repository}/branches/{branch}": {"name": branch, "commit": {"sha": commit}},
        }
        super().__init__()

    def respond(self, request):
        if request.method != "GET":
            return Reply(404, {"message": "Not Found"})
        if request.authorization not in (f"Bearer {self.token}", f"token {self.token}"):
            return Reply(401, {"message": "Bad credentials"})
        body = self.answers.get(request.path)
        return Reply(200, body) if body else Reply(404, {"message": "Not Found"})


def test_azure_lifecycle_bootstrap_pivot_teardown_on_the_emulated_host(arm, tmp_path):
    """ansible-playbook -i inventories/azure playbooks/azure.yml --tags bootstrap, then --tags pivot, then
    --tags teardown, on the emulated host (tests/substrate/lifecycle.py: kind, Flux with SOPS decryption, CAPI,
    clusterctl move) with CAPZ, ASO and AKS over the ARM double (tests/substrate/cloud_operators.py).

    After the teardown every Azure resource the run created (and the ones the one-time set-up made for it) is
    gone, the decoys of other environments and lookalikes survive, and no API server is left.
    """
    from tests.substrate.cloud_operators import AzureOperators
    from tests.substrate.lifecycle import emulated_world

    repo, head = gitops_checkout(
        tmp_path,
        (
            "mgmt/azure/azure-vars.yaml",
            'AZURE_SUBSCRIPTION_ID: "00000000-0000-0000-0000-000000000000"',
            f'AZURE_SUBSCRIPTION_ID: "{arm.subscription}"',
        ),
    )
    github = GitHubDouble("krops/krops", "main", head, "ghp_test")
    # the one-time set-up (docs/environments/azure.md): the management group and the identity krops-capz
    arm.add_group(MGMT, tags=OWNED_TAG)
    ident = arm.add(arm.rg_id(MGMT) + MI + "krops-capz", tags=OWNED_TAG, location="swedencentral")
    decoys = [
        arm.add_group("swedencentral-staging", tags={"krops-environment": "azure-staging"}),
        arm.add(arm.rg_id("swedencentral-staging") + ARC + "krops-mgmt", tags={"krops-environment": "azure-staging"}),
        arm.add_group("swedencentral-management-old"),
        arm.add_group(WORKLOAD + "-2", tags={CAPZ % (WORKLOAD + "-2"): "owned"}),
        arm.add_group("team-identities"),
    ]
    theirs = arm.add(arm.rg_id("team-identities") + MI + "shared", tags={})
    decoys += [theirs, arm.add(theirs + "/federatedIdentityCredentials/krops-kind-capz-manager-2")]
    before = set(arm.objects)
    # a short host folder: ansible-playbook's multiprocessing puts unix sockets (at most 108 bytes) in TMPDIR,
    # which under pytest-xdist's longer tmp_path overflowed ("Local RPC server did not start")
    host = Path(tempfile.mkdtemp(prefix="krops-az-", dir="/tmp"))
    try:
        with emulated_world(
            host, environment="azure", git_checkouts={"https://github.com/krops/krops": str(repo)}
        ) as world:
            AzureOperators(world.world, arm, world.capi)
            key = world.home / ".config" / "krops" / "age.agekey"
            key.parent.mkdir(parents=True, exist_ok=True)
            key.write_text((REPO / "tests/integration/fixtures/azure-test-age.agekey").read_text())
            key.chmod(0o600)
            (world.bin / "az").write_text(AZ.format(python=sys.executable))
            (world.bin / "az").chmod(0o755)
            env = {
                "AZURE_SUBSCRIPTION_ID": arm.subscription,
                "AZURE_ACCESS_TOKEN": TOKEN,
                "AZ_STANDIN_ARM": arm.url,
                "AZ_STANDIN_TOKEN": TOKEN,
                "GITHUB_TOKEN": "ghp_test",
                "BOOTSTRAP_CONFIG": str(REPO / "bootstrap.toml"),
            }
            extra = {
                "bootstrap_azure_endpoint": arm.url,
                "bootstrap_azure_poll_interval": 1,
                "bootstrap_azure_issuer_timeout": 20,
                "preflight_github_api_url": github.url,
                "teardown_azure_endpoint": arm.url,
                "teardown_azure_poll_interval": 1,
            }
            publish_issuer(arm, arm.rg_id(MGMT) + ARC + "krops-mgmt")

            def run(tag):
                return world.playbook(
                    "playbooks/azure.yml",
                    "--tags",
                    tag,
                    "-e",
                    json.dumps(extra),
                    inventory="inventories/azure",
                    env=env,
                )

            rc, out, err = run("bootstrap")
            assert rc == 0, (failed(out), err[-3000:])
            # kind in the world, Arc-connected and federated at ARM; the whole chain Ready, SOPS decrypted
            kind = world.cluster("mgmt")
            assert arm.get(arm.rg_id(MGMT) + ARC + "krops-mgmt")["tags"] == OWNED_TAG
            for name in ("krops-kind-capz-manager", "krops-kind-azureserviceoperator-default"):
                assert arm.get(ident + "/federatedIdentityCredentials/" + name)["properties"]["issuer"] == ISSUER
            assert len(ready_kustomizations(kind)) == 12, ready_kustomizations(kind)
            # served only because CAPZ read ADDITIONAL_ASO_CRDS from the decrypted azure-variables
            assert kind.exists(
                "apiextensions.k8s.io/v1", "CustomResourceDefinition", "flexibleservers.dbforpostgresql.azure.com"
            )
            data = arm.rg_id("swedencentral-data")
            for rid in (
                arm.rg_id(WORKLOAD) + "/providers/Microsoft.ContainerService/managedClusters/" + WORKLOAD,
                arm.rg_id(MGMT) + "/providers/Microsoft.ContainerService/managedClusters/" + MGMT + "/agentPools/pool0",
                data
                + "/providers/Microsoft.Storage/storageAccounts/kropsdata00000/blobServices/default/containers/data",
                data + "/providers/Microsoft.DBforPostgreSQL/flexibleServers/krops-swedencentral-00000",
                ident + "/federatedIdentityCredentials/krops-mgmt-capz-manager",
            ):
                assert arm.exists(rid), rid
            assert arm.get(data)["tags"]["krops-environment"] == "azure"
            assert arm.get(data)["tags"]["krops-expires-at"].endswith("Z")  # a run tag, a string

            def rvs():
                return {
                    (a.name, k): o["metadata"].get("resourceVersion")
                    for a in list(world.world.clusters.values())
                    for k, o in list(a.objects.items())
                }

            # the world comes to rest: no controller keeps rewriting what it wrote (no busy loop)
            changed = None
            for attempt in range(10):
                settled = rvs()
                time.sleep(1.0)
                changed = {k: v for k, v in rvs().items() if settled.get(k) != v}
                if not changed:
                    break
            assert changed == {}

            rc, out, err = run("pivot")
            assert rc == 0, (failed(out), err[-3000:])
            assert world.kind_clusters == {}
            mgmt = world.cluster(MGMT)
            assert mgmt.exists("cluster.x-k8s.io/v1beta2", "Cluster", MGMT, "default")
            assert len(ready_kustomizations(mgmt)) == 12, ready_kustomizations(mgmt)
            # the move changed nothing in Azure: the ASO resources were paused while their Cluster moved
            assert arm.exists(arm.rg_id(MGMT) + "/providers/Microsoft.ContainerService/managedClusters/" + MGMT)

            rc, out, err = run("teardown")
            assert rc == 0, (failed(out), err[-3000:])
            assert sorted(set(arm.objects) - before) == []  # nothing the run created is left
            assert sorted(
                o for o in before if o not in arm.objects and not any(o == d.lower() for d in decoys)
            ) == sorted({arm.rg_id(MGMT).lower(), ident.lower()})
            assert all(arm.exists(d) for d in decoys)
            assert world.leftovers()["api_servers"] == [] and world.kind_clusters == {}
        assert world.world.errors == []
    finally:
        github.stop()
        shutil.rmtree(host, ignore_errors=True)


# --- defects the lifecycle found ----------------------------------------------------------------------


def test_postbuild_substitution_keeps_a_timestamp_value_a_string_as_flux_does():
    """Flux decodes the substituted YAML with sigs.k8s.io/yaml (yaml.v2), which keeps timestamp-like plain
    scalars strings: an ASO tag krops-expires-at: ${KROPS_EXPIRES_AT} stays a string. PyYAML's safe loader
    made it a datetime, so the emulated Flux (and validate) rejected the aso-workload-identity tree."""
    from ansible_collections.krops.platform.plugins.module_utils import render

    obj = {"spec": {"tags": {"krops-expires-at": "${KROPS_EXPIRES_AT:=none}", "n": "${N}"}}}
    out = render.substitute(obj, {"KROPS_EXPIRES_AT": "2026-12-08T12:00:00Z", "N": "42"})
    assert out["spec"]["tags"]["krops-expires-at"] == "2026-12-08T12:00:00Z"
    assert out["spec"]["tags"]["n"] == 42  # a number is a number, in Flux too


def test_the_pivot_can_hand_on_the_run_tags_configmap_the_bootstrap_wrote():
    """The bootstrap writes the krops-run ConfigMap with the four run tags and their GCP label forms
    (KROPS_*_LABEL); the pivot hands that ConfigMap's data to flux_handoff as run_tags, which rejected
    the label forms ("unknown key KROPS_EXPIRES_AT_LABEL"): every pivot after a bootstrap failed."""
    from ansible_collections.krops.platform.plugins.module_utils import flux, ownership

    written = {"KROPS_RUN_ID": "r1", "KROPS_REVISION": "main@sha1:0a1b", "KROPS_EXPIRES_AT": "2026-12-02T08:00:00Z"}
    written["KROPS_RUN_KIND"] = "ci"
    written.update(ownership.gcp_run_labels(written))
    assert flux.run_tags(None, written, "azure", "24h") == {k: written[k] for k in flux.RUN_TAG_KEYS}
    with pytest.raises(flux.FluxError, match="unknown key KROPS_OTHER"):
        flux.run_tags(None, {"KROPS_OTHER": "x"}, "azure", "24h")


# --- the cloud side of the emulated world (tests/substrate/flux_sops.py, cloud_operators.py) -------------


def _sops_world(key_text):
    import base64

    from tests.substrate.strict_api import StrictKubeEmulator

    api = StrictKubeEmulator("sops")
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "flux-system"}})
    data = {"age.agekey": base64.b64encode(key_text.encode()).decode()}
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "sops-age", "namespace": "flux-system"},
            "data": data,
        }
    )
    return api


def _capz_objects():
    from ansible_collections.krops.platform.plugins.module_utils import render

    return render.build(str(REPO / "mgmt/azure/capz-system"), render.find_kustomize())


KS_SOPS = {
    "metadata": {"name": "capz-system", "namespace": "flux-system"},
    "spec": {"decryption": {"provider": "sops", "secretRef": {"name": "sops-age"}}},
}


def test_emulated_flux_decrypts_the_trees_sops_secret_with_the_real_sops():
    from tests.substrate.flux_sops import decrypt_objects
    from tests.substrate.flux_world import Failure

    api = _sops_world((REPO / "tests/integration/fixtures/azure-test-age.agekey").read_text())
    [secret] = [o for o in decrypt_objects(api, KS_SOPS, _capz_objects(), Failure) if o["kind"] == "Secret"]
    assert "sops" not in secret and secret["stringData"]["EXP_MACHINE_POOL"] == "true"
    assert "dbforpostgresql.azure.com/FlexibleServer" in secret["stringData"]["ADDITIONAL_ASO_CRDS"]


def test_emulated_flux_fails_the_build_with_sops_error_for_a_wrong_key_or_a_missing_secret():
    import subprocess

    from tests.substrate.flux_sops import decrypt_objects
    from tests.substrate.flux_world import Failure

    other = subprocess.run(["age-keygen"], capture_output=True, text=True, check=True).stdout
    with pytest.raises(Failure) as caught:
        decrypt_objects(_sops_world(other), KS_SOPS, _capz_objects(), Failure)
    assert caught.value.reason == "BuildFailed"
    assert caught.value.message.startswith(
        "decryption failed for 'azure-variables': failed to decrypt and format 'capz-system/azure-variables' "
        "Secret data: Failed to get the data key required to decrypt the SOPS file."
    )
    assert "age1svsxj0m5a3083w6ncrhkdt5urn5g2c85726lleljnrtka5hn89vq6w5q02: FAILED" in caught.value.message
    missing = dict(KS_SOPS, spec={"decryption": {"provider": "sops", "secretRef": {"name": "nope"}}})
    with pytest.raises(Failure, match='decryption secret error: secrets "nope" not found'):
        decrypt_objects(_sops_world(other), missing, _capz_objects(), Failure)


class _Capi:
    def __init__(self):
        self.plugins, self.workloads = {}, {}

    def plug_in(self, kind, plugin):
        self.plugins[kind] = plugin


class _World:
    def __init__(self):
        self.controllers, self.clusters = [], {}


def test_emulated_capz_serves_only_the_aso_crds_it_is_asked_for(arm):
    from tests.substrate.cloud_operators import AzureOperators
    from tests.substrate.strict_api import StrictKubeEmulator

    api = StrictKubeEmulator("capz")
    for ns in ("capz-system",):
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    ops = AzureOperators(_World(), arm, _Capi())
    provider = {"metadata": {"name": "azure", "namespace": "capz-system"}, "spec": {"configSecret": {"name": "v"}}}
    assert ops.install_capz(api, provider) == 'failed to get configSecret capz-system/v: secrets "v" not found'
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "v", "namespace": "capz-system"}}
    api.create(dict(secret, stringData={"ADDITIONAL_ASO_CRDS": "storage.azure.com/StorageAccount"}))
    assert ops.install_capz(api, provider) is None
    crd = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    assert api.exists(*crd, "storageaccounts.storage.azure.com")
    assert api.exists(*crd, "azureasomanagedcontrolplanes.infrastructure.cluster.x-k8s.io")
    assert not api.exists(*crd, "flexibleservers.dbforpostgresql.azure.com")  # nobody asked for it
    api.patch(
        api.resource_for("v1", "Secret"),
        "capz-system",
        "v",
        "merge",
        {"stringData": {"ADDITIONAL_ASO_CRDS": "cache.azure.com/*"}},
    )
    assert (
        ops.install_capz(api, provider)
        == "ADDITIONAL_ASO_CRDS: cache.azure.com/* is not a kind the emulated ASO serves"
    )


def test_emulated_aso_waits_for_the_owner_and_deletes_in_azure_unless_detached(arm):
    from tests.substrate.cloud_operators import AzureOperators
    from tests.substrate.strict_api import StrictKubeEmulator, catalog

    api = StrictKubeEmulator("aso")
    for group, kind in (
        ("resources.azure.com", "ResourceGroup"),
        ("managedidentity.azure.com", "UserAssignedIdentity"),
    ):
        api.create(catalog().crd(group, kind))
    api.install_bundle("capi-operator")
    api.create(
        {
            "apiVersion": "operator.cluster.x-k8s.io/v1alpha2",
            "kind": "InfrastructureProvider",
            "metadata": {"name": "azure", "namespace": "default"},
            "spec": {"version": "v1.25.1"},
        }
    )
    ops = AzureOperators(_World(), arm, _Capi())
    uai = {
        "apiVersion": "managedidentity.azure.com/v1api20230131",
        "kind": "UserAssignedIdentity",
        "metadata": {"name": "id1", "namespace": "default"},
        "spec": {"location": "swedencentral", "owner": {"name": "rg1"}, "tags": {"krops-environment": "azure"}},
    }
    api.create(uai)
    ops.reconcile(api)
    ready = api.get(uai["apiVersion"], "UserAssignedIdentity", "id1", "default")["status"]["conditions"][0]
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "WaitingForOwner",
        "Owner default/rg1 ResourceGroup is not ready",
    )
    assert arm.objects == {}
    api.create(
        {
            "apiVersion": "resources.azure.com/v1api20200601",
            "kind": "ResourceGroup",
            "metadata": {"name": "rg1", "namespace": "default"},
            "spec": {"location": "swedencentral"},
        }
    )
    ops.reconcile(api)
    ops.reconcile(api)
    rid = arm.rg_id("rg1") + MI + "id1"
    assert arm.get(rid)["tags"] == {"krops-environment": "azure"}
    settled = api._last_rv
    ops.reconcile(api)
    assert api._last_rv == settled  # nothing changes once everything is Ready: the world can settle
    api.patch(
        api.resource_for(uai["apiVersion"], "UserAssignedIdentity"),
        "default",
        "id1",
        "merge",
        {"metadata": {"annotations": {"serviceoperator.azure.com/reconcile-policy": "detach-on-delete"}}},
    )
    api.remove(uai["apiVersion"], "UserAssignedIdentity", "id1", "default")
    ops.reconcile(api)
    assert arm.exists(rid) and not api.exists(uai["apiVersion"], "UserAssignedIdentity", "id1", "default")
    api.remove("resources.azure.com/v1api20200601", "ResourceGroup", "rg1", "default")
    ops.reconcile(api)
    assert not arm.exists(arm.rg_id("rg1")) and not arm.exists(rid)  # the group goes with what is in it
