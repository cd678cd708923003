"""krops.platform.oci_artifact_push against the real registry (Debian docker-registry 2.8)."""

import base64
import hashlib
import io
import json
import os
import subprocess
import tarfile
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import oras.provider
import pytest
from ansible.module_utils import urls

from ansible_collections.krops.platform.plugins.module_utils import oci
from ansible_collections.krops.platform.plugins.modules import oci_artifact_push
from tests.substrate.fixtures import free_port

REVISION = "main@sha1:" + "a" * 40


def make_tree(root, extra=None):
    files = {
        "mgmt/local-host/kustomization.yaml": "resources:\n  - flux-ks.yaml\n",
        "mgmt/local-host/flux-ks.yaml": "kind: Kustomization\n",
        "mgmt/local-host/capd-system/provider.yaml": "kind: InfrastructureProvider\n",
        "workload/local-host/kustomization.yaml": "resources: []\n",
        "workload/other/ignored.yaml": "not published\n",
        "README.md": "not published\n",
    }
    files.update(extra or {})
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def get(registry, path, accept=None):
    request = urllib.request.Request(f"http://{registry}{path}", headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers, response.read()


def args(registry, root, **extra):
    base = {
        "registry": registry,
        "insecure": True,
        "root": str(root),
        "paths": ["mgmt/local-host", "workload/local-host"],
        "source": "https://github.com/krops/krops",
        "revision": REVISION,
    }
    base.update(extra)
    return base


def test_push_then_pull_back_the_flux_artifact(oci_registry, run_module, tmp_path):
    root = make_tree(tmp_path / "repo")
    result = run_module(oci_artifact_push, args(oci_registry, root))
    assert not result.failed, result
    assert result["changed"] is True and result["previous_digest"] is None
    assert result["url"] == f"oci://{oci_registry}/krops:latest"
    assert result["revision"] == REVISION

    headers, body = get(oci_registry, "/v2/krops/manifests/latest", oci.MANIFEST_TYPE)
    assert headers["Docker-Content-Digest"] == result["digest"] == "sha256:" + hashlib.sha256(body).hexdigest()
    manifest = json.loads(body)
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert manifest["config"]["mediaType"] == "application/vnd.cncf.flux.config.v1+json"
    assert [layer["mediaType"] for layer in manifest["layers"]] == ["application/vnd.cncf.flux.content.v1.tar+gzip"]
    assert manifest["annotations"]["org.opencontainers.image.source"] == "https://github.com/krops/krops"
    assert manifest["annotations"]["org.opencontainers.image.revision"] == REVISION

    dummy, layer = get(oci_registry, "/v2/krops/blobs/{}".format(manifest["layers"][0]["digest"]))
    assert "sha256:" + hashlib.sha256(layer).hexdigest() == manifest["layers"][0]["digest"] == result["layer_digest"]
    with tarfile.open(fileobj=io.BytesIO(layer), mode="r:gz") as tar:
        members = tar.getmembers()
        names = [m.name for m in members]
        assert names == [
            "mgmt",
            "mgmt/local-host",
            "mgmt/local-host/capd-system",
            "mgmt/local-host/capd-system/provider.yaml",
            "mgmt/local-host/flux-ks.yaml",
            "mgmt/local-host/kustomization.yaml",
            "workload",
            "workload/local-host",
            "workload/local-host/kustomization.yaml",
        ]
        assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 for m in members)
        assert {m.mode for m in members if m.isdir()} == {0o755} and {m.mode for m in members if m.isfile()} == {0o644}
        assert tar.extractfile("mgmt/local-host/flux-ks.yaml").read() == b"kind: Kustomization\n"
    assert result["files"] == len(names)

    # oras (an independent client) sees the same tag and manifest
    client = oras.provider.Registry(hostname=oci_registry, insecure=True)
    assert client.get_tags(f"{oci_registry}/krops") == ["latest"]
    assert client.get_manifest(f"{oci_registry}/krops:latest")["layers"] == manifest["layers"]


def test_a_push_makes_one_tls_context_not_one_a_request(oci_registry, run_module, tmp_path, monkeypatch):
    """open_url makes a context for each request, and each loads every CA certificate of the system: a push of
    a dozen requests made a dozen. The registry client makes one, as open_url would, and keeps it."""
    made = []
    real = urls.make_context
    for owner in (urls, oci):  # open_url's, and the one the client imports
        monkeypatch.setattr(owner, "make_context", lambda *a, **kw: made.append(1) or real(*a, **kw), raising=False)
    sent = []
    monkeypatch.setattr(oci.Registry, "request", _counted(oci.Registry.request, sent))
    result = run_module(oci_artifact_push, args(oci_registry, make_tree(tmp_path / "repo")))
    assert not result.failed, result
    assert len(sent) >= 6 and made == [1]


def _counted(method, calls):
    def counted(self, *a, **kw):
        calls.append(a[:2])
        return method(self, *a, **kw)

    return counted


def test_same_content_is_unchanged_and_check_mode_agrees(oci_registry, run_module, tmp_path):
    root = make_tree(tmp_path / "repo")
    first = run_module(oci_artifact_push, args(oci_registry, root))
    second = run_module(oci_artifact_push, args(oci_registry, root))
    assert second["changed"] is False
    assert second["digest"] == first["digest"] == second["previous_digest"]
    planned = run_module(oci_artifact_push, args(oci_registry, root), check_mode=True)
    assert planned["changed"] is False and planned["digest"] == first["digest"]


def test_changed_content_moves_the_tag_and_check_mode_does_not(oci_registry, run_module, tmp_path):
    root = make_tree(tmp_path / "repo")
    first = run_module(oci_artifact_push, args(oci_registry, root))
    (root / "mgmt/local-host/flux-ks.yaml").write_text("kind: Kustomization\nmetadata: {}\n")
    planned = run_module(oci_artifact_push, args(oci_registry, root), check_mode=True)
    assert planned["changed"] is True and planned["digest"] != first["digest"]
    assert (
        get(oci_registry, "/v2/krops/manifests/latest", oci.MANIFEST_TYPE)[0]["Docker-Content-Digest"]
        == first["digest"]
    )
    moved = run_module(oci_artifact_push, args(oci_registry, root))
    assert moved["changed"] is True and moved["previous_digest"] == first["digest"]
    assert moved["digest"] == planned["digest"]
    assert (
        get(oci_registry, "/v2/krops/manifests/latest", oci.MANIFEST_TYPE)[0]["Docker-Content-Digest"]
        == moved["digest"]
    )
    # the old artifact is still there by digest; a new revision alone also moves the tag
    assert get(oci_registry, "/v2/krops/manifests/{}".format(first["digest"]), oci.MANIFEST_TYPE)[0]
    revised = run_module(oci_artifact_push, args(oci_registry, root, revision="main@sha1:" + "b" * 40, tag="v2"))
    assert (
        revised["changed"] and revised["layer_digest"] == moved["layer_digest"] and revised["digest"] != moved["digest"]
    )


def test_digest_is_reproducible_across_checkouts_times_and_modes(tmp_path):
    one = make_tree(tmp_path / "one")
    two = tmp_path / "two"
    # created in another order, other mtimes, other permissions
    for rel in reversed(
        [
            "mgmt/local-host/kustomization.yaml",
            "mgmt/local-host/flux-ks.yaml",
            "mgmt/local-host/capd-system/provider.yaml",
            "workload/local-host/kustomization.yaml",
        ]
    ):
        path = two / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text((one / rel).read_text())
        os.utime(path, (1_700_000_000, 1_700_000_000))
        path.chmod(0o600)
    (two / "mgmt").chmod(0o700)
    layer_one, names_one, dummy = oci.build_layer(str(one), ["mgmt/local-host", "workload/local-host"])
    layer_two, names_two, dummy = oci.build_layer(str(two), ["workload/local-host/", "./mgmt/local-host"])
    assert names_one == names_two
    assert layer_one == layer_two
    assert oci.build_manifest(layer_one, "s", REVISION) == oci.build_manifest(layer_two, "s", REVISION)


def test_symlinks_and_vcs_folders_are_left_out(oci_registry, run_module, tmp_path):
    root = make_tree(tmp_path / "repo", {"mgmt/local-host/.git/HEAD": "ref: refs/heads/main\n"})
    os.symlink("/etc/passwd", root / "mgmt/local-host/passwd")
    result = run_module(oci_artifact_push, args(oci_registry, root))
    assert not result.failed and result["skipped"] == ["mgmt/local-host/passwd"]
    dummy, layer = get(oci_registry, "/v2/krops/blobs/{}".format(result["layer_digest"]))
    with tarfile.open(fileobj=io.BytesIO(layer), mode="r:gz") as tar:
        assert "mgmt/local-host/passwd" not in tar.getnames()
        assert not [name for name in tar.getnames() if ".git" in name]


def test_revision_defaults_to_the_git_branch_and_commit(oci_registry, run_module, tmp_path):
    root = make_tree(tmp_path / "repo")
    env = dict(
        os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@e", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@e"
    )
    for command in (["init", "-q", "-b", "feature"], ["add", "."], ["commit", "-q", "-m", "x"]):
        subprocess.run(["git"] + command, cwd=root, env=env, check=True)
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.strip()
    result = run_module(oci_artifact_push, args(oci_registry, root, revision=None))
    assert result["revision"] == f"feature@sha1:{sha}"
    manifest = json.loads(get(oci_registry, "/v2/krops/manifests/latest", oci.MANIFEST_TYPE)[1])
    assert manifest["annotations"]["org.opencontainers.image.revision"] == f"feature@sha1:{sha}"
    outside = make_tree(tmp_path / "plain")
    planned = run_module(oci_artifact_push, args(oci_registry, outside, revision=None), check_mode=True)
    assert planned["revision"] == "unknown"


def test_unreachable_registry_fails_but_check_mode_only_warns(run_module, tmp_path):
    root = make_tree(tmp_path / "repo")
    registry = "127.0.0.1:%d" % free_port()
    result = run_module(oci_artifact_push, args(registry, root))
    assert result.failed
    assert result["msg"].startswith(
        f"oci://{registry}/krops:latest: registry {registry} does not answer at http://{registry}: "
    )
    assert result["msg"].endswith("; is it running and reachable?")
    planned = run_module(oci_artifact_push, args(registry, root), check_mode=True)
    assert not planned.failed and planned["changed"] is True and planned["previous_digest"] is None


def test_tls_hint_when_insecure_is_not_set(run_module, tmp_path):
    root = make_tree(tmp_path / "repo")
    registry = "127.0.0.1:%d" % free_port()
    result = run_module(oci_artifact_push, args(registry, root, insecure=False))
    assert result.failed and result["msg"].endswith("(for a plain-HTTP registry set insecure: true)")


@pytest.mark.parametrize(
    "paths, message",
    [
        (["mgmt/missing"], "path mgmt/missing ({root}/mgmt/missing) is not a directory"),
        ([], "paths is empty: give at least one directory to publish"),
    ],
)
def test_bad_paths_are_reported(oci_registry, run_module, tmp_path, paths, message):
    root = make_tree(tmp_path / "repo")
    result = run_module(oci_artifact_push, args(oci_registry, root, paths=paths))
    assert result.failed
    assert result["msg"] == f"oci://{oci_registry}/krops:latest: {message.format(root=root)}"


def test_a_path_outside_the_root_is_refused_by_the_contract(oci_registry, run_module, tmp_path):
    root = make_tree(tmp_path / "repo")
    result = run_module(oci_artifact_push, args(oci_registry, root, paths=["../elsewhere"]))
    assert result.failed
    assert result["msg"] == (
        f"option paths[0]: expected a directory inside the repository, got '../elsewhere'; it resolves to "
        f"{tmp_path}/elsewhere, outside {root} (a symbolic link or '..'); nothing outside the repository is read"
    )


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            {"repository": "Bad_Name"},
            "option repository: expected an OCI repository name such as krops or team/krops (lowercase) "
            "(OCI distribution-spec repository name), got 'Bad_Name'",
        ),
        (
            {"tag": "-x"},
            "option tag: expected an OCI tag: up to 128 of a-z, A-Z, 0-9, '_', '.', '-', not starting with '.' or "
            "'-' (OCI distribution-spec tag), got '-x'",
        ),
    ],
)
def test_bad_reference_is_refused_before_any_request(oci_registry, run_module, tmp_path, extra, message):
    root = make_tree(tmp_path / "repo")
    result = run_module(oci_artifact_push, args(oci_registry, root, **extra))
    assert result.failed
    assert result["msg"] == message  # the input contract, before any request


class _TokenRegistry(BaseHTTPRequestHandler):
    """HTTP double of a token-protected registry (bearer challenge, token endpoint, basic creds)."""

    seen = []

    def log_message(self, *args):
        return

    def _reply(self, code, body=b"", headers=None):
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        auth = self.headers.get("Authorization", "")
        self.seen.append((self.path, auth))
        port = self.server.server_address[1]
        if self.path.startswith("/token"):
            expected = "Basic " + base64.b64encode(b"robot:s3cret").decode()
            if auth != expected:
                return self._reply(401, b'{"errors":[{"code":"UNAUTHORIZED","message":"bad credentials"}]}')
            return self._reply(200, b'{"token":"tok123"}')
        if auth != "Bearer tok123":
            return self._reply(
                401,
                b'{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}',
                {
                    "WWW-Authenticate": 'Bearer realm="http://127.0.0.1:%d/token",service="reg",scope="repository:krops:pull,push"'
                    % port
                },
            )
        return self._reply(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}')


@pytest.fixture
def token_registry():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TokenRegistry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _TokenRegistry.seen = []
    yield "127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()


def test_bearer_token_flow_and_refused_credentials(token_registry, run_module, tmp_path):
    root = make_tree(tmp_path / "repo")
    # good credentials: the token is fetched with basic auth and used; the check-mode plan says "would push"
    planned = run_module(
        oci_artifact_push, args(token_registry, root, username="robot", password="s3cret"), check_mode=True
    )
    assert not planned.failed, planned
    assert planned["changed"] is True and planned["previous_digest"] is None
    assert [auth for path, auth in _TokenRegistry.seen if path.startswith("/v2/")][-1] == "Bearer tok123"
    assert "s3cret" not in json.dumps(planned)
    # bad credentials: the token endpoint refuses them
    result = run_module(oci_artifact_push, args(token_registry, root, username="robot", password="wrong"))
    assert result.failed
    assert result["msg"] == (
        f"oci://{token_registry}/krops:latest: registry {token_registry}: the token service http://{token_registry}/token refused the "
        "credentials of robot (HTTP 401); check username/password"
    )
    # no credentials at all
    result = run_module(oci_artifact_push, args(token_registry, root))
    assert result.failed
    assert result["msg"] == (
        f"oci://{token_registry}/krops:latest: registry {token_registry}: the token service http://{token_registry}/token refused an "
        "anonymous request (HTTP 401); the registry needs credentials: set username and password"
    )
