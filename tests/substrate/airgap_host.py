# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The disconnected host: tests/substrate/lifecycle.py's emulated host with the network cut, for a real run of
``playbooks/airgap.yml --tags deploy``.

    host = AirgapHost(tmp_path / "host").start()
    rc, out, err = host.playbook("playbooks/airgap.yml", "--tags", "deploy", ..., inventory=...)

What differs from the connected host (everything else is EmulatedWorld's: the Docker Engine double, kind,
CAPD, the registry container running the real docker-registry, strict API servers over HTTPS):

- **Nothing outside the host answers.** Flux is offline (flux_world.FluxController ``offline=True``): a source
  whose host is not the local registry (``krops-registry:5000``) or the Zarf registry (``127.0.0.1:31999``)
  fails ``no such host``. The operator reads provider components only from the local registry
  (``LocalProviders``: what ``--push-layouts`` pushed), never github.com. CAAPH's chart pull is refused: it speaks
  HTTPS only, and nothing is reachable over HTTPS here (``AirgapCapi.helm_chart_proxy``).
- **Images.** The engine holds only what ``docker load`` loaded (an archive of the containerd image store: its
  index names each image with its registry digest); kind refuses a node image it does not hold (it would pull).
  The kind cluster's kubelet pulls only from the Zarf registry (airgap_world.Kubelet over ``ZarfHostRegistry``);
  a CAPD cluster's kubelet runs only what ``ctr images import`` put into its nodes (``NodeImages``).
- **zarf** is tests/substrate/zarf_standin.py in world mode (``ZARF_STANDIN_WORLD``): ``init`` turns on the Zarf
  agent of the kind cluster (pods, OCIRepository and HelmRepository rewritten: airgap_world's hooks, ported from
  zarf v0.84.0), ``package deploy`` pushes the component's images and artifacts to the Zarf registry (an artifact's
  content into a real docker-registry behind it, so Flux pulls it), installs its charts (airgap_world.install_chart)
  and manifests, and waits for its health checks.
- **helm-controller** (``AirgapFlux.helmrelease``): a release's chart must be pullable (an OCI HelmRepository's
  chart from the Zarf registry; an OCIRepository's artifact is pulled by source-controller), and installing it
  runs the chart's Deployments and Services (airgap_world.CHART_WORKLOADS) in the cluster of ``spec.kubeConfig``
  when set; the pods then pull as above.
- **The service proxy** of a CAPD cluster's API server (``/api/v1/namespaces/<ns>/services/<name>:<port>/proxy/...``):
  503 ``no endpoints available for service "<name>:<port>"`` unless a Running pod matches the Service's selector;
  podinfo's ``/healthz`` answers ``{"status": "OK"}`` (stefanprodan/podinfo pkg/api/http/health.go).

Not confirmed at a source: kind's and Docker's exact messages for a missing image; that ``docker save``/``load``
keep the registry digest (true of Docker's containerd image store, not of the classic store), and that
``ctr images import`` of that archive lets containerd find the image by that digest.
"""

from __future__ import annotations

import base64
import copy
import functools
import glob
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import threading
from pathlib import Path

import yaml
from ansible_collections.krops.platform.plugins.module_utils import oci, render

from tests.substrate import zarf_standin
from tests.substrate.airgap_world import (
    AGENT_IGNORED,
    HELM_CONFIG_TYPE,
    DeployFailed,
    Kubelet,
    RefError,
    ZarfRegistry,
    agent_mutate_helm_repository,
    agent_mutate_oci_repository,
    install_chart,
    parse_ref,
    pull_chart,
    transform_host,
    zarf_deploy,
)
from tests.substrate.capi_world import CapiController, ProviderRegistry
from tests.substrate.docker_double import IMAGES
from tests.substrate.fixtures import ManagedProcess, free_port, python_executable, wait_until_answers
from tests.substrate.flux_world import MANAGER, Failure, FluxController, is_ready, set_status, ssa_apply
from tests.substrate.kube_emulator import ApiError
from tests.substrate.lifecycle import KIND_ROLE_LABEL, ControlServer, EmulatedWorld, WorldError

STANDINS = Path(__file__).resolve().parent / "standins"
ZARF = Path(__file__).resolve().parent / "zarf_standin.py"


# --- the archives docker save writes (containerd image store) ---------------------------------------------


def familiar(name):
    """Docker's familiar form of a normalised name: docker.io/library/x -> x, docker.io/a/b -> a/b."""
    return name.removeprefix("docker.io/library/").removeprefix("docker.io/")


def save_archive(images):
    """The archive ``docker save`` writes for ``images`` [(reference, registry digest, image config)]: an OCI
    layout whose index names each image (io.containerd.image.name, org.opencontainers.image.ref.name), plus
    docker's manifest.json (RepoTags)."""
    index, legacy, blobs = [], [], {}
    for ref, digest, config in images:
        image = parse_ref(ref)
        body = json.dumps(config, sort_keys=True).encode()
        config_name = "blobs/sha256/" + hashlib.sha256(body).hexdigest()
        blobs[config_name] = body
        tag = image["tag"] or "latest"
        index.append(
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": digest,
                "size": 0,
                "annotations": {
                    "io.containerd.image.name": f"{image['name']}:{tag}",
                    "org.opencontainers.image.ref.name": tag,
                },
            }
        )
        legacy.append({"Config": config_name, "RepoTags": [familiar(f"{image['name']}:{tag}")], "Layers": []})
    files = {
        "index.json": json.dumps({"schemaVersion": 2, "manifests": index}).encode(),
        "manifest.json": json.dumps(legacy).encode(),
        "oci-layout": b'{"imageLayoutVersion":"1.0.0"}',
        **blobs,
    }
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size = len(files[name])
            tar.addfile(info, io.BytesIO(files[name]))
    return raw.getvalue()


def read_archive(data):
    """[(name:tag, digest, config)] of an archive save_archive wrote; ValueError when it is not one."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
        index = json.loads(files["index.json"])["manifests"]
        legacy = json.loads(files["manifest.json"])
    except (tarfile.TarError, KeyError, ValueError) as exc:
        raise ValueError(f"unexpected EOF or not an image archive: {exc}")
    return [
        (entry["annotations"]["io.containerd.image.name"], entry["digest"], json.loads(files[item["Config"]]))
        for entry, item in zip(index, legacy)
    ]


def image_config(ref):
    """What the engine reads from an image: registry:3's is docker_double's (it runs the registry program)."""
    known = IMAGES.get(familiar(parse_ref(ref)["name"]) + ":" + (parse_ref(ref)["tag"] or "latest"))
    if known:
        return {k: v for k, v in known.items() if k not in ("Id", "RepoTags")}
    return {"Config": {"Entrypoint": None, "Cmd": None, "Labels": None}}


# --- what pulls find --------------------------------------------------------------------------------------


class ZarfHostRegistry(ZarfRegistry):
    """The Zarf registry with content: artifacts (the configuration, charts) are pushed into a real
    docker-registry too, under both names zarf pushes, so Flux's source-controller pulls them."""

    def __init__(self, root):
        super().__init__()
        self.port = free_port()
        self.backing = f"127.0.0.1:{self.port}"
        config = Path(root) / "zarf-registry.yml"
        storage = Path(root) / "zarf-registry"
        storage.mkdir(parents=True, exist_ok=True)
        config.write_text(
            yaml.safe_dump(
                {
                    "version": 0.1,
                    "log": {"level": "warn"},
                    "storage": {"filesystem": {"rootdirectory": str(storage)}},
                    "http": {"addr": self.backing},
                }
            )
        )
        binary = shutil.which("docker-registry") or "/usr/bin/docker-registry"
        self.process = ManagedProcess([binary, "serve", str(config)], Path(root) / "zarf-registry.log")
        wait_until_answers(f"http://{self.backing}/v2/", timeout=20)
        self.charts = set()  # names (host/path) whose manifest config is Helm's

    def push_layout(self, ref, data):
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
        [entry] = json.loads(files["index.json"])["manifests"]
        body = files["blobs/sha256/" + entry["digest"].split(":", 1)[1]]
        manifest = json.loads(body)
        client = oci.Registry(self.backing, insecure=True)
        for name in (transform_host(self.host, ref), transform_host(self.host, ref, checksum=False)):
            image = parse_ref(name)
            for blob in [manifest["config"]] + list(manifest.get("layers") or []):
                client.push_blob(image["path"], files["blobs/sha256/" + blob["digest"].split(":", 1)[1]])
            client.put_manifest(image["path"], image["digest"] or image["tag"], body)
            if manifest["config"].get("mediaType") == HELM_CONFIG_TYPE:
                self.charts.add(image["name"])

    def stop(self):
        self.process.stop()


class NodeImages:
    """What the nodes of one CAPD cluster hold (ctr images import); a pull of anything else goes to its registry,
    which is not reachable."""

    def __init__(self):
        self.host = None  # no Zarf agent in a workload cluster
        self.held = {}  # name -> {tag: digest}
        self._lock = threading.Lock()

    def add(self, name_tag, digest):
        name, tag = name_tag.rsplit(":", 1)
        with self._lock:
            self.held.setdefault(name, {})[tag] = digest

    def pull(self, ref):
        image = parse_ref(ref)
        with self._lock:
            tags = self.held.get(image["name"], {})
            if image["digest"] and image["digest"] in tags.values():
                return image["digest"]
            if not image["digest"] and image["tag"] in tags:
                return tags[image["tag"]]
        raise RefError(
            'failed to do request: Head "https://{}/v2/{}/manifests/{}": dial tcp: lookup {}: no such host'.format(
                image["host"], image["path"], image["digest"] or image["tag"], image["host"].split(":")[0]
            )
        )


class LocalProviders(ProviderRegistry):
    """The operator's view offline: a provider artifact is what the local registry holds (pushed by the deploy)."""

    def __init__(self, host):
        super().__init__()
        self.host = host

    def fetch(self, repository, tag):
        self.fetches.append((repository, tag))
        registry_host, path = repository.split("/", 1)
        if registry_host != "krops-registry:5000":
            return None
        client = oci.Registry(self.host.registry, insecure=True)
        try:
            manifest = client.get_manifest(path, tag)
        except oci.OciError:
            return None
        if manifest is None:
            return None
        return {
            (layer.get("annotations") or {}).get("org.opencontainers.image.title"): client.get_blob(
                path, layer["digest"]
            )
            for layer in manifest.get("layers") or []
            if (layer.get("annotations") or {}).get("org.opencontainers.image.title")
        }


# --- the controllers with the network cut -------------------------------------------------------------------


class AirgapFlux(FluxController):
    """Flux offline, with the Zarf agent's hooks on the sources of an initialised cluster (see the module doc)."""

    def __init__(self, host, **options):
        super().__init__(host.world, host.root / "work", offline=True, **options)
        self.host = host
        self._apply = self.agent_apply  # every apply of the controllers (sources, Kustomizations, ResourceSets)

    def agent_apply(self, api, obj, manager=MANAGER):
        """Server-side apply, through the Zarf agent's hooks in a cluster zarf init ran in."""
        if api.url in self.host.agent_apis and (obj.get("metadata") or {}).get("namespace") not in AGENT_IGNORED:
            zarf = self.host.zarf
            if obj.get("kind") == "HelmRepository":
                obj = agent_mutate_helm_repository(obj, zarf.host)
            elif obj.get("kind") == "OCIRepository":
                # the hook asks the registry for the artifact's config media type (getManifestConfigMediaType)
                pushed = parse_ref(transform_host(zarf.host, obj["spec"]["url"][len("oci://") :], checksum=False))
                obj = agent_mutate_oci_repository(obj, zarf.host, pushed["name"] in zarf.charts)
        return ssa_apply(api, obj, manager)

    def helmrelease(self, api, obj):
        spec, ns = obj["spec"], obj["metadata"]["namespace"]
        chart_spec = (spec.get("chart") or {}).get("spec") or {}
        ref = spec.get("chartRef") or chart_spec.get("sourceRef") or {}
        kind = ref.get("kind")
        try:
            source = api.get("source.toolkit.fluxcd.io/v1", kind, ref.get("name"), ref.get("namespace") or ns)
        except ApiError:
            raise Failure(
                "ArtifactFailed", "could not get Source object: {} '{}/{}' not found".format(kind, ns, ref.get("name"))
            )
        if not is_ready(source):
            raise Failure(
                "SourceNotReady",
                "could not get Source object: {} '{}/{}' is not ready".format(kind, ns, ref.get("name")),
            )
        if kind == "HelmRepository":
            chart, version = chart_spec.get("chart"), chart_spec.get("version", "")
            try:
                pull_chart(self.host.zarf, source, chart, version)
            except RefError as exc:
                raise Failure("ArtifactFailed", f"chart pull error: {exc}")
        else:  # the chart source-controller stored (layerSelector: the chart archive, unpacked here)
            found = glob.glob(
                os.path.join((source.get("status") or {}).get("artifact", {}).get("path", ""), "*", "Chart.yaml")
            )
            if not found:
                raise Failure("ArtifactFailed", "the artifact holds no chart")
            with open(found[0], encoding="utf-8") as handle:
                metadata = yaml.safe_load(handle)
            chart, version = metadata["name"], metadata["version"]
        target = api
        if (spec.get("kubeConfig") or {}).get("secretRef"):
            target = self._remote(api, ns, spec["kubeConfig"]["secretRef"])
        release = spec.get("releaseName") or obj["metadata"]["name"]
        install_chart(
            target,
            {"name": chart, "version": version, "namespace": spec.get("targetNamespace") or ns, "releaseName": release},
            spec.get("values") or {},
            manager="helm-controller",
        )
        set_status(
            api,
            obj,
            True,
            "InstallSucceeded",
            f"Helm install succeeded for release {ns}/{release}.v1 with chart {chart}@{version}",
        )


class AirgapCapi(CapiController):
    """Cluster API with the operator reading components from the local registry and CAAPH unable to pull."""

    def helm_chart_proxy(self, api, obj):
        url = str((obj.get("spec") or {}).get("repoURL", ""))
        host = url.split("://", 1)[-1].split("/", 1)[0]
        if host == "krops-registry:5000":  # plain HTTP: CAAPH v0.6.4's Helm registry client speaks HTTPS only
            message = (
                f'failed to do request: Head "https://{host}/v2/": http: server gave HTTP response to HTTPS client'
            )
        else:
            message = (
                f'failed to do request: Head "https://{host}/v2/": dial tcp: lookup {host.split(":")[0]}: no such host'
            )
        set_status(api, obj, False, "HelmInstallOrUpgradeFailed", message)


# --- the host ---------------------------------------------------------------------------------------------


class AirgapHost(EmulatedWorld):
    """EmulatedWorld with the network cut (see the module docstring)."""

    def __init__(self, root, **options):
        super().__init__(root, **options)
        self.world.controllers[:] = [
            c for c in self.world.controllers if not isinstance(c, (FluxController, CapiController))
        ]
        self.zarf = ZarfHostRegistry(self.root)
        self.agent_apis = set()
        self.node_images = {}  # CAPD cluster name -> NodeImages
        self.kubelets = {}
        self.flux = AirgapFlux(
            self,
            registry_aliases={"krops-registry:5000": self.registry, self.zarf.host: self.zarf.backing},
            renderer=render.find_kustomize(self.kubectl),
        )
        self.capi = AirgapCapi(self.world, spawn=self._spawn_capi, registry=LocalProviders(self))
        self.capi.on_provisioned = self._capd_provisioned
        self.capi.on_deleted = self._capd_deleted
        self.control_airgap = _airgap_control(self)
        self.env.update({"ZARF_STANDIN_WORLD": self.control_airgap.url, "AIRGAP_HOST_CONTROL": self.control_airgap.url})
        for tool, script in (("docker", STANDINS / "airgap_docker.py"), ("zarf", ZARF)):
            python_executable(self.bin / tool, script, {"KROPS_STANDIN_BIN": self.bin})

    def stop(self):
        errors = super().stop()
        self.zarf.stop()
        self.control_airgap.stop()
        return errors

    # ---- the engine's images ---------------------------------------------------------------------------
    def image(self, ref):
        """The engine's image for ``ref`` (by tag, or by digest among its registry digests), else None."""
        image = parse_ref(ref)
        found = self.docker.images.get(familiar(image["name"]) + ":" + (image["tag"] or "latest"))
        if found is None or (image["digest"] and image["digest"] not in found.get("Digests", ())):
            return None
        return found

    def docker_load(self, data):
        loaded = []
        for name_tag, digest, config in read_archive(data):
            short = familiar(name_tag)
            entry = self.docker.images.get(short) or dict(
                copy.deepcopy(config), Id="sha256:" + hashlib.sha256(name_tag.encode()).hexdigest(), RepoTags=[short]
            )
            entry.setdefault("Digests", []).append(digest)
            entry.setdefault("RepoDigests", []).append("{}@{}".format(familiar(name_tag.rsplit(":", 1)[0]), digest))
            self.docker.images[short] = self.docker.images[name_tag] = entry
            loaded.append(short)
        return loaded

    def docker_save(self, refs):
        images = []
        for ref in refs:
            found = self.image(ref)
            if found is None:
                raise WorldError(f"Error response from daemon: No such image: {ref}")
            image = parse_ref(ref)
            digest = image["digest"] or found["Digests"][-1]
            config = {k: v for k, v in found.items() if k not in ("Id", "RepoTags", "RepoDigests", "Digests")}
            images.append((ref, digest, config))
        return save_archive(images)

    def kind_create(self, name, config, image=None):
        if image and self.image(image) is None:  # kind pulls a node image the engine lacks
            raise WorldError(
                f'ERROR: failed to create cluster: failed to pull image "{image}": command "docker pull {image}" '
                "failed with error: exit status 1"
            )
        kubeconfig = super().kind_create(name, config, image)
        api = self.kind_clusters[name]
        self.kubelets[api.url] = Kubelet(self.world, api, self.zarf, agent=False)
        return kubeconfig

    def _capd_provisioned(self, api, cluster, workload):
        super()._capd_provisioned(api, cluster, workload)
        name = cluster["metadata"]["name"]
        if name not in self.node_images:
            self.node_images[name] = NodeImages()
            self.kubelets[workload.url] = Kubelet(self.world, workload, self.node_images[name], agent=False)
            workload.service_proxy = functools.partial(_service_proxy, workload)

    def node_import(self, node, data):
        container = self.docker.containers.get(node)
        if container is None:
            return 1, "", f"Error response from daemon: No such container: {node}\n"
        cluster = container["labels"].get("io.x-k8s.kind.cluster")
        role = container["labels"].get(KIND_ROLE_LABEL)
        if node not in self.node_files or role == "external-load-balancer":
            return (
                126,
                "",
                'OCI runtime exec failed: exec failed: unable to start container process: exec: "ctr": executable file not found in $PATH\n',
            )
        try:
            images = read_archive(data)
        except ValueError as exc:
            return 1, "", f"ctr: {exc}\n"
        store = self.node_images.setdefault(cluster, NodeImages())
        lines = []
        for name_tag, digest, _config in images:
            store.add(name_tag, digest)
            lines.append(f"unpacking {name_tag} ({digest})...done\n")
        return 0, "".join(lines), ""

    # ---- zarf in a cluster -----------------------------------------------------------------------------
    def _api_of(self, kubeconfig):
        with open(kubeconfig, encoding="utf-8") as handle:
            config = yaml.safe_load(handle)
        contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
        cluster = contexts.get(config.get("current-context"), {}).get("cluster")
        server = next((c["cluster"]["server"] for c in config.get("clusters") or [] if c["name"] == cluster), None)
        api = self.world.clusters.get(server)
        if api is None:
            raise WorldError(f"unable to connect to the Kubernetes cluster: {server} does not answer")
        return api

    def zarf_init(self, kubeconfig):
        api = self._api_of(kubeconfig)
        if not api.exists("v1", "Namespace", "zarf"):
            api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "zarf"}})
        self.agent_apis.add(api.url)
        self.kubelets[api.url].agent = True

    def zarf_deploy(self, path, components, kubeconfig, timeout):
        api = self._api_of(kubeconfig)
        if api.url not in self.agent_apis:
            raise WorldError("unable to deploy: the cluster is not initialised (run zarf init)")
        with open(path, encoding="utf-8") as handle:
            package = json.load(handle)
        try:
            zarf_deploy(api, package, components, self.zarf, timeout=timeout, apply=self.flux.agent_apply)
        except DeployFailed as exc:
            raise WorldError(str(exc), 500)


def _service_proxy(api, method, path):
    """The API server's service proxy (see the module docstring); None for any other path."""
    match = re.match(r"^/api/v1/namespaces/([^/]+)/services/([^/:]+)(?::([^/]+))?/proxy(/.*)?$", path)
    if not match or method != "GET":
        return None
    ns, name, port, rest = match.groups()
    try:
        service = api.get("v1", "Service", name, ns)
    except ApiError:
        return 404, _status(404, "NotFound", f'services "{name}" not found')
    ports = (service.get("spec") or {}).get("ports") or []
    if port and not any(port in (str(p.get("port")), p.get("name")) for p in ports):
        return 503, _status(503, "ServiceUnavailable", f'no endpoints available for service "{name}:{port}"')
    selector = (service.get("spec") or {}).get("selector") or {}
    running = [
        p
        for p in api.list("v1", "Pod", ns)
        if selector
        and all(((p.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in selector.items())
        and (p.get("status") or {}).get("phase") == "Running"
    ]
    if not running:
        label = f"{name}:{port}" if port else name
        return 503, _status(503, "ServiceUnavailable", f'no endpoints available for service "{label}"')
    if rest == "/healthz":
        return 200, {"status": "OK"}
    return 404, _status(404, "NotFound", "the server could not find the requested resource")


def _status(code, reason, message):
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _airgap_control(host):
    """The host side of the zarf and docker stand-ins (standins/airgap_docker.py, zarf_standin.py)."""

    def done(action):
        def route(body):
            action(body)
            return {}

        return route

    def node_import(body):
        rc, out, err = host.node_import(body["node"], base64.b64decode(body["archive"]))
        return {"rc": rc, "stdout": out, "stderr": err}

    return ControlServer(
        host,
        post={
            "/zarf/init": done(lambda body: host.zarf_init(body["kubeconfig"])),
            "/zarf/deploy": done(
                lambda body: host.zarf_deploy(body["package"], body["components"], body["kubeconfig"], body["timeout"])
            ),
            "/docker/load": lambda body: {"loaded": host.docker_load(base64.b64decode(body["archive"]))},
            "/docker/save": lambda body: {"archive": base64.b64encode(host.docker_save(body["images"])).decode()},
            "/node/import": node_import,
        },
    )


__all__ = ["AirgapHost", "save_archive", "image_config", "zarf_standin"]
