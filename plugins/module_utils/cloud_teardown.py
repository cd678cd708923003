# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Azure and GCP teardown through their REST APIs (ARM; GKE, Cloud SQL, Cloud Storage, Compute, Service Networking).

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

import email.utils
import http.client
import json
import os
import random
import ssl
import time
import urllib.error
import urllib.parse

from ansible.module_utils.urls import Request

from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils.errors import CloudError  # the error a cloud call raises
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
    "servicenetworking": "https://servicenetworking.googleapis.com/v1",
    "cloudresourcemanager": "https://cloudresourcemanager.googleapis.com/v1",
    "iam": "https://iam.googleapis.com/v1",
}


class RetryPolicy:
    """One retry policy for the ARM and Google REST calls: how many attempts, and how long to wait.

    The server's ``Retry-After`` (seconds or an HTTP date, RFC 9110 section 10.2.3; ARM and Google send it
    with 429 and 503) is honoured, capped at ``retry_after_cap``; otherwise full-jitter exponential
    backoff, uniform(0, min(cap, base * 2**attempt)), so that many clients throttled together do not
    come back together.
    """

    def __init__(self, attempts=5, base=1.0, cap=30.0, retry_after_cap=120.0, rand=random.uniform):
        self.attempts = attempts
        self.base = base
        self.cap = cap
        self.retry_after_cap = retry_after_cap
        self.rand = rand

    def delay(self, attempt, retry_after=None):
        wait = parse_retry_after(retry_after)
        if wait is not None:
            return min(wait, self.retry_after_cap)
        return self.rand(0, min(self.cap, self.base * (2**attempt)))


def parse_retry_after(value, now=None):
    """Seconds from a Retry-After value (delay-seconds or HTTP-date), or None when absent or unreadable."""
    if value is None or not str(value).strip():
        return None
    text = str(value).strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


# Reads and writes alike: a timeout, a dropped connection or a cut-short answer (http.client raises
# IncompleteRead or RemoteDisconnected, which are not OSErrors) is retried, then reported cleanly.
_TRANSPORT_ERRORS = (urllib.error.URLError, OSError, http.client.HTTPException)


class Http:
    """JSON over HTTPS with a bearer token; retries 429/5xx and transport failures under one RetryPolicy;
    404 is reported, not raised."""

    def __init__(self, token, timeout=60, retries=4, sleep=time.sleep, what="API", policy=None):
        self.token = token
        self.timeout = timeout
        self.policy = policy or RetryPolicy(attempts=retries + 1)
        self.retries = self.policy.attempts - 1
        self.sleep = sleep
        self.what = what
        self.calls = []
        # One verifying TLS context for every call (building one per call costs ~0.2 s).
        self._request = Request(timeout=timeout, follow_redirects="safe", context=ssl.create_default_context())

    def request(self, method, url, body=None, absent_ok=True, headers_out=None, answer_ok=()):
        """(status, JSON body); headers_out (a dict), when given, receives the answer's headers in lower case.

        A status in answer_ok is returned with its body instead of raised (e.g. 409 for a retry).
        """
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(self.retries + 1):
            last = attempt >= self.retries
            headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
            if data is not None:
                headers["Content-Type"] = "application/json"
            self.calls.append((method, url))
            try:
                resp = self._request.open(method, url, data=data, headers=headers)
                raw = resp.read()
                if headers_out is not None:
                    headers_out.update((k.lower(), v) for k, v in resp.headers.items())
                try:
                    return resp.status, (json.loads(raw) if raw.strip() else {})
                except ValueError:
                    raise CloudError(
                        f"{method} {_redact(url)} answered {resp.status} with a body that is not JSON: {_message(raw)}"
                    ) from None
            except urllib.error.HTTPError as exc:
                try:
                    raw = exc.read()
                except _TRANSPORT_ERRORS:
                    raw = b""
                if exc.code == 404 and absent_ok:
                    return 404, {}
                if exc.code in answer_ok:
                    return exc.code, _json_or_empty(raw)
                if (exc.code == 429 or exc.code >= 500) and not last:
                    self.sleep(self.policy.delay(attempt, exc.headers.get("Retry-After") if exc.headers else None))
                    continue
                raise CloudError(f"{method} {_redact(url)} answered {exc.code}: {_message(raw)}")
            except _TRANSPORT_ERRORS as exc:
                if not last:
                    self.sleep(self.policy.delay(attempt))
                    continue
                reason = getattr(exc, "reason", None) or exc or type(exc).__name__
                raise CloudError(
                    f"{method} {_redact(url)} failed: {reason} (after {attempt + 1} attempts, {self.timeout}s timeout each)"
                )
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


def _json_or_empty(raw):
    try:
        body = json.loads(raw)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


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
    """{lower-case tag name: [values]}: Azure tag names are case-insensitive, their values are not
    (docs/upstream-facts.md, Azure tags). A list, so two spellings of one name cannot hide each other."""
    found = {}
    for key, value in (resource.get("tags") or {}).items():
        found.setdefault(str(key).lower(), []).append(value)
    return found


def _tag_is(tags, key, value):
    """Whether tag ``key`` (any case) is exactly ``value`` and carries no other value."""
    values = tags.get(key.lower())
    return bool(values) and all(v == value for v in values)


def azure_owned(resource, environment, clusters):
    """Why krops owns an Azure resource (a tag), or None."""
    tags = _tags(resource)
    if any(v != environment for v in tags.get(OWNER_TAG.lower(), ())):
        return None  # declared by another environment (in any spelling of the tag name): never ours
    if _tag_is(tags, OWNER_TAG, environment):
        return f"tag {OWNER_TAG}={environment}"
    for cluster in clusters:
        if _tag_is(tags, CAPZ_OWNED_TAG % cluster, "owned"):
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
        if azure_owned(identity, environment, []) is None:
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
    wanted += [n for n, g in sorted(groups.items()) if azure_owned(g, environment, []) and n not in wanted]
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
    except google.auth.exceptions.GoogleAuthError as exc:  # e.g. an external_account's project lookup failed
        raise CloudError(f"GCP credentials could not be loaded: {_first_line(exc)}") from None
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
        plan["iam-grants"], plan["service-accounts"] = _gcp_accounts(http, roots, project, service_accounts)
        plan["workload-identity-providers"] = _gcp_providers(http, roots, project, providers)
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
GCP_PROVIDER_NAME = krops_config.GCP_WIF_PROVIDER_NAME
GCP_ACCOUNT_ID = krops_config.GCP_SERVICE_ACCOUNT_ID


def gcp_iam_refusals(cfg, env, accounts, providers):
    """Refuse, before any call, service accounts and providers validate would refuse (ownership.gcp_iam_problems:
    a prerequisite such as krops-capg, another pool's provider, a name the tree does not declare). The tree is
    read from mgmt/<environment>/ of the repository of bootstrap.toml (_tree_objects)."""
    if not accounts and not providers:
        return
    top = os.path.join(cfg.root, "mgmt", cfg.selected)
    if not os.path.isdir(top):
        raise CloudError(
            f"no tree {top} next to bootstrap.toml: gcp_teardown checks service accounts and workload identity "
            "providers against the tree before it deletes any (run it from the krops checkout)"
        )
    objects = _tree_objects(top)
    declared = ownership.gcp_iam_declared(objects, env.get("post-kind-create-hook"))
    refused = [m for dummy, refuse, m in ownership.gcp_iam_problems(accounts, providers, declared) if refuse]
    if refused:
        raise CloudError(
            "gcp_teardown refuses to delete what krops does not own (the rules validate applies, docs/teardown.md): "
            + "; ".join(refused)
        )


def _tree_objects(top):
    """The manifests under top, each with the commonAnnotations of every kustomization above it (up to top).

    Read as plain YAML through the bounded loader, without kustomize (teardown needs no renderer). Taking
    every enclosing kustomization's annotations errs on the side of refusing: an abandon annotation
    anywhere above an account makes it a prerequisite.
    """
    from ansible_collections.krops.platform.plugins.module_utils import render  # pylint: disable=import-outside-toplevel

    def load(path):
        try:
            return render.load_yaml_documents(path)
        except (OSError, ValueError, render.YAMLLimitError) as exc:
            raise CloudError(f"cannot read {path} of the tree: {exc}") from None
        except Exception as exc:  # pylint: disable=broad-except  # yaml.YAMLError, without importing yaml here
            raise CloudError(f"cannot parse {path} of the tree: {_first_line(exc)}") from None

    objects, inherited = [], {top: {}}
    for folder, dirs, files in os.walk(top):
        dirs.sort()
        annotations = dict(inherited.get(folder) or {})
        for name in render.KUSTOMIZATION_FILES:
            if name in files:
                for doc in load(os.path.join(folder, name)):
                    annotations.update(doc.get("commonAnnotations") or {})
        for sub in dirs:
            inherited[os.path.join(folder, sub)] = annotations
        for name in sorted(files):
            if name in render.KUSTOMIZATION_FILES or not name.endswith((".yaml", ".yml")):
                continue
            for doc in load(os.path.join(folder, name)):
                meta = doc.get("metadata")
                if isinstance(meta, dict):
                    meta["annotations"] = dict(annotations, **(meta.get("annotations") or {}))
                objects.append(doc)
    return objects


def gcp_account_email(account, project):
    """The email of a user-managed service account id in project (IAM: <id>@<project>.iam.gserviceaccount.com)."""
    return f"{account}@{project}.iam.gserviceaccount.com"


def _gcp_policy_url(roots, project):
    return "{}/projects/{}".format(roots["cloudresourcemanager"], urllib.parse.quote(project))


def _gcp_grant_members(email):
    """Whether a project policy member is exactly this account (also its deleted:...?uid= form)."""
    return lambda m: m == f"serviceAccount:{email}" or m.startswith(f"deleted:serviceAccount:{email}?uid=")


def _gcp_accounts(http, roots, project, accounts):
    """(grant items, account items): the named accounts that exist and every project grant to exactly them."""
    if not accounts:
        return [], []
    grants, found = [], []
    status, policy = http.request("POST", _gcp_policy_url(roots, project) + ":getIamPolicy", _POLICY_OPTIONS)
    for account in accounts:
        email = gcp_account_email(account, project)
        is_member = _gcp_grant_members(email)
        for binding in policy.get("bindings") or []:
            for member in binding.get("members") or []:
                if is_member(member):
                    grants.append(
                        {
                            "type": "iam-grant",
                            "name": "{} {}".format(binding["role"], member),
                            "url": _gcp_policy_url(roots, project),
                            "reason": f"project grant to service account {account} (teardown.service-accounts)",
                            "_role": binding["role"],
                            "_member": member,
                        }
                    )
        url = "{}/projects/{}/serviceAccounts/{}".format(
            roots["iam"], urllib.parse.quote(project), urllib.parse.quote(email)
        )
        if http.get(url)[0] != 404:
            found.append(
                {
                    "type": "service-account",
                    "name": email,
                    "url": url,
                    "reason": "named in bootstrap.toml (teardown.service-accounts)",
                }
            )
    return grants, found


def _gcp_providers(http, roots, project, providers):
    """The named <pool>/<provider> that exist and are not soft-deleted already (state DELETED)."""
    found = []
    for name in providers:
        pool, dummy, provider = name.partition("/")
        url = "{}/projects/{}/locations/global/workloadIdentityPools/{}/providers/{}".format(
            roots["iam"], urllib.parse.quote(project), urllib.parse.quote(pool), urllib.parse.quote(provider)
        )
        status, body = http.get(url)
        if status != 404 and body.get("state") != "DELETED":
            found.append(
                {
                    "type": "workload-identity-provider",
                    "name": name,
                    "url": url,
                    "reason": "named in bootstrap.toml (teardown.workload-identity-providers)",
                }
            )
    return found


# policy version 3 so conditional bindings come back whole (a lower version would be refused on write)
_POLICY_OPTIONS = {"options": {"requestedPolicyVersion": 3}}
_POLICY_RETRIES = 5


def _gcp_remove_grant(http, item):
    """Read-modify-write of the project policy with its etag: remove exactly one member from one role.

    A 409 (ABORTED: the policy changed since it was read) re-reads and retries.
    """
    for dummy in range(_POLICY_RETRIES):
        status, policy = http.request("POST", item["url"] + ":getIamPolicy", _POLICY_OPTIONS)
        changed = False
        for binding in policy.get("bindings") or []:
            if binding.get("role") == item["_role"] and item["_member"] in (binding.get("members") or []):
                binding["members"] = [m for m in binding["members"] if m != item["_member"]]
                changed = True
        if not changed:
            return ownership.ABSENT
        policy["bindings"] = [b for b in policy["bindings"] if b.get("members")]
        status, answer = http.request("POST", item["url"] + ":setIamPolicy", {"policy": policy}, answer_ok=(409,))
        if status != 409:
            return ownership.DELETED
    raise CloudError(
        f"the project IAM policy kept changing during {_POLICY_RETRIES} read-modify-write attempts (409 ABORTED)"
    )


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
        return _gcp_remove_grant(http, item), None
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
