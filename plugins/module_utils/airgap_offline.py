# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The configuration the disconnected host runs: the GitOps paths as the air-gapped bundle stages them.

``stage_offline_tree`` copies the paths and rewrites what a disconnected host cannot reach (see its docstring);
``config_archive`` packs the staged copy as the OCI layout the Zarf package carries (component krops-config) and
the deploy also pushes to the local registry, where the workload clusters' Flux reads it. The tables it follows
(PROVIDER_RELEASES, CHART_IMAGE_VALUES, OFFLINE_HELM_REPOSITORIES, PACKED_CHARTS, PROXIED_CHARTS, WORKLOAD_CHARTS)
are in airgap.py, with the upstream source of each row.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile

from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils.airgap import (
    _newest_release,
    merge_values,
    read_inventory,
    values_file,
)
from ansible_collections.krops.platform.plugins.module_utils.airgap_artifacts import (
    _layout_tar,
    _read_yaml,
    load_lock,
    packed_chart_repository,
    provider_entry,
    with_fetch_config,
)
from ansible_collections.krops.platform.plugins.module_utils.airgap_tables import (
    CHART_BUILD,
    CHART_IMAGE_VALUES,
    HELM_CHART_TYPE,
    INVENTORY,
    OFFLINE_HELM_REPOSITORIES,
    OPERATOR_API,
    PACKED_INDEXES,
    PROVIDER_CONTAINER,
    PROVIDER_RELEASES,
    PROVIDERS,
    PROXIED_CHARTS,
    WORKLOAD_SOURCES,
    AirgapError,
    normalize,
)
from ansible_collections.krops.platform.plugins.module_utils.render import yaml  # None without PyYAML

CLUSTER_API = "cluster.x-k8s.io"
STAGED_HEADER = (
    "# air-gapped bundle: provider fetchConfig and images, chart sources and image values set by krops "
    "(plugins/module_utils/airgap_offline.py)\n"
)


def _provider_key(obj):
    if not isinstance(obj, dict) or obj.get("apiVersion") != OPERATOR_API:
        return None
    k = (obj.get("kind"), (obj.get("metadata") or {}).get("name"))
    return k if k in PROVIDER_RELEASES else None


def _offline_repository(obj, boot=None):
    """The OCI repository that replaces a HelmRepository's HTTP index offline (OFFLINE_HELM_REPOSITORIES,
    PACKED_CHARTS), else None. ``boot``: bootstrap.toml [bootstrap] (None: True for a packed chart's index)."""
    if not isinstance(obj, dict) or obj.get("kind") != "HelmRepository":
        return None
    spec = obj.get("spec") or {}
    if str(spec.get("type", "default")) == "oci":
        return None
    url = str(spec.get("url", "")).rstrip("/")
    if url in PACKED_INDEXES:
        return "oci://" + packed_chart_repository(boot) if boot else True
    return OFFLINE_HELM_REPOSITORIES.get(url)


def _workload_source(obj):
    """The chart of an OCIRepository the workload clusters read at upstream's OCI repository (WORKLOAD_CHARTS)."""
    if not isinstance(obj, dict) or obj.get("kind") != "OCIRepository":
        return None
    return WORKLOAD_SOURCES.get(str((obj.get("spec") or {}).get("url", "")).rstrip("/"))


def _proxied(obj):
    """Whether a HelmChartProxy's chart is installed by Flux offline (PROXIED_CHARTS)."""
    return (
        isinstance(obj, dict)
        and obj.get("kind") == "HelmChartProxy"
        and (obj.get("spec") or {}).get("chartName") in PROXIED_CHARTS
    )


def with_image(obj, ref):
    """A copy of the provider object whose controller container runs ``ref`` (spec.deployment.containers)."""
    obj = json.loads(json.dumps(obj))
    deployment = obj.setdefault("spec", {}).setdefault("deployment", {})
    containers = deployment.setdefault("containers", [])
    for container in containers:
        if container.get("name") == PROVIDER_CONTAINER:
            container["imageUrl"] = ref
            break
    else:
        containers.append({"name": PROVIDER_CONTAINER, "imageUrl": ref})
    return obj


class _Staging:
    """What the air-gapped configuration pins, read from the generated files of root (airgap/), and what the
    staged paths hold (Clusters, OCIRepositories) for the objects that refer to them."""

    def __init__(self, root):
        self.root = root
        self._listed = None
        self._values = {}
        self._lock = None
        self._boot = None
        self.clusters = []  # (namespace, name, labels) of every Cluster of the staged paths
        self.sources = {}  # (namespace, name) -> OCIRepository of the staged paths

    @property
    def boot(self):
        if self._boot is None:
            try:
                cfg = krops_config.load(path=os.path.join(self.root, krops_config.DEFAULT_FILE), environ={})
            except krops_config.ConfigError as exc:
                raise AirgapError(f"the offline configuration needs the local registry's name: {exc}")
            self._boot = cfg.bootstrap
        return self._boot

    def note(self, doc):
        if not isinstance(doc, dict):
            return
        meta = doc.get("metadata") or {}
        where = (meta.get("namespace") or "default", meta.get("name"))
        if doc.get("kind") == "Cluster" and str(doc.get("apiVersion", "")).startswith(CLUSTER_API + "/"):
            self.clusters.append(where + (meta.get("labels") or {},))
        elif doc.get("kind") == "OCIRepository":
            self.sources[where] = doc

    def provider_image(self, kind, name, version):
        """repo:tag@digest of the provider's controller image, or None while its digest is unconfirmed."""
        if self._listed is None:
            self._listed = read_inventory(os.path.join(self.root, INVENTORY))
        [repo] = PROVIDERS[(kind, name)][1]
        k = f"{repo}:{version}"
        digest = (self._listed.get(k) or (None, 0))[0]
        return f"{k}@{digest}" if digest else None

    def pinned(self, ref):
        """``ref`` as repo:tag@digest when images.txt has its digest, else as it is."""
        if self._listed is None:
            self._listed = read_inventory(os.path.join(self.root, INVENTORY))
        repo, tag, digest = normalize(ref)
        found = (self._listed.get(f"{repo}:{tag}") or (None, 0))[0]
        return ref if digest or not found else f"{ref}@{found}"

    def chart_values(self, chart):
        if chart not in self._values:
            rel = values_file(chart)
            if not os.path.isfile(os.path.join(self.root, rel)):
                raise AirgapError(f"{rel} is missing: generate it with scripts/airgap-inventory --write")
            self._values[chart] = _read_yaml(self.root, rel)
        return self._values[chart]

    def release(self, chart, version):
        """The exact release of ``chart`` a version or range names (digests.yaml chart-releases for a range)."""
        if self._lock is None:
            self._lock = load_lock(self.root)
        known = _newest_release(self._lock, chart, version)
        if known is None and str(version or "").lstrip("v").replace(".", "").isdigit():
            return str(version)
        if known is None:
            raise AirgapError(
                f"chart {chart} version {version!r}: no release of that range in digests.yaml chart-releases; "
                "add the release the bundle carries"
            )
        return known

    def layout_digest(self, chart):
        """The manifest digest of the packed chart's layout (airgap/build/charts/<chart>.tar), None before the
        build packed it (check mode)."""
        path = os.path.join(self.root, "airgap", CHART_BUILD, f"{chart}.tar")
        if not os.path.isfile(path):
            return None
        try:
            with tarfile.open(path) as tar:
                [entry] = json.load(tar.extractfile("index.json"))["manifests"]
        except (OSError, tarfile.TarError, KeyError, ValueError) as exc:
            raise AirgapError(f"{os.path.relpath(path, self.root)} is not the OCI layout of one chart: {exc}")
        return entry["digest"]


def _release_chart(obj, staging=None):
    """The chart name of a HelmRelease whose images the package pins by value (CHART_IMAGE_VALUES), else None:
    its chart.spec.chart, or the chart of the WORKLOAD_CHARTS OCIRepository its chartRef names."""
    if not isinstance(obj, dict) or obj.get("kind") != "HelmRelease":
        return None
    spec = obj.get("spec") or {}
    chart = ((spec.get("chart") or {}).get("spec") or {}).get("chart")
    ref = spec.get("chartRef") or {}
    if not chart and staging is not None and ref.get("kind") == "OCIRepository":
        namespace = ref.get("namespace") or (obj.get("metadata") or {}).get("namespace") or "default"
        chart = _workload_source(staging.sources.get((namespace, ref.get("name"))))
    return chart if chart in CHART_IMAGE_VALUES else None


def _yaml_files(target):
    for folder, _dirs, names in os.walk(target):
        for fname in sorted(names):
            path = os.path.join(folder, fname)
            if fname.endswith((".yaml", ".yml")) and not os.path.islink(path):
                try:
                    with open(path, encoding="utf-8") as handle:
                        docs = list(yaml.safe_load_all(handle))
                except (yaml.YAMLError, UnicodeDecodeError):
                    continue  # not ours to judge here: validate reports it
                yield path, docs


def _containers(node):
    if isinstance(node, dict):
        for field in ("containers", "initContainers"):
            for container in node.get(field) or []:
                if isinstance(container, dict) and isinstance(container.get("image"), str):
                    yield container
        for value in node.values():
            yield from _containers(value)
    elif isinstance(node, list):
        for value in node:
            yield from _containers(value)


def _unpinned_containers(doc, staging):
    """The containers of ``doc`` whose image images.txt knows a digest for but the document names by tag (the
    manifests a ClusterResourceSet's ConfigMap carries: kindnet)."""
    return [c for c in _containers(doc) if staging.pinned(c["image"]) != c["image"]]


def _touched(doc, staging):
    return bool(
        _unpinned_containers(doc, staging)
        or _provider_key(doc)
        or _release_chart(doc, staging)
        or _offline_repository(doc)
        or _workload_source(doc)
        or _proxied(doc)
    )


def stage_offline_tree(root, paths, dest):
    """Copy ``paths`` of ``root`` to ``dest`` as the disconnected host runs them. Returns the files rewritten.

    - every known operator provider gets fetchConfig.oci and, when the image's digest is known, its controller
      image by digest;
    - every HelmRelease of a chart in CHART_IMAGE_VALUES gets the chart's image values
      (airgap/values/<chart>-images.yaml);
    - every HelmRepository of OFFLINE_HELM_REPOSITORIES reads the chart's OCI repository, and one of a
      PACKED_CHARTS index the local registry's charts;
    - a HelmChartProxy of PROXIED_CHARTS becomes an OCIRepository of the chart and one HelmRelease per Cluster
      of the paths its clusterSelector matches, installing into that cluster (spec.kubeConfig);
    - an OCIRepository of WORKLOAD_CHARTS reads the local registry, pinned to the release and, once the build
      packed it, to the layout's digest;
    - a container that names its image by tag (the manifests a ClusterResourceSet's ConfigMap carries: kindnet)
      runs it by digest when images.txt has one.

    The local registry's name comes from root's bootstrap.toml.
    """
    staging = _Staging(root)
    copied = []
    for rel in paths:
        src = os.path.join(root, rel)
        target = os.path.join(dest, rel)
        if os.path.isdir(src):
            shutil.copytree(src, target, symlinks=True)
        elif os.path.lexists(src):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(src, target, follow_symlinks=False)
        else:
            continue
        copied.append(target)
    files = [item for target in copied for item in _yaml_files(target)]
    for _path, docs in files:
        for doc in docs:
            staging.note(doc)
    rewritten = []
    for path, docs in files:
        if not any(_touched(d, staging) for d in docs):
            continue
        out = [d for doc in docs for d in _offline_docs(doc, staging)]
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(STAGED_HEADER)
            yaml.safe_dump_all(out, handle, sort_keys=False)
        rewritten.append(os.path.relpath(path, dest))
    return sorted(rewritten)


def _offline_docs(doc, staging):
    """The documents one document becomes on the disconnected host (see stage_offline_tree); [] for an empty one."""
    if doc is None:
        return []
    if _proxied(doc):
        return _proxy_releases(doc, staging)
    pkey = _provider_key(doc)
    if pkey:
        entry = provider_entry(staging.boot, pkey[0], pkey[1], (doc.get("spec") or {}).get("version"))
        doc = with_fetch_config(doc, entry)
        image = staging.provider_image(pkey[0], pkey[1], entry["version"])
        if image:
            doc = with_image(doc, image)
    if _offline_repository(doc):
        doc = json.loads(json.dumps(doc))
        doc["spec"].update(type="oci", url=_offline_repository(doc, staging.boot))
    chart = _workload_source(doc)
    if chart:
        doc = json.loads(json.dumps(doc))
        spec = doc["spec"]
        ref = spec.get("ref") or {}
        release = staging.release(chart, ref.get("tag") or ref.get("semver"))
        digest = staging.layout_digest(chart)
        spec["url"] = f"oci://{packed_chart_repository(staging.boot)}/{chart}"
        spec["ref"] = dict({"tag": release}, **({"digest": digest} if digest else {}))
        spec["insecure"] = True  # the local registry speaks plain HTTP
    chart = _release_chart(doc, staging)
    if chart:
        doc = json.loads(json.dumps(doc))
        doc["spec"]["values"] = merge_values(doc["spec"].get("values"), staging.chart_values(chart))
    if _unpinned_containers(doc, staging):
        doc = json.loads(json.dumps(doc))
        for container in _unpinned_containers(doc, staging):
            container["image"] = staging.pinned(container["image"])
    return [doc]


def _proxy_releases(proxy, staging):
    """A HelmChartProxy of PROXIED_CHARTS as Flux installs it offline: the chart's OCIRepository (the Zarf agent
    rewrites it to its registry) and one HelmRelease per matching Cluster, with the chart's image values."""
    meta, spec = proxy.get("metadata") or {}, proxy.get("spec") or {}
    namespace, chart = meta.get("namespace") or "default", spec["chartName"]
    if spec.get("valuesTemplate"):
        raise AirgapError(
            f"HelmChartProxy {namespace}/{meta.get('name')}: valuesTemplate is a CAAPH template the offline "
            "HelmRelease cannot carry; give the values in airgap/values instead"
        )
    source = {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "OCIRepository",
        "metadata": {"name": f"{meta['name']}-chart", "namespace": namespace},
        "spec": {
            "interval": "1h",
            "url": PROXIED_CHARTS[chart],
            "ref": {"tag": str(spec.get("version"))},
            "layerSelector": {"mediaType": HELM_CHART_TYPE, "operation": "copy"},
        },
    }
    wanted = (spec.get("clusterSelector") or {}).get("matchLabels") or {}
    options = spec.get("options") or {}
    releases = []
    for cluster_ns, cluster, labels in sorted(staging.clusters):
        if cluster_ns != namespace or any(labels.get(k) != v for k, v in wanted.items()):
            continue
        release = {
            "interval": "10m",
            "releaseName": spec.get("releaseName") or chart,
            "targetNamespace": spec.get("namespace") or "default",
            "storageNamespace": spec.get("namespace") or "default",
            "chartRef": {"kind": "OCIRepository", "name": source["metadata"]["name"]},
            "kubeConfig": {"secretRef": {"name": f"{cluster}-kubeconfig", "key": "value"}},
            "install": {"createNamespace": bool((options.get("install") or {}).get("createNamespace"))},
            "values": staging.chart_values(chart) if chart in CHART_IMAGE_VALUES else {},
        }
        if options.get("timeout"):
            release["timeout"] = options["timeout"]
        releases.append(
            {
                "apiVersion": "helm.toolkit.fluxcd.io/v2",
                "kind": "HelmRelease",
                "metadata": {"name": f"{meta['name']}-{cluster}", "namespace": namespace},
                "spec": release,
            }
        )
    return [source] + releases


def config_archive(root, paths, reference, source=None, revision=None):
    """(tar bytes, manifest digest): an OCI image layout holding the Flux artifact of ``paths``.

    Zarf finds an archive's images by the index annotation org.opencontainers.image.ref.name
    (src/pkg/images/unpack.go @ v0.84.0). Every entry is fixed (mtime 0, uid 0, sorted), so the
    same content and revision give the same bytes.
    """
    # oci needs ansible-core (its HTTP client); imported here so validate stays importable without it
    from ansible_collections.krops.platform.plugins.module_utils import oci

    import tempfile

    # the configuration Flux syncs offline (stage_offline_tree)
    with tempfile.TemporaryDirectory(prefix="krops-airgap-") as staged:
        oci.build_layer(root, paths)  # refuses what the push refuses: paths outside root, symlinks out of it
        stage_offline_tree(root, paths, staged)
        layer, _names, _skipped = oci.build_layer(staged, paths)
    manifest, digest = oci.build_manifest(layer, source, revision)
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": oci.MANIFEST_TYPE,
                "digest": digest,
                "size": len(manifest),
                "annotations": {"org.opencontainers.image.ref.name": reference},
            }
        ],
    }
    files = [
        ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
        ("index.json", json.dumps(index, sort_keys=True, separators=(",", ":")).encode("utf-8")),
    ]
    for blob in sorted((oci.CONFIG_BLOB, layer, manifest), key=oci.sha256_digest):
        files.append(("blobs/sha256/" + oci.sha256_digest(blob).split(":", 1)[1], blob))
    return _layout_tar(files), digest
