"""An HTTP double of Azure Resource Manager (ARM) that answers the way ARM does, for the azure tests.

No emulator of ARM exists, so this is a small stateful server on 127.0.0.1. It keeps resource
groups, resources and their child resources by id, and follows the conventions krops relies on;
each is taken from Microsoft's documentation or the ARM RPC and recorded here:

- Long-running operations: a DELETE (or a PUT of a slow type) answers 202 (201 for a creation)
  with ``Azure-AsyncOperation`` and/or ``Location`` headers and ``Retry-After``. The
  Azure-AsyncOperation URL answers 200 with ``{"status": "InProgress" | "Succeeded" | "Failed" |
  "Canceled", "error": {...}}``; the Location URL answers 202 while the operation runs, then 200
  (204 for a DELETE) or the failure's error status and body. A client must prefer
  Azure-AsyncOperation when present. Sources: learn.microsoft.com
  azure-resource-manager/management/async-operations ("Track asynchronous Azure operations",
  also docs.azure.cn resource-manager-async-operations); Azure/azure-openapi-validator
  docs/lro-azure-async-operation-header.md (RPC-Async-V1-06); Azure/azure-rest-api-specs
  conceptual "Asynchronous Operations (202 Accepted and Location header)".
- While an asynchronous delete runs, GET on the resource answers 200 with
  ``properties.provisioningState = "Deleting"`` (a state that is not Succeeded, Failed or
  Canceled means not finished: the same Learn page); ``delete_polls`` sets after how many
  status polls it completes.
- Absent: 404 with ``ResourceGroupNotFound`` when the resource group is missing, else
  ``ResourceNotFound``; a DELETE of an absent resource inside an existing group answers 204
  (ARM RPC: delete is idempotent), of an absent resource group 404 ``ResourceGroupNotFound``.
- Errors have the ARM body ``{"error": {"code", "message"}}``.
- 409 Conflict: ``ScopeLocked`` when a management lock (Microsoft.Authorization/locks,
  CanNotDelete or ReadOnly) sits on the resource, a parent or, for a resource group, on anything
  inside it (locks are inherited by child scopes: learn.microsoft.com
  azure-resource-manager/management/lock-resources; the 409 ScopeLocked code as public ARM
  clients see it); ``AnotherOperationInProgress`` for a write while an operation on the same
  resource runs; ``ResourceGroupBeingDeleted`` for a PUT into a group that is being deleted.
- Listing pages: ``{"value": [...], "nextLink": "<absolute URL>"}``; the nextLink carries the
  api-version and a ``$skiptoken`` and is followed as given.
- ``api-version`` is required on every request: 400 ``MissingApiVersionParameter`` without it,
  400 ``InvalidApiVersionParameter`` (resource groups) / ``NoRegisteredProviderFound`` (provider
  types) for a version the type does not serve (API_VERSIONS; the versions are the ones krops
  calls, from the REST references of each type).
- A bearer token is required (401 ``AuthenticationFailed`` without one, ``InvalidAuthenticationToken``
  for another one); an unknown subscription is 404 ``SubscriptionNotFound``.
- Tags: a tag name may not contain ``< > % & \\ ? /`` (400 ``InvalidTagNameCharacters``):
  learn.microsoft.com azure-resource-manager/management/tag-resources, limitations.

Every call is recorded in ``calls`` as (method, path, Authorization header) so tests can assert the
order and that nothing outside the ownership filter was written.
"""

from __future__ import annotations

import itertools
from urllib.parse import quote

from tests.substrate.http_double import HttpDouble, Reply

SUBSCRIPTION = "00000000-0000-0000-0000-000000000001"

# api-versions each type serves here (what krops and its hook call).
API_VERSIONS = {
    "resourcegroups": {"2021-04-01"},
    "microsoft.kubernetes/connectedclusters": {"2024-01-01", "2024-07-15-preview"},
    "microsoft.managedidentity/userassignedidentities": {"2023-01-31"},
    "microsoft.managedidentity/userassignedidentities/federatedidentitycredentials": {"2023-01-31"},
    "microsoft.authorization/locks": {"2020-05-01"},
    "microsoft.containerservice/managedclusters": {"2024-09-01"},
    "microsoft.storage/storageaccounts": {"2023-01-01"},
}
# Types whose DELETE (and PUT) is a long-running operation here.
ASYNC_TYPES = {
    "resourcegroups",
    "microsoft.kubernetes/connectedclusters",
    "microsoft.containerservice/managedclusters",
    "microsoft.storage/storageaccounts",
}
BAD_TAG_CHARS = set("<>%&\\?/")


def arm_error(status, code, message):
    return status, {"error": {"code": code, "message": message}}


class ArmDouble(HttpDouble):
    """ARM for one subscription; ``url`` is the endpoint to pass as the ARM base URL."""

    def __init__(self, token="arm-token", subscription=SUBSCRIPTION, tls=None, page_size=2, delete_polls=1):
        self.tokens = {token} if isinstance(token, str) else set(token)
        self.subscription = subscription
        self.page_size = page_size
        self.delete_polls = delete_polls  # status polls an asynchronous operation stays InProgress
        self.objects = {}  # lower-case id -> resource
        self.operations = {}  # operation id -> {"target", "kind", "polls", "error"}
        self.busy = {}  # lower-case id -> operation id still running
        self.fail = {}  # lower-case id -> (code, message): the next delete of it ends Failed
        self.slow = {}  # lower-case id -> status polls its operations stay InProgress (else delete_polls)
        self.calls = []
        self._ids = itertools.count(1)
        super().__init__(tls)

    def respond(self, request):
        self.calls.append((request.method, request.path, request.authorization))
        try:
            body = request.json()
        except ValueError:
            status, reply, headers = 400, {"error": {"code": "InvalidRequestContent", "message": "bad JSON"}}, {}
        else:
            status, reply, headers = self.handle(
                request.method, request.path, request.query, body, request.authorization
            )
        return Reply(status, reply, headers, "application/json; charset=utf-8")

    # --- seeding and inspection (tests) ---------------------------------------------------

    def rg_id(self, name):
        return f"/subscriptions/{self.subscription}/resourceGroups/{name}"

    def add(self, rid, tags=None, **fields):
        """Seed a resource (no call recorded); its type comes from the id."""
        obj = {"id": rid, "name": rid.rsplit("/", 1)[-1], "type": _type_name(rid), "tags": dict(tags or {})}
        obj.update(fields)
        obj.setdefault("properties", {}).setdefault("provisioningState", "Succeeded")
        self.objects[rid.lower()] = obj
        return rid

    def add_group(self, name, tags=None, location="swedencentral"):
        return self.add(self.rg_id(name), tags=tags, location=location)

    def add_lock(self, scope, name="do-not-delete", level="CanNotDelete"):
        rid = f"{scope}/providers/Microsoft.Authorization/locks/{name}"
        self.objects[rid.lower()] = {
            "id": rid,
            "name": name,
            "type": "Microsoft.Authorization/locks",
            "properties": {"level": level},
        }
        return rid

    def exists(self, rid):
        return rid.lower() in self.objects

    def get(self, rid):
        return self.objects.get(rid.lower())

    def writes(self):
        return [(m, p) for m, p, dummy in self.calls if m != "GET"]

    def groups(self):
        return sorted(o["name"] for i, o in self.objects.items() if _type_key(i) == "resourcegroups")

    # --- the API --------------------------------------------------------------------------

    def handle(self, method, path, query, body, auth):
        if not auth or not auth.startswith("Bearer "):
            return (
                *arm_error(
                    401, "AuthenticationFailed", "Authentication failed. The 'Authorization' header is missing."
                ),
                {},
            )
        if auth[len("Bearer ") :] not in self.tokens:
            return (*arm_error(401, "InvalidAuthenticationToken", "The access token is invalid."), {})
        versions = query.get("api-version")
        if not versions:
            return (
                *arm_error(
                    400,
                    "MissingApiVersionParameter",
                    "The api-version query parameter (?api-version=) is required for all requests.",
                ),
                {},
            )
        version = versions[0]
        low = path.rstrip("/").lower()
        sub = f"/subscriptions/{self.subscription}".lower()
        if not low.startswith(sub):
            name = path.split("/")[2] if path.count("/") >= 2 else ""
            return (*arm_error(404, "SubscriptionNotFound", f"The subscription '{name}' could not be found."), {})
        if "/operationstatuses/" in low or "/operationresults/" in low:
            return self._operation(low, version)
        key = _type_key(low)
        listing = _is_listing(low, sub)
        if key not in API_VERSIONS:
            return (*arm_error(400, "InvalidResourceType", f"The resource type '{key}' could not be found."), {})
        if version not in API_VERSIONS[key]:
            if key == "resourcegroups":
                return (
                    *arm_error(
                        400,
                        "InvalidApiVersionParameter",
                        "The api-version '{}' is invalid. The supported versions are '{}'.".format(
                            version, ",".join(sorted(API_VERSIONS[key]))
                        ),
                    ),
                    {},
                )
            return (
                *arm_error(
                    400,
                    "NoRegisteredProviderFound",
                    "No registered resource provider found for location 'swedencentral' and API version '{}' for type "
                    "'{}'. The supported api-versions are '{}'.".format(
                        version, key, ", ".join(sorted(API_VERSIONS[key]))
                    ),
                ),
                {},
            )
        if listing:
            if method != "GET":
                return (*arm_error(405, "MethodNotAllowed", f"{method} is not allowed on a collection"), {})
            return self._list(path, low, sub, key, query, version)
        handler = {"GET": self._get, "PUT": self._put, "DELETE": self._delete}.get(method)
        if handler is None:
            return (*arm_error(405, "MethodNotAllowed", f"The {method} method is not supported here."), {})
        return handler(path, low, key, body, version)

    def _missing(self, low):
        group = _group_of(low)
        if group and group not in self.objects:
            return arm_error(
                404, "ResourceGroupNotFound", "Resource group '{}' could not be found.".format(group.rsplit("/", 1)[-1])
            )
        return arm_error(
            404,
            "ResourceNotFound",
            "The Resource '{}' under resource group '{}' was not found.".format(
                _type_name(low) + "/" + low.rsplit("/", 1)[-1], (group or "").rsplit("/", 1)[-1]
            ),
        )

    def _get(self, path, low, key, body, version):
        obj = self.objects.get(low)
        if obj is None:
            return (*self._missing(low), {})
        return 200, obj, {}

    def _list(self, path, low, sub, key, query, version):
        if low == sub + "/resourcegroups":
            items = [o for i, o in sorted(self.objects.items()) if _type_key(i) == "resourcegroups"]
        elif len(_after_providers(low)) == 2:  # ns/type under a subscription or a resource group
            scope = low[: low.rindex("/providers/")]
            if scope != sub and scope not in self.objects:
                return (*self._missing(low), {})
            items = [
                o
                for i, o in sorted(self.objects.items())
                if _type_key(i) == key and len(_after_providers(i)) == 3 and (scope == sub or i.startswith(scope + "/"))
            ]
        else:  # a child collection: the parent must exist
            parent = low.rsplit("/", 1)[0]
            if parent not in self.objects:
                return (*self._missing(parent), {})
            items = [
                o for i, o in sorted(self.objects.items()) if i.rsplit("/", 2)[0] == parent and _type_key(i) == key
            ]
        start = int((query.get("$skiptoken") or ["0"])[0])
        reply = {"value": items[start : start + self.page_size]}
        if len(items) > start + self.page_size:
            reply["nextLink"] = "{}{}?api-version={}&$skiptoken={}".format(
                self.url, quote(path), query["api-version"][0], start + self.page_size
            )
        return 200, reply, {}

    def _put(self, path, low, key, body, version):
        body = body or {}
        tags = body.get("tags") or {}
        bad = [t for t in tags if set(t) & BAD_TAG_CHARS]
        if bad:
            return (
                *arm_error(
                    400,
                    "InvalidTagNameCharacters",
                    "The tag names '{}' have reserved characters '<,>,%,&,\\,?,/' or control characters.".format(
                        ",".join(bad)
                    ),
                ),
                {},
            )
        if low in self.busy:
            return (*arm_error(409, "AnotherOperationInProgress", f"An operation on {path} is in progress."), {})
        group = _group_of(low)
        if key != "resourcegroups":
            if group not in self.objects:
                return (*self._missing(low), {})
            if group in self.busy:
                return (
                    *arm_error(
                        409,
                        "ResourceGroupBeingDeleted",
                        "The resource group '{}' is in deprovisioning state and cannot perform this operation.".format(
                            group.rsplit("/", 1)[-1]
                        ),
                    ),
                    {},
                )
            parent = low.rsplit("/", 2)[0] if len(_after_providers(low)) > 3 else None
            if parent is not None and parent not in self.objects:
                return (*self._missing(parent), {})
        elif "location" not in body and low not in self.objects:
            return (*arm_error(400, "LocationRequired", "The location property is required for this definition."), {})
        existed = low in self.objects
        obj = dict(self.objects.get(low) or {"id": path, "name": path.rsplit("/", 1)[-1], "type": _type_name(path)})
        obj["tags"] = dict(tags)
        for field in ("location", "kind", "identity"):
            if field in body:
                obj[field] = body[field]
        props = dict(body.get("properties") or {})
        if key in ASYNC_TYPES and key != "resourcegroups":
            props["provisioningState"] = "Accepted"
            obj["properties"] = props
            self.objects[low] = obj
            op = self._start(low, "put")
            return 201 if not existed else 200, obj, self._lro_headers(op, low)
        props["provisioningState"] = "Succeeded"
        obj["properties"] = props
        self.objects[low] = obj
        return (200 if existed else 201), obj, {}

    def _locks_over(self, low, key):
        """Locks that block deleting low: on it or a parent, or (a resource group) on anything inside."""
        found = []
        for i, o in self.objects.items():
            if _type_key(i) != "microsoft.authorization/locks":
                continue
            scope = i.split("/providers/microsoft.authorization/locks/")[0]
            if low == scope or low.startswith(scope + "/") or (key == "resourcegroups" and scope.startswith(low + "/")):
                found.append(scope)
        return sorted(set(found))

    def _delete(self, path, low, key, body, version):
        obj = self.objects.get(low)
        if obj is None:
            if key == "resourcegroups":
                return (*self._missing(low), {})
            group = _group_of(low)
            if group and group not in self.objects:
                return (*self._missing(low), {})
            return 204, None, {}
        locked = self._locks_over(low, key) if key != "microsoft.authorization/locks" else []
        if locked:
            return (
                *arm_error(
                    409,
                    "ScopeLocked",
                    "The scope '{}' cannot perform delete operation because following scope(s) are locked: '{}'. "
                    "Please remove the lock and try again.".format(
                        path, "','".join(self.objects[s]["id"] for s in locked if s in self.objects)
                    ),
                ),
                {},
            )
        if low in self.busy:
            op = self.busy[low]
            if self.operations[op]["kind"] == "delete":  # deleting again is accepted: the same operation
                return 202, None, self._lro_headers(op, low)
            return (*arm_error(409, "AnotherOperationInProgress", f"An operation on {path} is in progress."), {})
        if key in ASYNC_TYPES:
            obj["properties"] = dict(obj.get("properties") or {}, provisioningState="Deleting")
            op = self._start(low, "delete")
            return 202, None, self._lro_headers(op, low)
        self._drop(low)
        return 200, None, {}

    # --- long-running operations ------------------------------------------------------------

    def _start(self, low, kind):
        op = "op-%d" % next(self._ids)
        self.operations[op] = {
            "target": low,
            "kind": kind,
            "polls": self.slow.get(low, self.delete_polls),
            "error": self.fail.pop(low, None) if kind == "delete" else None,
        }
        self.busy[low] = op
        return op

    def _lro_headers(self, op, low):
        sub = f"/subscriptions/{self.subscription}"
        version = "2021-04-01" if _type_key(low) == "resourcegroups" else sorted(API_VERSIONS[_type_key(low)])[0]
        headers = {
            "Location": f"{self.url}{sub}/operationresults/{op}?api-version={version}",
            "Retry-After": "0",
        }
        if _type_key(low) != "resourcegroups":  # resource groups answer with Location only
            ns = _type_name(low).split("/", maxsplit=1)[0]
            headers["Azure-AsyncOperation"] = (
                f"{self.url}{sub}/providers/{ns}/locations/swedencentral/operationStatuses/{op}?api-version={version}"
            )
        return headers

    def _advance(self, op):
        """One poll of op: (status, error)."""
        state = self.operations[op]
        if state.get("done"):
            return state["done"], state["error"]
        state["polls"] -= 1
        if state["polls"] > 0:
            return "InProgress", None
        target = state["target"]
        self.busy.pop(target, None)
        if state["error"]:
            state["done"] = "Failed"
            obj = self.objects.get(target)
            if obj is not None:
                obj["properties"] = dict(obj.get("properties") or {}, provisioningState="Failed")
            return "Failed", state["error"]
        state["done"] = "Succeeded"
        if state["kind"] == "delete":
            self._drop(target)
        elif target in self.objects:
            self.objects[target]["properties"]["provisioningState"] = "Succeeded"
        return "Succeeded", None

    def _operation(self, low, version):
        op = low.rsplit("/", 1)[-1]
        if op not in self.operations:
            return (*arm_error(404, "OperationNotFound", f"The operation '{op}' could not be found."), {})
        status, error = self._advance(op)
        kind = self.operations[op]["kind"]
        if "/operationstatuses/" in low:
            reply = {"id": low, "name": op, "status": status}
            if error:
                reply["error"] = {"code": error[0], "message": error[1]}
            return 200, reply, ({"Retry-After": "0"} if status == "InProgress" else {})
        # Location: 202 while running, then the final answer
        if status == "InProgress":
            return 202, None, {"Location": f"{self.url}{low}?api-version={version}", "Retry-After": "0"}
        if status == "Failed":
            return (*arm_error(409, error[0], error[1]), {})
        return (204, None, {}) if kind == "delete" else (200, self.objects.get(self.operations[op]["target"]), {})

    def _drop(self, low):
        for other in [i for i in self.objects if i == low or i.startswith(low + "/")]:
            del self.objects[other]
            self.busy.pop(other, None)


def _segments(low):
    return [s for s in low.strip("/").split("/") if s]


def _group_of(low):
    seg = _segments(low.lower())
    if len(seg) >= 4 and seg[2] == "resourcegroups":
        return "/" + "/".join(seg[:4])
    return None


def _type_key(rid):
    """The lower-case resource type of an id or collection path: resourcegroups, ns/type[/child]."""
    seg = _segments(rid.lower())
    if "providers" not in seg:
        return "resourcegroups" if len(seg) >= 3 and seg[2] == "resourcegroups" else ""
    at = len(seg) - 1 - seg[::-1].index("providers")
    rest = seg[at + 1 :]
    if not rest:
        return ""
    ns, tail = rest[0], rest[1:]
    types = tail[0::2]
    return "/".join([ns] + types)


def _type_name(rid):
    seg = [s for s in rid.strip("/").split("/") if s]
    if "providers" not in [s.lower() for s in seg]:
        return "Microsoft.Resources/resourceGroups"
    low = [s.lower() for s in seg]
    at = len(low) - 1 - low[::-1].index("providers")
    rest = seg[at + 1 :]
    return "/".join([rest[0]] + rest[1:][0::2])


def _after_providers(low):
    seg = _segments(low.lower())
    if "providers" not in seg:
        return []
    at = len(seg) - 1 - seg[::-1].index("providers")
    return seg[at + 1 :]


def _is_listing(low, sub):
    """A collection path: an even number of segments after the last provider namespace."""
    seg = _segments(low)
    if "providers" not in seg:
        return low == sub + "/resourcegroups"
    at = len(seg) - 1 - seg[::-1].index("providers")
    return len(seg[at + 1 :]) % 2 == 0
