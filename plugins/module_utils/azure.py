# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Azure teardown through ARM: discover what an environment created (resource groups bootstrap.toml names that
carry krops' or CAPZ's ownership tag, federated credentials, the Arc resource), refuse locks, delete and wait;
and the Arc federation hook's ARM calls. Only what ownership.md proves owned is touched."""

from __future__ import annotations

import time
import urllib.parse

from ansible_collections.krops.platform.plugins.module_utils import ownership
from ansible_collections.krops.platform.plugins.module_utils.errors import CloudError
from ansible_collections.krops.platform.plugins.module_utils.cloud_teardown import (
    AZURE_API,
    AZURE_ARM,
    CAPZ_OWNED_TAG,
    OWNER_TAG,
    Http,
    first_line,
)


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
        raise CloudError(f"Azure credentials: {first_line(exc)}") from None


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
