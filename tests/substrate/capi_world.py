# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""A small Cluster API for the emulated world (tests/substrate/flux_world.World).

``CapiController`` plays the cluster-api-operator, the core/kubeadm/Docker providers and CAAPH:

- A provider object (operator.cluster.x-k8s.io/v1alpha2 CoreProvider, BootstrapProvider, ...)
  becomes Ready once it exists, after the CoreProvider, and installs its provider's CRDs
  (``PROVIDER_CRDS`` -> strict_api.CRD_BUNDLES) with status.installedVersion = spec.version.
  An unknown provider name stays not Ready, with the reason.
- A Cluster whose infrastructureRef and controlPlaneRef objects exist gets a new emulated API server
  (``spawn(name)``), the Secret ``<name>-kubeconfig`` (type cluster.x-k8s.io/secret, key ``value``,
  label cluster.x-k8s.io/cluster-name) pointing at it, the finalizer cluster.cluster.x-k8s.io, and the
  v1beta2 status (phase Provisioned, initialization, conditions Available/InfrastructureReady/
  ControlPlaneInitialized). Deleting the Cluster deletes its infrastructure, control plane,
  MachineDeployments and kubeconfig Secret, stops its API server, then drops the finalizer.
- Infrastructure providers plug in by infrastructureRef kind (``infrastructure``): an object with
  ``provision(api, cluster, infra, control_plane)`` and ``delete(...)`` (each None when done, else the
  reason it is not yet), ``status(role)`` (the status fields its contract reports for role
  "infrastructure" or "control-plane"; None: the contract's default fields) and optionally ``crds``
  ({(provider kind, name): callable(api)} installing its provider's CRDs) or ``installers``
  ({(provider kind, name): callable(api, provider)} returning None when installed, else why not: the
  provider stays not Ready with that reason). tests/substrate/aws_world.Capa,
  cloud_operators.AzureOperators and gcp_operators.GcpOperators are plug-ins; ``plug_in(kind, plugin)``
  adds one to a running controller.
  A paused Cluster (spec.paused) is left alone; a Cluster that moved to another management cluster
  (clusterctl move) keeps its API server there (the new management cluster adopts it).
- A ClusterResourceSet applies the manifests of its ConfigMaps into every matching provisioned cluster.
- A HelmChartProxy (CAAPH) "installs" its chart into every matching provisioned cluster: the
  release namespace, and the CRDs the chart ships (flux_world.CHART_CRDS); it records a
  HelmReleaseProxy per cluster.

- Air-gapped (``registry=ProviderRegistry()``): github.com is unreachable, so a provider becomes Ready
  only when ``spec.fetchConfig.oci`` names an artifact the registry stand-in holds, with the files
  cluster-api-operator v0.28.0 reads (internal/controller/oci_source.go: layers selected by the
  org.opencontainers.image.title annotation; components as ``<type>-<name>-<version>-components.yaml``,
  ``<type>-components.yaml`` or ``components.yaml``; metadata as ``<type>-<name>-<version>-metadata.yaml``
  or ``metadata.yaml``; the reference parsed as parseOCISource does: an ``http://`` prefix, the tag
  from the reference or else spec.version). Anything else stays not Ready, with the reason.
  An installed provider's controller Deployment (``PROVIDER_MANAGERS``) is applied in its namespace, its
  ``manager`` container running the release's image unless spec.deployment.containers names an imageUrl
  for it (customizeContainer, internal/controller/component_customizer.go @ v0.28.0: a container name the
  Deployment lacks fails the install with upstream's message); a Kubelet of the world then pulls it.

Names and fields are CAPI v1beta2 / CAAPH v1alpha1 as vendored in schemas/crds; the time a real
cluster takes is not emulated. The upstream facts are listed in docs/testing.md.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import io
import json
import tarfile

import yaml

from tests.substrate.flux_world import CHART_CRDS, is_ready, set_status, ssa_apply
from tests.substrate.kube_emulator import ApiError, _now
from tests.substrate.strict_api import StrictKubeEmulator

OPERATOR = "operator.cluster.x-k8s.io/v1alpha2"
CLUSTER_API = "cluster.x-k8s.io/v1beta2"
FINALIZER = "cluster.cluster.x-k8s.io"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
MANAGER = "capi-controller-manager"

# (provider kind, provider name) -> CRD bundles it installs.
# (kind, name) -> (Deployment, image repository) of the provider's controller in its release components:
# kustomize namePrefix + controller-manager (config/default/kustomization.yaml) and the Makefile's image of
# cluster-api v1.13.5 (core, kubeadm bootstrap and control plane, CAPD) and cluster-api-addon-provider-helm
# v0.6.4; the image's tag is the release version. The container is "manager" (config/manager/manager.yaml).
PROVIDER_MANAGERS = {
    ("CoreProvider", "cluster-api"): ("capi-controller-manager", "registry.k8s.io/cluster-api/cluster-api-controller"),
    ("BootstrapProvider", "kubeadm"): (
        "capi-kubeadm-bootstrap-controller-manager",
        "registry.k8s.io/cluster-api/kubeadm-bootstrap-controller",
    ),
    ("ControlPlaneProvider", "kubeadm"): (
        "capi-kubeadm-control-plane-controller-manager",
        "registry.k8s.io/cluster-api/kubeadm-control-plane-controller",
    ),
    ("InfrastructureProvider", "docker"): ("capd-controller-manager", "registry.k8s.io/cluster-api/capd-manager"),
    ("AddonProvider", "helm"): (
        "caaph-controller-manager",
        "registry.k8s.io/cluster-api-helm/cluster-api-helm-controller",
    ),
}


def _manager_deployment(obj):
    """(Deployment, None) the operator applies for an installed provider, or (None, why it cannot)."""
    kind, name, ns = obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"]
    deployment_name, repository = PROVIDER_MANAGERS[(kind, name)]
    container = {"name": "manager", "image": "{}:{}".format(repository, (obj.get("spec") or {}).get("version"))}
    for spec in ((obj.get("spec") or {}).get("deployment") or {}).get("containers") or []:
        if spec.get("name") != container["name"]:
            return None, f'cannot find container "{spec.get("name")}" in deployment "{deployment_name}"'
        if spec.get("imageUrl"):
            container["image"] = spec["imageUrl"]
    labels = {"cluster.x-k8s.io/provider": name, "control-plane": "controller-manager"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": deployment_name, "namespace": ns, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }, None


PROVIDER_CRDS = {
    ("CoreProvider", "cluster-api"): ("cluster-api",),
    ("BootstrapProvider", "kubeadm"): ("kubeadm-bootstrap",),
    ("ControlPlaneProvider", "kubeadm"): ("kubeadm-control-plane",),
    ("InfrastructureProvider", "docker"): ("docker",),
    ("AddonProvider", "helm"): ("helm-addon",),
}
PROVIDER_KINDS = (
    "CoreProvider",
    "BootstrapProvider",
    "ControlPlaneProvider",
    "InfrastructureProvider",
    "AddonProvider",
)


# operator GetType() of each provider kind (api/v1alpha2/*provider_wrapper.go @ cluster-api-operator v0.28.0)
PROVIDER_TYPES = {
    "CoreProvider": "core",
    "BootstrapProvider": "bootstrap",
    "ControlPlaneProvider": "control-plane",
    "InfrastructureProvider": "infrastructure",
    "AddonProvider": "addon",
}


def parse_oci_source(url, version):
    """(repository, tag, plain HTTP) as parseOCISource (internal/controller/oci_source.go @ v0.28.0)."""
    plain = url.startswith("http://")
    if plain:
        url = url[len("http://") :]
    parts = url.split(":", 2)
    if len(parts) == 2 and "/" not in parts[1]:
        url, version = parts
    elif len(parts) == 3:
        url, version = parts[0] + ":" + parts[1], parts[2]
    return url, version, plain


class ProviderRegistry:
    """The bundle's registry as the operator sees it: OCI layouts pushed by reference, nothing else reachable."""

    def __init__(self):
        self.artifacts = {}  # (repository, tag) -> {title: bytes}
        self.fetches = []  # (repository, tag) the operator asked for

    def push_layout(self, data):
        """Load an OCI image layout tarball (index.json, blobs/sha256/*) under its ref.name annotations."""
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
        index = json.loads(files["index.json"])

        def blob(digest):
            body = files["blobs/sha256/" + digest.split(":", 1)[1]]
            if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
                raise ValueError(f"blob {digest} does not match its content")
            return body

        for desc in index["manifests"]:
            ref = desc["annotations"]["org.opencontainers.image.ref.name"]
            manifest = json.loads(blob(desc["digest"]))
            titled = {}
            for layer in manifest.get("layers") or []:
                title = (layer.get("annotations") or {}).get("org.opencontainers.image.title")
                if title:
                    titled[title] = blob(layer["digest"])
            repository, tag = ref.rsplit(":", 1)
            self.artifacts[(repository, tag)] = titled

    def fetch(self, repository, tag):
        self.fetches.append((repository, tag))
        return self.artifacts.get((repository, tag))


def _oci_files(registry, obj):
    """(metadata, components) of a provider's fetchConfig.oci, or (None, why not)."""
    spec = obj.get("spec") or {}
    kind, name, version = obj["kind"], obj["metadata"]["name"], spec.get("version", "")
    fetch = spec.get("fetchConfig") or {}
    if not fetch.get("oci"):
        how = "fetchConfig.url " + fetch["url"] if fetch.get("url") else "no spec.fetchConfig.oci"
        return None, (
            f"{kind} {name}: {how}: the operator would download the components from "
            "github.com, which is unreachable from the air-gapped host"
        )
    repository, tag, _plain = parse_oci_source(fetch["oci"], version)
    files = registry.fetch(repository, tag)
    if files is None:
        return None, f"unable to copy OCI content: {repository}:{tag} is not in the bundle's registry"
    ptype = PROVIDER_TYPES[kind]
    full_meta = f"{ptype}-{name}-{version}-metadata.yaml"
    metadata = files.get(full_meta) or files.get("metadata.yaml")
    if not metadata:
        return None, f"collected artifact needs to provide metadata as {full_meta} or metadata.yaml file"
    names = (f"{ptype}-{name}-{version}-components.yaml", f"{ptype}-components.yaml", "components.yaml")
    components = next((files[n] for n in names if files.get(n)), None)
    if not components:
        return None, "collected artifact needs to provide components as {} or {} or {} file".format(*names)
    return (metadata, components), None


def _matches(selector, labels):
    labels = labels or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        value, op, values = labels.get(expr["key"]), expr["operator"], expr.get("values") or []
        if (
            (op == "In" and value not in values)
            or (op == "NotIn" and value in values)
            or (op == "Exists" and expr["key"] not in labels)
            or (op == "DoesNotExist" and expr["key"] in labels)
        ):
            return False
    return True


class CapiController:
    """Provider operator, CAPI core with CAPD/kubeadm, ClusterResourceSet and CAAPH, emulated."""

    def __init__(self, world, spawn=None, infrastructure=None, registry=None):
        self.world = world
        self.registry = registry  # a ProviderRegistry: the air-gapped world (github.com unreachable)
        self.spawn = spawn or self._spawn
        self.infrastructure = {}  # infrastructureRef kind -> provider plug-in
        self.installers = {}  # (provider kind, name) -> callable(api, provider): None or why not
        for kind, plugin in (infrastructure or {}).items():
            self.plug_in(kind, plugin)
        self.workloads = {}  # (mgmt url, namespace, cluster) -> emulator
        # Infrastructure hooks (lifecycle.py: CAPD's containers): called as (mgmt api, Cluster, workload emulator).
        self.on_provisioned = None
        self.on_deleted = None
        world.controllers.append(self)

    def plug_in(self, kind, plugin):
        """Let ``plugin`` provision and delete the Clusters whose infrastructureRef kind is ``kind``."""
        self.infrastructure[kind] = plugin
        for key, install in (getattr(plugin, "crds", None) or {}).items():
            self.installers[key] = lambda api, provider, install=install: install(api) and None  # installs only
        self.installers.update(getattr(plugin, "installers", None) or {})

    @staticmethod
    def _spawn(name):
        return StrictKubeEmulator(name).start()

    def reconcile(self, api):
        if ("operator.cluster.x-k8s.io", "coreproviders") in api.resources:
            for kind in PROVIDER_KINDS:
                # a chart's CRDs arrive one by one: a kind not served yet has nothing to reconcile
                if ("operator.cluster.x-k8s.io", kind.lower() + "s") in api.resources:
                    for obj in api.list(OPERATOR, kind):
                        self.provider(api, obj)
        if ("cluster.x-k8s.io", "clusters") in api.resources:
            for obj in api.list(CLUSTER_API, "Cluster"):
                self.cluster(api, obj)
        if ("addons.cluster.x-k8s.io", "clusterresourcesets") in api.resources:
            for obj in api.list("addons.cluster.x-k8s.io/v1beta2", "ClusterResourceSet"):
                self.resource_set(api, obj)
        if ("addons.cluster.x-k8s.io", "helmchartproxies") in api.resources:
            for obj in api.list("addons.cluster.x-k8s.io/v1alpha1", "HelmChartProxy"):
                self.helm_chart_proxy(api, obj)

    # ---- providers ----------------------------------------------------------------------
    def provider(self, api, obj):
        kind, name = obj["kind"], obj["metadata"]["name"]
        bundles = PROVIDER_CRDS.get((kind, name))
        installer = self.installers.get((kind, name))
        if bundles is None and installer is None:
            set_status(
                api,
                obj,
                False,
                "UnknownProvider",
                "provider {} {!r} is not one the emulated world knows ({})".format(
                    kind, name, ", ".join("{}/{}".format(*k) for k in sorted(PROVIDER_CRDS))
                ),
            )
            return
        if kind != "CoreProvider":
            cores = api.list(OPERATOR, "CoreProvider")
            if not any(is_ready(c) for c in cores):
                set_status(api, obj, False, "WaitingForCoreProviderReady", "waiting for the core provider to install")
                return
        if self.registry is not None:
            _files, why = _oci_files(self.registry, obj)
            if why:
                set_status(api, obj, False, "ComponentsFetchFailed", why)
                return
        problem = None
        if installer:
            problem = installer(api, obj)
        else:
            api.install_bundle(*bundles)
        if not problem and self.registry is not None and (kind, name) in PROVIDER_MANAGERS:
            deployment, problem = _manager_deployment(obj)
            if deployment:
                ssa_apply(api, deployment, "cluster-api-operator")
        if problem:
            set_status(api, obj, False, "InstallFailed", problem)
            return
        set_status(
            api,
            obj,
            True,
            "Ready",
            "installed {}".format((obj.get("spec") or {}).get("version", "")),
            installedVersion=(obj.get("spec") or {}).get("version", ""),
            contract="v1beta2",
        )

    # ---- clusters -------------------------------------------------------------------------
    def _ref(self, api, namespace, ref):
        if not ref:
            return None
        group = ref.get("apiGroup", "")
        for res in list(api.resources.values()):
            if res.group == group and res.kind == ref.get("kind"):
                try:
                    return api.get(res.api_version, res.kind, ref["name"], namespace)
                except ApiError:
                    return None
        return None

    def cluster(self, api, obj):
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        key = (api.url, ns, name)
        spec = obj.get("spec") or {}
        if spec.get("paused"):
            return  # CAPI reconciles nothing of a paused Cluster (clusterctl move pauses them)
        if obj["metadata"].get("deletionTimestamp"):
            return self._delete_cluster(api, obj, key)
        if key not in self.workloads:
            self._adopt(api, ns, name, key)
        infra = self._ref(api, ns, spec.get("infrastructureRef"))
        control_plane = self._ref(api, ns, spec.get("controlPlaneRef"))
        if infra is None or control_plane is None:
            missing = "infrastructureRef" if infra is None else "controlPlaneRef"
            self._cluster_status(
                api,
                obj,
                "Provisioning",
                False,
                "{} {}/{} does not exist yet".format(missing, ns, (spec.get(missing) or {}).get("name")),
            )
            return
        plugin = self.infrastructure.get((spec.get("infrastructureRef") or {}).get("kind"))
        waiting = plugin and plugin.provision(api, obj, infra, control_plane)
        if waiting:
            self._cluster_status(api, obj, "Provisioning", False, waiting)
            return
        if FINALIZER not in (obj["metadata"].get("finalizers") or []):
            res = api.resource_for(obj["apiVersion"], obj["kind"])
            api.patch(
                res,
                ns,
                name,
                "merge",
                {"metadata": {"finalizers": (obj["metadata"].get("finalizers") or []) + [FINALIZER]}},
                None,
                MANAGER,
            )
        workload = self.workloads.get(key)
        if workload is None:
            workload = self.workloads[key] = self.spawn(name)
            self.world.add_cluster(workload)
            if self.on_provisioned:
                self.on_provisioned(api, obj, workload)
        secret_name = f"{name}-kubeconfig"
        config = yaml.safe_dump(workload.kubeconfig(context=f"{name}-admin@{name}", cluster=name, user=f"{name}-admin"))
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "cluster.x-k8s.io/secret",
            "metadata": {
                "name": secret_name,
                "namespace": ns,
                "labels": {CLUSTER_NAME_LABEL: name},
                "ownerReferences": [
                    {
                        "apiVersion": control_plane["apiVersion"],
                        "kind": control_plane["kind"],
                        "name": control_plane["metadata"]["name"],
                        "uid": control_plane["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "data": {"value": base64.b64encode(config.encode()).decode()},
        }
        res = api.resource_for("v1", "Secret")
        api.patch(res, ns, secret_name, "apply", secret, None, MANAGER, "Strict", True)
        # The v1beta2 contract: status.initialization.provisioned (infrastructure) and
        # .controlPlaneInitialized (control plane); v1beta1 providers report status.ready.
        for ref_obj, initialized, role in (
            (infra, "provisioned", "infrastructure"),
            (control_plane, "controlPlaneInitialized", "control-plane"),
        ):
            v1beta2 = ref_obj["apiVersion"].endswith("/v1beta2")
            fields = {"initialization": {initialized: True}} if v1beta2 else {"ready": True}
            self._patch_status(api, ref_obj, (plugin.status(role) if plugin else None) or fields)
        self._cluster_status(api, obj, "Provisioned", True, "provisioned (emulated)")

    def _adopt(self, api, ns, name, key):
        """A Cluster moved here (clusterctl move): its infrastructure is the one its old management cluster
        built, which no longer lists it; the providers on this side adopt it instead of building another."""
        for old in [k for k in self.workloads if k[1:] == (ns, name) and k[0] != api.url]:
            source = self.world.clusters.get(old[0])
            if source is None or not source.exists(CLUSTER_API, "Cluster", name, ns):
                self.workloads[key] = self.workloads.pop(old)
                return

    def _patch_status(self, api, obj, fields):
        res = api.resource_for(obj["apiVersion"], obj["kind"])
        status = copy.deepcopy(obj.get("status") or {})
        status.update(fields)
        if status != (obj.get("status") or {}):
            api.patch(
                res,
                obj["metadata"]["namespace"],
                obj["metadata"]["name"],
                "merge",
                {"status": status},
                "status",
                MANAGER,
            )

    def _cluster_status(self, api, obj, phase, ok, message):
        live = api.get(obj["apiVersion"], obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"])
        old = {c["type"]: c for c in (live.get("status") or {}).get("conditions") or []}
        conditions = []
        for type_ in ("Available", "InfrastructureReady", "ControlPlaneInitialized"):
            value = "True" if ok else "False"
            previous = old.get(type_) or {}
            conditions.append(
                {
                    "type": type_,
                    "status": value,
                    "reason": type_ if ok else "Not" + type_,
                    "message": message,
                    "observedGeneration": live["metadata"].get("generation", 1),
                    "lastTransitionTime": previous.get("lastTransitionTime")
                    if previous.get("status") == value
                    else _now(),
                }
            )
        status = {"phase": phase, "conditions": conditions, "observedGeneration": live["metadata"].get("generation", 1)}
        if ok:
            status["initialization"] = {"infrastructureProvisioned": True, "controlPlaneInitialized": True}
        self._patch_status(api, live, status)

    def _delete_cluster(self, api, obj, key):
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        spec = obj.get("spec") or {}
        plugin = self.infrastructure.get((spec.get("infrastructureRef") or {}).get("kind"))
        if plugin and plugin.delete(
            api, obj, self._ref(api, ns, spec.get("infrastructureRef")), self._ref(api, ns, spec.get("controlPlaneRef"))
        ):
            return  # the provider has not deleted the infrastructure yet: the finalizer stays
        for ref in (spec.get("controlPlaneRef"), spec.get("infrastructureRef")):
            found = self._ref(api, ns, ref)
            if found is not None:
                api.remove(found["apiVersion"], found["kind"], found["metadata"]["name"], ns)
        if ("cluster.x-k8s.io", "machinedeployments") in api.resources:
            for md in api.list(CLUSTER_API, "MachineDeployment", ns):
                if (md.get("spec") or {}).get("clusterName") == name:
                    api.remove(CLUSTER_API, "MachineDeployment", md["metadata"]["name"], ns)
        if api.exists("v1", "Secret", f"{name}-kubeconfig", ns):
            api.remove("v1", "Secret", f"{name}-kubeconfig", ns)
        workload = self.workloads.pop(key, None)
        if workload is not None:
            self.world.clusters.pop(workload.url, None)
            if self.on_deleted:
                self.on_deleted(api, obj, workload)
            else:
                workload.stop()
        res = api.resource_for(obj["apiVersion"], obj["kind"])
        api.patch(
            res,
            ns,
            name,
            "merge",
            {
                "metadata": {
                    "finalizers": [f for f in obj["metadata"].get("finalizers") or [] if f != FINALIZER] or None
                }
            },
            None,
            MANAGER,
        )

    def provisioned(self, api, namespace, selector):
        """(Cluster, workload emulator) of the provisioned clusters of namespace matching selector. A paused
        Cluster is left out: add-on controllers (ClusterResourceSet, CAAPH) reconcile nothing of it, so nothing
        is written back to the kind cluster while clusterctl move has the Clusters paused."""
        found = []
        for cluster in api.list(CLUSTER_API, "Cluster", namespace):
            workload = self.workloads.get((api.url, namespace, cluster["metadata"]["name"]))
            if (
                workload is not None
                and (cluster.get("status") or {}).get("phase") == "Provisioned"
                and _matches(selector or {}, cluster["metadata"].get("labels"))
                and not cluster["metadata"].get("deletionTimestamp")
                and not (cluster.get("spec") or {}).get("paused")
            ):
                found.append((cluster, workload))
        return found

    # ---- add-ons ----------------------------------------------------------------------------
    def resource_set(self, api, obj):
        ns = obj["metadata"]["namespace"]
        spec = obj.get("spec") or {}
        applied = []
        for cluster, workload in self.provisioned(api, ns, spec.get("clusterSelector")):
            for ref in spec.get("resources") or []:
                try:
                    source = api.get("v1", ref["kind"], ref["name"], ns)
                except ApiError as exc:
                    set_status(
                        api,
                        obj,
                        False,
                        "WrongSecretType" if ref["kind"] == "Secret" else "RetrievingResourceFailed",
                        exc.message,
                    )
                    return
                data = source.get("data") or {}
                if ref["kind"] == "Secret":
                    data = {k: base64.b64decode(v).decode() for k, v in data.items()}
                for text in data.values():
                    for doc in yaml.safe_load_all(text):
                        if isinstance(doc, dict):
                            ssa_apply(workload, doc, "capi-clusterresourceset")
            applied.append(cluster["metadata"]["name"])
        set_status(api, obj, True, "Applied", "applied to %s" % (", ".join(applied) or "no cluster yet"))

    def helm_chart_proxy(self, api, obj):
        ns = obj["metadata"]["namespace"]
        spec = obj.get("spec") or {}
        matching = []
        for cluster, workload in self.provisioned(api, ns, spec.get("clusterSelector")):
            cname = cluster["metadata"]["name"]
            release_ns = spec.get("namespace") or "default"
            if not workload.exists("v1", "Namespace", release_ns):
                if not ((spec.get("options") or {}).get("install") or {}).get("createNamespace"):
                    set_status(
                        api,
                        obj,
                        False,
                        "HelmInstallOrUpgradeFailed",
                        f'create: failed to create: namespaces "{release_ns}" not found',
                    )
                    return
                workload.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": release_ns}})
            workload.install_bundle(*CHART_CRDS.get(spec.get("chartName"), ()))
            proxy = {
                "apiVersion": "addons.cluster.x-k8s.io/v1alpha1",
                "kind": "HelmReleaseProxy",
                "metadata": {
                    "name": "{}-{}".format(obj["metadata"]["name"], cname),
                    "namespace": ns,
                    "labels": {
                        CLUSTER_NAME_LABEL: cname,
                        "helmchartproxy.addons.cluster.x-k8s.io/name": obj["metadata"]["name"],
                    },
                    "ownerReferences": [
                        {
                            "apiVersion": obj["apiVersion"],
                            "kind": obj["kind"],
                            "name": obj["metadata"]["name"],
                            "uid": obj["metadata"]["uid"],
                            "controller": True,
                        }
                    ],
                },
                "spec": {
                    "clusterRef": {"apiVersion": CLUSTER_API, "kind": "Cluster", "name": cname, "namespace": ns},
                    "repoURL": spec.get("repoURL"),
                    "chartName": spec.get("chartName"),
                    "version": spec.get("version"),
                    "releaseName": spec.get("releaseName"),
                    "namespace": release_ns,
                },
            }
            try:
                res = api.resource_for(proxy["apiVersion"], proxy["kind"])
                api.patch(res, ns, proxy["metadata"]["name"], "apply", proxy, None, "caaph", "Strict", True)
                set_status(
                    api,
                    api.get(proxy["apiVersion"], proxy["kind"], proxy["metadata"]["name"], ns),
                    True,
                    "Deployed",
                    "release %s deployed" % (spec.get("releaseName") or spec.get("chartName")),
                    status="deployed",
                    revision=1,
                )
            except ApiError:
                return  # the proxy, its CRD or its namespace went meanwhile (a teardown): nothing left to report
            matching.append({"apiVersion": CLUSTER_API, "kind": "Cluster", "name": cname, "namespace": ns})
        set_status(api, obj, True, "Ready", "installed in %d cluster(s)" % len(matching), matchingClusters=matching)
