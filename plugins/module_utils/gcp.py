# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""GCP teardown through its REST APIs (GKE, Cloud SQL, Cloud Storage, Compute, Service Networking): the calls
the rows of gcp_rows.py make (credentials, ownership of a VPC, listing a VPC's parts, deleting one item and
following its operation). The rows, their order and the teardown itself are gcp_rows.py (run by steps.py);
the IAM part (service accounts, workload identity providers, grants) is gcp_iam.py."""

from __future__ import annotations

import os
import urllib.parse

from ansible_collections.krops.platform.plugins.module_utils import ownership, steps
from ansible_collections.krops.platform.plugins.module_utils.errors import CloudError
from ansible_collections.krops.platform.plugins.module_utils.cloud_teardown import (
    GCP_ROOTS,
    GCP_SCOPE,
    OWNER_TAG,
    first_line,
)
from ansible_collections.krops.platform.plugins.module_utils.gcp_iam import gcp_remove_grant


# The key file AWX's "Google Compute Engine" credential writes, in the variables it names it by (ansible/awx
# awx/main/models/credential/injectors.py, gce); it never sets GOOGLE_APPLICATION_CREDENTIALS, which comes first.
AWX_KEY_FILE_VARS = ("GCP_SERVICE_ACCOUNT_FILE", "GCE_CREDENTIALS_FILE_PATH")


def _awx_key_file():
    if os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return None
    return next((os.environ[name] for name in AWX_KEY_FILE_VARS if os.environ.get(name)), None)


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
        key_file = _awx_key_file()
        if key_file:
            credentials, dummy = google.auth.load_credentials_from_file(key_file, scopes=[GCP_SCOPE])
        else:
            credentials, dummy = google.auth.default(scopes=[GCP_SCOPE])
    except google.auth.exceptions.DefaultCredentialsError as exc:
        raise CloudError(
            f"no GCP credentials: {first_line(exc)} Set access_token (or GCP_ACCESS_TOKEN), "
            "GOOGLE_APPLICATION_CREDENTIALS (or AWX's GCP_SERVICE_ACCOUNT_FILE), run `gcloud auth "
            "application-default login`, or run where a "
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


GCP_PHASES = ("all", "before-clusters")
PSA_PEERING = "servicenetworking-googleapis-com"  # the peering a private services access connection makes


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


def vpc_parts(scan, collection, rtype, what, regional=False, keep=None):
    """The items of one compute collection inside an owned VPC (not labelled for another environment);
    what is not is refused on ``scan`` (gcp_rows.GcpScan). A regional collection is listed through
    aggregated/<collection>, a global one through global/<collection>.

    The delete URL is built from the API root, never taken from a selfLink the API returned, so the
    token goes only where the roots say.
    """
    http, compute = scan.http, scan.compute
    if regional:
        found = _aggregated(http, f"{compute}/aggregated/{collection}", collection)
    else:
        found = http.pages(f"{compute}/global/{collection}", "items", "nextPageToken")
    items = []
    for r in found:
        if keep and not keep(r):
            continue
        if not scan.in_owned(r.get("network")) or scan.verdict(r.get("labels")) == "other":
            scan.refuse(rtype, r["name"], r.get("labels"), r.get("network"))
            continue
        scope = "regions/{}".format(_last(r.get("region"))) if regional else "global"
        items.append(
            {
                "type": rtype,
                "name": r["name"],
                "url": "{}/{}/{}/{}".format(compute, scope, collection, urllib.parse.quote(r["name"])),
                "reason": "{} of owned VPC {}".format(what, _last(r.get("network"))),
                "network": _last(r.get("network")),
                "_created": r.get("creationTimestamp"),  # the orphan report's (cloud_report.orphans)
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


def project_number(http, roots, project):
    """Service Networking names a consumer network by project number (Cloud Resource Manager knows it)."""
    status, body = http.get("{}/projects/{}".format(roots["cloudresourcemanager"], urllib.parse.quote(project)))
    if status == 404 or not body.get("projectNumber"):
        raise CloudError(f"GCP project {project} not found in Cloud Resource Manager (its number is needed)")
    return body["projectNumber"]


def public(item, outcome, **extra):
    """An item's result entry: without its private keys (_body, _location, ...), its URL and protection flags."""
    return _public({k: v for k, v in item.items() if not k.startswith("_")}, outcome, **extra)


class GcpOperations:
    """The long-running operations a GCP delete answers, and how each API says one has finished.

    Poll URLs are built from the API roots and the operation's name, never from its selfLink.
    """

    def __init__(self, http, roots, project):
        self.http = http
        self.roots = roots
        self.project = project
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


def poll(run, url):
    """One look at an operation (the rows' steps.Row poll): (steps.DONE | PENDING | FAILED, error)."""
    status, body = run.ctx.http.get(url)
    if status == 404:
        return steps.FAILED, "its operation vanished before it finished"
    if body.get("done") is True or body.get("status") == "DONE":
        error = run.ctx.error(body)
        return (steps.FAILED, error) if error else (steps.DONE, None)
    return steps.PENDING, None


def delete(run, item):
    """Start deleting one item (the rows' steps.Row act): (outcome, poll URL of its operation or None)."""
    http, ops = run.ctx.http, run.ctx
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
            failed, cut = run.wait_for([["cloudsql-instance", None, op, 0.0]])
            for error, dummy in failed:
                raise CloudError(f"switching off the deletion protection of {item['name']} failed: {error}")
            if cut:
                raise CloudError(f"switching off the deletion protection of {item['name']} did not end within the step")
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


def _empty_bucket(http, bucket_url):
    """Delete every object generation (versioned buckets included) so the bucket can go."""
    objects = http.pages(f"{bucket_url}/o?versions=true", "items", "nextPageToken")
    for obj in objects:
        name = urllib.parse.quote(obj["name"], safe="")
        http.request("DELETE", "{}/o/{}?generation={}".format(bucket_url, name, obj.get("generation", "")))
