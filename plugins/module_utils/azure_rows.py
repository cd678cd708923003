# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The rows of an Azure teardown: one ``steps.Row`` per resource type, in deletion order.

Federated identity credentials, then the Arc connected cluster, then the resource groups (workload groups
first, the management cluster's group last). No row depends on another: every deletion is started, then
the engine (steps.py) follows each accepted operation to its end (Azure-AsyncOperation, else Location, else
the resource itself), and discovers again: every owned resource still there is a leftover. A failed
operation on a resource gone since (its group went) left nothing.

Ownership (azure.azure_owned, ownership.md): a resource group bootstrap.toml names must carry krops' tag or
CAPZ's owned tag for a cluster of the environment; one tagged for this environment is taken without being
named. Federated identity credentials have no tags: one is krops' when it sits on a user-assigned identity
tagged for this environment and its name is exactly one the bootstrap hook creates (credential_names) or its
issuer is exactly one of credential_issuers. A name that merely shares a prefix proves nothing. A group
under a management lock is never tried: krops never removes a lock.

Each item carries its resource's creation time for the orphan report (``_created``): ARM's
``systemData.createdAt`` (common-types Resource.systemData), which identities, federated credentials and Arc
connected clusters declare; a resource group (Microsoft.Resources 2021-04-01) declares none, so its age is
unknown unless ARM sends systemData all the same (docs/upstream-facts.md).
"""

from __future__ import annotations

import urllib.parse

from ansible_collections.krops.platform.plugins.module_utils import azure, ownership, steps
from ansible_collections.krops.platform.plugins.module_utils.cloud_teardown import OWNER_TAG, run_options
from ansible_collections.krops.platform.plugins.module_utils.errors import CloudError


class AzureScan:
    """One discovery: the subscription's ARM root, the ownership inputs and what was left alone (``not_owned``)."""

    def __init__(self, http, arm, subscription, environment, groups, clusters, names, issuers, mgmt_cluster):
        self.http, self.arm = http, arm
        self.sub = f"{arm}/subscriptions/{urllib.parse.quote(subscription)}"
        self.environment, self.groups, self.clusters = environment, groups, clusters
        self.names, self.issuers, self.mgmt_cluster = set(names or ()), set(issuers or ()), mgmt_cluster
        self.not_owned = []

    def pages(self, path, rtype):
        """Every resource of the subscription's ``path``, listed at the api-version of row ``rtype`` (TABLE)."""
        return self.http.pages(f"{self.sub}{path}?api-version={API_VERSION[rtype]}", "value", "nextLink")


def _item(rtype, resource, reason):
    """A row's item: the resource's type, id, name, ownership reason and creation time (``_created``)."""
    created = (resource.get("systemData") or {}).get("createdAt")
    return {"type": rtype, "id": resource["id"], "name": resource["name"], "reason": reason, "_created": created}


def _credentials(s):
    found = []
    for identity in s.pages("/providers/Microsoft.ManagedIdentity/userAssignedIdentities", "federated-credential"):
        if azure.azure_owned(identity, s.environment, []) is None:
            continue
        creds = s.http.pages(
            "{}{}/federatedIdentityCredentials?api-version={}".format(
                s.arm, identity["id"], API_VERSION["federated-credential"]
            ),
            "value",
            "nextLink",
        )
        for cred in creds:
            issuer = (cred.get("properties") or {}).get("issuer")
            if cred["name"] in s.names or issuer in s.issuers:
                why = "bootstrap credential" if cred["name"] in s.names else f"credential for issuer {issuer}"
                reason = "{} on identity {} (tag {}={})".format(why, identity["name"], OWNER_TAG, s.environment)
                found.append(_item("federated-credential", cred, reason))
    return found


def _arcs(s):
    found = []
    for arc in s.pages("/providers/Microsoft.Kubernetes/connectedClusters", "arc-connected-cluster"):
        why = azure.azure_owned(arc, s.environment, [])
        if why:
            found.append(_item("arc-connected-cluster", arc, why))
    return found


def _groups(s):
    groups = {g["name"].lower(): g for g in s.pages("/resourcegroups", "resource-group")}
    wanted = [n.lower() for n in s.groups]
    wanted += [n for n, g in sorted(groups.items()) if azure.azure_owned(g, s.environment, []) and n not in wanted]
    found = []
    for group in (groups[name] for name in wanted if name in groups):
        why = azure.azure_owned(group, s.environment, s.clusters)
        if why:
            found.append(_item("resource-group", group, why))
            continue
        reason = "named in bootstrap.toml but carries neither {}={} nor a CAPZ owned tag for {}".format(
            OWNER_TAG, s.environment, ", ".join(s.clusters)
        )
        s.not_owned.append({"type": "resource-group", "id": group["id"], "name": group["name"], "reason": reason})
    for item in found:  # a management lock at or below the group makes ARM refuse its deletion
        locks = azure.azure_locks(s.http, s.arm, item["id"])
        if locks:
            item["locks"] = locks
    # workload groups first, the management cluster's group last
    found.sort(key=lambda item: bool(s.mgmt_cluster) and s.mgmt_cluster.lower() == item["name"].lower())
    return found


def _url(run, item):
    return "{}{}?api-version={}".format(run.ctx.arm, item["id"], API_VERSION[item["type"]])


def _delete(run, item):
    """DELETE one resource: (outcome, [url, monitor] of an accepted operation, or None when it is final)."""
    if item.get("locks"):  # ARM would answer 409 ScopeLocked: say why without asking
        raise CloudError(azure.locked_message(item))
    headers = {}
    # 409 ScopeLocked (a management lock), 403, ... raise: krops never removes a lock
    status, dummy = run.ctx.http.request("DELETE", _url(run, item), headers_out=headers)
    if status in (204, 404):  # ARM answers 204 to a delete of an absent resource
        return ownership.ABSENT, None
    return ownership.DELETED, (
        [_url(run, item), azure.azure_monitor(status, headers)] if status in (201, 202) else None
    )


def _poll(run, handle):
    try:
        return azure.azure_poll(run.ctx.http, handle[0], handle[1])
    except CloudError as exc:
        return steps.FAILED, str(exc)


def _gone(run, item):
    return run.ctx.http.get(_url(run, item))[0] == 404


def _plan(item):
    locked = " - locked by {}: this delete will fail".format(", ".join(item["locks"])) if item.get("locks") else ""
    return "delete {} {} ({}){}".format(item["type"], item["id"], item["reason"], locked)


# (type, discovery, the api-version its listing, DELETE and GET use: its provider's), in deletion order
TABLE = (
    ("federated-credential", _credentials, "2023-01-31"),  # Microsoft.ManagedIdentity (the identities too)
    ("arc-connected-cluster", _arcs, "2024-01-01"),  # Microsoft.Kubernetes
    ("resource-group", _groups, "2021-04-01"),  # Microsoft.Resources
)
ROWS = tuple(steps.Row(name, discover, _delete, plan=_plan, poll=_poll, gone=_gone) for name, discover, dummy in TABLE)
API_VERSION = {name: version for name, dummy, version in TABLE}


class _Arm:
    def __init__(self, http, arm):
        self.http, self.arm = http, arm


def azure_teardown(*args, **options):
    """Delete what the rows discover, follow each operation, then discover again: what is left fails
    (the arguments are azure_run's)."""
    return azure_run(*args, **options).execute()


def azure_run(
    http,
    arm,
    subscription,
    environment,
    resource_groups,
    clusters,
    credential_names,
    credential_issuers=(),
    mgmt_cluster=None,
    **options,
):
    """The steps.Run of an Azure teardown (azure_teardown runs it; in check mode it is the orphan report's); ``options``
    are cloud_teardown.run_options'."""
    arm = arm.rstrip("/")
    args = (http, arm, subscription, environment, resource_groups, clusters, credential_names, credential_issuers)
    return steps.Run(
        ROWS,
        _Arm(http, arm),
        lambda: AzureScan(*args, mgmt_cluster),
        facts=lambda scan: {"not_owned": scan.not_owned},
        label=lambda item: item["id"],
        stop=False,
        left=ownership.FAILED,
        appeared=False,
        **run_options(**options),
    )
