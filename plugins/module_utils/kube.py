# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Kubernetes access shared by krops modules: clients, conditions, probes and event-driven waits.

Auth resolves like kubernetes.core: the kubeconfig/context parameters, then the
K8S_AUTH_KUBECONFIG / K8S_AUTH_CONTEXT environment variables, then the default
kubeconfig. Every caller names the cluster it means; nothing here falls back to
"whatever the current context is" without that being the explicit choice.
"""

from __future__ import annotations

import os
import tempfile
import time

try:
    from urllib3.exceptions import HTTPError as _HTTPError
    from kubernetes import config as kube_config
    from kubernetes import dynamic
    from kubernetes.dynamic.exceptions import (
        ApiException,
        NotFoundError,
        ResourceNotFoundError,
    )
    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR = None
except ImportError as exc:  # reported by the module through missing_required_lib
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = exc

    class ApiException(Exception):
        pass

    class NotFoundError(ApiException):
        pass

    class ResourceNotFoundError(Exception):
        pass

    class _HTTPError(Exception):
        pass


# Argument spec shared by every module that talks to a cluster (doc fragment: krops.platform.kube).
KUBE_ARGS = dict(
    kubeconfig=dict(type="path"),
    context=dict(type="str"),
)


class KubeError(Exception):
    """A Kubernetes call failed in a way the user must act on."""


class WaitTimeout(KubeError):
    """A wait ran out of time; ``state`` holds the last observed state."""

    def __init__(self, message, state=None):
        super().__init__(message)
        self.state = state


def resolve_auth(kubeconfig=None, context=None, environ=None):
    environ = os.environ if environ is None else environ
    kubeconfig = kubeconfig or environ.get("K8S_AUTH_KUBECONFIG") or None
    context = context or environ.get("K8S_AUTH_CONTEXT") or None
    return (os.path.expanduser(kubeconfig) if kubeconfig else None), context


def write_private(path, text):
    """Write text to path with mode 0600, atomically; True when the file changed.

    For kubeconfigs and anything else holding credentials.
    """
    path = os.path.expanduser(path)
    try:
        with open(path, encoding="utf-8") as handle:
            same = handle.read() == text
        if same and (os.stat(path).st_mode & 0o777) == 0o600:
            return False
    except OSError:
        pass
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".krops-")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return True


def describe_target(kubeconfig=None, context=None):
    kubeconfig, context = resolve_auth(kubeconfig, context)
    return "context %s in %s" % (context or "(current)", kubeconfig or "~/.kube/config")


def connect(kubeconfig=None, context=None):
    """A DynamicClient for the named kubeconfig/context; KubeError when it cannot be built."""
    if not HAS_KUBERNETES:
        raise KubeError("the Python library 'kubernetes' is required: pip install kubernetes (%s)"
                        % KUBERNETES_IMPORT_ERROR)
    kubeconfig, context = resolve_auth(kubeconfig, context)
    if kubeconfig and not os.path.exists(kubeconfig):
        raise KubeError("kubeconfig %s does not exist; pass kubeconfig= or set K8S_AUTH_KUBECONFIG" % kubeconfig)
    try:
        api_client = kube_config.new_client_from_config(config_file=kubeconfig, context=context)
    except (kube_config.ConfigException, OSError, ValueError) as exc:
        raise KubeError("cannot load %s: %s" % (describe_target(kubeconfig, context), exc))
    try:
        return dynamic.DynamicClient(api_client)
    except (ApiException, _HTTPError, OSError) as exc:
        raise KubeError("cluster at %s (%s) does not answer: %s"
                        % (api_client.configuration.host, describe_target(kubeconfig, context), _short(exc)))


def _short(exc):
    text = getattr(exc, "reason", None) or str(exc)
    body = getattr(exc, "body", None)
    if body:
        try:
            import json
            text = json.loads(body).get("message") or text
        except (ValueError, TypeError, AttributeError):
            pass
    return str(text).strip().splitlines()[0] if str(text).strip() else exc.__class__.__name__


def error_text(exc):
    """One line describing an API exception, with the server's message when it sent one."""
    return _short(exc)


def resource(client, api_version, kind):
    """The DynamicClient resource for api_version/kind; KubeError naming it when unknown."""
    try:
        return client.resources.get(api_version=api_version, kind=kind)
    except ResourceNotFoundError:
        raise KubeError("the cluster does not serve %s %s (is its CRD installed?)" % (api_version, kind))


def get(client, api_version, kind, name, namespace=None):
    """The object as a dict, or None when it (or its kind) does not exist."""
    try:
        return resource(client, api_version, kind).get(name=name, namespace=namespace).to_dict()
    except (NotFoundError, KubeError):
        return None


def list_objects(client, api_version, kind, namespace=None, label_selector=None):
    return [item.to_dict() for item in
            resource(client, api_version, kind).get(namespace=namespace, label_selector=label_selector).items]


# --- probes: present / absent / unknown --------------------------------------------

PRESENT, ABSENT, UNKNOWN = "present", "absent", "unknown"


def probe(client, api_version, kind, namespace=None, name=None, label_selector=None):
    """Classify: absent for NotFound, an empty listing or an unknown kind; unknown for any other error.

    Returns (state, objects, error). Destructive callers abort on UNKNOWN.
    """
    try:
        res = client.resources.get(api_version=api_version, kind=kind)
    except ResourceNotFoundError:
        return ABSENT, [], None
    except (ApiException, _HTTPError, OSError) as exc:
        return UNKNOWN, [], error_text(exc)
    try:
        if name:
            return PRESENT, [res.get(name=name, namespace=namespace).to_dict()], None
        items = [i.to_dict() for i in res.get(namespace=namespace, label_selector=label_selector).items]
        return (PRESENT if items else ABSENT), items, None
    except NotFoundError:
        return ABSENT, [], None
    except (ApiException, _HTTPError, OSError) as exc:
        return UNKNOWN, [], error_text(exc)


# --- conditions -----------------------------------------------------------------------

def condition(obj, type_="Ready"):
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


def readiness(obj, type_="Ready"):
    """(ready, reason, message) for a Flux/CAPI-style object.

    Ready means the condition is True and the controller has observed the current generation.
    """
    if obj is None:
        return False, "NotFound", "the object does not exist yet"
    cond = condition(obj, type_)
    if cond is None:
        return False, "Pending", "no %s condition yet" % type_
    generation = (obj.get("metadata") or {}).get("generation")
    observed = cond.get("observedGeneration") or (obj.get("status") or {}).get("observedGeneration")
    if cond.get("status") == "True" and generation and observed and observed < generation:
        return False, "Progressing", "generation %s not observed yet (observed %s)" % (generation, observed)
    return cond.get("status") == "True", cond.get("reason") or "", cond.get("message") or ""


def is_stalled(obj):
    """True when a Flux object reports a terminal failure (Stalled=True)."""
    cond = condition(obj, "Stalled")
    return bool(cond and cond.get("status") == "True")


# --- event-driven waits ------------------------------------------------------------

def watch_until(client, api_version, kind, namespace, evaluate, timeout, on_progress=None,
                progress_every=30.0, label_selector=None, clock=time.monotonic):
    """Watch a kind until evaluate(objects_by_name) returns (done, state); no polling sleeps.

    evaluate receives {name: object} for every object of the kind in namespace (matching
    label_selector) and returns (done, state). The watch restarts from the last seen
    resourceVersion at most every ``progress_every`` seconds, when on_progress(state) is
    called. Returns state when done; raises WaitTimeout(state) when timeout passes.
    """
    res = resource(client, api_version, kind)
    deadline = clock() + timeout
    listing = res.get(namespace=namespace, label_selector=label_selector)
    objects = {_ident(i): i.to_dict() for i in listing.items}
    version = listing.metadata.resourceVersion
    done, state = evaluate(objects)
    while not done:
        remaining = deadline - clock()
        if remaining <= 0:
            raise WaitTimeout("timed out after %ss waiting for %s %s" % (int(timeout), api_version, kind), state)
        window = max(1, int(min(remaining, progress_every)))
        try:
            for event in res.watch(namespace=namespace, label_selector=label_selector,
                                   resource_version=version, timeout=window):
                obj = event["raw_object"]
                version = obj["metadata"].get("resourceVersion", version)
                if event["type"] == "DELETED":
                    objects.pop(_ident_dict(obj), None)
                elif event["type"] in ("ADDED", "MODIFIED"):
                    objects[_ident_dict(obj)] = obj
                else:
                    continue
                done, state = evaluate(objects)
                if done:
                    return state
        except (ApiException, _HTTPError, OSError):
            # The watch broke (expired resourceVersion, connection reset): list afresh.
            listing = res.get(namespace=namespace, label_selector=label_selector)
            objects = {_ident(i): i.to_dict() for i in listing.items}
            version = listing.metadata.resourceVersion
        done, state = evaluate(objects)
        if not done and on_progress is not None:
            on_progress(state)
    return state


def _ident(item):
    return (item.metadata.namespace or "", item.metadata.name)


def _ident_dict(obj):
    return ((obj.get("metadata") or {}).get("namespace") or "", obj["metadata"]["name"])
