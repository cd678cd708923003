# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Air-gapped bundle of the local-host profile: image inventory, pin check and the Zarf package.

Importable without Ansible; ``python -m ...airgap --help`` (or scripts/airgap-inventory) runs it.

The inventory (airgap/images.txt) is derived, never typed: the rendered tree (mgmt/local-host,
workload/local-host), bootstrap.toml and the tables below name every image the profile pulls;
airgap/digests.yaml holds the digests krops could confirm upstream, each with its source. An image
whose digest is not there is written without one and reported as unconfirmed: krops never writes
a digest it has not read. airgap/zarf.yaml is generated from the same inventory.

Tables (each row cites where its fact was read; see docs/airgap.md):

- CHARTS: the images a chart deploys with the values krops gives it;
- PROVIDERS: the controller image of each Cluster API operator provider (tag = spec.version);
- HOST_IMAGES: what the host's Docker daemon runs beside the clusters (CAPD load balancer, registry);
- PROVIDER_RELEASES: the release files of each operator provider (its components and metadata), which
  the bundle carries as OCI artifacts: the configuration Flux syncs offline sets every provider's
  ``spec.fetchConfig.oci`` to its artifact in the local registry (``with_fetch_config``), and
  airgap/provider-components.yaml records the sha256 of every file a connected build downloaded.
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile

try:
    import yaml
except ImportError:  # PyYAML comes with ansible-core
    yaml = None

from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils import errors
from ansible_collections.krops.platform.plugins.module_utils import render

ENVIRONMENT = "local-host"
INVENTORY = "airgap/images.txt"
ZARF_FILE = "airgap/zarf.yaml"
LOCK_FILE = "airgap/digests.yaml"
MANIFESTS = "airgap/manifests"
ARCHITECTURES = ("amd64", "arm64")
ZARF_VERSION = "v0.84.0"
PACKAGE_NAME = "krops-local-host"

# chart -> (zarf component, images). "{v}" is the chart version with a leading v.
# cert-manager: deploy/charts/cert-manager/values.yaml @ v1.21.1 (imageRegistry quay.io, imageNamespace
#   jetstack, image names, tag = appVersion); acmesolver runs only for ACME issuers, which krops has none of.
# cluster-api-operator: Makefile @ v0.28.0 PROD_REGISTRY registry.k8s.io/capi-operator, image cluster-api-operator.
# flux-operator: controlplaneio-fluxcd/charts charts/flux-operator/values.yaml (tag defaults to appVersion).
CHARTS = {
    "cert-manager": (
        "cert-manager",
        [
            "quay.io/jetstack/cert-manager-controller:{v}",
            "quay.io/jetstack/cert-manager-webhook:{v}",
            "quay.io/jetstack/cert-manager-cainjector:{v}",
            "quay.io/jetstack/cert-manager-startupapicheck:{v}",
        ],
    ),
    "cluster-api-operator": ("capi-operator", ["registry.k8s.io/capi-operator/cluster-api-operator:{v}"]),
    "flux-operator": ("flux", ["ghcr.io/controlplaneio-fluxcd/flux-operator:{v}"]),
    "podinfo": ("workload", ["ghcr.io/stefanprodan/podinfo:{bare}"]),
}
# chart -> {image repository: where its chart values take the image}: the air-gapped package names each
# image's digest there, so the pods run repo@digest. Zarf pushes an image listed with a digest under the
# digest only, and its agent rewrites a pod's repo:tag to repo:tag-zarf-<crc32> but keeps repo@digest
# (src/pkg/images/push.go, src/pkg/transform/image.go ImageTransformHost @ zarf v0.84.0), so a chart
# that runs a tag finds nothing once the image is pinned.
# cert-manager v1.21.1: values.yaml image/webhook.image/cainjector.image/startupapicheck.image take
#   repository (full override), tag and digest; _helpers.tpl "cert-manager.image" renders repo:tag@digest.
# cluster-api-operator 0.28.0: templates/deployment.yaml renders image.manager as repository@digest when
#   digest is set, else repository:tag (tag defaults to appVersion).
# flux-operator: templates/deployment.yaml renders "repository:tag" with tag defaulting to appVersion and has
#   no digest value (charts/flux-operator at chart 0.49.0, the newest in any snapshot; values.schema.json: tag is
#   any string), so the digest goes into the tag: tag "v0.58.1@sha256:..." renders repo:tag@digest.
# podinfo 6.14.1: templates/deployment.yaml renders "image.repository:image.tag" (no digest value): the same.
CHART_IMAGE_VALUES = {
    "cert-manager": {
        "quay.io/jetstack/cert-manager-controller": ("image",),
        "quay.io/jetstack/cert-manager-webhook": ("webhook", "image"),
        "quay.io/jetstack/cert-manager-cainjector": ("cainjector", "image"),
        "quay.io/jetstack/cert-manager-startupapicheck": ("startupapicheck", "image"),
    },
    "cluster-api-operator": {"registry.k8s.io/capi-operator/cluster-api-operator": ("image", "manager")},
    "flux-operator": {"ghcr.io/controlplaneio-fluxcd/flux-operator": ("image",)},
    "podinfo": {"ghcr.io/stefanprodan/podinfo": ("image",)},
}
# charts whose template has no digest value: the digest is written into the tag (tag@digest)
DIGEST_IN_TAG = frozenset({"flux-operator", "podinfo"})
VALUES_DIR = "airgap/values"
# Charts Flux reads from an HTTP index in the tree that upstream also publishes as OCI artifacts: the
# air-gapped configuration points the HelmRepository at the OCI repository (type: oci, which the Zarf agent
# rewrites to its registry: src/internal/agent/hooks/flux-helmrepo.go @ v0.84.0 skips other types), and the
# package carries the chart as an OCI artifact (component images, as zarf's examples/podinfo-flux does).
# The artifact is listed by tag, never by digest: zarf would push a digest-listed one under the digest only,
# and Helm pulls <repository>/<chart>:<version>. cert-manager: RELEASE.md @ v1.21.1 ("published to
# quay.io/jetstack/charts/cert-manager on each cert-manager release"). cluster-api-operator publishes no OCI
# chart (v0.28.0): the package packs it (PACKED_CHARTS).
OFFLINE_HELM_REPOSITORIES = {"https://charts.jetstack.io": "oci://quay.io/jetstack/charts"}
# chart -> (zarf component, OCI repository of the chart artifact)
CHART_ARTIFACTS = {
    "cert-manager": ("cert-manager", "quay.io/jetstack/charts/cert-manager"),
    "flux-operator": ("flux", "ghcr.io/controlplaneio-fluxcd/charts/flux-operator"),
}
# HelmChartProxy charts (CAAPH) the offline configuration installs with Flux instead. CAAPH v0.6.4's Helm registry
# client speaks only HTTPS (internal/helm_client.go newDefaultRegistryClient sets no ClientOptPlainHTTP; helm v3.20
# pkg/registry: plain HTTP only on that option), so it cannot pull from the plain-HTTP local registry, and the Zarf
# agent has no hook for HelmChartProxy. Each becomes, per Cluster its clusterSelector matches, a Flux HelmRelease
# with spec.kubeConfig (helm-controller installs into that cluster) reading an OCIRepository at the chart's OCI
# repository, which the Zarf agent rewrites to its registry; the package lists the chart artifact by tag
# (CHART_ARTIFACTS). chart -> OCI repository of the chart artifact.
PROXIED_CHARTS = {"flux-operator": "oci://ghcr.io/controlplaneio-fluxcd/charts/flux-operator"}
# Charts the workload clusters' own Flux installs: they reach nothing but the local registry (no Zarf agent
# there). The package packs each (as PACKED_CHARTS) and carries the layout as a file of the host component; the
# deploy pushes it to the local registry and the offline configuration's OCIRepository reads it there, pinned to
# the release (a range resolves to the newest release digests.yaml chart-releases names) and to the layout's
# manifest digest. chart -> (OCI repository the tree reads, index URL, release archive URL).
# podinfo: the chart index gh-pages index.yaml @ 9f32c08 (entries.podinfo 6.14.1 urls and digest).
WORKLOAD_CHARTS = {
    "podinfo": (
        "oci://ghcr.io/stefanprodan/charts/podinfo",
        "https://stefanprodan.github.io/podinfo",
        "https://stefanprodan.github.io/podinfo/podinfo-{v}.tgz",
    ),
}
# Charts upstream serves only from an HTTP index: the package packs them. chart -> (zarf component, index URL,
# release archive URL). The build downloads the archive (the index's urls), refuses it unless its sha256 is the
# one digests.yaml chart-archives records (the index's digest), and wraps it as a Helm OCI artifact (config
# application/vnd.cncf.helm.config.v1+json: Chart.yaml as JSON; one layer
# application/vnd.cncf.helm.chart.content.v1.tar+gzip; helm pkg/registry/constants.go) in an OCI layout named
# <local registry>/charts/<chart>:<version>, carried by the component's imageArchives. The offline configuration's
# HelmRepository reads oci://<local registry>/charts, which the Zarf agent rewrites to its registry.
# cluster-api-operator: index.yaml (urls, digest) @ commit adb7166, hack/chart-update/main.go @ v0.28.0.
PACKED_CHARTS = {
    "cluster-api-operator": (
        "capi-operator",
        "https://kubernetes-sigs.github.io/cluster-api-operator",
        "https://github.com/kubernetes-sigs/cluster-api-operator/releases/download/v{v}/cluster-api-operator-{v}.tgz",
    ),
}
CHART_BUILD = "build/charts"
CHART_REPOSITORY = "charts"
HELM_CONFIG_TYPE = "application/vnd.cncf.helm.config.v1+json"
HELM_CHART_TYPE = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
PACKED_INDEXES = frozenset(index for _component, index, _archive in PACKED_CHARTS.values())
WORKLOAD_SOURCES = {source: chart for chart, (source, _index, _archive) in WORKLOAD_CHARTS.items()}
# The container of every CAPI provider's controller Deployment (config/manager/manager.yaml of cluster-api
# v1.13.5 core, kubeadm bootstrap and control plane, CAPD; cluster-api-addon-provider-helm v0.6.4); the
# operator sets its image from spec.deployment.containers[name].imageUrl (internal/controller/
# component_customizer.go customizeContainer @ cluster-api-operator v0.28.0: an unknown name is an error).
PROVIDER_CONTAINER = "manager"
# bootstrap.toml [charts] key -> chart name (installed before Flux; same images as the tree's releases).
BOOTSTRAP_CHARTS = {
    "cert-manager": "cert-manager",
    "capi-operator": "cluster-api-operator",
    "flux-operator": "flux-operator",
}
# (provider kind, name) -> (component, image repositories). cluster-api Makefile @ v1.13.5: PROD_REGISTRY
# registry.k8s.io/cluster-api, IMAGE_NAME cluster-api-controller, KUBEADM_*_IMAGE_NAME, CAPD_IMAGE_NAME
# capd-manager; cluster-api-addon-provider-helm Makefile @ v0.6.4: registry.k8s.io/cluster-api-helm,
# IMAGE_NAME cluster-api-helm-controller.
PROVIDERS = {
    ("CoreProvider", "cluster-api"): ("capi", ["registry.k8s.io/cluster-api/cluster-api-controller"]),
    ("BootstrapProvider", "kubeadm"): ("capi", ["registry.k8s.io/cluster-api/kubeadm-bootstrap-controller"]),
    ("ControlPlaneProvider", "kubeadm"): ("capi", ["registry.k8s.io/cluster-api/kubeadm-control-plane-controller"]),
    ("InfrastructureProvider", "docker"): ("capd", ["registry.k8s.io/cluster-api/capd-manager"]),
    ("AddonProvider", "helm"): ("caaph", ["registry.k8s.io/cluster-api-helm/cluster-api-helm-controller"]),
}
# (provider kind, name) -> (operator type, release download base, release components file). The operator's
# GetType() values (api/v1alpha2/*provider_wrapper.go @ cluster-api-operator v0.28.0); the release files
# are clusterctl's provider list (cmd/clusterctl/client/config/providers_client.go @ cluster-api v1.13.5),
# each release also carries metadata.yaml. In the artifact the components file is named
# "<type>-components.yaml" and the metadata "metadata.yaml", two of the names the operator reads
# (internal/controller/oci_source.go @ v0.28.0: it does not read infrastructure-components-development.yaml).
PROVIDER_RELEASES = {
    ("CoreProvider", "cluster-api"): (
        "core",
        "https://github.com/kubernetes-sigs/cluster-api/releases/download/{v}/",
        "core-components.yaml",
    ),
    ("BootstrapProvider", "kubeadm"): (
        "bootstrap",
        "https://github.com/kubernetes-sigs/cluster-api/releases/download/{v}/",
        "bootstrap-components.yaml",
    ),
    ("ControlPlaneProvider", "kubeadm"): (
        "control-plane",
        "https://github.com/kubernetes-sigs/cluster-api/releases/download/{v}/",
        "control-plane-components.yaml",
    ),
    ("InfrastructureProvider", "docker"): (
        "infrastructure",
        "https://github.com/kubernetes-sigs/cluster-api/releases/download/{v}/",
        "infrastructure-components-development.yaml",
    ),
    ("AddonProvider", "helm"): (
        "addon",
        "https://github.com/kubernetes-sigs/cluster-api-addon-provider-helm/releases/download/{v}/",
        "addon-components.yaml",
    ),
}
PROVIDER_LOCK = "airgap/provider-components.yaml"
PROVIDER_REPOSITORY = "capi-providers"
PROVIDER_BUILD = "build/providers"
OPERATOR_API = "operator.cluster.x-k8s.io/v1alpha2"
# What cluster-api-operator's publish command writes (cmd/plugin/cmd/publish.go @ v0.28.0): an OCI 1.1
# manifest packed by oras with these types; the operator picks the layers by their title annotation only.
PROVIDER_ARTIFACT_TYPE = "application/vnd.acme.config"
PROVIDER_FILE_TYPE = "application/vnd.test.file"
EMPTY_CONFIG_TYPE = "application/vnd.oci.empty.v1+json"
# Run by the host's Docker daemon. CAPD load balancer: test/infrastructure/docker/internal/loadbalancer/
# const.go @ v1.13.5 (kindest/haproxy:v20230606-42a2262b). The registry image is the bootstrap role's default.
HOST_IMAGES = ["docker.io/kindest/haproxy:v20230606-42a2262b"]
REGISTRY_DEFAULTS = "roles/bootstrap/defaults/main.yml"
# Machine kinds whose spec.version picks the CAPD node image kindest/node:<version> (CAPD's kind mapper).
VERSIONED = {("KubeadmControlPlane", "spec"), ("MachineDeployment", "template")}
COMPONENT_ORDER = ("host", "cert-manager", "capi-operator", "krops-config", "flux", "capi", "capd", "caaph", "workload")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# the platforms --resolve records a digest for (playbooks/airgap.yml airgap_architectures)
PLATFORMS = ("linux/amd64", "linux/arm64")
RESOLVED_SOURCE = "crane digest (registry), --resolve"
_SEMVER = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)$")


class AirgapError(errors.ConfigError):
    """The inventory cannot be derived or read (bad tree, bad lock file, bad inventory line)."""


# --- image references ------------------------------------------------------------------------


def normalize(ref):
    """(repository, tag, digest) of an image reference, with Docker Hub's implicit parts spelled out."""
    ref = str(ref).strip()
    digest = None
    if "@" in ref:
        ref, digest = ref.split("@", 1)
    name, tag = ref, None
    if ":" in ref.rsplit("/", 1)[-1]:
        name, tag = ref.rsplit(":", 1)
    first = name.split("/", 1)[0]
    if "/" not in name or ("." not in first and ":" not in first and first != "localhost"):
        name = "docker.io/" + (name if "/" in name else "library/" + name)
    return name, tag or "latest", digest


def key(ref):
    repo, tag, _digest = normalize(ref)
    return f"{repo}:{tag}"


class Image:
    __slots__ = ("component", "digest", "origins", "repo", "source", "tag", "workload")

    def __init__(self, ref, component, origin):
        self.repo, self.tag, self.digest = normalize(ref)
        self.component = component
        self.origins = [origin]
        self.source = None
        self.workload = False  # also pulled inside the CAPD workload clusters (no Zarf agent there)

    @property
    def key(self):
        return f"{self.repo}:{self.tag}"

    @property
    def ref(self):
        return self.key + ("@" + self.digest if self.digest else "")


class Inventory:
    """Images by repo:tag plus the problems met while deriving them."""

    def __init__(self):
        self.images = {}
        self.problems = []  # (file, object, message): cannot be pinned from what the tree says
        self.charts = {}  # chart name -> version the tree installs
        self.in_workload = False  # set while deriving from an object applied into the workload clusters
        self.providers = []  # operator providers of the tree: dicts of provider_entry()
        self.lock = {}  # airgap/digests.yaml

    def add(self, ref, component, origin):
        image = Image(ref, component, origin)
        found = self.images.get(image.key)
        if found is None:
            self.images[image.key] = image
        elif origin not in found.origins:
            found.origins.append(origin)
        self.images[image.key].workload |= self.in_workload
        return self.images[image.key]

    @property
    def unconfirmed(self):
        return sorted(k for k, i in self.images.items() if not i.digest)


# --- deriving ----------------------------------------------------------------------------------


def _objects(root, renderer=None):
    """(relative directory, object) of every kustomization under the local-host tops."""
    tops = [os.path.join(root, "mgmt", ENVIRONMENT), os.path.join(root, "workload", ENVIRONMENT)]
    directories = [d for top in tops if os.path.isdir(top) for d in render.find_kustomization_dirs(top)]
    built = render.render_directories(directories, renderer)
    for directory in directories:
        result = built[directory]
        if isinstance(result, render.RenderError):
            raise AirgapError(
                f"kustomize build {os.path.relpath(directory, root)} failed: {result.reason} (run validate for details)"
            )
        for obj in result:
            yield os.path.relpath(directory, root), obj
    extra = os.path.join(root, MANIFESTS)
    if os.path.isdir(extra):
        for name in sorted(os.listdir(extra)):
            if name.endswith((".yaml", ".yml")):
                for obj in render.load_yaml_documents(os.path.join(extra, name)):
                    yield MANIFESTS, obj


def _ident(obj):
    meta = obj.get("metadata") or {}
    return "{}/{}{}".format(
        obj.get("kind"), meta.get("namespace") + "/" if meta.get("namespace") else "", meta.get("name")
    )


def _containers(node):
    """Every container image under a (possibly nested) object."""
    if isinstance(node, dict):
        for field in ("containers", "initContainers", "ephemeralContainers"):
            for container in node.get(field) or []:
                if isinstance(container, dict) and isinstance(container.get("image"), str):
                    yield container["image"]
        for value in node.values():
            yield from _containers(value)
    elif isinstance(node, list):
        for value in node:
            yield from _containers(value)


def _chart(inv, chart, version, origin, where, obj):
    if chart not in CHARTS:
        return
    component, templates = CHARTS[chart]
    if not version or not _SEMVER.match(str(version)):
        known = _newest_release(inv.lock, chart, version)
        if known:  # the images of the newest known release in the range
            for template in templates:
                bare = known.lstrip("v")
                inv.add(template.format(v="v" + bare, bare=bare), component, f"{origin} ({version} -> {known})")
        if known and chart in WORKLOAD_CHARTS:  # the offline configuration pins the range to that release
            inv.charts.setdefault(chart, known)
            return
        inv.problems.append(
            (
                where,
                _ident(obj),
                f"chart {chart} version {version!r} is not an exact version: its images cannot be "
                "pinned; pin the chart to one release",
            )
        )
        return
    bare = str(version).lstrip("v")
    inv.charts.setdefault(chart, str(version))
    for template in templates:
        inv.add(template.format(v="v" + bare, bare=bare), component, origin)


def _newest_release(lock, chart, version):
    """The newest release of ``chart`` in digests.yaml chart-releases matching the range ``version`` (6.x)."""
    versions = ((lock.get("chart-releases") or {}).get(chart) or {}).get("versions") or []
    wanted = str(version or "").lstrip("v")
    if not re.match(r"^[0-9x.]+$", wanted):
        return None
    pattern = re.compile("^" + re.escape(wanted).replace("x", r"\d+") + r"(\.\d+)*$")
    found = sorted(
        (str(v) for v in versions if _SEMVER.match(str(v)) and pattern.match(str(v).lstrip("v"))),
        key=lambda v: tuple(int(p) for p in v.lstrip("v").split(".")),
    )
    return found[-1] if found else None


def _flux(inv, lock, version, components, registry, origin, where, obj):
    dists = lock.get("flux-distributions") or {}
    wanted = str(version or "2.x").lstrip("v")
    pattern = re.compile("^" + re.escape(wanted).replace(r"\.x", r"\.\d+").replace("x", r"\d+") + "$")
    matches = sorted(
        (v for v in dists if pattern.match(v.lstrip("v"))),
        key=lambda v: tuple(int(p) for p in v.lstrip("v").split(".")),
    )
    if not matches:
        inv.problems.append(
            (
                where,
                _ident(obj),
                "Flux version {} matches no distribution in {} (known: {}): add the "
                "Flux Operator's images for it".format(version, LOCK_FILE, ", ".join(sorted(dists)) or "none"),
            )
        )
        return
    dist = dists[matches[-1]]
    for name in components:
        entry = (dist.get("images") or {}).get(name)
        if entry is None:
            inv.problems.append(
                (
                    where,
                    _ident(obj),
                    f"Flux component {name} is not in distribution {matches[-1]} of {LOCK_FILE}",
                )
            )
            continue
        image = inv.add("{}/{}:{}".format(registry.rstrip("/"), name, entry["tag"]), "flux", origin)
        image.digest, image.source = entry["digest"], dist.get("source")


def derive(root, renderer=None, config_file=None):
    """The Inventory of the local-host profile at ``root``."""
    if yaml is None:
        raise AirgapError("the PyYAML Python library is required")
    root = os.path.abspath(root)
    try:
        cfg = krops_config.load(path=config_file or os.path.join(root, krops_config.DEFAULT_FILE), environ={})
    except krops_config.ConfigError as exc:
        raise AirgapError(str(exc))
    lock = load_lock(root)
    boot_cfg = cfg.bootstrap
    inv = Inventory()
    inv.lock = lock
    sources = {}
    objects = list(_objects(root, renderer))
    for _directory, obj in objects:
        if obj.get("kind") == "OCIRepository":
            sources[((obj.get("metadata") or {}).get("namespace"), (obj.get("metadata") or {}).get("name"))] = obj
    workload_dirs = _workload_directories(root, objects)
    for directory, obj in objects:
        inv.in_workload = directory in workload_dirs or obj.get("kind") in ("HelmChartProxy", "ConfigMap")
        kind, spec = obj.get("kind"), obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        origin = f"{directory} {_ident(obj)}"
        meta = obj.get("metadata") or {}
        for image in _containers(obj):
            inv.add(image, "workload" if inv.in_workload else "krops-config", origin)
        if kind == "ConfigMap":  # manifests a ClusterResourceSet applies into the workload clusters
            for value in (obj.get("data") or {}).values():
                try:
                    docs = [d for d in yaml.safe_load_all(str(value)) if isinstance(d, dict)]
                except yaml.YAMLError:
                    continue
                for image in _containers(docs):
                    inv.add(image, "workload", origin)
        elif kind == "HelmRelease":
            chart_spec = (spec.get("chart") or {}).get("spec") or {}
            chart, version = chart_spec.get("chart"), chart_spec.get("version")
            ref = spec.get("chartRef") or {}
            if ref.get("kind") == "OCIRepository":
                source = sources.get((ref.get("namespace") or meta.get("namespace"), ref.get("name"))) or {}
                chart = str((source.get("spec") or {}).get("url", "")).rstrip("/").rsplit("/", 1)[-1]
                sref = (source.get("spec") or {}).get("ref") or {}
                version = sref.get("tag") or sref.get("semver")
            _chart(inv, chart, version, origin, directory, obj)
        elif kind in ("HelmRepository", "OCIRepository", "GitRepository"):
            _offline_source(inv, boot_cfg, directory, obj, spec)
        elif kind == "HelmChartProxy":
            _chart(inv, spec.get("chartName"), spec.get("version"), origin, directory, obj)
            _proxy_problem(inv, boot_cfg, directory, obj, spec)
        elif (kind, meta.get("name")) in PROVIDERS:
            component, repos = PROVIDERS[(kind, meta.get("name"))]
            for repo in repos:
                inv.add("{}:{}".format(repo, spec.get("version")), component, origin)
            if (kind, meta.get("name")) in PROVIDER_RELEASES:
                entry = provider_entry(boot_cfg, kind, meta.get("name"), spec.get("version"))
                entry["component"] = component
                inv.providers.append(entry)
        elif kind == "FluxInstance":
            dist = spec.get("distribution") or {}
            _flux(
                inv,
                lock,
                dist.get("version"),
                spec.get("components") or [],
                dist.get("registry") or "ghcr.io/fluxcd",
                origin,
                directory,
                obj,
            )
        if kind == "KubeadmControlPlane" and spec.get("version"):
            inv.add("docker.io/kindest/node:{}".format(spec["version"]), "host", origin)
        if kind == "MachineDeployment" and ((spec.get("template") or {}).get("spec") or {}).get("version"):
            inv.add("docker.io/kindest/node:{}".format(spec["template"]["spec"]["version"]), "host", origin)
        if kind in ("DockerMachineTemplate", "DevMachineTemplate"):
            tspec = (spec.get("template") or {}).get("spec") or {}
            custom = tspec.get("customImage") or ((tspec.get("backend") or {}).get("docker") or {}).get("customImage")
            if custom:
                inv.add(custom, "host", origin)
    inv.in_workload = False
    boot = cfg.bootstrap
    for pin_key, chart in BOOTSTRAP_CHARTS.items():
        version = cfg.charts.pin(pin_key)
        _chart(
            inv,
            chart,
            version,
            f"bootstrap.toml [charts] {pin_key}",
            "bootstrap.toml",
            {"kind": "charts", "metadata": {"name": pin_key}},
        )
    if boot.kind_node_image:
        inv.add(boot.kind_node_image, "host", "bootstrap.toml [bootstrap] kind-node-image")
    for image in HOST_IMAGES:
        inv.add(image, "host", "CAPD load balancer")
    inv.add(_registry_image(root), "host", f"{REGISTRY_DEFAULTS} bootstrap_registry_image")
    for image in inv.images.values():
        if image.digest is None and image.key in (lock.get("images") or {}):
            entry = lock["images"][image.key]
            image.digest, image.source = entry["digest"], entry.get("source")
    return inv


def _proxy_problem(inv, boot, directory, obj, spec):
    """CAAPH's controller pulls a HelmChartProxy's chart itself and the Zarf agent has no hook for it: a problem
    unless the offline configuration installs the chart with Flux (PROXIED_CHARTS) or it is in the local registry."""
    if spec.get("chartName") in PROXIED_CHARTS or _local(boot, spec.get("repoURL")):
        return
    inv.problems.append(
        (
            directory,
            _ident(obj),
            "HelmChartProxy chart {}/{} is pulled by the CAAPH controller, "
            "which the Zarf agent does not rewrite: point repoURL at the local registry {}".format(
                spec.get("repoURL"), spec.get("chartName"), boot.registry_name
            ),
        )
    )


def _local(boot, url):
    """Whether an oci:// URL names the local registry (served on the host and on the kind network)."""
    url = str(url or "")
    return url.startswith(f"oci://{boot.registry_name}:") or url.startswith(f"oci://{boot.registry_name}/")


def _offline_source(inv, boot, directory, obj, spec):
    """A Flux source the disconnected host cannot reach is a problem of the bundle (pin check only).

    The Zarf agent rewrites OCIRepository and type: oci HelmRepository objects to the internal registry
    (src/internal/agent/hooks/flux-ocirepo.go, flux-helmrepo.go @ v0.84.0: other HelmRepository types are
    skipped), and only in the cluster Zarf is initialised in: workload/ is applied into the CAPD workload
    clusters, which reach nothing but the local registry.
    """
    url = str(spec.get("url", ""))
    served = obj.get("kind") == "OCIRepository" and url.rstrip("/") in WORKLOAD_SOURCES
    if directory.startswith("workload/") and not _local(boot, url) and not served:
        inv.problems.append(
            (
                directory,
                _ident(obj),
                "{} {} is applied in a workload cluster, where no Zarf agent "
                "rewrites it and nothing outside the local registry {} is reachable offline".format(
                    obj.get("kind"), url, boot.registry_name
                ),
            )
        )
    elif (
        obj.get("kind") == "HelmRepository"
        and str(spec.get("type", "default")) != "oci"
        and url.rstrip("/") not in OFFLINE_HELM_REPOSITORIES
        and url.rstrip("/") not in PACKED_INDEXES
    ):
        inv.problems.append(
            (
                directory,
                _ident(obj),
                f"HelmRepository {url} is an HTTP index: the Zarf agent rewrites only "
                "type: oci HelmRepositories, so Flux cannot fetch it offline; use the chart's OCI "
                "repository",
            )
        )
    elif obj.get("kind") == "GitRepository":
        inv.problems.append((directory, _ident(obj), f"GitRepository {url}: the bundle carries no Git server"))


def _workload_directories(root, objects):
    """Directories applied into the workload clusters: workload/<env> and every Flux Kustomization path
    with a kubeConfig (also the ones a ResourceSet renders)."""
    found = {f"workload/{ENVIRONMENT}"}
    for _directory, obj in objects:
        candidates = [obj] if obj.get("kind") == "Kustomization" else []
        if obj.get("kind") == "ResourceSet":
            candidates = [r for r in (obj.get("spec") or {}).get("resources") or [] if isinstance(r, dict)]
        for ks in candidates:
            spec = ks.get("spec") or {}
            if ks.get("kind") == "Kustomization" and spec.get("kubeConfig") and spec.get("path"):
                found.add(os.path.normpath(str(spec["path"]).lstrip("/")))
    return found


def _registry_image(root):
    path = os.path.join(root, REGISTRY_DEFAULTS)
    try:
        with open(path, encoding="utf-8") as handle:
            return (yaml.safe_load(handle) or {}).get("bootstrap_registry_image") or "registry:3"
    except (OSError, yaml.YAMLError):
        return "registry:3"


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


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


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
        path = os.path.join(root, "airgap", PROVIDER_BUILD, "{}-{}.tar".format(entry["type"], entry["name"]))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)
        written.append(path)
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


# --- images.txt --------------------------------------------------------------------------------

HEADER = """\
# Images of the krops local-host profile, for the air-gapped bundle (airgap/zarf.yaml).
# Generated by scripts/airgap-inventory --write from mgmt/local-host, workload/local-host, bootstrap.toml
# and airgap/digests.yaml: do not edit. One image a line: repo:tag@sha256:digest  # component: origin
# A line without a digest is UNCONFIRMED: nobody has read its digest upstream yet (airgap-inventory --resolve).
"""


def format_inventory(inv):
    lines = [HEADER.rstrip("\n")]
    for component in COMPONENT_ORDER:
        for k in sorted(k for k, i in inv.images.items() if i.component == component):
            image = inv.images[k]
            note = "UNCONFIRMED " if not image.digest else ""
            lines.append("{}  # {}{}: {}".format(image.ref, note, component, "; ".join(image.origins)))
    return "\n".join(lines) + "\n"


def read_inventory(path):
    """{repo:tag: (digest or None, line number)}; raises AirgapError on a malformed line."""
    entries = {}
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise AirgapError(f"cannot read {path}: {exc.strerror} (generate it with scripts/airgap-inventory --write)")
    for number, line in enumerate(text.splitlines(), 1):
        ref = line.split("#", 1)[0].strip()
        if not ref:
            continue
        if " " in ref:
            raise AirgapError("%s:%d: %r is not one image reference (repo:tag@sha256:digest)" % (path, number, ref))
        repo, tag, digest = normalize(ref)
        if digest is not None and not _DIGEST.match(digest):
            raise AirgapError("%s:%d: digest %s of %s:%s is not sha256:<64 hex>" % (path, number, digest, repo, tag))
        entries[f"{repo}:{tag}"] = (digest, number)
    return entries


# --- chart values the package and the offline tree share ------------------------------------


def values_file(chart):
    return f"{VALUES_DIR}/{chart}-images.yaml"


def merge_values(base, extra):
    """``base`` with ``extra`` merged in (nested mappings merged, everything else replaced)."""
    out = dict(base or {})
    for name, value in extra.items():
        out[name] = (
            merge_values(out.get(name), value) if isinstance(value, dict) and isinstance(out.get(name), dict) else value
        )
    return out
