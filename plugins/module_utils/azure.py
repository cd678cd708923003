# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Azure through ARM: credentials, ownership (krops' or CAPZ's tag), locks and how an accepted deletion is
followed, which the rows of an Azure teardown use (azure_rows.py, run by steps.py); and the Arc federation
hook's ARM calls. Only what ownership.md proves owned is touched."""

from __future__ import annotations

import time
import urllib.parse

from ansible_collections.krops.platform.plugins.module_utils import shell
from ansible_collections.krops.platform.plugins.module_utils.errors import CloudError
from ansible_collections.krops.platform.plugins.module_utils.cloud_teardown import (
    AZURE_API,
    AZURE_ARM,
    AZURE_SECRET_VARS,
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


def azure_locks(http, arm, scope):
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


def locked_message(item):
    return (
        "{} {} is under management lock(s) {}; krops never removes a lock: remove it if the group should go, then "
        "run the teardown again".format(item["type"], item["name"], ", ".join(item["locks"]))
    )


# Terminal states of an Azure-AsyncOperation status resource (Learn: Track asynchronous Azure operations).
AZURE_DONE, AZURE_FAILED = ("Succeeded",), ("Failed", "Canceled")


def azure_monitor(status, headers):
    """How to follow an accepted ARM operation: Azure-AsyncOperation first, else Location, else the resource."""
    if status not in (201, 202):
        return None
    if headers.get("azure-asyncoperation"):
        return ("async", headers["azure-asyncoperation"])
    if headers.get("location"):
        return ("location", headers["location"])
    return None


def azure_poll(http, url, monitor):
    """One look at a pending deletion: ('done' | 'pending' | 'failed', error), the values of steps.DONE, ..."""
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


# The subscription and login options of every module that calls ARM (doc fragment krops.platform.azure).
LOGIN_ARGS = dict(
    subscription_id=dict(type="str"),
    access_token=dict(type="str", no_log=True),
    client_id=dict(type="str"),
    secret=dict(type="str", no_log=True),
    tenant=dict(type="str"),
    endpoint=dict(type="str", default=AZURE_ARM),
    login_endpoint=dict(type="str"),
)


def run_module(name, argument_spec, run):
    """The shell of a module that calls ARM: ``run(params, check_mode, step=)`` returns the result; the Azure
    secrets of the environment (cloud_teardown.AZURE_SECRET_VARS) are masked."""
    shell.run(
        name,
        argument_spec,
        lambda module, step: run(module.params, module.check_mode, step=step),
        secret_env=AZURE_SECRET_VARS,
    )


def subscription_of(params, environ):
    """The subscription of LOGIN_ARGS' subscription_id, else AZURE_SUBSCRIPTION_ID; CloudError without one."""
    subscription = params["subscription_id"] or environ.get("AZURE_SUBSCRIPTION_ID")
    if not subscription:
        raise CloudError("no Azure subscription: set subscription_id or AZURE_SUBSCRIPTION_ID")
    return subscription


def client_of(params, environ):
    """azure_client of the LOGIN_ARGS options in ``params``."""
    return azure_client(
        params["access_token"],
        params["client_id"],
        params["secret"],
        params["tenant"],
        params["login_endpoint"],
        params["endpoint"],
        environ,
    )


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


def azure_federate(http, arm, subscription, group, identity, issuer, subjects, api_version, check_mode=False):
    """Federated identity credentials on a user-assigned identity, one per {name, subject}; idempotent. The identity
    and its credentials are read and written at ``api_version`` (the teardown's row's: azure_rows.API_VERSION).

    Returns [{name, subject, state}] with state created, updated, unchanged (planned-* in check mode).
    Writes are sequential: ARM refuses concurrent credential writes on one identity.
    """
    base = "{}/subscriptions/{}/resourceGroups/{}/providers/Microsoft.ManagedIdentity/userAssignedIdentities/{}".format(
        arm.rstrip("/"), *(urllib.parse.quote(v) for v in (subscription, group, identity))
    )
    status, dummy = http.get(f"{base}?api-version={api_version}")
    if status == 404:
        raise CloudError(
            f"user-assigned identity {identity} not found in resource group {group}: create it once as docs/environments/azure.md "
            "describes (prerequisites)"
        )
    states = []
    for item in subjects:
        url = "{}/federatedIdentityCredentials/{}?api-version={}".format(
            base, urllib.parse.quote(item["name"]), api_version
        )
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
