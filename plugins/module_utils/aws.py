# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""AWS access shared by krops modules: sessions, clients, retries, paginators, ownership.

- :class:`Connection` builds one boto3 session per thread (sessions are not thread-safe,
  clients are) and caches clients per (service, region). Retries are botocore's own, in its
  ``standard`` mode (full-jitter exponential backoff on throttling and transient errors, honouring
  ``x-amz-retry-after``, under a retry quota) with one budget, ``BACKOFF_ATTEMPTS`` attempts per
  call. Every client counts its API calls (``after-call``, once per call whatever the attempts), so
  callers can report how many calls a run made.
- :func:`call` adds no retry layer of its own (two stacked layers would multiply the attempts); it
  turns "this endpoint lacks the operation" into :class:`UnsupportedOperation`, and :func:`pages`
  walks botocore paginators through it.
- :func:`is_not_found` says whether an error means "the resource is absent": deletes treat
  that as success, which keeps them idempotent.
- Ownership is decided in module_utils/ownership.py, never here.

Importable without Ansible; botocore is optional at import time (HAS_BOTO3).
"""

from __future__ import annotations

import os
import threading

from ansible_collections.krops.platform.plugins.module_utils import errors
from ansible_collections.krops.platform.plugins.module_utils import paths

try:
    import boto3
    import boto3.session
    import botocore.config
    import botocore.session
    from botocore.exceptions import BotoCoreError, ClientError

    HAS_BOTO3 = True
    BOTO3_IMPORT_ERROR = None
except ImportError as exc:  # reported by the module through missing_required_lib
    HAS_BOTO3 = False
    BOTO3_IMPORT_ERROR = exc
    BotoCoreError = ClientError = Exception


# Argument spec shared by every module that talks to AWS (doc fragment: krops.platform.aws).
AWS_ARGS = dict(
    profile=dict(type="str"),
    endpoint_url=dict(type="str"),
    access_key=dict(type="str", no_log=True),
    secret_key=dict(type="str", no_log=True),
    session_token=dict(type="str", no_log=True),
)

# Error codes that mean "this resource does not exist" (so a delete of it has nothing to do).
NOT_FOUND_CODES = frozenset(
    (
        "ResourceNotFoundException",
        "NotFoundException",
        "NoSuchEntity",
        "NoSuchBucket",
        "DBInstanceNotFound",
        "DBInstanceNotFoundFault",
        "DBSubnetGroupNotFoundFault",
        "LoadBalancerNotFound",
        "LoadBalancerNotFoundException",
        "TargetGroupNotFound",
        "TargetGroupNotFoundException",
        "AccessPointNotFound",
        "NatGatewayNotFound",
        "InvalidVpcID.NotFound",
        "InvalidSubnetID.NotFound",
        "InvalidInternetGatewayID.NotFound",
        "InvalidRouteTableID.NotFound",
        "InvalidGroup.NotFound",
        "InvalidGroupId.NotFound",
        "InvalidNetworkInterfaceID.NotFound",
        "InvalidAllocationID.NotFound",
        "InvalidAssociationID.NotFound",
        "InvalidNatGatewayID.NotFound",
        "InvalidPermission.NotFound",
        "NoSuchKey",
        "NoSuchVersion",
    )
)

# The one retry budget: attempts per API call, botocore's standard retry mode (Connection's Config).
BACKOFF_ATTEMPTS = 8

# (event name, handler) pairs registered on every client this module builds. Empty in
# production; tests use it to inject throttling or slow deletes at the HTTP boundary.
CLIENT_HOOKS = []


class AwsError(errors.CloudError):
    """An AWS call failed in a way the user must act on."""


class UnsupportedOperation(AwsError):
    """The endpoint does not implement an operation (an emulator, or a partition without it)."""


def error_code(exc):
    if isinstance(exc, ClientError) and hasattr(exc, "response"):
        return exc.response.get("Error", {}).get("Code", "") or ""
    return ""


def error_message(exc):
    if isinstance(exc, ClientError) and hasattr(exc, "response"):
        error = exc.response.get("Error", {})
        return "{}: {}".format(error.get("Code", "?"), (error.get("Message") or "").strip()[:300])
    return str(exc)[:300]


def is_not_found(exc):
    """True when the error means the resource is absent."""
    code = error_code(exc)
    if code in NOT_FOUND_CODES or code.endswith(".NotFound") or code.endswith("NotFoundFault"):
        return True
    if code == "ValidationError" and "does not exist" in error_message(exc):
        return True  # CloudFormation: "Stack with id X does not exist"
    return False


def is_unsupported(exc):
    """An endpoint without this operation answers a bare HTTP 404 (code '404') or InvalidAction."""
    code = error_code(exc)
    return code in ("404", "InvalidAction", "UnknownOperationException", "NotImplemented")


def call(client, operation, **kwargs):
    """client.<operation>(**kwargs); botocore retries throttling and transient errors (standard mode)."""
    try:
        return getattr(client, operation)(**kwargs)
    except ClientError as exc:
        if is_unsupported(exc):
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?")
            raise UnsupportedOperation(
                f"{client.meta.service_model.service_name} {operation} is not supported by this endpoint (HTTP {status}, {error_code(exc)})"
            )
        raise


def call_unless_gone(client, operation, also=(), **kwargs):
    """call(), where a resource already gone (is_not_found, or an error code of ``also`` that means the same for
    this operation) counts as done: True when the call went through, False when there was nothing to act on."""
    try:
        call(client, operation, **kwargs)
    except ClientError as exc:
        if not is_not_found(exc) and error_code(exc) not in also:
            raise
        return False
    return True


def pages(client, operation, **kwargs):
    """Each page of ``operation`` (a botocore paginator driven page by page, each page retried on throttling)."""
    if not client.can_paginate(operation):
        yield call(client, operation, **kwargs)
        return
    config = client.get_paginator(operation)._pagination_cfg  # pylint: disable=protected-access
    input_token = config["input_token"] if isinstance(config["input_token"], list) else [config["input_token"]]
    output_token = config["output_token"] if isinstance(config["output_token"], list) else [config["output_token"]]
    token = None
    while True:
        args = dict(kwargs)
        if token:
            args.update((name, value) for name, value in zip(input_token, token) if value)
        page = call(client, operation, **args)
        yield page
        token = [paths.dig(page, *name.split(".")) for name in output_token]
        if not any(token) or page.get("IsTruncated") is False:
            return


def paginate(client, operation, key, **kwargs):
    """Every item under ``key`` of every page of ``operation``."""
    items = []
    for page in pages(client, operation, **kwargs):
        items.extend(page.get(key) or [])
    return items


def owned_by(tags, clusters):
    """The first of ``clusters`` whose ownership tag the resource carries, else None (kept for preflight;
    the full rule, the krops environment tag included, is module_utils/ownership.py)."""
    from ansible_collections.krops.platform.plugins.module_utils import ownership

    claim = ownership.AwsOwnership(None, {c: [c] for c in clusters}).owner(tags)
    return claim[0] if claim else None


# --- connection ------------------------------------------------------------------------


class CallCounter:
    """Thread-safe count of API calls, in total and per service.operation."""

    def __init__(self):
        self._lock = threading.Lock()
        self.total = 0
        self.by_operation = {}

    def __call__(self, model=None, **_kwargs):
        name = f"{model.service_model.service_name}.{model.name}" if model is not None else "?"
        with self._lock:
            self.total += 1
            self.by_operation[name] = self.by_operation.get(name, 0) + 1


_SHARED = {}
_SHARED_LOCK = threading.Lock()


def _botocore_session():
    """A new botocore session that reuses the service-model loader of earlier ones (parsing models is slow)."""
    session = botocore.session.Session()
    with _SHARED_LOCK:
        loader = _SHARED.get("loader")
        if loader is None:
            _SHARED["loader"] = session.get_component("data_loader")
        else:
            session.register_component("data_loader", loader)
    return session


class Connection:
    """Credentials and endpoint for AWS; one client per (service, region), shared by every thread.

    botocore clients are thread-safe once built; building them (and the session they come
    from) is not, so that happens under a lock, once.
    """

    def __init__(
        self, profile=None, endpoint_url=None, access_key=None, secret_key=None, session_token=None, counter=None
    ):
        if not HAS_BOTO3:
            raise AwsError(f"the Python library 'boto3' is required: pip install boto3 ({BOTO3_IMPORT_ERROR})")
        if bool(access_key) != bool(secret_key):
            raise AwsError(
                "access_key and secret_key must be given together (or neither, to use the profile or "
                "the AWS_* environment variables)"
            )
        self.profile = profile or None
        self.endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
        self._credentials = dict(
            aws_access_key_id=access_key or None,
            aws_secret_access_key=secret_key or None,
            aws_session_token=session_token or None,
        )
        self.counter = counter or CallCounter()
        self._lock = threading.Lock()
        self._session = None
        self._clients = {}
        self._config = botocore.config.Config(
            # botocore's standard mode is the only retry layer (call() adds none); one budget per call.
            retries={"mode": "standard", "total_max_attempts": BACKOFF_ATTEMPTS},
            connect_timeout=10,
            read_timeout=60,
            max_pool_connections=20,
        )

    @classmethod
    def from_options(cls, params):
        """The connection a module's AWS_ARGS options describe (one not given is left to boto3's own chain)."""
        return cls(**{name: params.get(name) for name in AWS_ARGS})

    def client(self, service, region):
        key = (service, region)
        found = self._clients.get(key)
        if found is not None:
            return found
        with self._lock:
            found = self._clients.get(key)
            if found is not None:
                return found
            try:
                if self._session is None:
                    self._session = boto3.session.Session(
                        botocore_session=_botocore_session(), profile_name=self.profile, **self._credentials
                    )
                found = self._session.client(
                    service, region_name=region, endpoint_url=self.endpoint_url, config=self._config
                )
            except (BotoCoreError, ValueError) as exc:
                if not isinstance(exc, BotoCoreError):  # botocore: "Invalid endpoint: ..." for a URL without a scheme
                    raise AwsError(
                        f"endpoint_url (or AWS_ENDPOINT_URL) {self.endpoint_url!r} is not usable: {exc}; "
                        "give a full URL such as https://host:port"
                    )
                raise AwsError(
                    "cannot build an AWS {} client for {} (profile {}): {}".format(
                        service, region, self.profile or "default", exc
                    )
                )
            found.meta.events.register("after-call", self.counter)
            for event, handler in CLIENT_HOOKS:
                found.meta.events.register(event, handler)
            self._clients[key] = found
        return found

    def account_id(self, region):
        try:
            return call(self.client("sts", region), "get_caller_identity")["Account"]
        except (ClientError, BotoCoreError) as exc:
            raise AwsError(
                f"cannot identify the AWS account (sts get-caller-identity in {region}): {error_message(exc)}; check the "
                "credentials (profile, access_key/secret_key or AWS_* variables) or pass account_id"
            )
