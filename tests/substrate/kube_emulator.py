# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""A stateful Kubernetes API server emulator for tests.

It speaks enough of the real HTTP API for the ``kubernetes`` client, its
DynamicClient and kubernetes.core.k8s / k8s_info: discovery; create (with
generateName and namespace checks); get; list with label and field selectors;
PUT of objects and of /status; merge, JSON and strategic-merge patch;
server-side apply (create and update); delete with finalizers and
deletecollection; watch with resourceVersion and timeoutSeconds. Objects carry
uid, resourceVersion, generation and creationTimestamp. Any custom resource can
be declared, directly or by creating a CustomResourceDefinition.

Several emulators can run at once, each on its own port with its own
kubeconfig. Tests drive the state through the Python API (``create``,
``set_condition``, ``inject_failure``) while modules reach it over HTTP.

Written for krops' tests because kmock 0.8 lacks list kinds, selectors, PUT,
apply-create, deletecollection and object metadata (see ../shared/TESTING.md).
"""

from __future__ import annotations

import copy
import datetime
import itertools
import json
import re
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import yaml

_SCALARS = (str, int, float, bool, type(None))


def clone(value):
    """A deep copy of JSON-shaped data (dicts, lists, scalars), about four times faster than copy.deepcopy,
    which the API servers called on every read and write (a fifth of a lifecycle test's samples); any other
    type is left to copy.deepcopy."""
    kind = type(value)
    if kind is dict:
        return {key: clone(item) for key, item in value.items()}
    if kind is list:
        return [clone(item) for item in value]
    if kind in _SCALARS:
        return value
    return copy.deepcopy(value)


def _now():
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    def __init__(self, code, reason, message):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message

    def status(self):
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


class Resource:
    def __init__(self, group, version, kind, plural, namespaced=True, subresources=("status",), short_names=()):
        self.group = group
        self.version = version
        self.kind = kind
        self.plural = plural
        self.namespaced = namespaced
        self.subresources = tuple(subresources)
        self.short_names = list(short_names)

    @property
    def api_version(self):
        return f"{self.group}/{self.version}" if self.group else self.version

    def describe(self):
        return {
            "name": self.plural,
            "singularName": self.kind.lower(),
            "namespaced": self.namespaced,
            "kind": self.kind,
            "shortNames": self.short_names,
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        }


# Core kinds krops touches, as (group, version, kind, plural, namespaced).
CORE_RESOURCES = [
    ("", "v1", "Namespace", "namespaces", False),
    ("", "v1", "Node", "nodes", False),
    ("", "v1", "ConfigMap", "configmaps", True),
    ("", "v1", "Secret", "secrets", True),
    ("", "v1", "Service", "services", True),
    ("", "v1", "ServiceAccount", "serviceaccounts", True),
    ("", "v1", "Pod", "pods", True),
    ("", "v1", "Event", "events", True),
    ("apps", "v1", "Deployment", "deployments", True),
    ("apps", "v1", "DaemonSet", "daemonsets", True),
    ("apps", "v1", "StatefulSet", "statefulsets", True),
    ("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False),
    ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False),
    ("rbac.authorization.k8s.io", "v1", "Role", "roles", True),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", True),
    ("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False),
    ("coordination.k8s.io", "v1", "Lease", "leases", True),
]

# Custom resources of the krops lifecycle, declared by ``load_krops_crds``.
KROPS_RESOURCES = [
    ("kustomize.toolkit.fluxcd.io", "v1", "Kustomization", "kustomizations", True),
    ("source.toolkit.fluxcd.io", "v1", "GitRepository", "gitrepositories", True),
    ("source.toolkit.fluxcd.io", "v1", "OCIRepository", "ocirepositories", True),
    ("source.toolkit.fluxcd.io", "v1", "HelmRepository", "helmrepositories", True),
    ("helm.toolkit.fluxcd.io", "v2", "HelmRelease", "helmreleases", True),
    ("fluxcd.controlplane.io", "v1", "FluxInstance", "fluxinstances", True),
    ("fluxcd.controlplane.io", "v1", "ResourceSet", "resourcesets", True),
    ("cluster.x-k8s.io", "v1beta2", "Cluster", "clusters", True),
    ("cluster.x-k8s.io", "v1beta2", "Machine", "machines", True),
    ("cluster.x-k8s.io", "v1beta2", "MachineDeployment", "machinedeployments", True),
    ("cluster.x-k8s.io", "v1beta2", "MachineSet", "machinesets", True),
    ("cluster.x-k8s.io", "v1beta2", "MachinePool", "machinepools", True),
    ("operator.cluster.x-k8s.io", "v1alpha2", "CoreProvider", "coreproviders", True),
    ("operator.cluster.x-k8s.io", "v1alpha2", "BootstrapProvider", "bootstrapproviders", True),
    ("operator.cluster.x-k8s.io", "v1alpha2", "ControlPlaneProvider", "controlplaneproviders", True),
    ("operator.cluster.x-k8s.io", "v1alpha2", "InfrastructureProvider", "infrastructureproviders", True),
    ("operator.cluster.x-k8s.io", "v1alpha2", "AddonProvider", "addonproviders", True),
    ("operator.cluster.x-k8s.io", "v1alpha2", "IPAMProvider", "ipamproviders", True),
    ("operator.cluster.x-k8s.io", "v1alpha2", "RuntimeExtensionProvider", "runtimeextensionproviders", True),
    ("addons.cluster.x-k8s.io", "v1alpha1", "HelmChartProxy", "helmchartproxies", True),
    ("infrastructure.cluster.x-k8s.io", "v1beta1", "DockerCluster", "dockerclusters", True),
    ("infrastructure.cluster.x-k8s.io", "v1beta1", "DockerMachine", "dockermachines", True),
    ("infrastructure.cluster.x-k8s.io", "v1beta2", "AWSManagedControlPlane", "awsmanagedcontrolplanes", True),
    (
        "infrastructure.cluster.x-k8s.io",
        "v1beta2",
        "AWSClusterControllerIdentity",
        "awsclustercontrolleridentities",
        False,
    ),
    ("tinkerbell.org", "v1alpha1", "Hardware", "hardware", True),
]


# --- selectors ---------------------------------------------------------------------

_SET_EXPR = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_selector(text):
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def label_matcher(selector):
    """A predicate over a labels dict for a Kubernetes label selector string."""
    tests = []
    for term in _split_selector(selector or ""):
        match = _SET_EXPR.match(term)
        if match:
            key, op, values = match.group(1), match.group(2), {v.strip() for v in match.group(3).split(",")}
            if op == "in":
                tests.append(lambda labels, k=key, vs=values: labels.get(k) in vs)
            else:
                tests.append(lambda labels, k=key, vs=values: labels.get(k) not in vs)
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            tests.append(lambda labels, k=key, v=value: labels.get(k) != v)
        elif "=" in term:
            key, value = (s.strip() for s in term.replace("==", "=").split("=", 1))
            tests.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif term.startswith("!"):
            tests.append(lambda labels, k=term[1:].strip(): k not in labels)
        else:
            tests.append(lambda labels, k=term: k in labels)
    return lambda labels: all(test(labels or {}) for test in tests)


def _dig(obj, dotted):
    node = obj
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return ""
        node = node[part]
    return "" if node is None else str(node)


def field_matcher(selector):
    tests = []
    for term in _split_selector(selector or ""):
        if "!=" in term:
            path, value = term.split("!=", 1)
            tests.append(lambda obj, p=path.strip(), v=value.strip(): _dig(obj, p) != v)
        else:
            path, value = term.replace("==", "=").split("=", 1)
            tests.append(lambda obj, p=path.strip(), v=value.strip(): _dig(obj, p) == v)
    return lambda obj: all(test(obj) for test in tests)


# --- patches -----------------------------------------------------------------------


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path):
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")] if path else []


def json_patch(target, operations):
    """RFC 6902 JSON patch (add, remove, replace, test, copy, move)."""
    doc = clone(target)
    for op in operations:
        parts = _pointer(op.get("path", ""))
        parent = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1] if parts else None
        kind = op.get("op")
        if kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op.get("value"):
                raise ApiError(422, "Invalid", "JSON patch test failed at {}".format(op.get("path")))
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                if last == "-":
                    parent.append(op["value"])
                elif kind == "add":
                    parent.insert(int(last), op["value"])
                else:
                    parent[int(last)] = op["value"]
            else:
                if kind == "replace" and last not in parent:
                    raise ApiError(422, "Invalid", "JSON patch replace: missing path {}".format(op.get("path")))
                parent[last] = op["value"]
        elif kind == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            elif last in parent:
                del parent[last]
            else:
                raise ApiError(422, "Invalid", "JSON patch remove: missing path {}".format(op.get("path")))
        else:
            raise ApiError(422, "Invalid", f"unsupported JSON patch op {kind!r}")
    return doc


# --- the emulator ------------------------------------------------------------------


class KubeEmulator:
    """In-memory API server state plus an HTTP front end (``start``/``stop``)."""

    def __init__(self, name="emulator", kubernetes_version="v1.32.0"):
        self.name = name
        self.kubernetes_version = kubernetes_version
        self.resources = {}  # (group, plural) -> Resource
        self.objects = {}  # (group, plural, namespace, name) -> object
        self.events = []  # (rv, type, group, plural, object)
        self.requests = []  # (method, path) log, for assertions
        self.dry_runs = []  # (method, path) of writes sent with dryRun: answered, never applied
        self._failures = []  # [method, path regex, code, message, remaining]
        self._stalls = []  # [method, path regex, seconds, remaining]
        self._resets = []  # [method, path regex, remaining]
        self._rv = itertools.count(1)
        self._last_rv = 0
        self._cond = threading.Condition()
        self._server = None
        self._thread = None
        self._stopping = False
        for spec in CORE_RESOURCES:
            self.add_resource(*spec)
        for ns in ("default", "kube-system", "kube-public"):
            self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    # ---- resource registry -------------------------------------------------------
    def add_resource(self, group, version, kind, plural, namespaced=True, subresources=("status",)):
        with self._cond:
            self.resources[(group, plural)] = Resource(group, version, kind, plural, namespaced, subresources)

    def load_krops_crds(self):
        for spec in KROPS_RESOURCES:
            self.add_resource(*spec)
        return self

    def resource_for(self, api_version, kind):
        group = api_version.rpartition("/")[0]
        for res in tuple(self.resources.values()):  # a snapshot: a request thread may register a CRD meanwhile
            if res.group == group and res.kind == kind:
                return res
        raise ApiError(404, "NotFound", f"no matches for kind {kind!r} in version {api_version!r}")

    def _resource(self, group, version, plural):
        res = self.resources.get((group, plural))
        if res is None or res.version != version:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return res

    # ---- fault injection ---------------------------------------------------------
    def inject_failure(self, method, path_pattern, code=500, message="injected failure", times=1):
        """The next ``times`` requests matching method and path regex answer ``code``."""
        with self._cond:
            self._failures.append([method.upper(), re.compile(path_pattern), code, message, times])

    def inject_stall(self, method, path_pattern, seconds=3600.0, times=1000000):
        """The next ``times`` requests matching method and path regex get no answer for ``seconds``
        (a stalled API server: the connection stays open, nothing is sent)."""
        with self._cond:
            self._stalls.append([method.upper(), re.compile(path_pattern), float(seconds), times])

    def inject_reset(self, method, path_pattern, times=1):
        """The next ``times`` requests matching method and path regex are read, then the connection is closed
        with no answer (a connection reset: the client cannot tell whether the write was applied; it was not)."""
        with self._cond:
            self._resets.append([method.upper(), re.compile(path_pattern), times])

    def _reset(self, method, path):
        with self._cond:
            for reset in self._resets:
                if reset[2] > 0 and reset[0] in (method, "*") and reset[1].search(path):
                    reset[2] -= 1
                    return True
        return False

    def clear_stalls(self):
        with self._cond:
            self._stalls = []

    def _stall(self, method, path):
        with self._cond:
            for stall in self._stalls:
                if stall[3] > 0 and stall[0] in (method, "*") and stall[1].search(path):
                    stall[3] -= 1
                    return stall[2]
        return 0.0

    def _injected(self, method, path):
        with self._cond:
            for failure in self._failures:
                if failure[4] > 0 and failure[0] in (method, "*") and failure[1].search(path):
                    failure[4] -= 1
                    reason = {404: "NotFound", 403: "Forbidden", 409: "Conflict", 429: "TooManyRequests"}
                    return ApiError(failure[2], reason.get(failure[2], "InternalError"), failure[3])
        return None

    # ---- state helpers -----------------------------------------------------------
    def _snapshot(self):
        """The state to go back to: the objects, the event history (the events themselves, not their number), the last
        resourceVersion and the served resources."""
        return clone(self.objects), list(self.events), self._last_rv, dict(self.resources)

    def _restore(self, saved):
        """Back to a snapshot, its event history included: a watch from a resourceVersion gets the changes after it
        in the restored history only (as an API server's watch cache: one history, never another run's events).

        Truncating the history to the snapshot's length was wrong once the state had gone back to an older snapshot:
        the history was then shorter than the length, so the events of the runs since stayed, and a watch from the
        restored resourceVersion replayed them (tests/integration/test_crash_matrix.py: a stale DELETED made the
        teardown's watch see a Cluster gone that CAPI was still deleting)."""
        self.objects, events, self._last_rv, self.resources = saved
        self.events[:] = events  # the same list object: watchers read self.events
        self._rv = itertools.count(self._last_rv + 1)

    def _bump(self, obj):
        rv = next(self._rv)
        self._last_rv = rv
        obj["metadata"]["resourceVersion"] = str(rv)
        return rv

    def _record(self, event_type, res, obj):
        rv = int(obj["metadata"]["resourceVersion"])
        self.events.append((rv, event_type, res.group, res.plural, clone(obj)))
        self._cond.notify_all()

    def _key(self, res, namespace, name):
        return (res.group, res.plural, namespace if res.namespaced else "", name)

    def _check_namespace(self, res, namespace):
        if res.namespaced:
            if not namespace:
                raise ApiError(400, "BadRequest", "the namespace of the object must be set")
            if ("", "namespaces", "", namespace) not in self.objects:
                raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')

    # ---- verbs (Python API, also used by the HTTP front end) ---------------------
    def create(self, obj, namespace=None, res=None):
        with self._cond:
            obj = clone(obj)
            res = res or self.resource_for(obj.get("apiVersion", ""), obj.get("kind", ""))
            meta = obj.setdefault("metadata", {})
            if res.namespaced:
                meta["namespace"] = namespace or meta.get("namespace") or "default"
            else:
                meta.pop("namespace", None)
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            if not meta.get("name"):
                raise ApiError(422, "Invalid", f"{res.kind}: metadata.name: Required value")
            self._check_namespace(res, meta.get("namespace"))
            key = self._key(res, meta.get("namespace"), meta["name"])
            if key in self.objects:
                raise ApiError(
                    409, "AlreadyExists", '{}.{} "{}" already exists'.format(res.plural, res.group, meta["name"])
                )
            obj["apiVersion"], obj["kind"] = res.api_version, res.kind
            meta.update({"uid": str(uuid.uuid4()), "creationTimestamp": _now(), "generation": 1})
            meta.pop("deletionTimestamp", None)
            self._bump(obj)
            self.objects[key] = obj
            if res.group == "apiextensions.k8s.io" and res.kind == "CustomResourceDefinition":
                self._register_crd(obj)
            self._record("ADDED", res, obj)
            return clone(obj)

    def _register_crd(self, crd):
        spec = crd.get("spec", {})
        names = spec.get("names", {})
        for version in spec.get("versions", []):
            if version.get("served", True):
                subresources = tuple((version.get("subresources") or {}).keys())
                self.resources[(spec.get("group"), names.get("plural"))] = Resource(
                    spec.get("group"),
                    version["name"],
                    names.get("kind"),
                    names.get("plural"),
                    spec.get("scope", "Namespaced") == "Namespaced",
                    subresources,
                )
        crd["status"] = {
            "conditions": [{"type": "Established", "status": "True"}, {"type": "NamesAccepted", "status": "True"}]
        }

    def get(self, api_version, kind, name, namespace=None):
        with self._cond:
            res = self.resource_for(api_version, kind)
            return clone(self._get(res, namespace, name))

    def _get(self, res, namespace, name):
        obj = self.objects.get(self._key(res, namespace, name))
        if obj is None:
            raise ApiError(
                404, "NotFound", '{}{} "{}" not found'.format(res.plural, "." + res.group if res.group else "", name)
            )
        return obj

    def exists(self, api_version, kind, name, namespace=None):
        with self._cond:  # no copy: get() would copy the object only to throw it away
            try:
                return self._key(self.resource_for(api_version, kind), namespace, name) in self.objects
            except ApiError:  # a kind this server does not serve
                return False

    def list(self, api_version, kind, namespace=None, label_selector=None, field_selector=None):
        with self._cond:
            res = self.resource_for(api_version, kind)
            return [clone(o) for o in self._list(res, namespace, label_selector, field_selector)]

    def _list(self, res, namespace, label_selector, field_selector):
        labels_ok, fields_ok = label_matcher(label_selector), field_matcher(field_selector)
        found = []
        for key, obj in self.objects.items():  # only what matches is sorted (by key, as before), not every object
            if (key[0], key[1]) != (res.group, res.plural):
                continue
            if res.namespaced and namespace and key[2] != namespace:
                continue
            if labels_ok(obj["metadata"].get("labels")) and fields_ok(obj):
                found.append((key, obj))
        found.sort(key=lambda pair: pair[0])
        return [obj for dummy, obj in found]

    def replace(self, res, namespace, name, body, subresource=None):
        with self._cond:
            current = self._get(res, namespace, name)
            sent_rv = (body.get("metadata") or {}).get("resourceVersion")
            if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {res.plural} "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                )
            return self._store(res, current, body, subresource)

    def patch(self, res, namespace, name, patch_type, patch, subresource=None, field_manager=None):
        with self._cond:
            try:
                current = self._get(res, namespace, name)
            except ApiError:
                if patch_type != "apply":
                    raise
                body = clone(patch)
                body.setdefault("metadata", {})["name"] = name
                return self.create(body, namespace, res)
            if patch_type == "json":
                updated = json_patch(current, patch)
            else:  # merge, strategic (treated as merge) and apply
                updated = merge_patch(current, patch)
            return self._store(res, current, updated, subresource)

    def _store(self, res, current, body, subresource):
        new = clone(current)
        if subresource == "status":
            new["status"] = clone(body.get("status"))
        else:
            keep_meta = {
                k: current["metadata"].get(k)
                for k in ("uid", "creationTimestamp", "generation", "deletionTimestamp", "namespace", "name")
            }
            for key, value in body.items():
                if key == "status" and "status" in res.subresources:
                    continue
                new[key] = clone(value)
            if "status" in res.subresources:
                new["status"] = clone(current.get("status"))
            new["metadata"] = dict(body.get("metadata") or {})
            new["metadata"].update({k: v for k, v in keep_meta.items() if v is not None})
            new["apiVersion"], new["kind"] = res.api_version, res.kind
            if {k: v for k, v in new.items() if k not in ("metadata", "status")} != {
                k: v for k, v in current.items() if k not in ("metadata", "status")
            }:
                new["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
        if new == current:
            return clone(current)
        self._bump(new)
        key = self._key(res, new["metadata"].get("namespace"), new["metadata"]["name"])
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            del self.objects[key]
            self._record("DELETED", res, new)
            return clone(new)
        self.objects[key] = new
        self._record("MODIFIED", res, new)
        return clone(new)

    def delete(self, res, namespace, name):
        with self._cond:
            current = self._get(res, namespace, name)
            if current["metadata"].get("finalizers"):
                if not current["metadata"].get("deletionTimestamp"):
                    new = clone(current)
                    new["metadata"]["deletionTimestamp"] = _now()
                    self._bump(new)
                    self.objects[self._key(res, namespace, name)] = new
                    self._record("MODIFIED", res, new)
                    return clone(new)
                return clone(current)
            del self.objects[self._key(res, namespace, name)]
            gone = clone(current)
            self._bump(gone)
            self._record("DELETED", res, gone)
            if res.plural == "namespaces" and not res.group:
                for key in [k for k in self.objects if k[2] == name and self.resources[(k[0], k[1])].namespaced]:
                    obj = self.objects[key]
                    self.delete(self.resources[(key[0], key[1])], name, obj["metadata"]["name"])
            return gone

    # ---- conveniences for tests --------------------------------------------------
    def apply_object(self, obj):
        """Create or merge an object given as a dict (status included), like a controller would."""
        res = self.resource_for(obj["apiVersion"], obj["kind"])
        ns = obj["metadata"].get("namespace") or ("default" if res.namespaced else "")
        with self._cond:
            if self._key(res, ns, obj["metadata"]["name"]) not in self.objects:
                created = self.create({k: v for k, v in obj.items() if k != "status"}, ns, res)
                if "status" not in obj:
                    return created
            self.patch(res, ns, obj["metadata"]["name"], "merge", {k: v for k, v in obj.items() if k != "status"})
            if "status" in obj:
                return self.patch(res, ns, obj["metadata"]["name"], "merge", {"status": obj["status"]}, "status")
            return self.get(obj["apiVersion"], obj["kind"], obj["metadata"]["name"], ns)

    def set_condition(
        self, api_version, kind, name, namespace=None, type_="Ready", status="True", reason="Succeeded", message=""
    ):
        """Set one status condition, as the object's controller would."""
        with self._cond:
            res = self.resource_for(api_version, kind)
            obj = self._get(res, namespace, name)
            conditions = [c for c in (obj.get("status") or {}).get("conditions", []) if c.get("type") != type_]
            conditions.append(
                {
                    "type": type_,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": _now(),
                    "observedGeneration": obj["metadata"].get("generation", 1),
                }
            )
            status_body = dict(obj.get("status") or {})
            status_body["conditions"] = conditions
            status_body.setdefault("observedGeneration", obj["metadata"].get("generation", 1))
            return self.patch(res, namespace, name, "merge", {"status": status_body}, "status")

    def remove(self, api_version, kind, name, namespace=None):
        res = self.resource_for(api_version, kind)
        return self.delete(res, namespace, name)

    def clear_finalizers(self, api_version, kind, name, namespace=None):
        res = self.resource_for(api_version, kind)
        return self.patch(res, namespace, name, "merge", {"metadata": {"finalizers": None}})

    def wait_for_event(self, predicate, timeout=5.0):
        """Block until an event satisfying predicate(type, obj) is recorded; return it or None."""
        seen = 0
        with self._cond:
            deadline = threading.TIMEOUT_MAX if timeout is None else timeout
            end = time.monotonic() + deadline
            while True:
                for event in self.events[seen:]:
                    if predicate(event[1], event[4]):
                        return event
                seen = len(self.events)
                remaining = end - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)

    # ---- watch -------------------------------------------------------------------
    def watch_events(self, res, namespace, label_selector, field_selector, since_rv, timeout):
        """Yield (type, object) events after since_rv (or synthetic ADDED for current objects)."""
        labels_ok, fields_ok = label_matcher(label_selector), field_matcher(field_selector)

        def wanted(group, plural, obj):
            if (group, plural) != (res.group, res.plural):
                return False
            if res.namespaced and namespace and obj["metadata"].get("namespace") != namespace:
                return False
            return labels_ok(obj["metadata"].get("labels")) and fields_ok(obj)

        end = time.monotonic() + timeout
        with self._cond:
            if since_rv in (None, "", "0"):
                initial = [("ADDED", clone(o)) for o in self._list(res, namespace, label_selector, field_selector)]
                cursor = self._last_rv
            else:
                initial, cursor = [], int(since_rv)
        yield from initial
        while not self._stopping:
            with self._cond:
                pending = [e for e in self.events if e[0] > cursor]
                if not pending:
                    remaining = end - time.monotonic()
                    if remaining <= 0:
                        return
                    self._cond.wait(min(remaining, 0.5))
                    continue
            for rv, event_type, group, plural, obj in pending:
                cursor = rv
                if wanted(group, plural, obj):
                    yield event_type, obj

    # ---- HTTP front end ----------------------------------------------------------
    def start(self, host="127.0.0.1", port=0):
        handler = type("Handler", (_Handler,), {"emulator": self})
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"kube-{self.name}", daemon=True)
        self._thread.start()
        return self

    @property
    def url(self):
        host, port = self._server.server_address[:2]
        return "http://%s:%d" % (host, port)

    @property
    def port(self):
        return self._server.server_address[1]

    def stop(self):
        self._stopping = True
        with self._cond:
            self._cond.notify_all()
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(5)

    def kubeconfig(self, context=None, cluster=None, user=None, namespace=None):
        context = context or self.name
        entry = {"cluster": cluster or context, "user": user or context}
        if namespace:
            entry["namespace"] = namespace
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": context,
            "preferences": {},
            "clusters": [{"name": cluster or context, "cluster": {"server": self.url}}],
            "contexts": [{"name": context, "context": entry}],
            "users": [{"name": user or context, "user": {"token": "emulator-token"}}],
        }

    def write_kubeconfig(self, path, **kwargs):
        with open(path, "w", encoding="utf-8") as handle:
            yaml.safe_dump(self.kubeconfig(**kwargs), handle)
        return str(path)

    # ---- service-account issuer discovery (OIDC) -----------------------------------
    # The two documents of k8s.io/kubernetes pkg/serviceaccount/openidmetadata.go (openIDMetadata, the
    # public JWK set); the issuer is kind's default (--service-account-issuer) unless set.
    service_account_issuer = "https://kubernetes.default.svc.cluster.local"
    _signing_key = None

    def signing_key(self):
        """This API server's service-account signing key (RSA, made on first use): (private key, kid)."""
        if self._signing_key is None:
            from cryptography.hazmat.primitives.asymmetric import rsa  # pylint: disable=import-outside-toplevel

            self._signing_key = (rsa.generate_private_key(public_exponent=65537, key_size=2048), f"{self.name}-sa")
        return self._signing_key

    def openid_document(self, path):
        if path == "/.well-known/openid-configuration":
            return {
                "issuer": self.service_account_issuer,
                "jwks_uri": self.url + "/openid/v1/jwks",
                "response_types_supported": ["id_token"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
            }
        from jwt.algorithms import RSAAlgorithm  # pylint: disable=import-outside-toplevel

        key, kid = self.signing_key()
        jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
        return {"keys": [dict(jwk, use="sig", kid=kid, alg="RS256")]}

    # ---- discovery ---------------------------------------------------------------
    def discovery(self, path):
        if path in ("/.well-known/openid-configuration", "/openid/v1/jwks"):
            return self.openid_document(path)
        if path == "/version":
            return {
                "major": "1",
                "minor": self.kubernetes_version.split(".")[1],
                "gitVersion": self.kubernetes_version,
                "platform": "linux/amd64",
            }
        if path == "/api":
            return {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
            }
        if path == "/apis":
            groups = {}
            for res in tuple(self.resources.values()):  # a snapshot, as in resource_for
                if res.group:
                    groups.setdefault(res.group, set()).add(res.version)
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {
                        "name": g,
                        "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in sorted(vs)],
                        "preferredVersion": {"groupVersion": f"{g}/{sorted(vs)[-1]}", "version": sorted(vs)[-1]},
                    }
                    for g, vs in sorted(groups.items())
                ],
            }
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) == 2:
            group, version = "", parts[1]
        elif parts[0] == "apis" and len(parts) == 3:
            group, version = parts[1], parts[2]
        elif parts[0] == "apis" and len(parts) == 2:
            versions = sorted({r.version for r in self.resources.values() if r.group == parts[1]})
            if not versions:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return {
                "kind": "APIGroup",
                "apiVersion": "v1",
                "name": parts[1],
                "versions": [{"groupVersion": f"{parts[1]}/{v}", "version": v} for v in versions],
                "preferredVersion": {"groupVersion": f"{parts[1]}/{versions[-1]}", "version": versions[-1]},
            }
        else:
            return None
        entries = []
        for res in sorted(self.resources.values(), key=lambda r: r.plural):
            if res.group == group and res.version == version:
                entries.append(res.describe())
                for sub in res.subresources:
                    entries.append(
                        {
                            "name": f"{res.plural}/{sub}",
                            "singularName": "",
                            "namespaced": res.namespaced,
                            "kind": res.kind,
                            "verbs": ["get", "patch", "update"],
                        }
                    )
        if not entries:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": entries,
        }

    def route(self, path):
        """Split an object path into (resource, namespace, name, subresource)."""
        parts = path.strip("/").split("/")
        if parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces" and (group, rest[2]) in self.resources:
            namespace, rest = rest[1], rest[2:]
        if not rest:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        res = self._resource(group, version, rest[0])
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub and sub not in res.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return res, namespace, name, sub


_PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/json-patch+json": "json",
    "application/apply-patch+yaml": "apply",
    "application/apply-patch+yaml; charset=utf-8": "apply",
}


class _Handler(BaseHTTPRequestHandler):
    emulator = None
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without TCP_NODELAY, Nagle plus delayed ACK
    # stalls every keep-alive request by ~40 ms.
    disable_nagle_algorithm = True

    def log_message(self, *args):  # silence the default stderr log
        return

    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if ctype == "application/apply-patch+yaml":
            return yaml.safe_load(raw) or {}
        return json.loads(raw)

    def _handle(self, method):
        emulator = self.emulator
        parsed = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        path = parsed.path.rstrip("/") or "/"
        if method != "GET" and query.get("dryRun"):
            # Server-side dry run (kubectl --dry-run=server, kubernetes.core in check mode): the write is
            # validated and answered as if applied, then the state is put back.
            emulator.dry_runs.append((method, path))
            with emulator._cond:
                saved = emulator._snapshot()
                try:
                    return self._dispatch(method, path, query)
                finally:
                    emulator._restore(saved)
        emulator.requests.append((method, path))
        return self._dispatch(method, path, query)

    def _faulted(self, method, path):
        """The armed reset and stall faults of this request (inject_reset, inject_stall): True when the connection was
        closed unanswered; a stall holds the request first. Every handler applies them before it answers."""
        emulator = self.emulator
        if emulator._reset(method, path):
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return True
        stall = emulator._stall(method, path)
        if stall:
            time.sleep(stall)
        return False

    def _dispatch(self, method, path, query):
        emulator = self.emulator
        proxy = getattr(emulator, "service_proxy", None)  # a callable (method, path) -> (code, body) or None
        answer = proxy(method, path) if proxy is not None and "/proxy" in path else None
        if answer is not None:
            return self._send(*answer)
        if self._faulted(method, path):
            return None
        try:
            injected = emulator._injected(method, path)
            if injected:
                raise injected
            if method == "GET":
                with emulator._cond:
                    found = emulator.discovery(path)
                if found is not None:
                    return self._send(200, found)
            res, namespace, name, sub = emulator.route(path)
            if method == "GET" and name is None and query.get("watch") in ("true", "1"):
                return self._watch(res, namespace, query)
            if method == "GET" and name is None:
                return self._send(200, self._list_body(res, namespace, query))
            if method == "GET":
                with emulator._cond:
                    return self._send(200, clone(emulator._get(res, namespace, name)))
            if method == "POST" and name is None:
                body = self._body()
                return self._send(201, emulator.create(body, namespace, res))
            if method == "PUT" and name:
                return self._send(200, emulator.replace(res, namespace, name, self._body(), sub))
            if method == "PATCH" and name:
                ctype = (self.headers.get("Content-Type") or "").strip()
                patch_type = _PATCH_TYPES.get(ctype) or _PATCH_TYPES.get(ctype.split(";")[0])
                if patch_type is None:
                    raise ApiError(415, "UnsupportedMediaType", f"unsupported patch type {ctype!r}")
                body = self._body()
                if patch_type == "apply" and not (body.get("metadata") or {}).get("name"):
                    body.setdefault("metadata", {})["name"] = name
                return self._send(
                    200, emulator.patch(res, namespace, name, patch_type, body, sub, query.get("fieldManager"))
                )
            if method == "DELETE" and name:
                self._body()
                gone = emulator.delete(res, namespace, name)
                return self._send(200, gone)
            if method == "DELETE":
                self._body()
                with emulator._cond:
                    victims = list(
                        emulator._list(res, namespace, query.get("labelSelector"), query.get("fieldSelector"))
                    )
                    for obj in victims:
                        emulator.delete(res, obj["metadata"].get("namespace"), obj["metadata"]["name"])
                return self._send(200, self._list_body(res, namespace, {"labelSelector": "krops.invalid/none"}))
            raise ApiError(405, "MethodNotAllowed", f"method {method} not allowed on {path}")
        except ApiError as exc:
            return self._send(exc.code, exc.status())
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            return self._send(400, ApiError(400, "BadRequest", f"bad request: {exc}").status())

    def _list_body(self, res, namespace, query):
        with self.emulator._cond:
            items = [
                clone(o)
                for o in self.emulator._list(res, namespace, query.get("labelSelector"), query.get("fieldSelector"))
            ]
            rv = str(self.emulator._last_rv)
        return {
            "kind": res.kind + "List",
            "apiVersion": res.api_version,
            "metadata": {"resourceVersion": rv},
            "items": items,
        }

    def _watch(self, res, namespace, query):
        timeout = float(query.get("timeoutSeconds") or 1800)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for event_type, obj in self.emulator.watch_events(
                res,
                namespace,
                query.get("labelSelector"),
                query.get("fieldSelector"),
                query.get("resourceVersion"),
                timeout,
            ):
                line = json.dumps({"type": event_type, "object": obj}).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_PUT(self):
        self._handle("PUT")

    def do_PATCH(self):
        self._handle("PATCH")

    def do_DELETE(self):
        self._handle("DELETE")
