# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Azure and GCP teardown through their REST APIs (ARM; GKE, Cloud SQL, Cloud Storage, Compute).

The reference design leaves both clouds manual; krops removes what an environment created,
and only that. Ownership: a resource is removed when bootstrap.toml names it (resource
groups, VPCs) and it carries proof of ownership, or when it carries the krops ownership tag
(Azure tag / GCP label ``krops-environment=<environment>``), or, for GCP, when it lives
inside a VPC the environment owns. Everything else in the subscription or project is left
alone and never even modified.

Plain urllib with a bearer token, so tests point the base URLs at local HTTP doubles.
Discovery is read-only and comes first: check mode returns the plan it produced.
"""

from __future__ import annotations

import json
import shutil
import ssl
import time
import urllib.error
import urllib.parse

from ansible.module_utils.urls import Request, open_url

from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils import ownership

OWNER_TAG = ownership.CLOUD_ENV_LABEL
CAPZ_OWNED_TAG = "sigs.k8s.io_cluster-api-provider-azure_cluster_%s"

AZURE_ARM = "https://management.azure.com"
AZURE_LOGIN = "https://login.microsoftonline.com"
AZURE_API = {
    "resourcegroups": "2021-04-01",
    "connectedClusters": "2024-01-01",
    "userAssignedIdentities": "2023-01-31",
}

GCP_ROOTS = {
    "container": "https://container.googleapis.com/v1",
    "sqladmin": "https://sqladmin.googleapis.com/v1",
    "storage": "https://storage.googleapis.com/storage/v1",
    "compute": "https://compute.googleapis.com/compute/v1",
}


class CloudError(Exception):
    """A cloud call failed in a way the user must act on; ``result`` holds the partial result."""

    def __init__(self, message, result=None):
        super().__init__(message)
        self.result = result or {}


class Http:
    """JSON over HTTPS with a bearer token; retries 429/5xx; 404 is reported, not raised."""

    def __init__(self, token, timeout=60, retries=4, sleep=time.sleep, what="API"):
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.sleep = sleep
        self.what = what
        self.calls = []
        # One verifying TLS context for every call (building one per call costs ~0.2 s).
        self._request = Request(timeout=timeout, follow_redirects="safe", context=ssl.create_default_context())

    def request(self, method, url, body=None, absent_ok=True):
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(self.retries + 1):
            headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
            if data is not None:
                headers["Content-Type"] = "application/json"
            self.calls.append((method, url))
            try:
                resp = self._request.open(method, url, data=data, headers=headers)
                raw = resp.read()
                return resp.status, (json.loads(raw) if raw.strip() else {})
            except urllib.error.HTTPError as exc:
                raw = exc.read()
                if exc.code == 404 and absent_ok:
                    return 404, {}
                if (exc.code == 429 or exc.code >= 500) and attempt < self.retries:
                    self.sleep(min(2**attempt, 30))
                    continue
                raise CloudError(f"{method} {_redact(url)} answered {exc.code}: {_message(raw)}")
            except (urllib.error.URLError, OSError) as exc:
                if attempt < self.retries:
                    self.sleep(min(2**attempt, 30))
                    continue
                raise CloudError("{} {} failed: {}".format(method, _redact(url), getattr(exc, "reason", exc)))
        raise CloudError(f"{method} {_redact(url)} kept failing")  # pragma: no cover

    def get(self, url):
        return self.request("GET", url)

    def pages(self, url, key, next_key):
        """Items of a paged listing; next_key is 'nextLink' (ARM, a URL) or 'nextPageToken' (Google)."""
        items = []
        while url:
            status, body = self.get(url)
            if status == 404:
                return items
            items.extend(body.get(key) or [])
            token = body.get(next_key)
            if not token:
                break
            if next_key == "nextLink":
                url = token
            else:
                parts = urllib.parse.urlsplit(url)
                query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != "pageToken"] + [
                    ("pageToken", token)
                ]
                url = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))
        return items


def load_environment(config_file, environment, kind):
    """(config, environment table) from bootstrap.toml; CloudError when the environment is of another kind."""
    cfg = krops_config.load(config_file, environment=environment)
    env = cfg.environment()
    if env["kind"] != kind:
        raise CloudError("environment {} is of kind {}, not {}".format(cfg.selected, env["kind"], kind))
    return cfg, env


def _message(raw):
    try:
        body = json.loads(raw)
        if body.get("error_description"):  # OAuth2 token endpoints
            return "{}: {}".format(body.get("error"), body["error_description"].strip().splitlines()[0])
        err = body.get("error") or body
        if isinstance(err, dict):
            return err.get("message") or err.get("code") or json.dumps(err)[:200]
        return str(err)[:200]
    except (ValueError, AttributeError):
        return raw.decode("utf-8", "replace")[:200] if raw else "(no body)"


def _redact(url):
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(query=""))


def wait_gone(http, urls, timeout, poll_interval, clock=time.monotonic, sleep=time.sleep):
    """Poll each URL until it answers 404; returns the URLs still present at the deadline."""
    pending = list(urls)
    deadline = clock() + timeout
    while pending:
        pending = [u for u in pending if http.get(u)[0] != 404]
        if not pending or clock() >= deadline:
            break
        sleep(poll_interval)
    return pending


def _cli_token(argv, parse, run_command):
    """Token from a cloud CLI's login; run_command(argv) -> (rc, stdout, stderr), e.g. AnsibleModule.run_command."""
    binary = shutil.which(argv[0])
    if not binary or run_command is None:
        return None
    rc, out, err = run_command([binary] + argv[1:])
    if rc != 0:
        raise CloudError("{} failed (rc {}): {}".format(" ".join(argv), rc, (err or "").strip()[-300:]))
    try:
        return parse(out)
    except (ValueError, KeyError, TypeError) as exc:
        raise CloudError("{} printed no token: {}".format(" ".join(argv), exc))


# --- Azure ------------------------------------------------------------------------------


def azure_token(
    access_token=None,
    client_id=None,
    secret=None,
    tenant=None,
    login_endpoint=AZURE_LOGIN,
    resource=AZURE_ARM,
    run_command=None,
):
    """A bearer token for ARM: given, else client credentials, else the az CLI's login."""
    if access_token:
        return access_token
    if client_id and secret and tenant:
        url = "{}/{}/oauth2/v2.0/token".format(login_endpoint.rstrip("/"), urllib.parse.quote(tenant))
        form = urllib.parse.urlencode(
            {
                "grant_type": "client_credentials",
                "client_id": client_id,
                "client_secret": secret,
                "scope": "{}/.default".format(resource.rstrip("/")),
            }
        ).encode()
        try:
            resp = open_url(
                url, data=form, method="POST", timeout=60, headers={"Content-Type": "application/x-www-form-urlencoded"}
            )
            return json.loads(resp.read())["access_token"]
        except urllib.error.HTTPError as exc:
            raise CloudError(
                f"Azure login for client {client_id} in tenant {tenant} failed ({exc.code}): {_message(exc.read())}"
            )
        except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
            raise CloudError(f"Azure login at {login_endpoint} failed: {exc}")
    token = _cli_token(
        ["az", "account", "get-access-token", "--resource", resource.rstrip("/") + "/", "-o", "json"],
        lambda out: json.loads(out)["accessToken"],
        run_command,
    )
    if token:
        return token
    raise CloudError(
        "no Azure credentials: set access_token (or AZURE_ACCESS_TOKEN), client_id/secret/tenant "
        "(or AZURE_CLIENT_ID, AZURE_SECRET, AZURE_TENANT), or log in with `az login`"
    )


def _tags(resource):
    return resource.get("tags") or {}


def azure_owned(resource, environment, clusters):
    """Why krops owns an Azure resource (a tag), or None."""
    tags = _tags(resource)
    if ownership.cloud_label_verdict(tags, environment) == "other":
        return None  # declared by another environment: never ours
    if tags.get(OWNER_TAG) == environment:
        return f"tag {OWNER_TAG}={environment}"
    for cluster in clusters:
        if tags.get(CAPZ_OWNED_TAG % cluster) == "owned":
            return "tag %s=owned" % (CAPZ_OWNED_TAG % cluster)
    return None


def azure_discover(
    http,
    arm,
    subscription,
    environment,
    resource_groups,
    clusters,
    credential_prefix,
    credential_issuers,
    mgmt_cluster=None,
):
    """Read-only: the ordered deletion plan and what was left alone because krops does not own it."""
    arm = arm.rstrip("/")
    sub = f"{arm}/subscriptions/{urllib.parse.quote(subscription)}"
    plan, not_owned = [], []
    identities = http.pages(
        "{}/providers/Microsoft.ManagedIdentity/userAssignedIdentities?api-version={}".format(
            sub, AZURE_API["userAssignedIdentities"]
        ),
        "value",
        "nextLink",
    )
    for identity in identities:
        if _tags(identity).get(OWNER_TAG) != environment:
            continue
        creds = http.pages(
            "{}{}/federatedIdentityCredentials?api-version={}".format(
                arm, identity["id"], AZURE_API["userAssignedIdentities"]
            ),
            "value",
            "nextLink",
        )
        for cred in creds:
            issuer = (cred.get("properties") or {}).get("issuer")
            if (credential_prefix and cred["name"].startswith(credential_prefix)) or issuer in credential_issuers:
                plan.append(
                    {
                        "type": "federated-credential",
                        "id": cred["id"],
                        "name": cred["name"],
                        "reason": "kind-issuer credential on identity {} (tag {}={})".format(
                            identity["name"], OWNER_TAG, environment
                        ),
                    }
                )
    arcs = http.pages(
        "{}/providers/Microsoft.Kubernetes/connectedClusters?api-version={}".format(
            sub, AZURE_API["connectedClusters"]
        ),
        "value",
        "nextLink",
    )
    for arc in arcs:
        why = azure_owned(arc, environment, [])
        if why:
            plan.append({"type": "arc-connected-cluster", "id": arc["id"], "name": arc["name"], "reason": why})
    listed = http.pages(
        "{}/resourcegroups?api-version={}".format(sub, AZURE_API["resourcegroups"]), "value", "nextLink"
    )
    groups = {g["name"].lower(): g for g in listed}
    wanted = [n.lower() for n in resource_groups]
    wanted += [n for n, g in sorted(groups.items()) if _tags(g).get(OWNER_TAG) == environment and n not in wanted]
    rg_plan = []
    for name in wanted:
        group = groups.get(name)
        if group is None:
            continue
        why = azure_owned(group, environment, clusters)
        if why:
            rg_plan.append({"type": "resource-group", "id": group["id"], "name": group["name"], "reason": why})
        else:
            not_owned.append(
                {
                    "type": "resource-group",
                    "id": group["id"],
                    "name": group["name"],
                    "reason": "named in bootstrap.toml but carries neither {}={} nor a CAPZ owned tag for {}".format(
                        OWNER_TAG, environment, ", ".join(clusters)
                    ),
                }
            )
    # workload groups first, the management cluster's group last
    rg_plan.sort(key=lambda item: bool(mgmt_cluster) and mgmt_cluster.lower() == item["name"].lower())
    return plan + rg_plan, not_owned


def azure_teardown(
    http,
    arm,
    subscription,
    environment,
    resource_groups,
    clusters,
    credential_prefix,
    credential_issuers=(),
    mgmt_cluster=None,
    check_mode=False,
    wait=True,
    wait_timeout=1800,
    poll_interval=10,
    sleep=time.sleep,
):
    plan, not_owned = azure_discover(
        http,
        arm,
        subscription,
        environment,
        resource_groups,
        clusters,
        credential_prefix,
        list(credential_issuers),
        mgmt_cluster,
    )
    result = {
        "plan": ["delete {} {} ({})".format(p["type"], p["id"], p["reason"]) for p in plan],
        "not_owned": not_owned,
        "results": [],
        "leftovers": [],
        "changed": bool(plan),
    }
    if check_mode:
        result["results"] = [dict(p, outcome=ownership.PLANNED) for p in plan]
        return result
    arm = arm.rstrip("/")
    pending = []
    for item in plan:
        api = (
            AZURE_API["resourcegroups"]
            if item["type"] == "resource-group"
            else (
                AZURE_API["connectedClusters"]
                if item["type"] == "arc-connected-cluster"
                else AZURE_API["userAssignedIdentities"]
            )
        )
        url = "{}{}?api-version={}".format(arm, item["id"], api)
        try:
            status, dummy = http.request("DELETE", url)
        except CloudError as exc:
            result["results"].append(dict(item, outcome="failed", error=str(exc)))
            result["leftovers"].append(item["id"])
            continue
        if status == 404:
            result["results"].append(dict(item, outcome="absent"))
            continue
        result["results"].append(dict(item, outcome="deleted"))
        if item["type"] != "federated-credential":
            pending.append((item, url))
    if wait and pending:
        left = set(wait_gone(http, [u for dummy, u in pending], wait_timeout, poll_interval, sleep=sleep))
        for item, url in pending:
            if url in left:
                result["leftovers"].append(item["id"])
                for entry in result["results"]:
                    if entry["id"] == item["id"]:
                        entry["outcome"] = ownership.FAILED
                        entry["error"] = f"still deleting after {wait_timeout}s (wait_timeout)"
    return result


# --- GCP --------------------------------------------------------------------------------


def gcp_token(access_token=None, run_command=None):
    if access_token:
        return access_token
    token = _cli_token(["gcloud", "auth", "print-access-token"], lambda out: out.strip(), run_command)
    if token:
        return token
    raise CloudError(
        "no GCP credentials: set access_token (or GCP_ACCESS_TOKEN), or log in with "
        "`gcloud auth login` / `gcloud auth activate-service-account`"
    )


def gcp_roots(base_url=None):
    if not base_url:
        return dict(GCP_ROOTS)
    return {service: "{}/{}".format(base_url.rstrip("/"), service) for service in GCP_ROOTS}


def _last(url):
    return (url or "").rstrip("/").rsplit("/", 1)[-1]


def gcp_discover(http, roots, project, environment, networks, unprotect=()):
    """Read-only: ordered stages of deletions [(stage, [items])] and resources left alone.

    GKE clusters, Cloud SQL instances and buckets must carry this environment's label (ownership.py):
    sitting in an owned VPC proves nothing. A VPC named exactly in bootstrap.toml is owned with its
    unlabellable parts (peerings, ranges, firewall rules, routers, subnets). A deletion protection is
    switched off only for an instance bootstrap.toml names in teardown.disable-deletion-protection.
    """
    p = urllib.parse.quote(project)
    compute = "{}/projects/{}".format(roots["compute"], p)
    owned_networks = []
    not_owned = []
    for name in networks:
        if name == "default":
            not_owned.append({"type": "network", "name": name, "reason": "the default VPC is never deleted"})
            continue
        status, net = http.get(f"{compute}/global/networks/{urllib.parse.quote(name)}")
        if status != 404:
            owned_networks.append(net)
    owned_names = {n["name"] for n in owned_networks}

    def in_owned(network_url):
        return bool(network_url) and _last(network_url) in owned_names

    def labelled(labels):
        return ownership.cloud_label_verdict(labels, environment) == "owned"

    def refuse(rtype, name, labels, network):
        verdict = ownership.cloud_label_verdict(labels, environment)
        if in_owned(network) or verdict == "other":
            not_owned.append(
                {
                    "type": rtype,
                    "name": name,
                    "reason": (
                        f"labelled {OWNER_TAG}={(labels or {}).get(OWNER_TAG)} (another environment)"
                        if verdict == "other"
                        else f"in owned VPC {_last(network)} but without the label {OWNER_TAG}={environment}: not proven krops'"
                    ),
                }
            )

    stages = []
    clusters = http.pages(
        "{}/projects/{}/locations/-/clusters".format(roots["container"], p), "clusters", "nextPageToken"
    )
    gke = []
    for c in clusters:
        if labelled(c.get("resourceLabels")):
            gke.append(
                {
                    "type": "gke-cluster",
                    "name": c["name"],
                    "url": "{}/projects/{}/locations/{}/clusters/{}".format(
                        roots["container"], p, c["location"], c["name"]
                    ),
                    "reason": f"label {OWNER_TAG}={environment}",
                }
            )
        else:
            refuse("gke-cluster", c["name"], c.get("resourceLabels"), c.get("network"))
    sql = []
    for inst in http.pages("{}/projects/{}/instances".format(roots["sqladmin"], p), "items", "nextPageToken"):
        settings = inst.get("settings") or {}
        private = (settings.get("ipConfiguration") or {}).get("privateNetwork")
        if labelled(settings.get("userLabels")):
            sql.append(
                {
                    "type": "cloudsql-instance",
                    "name": inst["name"],
                    "url": "{}/projects/{}/instances/{}".format(roots["sqladmin"], p, inst["name"]),
                    "deletion_protection": bool(settings.get("deletionProtectionEnabled")),
                    "unprotect": inst["name"] in unprotect,
                    "reason": f"label {OWNER_TAG}={environment}",
                }
            )
        else:
            refuse("cloudsql-instance", inst["name"], settings.get("userLabels"), private)
    stages.append(("clusters-and-databases", gke + sql))
    buckets = [
        {
            "type": "bucket",
            "name": b["name"],
            "url": "{}/b/{}".format(roots["storage"], urllib.parse.quote(b["name"])),
            "reason": f"label {OWNER_TAG}={environment}",
        }
        for b in http.pages("{}/b?project={}".format(roots["storage"], p), "items", "nextPageToken")
        if labelled(b.get("labels"))
    ]
    stages.append(("buckets", buckets))
    peerings = [
        {
            "type": "vpc-peering",
            "name": peer["name"],
            "network": net["name"],
            "url": "{}/global/networks/{}/removePeering".format(compute, urllib.parse.quote(net["name"])),
            "reason": "peering of owned VPC {}".format(net["name"]),
        }
        for net in owned_networks
        for peer in net.get("peerings") or []
    ]
    stages.append(("peerings", peerings))
    addresses = [
        {
            "type": "private-services-range",
            "name": a["name"],
            "url": "{}/global/addresses/{}".format(compute, urllib.parse.quote(a["name"])),
            "reason": "VPC_PEERING range of owned VPC {}".format(_last(a.get("network"))),
        }
        for a in http.pages(f"{compute}/global/addresses", "items", "nextPageToken")
        if a.get("purpose") == "VPC_PEERING" and in_owned(a.get("network"))
    ]
    stages.append(("private-services-ranges", addresses))
    firewalls = [
        {
            "type": "firewall-rule",
            "name": f["name"],
            "url": "{}/global/firewalls/{}".format(compute, urllib.parse.quote(f["name"])),
            "reason": "rule of owned VPC {}".format(_last(f.get("network"))),
        }
        for f in http.pages(f"{compute}/global/firewalls", "items", "nextPageToken")
        if in_owned(f.get("network"))
    ]
    routers = [
        {
            "type": "router",
            "name": r["name"],
            "url": r.get("selfLink") or "{}/regions/{}/routers/{}".format(compute, _last(r.get("region")), r["name"]),
            "reason": "router of owned VPC {}".format(_last(r.get("network"))),
        }
        for r in _aggregated(http, f"{compute}/aggregated/routers", "routers")
        if in_owned(r.get("network"))
    ]
    stages.append(("firewalls-and-routers", firewalls + routers))
    subnets = [
        {
            "type": "subnetwork",
            "name": s["name"],
            "url": s.get("selfLink")
            or "{}/regions/{}/subnetworks/{}".format(compute, _last(s.get("region")), s["name"]),
            "reason": "subnet of owned VPC {}".format(_last(s.get("network"))),
        }
        for s in _aggregated(http, f"{compute}/aggregated/subnetworks", "subnetworks")
        if in_owned(s.get("network"))
    ]
    stages.append(("subnetworks", subnets))
    stages.append(
        (
            "networks",
            [
                {
                    "type": "network",
                    "name": n["name"],
                    "url": "{}/global/networks/{}".format(compute, urllib.parse.quote(n["name"])),
                    "reason": "named in bootstrap.toml (teardown.networks)",
                }
                for n in owned_networks
            ],
        )
    )
    return stages, not_owned


def _aggregated(http, url, key):
    found = []
    status, body = http.get(url)
    if status == 404:
        return found
    for scoped in (body.get("items") or {}).values():
        found.extend(scoped.get(key) or [])
    return found


def gcp_teardown(
    http,
    roots,
    project,
    environment,
    networks,
    check_mode=False,
    wait=True,
    wait_timeout=1800,
    poll_interval=10,
    sleep=time.sleep,
    unprotect=(),
):
    stages, not_owned = gcp_discover(http, roots, project, environment, networks, unprotect)
    plan = [item for dummy, items in stages for item in items]
    result = {
        "plan": [
            "{} {} {} ({})".format(
                "remove" if i["type"] == "vpc-peering" else "delete", i["type"], i["name"], i["reason"]
            )
            for i in plan
        ],
        "not_owned": not_owned,
        "results": [],
        "leftovers": [],
        "changed": bool(plan),
    }
    if check_mode:
        result["results"] = [_public(i, ownership.PLANNED) for i in plan]
        return result
    for stage, items in stages:
        pending = []
        for item in items:
            try:
                outcome = _gcp_delete(http, item)
            except CloudError as exc:
                result["results"].append(_public(item, "failed", error=str(exc)))
                result["leftovers"].append("{}/{}".format(item["type"], item["name"]))
                continue
            result["results"].append(_public(item, outcome))
            if outcome == "deleted" and item["type"] != "vpc-peering":
                pending.append(item)
        if wait and pending:
            left = set(wait_gone(http, [i["url"] for i in pending], wait_timeout, poll_interval, sleep=sleep))
            for item in pending:
                if item["url"] in left:
                    result["leftovers"].append("{}/{}".format(item["type"], item["name"]))
                    _mark(result, item, ownership.FAILED, f"still deleting after {wait_timeout}s (wait_timeout)")
        if result["leftovers"]:
            # later stages depend on this one (a VPC cannot go while anything uses it)
            result["stopped_at"] = stage
            return result
    return result


def _public(item, outcome, **extra):
    entry = {k: v for k, v in item.items() if k not in ("url", "deletion_protection", "unprotect")}
    # the shared item shape: type, id, name, reason, outcome (the id is the resource's API path)
    entry.setdefault("id", urllib.parse.urlsplit(item.get("url") or "").path or item["name"])
    entry.update(outcome=outcome, **extra)
    return entry


def _mark(result, item, outcome, error=None):
    for entry in result["results"]:
        if entry["type"] == item["type"] and entry["name"] == item["name"]:
            entry["outcome"] = outcome
            if error:
                entry["error"] = error


def _gcp_delete(http, item):
    if item["type"] == "vpc-peering":
        status, dummy = http.request("POST", item["url"], {"name": item["name"]})
        return "absent" if status == 404 else "deleted"
    if item["type"] == "cloudsql-instance" and item.get("deletion_protection"):
        if not item.get("unprotect"):
            raise CloudError(
                "Cloud SQL instance {} has deletion protection on; krops switches it off only when "
                "bootstrap.toml lists it in teardown.disable-deletion-protection".format(item["name"])
            )
        http.request("PATCH", item["url"], {"settings": {"deletionProtectionEnabled": False}})
    if item["type"] == "bucket":
        _empty_bucket(http, item["url"])
    status, dummy = http.request("DELETE", item["url"])
    return "absent" if status == 404 else "deleted"


def _empty_bucket(http, bucket_url):
    """Delete every object generation (versioned buckets included) so the bucket can go."""
    objects = http.pages(f"{bucket_url}/o?versions=true", "items", "nextPageToken")
    for obj in objects:
        name = urllib.parse.quote(obj["name"], safe="")
        http.request("DELETE", "{}/o/{}?generation={}".format(bucket_url, name, obj.get("generation", "")))
