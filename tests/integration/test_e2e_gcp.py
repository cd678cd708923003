"""gcp end to end through ansible-playbook: the wif-federate hook and the teardown, against the
Kubernetes emulator and the Google double (tests/substrate/google_double.py).

- The hook (roles/bootstrap/tasks/hook_wif_federate.yml) creates pool `krops` when it is absent and
  provider `kind` for the kind cluster's issuer and keys, writes ConfigMap flux-system/gcp-wif, and
  changes nothing on a re-run; new keys update the provider; a soft-deleted pool is undeleted. What it
  registers works: STS accepts a token signed by kind's key for that provider.
- `ansible-playbook -i inventories/gcp playbooks/gcp.yml --tags teardown`, first --check (the complete
  plan, nothing changed) then real: the gcp resources the workload Cluster waits for go first, CAPG
  (played by a thread) can then delete the workload VPC, and the final sweep leaves only the decoys.
- The whole lifecycle on the emulated host (tests/substrate/lifecycle.py) with CAPG, GKE, the Config
  Connector operator (its mirrored OCI artifact on a real docker-registry over TLS) and Config Connector
  over the Google double (tests/substrate/gcp_operators.py): a plain run (bootstrap and pivot), then
  --tags teardown --check and --tags teardown; the decoys survive and nothing owned is left.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.integration.test_teardown_cloud import MGMT_VPC, TEAM_VPC, WORKLOAD_VPC, gcp_decoys, gcp_world
from tests.substrate.bootstrapped import (
    CAPI_FINALIZER,
    CLUSTER,
    KS,
    PROVIDER_API,
    install_bootstrapped_tools,
    seed_bootstrapped_kind,
)
from tests.substrate.fixtures import REPO
from tests.substrate.gitops import gitops_checkout, ready_kustomizations
from tests.substrate.google_double import GoogleDouble

pytestmark = pytest.mark.slow
R = "krops.platform.teardown : "
ISSUER = "https://kubernetes.default.svc.cluster.local"
PROVIDERS = (
    ("CoreProvider", "capi-system", "cluster-api"),
    ("InfrastructureProvider", "capg-system", "gcp"),
    ("AddonProvider", "caaph-system", "helm"),
)
POOL = "/iam/projects/p1/locations/global/workloadIdentityPools"


@pytest.fixture
def google():
    double = GoogleDouble(polls=2, page_size=2)
    yield double
    double.stop()


def signing_key(kid="kind-1"):
    """A kind service-account signing key: (private key, JWKS text as /openid/v1/jwks serves it)."""
    from cryptography.hazmat.primitives.asymmetric import rsa
    from jwt.algorithms import RSAAlgorithm

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update(kid=kid, use="sig", alg="RS256")
    return key, json.dumps({"keys": [jwk]})


def serve_oidc(fake_bins, jwks):
    """kubectl get --raw answers kind's discovery document and keys (the API server's endpoints)."""
    rules = fake_bins.rules.setdefault("kubectl", [])
    rules[:] = [r for r in rules if r["match"] not in ("/.well-known/openid-configuration", "/openid/v1/jwks")]
    fake_bins.answer(
        "kubectl",
        "/.well-known/openid-configuration",
        stdout=json.dumps({"issuer": ISSUER, "jwks_uri": "https://172.18.0.2:6443/openid/v1/jwks"}),
    )
    fake_bins.answer("kubectl", "/openid/v1/jwks", stdout=jwks)


def hook_play(kind_api, google):
    return [
        {
            "name": "wif-federate",
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {
                "krops_environment": "gcp",
                "krops_config_file": str(REPO / "bootstrap.toml"),
                "bootstrap_kind_kubeconfig": str(kind_api.kubeconfig_path),
                "bootstrap_kind_context": "kind-mgmt",
                "bootstrap_gcp_iam_url": f"{google.url}/iam",
                "bootstrap_gcp_project": "p1",
                "bootstrap_gcp_access_token": "gcp-token",
                "bootstrap_gcp_operation_delay": 0,
            },
            "tasks": [
                {
                    "name": "The post-kind hook",
                    "ansible.builtin.include_role": {
                        "name": "krops.platform.bootstrap",
                        "tasks_from": "hook_wif_federate",
                    },
                }
            ],
        }
    ]


def changed_tasks(out):
    return [
        t["task"]["name"]
        for p in out.get("plays", [])
        for t in p["tasks"]
        for h in t["hosts"].values()
        if h.get("changed")
    ]


def sts_exchange(google, key, subject, kid="kind-1"):
    """What google-auth's external_account credential sends STS for a pod's service-account token."""
    import jwt

    now = int(time.time())
    token = jwt.encode(
        {"iss": ISSUER, "aud": [ISSUER], "sub": subject, "iat": now, "exp": now + 600},
        key,
        algorithm="RS256",
        headers={"kid": kid},
    )
    form = {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "audience": f"//iam.googleapis.com/projects/{google.number}/locations/global/workloadIdentityPools/krops/providers/kind",
        "scope": "https://www.googleapis.com/auth/cloud-platform",
        "requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "subject_token": token,
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
    }
    request = urllib.request.Request(
        f"{google.url}/sts/v1/token",
        data=urllib.parse.urlencode(form).encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def test_wif_federate_creates_pool_provider_kind_and_the_configmap(
    kind_api, fake_bins, google, ansible_playbook, tmp_path
):
    key, jwks = signing_key()
    serve_oidc(fake_bins, jwks)
    rc, out, err = ansible_playbook(hook_play(kind_api, google), env={"PATH": fake_bins.path_env})
    assert rc == 0, (err[-2000:], json.dumps(out)[-3000:])
    assert google.pools["krops"]["state"] == "ACTIVE"
    assert set(google.providers) == {("krops", "kind")}  # never mgmt: the tree declares that one
    provider = google.providers[("krops", "kind")]
    assert provider["oidc"] == {"issuerUri": ISSUER, "allowedAudiences": [ISSUER], "jwksJson": jwks}
    assert provider["attributeMapping"] == {"google.subject": "assertion.sub"}
    assert provider["attributeCondition"] == (
        "assertion.sub in ['system:serviceaccount:capg-system:capg-manager', "
        "'system:serviceaccount:cnrm-system:cnrm-controller-manager']"
    )
    assert google.writes() == [
        ("POST", POOL),
        ("POST", f"{POOL}/krops/providers"),
    ]
    assert [r[2] for r in google.requests if r[0] == "POST"] == [
        {"workloadIdentityPoolId": "krops"},
        {"workloadIdentityPoolProviderId": "kind"},
    ]
    assert all(op["left"] == 0 for op in google.operations.values())  # both operations were polled to done
    configmap = kind_api.get("v1", "ConfigMap", "gcp-wif", "flux-system")
    assert configmap["data"] == {"GCP_WIF_PROVIDER": "kind"}
    assert configmap["metadata"]["labels"]["krops.io/environment"] == "gcp"
    # what it registered works: STS accepts a pod token signed by kind's key for provider kind
    status, answer = sts_exchange(google, key, "system:serviceaccount:capg-system:capg-manager")
    assert status == 200 and answer["token_type"] == "Bearer", answer
    other = signing_key()[0]
    status, answer = sts_exchange(google, other, "system:serviceaccount:capg-system:capg-manager")
    assert status == 400 and answer["error"] == "invalid_grant"

    # a re-run changes nothing anywhere
    before = len(google.writes())
    rc, out, err = ansible_playbook(hook_play(kind_api, google), env={"PATH": fake_bins.path_env})
    assert rc == 0, err[-2000:]
    assert changed_tasks(out) == [] and len(google.writes()) == before

    # a recreated kind cluster has new keys: the provider is updated, by updateMask
    new_key, new_jwks = signing_key("kind-2")
    serve_oidc(fake_bins, new_jwks)
    rc, out, err = ansible_playbook(hook_play(kind_api, google), env={"PATH": fake_bins.path_env})
    assert rc == 0, err[-2000:]
    assert google.writes()[before:] == [("PATCH", f"{POOL}/krops/providers/kind")]
    assert google.providers[("krops", "kind")]["oidc"]["jwksJson"] == new_jwks
    assert (
        sts_exchange(google, new_key, "system:serviceaccount:cnrm-system:cnrm-controller-manager", "kind-2")[0] == 200
    )


def test_wif_federate_undeletes_a_soft_deleted_pool_and_fails_clearly_without_a_token(
    kind_api, fake_bins, google, ansible_playbook
):
    google.pools["krops"] = {"name": google._pool_name("krops"), "state": "DELETED", "displayName": "krops"}
    serve_oidc(fake_bins, signing_key()[1])
    rc, out, err = ansible_playbook(hook_play(kind_api, google), env={"PATH": fake_bins.path_env})
    assert rc == 0, (err[-2000:], json.dumps(out)[-3000:])
    assert google.writes()[:1] == [("POST", f"{POOL}/krops:undelete")]
    assert google.pools["krops"]["state"] == "ACTIVE" and ("krops", "kind") in google.providers

    play = hook_play(kind_api, google)
    play[0]["vars"]["bootstrap_gcp_access_token"] = ""
    rc, out, err = ansible_playbook(play, env={"PATH": fake_bins.path_env})
    assert rc != 0
    messages = [
        h.get("msg") for p in out.get("plays", []) for t in p["tasks"] for h in t["hosts"].values() if h.get("failed")
    ]
    assert messages == [
        "wif-federate needs GOOGLE_OAUTH_ACCESS_TOKEN (gcloud auth print-access-token) and GCP_PROJECT (or "
        "bootstrap_gcp_access_token and bootstrap_gcp_project), and an https issuer from the kind cluster (got "
        f'"{ISSUER}").'
    ]


# --- teardown through the gcp playbook ----------------------------------------------------------------


@pytest.fixture
def world(kind_api, fake_bins, google):
    """The kind cluster as a gcp bootstrap leaves it (before the pivot) and the project it built."""
    seed_bootstrapped_kind(
        kind_api,
        "gcp",
        [(*provider, "v1.12.0") for provider in PROVIDERS],
        clusters=(MGMT_VPC, WORKLOAD_VPC),
        run_tags={},
    )
    install_bootstrapped_tools(fake_bins, kind_api)
    gcp_world(google)
    # the tree's names: the Cloud SQL instance bootstrap.toml unprotects; a decoy with protection it does not name
    google.sql["krops-europe-north1-workload-db"] = google.sql.pop("krops-db")
    google.sql["krops-europe-north1-workload-db"]["name"] = "krops-europe-north1-workload-db"
    return google


def capg(kind_api, google, outcome):
    """Play CAPG: once the workload Cluster's deletion is requested, delete its GKE cluster, subnet, router
    and VPC through the Google API; the Cluster goes only when all of that succeeded (else it stays stuck)."""

    def call(method, path):
        request = urllib.request.Request(
            google.url + path, method=method, headers={"Authorization": "Bearer gcp-token"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, json.load(answer)
        except urllib.error.HTTPError as exc:
            return exc.code, json.load(exc)

    def wait_op(scope, body):
        for dummy in range(20):
            status, op = call("GET", f"/compute/projects/p1/{scope}/operations/{body['name']}")
            if op.get("status") == "DONE":
                return
        raise AssertionError(op)

    def run():
        seen = kind_api.wait_for_event(
            lambda t, o: (
                t == "MODIFIED"
                and o["kind"] == "Cluster"
                and o["metadata"]["name"] == WORKLOAD_VPC
                and o["metadata"].get("deletionTimestamp")
            ),
            timeout=60,
        )
        outcome["deletion_seen"] = bool(seen)
        outcome["sql_left"] = sorted(google.sql)
        status, body = call("DELETE", f"/container/projects/p1/locations/europe-north1/clusters/{WORKLOAD_VPC}")
        for dummy in range(20):
            if (
                call("GET", f"/container/projects/p1/locations/europe-north1/operations/{body['name']}")[1].get(
                    "status"
                )
                == "DONE"
            ):
                break
        for scope, rel in (
            ("regions/europe-north1", f"regions/europe-north1/routers/{WORKLOAD_VPC}-nat"),
            ("regions/europe-north1", f"regions/europe-north1/subnetworks/{WORKLOAD_VPC}-nodes"),
            ("global", f"global/networks/{WORKLOAD_VPC}"),
        ):
            status, body = call("DELETE", f"/compute/projects/p1/{rel}")
            outcome.setdefault("capg", []).append((rel, status, body.get("error", {}).get("message")))
            if status != 200:
                return  # CAPG retries forever; the Cluster stays
            wait_op(scope, body)
        kind_api.clear_finalizers(*CLUSTER, WORKLOAD_VPC, "default")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def run_teardown(ansible_playbook, kind_api, fake_bins, google, tmp_path, *args):
    extra = {
        "teardown_kind_kubeconfig": str(kind_api.kubeconfig_path),
        "teardown_mgmt_kubeconfig": str(tmp_path / "no-mgmt.yaml"),
        "teardown_gcp_base_url": google.url,
        "teardown_gcp_poll_interval": 0,
    }
    env = {
        "PATH": fake_bins.path_env,
        "HOME": str(tmp_path),
        "BOOTSTRAP_CONFIG": str(REPO / "bootstrap.toml"),
        "GCP_PROJECT": "p1",
        "GCP_ACCESS_TOKEN": "gcp-token",
        "CLUSTER_DELETE_TIMEOUT": "60s",
    }
    return ansible_playbook(
        REPO / "playbooks" / "gcp.yml",
        "--tags",
        "teardown",
        "-e",
        json.dumps(extra),
        *args,
        inventory=REPO / "inventories" / "gcp",
        env=env,
    )


def ran(out, name):
    found = [
        t["hosts"]["localhost"]
        for p in out.get("plays", [])
        for t in p["tasks"]
        if t["task"]["name"] == R + name and not t["hosts"].get("localhost", {}).get("skipped")
    ]
    return found


def failed(out):
    return [
        (t["task"]["name"], h.get("msg"))
        for p in out.get("plays", [])
        for t in p["tasks"]
        for h in t["hosts"].values()
        if h.get("failed")
    ]


PLAN = [
    "Teardown of gcp on the kind cluster (context kind-mgmt) [check mode: nothing is deleted]",
    "1. suspend every Flux Kustomization and Flux Operator object on the kind cluster",
    "2. remove the gcp resources the workload Clusters' deletion waits for (Cloud SQL instances, private services "
    "access connections and their ranges; ownership-filtered)",
    f"3. delete the workload Clusters {WORKLOAD_VPC} through the provider and wait (60s)",
    "4. delete the CAPI providers (add-on, runtime extension, IPAM, control plane, bootstrap, infrastructure, core) "
    "so nothing recreates "
    "cloud resources",
    "5. helm uninstall flux and flux-operator in flux-system",
    "6. delete the bootstrap secrets and run tags in flux-system",
    "7. remove the gcp resources this environment created, the management cluster included (ownership-filtered)",
    "8. delete the kind cluster mgmt (marker kube-system/krops-bootstrap: environment gcp, kind cluster mgmt)",
]


def test_gcp_teardown_check_mode_prints_the_complete_plan_and_changes_nothing(
    world, kind_api, fake_bins, ansible_playbook, tmp_path
):
    google = world
    before = google.inventory()
    objects = {k: kind_api.list(*k) for k in (CLUSTER, KS)}
    rc, out, err = run_teardown(ansible_playbook, kind_api, fake_bins, google, tmp_path, "--check")
    assert rc == 0, (failed(out), err[-3000:])
    [plan] = ran(out, "Show the teardown plan")
    assert plan["msg"] == PLAN
    first, final = ran(out, "Show the GCP teardown")
    assert first["msg"] == [
        "delete cloudsql-instance krops-europe-north1-workload-db (label krops-environment=gcp)",
        f"remove private-services-connection servicenetworking-googleapis-com (private services access of owned VPC {WORKLOAD_VPC})",
        f"delete private-services-range krops-psa (VPC_PEERING range of owned VPC {WORKLOAD_VPC})",
        # every VPC's contents are listed in each phase (a VPC holding anything foreign stays whole), so the
        # gcp-staging GKE cluster of that name is reported here too
        f"left alone: aws-db, {WORKLOAD_VPC}",
    ]
    assert final["msg"][0] == first["msg"][0] and len(final["msg"]) == 14
    assert final["msg"][3:5] == [
        f"delete gke-cluster {MGMT_VPC} (named in bootstrap.toml, in owned VPC {MGMT_VPC})",
        f"delete gke-cluster {WORKLOAD_VPC} (named in bootstrap.toml, in owned VPC {WORKLOAD_VPC})",
    ]
    assert not google.writes()
    assert google.inventory() == before
    assert {k: kind_api.list(*k) for k in (CLUSTER, KS)} == objects
    assert not [c for c in fake_bins.calls("helm") if "uninstall" in c["argv"]]
    assert not [c for c in fake_bins.calls("kind") if c["argv"][:1] == ["delete"]]


def test_gcp_teardown_removes_what_krops_owns_in_the_order_the_apis_need(
    world, kind_api, fake_bins, ansible_playbook, tmp_path
):
    google = world
    outcome = {}
    thread = capg(kind_api, google, outcome)
    rc, out, err = run_teardown(ansible_playbook, kind_api, fake_bins, google, tmp_path)
    thread.join(10)
    assert rc == 0, (failed(out), outcome, err[-3000:])
    # CAPG saw the Cluster's deletion only after the database and the private services access were gone,
    # and could then delete the workload VPC
    assert outcome["deletion_seen"] and outcome["sql_left"] == ["aws-db", "team-db"]
    assert [(rel, status) for rel, status, dummy in outcome["capg"]] == [
        (f"regions/europe-north1/routers/{WORKLOAD_VPC}-nat", 200),
        (f"regions/europe-north1/subnetworks/{WORKLOAD_VPC}-nodes", 200),
        (f"global/networks/{WORKLOAD_VPC}", 200),
    ]
    # the Kubernetes side: the workload Cluster gone, the management Cluster kept, kind deleted last
    assert [c["metadata"]["name"] for c in kind_api.list(*CLUSTER)] == [MGMT_VPC]
    assert CAPI_FINALIZER in kind_api.get(*CLUSTER, MGMT_VPC, "default")["metadata"]["finalizers"]
    assert [c["argv"][:4] for c in fake_bins.calls("kind") if c["argv"][:1] == ["delete"]] == [
        ["delete", "cluster", "--name", "mgmt"]
    ]
    # Google: only the decoys are left; the protection was switched off only for the named instance
    assert google.inventory() == gcp_decoys(google)
    assert google.sql["team-db"]["settings"]["deletionProtectionEnabled"] is True
    patches = [p for m, p in google.writes() if m == "PATCH"]
    assert patches == ["/sqladmin/projects/p1/instances/krops-europe-north1-workload-db"]
    first, final = ran(
        out, "Delete Cloud SQL, private services access, GKE, buckets, firewall rules, routers, subnets and VPCs"
    )
    assert first["phase"] == "before-clusters" and final["phase"] == "all"
    assert [(r["type"], r["outcome"]) for r in first["results"]] == [
        ("cloudsql-instance", "deleted"),
        ("private-services-connection", "deleted"),
        ("private-services-range", "deleted"),
    ]
    assert {r["outcome"] for r in final["results"]} == {"deleted"}
    assert (TEAM_VPC in json.dumps(final["not_owned"])) is False  # never even considered


def test_gcp_teardown_fails_and_names_an_owned_resource_it_cannot_delete(
    world, kind_api, fake_bins, ansible_playbook, tmp_path
):
    google = world
    # a bucket labelled ours whose objects cannot go: the bucket stays and the run fails naming it
    google.add_bucket("krops-stuck", labels={"krops-environment": "gcp"}, objects=[("held", 1)])
    original = google._storage

    def storage(method, path, query, body):
        if method == "DELETE" and path.startswith("/storage/b/krops-stuck/o/"):
            return 403, {"error": {"code": 403, "message": "Object 'held' is under active Event-Based hold"}}
        return original(method, path, query, body)

    google._storage = storage
    thread = capg(kind_api, google, {})
    rc, out, err = run_teardown(ansible_playbook, kind_api, fake_bins, google, tmp_path)
    thread.join(10)
    assert rc != 0
    [(task, msg)] = failed(out)
    assert (
        task == R + "Delete Cloud SQL, private services access, GKE, buckets, firewall rules, routers, subnets and VPCs"
    )
    assert msg == (
        "GCP resources of project p1 left behind at stage buckets: bucket/krops-stuck; see results for the reason of "
        "each, then run the teardown again"
    )
    assert ("storage", "krops-stuck") in google.inventory()
    assert gcp_decoys(google) <= google.inventory()
    # the run stopped before the VPCs and before kind
    assert f"global/networks/{MGMT_VPC}" in google.compute
    assert not [c for c in fake_bins.calls("kind") if c["argv"][:1] == ["delete"]]


# --- the whole lifecycle --------------------------------------------------------------------------------

KCC_SUBJECTS = ("capg-system:capg-manager", "cnrm-system:cnrm-controller-manager")
SITE_PROJECT = "krops-example"  # mgmt/gcp/gcp-vars: the project the tree names


def one_time_setup(google):
    """docs/environments/gcp.md, Prerequisites: krops-capg, the pool krops, and the grants that let the two controllers' federated
    identities act as it (the tree's kcc-identity declares them too, but Config Connector needs them first)."""
    email = f"krops-capg@{SITE_PROJECT}.iam.gserviceaccount.com"
    google.service_accounts[email] = {"email": email, "displayName": "krops CAPG and Config Connector"}
    google.pools["krops"] = {"name": google._pool_name("krops"), "state": "ACTIVE", "displayName": "krops"}
    principal = (
        f"principal://iam.googleapis.com/projects/{google.number}/locations/global/workloadIdentityPools/krops/subject/"
    )
    google.sa_policies[email] = {
        "version": 1,
        "etag": "BwAAAA==",
        "bindings": [
            {
                "role": "roles/iam.workloadIdentityUser",
                "members": [principal + "system:serviceaccount:" + s for s in KCC_SUBJECTS],
            }
        ],
    }


def lifecycle_decoys(google):
    """What looks like the gcp environment's but is not: another team's VPC with private services access and a
    protected database, a lookalike GKE cluster name in it, another environment's bucket and instance."""
    google.add_network(TEAM_VPC)
    google.add_compute("subnetworks", "team-subnet", TEAM_VPC, region="europe-north1")
    google.add_compute("firewalls", "team-ssh", TEAM_VPC)
    google.add_compute(
        "addresses", "team-psa", TEAM_VPC, purpose="VPC_PEERING", labels={"krops-environment": "gcp-staging"}
    )
    google.add_connection(TEAM_VPC, ranges=["team-psa"])
    google.add_gke("europe-north1-management-2", "europe-north1", TEAM_VPC)
    google.add_sql("team-db", TEAM_VPC, protected=True)
    google.add_sql("krops-europe-north1-workload-db-old", TEAM_VPC, labels={"krops-environment": "gcp-staging"})
    google.add_bucket("krops-123456789012-europe-north1-workload-data-old", labels={"krops-environment": "gcp-staging"})
    google.add_bucket("team-bucket", objects=[("a", 1)])
    # IAM lookalikes (no labels there: bootstrap.toml's exact names decide): an account sharing the tree's
    # account's prefix, another member of the roles the tree grants, a provider in pool krops that
    # bootstrap.toml does not name, and one named kind in another pool
    lookalike = f"krops-europe-north1-workload-2@{SITE_PROJECT}.iam.gserviceaccount.com"
    google.service_accounts[lookalike] = {"email": lookalike, "displayName": "another team"}
    google.project_policy["bindings"] = [
        {"role": "roles/cloudsql.client", "members": ["user:dba@example.com", f"serviceAccount:{lookalike}"]},
        {"role": "roles/cloudsql.instanceUser", "members": [f"serviceAccount:{lookalike}"]},
    ]
    google.pools["team"] = {"name": google._pool_name("team"), "state": "ACTIVE", "displayName": "team"}
    for pool, provider in (("krops", "ci-01"), ("team", "kind")):
        google.providers[(pool, provider)] = {
            "name": f"{google._pool_name(pool)}/providers/{provider}",
            "state": "ACTIVE",
            "attributeMapping": {"google.subject": "assertion.sub"},
            "oidc": {"issuerUri": "https://token.actions.githubusercontent.com"},
        }


def _tls_registry(root):
    """The real docker-registry over HTTPS (the emulated API servers' test CA) on a free port: ghcr.io here."""
    import shutil

    import yaml

    from tests.substrate.fixtures import ManagedProcess, free_port
    from tests.substrate.strict_api import tls_material

    cert, dummy, folder = tls_material()
    port = free_port()
    config = root / "ghcr.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": 0.1,
                "log": {"level": "warn"},
                "storage": {"filesystem": {"rootdirectory": str(root / "ghcr")}},
                "http": {
                    "addr": f"127.0.0.1:{port}",
                    "tls": {"certificate": f"{folder}/ca.crt", "key": f"{folder}/server.key"},
                },
            }
        )
    )
    process = ManagedProcess(
        [shutil.which("docker-registry") or "/usr/bin/docker-registry", "serve", str(config)], root / "ghcr.log"
    )
    import ssl

    context = ssl.create_default_context(cafile=f"{folder}/ca.crt")
    for dummy in range(100):
        try:
            urllib.request.urlopen(f"https://127.0.0.1:{port}/v2/", context=context, timeout=1)
            break
        except Exception:  # pylint: disable=broad-except  # not up yet
            time.sleep(0.1)
    return process, f"127.0.0.1:{port}", f"{folder}/ca.crt"


def test_gcp_bootstrap_pivot_teardown_on_the_emulated_world(tmp_path, monkeypatch):
    """ansible-playbook -i inventories/gcp playbooks/gcp.yml (bootstrap and pivot), then --tags teardown --check
    (changes nothing) and --tags teardown, on the emulated host (tests/substrate/lifecycle.py) with CAPG, GKE,
    the Config Connector operator and Config Connector over the Google double (tests/substrate/gcp_operators.py).
    Afterwards nothing the run created is left in Google, the decoys are untouched, and no API server is left."""
    import shutil
    import tempfile
    from pathlib import Path

    from ansible_collections.krops.platform.plugins.module_utils import oci

    from tests.integration.test_e2e_azure import GitHubDouble
    from tests.substrate.flux_world import FluxController
    from tests.substrate.gcp_operators import GcpOperators, operator_artifact
    from tests.substrate.lifecycle import emulated_world

    started = time.monotonic()
    google = GoogleDouble(project=SITE_PROJECT, polls=1, page_size=2)
    repo, head = gitops_checkout(tmp_path)
    github = GitHubDouble("krops/krops", "main", head, "ghp_test")
    host = Path(tempfile.mkdtemp(prefix="krops-gcp-", dir="/tmp"))
    registry, ghcr, ca = _tls_registry(host)
    try:
        monkeypatch.setenv("SSL_CERT_FILE", ca)  # the emulated source-controller trusts the test CA
        # the mirrored Config Connector operator (docs/environments/gcp.md, "Mirroring")
        folder = operator_artifact(host / "operator-system")
        oci.push_artifact(
            ghcr,
            ["."],
            repository="krops/config-connector-operator",
            tag="1.155.1",
            root=str(folder),
            source="gs://configconnector-operator/1.155.1",
            revision="1.155.1",
        )
        one_time_setup(google)
        lifecycle_decoys(google)
        decoys = {k: json.dumps(v, sort_keys=True) for k, v in google.inventory_objects().items()}
        with emulated_world(
            host, environment="gcp", git_checkouts={"https://github.com/krops/krops": str(repo)}
        ) as world:
            ops = GcpOperators(world.world, google, world.capi)
            flux = next(c for c in world.world.controllers if isinstance(c, FluxController))
            flux.registry_aliases["ghcr.io"] = ghcr
            key = world.home / ".config" / "krops" / "age.agekey"
            key.parent.mkdir(parents=True, exist_ok=True)
            key.write_text((REPO / "tests/integration/fixtures/gcp-sops-test.agekey").read_text())
            key.chmod(0o600)
            env = {
                "GOOGLE_OAUTH_ACCESS_TOKEN": "gcp-token",
                "GCP_PROJECT": SITE_PROJECT,
                "GCP_ACCESS_TOKEN": "gcp-token",
                "GITHUB_TOKEN": "ghp_test",
                "BOOTSTRAP_CONFIG": str(REPO / "bootstrap.toml"),
            }
            extra = {
                "bootstrap_gcp_iam_url": f"{google.url}/iam",
                "bootstrap_gcp_operation_delay": 0,
                "preflight_github_api_url": github.url,
                "teardown_gcp_base_url": google.url,
                "teardown_gcp_poll_interval": 0,
            }

            def run(*args):
                return world.playbook(
                    "playbooks/gcp.yml", *args, "-e", json.dumps(extra), inventory="inventories/gcp", env=env
                )

            rc, out, err = run()
            timings = {"bootstrap+pivot": round(time.monotonic() - started, 1)}
            assert rc == 0, (failed(out), err[-3000:], ops.errors)
            assert world.kind_clusters == {}
            mgmt = world.cluster("europe-north1-management")
            assert len(ready_kustomizations(mgmt)) == 17, ready_kustomizations(mgmt)
            assert sorted(google.gke) == sorted(
                ["locations/europe-north1/clusters/europe-north1-management-2"]
                + [f"locations/europe-north1/clusters/{n}" for n in (MGMT_VPC, WORKLOAD_VPC)]
            )
            assert google.providers[("krops", "kind")]["state"] == "ACTIVE"
            assert google.providers[("krops", "mgmt")]["oidc"]["issuerUri"] == mgmt.service_account_issuer
            bucket = google.buckets["krops-123456789012-europe-north1-workload-data"]
            assert bucket["labels"]["krops-environment"] == "gcp" and bucket["labels"]["managed-by-cnrm"] == "true"
            # the run labels reach Google in their GCP-safe forms (flux_handoff's KROPS_*_LABEL), not the defaults
            labels = google.sql["krops-europe-north1-workload-db"]["settings"]["userLabels"]
            assert set(labels) >= {"krops-run-id", "krops-revision", "krops-expires-at", "krops-run-kind"}, labels
            assert labels["krops-expires-at"] != "none" and labels["krops-expires-at"].endswith("z"), labels
            assert google.sql["krops-europe-north1-workload-db"]["settings"]["ipConfiguration"][
                "privateNetwork"
            ].endswith("/networks/" + WORKLOAD_VPC)
            gke = google.gke[f"locations/europe-north1/clusters/{WORKLOAD_VPC}"]
            assert (
                gke["resourceLabels"] == {}
                and gke["nodePools"][0]["config"]["resourceLabels"]["krops-environment"] == "gcp"
            )
            assert google.compute[f"global/networks/{WORKLOAD_VPC}"]["description"] == f"capg-cluster-{WORKLOAD_VPC}"
            # after the pivot Config Connector and CAPG on the management cluster authenticate through provider mgmt
            assert ops.errors.get((mgmt.url, "kcc")) is None and ops.errors.get((mgmt.url, "capg")) is None

            before = {k: json.dumps(v, sort_keys=True) for k, v in google.inventory_objects().items()}
            writes = len(google.writes())
            rc, out, err = run("--tags", "teardown", "--check")
            assert rc == 0, (failed(out), err[-3000:])
            assert (
                len(google.writes()) == writes
                and {k: json.dumps(v, sort_keys=True) for k, v in google.inventory_objects().items()} == before
            )
            # Config Connector's actuation is paused first (the emulated one re-reconciles every pass and would
            # recreate what the teardown deletes): check mode shows the pause and does not make it
            [pause] = ran(out, "Pause Config Connector's actuation before the cloud deletions (actuationMode Paused)")
            assert pause["changed"] is True
            [kcc] = mgmt.list("core.cnrm.cloud.google.com/v1beta1", "ConfigConnector")
            assert "actuationMode" not in kcc["spec"] and mgmt.url not in ops.paused_seen
            # and nothing on the management cluster: no Kustomization suspended, both Clusters kept
            assert [k["metadata"]["name"] for k in mgmt.list(*KS) if k["spec"].get("suspend")] == []
            assert sorted(
                c["metadata"]["name"] for c in mgmt.list(*CLUSTER) if not c["metadata"].get("deletionTimestamp")
            ) == [MGMT_VPC, WORKLOAD_VPC]
            timings["check"] = round(time.monotonic() - started, 1)

            calls = len(google.calls)
            rc, out, err = run("--tags", "teardown")
            timings["teardown"] = round(time.monotonic() - started, 1)
            assert rc == 0, (failed(out), err[-3000:])
            [pause] = ran(out, "Pause Config Connector's actuation before the cloud deletions (actuationMode Paused)")
            assert pause["changed"] is True
            first_delete = next(i for i, c in enumerate(google.calls) if i >= calls and c[0] != "GET")
            # the emulated Config Connector saw the pause before the teardown's first write to Google
            assert ops.paused_seen[mgmt.url] <= first_delete, (ops.paused_seen, first_delete)
            left = {k: json.dumps(v, sort_keys=True) for k, v in google.inventory_objects().items()}
            # Nothing the run created is left: IAM included (bootstrap.toml teardown.service-accounts and
            # .workload-identity-providers); the providers are soft-deleted (state DELETED), as the API does.
            sa = f"krops-europe-north1-workload@{SITE_PROJECT}.iam.gserviceaccount.com"
            assert sorted(set(left) - set(decoys)) == [
                ("iam", "workloadIdentityPools/krops/providers/kind"),
                ("iam", "workloadIdentityPools/krops/providers/mgmt"),
            ]
            assert (
                google.providers[("krops", "kind")]["state"]
                == google.providers[("krops", "mgmt")]["state"]
                == ("DELETED")
            )
            assert sa not in google.service_accounts and not [
                m for b in google.project_policy["bindings"] for m in b["members"] if sa in m
            ]
            assert {k: left.get(k) for k in decoys} == decoys  # every decoy untouched
            assert world.leftovers()["api_servers"] == [] and world.kind_clusters == {}
            print("gcp lifecycle phases (s, cumulative):", timings)
        assert world.world.errors == []
    finally:
        github.stop()
        registry.stop()
        google.stop()
        shutil.rmtree(host, ignore_errors=True)


class _StubWorld:
    def __init__(self):
        self.controllers, self.clusters = [], {}


class _StubCapi:
    def __init__(self):
        self.plugins, self.workloads = {}, {}

    def plug_in(self, kind, plugin):
        self.plugins[kind] = plugin


def test_emulated_controllers_authenticate_only_as_google_allows_and_label_as_config_connector_does():
    """The WIF exchange of gcp_operators: no provider, then a provider but no workloadIdentityUser grant, are
    Google's refusals; with the prerequisites' grants it works. Labels: `/` keys dropped, managed-by-cnrm added,
    a value Google refuses is an UpdateFailed."""
    from tests.substrate.gcp_operators import GcpOperators, NotYet, gcp_labels
    from tests.substrate.strict_api import StrictKubeEmulator

    google = GoogleDouble(project=SITE_PROJECT, polls=0)
    api = StrictKubeEmulator("wif").start()
    try:
        ops = GcpOperators(_StubWorld(), google, _StubCapi())
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "capg-system"}})
        audience = (
            f"//iam.googleapis.com/projects/{google.number}/locations/global/workloadIdentityPools/krops/providers/kind"
        )
        credential = {
            "type": "external_account",
            "audience": audience,
            "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
            "token_url": "https://sts.googleapis.com/v1/token",
            "service_account_impersonation_url": "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/"
            f"krops-capg@{SITE_PROJECT}.iam.gserviceaccount.com:generateAccessToken",
            "credential_source": {"file": "/var/run/secrets/kubernetes.io/serviceaccount/token"},
        }
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c", "namespace": "capg-system"}}
        api.create(dict(secret, stringData={"credentials.json": json.dumps(credential)}))

        def attempt():
            ops.tokens.clear()
            return ops.credential(api, "capg-system", "c", "credentials.json", "capg-manager")

        assert attempt() == (
            None,
            f'{audience}: The target service indicated by the "audience" parameters is invalid.',
        )
        google.pools["krops"] = {"name": google._pool_name("krops"), "state": "ACTIVE"}
        google.providers[("krops", "kind")] = {
            "state": "ACTIVE",
            "oidc": {
                "issuerUri": api.service_account_issuer,
                "allowedAudiences": [api.service_account_issuer],  # the pod token's audience, as the hook sets it
                "jwksJson": json.dumps(api.openid_document("/openid/v1/jwks")),
            },
        }
        assert attempt() == (
            None,
            f"{audience}: Permission 'iam.serviceAccounts.getAccessToken' denied on resource (or it may not exist).",
        )
        one_time_setup(google)
        token, error = attempt()
        assert error is None and token in google.tokens
        # another API server's keys (a recreated kind cluster) are not accepted
        other = StrictKubeEmulator("other").start()
        try:
            other.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "capg-system"}})
            other.create(dict(secret, stringData={"credentials.json": json.dumps(credential)}))
            ops.tokens.clear()
            assert (
                "The subject token is invalid" in ops.credential(other, "capg-system", "c", "credentials.json", "x")[1]
            )
        finally:
            other.stop()
    finally:
        api.stop()
        google.stop()
    assert gcp_labels({"metadata": {"labels": {"krops.io/environment": "gcp", "krops-environment": "gcp"}}}) == {
        "krops-environment": "gcp",
        "managed-by-cnrm": "true",
    }
    with pytest.raises(NotYet, match="Invalid label krops-expires-at='2026-12-02T08:00:00Z'"):
        gcp_labels({"metadata": {"labels": {"krops-expires-at": "2026-12-02T08:00:00Z"}}})


def test_emulated_capg_needs_its_config_secret_and_the_gke_gate_and_kcc_waits_for_its_references():
    from tests.substrate.gcp_operators import GcpOperators, NotYet
    from tests.substrate.strict_api import StrictKubeEmulator

    google = GoogleDouble(project=SITE_PROJECT, polls=0)
    api = StrictKubeEmulator("capg")
    try:
        ops = GcpOperators(_StubWorld(), google, _StubCapi())
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "capg-system"}})
        provider = {
            "apiVersion": PROVIDER_API,
            "kind": "InfrastructureProvider",
            "metadata": {"name": "gcp", "namespace": "capg-system"},
            "spec": {"version": "v1.12.0", "configSecret": {"name": "capg-wif-credentials"}},
        }
        assert ops.install_capg(api, provider) == (
            'failed to get configSecret capg-system/capg-wif-credentials: secrets "capg-wif-credentials" not found'
        )
        api.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "capg-wif-credentials", "namespace": "capg-system"},
            }
        )
        assert ops.install_capg(api, provider) is None
        crd = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
        assert api.exists(*crd, "gcpmanagedcontrolplanes.infrastructure.cluster.x-k8s.io")
        api.install_bundle("capi-operator")
        api.create(provider)
        api.set_condition(PROVIDER_API, "InfrastructureProvider", "gcp", "capg-system", "Ready", "True", "Ready", "")
        cluster = {"metadata": {"name": "c1", "namespace": "default"}}
        assert ops.provision(api, cluster, {}, {}) == (
            "CAPG runs no GKE controllers: feature gate GKE is off (InfrastructureProvider gcp spec.manager.featureGates)"
        )
        assert google.writes() == []
        # Config Connector: a reference to an object that does not exist yet is DependencyNotFound
        obj = {
            "kind": "SQLUser",
            "metadata": {"name": "u", "namespace": "default"},
            "spec": {"instanceRef": {"name": "db"}},
        }
        with pytest.raises(NotYet) as caught:
            ops.ref(api, obj, obj["spec"]["instanceRef"], "SQLInstance", "sql.cnrm.cloud.google.com")
        assert (caught.value.reason, caught.value.message) == (
            "DependencyNotFound",
            "reference SQLInstance default/db is not found",
        )
        with pytest.raises(NotYet, match="The resource 'projects/krops-example/global/networks/nope' was not found"):
            ops.network({"external": "projects/krops-example/global/networks/nope"})
    finally:
        google.stop()
