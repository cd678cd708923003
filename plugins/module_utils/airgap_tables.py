# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The tables of the air-gapped local-host bundle and the inventory's types (docs/airgap.md).

Each row cites where its fact was read:

- CHARTS: the images a chart deploys with the values krops gives it;
- PROVIDERS: the controller image of each Cluster API operator provider (tag = spec.version);
- HOST_IMAGES: what the host's Docker daemon runs beside the clusters (CAPD load balancer, registry);
- PROVIDER_RELEASES: the release files of each operator provider (its components and metadata), which
  the bundle carries as OCI artifacts (airgap_artifacts).

airgap.py derives the Inventory from the tree with them; airgap_sources.py checks the tree's Flux sources,
airgap_artifacts.py reads the locks and builds the provider artifacts.
"""

from __future__ import annotations

import re

from ansible_collections.krops.platform.plugins.module_utils import config_types
from ansible_collections.krops.platform.plugins.module_utils import errors

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
BOOTSTRAP_CHARTS = config_types.CHART_NAMES
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
# Machine kind -> where under its spec the version is that picks the CAPD node image kindest/node:<version>
# (CAPD's kind mapper).
NODE_VERSIONS = {"KubeadmControlPlane": ("version",), "MachineDeployment": ("template", "spec", "version")}
# Kinds whose objects are applied into the workload clusters wherever they are in the tree: a HelmChartProxy's
# chart is installed there, a ConfigMap carries the manifests a ClusterResourceSet applies there.
WORKLOAD_KINDS = ("HelmChartProxy", "ConfigMap")
COMPONENT_ORDER = ("host", "cert-manager", "capi-operator", "krops-config", "flux", "capi", "capd", "caaph", "workload")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# the platforms --resolve records a digest for (playbooks/airgap.yml airgap_architectures)
PLATFORMS = ("linux/amd64", "linux/arm64")
RESOLVED_SOURCE = "crane digest (registry), --resolve"
_SEMVER = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


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


def _ident(obj):
    meta = obj.get("metadata") or {}
    return "{}/{}{}".format(
        obj.get("kind"), meta.get("namespace") + "/" if meta.get("namespace") else "", meta.get("name")
    )
