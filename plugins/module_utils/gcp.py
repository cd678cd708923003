# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""GCP teardown through its REST APIs (GKE, Cloud SQL, Cloud Storage, Compute, Service Networking): discover
what an environment created by its labels, the VPCs bootstrap.toml names and CAPG's network mark, in stage order,
then delete and wait. The IAM part (service accounts, workload identity providers, grants) is gcp_iam.py."""

from __future__ import annotations

import time
import urllib.parse

from ansible_collections.krops.platform.plugins.module_utils import ownership
from ansible_collections.krops.platform.plugins.module_utils.errors import CloudError
from ansible_collections.krops.platform.plugins.module_utils.cloud_teardown import (
    GCP_ROOTS,
    GCP_SCOPE,
    OWNER_TAG,
    first_line,
)
from ansible_collections.krops.platform.plugins.module_utils.gcp_iam import (
    gcp_accounts,
    gcp_providers,
    gcp_remove_grant,
)


def gcp_token(access_token=None):
    """A bearer token: given, else from google.auth.default (Application Default Credentials)."""
    if access_token:
        return access_token
    try:
        import google.auth  # pylint: disable=import-outside-toplevel
        import google.auth.transport.requests  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise CloudError("gcp_teardown needs the Python package google-auth (requirements.txt)") from None
    try:
        credentials, dummy = google.auth.default(scopes=[GCP_SCOPE])
    except google.auth.exceptions.DefaultCredentialsError as exc:
        raise CloudError(
            f"no GCP credentials: {first_line(exc)} Set access_token (or GCP_ACCESS_TOKEN), "
            "GOOGLE_APPLICATION_CREDENTIALS, run `gcloud auth application-default login`, or run where a "
            "metadata server serves a service account; see docs/teardown.md"
        ) from None
    except google.auth.exceptions.GoogleAuthError as exc:  # e.g. an external_account's project lookup failed
        raise CloudError(f"GCP credentials could not be loaded: {first_line(exc)}") from None
    try:
        credentials.refresh(google.auth.transport.requests.Request())
    except google.auth.exceptions.GoogleAuthError as exc:
        raise CloudError(f"GCP login ({type(credentials).__module__}) failed: {first_line(exc)}") from None
    return credentials.token


def gcp_roots(base_url=None):
    if not base_url:
        return dict(GCP_ROOTS)
    return {service: "{}/{}".format(base_url.rstrip("/"), service) for service in GCP_ROOTS}


def _last(url):
    return (url or "").rstrip("/").rsplit("/", 1)[-1]


# The stages of a GCP teardown, in the order the APIs allow, and the phase each belongs to. Cloud SQL
# holds the private services access connection, which holds its reserved range, and the connection's
# peering holds the VPC: so they go before the workload Clusters (CAPG deletes their VPCs), phase
# "before-clusters". The rest goes in the final phase; phase "all" runs every stage.
GCP_STAGES = (
    ("databases", "before-clusters"),
    ("private-services-access", "before-clusters"),
    ("private-services-ranges", "before-clusters"),
    ("gke-clusters", "final"),
    ("buckets", "final"),
    ("firewalls-routers-peerings", "final"),
    ("subnetworks", "final"),
    ("networks", "final"),
    # IAM last: CAPG and Config Connector authenticate through provider mgmt until their cluster is gone.
    # A grant goes before its service account (a deleted account's grants turn into deleted:... members).
    ("iam-grants", "final"),
    ("service-accounts", "final"),
    ("workload-identity-providers", "final"),
)
GCP_PHASES = ("all", "before-clusters")
PSA_PEERING = "servicenetworking-googleapis-com"  # the peering a private services access connection makes


def _gcp_stage_names(phase):
    return [name for name, member in GCP_STAGES if phase == "all" or member == phase]


def gcp_discover(
    http,
    roots,
    project,
    environment,
    networks,
    unprotect=(),
    clusters=(),
    phase="all",
    service_accounts=(),
    providers=(),
):
    """Read-only: ordered stages of deletions [(stage, [items])] and resources left alone.

    Cloud SQL instances and buckets must carry this environment's label (ownership.py): sitting in an
    owned VPC proves nothing. A GKE cluster is owned by that label, or by an exact cluster name of
    bootstrap.toml (``clusters``) when it also sits in an owned VPC (CAPG labels no GKE cluster). A VPC
    named exactly in bootstrap.toml is owned with its unlabellable parts (peerings, connections,
    ranges, firewall rules, routers, subnets); anything labelled for another environment is never
    ours. A deletion protection is switched off only for an instance bootstrap.toml names in
    teardown.disable-deletion-protection. Service accounts, their project grants and workload identity
    providers carry no labels: only the exact account ids and <pool>/<provider> names of bootstrap.toml
    (teardown.service-accounts, teardown.workload-identity-providers) are owned.
    """
    p = urllib.parse.quote(project)
    compute = "{}/projects/{}".format(roots["compute"], p)
    stages = _gcp_stage_names(phase)
    owned_networks = []
    not_owned = []
    for name in networks:
        if name == "default":
            not_owned.append({"type": "network", "name": name, "reason": "the default VPC is never deleted"})
            continue
        status, net = http.get(f"{compute}/global/networks/{urllib.parse.quote(name)}")
        if status == 404:
            continue
        if gcp_network_owned(net, environment, clusters):
            owned_networks.append(net)
        else:
            not_owned.append(
                {
                    "type": "network",
                    "name": name,
                    "reason": f"named in bootstrap.toml but carries neither the label {OWNER_TAG}={environment} nor CAPG's description "
                    f"{CAPG_NETWORK_DESCRIPTION}<cluster> for a cluster of the environment: a name alone proves nothing",
                }
            )
    owned_names = {n["name"] for n in owned_networks}

    def in_owned(network_url):
        return bool(network_url) and _last(network_url) in owned_names

    def verdict(labels):
        return ownership.cloud_label_verdict(labels, environment)

    def refuse(rtype, name, labels, network):
        if verdict(labels) == "other":
            reason = f"labelled {OWNER_TAG}={(labels or {}).get(OWNER_TAG)} (another environment)"
        elif in_owned(network):
            reason = f"in owned VPC {_last(network)} but without the label {OWNER_TAG}={environment}: not proven krops'"
        else:
            return
        entry = {"type": rtype, "name": name, "reason": reason}
        if in_owned(network):
            entry["network"] = _last(network)  # gcp_taint: the owned VPC holding it stays whole
        not_owned.append(entry)

    def item(rtype, name, url, reason, **private):
        return dict({"type": rtype, "name": name, "url": url, "reason": reason}, **private)

    # every network stage is listed whatever the phase: a VPC holding anything krops does not own is
    # left whole, and that can only be known from all of its contents (gcp_taint below)
    plan = {stage: [] for stage in _gcp_stage_names("all") if stage in stages or stage in _GCP_NETWORK_STAGES}
    if "databases" in plan:
        for inst in http.pages("{}/projects/{}/instances".format(roots["sqladmin"], p), "items", "nextPageToken"):
            settings = inst.get("settings") or {}
            private = (settings.get("ipConfiguration") or {}).get("privateNetwork")
            if verdict(settings.get("userLabels")) == "owned":
                plan["databases"].append(
                    item(
                        "cloudsql-instance",
                        inst["name"],
                        "{}/projects/{}/instances/{}".format(roots["sqladmin"], p, urllib.parse.quote(inst["name"])),
                        f"label {OWNER_TAG}={environment}",
                        deletion_protection=bool(settings.get("deletionProtectionEnabled")),
                        unprotect=inst["name"] in unprotect,
                        network=_last(private) or None,
                    )
                )
            else:
                refuse("cloudsql-instance", inst["name"], settings.get("userLabels"), private)
    if "private-services-access" in plan and owned_networks:
        number = _gcp_project_number(http, roots, project)
        connections = "{}/services/servicenetworking.googleapis.com/connections".format(roots["servicenetworking"])
        for net in owned_networks:
            consumer = f"projects/{number}/global/networks/{net['name']}"
            listed = http.get("{}?{}".format(connections, urllib.parse.urlencode({"network": consumer})))[1]
            for conn in listed.get("connections") or []:
                plan["private-services-access"].append(
                    item(
                        "private-services-connection",
                        conn.get("peering") or PSA_PEERING,
                        "{}/{}:deleteConnection".format(connections, conn.get("peering") or PSA_PEERING),
                        "private services access of owned VPC {}".format(net["name"]),
                        _body={"consumerNetwork": consumer},
                        network=net["name"],
                    )
                )
    if "private-services-ranges" in plan:
        plan["private-services-ranges"] = _vpc_parts(
            http,
            compute,
            "addresses",
            "private-services-range",
            "VPC_PEERING range",
            in_owned,
            refuse,
            verdict,
            keep=lambda a: a.get("purpose") == "VPC_PEERING",
        )
    if "gke-clusters" in plan:
        for c in http.pages(
            "{}/projects/{}/locations/-/clusters".format(roots["container"], p), "clusters", "nextPageToken"
        ):
            labels = c.get("resourceLabels")
            if verdict(labels) == "owned":
                why = f"label {OWNER_TAG}={environment}"
            elif verdict(labels) == "unlabelled" and c["name"] in clusters and in_owned(c.get("network")):
                why = "named in bootstrap.toml, in owned VPC {}".format(_last(c.get("network")))
            else:
                refuse("gke-cluster", c["name"], labels, c.get("network"))
                continue
            url = "{}/projects/{}/locations/{}/clusters/{}".format(roots["container"], p, c["location"], c["name"])
            plan["gke-clusters"].append(
                item(
                    "gke-cluster", c["name"], url, why, _location=c["location"], network=_last(c.get("network")) or None
                )
            )
    if "buckets" in plan:
        for b in http.pages("{}/b?project={}".format(roots["storage"], p), "items", "nextPageToken"):
            if verdict(b.get("labels")) == "owned":
                url = "{}/b/{}".format(roots["storage"], urllib.parse.quote(b["name"]))
                plan["buckets"].append(item("bucket", b["name"], url, f"label {OWNER_TAG}={environment}"))
    if "firewalls-routers-peerings" in plan:
        plan["firewalls-routers-peerings"] = (
            [
                item(
                    "vpc-peering",
                    peer["name"],
                    "{}/global/networks/{}/removePeering".format(compute, urllib.parse.quote(net["name"])),
                    "peering of owned VPC {}".format(net["name"]),
                    _body={"name": peer["name"]},
                    network=net["name"],
                )
                for net in owned_networks
                for peer in net.get("peerings") or []
                if peer.get("name") != PSA_PEERING or "private-services-access" not in plan
            ]
            + _vpc_parts(http, compute, "firewalls", "firewall-rule", "rule", in_owned, refuse, verdict)
            + _vpc_parts(http, compute, "routers", "router", "router", in_owned, refuse, verdict)
        )
    if "subnetworks" in plan:
        plan["subnetworks"] = _vpc_parts(
            http, compute, "subnetworks", "subnetwork", "subnet", in_owned, refuse, verdict
        )
    if "networks" in plan:
        plan["networks"] = [
            item(
                "network",
                n["name"],
                "{}/global/networks/{}".format(compute, urllib.parse.quote(n["name"])),
                "named in bootstrap.toml (teardown.networks)",
            )
            for n in owned_networks
        ]
    # an owned VPC left whole is left behind: a run of the networks stage must not end in success
    held = gcp_taint(plan, not_owned, owned_names)
    held = held if "networks" in stages else []
    if "iam-grants" in plan:
        plan["iam-grants"], plan["service-accounts"] = gcp_accounts(http, roots, project, service_accounts)
        plan["workload-identity-providers"] = gcp_providers(http, roots, project, providers)
    return [(stage, plan[stage]) for stage in stages], not_owned, held


_GCP_NETWORK_STAGES = (
    "databases",
    "private-services-access",
    "private-services-ranges",
    "gke-clusters",
    "firewalls-routers-peerings",
    "subnetworks",
    "networks",
)
# CAPG describes every VPC it creates with its owned key for the cluster (cloud/scope/cluster.go and
# managedcluster.go NetworkSpec: Description infrav1.ClusterTagKey(name); api/v1beta1/labels.go "capg-cluster-")
CAPG_NETWORK_DESCRIPTION = "capg-cluster-"


def gcp_network_owned(net, environment, clusters):
    """Why a VPC named in bootstrap.toml is krops' (the krops label, or CAPG's description for an exact
    cluster of the environment), or None. A name alone proves nothing: another team's VPC may carry it."""
    verdict = ownership.cloud_label_verdict(net.get("labels"), environment)
    if verdict == "owned":
        return f"label {OWNER_TAG}={environment}"
    if verdict == "other":
        return None
    description = net.get("description") or ""
    for cluster in clusters:
        if description == CAPG_NETWORK_DESCRIPTION + cluster:
            return f"CAPG description {description}"
    return None


def gcp_taint(plan, not_owned, owned_names):
    """Leave whole every owned VPC that holds anything krops does not own: nothing in it goes, not even a
    subnet, route, firewall rule or peering, because the VPC itself could not go afterwards."""
    tainted = {n["network"] for n in not_owned if n.get("network") in owned_names}
    if not tainted:
        return []
    for stage, items in plan.items():
        keep = []
        for i in items:
            net = i["name"] if i["type"] == "network" else i.get("network")
            # what carries this environment's own label is proven by the label, not by the VPC
            if net in tainted and not i["reason"].startswith("label "):
                foreign = sorted(n["type"] + "/" + n["name"] for n in not_owned if n.get("network") == net)
                not_owned.append(
                    dict(
                        {k: v for k, v in i.items() if not k.startswith("_") and k not in ("url", "network")},
                        reason="VPC {} holds what krops does not own ({}): the VPC and everything in it stay".format(
                            net, ", ".join(foreign)
                        ),
                    )
                )
            else:
                keep.append(i)
        plan[stage] = keep
    return sorted(tainted)


# the loader's rules for teardown.workload-identity-providers (<pool>/<provider>) and .service-accounts


# collection -> regional (listed through aggregated/<collection>) or global
_GCP_REGIONAL = {"routers": True, "subnetworks": True, "firewalls": False, "addresses": False}


def _vpc_parts(http, compute, collection, rtype, what, in_owned, refuse, verdict, keep=None):
    """The items of one compute collection inside an owned VPC (not labelled for another environment).

    The delete URL is built from the API root, never taken from a selfLink the API returned, so the
    token goes only where the roots say.
    """
    if _GCP_REGIONAL[collection]:
        found = _aggregated(http, f"{compute}/aggregated/{collection}", collection)
    else:
        found = http.pages(f"{compute}/global/{collection}", "items", "nextPageToken")
    items = []
    for r in found:
        if keep and not keep(r):
            continue
        if not in_owned(r.get("network")) or verdict(r.get("labels")) == "other":
            refuse(rtype, r["name"], r.get("labels"), r.get("network"))
            continue
        scope = "regions/{}".format(_last(r.get("region"))) if _GCP_REGIONAL[collection] else "global"
        items.append(
            {
                "type": rtype,
                "name": r["name"],
                "url": "{}/{}/{}/{}".format(compute, scope, collection, urllib.parse.quote(r["name"])),
                "reason": "{} of owned VPC {}".format(what, _last(r.get("network"))),
                "network": _last(r.get("network")),
            }
        )
    return items


def _aggregated(http, url, key):
    """Every item of an aggregatedList, over all pages (scopes without items carry only a warning)."""
    found = []
    while url:
        status, body = http.get(url)
        if status == 404:
            return found
        for scoped in (body.get("items") or {}).values():
            found.extend(scoped.get(key) or [])
        token = body.get("nextPageToken")
        url = _with_page_token(url, token) if token else None
    return found


def _with_page_token(url, token):
    parts = urllib.parse.urlsplit(url)
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != "pageToken"] + [("pageToken", token)]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def _gcp_project_number(http, roots, project):
    """Service Networking names a consumer network by project number (Cloud Resource Manager knows it)."""
    status, body = http.get("{}/projects/{}".format(roots["cloudresourcemanager"], urllib.parse.quote(project)))
    if status == 404 or not body.get("projectNumber"):
        raise CloudError(f"GCP project {project} not found in Cloud Resource Manager (its number is needed)")
    return body["projectNumber"]


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
    clusters=(),
    phase="all",
    clock=time.monotonic,
    service_accounts=(),
    providers=(),
):
    """Delete stage by stage, waiting for each stage's operations; a stage that leaves anything stops the run.

    After the last stage, discovery runs again: whatever it still finds is a leftover (rc=0 means
    nothing owned is left).
    """
    if phase not in GCP_PHASES:
        raise CloudError("phase must be one of {}, got {!r}".format(", ".join(GCP_PHASES), phase))
    args = (http, roots, project, environment, networks, unprotect, clusters, phase, service_accounts, providers)
    stages, not_owned, held = gcp_discover(*args)
    plan = [item for dummy, items in stages for item in items]
    result = {
        "phase": phase,
        "plan": [
            "{} {} {} ({})".format(_GCP_VERB.get(i["type"], "delete"), i["type"], i["name"], i["reason"]) for i in plan
        ],
        "not_owned": not_owned,
        "results": [],
        "leftovers": [],
        "held_networks": held,
        "changed": bool(plan),
    }
    if check_mode:
        result["results"] = [_gcp_public(i, ownership.PLANNED) for i in plan]
        return result
    ops = _GcpOperations(http, roots, project)
    for stage, items in stages:
        pending = []
        for item in items:
            try:
                outcome, op = _gcp_delete(http, ops, item, wait_timeout, poll_interval, sleep, clock)
            except CloudError as exc:
                result["results"].append(_gcp_public(item, ownership.FAILED, error=str(exc)))
                result["leftovers"].append("{}/{}".format(item["type"], item["name"]))
                continue
            result["results"].append(_gcp_public(item, outcome))
            if op:
                pending.append((item, op))
        if wait and pending:
            for url, error in ops.wait([op for dummy, op in pending], wait_timeout, poll_interval, sleep, clock):
                failed = next(it for it, op in pending if op == url)
                result["leftovers"].append("{}/{}".format(failed["type"], failed["name"]))
                _mark(result, failed, ownership.FAILED, error)
        if result["leftovers"]:
            # later stages depend on this one (a VPC cannot go while anything uses it)
            result["stopped_at"] = stage
            return result
    for name in held:
        result["leftovers"].append(f"network/{name}")
        result["stopped_at"] = result.get("stopped_at") or "networks"
    if wait and plan:
        left, dummy, dummy2 = gcp_discover(*args)
        for stage, items in left:
            for item in items:
                result["leftovers"].append("{}/{}".format(item["type"], item["name"]))
                result["stopped_at"] = result.get("stopped_at") or stage
                if any(e["type"] == item["type"] and e["name"] == item["name"] for e in result["results"]):
                    _mark(result, item, ownership.LEFT, "still present after the teardown")
                else:  # appeared during the run (a controller recreated it?)
                    result["results"].append(_gcp_public(item, ownership.LEFT, error="appeared during the teardown"))
    return result


_GCP_VERB = {"vpc-peering": "remove", "private-services-connection": "remove", "iam-grant": "remove"}


def _gcp_public(item, outcome, **extra):
    return _public({k: v for k, v in item.items() if not k.startswith("_")}, outcome, **extra)


class _GcpOperations:
    """The long-running operations a GCP delete answers, and how each API says one has finished.

    Poll URLs are built from the API roots and the operation's name, never from its selfLink.
    """

    def __init__(self, http, roots, project):
        self.http = http
        self.roots = roots
        self.p = urllib.parse.quote(project)

    def of(self, item, answer):
        """The poll URL of the operation an API answered for item, or None when it finished already."""
        name = (answer or {}).get("name")
        if not name or answer.get("done") is True or answer.get("status") == "DONE":
            return None
        rtype = item["type"]
        if rtype == "gke-cluster":
            return "{}/projects/{}/locations/{}/operations/{}".format(
                self.roots["container"], self.p, item["_location"], name
            )
        if rtype == "cloudsql-instance":
            return "{}/projects/{}/operations/{}".format(self.roots["sqladmin"], self.p, name)
        if rtype == "private-services-connection":
            return "{}/{}".format(self.roots["servicenetworking"], name)
        if rtype == "workload-identity-provider":  # IAM v1 operations live under the resource's name
            return "{}/{}".format(self.roots["iam"], name)
        scope = "regions/{}".format(_last(answer["region"])) if answer.get("region") else "global"
        return "{}/projects/{}/{}/operations/{}".format(self.roots["compute"], self.p, scope, name)

    @staticmethod
    def error(body):
        """The error text of a finished operation, or None (compute and Cloud SQL: error.errors[])."""
        err = body.get("error")
        if not err:
            return None
        errs = err.get("errors") if isinstance(err, dict) else None
        if errs:
            return "; ".join(e.get("message") or e.get("code") or "" for e in errs)
        return err.get("message") if isinstance(err, dict) else str(err)

    def wait(self, urls, timeout, poll_interval, sleep=time.sleep, clock=time.monotonic):
        """Poll until every operation is done; [(url, error)] for those that failed or did not finish."""
        pending = list(urls)
        failed = []
        deadline = clock() + timeout
        while pending:
            still = []
            for url in pending:
                status, body = self.http.get(url)
                if status == 404:
                    failed.append((url, "its operation vanished before it finished"))
                elif body.get("done") is True or body.get("status") == "DONE":
                    if self.error(body):
                        failed.append((url, self.error(body)))
                else:
                    still.append(url)
            pending = still
            if not pending:
                break
            if clock() >= deadline:
                failed += [(url, f"still deleting after {timeout}s (wait_timeout)") for url in pending]
                break
            sleep(poll_interval)
        return failed


def _gcp_delete(http, ops, item, wait_timeout, poll_interval, sleep, clock):
    """Start deleting one item: (outcome, poll URL of its operation or None)."""
    if item["type"] == "iam-grant":
        return gcp_remove_grant(http, item), None
    if item["type"] in ("vpc-peering", "private-services-connection"):
        status, answer = http.request("POST", item["url"], item["_body"])
        return (ownership.ABSENT, None) if status == 404 else (ownership.DELETED, ops.of(item, answer))
    if item["type"] == "cloudsql-instance" and item.get("deletion_protection"):
        if not item.get("unprotect"):
            raise CloudError(
                "Cloud SQL instance {} has deletion protection on; krops switches it off only when "
                "bootstrap.toml lists it in teardown.disable-deletion-protection".format(item["name"])
            )
        dummy, answer = http.request("PATCH", item["url"], {"settings": {"deletionProtectionEnabled": False}})
        op = ops.of(item, answer)
        if op:  # Cloud SQL runs one operation per instance at a time
            for dummy, error in ops.wait([op], wait_timeout, poll_interval, sleep, clock):
                raise CloudError(f"switching off the deletion protection of {item['name']} failed: {error}")
    if item["type"] == "bucket":
        _empty_bucket(http, item["url"])
    status, answer = http.request("DELETE", item["url"])
    return (ownership.ABSENT, None) if status == 404 else (ownership.DELETED, ops.of(item, answer))


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


def _empty_bucket(http, bucket_url):
    """Delete every object generation (versioned buckets included) so the bucket can go."""
    objects = http.pages(f"{bucket_url}/o?versions=true", "items", "nextPageToken")
    for obj in objects:
        name = urllib.parse.quote(obj["name"], safe="")
        http.request("DELETE", "{}/o/{}?generation={}".format(bucket_url, name, obj.get("generation", "")))
