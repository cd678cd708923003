# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Flux-compatible OCI artifacts: a reproducible tarball and a push over the OCI distribution API.

The artifact is what `flux push artifact` produces: an OCI image manifest whose config has
media type application/vnd.cncf.flux.config.v1+json and whose single layer is a tar.gz of type
application/vnd.cncf.flux.content.v1.tar+gzip; the manifest carries the
org.opencontainers.image.source and .revision annotations that source-controller reports.

The tarball is reproducible (sorted entries, mtime 0, uid/gid 0, fixed modes, gzip mtime 0, no
file name in the gzip header), so the same content and revision always give the same manifest
digest. No flux CLI, only the standard library (urllib). Importable without Ansible.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import http.client
import io
import json
import os
import re
import stat
import tarfile
import urllib.error
import urllib.parse

from ansible.module_utils.urls import Request, make_context

from ansible_collections.krops.platform.plugins.module_utils import cli
from ansible_collections.krops.platform.plugins.module_utils import errors

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.cncf.flux.config.v1+json"
CONTENT_TYPE = "application/vnd.cncf.flux.content.v1.tar+gzip"
ANNOTATION_SOURCE = "org.opencontainers.image.source"
ANNOTATION_REVISION = "org.opencontainers.image.revision"
ANNOTATION_CREATED = "org.opencontainers.image.created"
# A fixed creation time keeps the manifest digest a function of the content and revision only.
REPRODUCIBLE_CREATED = "1970-01-01T00:00:00Z"
CONFIG_BLOB = b"{}"
# Version-control folders never belong in the artifact.
_SKIP_DIRS = frozenset((".git", ".hg", ".svn"))

# OCI distribution spec: repository names and tags.
_REPOSITORY = re.compile(r"^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*$")
_TAG = re.compile(r"^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$")

_ACCEPT = ", ".join([MANIFEST_TYPE, "application/vnd.docker.distribution.manifest.v2+json"])


class OciError(errors.RegistryError):
    """Building or pushing the artifact failed; the message names the registry and what to do."""


def sha256_digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


# --- the tarball ---------------------------------------------------------------------


def _entries(root, paths):
    """Sorted (arcname, absolute path) of every directory and regular file under paths."""
    root = os.path.abspath(root)
    found = {}
    for given in paths:
        full = os.path.abspath(os.path.join(root, given))
        rel = os.path.relpath(full, root)
        if rel == os.pardir or rel.startswith(os.pardir + os.sep):
            raise OciError(f"path {given} is outside root {root}; give paths relative to the repository root")
        real, top = os.path.realpath(full), os.path.realpath(root)
        if real != top and not real.startswith(top + os.sep):
            # a symbolic link out of the repository: packing it would push what it points at (a key, a home)
            raise OciError(
                f"path {given} resolves to {real}, outside root {top} (a symbolic link): nothing outside the "
                "repository is packed; give a directory of the repository itself"
            )
        if not os.path.isdir(full):
            raise OciError(f"path {given} ({full}) is not a directory")
        # parents of the path, so the tarball holds e.g. mgmt/ then mgmt/local-host/
        parts = [] if rel == os.curdir else rel.split(os.sep)
        for depth in range(1, len(parts) + 1):
            found[os.path.join(*parts[:depth])] = os.path.join(root, *parts[:depth])
        for folder, dirs, files in os.walk(full, followlinks=False):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
            for name in dirs + files:
                absolute = os.path.join(folder, name)
                found[os.path.relpath(absolute, root)] = absolute
    return sorted(found.items(), key=lambda item: item[0].split(os.sep))


def build_layer(root, paths):
    """(gzip bytes, [arcnames], [skipped symlinks]) for the directories ``paths`` under ``root``."""
    raw = io.BytesIO()
    names, skipped = [], []
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for arcname, absolute in _entries(root, paths):
            mode = os.lstat(absolute).st_mode
            if stat.S_ISLNK(mode):
                skipped.append(arcname)
                continue
            info = tarfile.TarInfo(arcname.replace(os.sep, "/"))
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if stat.S_ISDIR(mode):
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            elif stat.S_ISREG(mode):
                info.mode = 0o755 if mode & 0o111 else 0o644
                info.size = os.path.getsize(absolute)
                with open(absolute, "rb") as handle:
                    tar.addfile(info, handle)
            else:
                skipped.append(arcname)
                continue
            names.append(info.name)
    compressed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    return compressed.getvalue(), names, skipped


def build_manifest(layer, source=None, revision=None):
    """(manifest bytes, manifest digest) for a layer, with the Flux annotations."""
    annotations = {ANNOTATION_CREATED: REPRODUCIBLE_CREATED}
    if source:
        annotations[ANNOTATION_SOURCE] = source
    if revision:
        annotations[ANNOTATION_REVISION] = revision
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "digest": sha256_digest(CONFIG_BLOB), "size": len(CONFIG_BLOB)},
        "layers": [{"mediaType": CONTENT_TYPE, "digest": sha256_digest(layer), "size": len(layer)}],
        "annotations": annotations,
    }
    body = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return body, sha256_digest(body)


# --- the distribution API --------------------------------------------------------------


class Registry:
    """Minimal OCI distribution client: HEAD/GET/PUT manifests, HEAD/upload blobs; basic and bearer auth."""

    def __init__(self, registry, insecure=False, username=None, password=None, timeout=60):
        self.registry = registry
        self.base = "{}://{}".format("http" if insecure else "https", registry)
        self.insecure = insecure
        self.username = username
        self.password = password
        self.timeout = timeout
        self._token = None
        self._client = None

    def _http(self):
        """The Request every call of this registry goes through, with one TLS context made as open_url makes it
        (make_context, open_url's defaults). open_url makes a new context for each call, and each loads every CA
        certificate of the system again: most of the CPU of a push to a local registry."""
        if self._client is None:
            self._client = Request(http_agent="krops", timeout=self.timeout, context=make_context())
        return self._client

    # HTTP plumbing
    def _auth_header(self):
        if self._token:
            return f"Bearer {self._token}"
        if self.username is not None and self.password is not None:
            raw = (f"{self.username}:{self.password}").encode()
            return "Basic {}".format(base64.b64encode(raw).decode("ascii"))
        return None

    def _open(self, method, url, data=None, headers=None):
        headers = dict(headers or {})
        auth = self._auth_header()
        if auth:
            headers["Authorization"] = auth
        return self._http().open(
            method, url, data=data, headers=headers, follow_redirects="all" if method in ("GET", "HEAD") else "none"
        )

    def request(self, method, path, data=None, headers=None, ok=(200,), absolute=False):
        """(status, headers, body); raises OciError for statuses not in ok (404 is returned when in ok)."""
        url = path if absolute else self.base + path
        for attempt in range(2):
            try:
                with self._open(method, url, data, headers) as response:
                    return response.status, response.headers, response.read()
            except urllib.error.HTTPError as exc:
                body = exc.read() if exc.fp else b""
                if exc.code == 401 and attempt == 0 and self._authenticate(exc.headers.get("WWW-Authenticate", "")):
                    continue
                if exc.code in ok:
                    return exc.code, exc.headers, body
                raise OciError(self._describe_error(method, url, exc.code, body))
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                hint = "" if self.insecure else " (for a plain-HTTP registry set insecure: true)"
                raise OciError(
                    f"registry {self.registry} does not answer at {self.base}: {reason}; is it running and reachable?{hint}"
                )
        raise OciError(f"registry {self.registry} refused the credentials for {method} {url}; check username/password")

    def _describe_error(self, method, url, code, body):
        detail = ""
        try:
            errors = json.loads(body.decode("utf-8")).get("errors") or []
            detail = "; ".join("{}: {}".format(e.get("code"), e.get("message")) for e in errors)
        except (ValueError, AttributeError, UnicodeDecodeError):
            detail = body.decode("utf-8", errors="replace").strip()[:200]
        if code == 401 and self.username is not None:
            what = f"refused the credentials of {self.username}"
        elif code == 401:
            what = "needs credentials: set username and password"
        elif code == 403:
            what = "denied access: the credentials may not push to this repository"
        else:
            what = "answered HTTP %d" % code
        return "registry {} {} for {} {}{}".format(self.registry, what, method, url, f" ({detail})" if detail else "")

    def _authenticate(self, challenge):
        """Bearer token flow for a WWW-Authenticate challenge; True when a token was obtained."""
        if not challenge.lower().startswith("bearer "):
            return False
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm", None)
        if not realm:
            return False
        query = urllib.parse.urlencode({k: v for k, v in params.items() if k in ("service", "scope")})
        headers = {}
        if self.username is not None and self.password is not None:
            raw = (f"{self.username}:{self.password}").encode()
            headers["Authorization"] = "Basic {}".format(base64.b64encode(raw).decode("ascii"))
        try:
            with self._http().open("GET", realm + ("?" + query if query else ""), headers=headers) as response:
                answer = json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                advice = (
                    "check username/password"
                    if self.username is not None
                    else "the registry needs credentials: set username and password"
                )
                raise OciError(
                    "registry %s: the token service %s refused %s (HTTP %d); %s"
                    % (
                        self.registry,
                        realm,
                        f"the credentials of {self.username}" if self.username is not None else "an anonymous request",
                        exc.code,
                        advice,
                    )
                )
            raise OciError(f"registry {self.registry}: token request to {realm} failed: {exc}")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise OciError(f"registry {self.registry}: token request to {realm} failed: {exc}")
        self._token = answer.get("token") or answer.get("access_token")
        return bool(self._token)

    # distribution API
    def manifest_digest(self, repository, reference):
        """The digest of the manifest at repository:reference, or None when it does not exist."""
        status, headers, body = self.request(
            "GET", f"/v2/{repository}/manifests/{reference}", headers={"Accept": _ACCEPT}, ok=(200, 404)
        )
        if status == 404:
            return None
        return headers.get("Docker-Content-Digest") or sha256_digest(body)

    def get_manifest(self, repository, reference):
        status, dummy, body = self.request(
            "GET", f"/v2/{repository}/manifests/{reference}", headers={"Accept": _ACCEPT}, ok=(200, 404)
        )
        return None if status == 404 else json.loads(body.decode("utf-8"))

    def has_blob(self, repository, digest):
        status, dummy, dummy2 = self.request("HEAD", f"/v2/{repository}/blobs/{digest}", ok=(200, 404))
        return status == 200

    def get_blob(self, repository, digest):
        return self.request("GET", f"/v2/{repository}/blobs/{digest}")[2]

    def push_blob(self, repository, data):
        """Upload data unless the registry has it; True when uploaded."""
        digest = sha256_digest(data)
        if self.has_blob(repository, digest):
            return False
        dummy, headers, dummy2 = self.request("POST", f"/v2/{repository}/blobs/uploads/", data=b"", ok=(202,))
        location = headers.get("Location")
        if not location:
            raise OciError(f"registry {self.registry} did not return an upload location for {repository}")
        location = urllib.parse.urljoin(self.base + "/", location)
        separator = "&" if "?" in location else "?"
        self.request(
            "PUT",
            f"{location}{separator}digest={urllib.parse.quote(digest)}",
            data=data,
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(len(data))},
            ok=(201,),
            absolute=True,
        )
        return True

    def put_manifest(self, repository, reference, body):
        dummy, headers, dummy2 = self.request(
            "PUT",
            f"/v2/{repository}/manifests/{reference}",
            data=body,
            headers={"Content-Type": MANIFEST_TYPE},
            ok=(201,),
        )
        return headers.get("Docker-Content-Digest") or sha256_digest(body)


# --- the operation ---------------------------------------------------------------------


def registry_probe(url, timeout=5.0):
    """(serves, detail) of GET <url>/v2/: serves when it answers 200 or 401 (a registry that wants auth
    still serves); detail is the status, or why nothing answered. The one registry check (pivot, kind deletion)."""
    try:
        parsed = urllib.parse.urlsplit(url.rstrip("/") + "/v2/")
        connection = http.client.HTTPSConnection if parsed.scheme == "https" else http.client.HTTPConnection
        conn = connection(parsed.hostname, parsed.port, timeout=timeout)
        try:
            conn.request("GET", parsed.path)
            status = conn.getresponse().status
        finally:
            conn.close()
    except (OSError, ValueError, http.client.HTTPException) as exc:
        return False, f"no answer: {exc}"
    return status in (200, 401), f"status {status}"


def registry_serves(url, timeout=5.0):
    """True when GET <url>/v2/ answers 200 or 401."""
    return registry_probe(url, timeout)[0]


def git_revision(root, git=None):
    """'<branch>@sha1:<commit>' of the checkout at root, or 'unknown' outside git."""
    try:
        tool = git or cli.Cli("git")
        commit = tool.run(["rev-parse", "HEAD"], cwd=root).stdout.strip()
        branch = tool.run(["rev-parse", "--abbrev-ref", "HEAD"], cwd=root).stdout.strip()
    except cli.CliError:
        return "unknown"
    if not re.match(r"^[0-9a-f]{40}$", commit):
        return "unknown"
    return "{}@sha1:{}".format(branch or "HEAD", commit)


def push_artifact(
    registry,
    paths,
    repository="krops",
    tag="latest",
    root=None,
    source=None,
    revision=None,
    insecure=False,
    username=None,
    password=None,
    check_mode=False,
):
    """Build and push the artifact; returns the module result (changed, digest, url, revision, ...)."""
    root = os.path.abspath(os.path.expanduser(root or os.getcwd()))
    if not paths:
        raise OciError("paths is empty: give at least one directory to publish")
    if not _REPOSITORY.match(repository or ""):
        raise OciError(
            f"repository {repository!r} is not a valid OCI repository name (lower-case letters, digits, '.', '_', '-', '/')"
        )
    if not _TAG.match(tag or ""):
        raise OciError(f"tag {tag!r} is not a valid OCI tag (letters, digits, '.', '_', '-'; at most 128)")
    if revision is None:
        revision = git_revision(root)
    layer, names, skipped = build_layer(root, paths)
    manifest, digest = build_manifest(layer, source=source, revision=revision)
    result = {
        "changed": False,
        "digest": digest,
        "url": f"oci://{registry}/{repository}:{tag}",
        "revision": revision,
        "previous_digest": None,
        "files": len(names),
        "layer_digest": sha256_digest(layer),
        "layer_size": len(layer),
        "skipped": skipped,
    }
    client = Registry(registry, insecure=insecure, username=username, password=password)
    try:
        previous = client.manifest_digest(repository, tag)
    except OciError as exc:
        if not check_mode:
            raise
        result.update(changed=True, warning=f"could not read the current tag ({exc}); a run would push")
        return result
    result["previous_digest"] = previous
    if previous == digest:
        return result
    result["changed"] = True
    if check_mode:
        return result
    client.push_blob(repository, CONFIG_BLOB)
    client.push_blob(repository, layer)
    pushed = client.put_manifest(repository, tag, manifest)
    if pushed != digest:
        raise OciError(
            f"registry {registry} stored the manifest of {repository}:{tag} as {pushed}, expected {digest}; the registry rewrote it"
        )
    return result
