# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""What the cloud teardowns share (azure.py, gcp.py, gcp_iam.py, and the rows files the generic module
krops.platform.cloud_teardown runs): the REST client with its retry policy, the endpoints, the ARM API versions no
row carries, the secrets to mask, the environment loading and the check of a generic cloud's settings. Their
deletions are rows (gcp_rows.py, azure_rows.py, where an Azure row carries its API version, and a profile's
``cloud_rows``) run by one engine (steps.py).

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
import random
import ssl
import time
import urllib.error
import urllib.parse

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.urls import Request

from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils.errors import CloudError  # the error a cloud call raises
from ansible_collections.krops.platform.plugins.module_utils.errors import ConfigError
from ansible_collections.krops.platform.plugins.module_utils import ownership
from ansible_collections.krops.platform.plugins.module_utils import profiles

OWNER_TAG = ownership.CLOUD_ENV_LABEL
CAPZ_OWNED_TAG = "sigs.k8s.io_cluster-api-provider-azure_cluster_%s"

AZURE_ARM = "https://management.azure.com"
GCP_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
# The wait options of the cloud teardowns (doc fragment krops.platform.cloud_teardown).
WAIT_ARGS = dict(wait_timeout=dict(type="int", default=1800), poll_interval=dict(type="int", default=10))


def run_options(
    check_mode=False, wait=True, wait_timeout=1800, poll_interval=10, sleep=time.sleep, clock=time.monotonic
):
    """The steps.Run options every cloud teardown takes (azure_rows.azure_run, gcp_rows.gcp_run): check mode, whether
    to wait, the wait's timeout (WAIT_ARGS) and pace, and the clock."""
    return dict(
        check_mode=check_mode, wait=wait, timeout=wait_timeout, poll_interval=poll_interval, sleep=sleep, clock=clock
    )


# The orphan report mode (cloud_report.orphans) of the teardowns on the step engine (doc fragment krops.platform.cloud_teardown).
REPORT_ARGS = dict(
    mode=dict(type="str", default="delete", choices=["delete", "report"]),
    min_age_hours=dict(type="float", default=6),
    report_path=dict(type="path"),
)

# Environment variables that hold secrets, read by krops or by the SDK chains: their values are
# masked in every result, message and warning, like no_log parameters (shell.run's secret_env).
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
# The api-versions of the ARM calls that are no row's: each row of the Azure teardown carries its own (azure_rows.TABLE).
AZURE_API = {"locks": "2020-05-01"}

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


def load_rows(config_file, environment):
    """(config, profile, rows file) of an environment whose profile names the rows file (``cloud_rows``) that
    krops.platform.cloud_teardown runs; CloudError when it names none."""
    cfg = krops_config.load(config_file, environment=environment)
    profile = profiles.of(cfg.environment())
    if profile.cloud_rows is None:
        own = f"; its step {profile.cloud_teardown_step} has a module of its own" if profile.cloud_teardown_step else ""
        raise CloudError(
            f"environment {cfg.selected} is of platform {profile.platform}, whose profile names no rows file "
            f"(cloud_rows) for cloud_teardown{own}"
        )
    return cfg, profile, profile.cloud_rows()


def cloud_settings(spec, given, cloud, mask):
    """The module's ``settings`` checked against the rows file's ``SETTINGS``, an argument spec (ansible's
    ArgumentSpecValidator: types, choices, defaults, required keys). ``mask`` gets the values of its no_log keys
    first (the module masks them, so no message or result shows them). A ConfigError names the key and the valid
    keys."""
    given = dict(given or {})
    result = ArgumentSpecValidator(spec).validate(given)
    mask({str(value) for value in result._no_log_values})  # pylint: disable=protected-access  # its one reader
    valid = "valid keys: " + (", ".join(sorted(spec)) or "none")
    unknown = sorted(str(key) for key in given if key not in spec)
    missing = [key for key in sorted(spec) if spec[key].get("required") and given.get(key) is None]
    if unknown:
        raise ConfigError(f"option settings: unknown key {', '.join(unknown)} for cloud {cloud} ({valid})")
    if missing:
        raise ConfigError(f"option settings: missing key {', '.join(missing)} for cloud {cloud} ({valid})")
    if result.error_messages:
        raise ConfigError(f"option settings of cloud {cloud}: {result.error_messages[0]} ({valid})")
    return result.validated_parameters


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


def first_line(exc):
    # google-auth errors carry (message, response body) as args; the message says it all
    first = exc.args[0] if getattr(exc, "args", None) and isinstance(exc.args[0], str) else None
    text = str(first or getattr(exc, "message", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
