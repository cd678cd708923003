# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Kubernetes access shared by krops modules: clients, verbs, conditions, probes and event-driven waits.

Auth resolves like kubernetes.core 6.x (plugins/module_utils/k8s/client.py): each option
from the module parameter, else its K8S_AUTH_<OPTION> environment variable; then host
with a token, a username and password or a client certificate is used as is; else a
kubeconfig (the kubeconfig/context given, else the default kubeconfig) is loaded; the
explicit options then override what the kubeconfig says. Every caller names the
cluster it means; nothing here falls back to "whatever the current context is" without
that being the explicit choice.

Every API request carries a timeout (``request_timeout``, default config.TIMEOUTS
["request"]): a watch is bounded by its own window plus one request timeout, so no wait
outlives its budget by more than one request timeout, even against a stalled server.

The verbs (apply, merge patch, Flux suspend and resume, object identity) are written here once; the Cluster
API vocabulary is in capi.py, kubeconfig export and merge in kubeconfig.py.
"""

from __future__ import annotations

import base64
import copy
import os
import re
import tempfile
import time

from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils import errors

try:
    from urllib3.exceptions import HTTPError as _HTTPError
    from kubernetes import client as kube_client
    from kubernetes import config as kube_config
    from kubernetes import dynamic
    from kubernetes.dynamic.exceptions import ApiException, NotFoundError, ResourceNotFoundError

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


# Every error a Kubernetes API call can raise besides KubeError (the server answered
# an error, the connection broke, the request timed out).
# (Built with tuple(): pylint cannot infer the optional imports above and would flag each except clause.)
API_ERRORS = tuple([ApiException, _HTTPError, OSError])


# Argument spec shared by every module that talks to a cluster (doc fragment: krops.platform.kube).
# The auth options are kubernetes.core's (args_common.AUTH_ARG_SPEC), with the same aliases.
KUBE_ARGS = dict(
    kubeconfig=dict(type="path"),
    context=dict(type="str"),
    host=dict(type="str"),
    api_key=dict(type="str", no_log=True),
    username=dict(type="str"),
    password=dict(type="str", no_log=True),
    validate_certs=dict(type="bool", aliases=["verify_ssl"]),
    ca_cert=dict(type="path", aliases=["ssl_ca_cert"]),
    client_cert=dict(type="path", aliases=["cert_file"]),
    client_key=dict(type="path", aliases=["key_file"]),
    proxy=dict(type="str"),
    no_proxy=dict(type="str"),
    impersonate_user=dict(type="str"),
    impersonate_groups=dict(type="list", elements="str"),
    request_timeout=dict(type="int"),
)


def argument_spec(**options):
    """The argument_spec of a module that talks to a cluster: KUBE_ARGS and the module's own ``options``."""
    return dict(KUBE_ARGS, **options)


# Module option -> kubernetes.client.Configuration attribute (kubernetes.core AUTH_ARG_MAP).
AUTH_MAP = {
    "kubeconfig": "kubeconfig",
    "context": "context",
    "host": "host",
    "api_key": "api_key",
    "username": "username",
    "password": "password",
    "validate_certs": "verify_ssl",
    "ca_cert": "ssl_ca_cert",
    "client_cert": "cert_file",
    "client_key": "key_file",
    "proxy": "proxy",
    "no_proxy": "no_proxy",
}
_HEADERS = {"impersonate_user": "Impersonate-User", "impersonate_groups": "Impersonate-Group"}
REQUEST_TIMEOUT = krops_config.TIMEOUTS["request"]


KubeError = errors.KubeError


class WaitTimeout(KubeError):
    """A wait ran out of time; ``state`` holds the last observed state."""

    def __init__(self, message, state=None):
        super().__init__(message)
        self.state = state


def _env_value(option, environ, kind=None):
    value = environ.get(f"K8S_AUTH_{option.upper()}")
    if value is None and option in AUTH_MAP:
        value = environ.get(f"K8S_AUTH_{AUTH_MAP[option].upper()}")
    if value is None:
        return None
    if kind == "bool":
        return value.lower() not in ("0", "false", "no")
    if kind == "list":
        return [item for item in value.split(",") if item]
    return value


def auth_options(params=None, environ=None):
    """{option: value} of the auth options: the parameter, else K8S_AUTH_<OPTION> (kubernetes.core's order)."""
    environ = os.environ if environ is None else environ
    params = params or {}
    auth = {}
    for option, spec in KUBE_ARGS.items():
        value = params.get(option)
        if value is None:
            value = _env_value(option, environ, spec.get("type"))
            if value is not None and option == "request_timeout":
                try:
                    value = int(value)
                except ValueError:
                    raise KubeError(f"K8S_AUTH_REQUEST_TIMEOUT must be a whole number of seconds, got {value!r}")
        if value is not None and value != "":
            auth[option] = value
    if "request_timeout" in auth and auth["request_timeout"] < 1:
        raise KubeError("request_timeout must be at least 1 second, got {}".format(auth["request_timeout"]))
    for option in ("kubeconfig", "ca_cert", "client_cert", "client_key"):
        if option in auth:
            auth[option] = os.path.expanduser(auth[option])
    return auth


def resolve_auth(kubeconfig=None, context=None, environ=None):
    auth = auth_options({"kubeconfig": kubeconfig, "context": context}, environ)
    return auth.get("kubeconfig"), auth.get("context")


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


def describe_target(kubeconfig=None, context=None, host=None):
    if host and not kubeconfig and not context:
        return f"host {host}"
    kubeconfig, context = resolve_auth(kubeconfig, context)
    # without one given, the file the client reads: KUBECONFIG, else ~/.kube/config
    return "context {} in {}".format(context or "(current)", kubeconfig or kube_config.KUBE_CONFIG_DEFAULT_LOCATION)


def _in_cluster(configuration):
    try:
        kube_config.load_incluster_config(client_configuration=configuration)
        return True
    except kube_config.ConfigException:
        return False


def _configuration(auth):
    """kubernetes.client.Configuration the way kubernetes.core builds it (client.py _create_configuration)."""

    def given(*names):
        return all(auth.get(name) for name in names)

    if given("host"):
        auth["host"] = auth["host"].rstrip("/")
    configuration = kube_client.Configuration()
    if given("username", "password", "host") or given("api_key", "host") or given("client_cert", "client_key", "host"):
        pass  # enough to authenticate: no kubeconfig is read
    elif not auth.get("kubeconfig") and not auth.get("context") and _in_cluster(configuration):
        pass  # kubernetes.core's order: in a pod (AWX), with nothing named, the pod's service account
    else:
        kubeconfig = auth.get("kubeconfig")
        if kubeconfig and not os.path.exists(kubeconfig):
            raise KubeError(f"kubeconfig {kubeconfig} does not exist; pass kubeconfig= or set K8S_AUTH_KUBECONFIG")
        try:
            kube_config.load_kube_config(
                config_file=kubeconfig, context=auth.get("context"), client_configuration=configuration
            )
        except (kube_config.ConfigException, OSError, ValueError, TypeError) as exc:
            raise KubeError("cannot load {}: {}".format(describe_target(kubeconfig, auth.get("context")), exc))
    for option, attribute in AUTH_MAP.items():
        value = auth.get(option)
        if value is None or option in ("kubeconfig", "context"):
            continue
        if option == "api_key":
            configuration.api_key = {"authorization": f"Bearer {value}"}
        else:
            setattr(configuration, attribute, value)
    return configuration


def _bounded(rest_client, request_timeout):
    """Give every request of rest_client a timeout: (connect, read) = request_timeout; a watch's read
    timeout is its server-side window plus request_timeout, so a stalled stream ends by then."""
    request = rest_client.request

    def bounded(method, url, *args, **kwargs):
        if kwargs.get("_request_timeout") is None:
            # kubernetes >= 31 puts the query into url; older clients pass query_params.
            query = "{} {}".format(
                url,
                kwargs.get("query_params") or (args[0] if args and isinstance(args[0], list) else ""),
            )
            window = re.search(r"timeoutSeconds\W+(\d+)", query) if "watch" in query else None
            kwargs["_request_timeout"] = (request_timeout, request_timeout + (int(window.group(1)) if window else 0))
        return request(method, url, *args, **kwargs)

    rest_client.request = bounded


def _no_timeout_retry():
    from urllib3.exceptions import ReadTimeoutError
    from urllib3.util.retry import Retry

    class NoTimeoutRetry(Retry):
        def increment(self, method=None, url=None, response=None, error=None, _pool=None, _stacktrace=None):
            if isinstance(error, ReadTimeoutError):
                raise error
            return super().increment(method, url, response, error, _pool, _stacktrace)

    return NoTimeoutRetry(total=3)


def connect(kubeconfig=None, context=None, **options):
    """A DynamicClient for the named kubeconfig/context (or kubernetes.core auth options); KubeError when it cannot be built.

    ``options`` are the other KUBE_ARGS (host, api_key, ..., request_timeout); K8S_AUTH_* fill what is not given.
    """
    if not HAS_KUBERNETES:
        raise KubeError(
            f"the Python library 'kubernetes' is required: pip install kubernetes ({KUBERNETES_IMPORT_ERROR})"
        )
    auth = auth_options(dict(options, kubeconfig=kubeconfig, context=context))
    kubeconfig, context = auth.get("kubeconfig"), auth.get("context")
    configuration = _configuration(auth)
    # urllib3 retries each request 3 times by default: a stalled server would hold a call for 4
    # request timeouts. A read timeout is final here (the waits retry within their deadline);
    # a dropped keep-alive connection is still retried at once.
    configuration.retries = _no_timeout_retry()
    api_client = kube_client.ApiClient(configuration)
    for option, header in _HEADERS.items():
        if auth.get(option):
            value = auth[option]
            api_client.set_default_header(header, ",".join(value) if isinstance(value, list) else value)
    _bounded(api_client.rest_client, auth.get("request_timeout") or REQUEST_TIMEOUT)
    try:
        return dynamic.DynamicClient(api_client)
    except API_ERRORS as exc:
        raise KubeError(
            "cluster at {} ({}) does not answer: {}".format(
                configuration.host, describe_target(kubeconfig, context, auth.get("host")), _short(exc)
            )
        )


def connect_options(params):
    """connect()'s keyword options from a module's parameters: every KUBE_ARGS option but kubeconfig and context."""
    return {k: params.get(k) for k in KUBE_ARGS if k not in ("kubeconfig", "context")}


def connect_params(params, kubeconfig_key="kubeconfig", context_key="context"):
    """connect() from a module's parameters (KUBE_ARGS, with kubeconfig/context possibly under other names)."""
    return connect(params.get(kubeconfig_key), params.get(context_key), **connect_options(params))


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
        raise KubeError(f"the cluster does not serve {api_version} {kind} (is its CRD installed?)")


def get(client, api_version, kind, name, namespace=None):
    """The object as a dict, or None when it (or its kind) does not exist."""
    try:
        return resource(client, api_version, kind).get(name=name, namespace=namespace).to_dict()
    except (NotFoundError, KubeError):
        return None


def list_objects(client, api_version, kind, namespace=None, label_selector=None):
    return [
        item.to_dict()
        for item in resource(client, api_version, kind).get(namespace=namespace, label_selector=label_selector).items
    ]


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
        return False, "Pending", f"no {type_} condition yet"
    generation = (obj.get("metadata") or {}).get("generation")
    observed = cond.get("observedGeneration") or (obj.get("status") or {}).get("observedGeneration")
    if cond.get("status") == "True" and generation and observed and observed < generation:
        return False, "Progressing", f"generation {generation} not observed yet (observed {observed})"
    return cond.get("status") == "True", cond.get("reason") or "", cond.get("message") or ""


def node_states(objects):
    """(all Ready, [{name, ready, reason, message}]) of the Nodes in ``objects`` {(namespace, name): Node}, sorted
    by name: a watch_until evaluator, the one node-readiness rule (at least one Node, every one Ready) of kind_cluster
    and the pivot."""
    nodes = []
    for (dummy, name), obj in sorted(objects.items()):
        ready, reason, message = readiness(obj)
        nodes.append({"name": name, "ready": bool(ready), "reason": reason, "message": message})
    return bool(nodes) and all(n["ready"] for n in nodes), nodes


def is_stalled(obj):
    """True when a Flux object reports a terminal failure (Stalled=True)."""
    cond = condition(obj, "Stalled")
    return bool(cond and cond.get("status") == "True")


# --- event-driven waits ------------------------------------------------------------


def _list_state(res, namespace, label_selector):
    listing = res.get(namespace=namespace, label_selector=label_selector)
    return {_ident(i): i.to_dict() for i in listing.items}, listing.metadata.resourceVersion


def _retryable(exc):
    """A broken connection, a timeout or a 5xx/429 answer: the wait goes on; any other answer is final."""
    status = getattr(exc, "status", None)
    return not isinstance(exc, ApiException) or status is None or status >= 500 or status == 429


def watch_until(
    client,
    api_version,
    kind,
    namespace,
    evaluate,
    timeout,
    on_progress=None,
    progress_every=30.0,
    label_selector=None,
    clock=time.monotonic,
):
    """Watch a kind until evaluate(objects_by_name) returns (done, state); no polling sleeps.

    evaluate receives {name: object} for every object of the kind in namespace (matching
    label_selector) and returns (done, state). The watch restarts from the last seen
    resourceVersion at most every ``progress_every`` seconds, when on_progress(state) is
    called. Returns state when done; raises WaitTimeout(state) when timeout passes. A
    server that stops answering is retried until the deadline (each request is bounded by
    the request timeout), then WaitTimeout names the last error; a final error answer
    (403, 404...) raises KubeError at once.
    """
    res = resource(client, api_version, kind)
    deadline = clock() + timeout
    objects, version, state, done, last_error = {}, None, None, False, None
    while True:
        try:
            if version is None:
                objects, version = _list_state(res, namespace, label_selector)
            done, state = evaluate(objects)
            if done:
                return state
            remaining = deadline - clock()
            if remaining <= 0:
                break
            window = max(1, int(min(remaining, progress_every)))
            for event in res.watch(
                namespace=namespace, label_selector=label_selector, resource_version=version, timeout=window
            ):
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
            last_error = None
        except API_ERRORS as exc:
            # The watch broke (expired resourceVersion, connection reset, stalled server): list afresh.
            if not _retryable(exc):
                raise KubeError(f"{api_version} {kind}: {error_text(exc)}")
            last_error, version = exc, None
            if deadline - clock() > 0:
                time.sleep(min(1.0, max(0.0, deadline - clock())))
        if deadline - clock() <= 0:
            break
        if not done and on_progress is not None and last_error is None:
            on_progress(state)
    message = f"timed out after {int(timeout)}s waiting for {api_version} {kind}"
    if last_error is not None:
        message += f" (the API server stopped answering: {error_text(last_error)})"
    raise WaitTimeout(message, state)


def _ident(item):
    return (item.metadata.namespace or "", item.metadata.name)


def _ident_dict(obj):
    return ((obj.get("metadata") or {}).get("namespace") or "", obj["metadata"]["name"])


# --- object identity --------------------------------------------------------------------


def identity(obj):
    """{kind, namespace, name} of an object (the shape modules return)."""
    meta = obj.get("metadata") or {}
    return {"kind": obj.get("kind"), "namespace": meta.get("namespace") or "", "name": meta.get("name")}


def object_key(obj):
    """(group, kind, namespace, name): identifies an object across versions."""
    meta = obj.get("metadata") or {}
    group = obj.get("apiVersion", "").rpartition("/")[0]
    return (group, obj.get("kind"), meta.get("namespace") or "", meta.get("name"))


def key_label(key):
    """'Kind.group namespace/name' for an object_key (the core group has no suffix)."""
    group, kind, namespace, name = key
    return "{}{} {}".format(kind, "." + group if group else "", f"{namespace}/{name}" if namespace else name)


def label(obj):
    return key_label(object_key(obj))


# --- apply and patch ------------------------------------------------------------------------


def _contains(have, want):
    """True when every field of want is present and equal in have (lists compared whole)."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(_contains(have.get(k), v) for k, v in want.items())
    return have == want


def _normalise_secret(obj):
    if obj.get("kind") == "Secret" and obj.get("apiVersion") == "v1" and obj.get("stringData"):
        obj = copy.deepcopy(obj)
        data = obj.setdefault("data", {}) or {}
        for k, v in obj.pop("stringData").items():
            data[k] = base64.b64encode(str(v).encode()).decode()
        obj["data"] = data
    return obj


CREATED, UPDATED, UNCHANGED = "created", "updated", "unchanged"


def apply(client, obj, check_mode=False, where="the cluster"):
    """Create or merge-patch obj; 'created', 'updated' or 'unchanged'. Never deletes. KubeError naming the object.

    In check mode nothing is written; an object whose kind the cluster does not serve yet (its CRD comes with a
    chart or provider check mode does not install) counts as created.
    """
    obj = {k: v for k, v in _normalise_secret(obj).items() if k != "status"}
    try:
        res = resource(client, obj["apiVersion"], obj["kind"])
    except KubeError as exc:
        if check_mode:
            return CREATED
        raise KubeError(f"{label(obj)} on {where}: {exc}")
    meta = obj.setdefault("metadata", {})
    namespace = (meta.get("namespace") or "default") if res.namespaced else None
    if namespace:
        meta["namespace"] = namespace
    existing = get(client, obj["apiVersion"], obj["kind"], meta["name"], namespace)
    try:
        if existing is None:
            if not check_mode:
                if namespace:
                    ensure_namespace(client, namespace)
                res.create(body=obj, namespace=namespace)
            return CREATED
        if _contains(existing, obj):
            return UNCHANGED
        if not check_mode:
            merge_patch(client, obj["apiVersion"], obj["kind"], meta["name"], namespace, obj, res=res)
        return UPDATED
    except API_ERRORS as exc:
        raise KubeError(f"cannot apply {label(obj)} on {where}: {error_text(exc)}")


def merge_patch(client, api_version, kind, name, namespace, body, res=None, dry_run=None):
    """JSON merge patch (RFC 7386) of one object, a server-side dry run when dry_run="All"; the object as a dict."""
    res = res or resource(client, api_version, kind)
    patch = {"content_type": "application/merge-patch+json", "dry_run": dry_run}
    return res.patch(body=body, name=name, namespace=namespace, **patch).to_dict()


def ensure_namespace(client, name):
    if get(client, "v1", "Namespace", name) is None:
        resource(client, "v1", "Namespace").create(
            body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )


# --- Flux suspend and resume ---------------------------------------------------------------

KUSTOMIZATION = ("kustomize.toolkit.fluxcd.io/v1", "Kustomization")


# Written with spec.suspend by the krops step that suspends a Flux object, removed when it resumes it:
# a later run proves the suspension is krops' own (and which step's), never the user's.
SUSPENDED_BY = "krops.io/suspended-by"
PIVOT_SUSPENDER = "krops.platform.capi_pivot"
# The teardown steps that suspend Flux before they delete (capi_cluster_delete, tinkerbell_release,
# flux_release_quiesce); nothing resumes what they suspended.
TEARDOWN_SUSPENDER = "krops.platform.teardown"


def suspend_patch(suspended, by=None):
    """The merge patch that suspends (True) or resumes (False) one Flux object through spec.suspend: the one
    suspend verb of the pivot and the teardown.

    ``by`` names the suspender in the SUSPENDED_BY annotation (suspending), and resuming always
    removes that annotation, in the same patch.
    """
    patch = {"spec": {"suspend": bool(suspended)}}
    if by and suspended:
        patch["metadata"] = {"annotations": {SUSPENDED_BY: by}}
    elif not suspended:
        patch["metadata"] = {"annotations": {SUSPENDED_BY: None}}
    return patch


def set_suspend(client, namespace, name, suspended, api=KUSTOMIZATION, by=None):
    """Suspend (True) or resume (False) one Flux object (suspend_patch)."""
    merge_patch(client, api[0], api[1], name, namespace, suspend_patch(suspended, by))


def suspended_by(obj):
    """The SUSPENDED_BY annotation of a suspended Flux object (None when it is not suspended or not by krops)."""
    if not ((obj or {}).get("spec") or {}).get("suspend"):
        return None
    return (((obj or {}).get("metadata") or {}).get("annotations") or {}).get(SUSPENDED_BY)


def held_by_pivot(obj):
    """True when the pivot suspended this Flux object and has not resumed it (a run that died mid-move, issue 30)."""
    return suspended_by(obj) == PIVOT_SUSPENDER
