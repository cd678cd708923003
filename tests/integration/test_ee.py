# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The execution environment: `ansible-builder create` gives a complete build context, and the
pinned tools install only when their SHA-256 matches (over a real HTTP server on 127.0.0.1)."""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
import importlib.util
import http.server
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import threading
import urllib.parse

import pytest
import yaml

from tests.integration.test_distribution import copy_checkout
from tests.substrate.fixtures import REPO, VENV_BIN

INSTALL = REPO / "scripts" / "install_tools.py"
TOOLS = ("kind", "kubectl", "helm", "clusterctl", "sops", "age")
PLATFORMS = ("linux/amd64", "linux/arm64")
# Assets whose digest could not be confirmed (docs/release.md): the installer refuses them.
UNCONFIRMED = {"clusterctl"}
# Tools with no linux/arm64 asset: the arm64 digest is not confirmed either (docs/upstream-facts.md).
NO_ARM64 = {"clusterctl"}


def pins():
    return yaml.safe_load((REPO / "meta" / "tools.yml").read_text())["tools"]


def test_every_tool_is_pinned_once_with_its_checksum():
    tools = pins()
    assert tuple(tools) == TOOLS
    for name, pin in tools.items():
        assert re.fullmatch(r"v\d+\.\d+\.\d+", pin["version"]), name
        assert set(pin) == {"version", "assets"}, name
        expected = ("linux/amd64",) if name in NO_ARM64 else PLATFORMS
        assert tuple(pin["assets"]) == expected, name
        for platform, asset in pin["assets"].items():
            arch = platform.split("/")[1]
            assert asset["url"].startswith("https://") and pin["version"] in asset["url"], (name, platform)
            assert arch in asset["url"] and ({"amd64", "arm64"} - {arch}).pop() not in asset["url"], (name, platform)
            if asset.get("member"):
                assert arch in asset["member"] or "/" + name in asset["member"], (name, platform)
            unconfirmed = name in UNCONFIRMED and asset["sha256"] == ""
            assert re.fullmatch(r"[0-9a-f]{64}", asset["sha256"]) or unconfirmed, (name, platform)
            assert asset["checksum_source"], (name, platform)
    assert {n for n, p in tools.items() if any(not a["sha256"] for a in p["assets"].values())} == UNCONFIRMED
    # Two platforms never share a digest (a copied entry would).
    digests = [a["sha256"] for p in tools.values() for a in p["assets"].values() if a["sha256"]]
    assert len(digests) == len(set(digests))
    # The docs point to the one place and list the same versions.
    release = (REPO / "docs" / "release.md").read_text()
    assert "meta/tools.yml" in release
    for name, pin in tools.items():
        assert "| {} | {} |".format(name, pin["version"]) in release, name


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    """ansible-builder create, in a copy of the checkout with its freshly built tarball."""
    root = copy_checkout(tmp_path_factory.mktemp("ee") / "repo")
    proc = subprocess.run(
        [sys.executable, str(root / "scripts" / "build_collection.py"), "--output", str(root / "build" / "dist")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    (root / "build" / "ee").mkdir(parents=True)
    os.replace(proc.stdout.strip(), root / "build" / "ee" / "krops-platform.tar.gz")
    proc = subprocess.run(
        [
            str(VENV_BIN / "ansible-builder"),
            "create",
            "-f",
            "execution-environment.yml",
            "-c",
            "build/ee/context",
            "--output-filename",
            "Containerfile",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root / "build" / "ee" / "context"


def test_build_context_holds_the_collection_the_tools_and_their_pins(context):
    build = context / "_build"
    assert (build / "tools" / "tools.yml").read_text() == (REPO / "meta" / "tools.yml").read_text()
    assert (build / "tools" / "install_tools.py").read_text() == INSTALL.read_text()
    assert (build / "bindep.txt").read_text() == (REPO / "bindep.txt").read_text()
    assert yaml.safe_load((build / "requirements.yml").read_text()) == yaml.safe_load(
        (REPO / "meta" / "ee-requirements.yml").read_text()
    )
    with tarfile.open(build / "collections" / "krops-platform.tar.gz") as archive:
        manifest = json.load(archive.extractfile("MANIFEST.json"))
        names = set(archive.getnames())
    assert manifest["collection_info"]["namespace"] == "krops" and manifest["collection_info"]["name"] == "platform"
    assert {"meta/execution-environment.yml", "requirements.txt", "bindep.txt", "meta/tools.yml"} <= names
    galaxy_deps = yaml.safe_load((REPO / "galaxy.yml").read_text())["dependencies"]
    ee_collections = {
        c["name"]: c.get("version") for c in yaml.safe_load((build / "requirements.yml").read_text())["collections"]
    }
    assert ee_collections.pop("collections/krops-platform.tar.gz") is None
    assert ee_collections == galaxy_deps

    containerfile = (context / "Containerfile").read_text()
    for line in (
        'ARG EE_BASE_IMAGE="registry.access.redhat.com/ubi9/ubi:9.7-1775624009"',
        'ARG PYCMD="/usr/bin/python3.12"',
        'ARG ANSIBLE_INSTALL_REFS="ansible-core==2.21.5 ansible-runner==2.4.3"',
        "COPY _build/tools /opt/krops-tools",
        "ARG TARGETARCH",
        "ARG KROPS_TOOL_SHA256_CLUSTERCTL",
        "ARG KROPS_TOOL_SHA256_CLUSTERCTL_AMD64",
        "RUN /usr/bin/python3.12 /opt/krops-tools/install_tools.py --pins /opt/krops-tools/tools.yml "
        "--dest /usr/local/bin ${TARGETARCH:+--platform linux/$TARGETARCH}",
    ):
        assert line in containerfile.splitlines(), line
    # The tools are installed in the final stage, after the collections, and checked by running them.
    final = containerfile.split("FROM base AS final", 1)[1]
    assert final.index("COPY --from=galaxy") < final.index("install_tools.py") < final.index("kind version")
    # The build argument that supplies the unconfirmed digest is declared before the installer runs.
    assert final.index("ARG KROPS_TOOL_SHA256_CLUSTERCTL") < final.index("install_tools.py")
    # The stage declares TARGETARCH (a predefined build argument reaches a stage only when declared).
    assert final.index("ARG TARGETARCH") < final.index("install_tools.py")


def test_introspection_takes_the_collections_python_needs_without_ansible(context, tmp_path):
    """What the builder stage computes: krops.platform's requirements.txt, less what ansible-builder always
    leaves out (`ansible`, and PyYAML, which ansible-core brings), plus bindep.txt."""
    collections = tmp_path / "collections"
    proc = subprocess.run(
        [
            str(VENV_BIN / "ansible-galaxy"),
            "collection",
            "install",
            "--no-deps",
            "-p",
            str(collections),
            str(context / "_build" / "collections" / "krops-platform.tar.gz"),
        ],
        cwd=tmp_path,
        env=dict(os.environ, ANSIBLE_CONFIG=str(tmp_path / "none.cfg")),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = subprocess.run(
        [
            sys.executable,
            str(context / "_build" / "scripts" / "introspect.py"),
            "introspect",
            "--user-bindep",
            str(context / "_build" / "bindep.txt"),
            "--user-pip",
            str(context / "_build" / "requirements.txt"),
            str(collections),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    data = yaml.safe_load(proc.stdout)
    python = [line.split("#")[0].strip() for line in data["python"]]
    wanted = [
        line
        for line in (REPO / "requirements.txt").read_text().splitlines()
        if line and not line.startswith(("#", "ansible>", "PyYAML>", "yamllint>"))
    ]
    # ansible-builder drops yamllint from a collection's list; execution-environment.yml asks for it.
    assert python == wanted + ["yamllint>=1.38.0"]
    assert "yamllint>=1.38.0  # from collection user" in data["python"]
    assert any(line.startswith("git ") for line in data["system"])


# --- scripts/install_tools.py over HTTP -----------------------------------------------------


@pytest.fixture
def mirror(tmp_path):
    """An HTTP server on 127.0.0.1 serving tmp_path/www with the release paths."""
    www = tmp_path / "www"
    www.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(www))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield www, "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()


def publish(www, url_path, data):
    target = www / url_path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def tarball(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def run_install(pins_file, dest, mirror_url, *only, platform="linux/amd64"):
    argv = [sys.executable, str(INSTALL), "--pins", str(pins_file), "--dest", str(dest), "--mirror", mirror_url]
    argv += ["--platform", platform]
    if only:
        argv += ["--only"] + list(only)
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def test_tools_install_only_when_the_checksum_matches(mirror, tmp_path):
    www, url = mirror
    kind_sum = publish(
        www, "/kubernetes-sigs/kind/releases/download/v0.32.0/kind-linux-amd64", b"#!/bin/sh\necho kind\n"
    )
    age_sum = publish(
        www,
        "/FiloSottile/age/releases/download/v1.3.2/age-v1.3.2-linux-amd64.tar.gz",
        tarball({"age/age": b"age-binary", "age/age-keygen": b"keygen-binary", "age/LICENSE": b"x"}),
    )
    tools = pins()
    tools["kind"]["assets"]["linux/amd64"]["sha256"] = kind_sum
    tools["age"]["assets"]["linux/amd64"]["sha256"] = age_sum
    pins_file = tmp_path / "tools.yml"
    pins_file.write_text(yaml.safe_dump({"tools": tools}))
    dest = tmp_path / "bin"
    proc = run_install(pins_file, dest, url, "kind", "age")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"installed kind v0.32.0: {dest}/kind",
        f"installed age v1.3.2: {dest}/age",
        f"installed age v1.3.2: {dest}/age-keygen",
    ]
    assert sorted(p.name for p in dest.iterdir()) == ["age", "age-keygen", "kind"]
    assert (dest / "age-keygen").read_bytes() == b"keygen-binary" and os.access(dest / "kind", os.X_OK)

    # A tampered asset is refused and nothing is written.
    publish(www, "/kubernetes-sigs/kind/releases/download/v0.32.0/kind-linux-amd64", b"evil")
    dest2 = tmp_path / "bin2"
    proc = run_install(pins_file, dest2, url, "kind")
    assert proc.returncode == 1
    assert proc.stderr == (
        "install_tools: kind v0.32.0: SHA-256 mismatch for {}/kubernetes-sigs/kind/releases/download/"
        "v0.32.0/kind-linux-amd64: expected {}, got {}; nothing was installed\n".format(
            url, kind_sum, hashlib.sha256(b"evil").hexdigest()
        )
    )
    assert not dest2.exists()


def run_install_env(pins_file, dest, mirror_url, env=None, *only, platform="linux/amd64"):
    argv = [sys.executable, str(INSTALL), "--pins", str(pins_file), "--dest", str(dest), "--mirror", mirror_url]
    if platform:
        argv += ["--platform", platform]
    if only:
        argv += ["--only"] + list(only)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KROPS_TOOL_SHA256_") and k != "TARGETARCH"}
    return subprocess.run(argv, capture_output=True, text=True, check=False, env=dict(environ, **(env or {})))


def publish_all(www, platform="linux/amd64"):
    """Every pinned asset of the platform on the mirror, its content naming the platform; the pins
    rewritten to the published digests (clusterctl left unpinned)."""
    tools = pins()
    digests = {}
    for name, pin in tools.items():
        asset = pin["assets"].get(platform)
        if asset is None:
            continue
        path = urllib.parse.urlsplit(asset["url"]).path
        if asset.get("member"):
            members = {m: f"{m} {platform} binary".encode() for m in [asset["member"]] + list(asset.get("also") or [])}
            data = tarball(members)
        else:
            data = f"#!/bin/sh\necho {name} {platform}\n".encode()
        digests[name] = publish(www, path, data)
        asset["sha256"] = "" if name in UNCONFIRMED else digests[name]
    return tools, digests


def test_a_tool_without_a_confirmed_checksum_is_refused_before_download(tmp_path):
    proc = run_install_env(REPO / "meta" / "tools.yml", tmp_path / "bin", "http://127.0.0.1:9", None, "clusterctl")
    assert proc.returncode == 1
    assert proc.stderr == (
        "install_tools: clusterctl v1.13.5: no SHA-256 is pinned in meta/tools.yml (checksum_source: not confirmed "
        "upstream; see docs/upstream-facts.md); read the digest of "
        "https://github.com/kubernetes-sigs/cluster-api/releases/download/v1.13.5/clusterctl-linux-amd64 on its "
        "release page and write it there, or pass it as KROPS_TOOL_SHA256_CLUSTERCTL_AMD64 or "
        "KROPS_TOOL_SHA256_CLUSTERCTL (a build argument of the execution environment)\n"
    )
    proc = run_install(REPO / "meta" / "tools.yml", tmp_path / "bin", "http://127.0.0.1:9", "kubeadm")
    assert proc.returncode == 1
    assert proc.stderr == (
        "install_tools: unknown tool(s) kubeadm; meta/tools.yml pins kind, kubectl, helm, clusterctl, sops, age\n"
    )


def test_every_tool_is_verified_and_nothing_installs_while_one_fails(mirror, tmp_path):
    """One run reports every problem (the unpinned clusterctl and a tampered sops) and installs nothing."""
    www, url = mirror
    tools, digests = publish_all(www)
    sops_path = urllib.parse.urlsplit(tools["sops"]["assets"]["linux/amd64"]["url"]).path
    publish(www, sops_path, b"tampered")
    pins_file = tmp_path / "tools.yml"
    pins_file.write_text(yaml.safe_dump({"tools": tools}, sort_keys=False))
    dest = tmp_path / "bin"
    proc = run_install_env(pins_file, dest, url)
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("install_tools: clusterctl v1.13.5: no SHA-256 is pinned in meta/tools.yml")
    assert lines[1] == (
        "install_tools: sops v3.13.3: SHA-256 mismatch for {}{}: expected {}, got {}; nothing was installed".format(
            url, sops_path, digests["sops"], hashlib.sha256(b"tampered").hexdigest()
        )
    )
    assert lines[2:] == ["install_tools: verified kind, kubectl, helm, age; installed nothing (2 problems above)"]
    assert not dest.exists()


def test_an_unconfirmed_digest_comes_from_the_build_argument_and_is_still_checked(mirror, tmp_path):
    www, url = mirror
    tools, digests = publish_all(www)
    pins_file = tmp_path / "tools.yml"
    pins_file.write_text(yaml.safe_dump({"tools": tools}, sort_keys=False))
    dest = tmp_path / "bin"
    proc = run_install_env(pins_file, dest, url, {"KROPS_TOOL_SHA256_CLUSTERCTL": digests["clusterctl"].upper()})
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in dest.iterdir()) == [
        "age",
        "age-keygen",
        "clusterctl",
        "helm",
        "kind",
        "kubectl",
        "sops",
    ]

    # A wrong digest in the build argument is a mismatch like any other.
    proc = run_install_env(pins_file, tmp_path / "bin2", url, {"KROPS_TOOL_SHA256_CLUSTERCTL": "0" * 64}, "clusterctl")
    assert proc.returncode == 1
    assert "clusterctl v1.13.5: SHA-256 mismatch" in proc.stderr and not (tmp_path / "bin2").exists()
    # It cannot replace a pinned digest, and it must be a SHA-256.
    proc = run_install_env(pins_file, tmp_path / "bin3", url, {"KROPS_TOOL_SHA256_KIND": "0" * 64}, "kind")
    assert proc.returncode == 1
    assert proc.stderr == (
        "install_tools: kind v0.32.0: KROPS_TOOL_SHA256_KIND is set but meta/tools.yml pins {}; unset it "
        "(the environment only supplies digests meta/tools.yml leaves empty)\n".format(digests["kind"])
    )
    proc = run_install_env(pins_file, tmp_path / "bin4", url, {"KROPS_TOOL_SHA256_CLUSTERCTL": "abc"}, "clusterctl")
    assert proc.returncode == 1
    assert proc.stderr == (
        "install_tools: clusterctl v1.13.5: KROPS_TOOL_SHA256_CLUSTERCTL is 'abc', not a SHA-256 (64 hex digits)\n"
    )


def test_arm64_installs_the_arm64_assets_and_names_a_tool_without_one(mirror, tmp_path):
    """--platform linux/arm64 downloads each tool's arm64 asset (helm's arm64 member), and clusterctl, which
    has no arm64 asset, is a problem naming it: nothing is installed while it is asked for."""
    www, url = mirror
    tools, digests = publish_all(www, "linux/arm64")
    pins_file = tmp_path / "tools.yml"
    pins_file.write_text(yaml.safe_dump({"tools": tools}, sort_keys=False))
    proc = run_install_env(pins_file, tmp_path / "bin", url, platform="linux/arm64")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "install_tools: clusterctl v1.13.5: meta/tools.yml pins no linux/arm64 asset (only linux/amd64); pin its "
        "url, sha256 and checksum_source there",
        "install_tools: verified kind, kubectl, helm, sops, age; installed nothing (1 problem above)",
    ]
    assert not (tmp_path / "bin").exists()

    dest = tmp_path / "bin2"
    proc = run_install_env(pins_file, dest, url, None, "kind", "helm", "age", platform="linux/arm64")
    assert proc.returncode == 0, proc.stderr
    assert (dest / "kind").read_bytes() == b"#!/bin/sh\necho kind linux/arm64\n"
    assert (dest / "helm").read_bytes() == b"linux-arm64/helm linux/arm64 binary"
    assert (dest / "age-keygen").read_bytes() == b"age/age-keygen linux/arm64 binary"


def test_the_platform_comes_from_targetarch_else_the_machine(mirror, tmp_path):
    www, url = mirror
    tools, _digests = publish_all(www, "linux/arm64")
    pins_file = tmp_path / "tools.yml"
    pins_file.write_text(yaml.safe_dump({"tools": tools}, sort_keys=False))
    proc = run_install_env(pins_file, tmp_path / "bin", url, {"TARGETARCH": "arm64"}, "kind", platform=None)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "bin" / "kind").read_bytes() == b"#!/bin/sh\necho kind linux/arm64\n"
    proc = run_install_env(pins_file, tmp_path / "bin", url, {"TARGETARCH": "s390x"}, "kind", platform=None)
    assert (proc.returncode, proc.stderr) == (
        1,
        "install_tools: TARGETARCH is s390x: meta/tools.yml pins assets for linux/amd64, linux/arm64\n",
    )
    spec = importlib.util.spec_from_file_location("install_tools", INSTALL)
    install_tools = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(install_tools)
    assert install_tools.build_platform(environ={}, machine="aarch64") == "linux/arm64"
    assert install_tools.build_platform(environ={}, machine="x86_64") == "linux/amd64"
    with pytest.raises(install_tools.ToolError, match="this machine is riscv64: pass --platform"):
        install_tools.build_platform(environ={}, machine="riscv64")
    with pytest.raises(install_tools.ToolError, match="this machine runs Darwin: meta/tools.yml pins Linux assets"):
        install_tools.build_platform(environ={}, machine="arm64", system="Darwin")


def test_the_platforms_build_argument_comes_before_the_plain_one(mirror, tmp_path):
    """A multi-platform build passes one set of build arguments to every platform, so an unconfirmed
    digest is given per platform (KROPS_TOOL_SHA256_<NAME>_<ARCH>), which wins over the plain one."""
    www, url = mirror
    tools, digests = publish_all(www)
    pins_file = tmp_path / "tools.yml"
    pins_file.write_text(yaml.safe_dump({"tools": tools}, sort_keys=False))
    env = {"KROPS_TOOL_SHA256_CLUSTERCTL_AMD64": digests["clusterctl"], "KROPS_TOOL_SHA256_CLUSTERCTL": "1" * 64}
    proc = run_install_env(pins_file, tmp_path / "bin", url, env, "clusterctl")
    assert proc.returncode == 0, proc.stderr
    env = {"KROPS_TOOL_SHA256_CLUSTERCTL_AMD64": "0" * 64, "KROPS_TOOL_SHA256_CLUSTERCTL": digests["clusterctl"]}
    proc = run_install_env(pins_file, tmp_path / "bin2", url, env, "clusterctl")
    assert proc.returncode == 1 and "clusterctl v1.13.5: SHA-256 mismatch" in proc.stderr


def test_pins_naming_the_wrong_platform_or_none_are_refused(tmp_path):
    tools = pins()
    tools["kind"]["assets"]["linux/arm64"]["url"] = tools["kind"]["assets"]["linux/amd64"]["url"]
    bad = tmp_path / "tools.yml"
    bad.write_text(yaml.safe_dump({"tools": tools}, sort_keys=False))
    proc = run_install_env(bad, tmp_path / "bin", "http://127.0.0.1:9")
    assert (proc.returncode, proc.stderr) == (
        1,
        f"install_tools: {bad}: kind linux/arm64: https://github.com/kubernetes-sigs/kind/releases/download/v0.32.0/"
        "kind-linux-amd64 does not name arm64\n",
    )
    old = pins()
    old["kind"] = {"version": "v0.32.0", "url": old["kind"]["assets"]["linux/amd64"]["url"], "sha256": ""}
    bad.write_text(yaml.safe_dump({"tools": old}, sort_keys=False))
    proc = run_install_env(bad, tmp_path / "bin", "http://127.0.0.1:9")
    assert proc.stderr == (
        f"install_tools: {bad}: kind has no `assets:` mapping of platform -> {{url, sha256, checksum_source}}\n"
    )


# --- requirements.txt names every library plugins/ imports ------------------------------------


def _plugin_imports():
    """Top-level module -> the dotted names plugins/ imports from it (an AST walk, so imports inside
    functions and try blocks count too)."""
    found = {}
    for path in sorted((REPO / "plugins").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # `from azure import identity` imports the module azure.identity.
                names = [node.module + "." + alias.name for alias in node.names]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(name)
    return found


def _distribution_of(dotted, candidates):
    """The distribution that installs module `dotted`: the only candidate, or (namespace packages such as
    google and azure, shared by several distributions) the one whose RECORD lists the module's files."""
    if len(candidates) == 1:
        return candidates[0]
    parts = dotted.split(".")
    # The longest prefix that is a module: `from google.auth import default` names a function.
    for end in range(len(parts), 1, -1):
        prefix = "/".join(parts[:end])
        for name in candidates:
            files = [str(f) for f in importlib.metadata.distribution(name).files or ()]
            if any(f == prefix + ".py" or f.startswith(prefix + "/") for f in files):
                return name
    raise AssertionError(f"no installed distribution holds {dotted} (candidates {candidates})")


def _declared():
    names = set()
    for line in (REPO / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            names.add(re.split(r"[<>=!~;\[ ]", line, maxsplit=1)[0])
    return {re.sub(r"[-_.]+", "-", n).lower() for n in names}


def test_requirements_declare_every_library_the_plugins_import():
    """With only requirements.txt installed (what the execution environment gets), every import of
    plugins/ resolves: yamllint (validate), botocore and urllib3 (imported directly) included."""
    packages = importlib.metadata.packages_distributions()
    # ansible-core comes with `ansible` (declared); ansible_collections is the collections' namespace.
    provided = {"ansible", "ansible_collections"}
    needed = {}
    for top, dotted in _plugin_imports().items():
        if top in sys.stdlib_module_names or top in provided:
            continue
        assert top in packages, f"plugins/ imports {top}, which no installed distribution provides"
        for name in sorted(dotted):
            needed.setdefault(re.sub(r"[-_.]+", "-", _distribution_of(name, packages[top])).lower(), set()).add(name)
    missing = {dist: sorted(mods) for dist, mods in needed.items() if dist not in _declared()}
    assert missing == {}, f"requirements.txt does not declare {missing}"
    # The mapping found the libraries the issue named, so the test looks where they are.
    assert {"yamllint", "botocore", "urllib3", "google-auth", "azure-identity"} <= set(needed)


def _floors():
    floors = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)>=([0-9.]+)", line.strip())
        if match:
            floors[match.group(1).lower()] = match.group(2)
    return floors


def _documentation_strings():
    """Every DOCUMENTATION string of plugins/ (modules, and the doc fragments' class attributes)."""
    for path in sorted((REPO / "plugins").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "DOCUMENTATION" for t in node.targets)
                and isinstance(node.value, ast.Constant)
            ):
                yield path.relative_to(REPO), yaml.safe_load(node.value.value)


def test_documented_library_floors_are_the_requirements_floors():
    """A module's `requirements` names each Python library with the floor requirements.txt sets."""
    floors = _floors()
    seen = set()
    for path, doc in _documentation_strings():
        for line in (doc or {}).get("requirements", []):
            if "(Python librar" not in line:
                continue
            pieces = re.split(r",| and ", line.split("(Python")[0])
            for piece in pieces:
                match = re.fullmatch(r"([A-Za-z0-9_.-]+)(?: >= ([0-9.]+))?", piece.strip())
                assert match, (path, line, piece)
                name, version = match.groups()
                assert version, f"{path}: {line!r} names {name} without its floor ({floors.get(name.lower())})"
                assert floors.get(name.lower()) == version, f"{path}: {name} >= {version}, requirements.txt {floors}"
                seen.add(name.lower())
    assert {"kubernetes", "boto3", "botocore", "yamllint", "azure-identity", "google-auth"} <= seen
