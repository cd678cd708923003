# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Azure and GCP teardown through their REST APIs (ARM; GKE, Cloud SQL, Cloud Storage, Compute).

The reference design leaves both clouds manual; krops removes what an environment created,
and only that. Ownership: a resource is removed when bootstrap.toml names it (resource
groups, VPCs) and it carries proof of ownership, or when it carries the krops ownership tag
(Azure tag / GCP label ``krops-environment=<environment>``), or, for GCP, when it lives
inside a VPC the environment owns. Everything else in the subscription or project is left
alone and never even modified.

Plain urllib with a bearer token, so tests point the base URLs at local HTTP doubles. The token
comes from the clouds' own credential chains (azure-identity, google-auth; docs/teardown.md), so
managed identity and workload identity work as in every other Azure or Google tool.
Discovery is read-only and comes first: check mode returns the plan it produced.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse

from ansible.module_utils.urls import Request

from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils import ownership
from ansible_collections.krops.platform.plugins.module_utils import profiles

OWNER_TAG = ownership.CLOUD_ENV_LABEL
CAPZ_OWNED_TAG = "sigs.k8s.io_cluster-api-provider-azure_cluster_%s"

AZURE_ARM = "https://management.azure.com"
GCP_SCOPE = "https://www.googleapis.com/auth/cloud-platform"

# Environment variables that hold secrets, read by krops or by the SDK chains: their values are
# masked in every result, message and warning, like no_log parameters (env_secrets, mask).
AZURE_SECRET_VARS = (
    "AZURE_ACCESS_TOKEN",
    "AZURE_SECRET",
    "AZURE_CLIENT_SECRET",
    "AZURE_CLIENT_CERTIFICATE_PASSWORD",
    "AZURE_PASSWORD",
    # the managed identity endpoint's shared secret (App Service, Service Fabric, Azure ML), read by azure-identity
    "IDENTITY_HEADER",
    "MSI_SECRET",
)
GCP_SECRET_VARS = ("GCP_ACCESS_TOKEN",)
AZURE_API = {
    "locks": "2020-05-01",
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

    def request(self, method, url, body=None, absent_ok=True, headers_out=None):
        """(status, JSON body); headers_out (a dict), when given, receives the answer's headers in lower case."""
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(self.retries + 1):
            headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
            if data is not None:
                headers["Content-Type"] = "application/json"
            self.calls.append((method, url))
            try:
                resp = self._request.open(method, url, data=data, headers=headers)
                raw = resp.read()
                if headers_out is not None:
                    headers_out.update((k.lower(), v) for k, v in resp.headers.items())
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


def load_environment(config_file, environment, cloud):
    """(config, environment table) from bootstrap.toml; CloudError when the environment's profile sweeps another cloud."""
    cfg = krops_config.load(config_file, environment=environment)
    env = cfg.environment()
    profile = profiles.of(env)
    if profile.cloud != cloud:
        raise CloudError(f"environment {cfg.selected} is of kind {profile.platform}, not {cloud}")
    return cfg, env


def env_secrets(environ, names):
    """The non-empty values of the secret-holding environment variables among names."""
    return {environ[name] for name in names if environ.get(name)}


def mask(module, environ, names):
    """Mask secrets taken from the environment like no_log parameters (AnsibleModule.no_log_values)."""
    module.no_log_values.update(env_secrets(environ, names))


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


def _first_line(exc):
    # google-auth errors carry (message, response body) as args; the message says it all
    first = exc.args[0] if getattr(exc, "args", None) and isinstance(exc.args[0], str) else None
    text = str(first or getattr(exc, "message", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --- Azure ------------------------------------------------------------------------------


def azure_credential(client_id=None, secret=None, tenant=None, login_endpoint=None):
    """An azure-identity credential: the service principal given, else DefaultAzureCredential's chain.

    The chain (environment service principal, workload identity, managed identity, az CLI, ...)
    reads its own environment variables. A login_endpoint given is the authority, trusted as given:
    no instance discovery, which would ask the public cloud about it.
    """
    try:
        from azure import identity  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise CloudError("azure_teardown needs the Python package azure-identity (requirements.txt)") from None
    kwargs = {"authority": login_endpoint, "disable_instance_discovery": True} if login_endpoint else {}
    try:
        if client_id and secret and tenant:
            return identity.ClientSecretCredential(tenant, client_id, secret, **kwargs)
        if client_id:  # selects the user-assigned managed identity / workload identity of the chain
            kwargs["managed_identity_client_id"] = client_id
        return identity.DefaultAzureCredential(**kwargs)
    except ValueError as exc:  # a malformed authority or AZURE_TOKEN_CREDENTIALS
        raise CloudError(f"Azure credentials: {_first_line(exc)}") from None


def _azure_reason(exc):
    """One line from an azure-identity error: the chain's summary and what each credential answered."""
    text = str(getattr(exc, "message", None) or exc)
    keep = [line.strip() for line in text.splitlines() if line.strip()]
    keep = [line for line in keep if not line.startswith(("Content:", "To mitigate", "Attempted credentials"))]
    return "; ".join(line.rstrip(".") for line in keep) or type(exc).__name__


def azure_token(access_token=None, credential=None, resource=AZURE_ARM):
    """A bearer token for ARM: given, else from an azure-identity credential (azure_credential)."""
    if access_token:
        return access_token
    scope = "{}/.default".format(resource.rstrip("/"))
    try:
        return credential.get_token(scope).token
    except Exception as exc:  # pylint: disable=broad-except  # azure-core's errors, without a traceback
        raise CloudError(
            f"Azure login failed ({_azure_reason(exc)}). Set access_token, or client_id/secret/tenant, or the "
            "variables DefaultAzureCredential reads (AZURE_CLIENT_ID, AZURE_TENANT_ID with AZURE_CLIENT_SECRET "
            "or AZURE_FEDERATED_TOKEN_FILE; a managed identity; `az login`); see docs/teardown.md"
        ) from None


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
    credential_names,
    credential_issuers,
    mgmt_cluster=None,
):
    """Read-only: the ordered deletion plan and what was left alone because krops does not own it.

    Federated identity credentials have no tags: one is krops' when it sits on a user-assigned
    identity tagged for this environment and its name is exactly one the bootstrap hook creates
    (credential_names) or its issuer is exactly one of credential_issuers. A name that merely
    shares a prefix proves nothing.
    """
    arm = arm.rstrip("/")
    sub = f"{arm}/subscriptions/{urllib.parse.quote(subscription)}"
    names, issuers = set(credential_names or ()), set(credential_issuers or ())
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
            if cred["name"] in names or issuer in issuers:
                plan.append(
                    {
                        "type": "federated-credential",
                        "id": cred["id"],
                        "name": cred["name"],
                        "reason": "{} on identity {} (tag {}={})".format(
                            "bootstrap credential" if cred["name"] in names else f"credential for issuer {issuer}",
                            identity["name"],
                            OWNER_TAG,
                            environment,
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
    for item in rg_plan:  # a management lock at or below the group makes ARM refuse its deletion
        locks = _azure_locks(http, arm, item["id"])
        if locks:
            item["locks"] = locks
    # workload groups first, the management cluster's group last
    rg_plan.sort(key=lambda item: bool(mgmt_cluster) and mgmt_cluster.lower() == item["name"].lower())
    return plan + rg_plan, not_owned


def _azure_locks(http, arm, scope):
    """Ids of the management locks on scope and everything inside it; [] when they cannot be read (ARM decides)."""
    try:
        found = http.pages(
            "{}{}/providers/Microsoft.Authorization/locks?api-version={}".format(arm, scope, AZURE_API["locks"]),
            "value",
            "nextLink",
        )
    except CloudError:
        return []
    return [lock["id"] for lock in found]


def _locked_message(item):
    return (
        "{} {} is under management lock(s) {}; krops never removes a lock: remove it if the group should go, then "
        "run the teardown again".format(item["type"], item["name"], ", ".join(item["locks"]))
    )


AZURE_ITEM_API = {
    "resource-group": AZURE_API["resourcegroups"],
    "arc-connected-cluster": AZURE_API["connectedClusters"],
    "federated-credential": AZURE_API["userAssignedIdentities"],
}
# Terminal states of an Azure-AsyncOperation status resource (Learn: Track asynchronous Azure operations).
AZURE_DONE, AZURE_FAILED = ("Succeeded",), ("Failed", "Canceled")


def _azure_monitor(status, headers):
    """How to follow an accepted ARM operation: Azure-AsyncOperation first, else Location, else the resource."""
    if status not in (201, 202):
        return None
    if headers.get("azure-asyncoperation"):
        return ("async", headers["azure-asyncoperation"])
    if headers.get("location"):
        return ("location", headers["location"])
    return None


def _azure_poll(http, url, monitor):
    """One look at a pending deletion: ('done' | 'pending' | 'failed', error)."""
    if monitor and monitor[0] == "async":
        dummy, body = http.request("GET", monitor[1], absent_ok=False)
        state = body.get("status")
        if state in AZURE_DONE:
            return "done", None
        if state in AZURE_FAILED:
            err = body.get("error") or {}
            return "failed", "the delete operation ended {}: {}".format(
                state, err.get("message") or err.get("code") or "(no error given)"
            )
        return "pending", None
    if monitor and monitor[0] == "location":
        try:
            status, dummy = http.request("GET", monitor[1], absent_ok=False)
        except CloudError as exc:  # the operation's own failure answer
            return "failed", f"the delete operation failed: {exc}"
        return ("pending", None) if status == 202 else ("done", None)
    status, body = http.get(url)
    if status == 404:
        return "done", None
    return "pending", None


def azure_wait(http, pending, timeout, poll_interval, clock=time.monotonic, sleep=time.sleep):
    """Follow accepted deletions [(item, url, monitor)] to their end; {id: error} of those that did not succeed."""
    errors = {}
    left = list(pending)
    deadline = clock() + timeout
    while left:
        still = []
        for item, url, monitor in left:
            try:
                state, error = _azure_poll(http, url, monitor)
            except CloudError as exc:
                state, error = "failed", str(exc)
            if state == "failed":
                errors[item["id"]] = error
            elif state == "pending":
                still.append((item, url, monitor))
        left = still
        if not left or clock() >= deadline:
            break
        sleep(poll_interval)
    for item, dummy, dummy2 in left:
        errors[item["id"]] = f"still deleting after {timeout}s (wait_timeout)"
    return errors


def azure_teardown(
    http,
    arm,
    subscription,
    environment,
    resource_groups,
    clusters,
    credential_names,
    credential_issuers=(),
    mgmt_cluster=None,
    check_mode=False,
    wait=True,
    wait_timeout=1800,
    poll_interval=10,
    sleep=time.sleep,
    clock=time.monotonic,
):
    """Delete the plan azure_discover makes, follow each operation, then discover again: what is left fails."""
    args = (http, arm, subscription, environment, resource_groups, clusters, list(credential_names or ()))
    plan, not_owned = azure_discover(*args, list(credential_issuers), mgmt_cluster)
    result = {
        "plan": [
            "delete {} {} ({}){}".format(
                p["type"],
                p["id"],
                p["reason"],
                " - locked by {}: this delete will fail".format(", ".join(p["locks"])) if p.get("locks") else "",
            )
            for p in plan
        ],
        "not_owned": not_owned,
        "results": [],
        "leftovers": [],
        "changed": bool(plan),
    }
    if check_mode:
        result["results"] = [dict(p, outcome=ownership.PLANNED) for p in plan]
        return result
    base = arm.rstrip("/")
    pending = []
    for item in plan:
        url = "{}{}?api-version={}".format(base, item["id"], AZURE_ITEM_API[item["type"]])
        if item.get("locks"):  # ARM would answer 409 ScopeLocked: say why without asking
            result["results"].append(dict(item, outcome=ownership.FAILED, error=_locked_message(item)))
            result["leftovers"].append(item["id"])
            continue
        headers = {}
        try:
            status, dummy = http.request("DELETE", url, headers_out=headers)
        except CloudError as exc:  # 409 ScopeLocked (a management lock), 403, ...: krops never removes a lock
            result["results"].append(dict(item, outcome=ownership.FAILED, error=str(exc)))
            result["leftovers"].append(item["id"])
            continue
        if status in (204, 404):  # ARM answers 204 to a delete of an absent resource
            result["results"].append(dict(item, outcome="absent"))
            continue
        result["results"].append(dict(item, outcome="deleted"))
        if status in (201, 202):
            pending.append((item, url, _azure_monitor(status, headers)))
    if not wait:
        return result
    errors = azure_wait(http, pending, wait_timeout, poll_interval, clock=clock, sleep=sleep)
    for item, url, dummy in pending:  # an operation that failed on a resource gone since (its group went) left nothing
        if item["id"] in errors and http.get(url)[0] == 404:
            del errors[item["id"]]
    # rc=0 means nothing owned is left: discover again, every owned resource still there is a leftover
    again, dummy = azure_discover(*args, list(credential_issuers), mgmt_cluster)
    for item in again:
        errors.setdefault(item["id"], "still present after the teardown")
    for entry in result["results"]:
        if entry["id"] in errors and entry["outcome"] != ownership.FAILED:
            entry["outcome"], entry["error"] = ownership.FAILED, errors[entry["id"]]
    for rid in errors:
        if rid not in result["leftovers"]:
            result["leftovers"].append(rid)
    return result


def azure_client(access_token, client_id, secret, tenant, login_endpoint, endpoint, environ):
    """An ARM client with a token: given (or AZURE_ACCESS_TOKEN), else the service principal, else the SDK chain."""
    token = access_token or environ.get("AZURE_ACCESS_TOKEN")
    credential = None
    if not token:
        # the service principal given (or as azure.azcollection and AWX spell it), else DefaultAzureCredential
        credential = azure_credential(
            client_id or environ.get("AZURE_CLIENT_ID"),
            secret or environ.get("AZURE_SECRET"),
            tenant or environ.get("AZURE_TENANT"),
            login_endpoint,
        )
    return Http(azure_token(token, credential, endpoint), what="ARM")


FIC_AUDIENCE = "api://AzureADTokenExchange"


def azure_arc_issuer(
    http,
    arm,
    subscription,
    group,
    cluster,
    api_version,
    timeout=0,
    poll_interval=10,
    clock=time.monotonic,
    sleep=time.sleep,
):
    """(exists, issuer URL) of an Arc connected cluster; waits up to timeout for Arc to publish the issuer."""
    url = "{}/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Kubernetes/connectedClusters/{}?api-version={}".format(
        arm.rstrip("/"), *(urllib.parse.quote(v) for v in (subscription, group, cluster, api_version))
    )
    deadline = clock() + timeout
    while True:
        status, body = http.get(url)
        if status == 404:
            return False, None
        props = body.get("properties") or {}
        issuer = (props.get("oidcIssuerProfile") or {}).get("issuerUrl")
        if issuer:
            return True, issuer
        if props.get("provisioningState") in AZURE_FAILED:
            raise CloudError(
                "Arc connected cluster {}/{} is {}; connect it again (az connectedk8s connect)".format(
                    group, cluster, props["provisioningState"]
                )
            )
        if clock() >= deadline:
            if timeout:
                raise CloudError(
                    f"Arc connected cluster {group}/{cluster} published no OIDC issuer within {timeout}s; it must be connected with "
                    "--enable-oidc-issuer"
                )
            return True, None
        sleep(poll_interval)


def azure_federate(http, arm, subscription, group, identity, issuer, subjects, check_mode=False):
    """Federated identity credentials on a user-assigned identity, one per {name, subject}; idempotent.

    Returns [{name, subject, state}] with state created, updated, unchanged (planned-* in check mode).
    Writes are sequential: ARM refuses concurrent credential writes on one identity.
    """
    base = "{}/subscriptions/{}/resourceGroups/{}/providers/Microsoft.ManagedIdentity/userAssignedIdentities/{}".format(
        arm.rstrip("/"), *(urllib.parse.quote(v) for v in (subscription, group, identity))
    )
    api = AZURE_API["userAssignedIdentities"]
    status, dummy = http.get(f"{base}?api-version={api}")
    if status == 404:
        raise CloudError(
            f"user-assigned identity {identity} not found in resource group {group}: create it once as docs/environments/azure.md "
            "describes (prerequisites)"
        )
    states = []
    for item in subjects:
        url = "{}/federatedIdentityCredentials/{}?api-version={}".format(base, urllib.parse.quote(item["name"]), api)
        want = {"issuer": issuer, "subject": item["subject"], "audiences": [FIC_AUDIENCE]}
        status, current = http.get(url)
        have = (current or {}).get("properties") or {}
        if status != 404 and all(have.get(k) == v for k, v in want.items()):
            state = "unchanged"
        else:
            state = "created" if status == 404 else "updated"
            if check_mode:
                state = "planned-" + state
            else:
                http.request("PUT", url, {"properties": want})
        states.append({"name": item["name"], "subject": item["subject"], "state": state})
    return states


# --- GCP --------------------------------------------------------------------------------


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
            f"no GCP credentials: {_first_line(exc)} Set access_token (or GCP_ACCESS_TOKEN), "
            "GOOGLE_APPLICATION_CREDENTIALS, run `gcloud auth application-default login`, or run where a "
            "metadata server serves a service account; see docs/teardown.md"
        ) from None
    try:
        credentials.refresh(google.auth.transport.requests.Request())
    except google.auth.exceptions.GoogleAuthError as exc:
        raise CloudError(f"GCP login ({type(credentials).__module__}) failed: {_first_line(exc)}") from None
    return credentials.token


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
