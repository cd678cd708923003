# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The locks of the air-gapped bundle (airgap/digests.yaml, airgap/provider-components.yaml) and the OCI
artifacts it carries for the cluster-api-operator providers (spec.fetchConfig.oci).

airgap/provider-components.yaml records the sha256 of every release file a connected build downloaded; the
configuration Flux syncs offline sets every provider's ``spec.fetchConfig.oci`` to its artifact in the local
registry (``with_fetch_config``).
"""

from __future__ import annotations

import io
import json
import os
import tarfile

from ansible_collections.krops.platform.plugins.module_utils.airgap_tables import (
    _DIGEST,
    _SEMVER,
    _SHA256,
    CHART_REPOSITORY,
    COMPONENT_ORDER,
    EMPTY_CONFIG_TYPE,
    LOCK_FILE,
    PLATFORMS,
    PROVIDER_ARTIFACT_TYPE,
    PROVIDER_BUILD,
    PROVIDER_FILE_TYPE,
    PROVIDER_LOCK,
    PROVIDER_RELEASES,
    PROVIDER_REPOSITORY,
    AirgapError,
)
from ansible_collections.krops.platform.plugins.module_utils.render import yaml  # None without PyYAML

# --- the locks --------------------------------------------------------------------------------------


def _read_yaml(root, rel):
    """The YAML document of root/rel ({} when the file is absent or empty); AirgapError when it is not YAML."""
    path = os.path.join(root, rel)
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.safe_load(handle) or {}
    except yaml.YAMLError as exc:
        raise AirgapError("{} is not YAML: {}".format(rel, " ".join(str(exc).split())))


def load_lock(root):
    lock = _read_yaml(root, LOCK_FILE)
    for ref, entry in (lock.get("images") or {}).items():
        if not isinstance(entry, dict) or not _DIGEST.match(str(entry.get("digest", ""))) or not entry.get("source"):
            raise AirgapError(
                f"{LOCK_FILE}: images.{ref} needs digest (sha256:<64 hex>) and source (where it was read)"
            )
        platforms = entry.get("platforms", {})
        if not isinstance(platforms, dict) or any(
            p not in PLATFORMS or not _DIGEST.match(str(d)) for p, d in platforms.items()
        ):
            raise AirgapError(
                f"{LOCK_FILE}: images.{ref}.platforms maps {' and '.join(PLATFORMS)} to a digest (sha256:<64 hex>)"
            )
    for url, entry in (lock.get("chart-archives") or {}).items():
        if not isinstance(entry, dict) or not _SHA256.match(str(entry.get("sha256", ""))) or not entry.get("source"):
            raise AirgapError(f"{LOCK_FILE}: chart-archives.{url} needs sha256 (64 hex) and source (where it was read)")
    for version, dist in (lock.get("flux-distributions") or {}).items():
        for name, entry in ((dist or {}).get("images") or {}).items():
            if not isinstance(entry, dict) or not entry.get("tag") or not _DIGEST.match(str(entry.get("digest", ""))):
                raise AirgapError(
                    f"{LOCK_FILE}: flux-distributions.{version}.images.{name} needs tag and digest (sha256:<64 hex>)"
                )
    return lock


# --- provider components (cluster-api-operator spec.fetchConfig.oci) ---------------------------------


def provider_artifact(boot, ptype, name, version):
    """<registry name>:<container port>/capi-providers/<type>-<name>:<version>: the provider's artifact in
    the local registry, as the kind cluster's pods reach it."""
    return f"{boot.registry_name}:{boot.registry_container_port}/{PROVIDER_REPOSITORY}/{ptype}-{name}:{version}"


def provider_entry(boot, kind, name, version):
    """What the bundle carries for one operator provider: its artifact, fetchConfig.oci and release files."""
    ptype, base, release_file = PROVIDER_RELEASES[(kind, name)]
    if not version or not _SEMVER.match(str(version)):
        raise AirgapError(
            f"{kind} {name}: spec.version {version!r} is not an exact version; the bundle carries the release "
            "files of one version"
        )
    base = base.format(v=version)
    artifact = provider_artifact(boot, ptype, name, version)
    return {
        "kind": kind,
        "name": name,
        "type": ptype,
        "version": str(version),
        "artifact": artifact,
        # the local registry serves plain HTTP; the operator takes "http://" for that (parseOCISource)
        "oci": "http://" + artifact,
        "files": [
            {"name": "metadata.yaml", "url": base + "metadata.yaml", "sha256": None},
            {"name": f"{ptype}-components.yaml", "url": base + release_file, "sha256": None},
        ],
    }


def load_provider_lock(root):
    """{url: sha256} of airgap/provider-components.yaml (only the files whose checksum was recorded)."""
    doc = _read_yaml(root, PROVIDER_LOCK)
    recorded = {}
    for provider in doc.get("providers") or []:
        for entry in (provider or {}).get("files") or []:
            sha = (entry or {}).get("sha256")
            if sha is None:
                continue
            if not _SHA256.match(str(sha)) or not entry.get("url"):
                raise AirgapError(f"{PROVIDER_LOCK}: {entry!r} needs url and sha256 (64 hex) or sha256: null")
            recorded[entry["url"]] = str(sha)
    return recorded


PROVIDER_HEADER = """\
# Release files of the cluster-api-operator providers of the local-host profile, carried by the air-gapped
# bundle as OCI artifacts (spec.fetchConfig.oci). Generated by scripts/airgap-inventory --write from the
# tree; sha256 is recorded only by a connected build (--fetch-providers --record), never typed.
# sha256: null is UNCONFIRMED: the build refuses it unless told to record it.
"""


def format_provider_lock(inv, recorded):
    providers = []
    for entry in sorted(inv.providers, key=lambda e: (COMPONENT_ORDER.index(e["component"]), e["type"], e["name"])):
        files = [dict(f, sha256=recorded.get(f["url"])) for f in entry["files"]]
        providers.append(
            {k: entry[k] for k in ("kind", "name", "type", "version", "artifact", "oci", "component")}
            | {"files": files}
        )
    return PROVIDER_HEADER + yaml.safe_dump({"providers": providers}, sort_keys=False, width=120)


def unconfirmed_provider_files(inv, recorded):
    return sorted({f["url"] for entry in inv.providers for f in entry["files"] if f["url"] not in recorded})


def with_fetch_config(obj, entry):
    """A copy of the provider object taking its components from the bundle: spec.fetchConfig = {oci}.

    fetchConfig takes exactly one of oci, url and selector (CEL rule on FetchConfiguration,
    api/v1alpha2/provider_types.go @ cluster-api-operator v0.28.0), so the whole field is replaced.
    """
    obj = json.loads(json.dumps(obj))
    spec = obj.setdefault("spec", {})
    spec["fetchConfig"] = {"oci": entry["oci"]}
    return obj


def packed_chart_repository(boot):
    """<registry name>:<container port>/charts: where the packed charts are, as the kind network reaches them."""
    return f"{boot.registry_name}:{boot.registry_container_port}/{CHART_REPOSITORY}"


def _layout_tar(files):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for folder in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def _sha256(data):
    import hashlib

    return "sha256:" + hashlib.sha256(data).hexdigest()


def provider_archive(reference, contents):
    """(tar bytes, manifest digest): an OCI layout of one provider artifact.

    ``contents``: {file name: bytes}. Each file is a layer titled by org.opencontainers.image.title, the
    annotation cluster-api-operator selects the files by (mapStore, internal/controller/oci_source.go
    @ v0.28.0); the manifest is what its publish command packs (oras PackManifestVersion1_1).
    """
    empty = b"{}"
    layers = []
    blobs = {_sha256(empty): empty}
    for name in sorted(contents):
        data = contents[name]
        blobs[_sha256(data)] = data
        layers.append(
            {
                "mediaType": PROVIDER_FILE_TYPE,
                "digest": _sha256(data),
                "size": len(data),
                "annotations": {"org.opencontainers.image.title": name},
            }
        )
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": PROVIDER_ARTIFACT_TYPE,
        "config": {"mediaType": EMPTY_CONFIG_TYPE, "digest": _sha256(empty), "size": len(empty)},
        "layers": layers,
        "annotations": {"org.opencontainers.image.created": "1970-01-01T00:00:00Z"},
    }
    return oci_layout(manifest, blobs, reference)


def oci_layout(manifest, blobs, reference):
    """(tar bytes, manifest digest): an OCI layout of ``manifest`` and ``blobs`` {digest: bytes}, named ``reference``."""
    body = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode("utf-8")
    digest = _sha256(body)
    entry = {
        "mediaType": manifest["mediaType"],
        "digest": digest,
        "size": len(body),
        "annotations": {"org.opencontainers.image.ref.name": reference},
    }
    entry.update({k: manifest[k] for k in ("artifactType",) if k in manifest})
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [entry]}
    files = [
        ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
        ("index.json", json.dumps(index, sort_keys=True, separators=(",", ":")).encode("utf-8")),
    ]
    blobs = dict(blobs, **{digest: body})
    for d in sorted(blobs):
        files.append(("blobs/sha256/" + d.split(":", 1)[1], blobs[d]))
    return _layout_tar(files), digest


def _download(url):
    from ansible.module_utils.urls import open_url  # connected build only

    with open_url(url, timeout=120) as response:  # https release URLs of PROVIDER_RELEASES
        return response.read()


def write_build(root, folder, name, data):
    """Write ``data`` (an OCI layout the connected build made) to root/airgap/<folder>/<name>; returns the path."""
    path = os.path.join(root, "airgap", folder, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def fetch_providers(root, inv, download=None, record=False):
    """Download every provider's release files, check them against airgap/provider-components.yaml and
    write one OCI layout per provider under airgap/build/providers/ (connected build only).

    A checksum that differs is always refused; a file without a recorded checksum is refused unless
    ``record`` (then its sha256 is written to the lock, for review). Returns (written paths, recorded).
    """
    download = download or _download
    recorded = load_provider_lock(root)
    problems, written = [], []
    for entry in inv.providers:
        contents = {}
        for f in entry["files"]:
            try:
                data = download(f["url"])
            except Exception as exc:  # pylint: disable=broad-except  # any transport error: one message
                problems.append(f"{f['url']}: download failed: {exc}")
                continue
            got = _sha256(data).split(":", 1)[1]
            want = recorded.get(f["url"])
            if want is None and not record:
                problems.append(
                    f"{f['url']}: no sha256 recorded in {PROVIDER_LOCK} (UNCONFIRMED); got {got}: review it and "
                    "rerun with --record"
                )
                continue
            if want is not None and want != got:
                problems.append(f"{f['url']}: sha256 {got} differs from {want} recorded in {PROVIDER_LOCK}")
                continue
            recorded[f["url"]] = got
            contents[f["name"]] = data
        if len(contents) != len(entry["files"]):
            continue
        data, _digest = provider_archive(entry["artifact"], contents)
        written.append(write_build(root, PROVIDER_BUILD, "{}-{}.tar".format(entry["type"], entry["name"]), data))
    if problems:
        raise AirgapError("provider components not bundled:\n  " + "\n  ".join(problems))
    if record:
        with open(os.path.join(root, PROVIDER_LOCK), "w", encoding="utf-8") as handle:
            handle.write(format_provider_lock(inv, recorded))
    return written, recorded


def push_layouts(paths, registry, insecure=True, client=None):
    """Push OCI layouts to the local registry at ``registry`` (host:port as the host reaches it): each path is a
    layout (.tar) or a folder of them (the host component's providers/ and charts/, and krops-config.tar).
    Returns [repository:tag].

    A layout names its artifact as the kind network reaches it (ref.name <registry name>:<port>/<repository>:<tag>);
    the repository and tag are pushed unchanged, blobs before the manifest.
    """
    if client is None:
        from ansible_collections.krops.platform.plugins.module_utils import oci

        client = oci.Registry(registry, insecure=insecure)
    layouts = []
    for path in paths:
        if os.path.isdir(path):
            layouts += [os.path.join(path, n) for n in sorted(os.listdir(path)) if n.endswith(".tar")]
        elif os.path.isfile(path):
            layouts.append(path)
        else:
            raise AirgapError(f"{path} holds no OCI layouts: deploy the host component first")
    pushed = []
    for path in layouts:
        name = os.path.basename(path)
        try:
            with tarfile.open(path) as tar:
                files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
            index = json.loads(files["index.json"])
        except (OSError, tarfile.TarError, KeyError, ValueError) as exc:
            raise AirgapError(f"{name} is not an OCI layout: {exc}")
        for desc in index.get("manifests") or []:
            ref = (desc.get("annotations") or {}).get("org.opencontainers.image.ref.name", "")
            if "/" not in ref or ":" not in ref.rsplit("/", 1)[-1]:
                raise AirgapError(f"{name}: manifest {desc.get('digest')} has no reference <registry>/<repo>:<tag>")
            repository, tag = ref.split("/", 1)[1].rsplit(":", 1)
            body = files["blobs/sha256/" + desc["digest"].split(":", 1)[1]]
            manifest = json.loads(body)
            for blob in [manifest["config"]] + list(manifest.get("layers") or []):
                client.push_blob(repository, files["blobs/sha256/" + blob["digest"].split(":", 1)[1]])
            client.put_manifest(repository, tag, body)
            pushed.append(f"{repository}:{tag}")
    return pushed
