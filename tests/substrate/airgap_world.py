# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The air-gapped host's cluster side, with the network cut: Zarf's registry, its agent and a kubelet.

Nothing here reads krops' inventory (plugins/module_utils/airgap.py, airgap/images.txt): what a pod runs
comes from the Deployments in the cluster (the charts' own workloads, ``CHART_WORKLOADS`` below, written
from upstream's charts), and whether it runs comes from what the registry holds.

- ``ZarfRegistry``: the registry ``zarf init`` starts (NodePort 127.0.0.1:31999). It holds exactly what
  a deploy pushed: each image under both names zarf v0.84.0 pushes (src/pkg/images/push.go: the
  ``ImageTransformHost`` name with the crc32 tag, and the ``...WithoutChecksum`` name), with the digest the
  package recorded when it was built. Nothing else is reachable: another host is "no such host".
- ``transform_host``: zarf's ``transform.ImageTransformHost`` / ``ImageTransformHostWithoutChecksum``
  (src/pkg/transform/image.go @ v0.84.0; docker reference normalisation of distribution/reference:
  ``nginx`` is ``docker.io/library/nginx:latest``). The agent's pod hook (src/internal/agent/hooks/pods.go)
  rewrites every container and init container image with it.
- ``Kubelet``: kube-controller-manager and the kubelet of one cluster. A Deployment gets one Pod from its
  template (the agent's mutation applied on creation unless the namespace is ``AGENT_IGNORED``); each
  container image is pulled from the registry: a reference by digest must name a digest the registry
  holds for that repository, a tag must be a tag it holds. A pull that fails leaves the Pod Pending with
  the container Waiting ``ErrImagePull`` and containerd's message, and the Deployment not Available.
- ``zarf_deploy``: what ``zarf package deploy`` does in the cluster for the chosen components of a
  stand-in package (tests/substrate/zarf_standin.py): push the component's images, install its charts
  (the charts' Deployments from ``CHART_WORKLOADS``), then wait for its healthChecks; a health check that
  does not pass fails the deploy with the object and the Pod's reason.

The containerd messages are the form containerd 2.x logs through the kubelet (``failed to pull and unpack
image``, ``failed to resolve reference``); their exact text at a tag is not confirmed here.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import re
import threading
import time
import zlib

import yaml

from tests.substrate.flux_world import CHART_CRDS, condition, ssa_apply
from tests.substrate.kube_emulator import ApiError

ZARF_REGISTRY = "127.0.0.1:31999"  # zarf init's NodePort registry (src/config/lang/english.go examples @ v0.84.0)
AGENT_IGNORED = ("kube-system", "zarf")  # kind's own pods come from the node image; zarf's namespace is ignored

# chart -> [(Deployment name ({release}: the release name), where the values take the image, default image)]: the
# charts' own workloads, their image rendered from the release's values as the chart's template does
# (``render_image``), ``{v}`` the chart version without "v".
# cert-manager chart v1.21.1 (deploy/charts/cert-manager/values.yaml: image/webhook.image/cainjector.image, default
#   quay.io/jetstack/cert-manager-<name>, tag = appVersion = chart version; templates name the Deployments
#   {release}, {release}-webhook, {release}-cainjector; _helpers.tpl "cert-manager.image").
# cluster-api-operator chart 0.28.0 ({release}-cluster-api-operator; templates/deployment.yaml image.manager;
#   the default is the values.yaml in git, the staging image: the released chart's values are not readable here).
# flux-operator chart (Deployment flux-operator, repository:tag, ghcr.io/controlplaneio-fluxcd/flux-operator:v{v};
#   charts/flux-operator at 0.49.0, the newest readable).
CHART_WORKLOADS = {
    "cert-manager": [
        ("{release}", ("image",), "quay.io/jetstack/cert-manager-controller:v{v}"),
        ("{release}-webhook", ("webhook", "image"), "quay.io/jetstack/cert-manager-webhook:v{v}"),
        ("{release}-cainjector", ("cainjector", "image"), "quay.io/jetstack/cert-manager-cainjector:v{v}"),
    ],
    "cluster-api-operator": [
        (
            "{release}-cluster-api-operator",
            ("image", "manager"),
            "gcr.io/k8s-staging-capi-operator/cluster-api-operator:dev",
        )
    ],
    "flux-operator": [("flux-operator", ("image",), "ghcr.io/controlplaneio-fluxcd/flux-operator:v{v}")],
    # podinfo 6.14.1 (charts/podinfo/templates/deployment.yaml: "image.repository:image.tag", the Deployment named
    # after the release when it contains "podinfo"; values.yaml tag = the chart version)
    "podinfo": [("{release}", ("image",), "ghcr.io/stefanprodan/podinfo:{v}")],
}
# chart -> [(Service name, port, target port name)]: podinfo's templates/service.yaml (service.externalPort 9898)
CHART_SERVICES = {"podinfo": [("{release}", 9898, "http")]}
# the Helm chart's config media type (helm pkg/registry/constants.go ConfigMediaType): the agent's OCIRepository
# hook drops the crc32 tag for a chart (hooks/flux-ocirepo.go isChart @ zarf v0.84.0)
HELM_CONFIG_TYPE = "application/vnd.cncf.helm.config.v1+json"


def render_image(chart, values, default):
    """The image a chart's template renders from ``values`` (the mapping at the chart's image path)."""
    repository, tag = default.rsplit(":", 1)
    digest = values.get("digest")
    if chart == "cert-manager":  # "cert-manager.image": repository, then :tag@digest, :tag, @digest or :appVersion
        repository = values.get("repository") or repository
        if values.get("tag") and digest:
            return "{}:{}@{}".format(repository, values["tag"], digest)
        if digest and not values.get("tag"):
            return f"{repository}@{digest}"
        return "{}:{}".format(repository, values.get("tag") or tag)
    if chart == "cluster-api-operator":  # image.manager: [registry/]repository, then @digest or :tag
        repository = values.get("repository", repository)
        if values.get("registry"):
            repository = "{}/{}".format(values["registry"], repository)
        return f"{repository}@{digest}" if digest else "{}:{}".format(repository, values.get("tag", tag))
    return "{}:{}".format(values.get("repository", repository), values.get("tag", tag))  # flux-operator, podinfo


_REFERENCE = re.compile(
    r"^(?P<name>[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)


class RefError(ValueError):
    pass


def parse_ref(ref):
    """{name, host, path, tag, digest} of an image reference, normalised as distribution/reference does."""
    ref = ref[len("oci://") :] if ref.startswith("oci://") else ref
    match = _REFERENCE.match(ref)
    if not match:
        raise RefError(f"unable to parse ref {ref}")
    name, tag, digest = match.group("name"), match.group("tag"), match.group("digest")
    first, rest = name.split("/", 1) if "/" in name else ("", name)
    if "." in first or ":" in first or first == "localhost":
        host, path = first, rest
    else:  # Docker Hub: a bare name is an official image
        host, path = "docker.io", name if "/" in name else "library/" + name
    if not tag and not digest:
        tag = "latest"
    return {"name": f"{host}/{path}", "host": host, "path": path, "tag": tag, "digest": digest}


def crc_tag(name, tag):
    return "%s-zarf-%d" % (tag, zlib.crc32(name.encode()) & 0xFFFFFFFF)


def transform_host(target, ref, checksum=True):
    """zarf's ImageTransformHost (checksum) or ImageTransformHostWithoutChecksum."""
    image = parse_ref(ref)
    if target.startswith(image["host"]):
        return ref
    if image["digest"]:
        return "{}/{}@{}".format(target, image["path"], image["digest"])
    if not checksum:
        return "{}/{}:{}".format(target, image["path"], image["tag"])
    return "{}/{}:{}".format(target, image["path"], crc_tag(image["name"], image["tag"]))


class ZarfRegistry:
    """What the Zarf registry holds: repository path -> {tag: digest} and the digests of each repository."""

    def __init__(self, host=ZARF_REGISTRY):
        self.host = host
        self.tags = {}
        self.digests = {}
        self._lock = threading.Lock()

    def push(self, ref, digest):
        """Push one packaged image as zarf does: under the crc32 name and the plain name."""
        with self._lock:
            for name in (transform_host(self.host, ref), transform_host(self.host, ref, checksum=False)):
                image = parse_ref(name)
                self.digests.setdefault(image["path"], set()).add(digest)
                if image["tag"] and not image["digest"]:
                    self.tags.setdefault(image["path"], {})[image["tag"]] = digest

    def pull(self, ref):
        """The digest a pull of ``ref`` gets, or raise RefError with containerd's reason."""
        image = parse_ref(ref)
        if image["host"] != self.host:
            raise RefError(
                'failed to do request: Head "https://{}/v2/{}/manifests/{}": dial tcp: lookup {}: no such host'.format(
                    image["host"], image["path"], image["digest"] or image["tag"], image["host"].split(":")[0]
                )
            )
        with self._lock:
            if image["digest"]:
                if image["digest"] in self.digests.get(image["path"], ()):
                    return image["digest"]
            elif image["tag"] in self.tags.get(image["path"], {}):
                return self.tags[image["path"]][image["tag"]]
        raise RefError(f"{ref}: not found")


def agent_mutate(pod, registry_host):
    """The Zarf agent's pod hook (hooks/pods.go @ v0.84.0): every (init) container image to the Zarf registry, the
    original kept in an annotation, the pull secret private-registry, the label zarf-agent: patched."""
    pod = copy.deepcopy(pod)
    spec = pod["spec"]
    annotations = pod["metadata"].setdefault("annotations", {})
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or []:
            # hooks/pods.go getAnnotationKey: the name part cut to 63 characters, no trailing hyphen
            annotations["zarf.dev/" + ("original-image-" + container["name"])[:63].rstrip("-")] = container["image"]
            container["image"] = transform_host(registry_host, container["image"])
    pod["metadata"].setdefault("labels", {})["zarf-agent"] = "patched"
    spec["imagePullSecrets"] = [{"name": "private-registry"}]
    return pod


def agent_mutate_helm_repository(obj, registry_host):
    """The Zarf agent's HelmRepository hook (hooks/flux-helmrepo.go @ v0.84.0): only ``type: oci`` is rewritten, to
    ``oci://`` + the name of ImageTransformHost(url) (the crc32 tag dropped), insecure for the internal registry, the
    pull secret private-registry; a URL already on the registry is left alone."""
    obj = copy.deepcopy(obj)
    spec = obj["spec"]
    if str(spec.get("type", "")).lower() != "oci" or parse_ref(spec["url"])["host"] == registry_host:
        return obj
    spec["url"] = "oci://" + parse_ref(transform_host(registry_host, spec["url"]))["name"]
    spec["insecure"] = True
    spec["secretRef"] = {"name": "private-registry"}
    obj["metadata"].setdefault("labels", {})["zarf-agent"] = "patched"
    return obj


def agent_mutate_oci_repository(obj, registry_host, chart):
    """The Zarf agent's OCIRepository hook (hooks/flux-ocirepo.go @ v0.84.0) on create: the URL plus its tag (or
    digest) through ImageTransformHost, WithoutChecksum when the artifact is a Helm chart (``chart``: its config
    media type is Helm's); the URL becomes oci://<name>, the ref its tag or digest, insecure for the internal
    registry, the pull secret private-registry. A semver ref keeps its range; a URL on the registry is left alone."""
    obj = copy.deepcopy(obj)
    spec = obj["spec"]
    if parse_ref(spec["url"])["host"] == registry_host:
        return obj
    ref = spec.get("ref") or {}
    url = spec["url"][len("oci://") :]
    url += "@" + ref["digest"] if ref.get("digest") else ":" + ref["tag"] if ref.get("tag") else ""
    patched = parse_ref(transform_host(registry_host, url, checksum=not chart))
    spec["url"] = "oci://" + patched["name"]
    if ref.get("digest"):
        ref["digest"] = patched["digest"]
    elif ref.get("tag"):
        ref["tag"] = patched["tag"]
    spec["insecure"] = True
    spec["secretRef"] = {"name": "private-registry"}
    obj["metadata"].setdefault("labels", {})["zarf-agent"] = "patched"
    return obj


def pull_chart(registry, helm_repository, chart, version):
    """The digest helm-controller gets pulling ``chart`` ``version`` from an OCI HelmRepository (Helm pulls
    <url>/<chart>:<version>), or RefError; an HTTP index is an unreachable host offline."""
    spec = helm_repository["spec"]
    if str(spec.get("type", "")).lower() != "oci":
        host = spec["url"].split("://", 1)[-1].split("/", 1)[0]
        raise RefError(f"failed to fetch Helm repository index: {spec['url']}: dial tcp: lookup {host}: no such host")
    return registry.pull("{}/{}:{}".format(spec["url"][len("oci://") :], chart, version))


class Kubelet:
    """Deployment -> Pod -> image pull from the registry, for one emulated cluster (see the module docstring)."""

    def __init__(self, world, api, registry, agent=True):
        self.api = api
        self.registry = registry
        self.agent = agent
        world.controllers.append(self)

    def reconcile(self, api):
        if api is not self.api:
            return
        for deployment in api.list("apps/v1", "Deployment"):
            self._run(api, deployment)

    def _run(self, api, deployment):
        ns, name = deployment["metadata"]["namespace"], deployment["metadata"]["name"]
        template = deployment["spec"]["template"]
        suffix = hashlib.sha256(repr(template).encode()).hexdigest()[:10]
        pod_name = f"{name}-{suffix}"
        pods = api.resource_for("v1", "Pod")
        try:
            pod = api.get("v1", "Pod", pod_name, ns)
        except ApiError:
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": dict(copy.deepcopy(template.get("metadata") or {}), name=pod_name, namespace=ns),
                "spec": copy.deepcopy(template["spec"]),
            }
            if self.agent and ns not in AGENT_IGNORED:
                pod = agent_mutate(pod, self.registry.host)
            pod = api.create(pod)
        statuses, waiting = [], None
        for container in (pod["spec"].get("initContainers") or []) + pod["spec"]["containers"]:
            image = container["image"]
            try:
                digest = self.registry.pull(image)
                statuses.append(
                    {
                        "name": container["name"],
                        "image": image,
                        "imageID": digest,
                        "ready": True,
                        "restartCount": 0,
                        "state": {"running": {}},
                    }
                )
            except RefError as exc:
                waiting = waiting or {
                    "reason": "ErrImagePull",
                    "message": f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": {exc}',
                }
                statuses.append(
                    {
                        "name": container["name"],
                        "image": image,
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {"waiting": waiting},
                    }
                )
        status = {"phase": "Pending" if waiting else "Running", "containerStatuses": statuses}
        if (pod.get("status") or {}) != status:
            api.patch(pods, ns, pod_name, "merge", {"status": status}, "status", "kubelet")
        replicas = deployment["spec"].get("replicas", 1)
        ready = 0 if waiting else replicas
        available = {"type": "Available", "status": "False" if waiting else "True"}
        available.update(
            {"reason": "MinimumReplicasUnavailable", "message": "Deployment does not have minimum availability."}
            if waiting
            else {"reason": "MinimumReplicasAvailable", "message": "Deployment has minimum availability."}
        )
        wanted = {
            "observedGeneration": deployment["metadata"].get("generation", 1),
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "unavailableReplicas": replicas - ready,
            "conditions": [available],
        }
        if (deployment.get("status") or {}) != wanted:
            api.patch(
                api.resource_for("apps/v1", "Deployment"),
                ns,
                name,
                "merge",
                {"status": wanted},
                "status",
                "kube-controller-manager",
            )


class DeployFailed(Exception):
    pass


def _chart_deployments(chart, values):
    release = chart.get("releaseName") or chart["name"]
    for name, where, default in CHART_WORKLOADS.get(chart["name"], ()):
        version = str(chart["version"]).lstrip("v")
        node = values
        for part in where:
            node = (node or {}).get(part) or {}
        image = render_image(chart["name"], node, default.format(v=version))
        labels = {"app.kubernetes.io/name": name.format(release=release), "app.kubernetes.io/instance": release}
        yield {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": name.format(release=release),
                "namespace": chart["namespace"],
                "labels": dict(labels, **{"app.kubernetes.io/managed-by": "Helm"}),
                "annotations": {
                    "meta.helm.sh/release-name": release,
                    "meta.helm.sh/release-namespace": chart["namespace"],
                },
            },
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": name.format(release=release), "image": image}]},
                },
            },
        }


def _pending_reason(api, check):
    """Why a health check does not pass yet (None: it passes)."""
    try:
        obj = api.get(check["apiVersion"], check["kind"], check["name"], check.get("namespace"))
    except ApiError:
        return "{} {}/{} not found".format(check["kind"], check.get("namespace"), check["name"])
    if check["kind"] != "Deployment":
        ready = condition(obj) or {}
        return (
            None
            if ready.get("status") == "True"
            else "{} {}/{}: {}".format(
                check["kind"], check.get("namespace"), check["name"], ready.get("message") or "not Ready"
            )
        )
    if (condition(obj, "Available") or {}).get("status") == "True":
        return None
    for pod in api.list("v1", "Pod", check.get("namespace")):
        if not re.fullmatch(
            re.escape(check["name"]) + "-[0-9a-f]{10}", pod["metadata"]["name"]
        ):  # the Kubelet's pod names
            continue
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (status.get("state") or {}).get("waiting")
            if waiting:
                return "Deployment {}/{}: pod {}: {}: {}".format(
                    check["namespace"], check["name"], pod["metadata"]["name"], waiting["reason"], waiting["message"]
                )
    return "Deployment {}/{} is not Available".format(check.get("namespace"), check["name"])


def _manifests(package, component):
    """The objects of a component's manifests, with zarf's ###ZARF_CONST_<NAME>### constants filled in."""
    texts = (package.get("content", {}).get(component["name"]) or {}).get("manifests") or {}
    for manifest in component.get("manifests") or []:
        for rel in manifest.get("files") or []:
            text = re.sub(r"###ZARF_CONST_([A-Z0-9_]+)###", lambda m: package["constants"][m.group(1)], texts[rel])
            for doc in yaml.safe_load_all(text):
                if doc:
                    doc.setdefault("metadata", {}).setdefault("namespace", manifest.get("namespace"))
                    yield doc


def install_chart(api, chart, values, manager="helm"):
    """What installing ``chart`` does in the emulated cluster: its CRDs (flux_world.CHART_CRDS), its Deployments
    (CHART_WORKLOADS, the image rendered from ``values``) and Services (CHART_SERVICES). ``chart``: name, version,
    namespace, releaseName."""
    if not api.exists("v1", "Namespace", chart["namespace"]):
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": chart["namespace"]}})
    api.install_bundle(*CHART_CRDS.get(chart["name"], ()))
    for deployment in _chart_deployments(chart, values):
        api.patch(
            api.resource_for("apps/v1", "Deployment"),
            deployment["metadata"]["namespace"],
            deployment["metadata"]["name"],
            "apply",
            deployment,
            None,
            manager,
        )
    release = chart.get("releaseName") or chart["name"]
    for name, port, target in CHART_SERVICES.get(chart["name"], ()):
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name.format(release=release), "namespace": chart["namespace"]},
            "spec": {
                "type": "ClusterIP",
                "selector": {"app.kubernetes.io/name": name.format(release=release)},
                "ports": [{"name": target, "port": port, "targetPort": target, "protocol": "TCP"}],
            },
        }
        api.patch(
            api.resource_for("v1", "Service"),
            chart["namespace"],
            service["metadata"]["name"],
            "apply",
            service,
            None,
            manager,
        )


def zarf_deploy(api, package, components, registry, timeout=10.0, apply=None):
    """The cluster side of ``zarf package deploy`` for ``components`` of a stand-in package (see the docstring).

    ``apply(api, obj)``: how a manifest is applied (the agent's hooks, in tests/substrate/airgap_host.py);
    ``registry.push_layout(ref, data)``, when the registry has it, also stores an artifact's content."""
    chosen = [c for c in package["definition"] if c["name"] in components]
    for component in chosen:
        layouts = (package.get("content", {}).get(component["name"]) or {}).get("layouts") or {}
        refs = list(component.get("images") or []) + [
            ref for archive in component.get("imageArchives") or [] for ref in archive["images"]
        ]
        for ref in refs:
            registry.push(ref, package["digests"][ref])
            if ref in layouts and hasattr(registry, "push_layout"):
                registry.push_layout(ref, base64.b64decode(layouts[ref]))
        for chart in component.get("charts") or []:
            values = package.get("values", {}).get("{}/{}".format(component["name"], chart["name"]), {})
            install_chart(api, chart, values)
        for doc in _manifests(package, component):
            if not api.exists("v1", "Namespace", doc["metadata"]["namespace"]):
                api.create(
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": doc["metadata"]["namespace"]}}
                )
            (apply or (lambda target, obj: ssa_apply(target, obj, "zarf")))(api, doc)
        deadline = time.monotonic() + timeout
        while True:
            reasons = [r for r in (_pending_reason(api, c) for c in component.get("healthChecks") or []) if r]
            if not reasons:
                break
            if time.monotonic() > deadline:
                raise DeployFailed(
                    "component {}: health checks did not pass: {}".format(component["name"], "; ".join(reasons))
                )
            time.sleep(0.05)
