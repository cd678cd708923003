# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The cloud side of the emulated world for azure: CAPZ's provider install, ASO and AKS.

``AzureOperators(world, arm, capi)`` joins a flux_world.World next to the Flux and CAPI controllers:

- CAPZ's InfrastructureProvider ``azure`` (a capi_world plug-in's ``installers``): installs CAPZ's CRDs
  (the Azure* kinds of infrastructure.cluster.x-k8s.io) and the ASO CRDs CAPZ's bundled ASO serves:
  ``ASO_DEFAULT`` plus ``ADDITIONAL_ASO_CRDS`` of the provider's configSecret (``group/Kind`` or
  ``group/*``, semicolon-separated: CAPZ docs/book/src/topics/aso.md). A CRD that nothing asked for
  is not served, so a tree that uses it fails at Flux's dry-run, as on a real cluster. A missing
  configSecret leaves the provider not Ready.
- ASO: every object of a served ASO kind of ``ARM_TYPES`` gets the finalizer, waits for its owner
  (``spec.owner.name``: the owning ASO object must be Ready; ``spec.owner.armId``: the resource must
  exist in the ARM double) and for the ConfigMaps it reads (``issuerFromConfig``); then it is
  created in the ARM double (``arm_double.ArmDouble``) with its ``spec.tags`` and becomes Ready
  (condition Ready, reason Succeeded, ``status.id``); ``operatorSpec.configMaps`` exports are
  written (ManagedCluster oidcIssuerProfile: the issuer URL of its API server; UserAssignedIdentity
  clientId / principalId / tenantId). Deleting the object deletes the Azure resource (children
  with it), except with ``serviceoperator.azure.com/reconcile-policy`` ``detach-on-delete`` or ``skip``.
- CAPZ's ASO-managed clusters: an AzureASOManagedCluster / ControlPlane / MachinePool creates the
  ASO objects of its ``spec.resources`` in its namespace, owned by it (garbage collection deletes
  them with it, and ASO then deletes them in Azure). capi_world provisions a Cluster (the AKS API
  server, ``<name>-kubeconfig``) only once every resource of its infrastructure and control plane
  is Ready (the plug-in's ``provision`` for infrastructureRef kind AzureASOManagedCluster).

Not emulated (yet): ASO's credential lookup (aso-credential / credential-from), and CAPZ v1beta2
status fields beyond what capi_world writes. Names and reasons: ASO v2 (reconcile-policy annotation,
Ready condition with reason Succeeded / WaitingForOwner), CAPZ v1.25 book (ASO-managed clusters).
"""

from __future__ import annotations

import copy
import uuid

from tests.substrate import flux_world
from tests.substrate.kube_emulator import ApiError, _now
from tests.substrate.strict_api import catalog, plural_of

MANAGER = "azureserviceoperator"
ASO_FINALIZER = "serviceoperator.azure.com/finalizer"
POLICY = "serviceoperator.azure.com/reconcile-policy"
CAPZ_GROUP = "infrastructure.cluster.x-k8s.io"
CAPZ_ASO_KINDS = ("AzureASOManagedCluster", "AzureASOManagedControlPlane", "AzureASOManagedMachinePool")

# (ASO group, kind) -> (ARM id segment under the owner, owner kind or None for a resource group).
ARM_TYPES = {
    ("resources.azure.com", "ResourceGroup"): (None, None),
    ("managedidentity.azure.com", "UserAssignedIdentity"): (
        "providers/Microsoft.ManagedIdentity/userAssignedIdentities",
        "ResourceGroup",
    ),
    ("managedidentity.azure.com", "FederatedIdentityCredential"): (
        "federatedIdentityCredentials",
        "UserAssignedIdentity",
    ),
    ("containerservice.azure.com", "ManagedCluster"): (
        "providers/Microsoft.ContainerService/managedClusters",
        "ResourceGroup",
    ),
    ("containerservice.azure.com", "ManagedClustersAgentPool"): ("agentPools", "ManagedCluster"),
    ("network.azure.com", "VirtualNetwork"): ("providers/Microsoft.Network/virtualNetworks", "ResourceGroup"),
    ("network.azure.com", "VirtualNetworksSubnet"): ("subnets", "VirtualNetwork"),
    ("network.azure.com", "PrivateDnsZone"): ("providers/Microsoft.Network/privateDnsZones", "ResourceGroup"),
    ("network.azure.com", "PrivateDnsZonesVirtualNetworkLink"): ("virtualNetworkLinks", "PrivateDnsZone"),
    ("storage.azure.com", "StorageAccount"): ("providers/Microsoft.Storage/storageAccounts", "ResourceGroup"),
    ("storage.azure.com", "StorageAccountsBlobService"): ("blobServices", "StorageAccount"),
    ("storage.azure.com", "StorageAccountsBlobServicesContainer"): ("containers", "StorageAccountsBlobService"),
    ("dbforpostgresql.azure.com", "FlexibleServer"): (
        "providers/Microsoft.DBforPostgreSQL/flexibleServers",
        "ResourceGroup",
    ),
}
# The ASO CRDs CAPZ always installs for its own use (the kinds its ASO-managed clusters create).
# Assumption, not confirmed at the pinned CAPZ tag: the set the tree's capz-system health checks expect.
ASO_DEFAULT = (
    "resources.azure.com/ResourceGroup",
    "containerservice.azure.com/ManagedCluster",
    "containerservice.azure.com/ManagedClustersAgentPool",
    "network.azure.com/VirtualNetwork",
    "network.azure.com/VirtualNetworksSubnet",
)
ASO_KINDS = {group: sorted({k for g, k in ARM_TYPES if g == group}) for group, _kind in ARM_TYPES}


def _condition(obj, type_="Ready"):
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == type_), None)


def aso_ready(obj):
    cond = _condition(obj)
    return bool(cond and cond.get("status") == "True")


class AzureOperators:
    """CAPZ provider install, ASO and CAPZ's ASO-managed clusters over an ArmDouble; see the module docstring."""

    def __init__(self, world, arm, capi):
        self.world = world
        self.arm = arm
        self.capi = capi
        self.aks = {}  # ManagedCluster ARM id -> the cluster's API server (an emulator of the world)
        self.installers = {("InfrastructureProvider", "azure"): self.install_capz}
        capi.plug_in("AzureASOManagedCluster", self)
        # CAPZ runs no reconciler for AzureClusterIdentity (none in its main.go): kstatus reads it Current.
        flux_world.NO_STATUS_WRITER.add((CAPZ_GROUP, "AzureClusterIdentity"))
        world.controllers.append(self)

    # ---- CAPZ's provider install ----------------------------------------------------------
    def install_capz(self, api, provider):
        ref = (provider.get("spec") or {}).get("configSecret") or {}
        additional = ""
        if ref:
            ns = ref.get("namespace") or provider["metadata"]["namespace"]
            try:
                secret = api.get("v1", "Secret", ref["name"], ns)
            except ApiError as exc:
                return f"failed to get configSecret {ns}/{ref['name']}: {exc.message}"
            import base64

            data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
            data.update(secret.get("stringData") or {})
            additional = data.get("ADDITIONAL_ASO_CRDS", "")
        wanted = []
        for kind in catalog().kinds(CAPZ_GROUP):
            if kind.startswith("Azure"):
                wanted.append((CAPZ_GROUP, kind))
        for pattern in list(ASO_DEFAULT) + [p.strip() for p in additional.split(";") if p.strip()]:
            group, _sep, kind = pattern.partition("/")
            kinds = ASO_KINDS.get(group, []) if kind == "*" else [kind]
            if not kinds:
                return f"ADDITIONAL_ASO_CRDS: {pattern} is not a kind the emulated ASO serves"
            for one in kinds:
                if (group, one) not in ARM_TYPES:
                    return f"ADDITIONAL_ASO_CRDS: {pattern} is not a kind the emulated ASO serves"
                wanted.append((group, one))
        for group, kind in wanted:
            name = f"{plural_of(group, kind)}.{group}"
            if ("apiextensions.k8s.io", "customresourcedefinitions", "", name) not in api.objects:
                api.create(catalog().crd(group, kind))
        return None

    # ---- one pass -------------------------------------------------------------------------
    def reconcile(self, api):
        self._stop_deleted_aks()
        if not self._capz_running(api):
            return  # ASO and CAPZ run in the cluster only while CAPZ's provider is installed there
        for (group, kind), (segment, owner_kind) in ARM_TYPES.items():
            if (group, plural_of(group, kind)) not in api._served:
                continue
            res = api.resources[(group, plural_of(group, kind))]
            for obj in api.list(res.api_version, kind):
                self.aso_object(api, obj, segment, owner_kind)
        for kind in CAPZ_ASO_KINDS:
            if (CAPZ_GROUP, plural_of(CAPZ_GROUP, kind)) in api._served:
                res = api.resources[(CAPZ_GROUP, plural_of(CAPZ_GROUP, kind))]
                for obj in api.list(res.api_version, kind):
                    self.capz_resources(api, obj)

    @staticmethod
    def _capz_running(api):
        if ("operator.cluster.x-k8s.io", "infrastructureproviders") not in api._served:
            return False
        return any(
            p["metadata"]["name"] == "azure" and not p["metadata"].get("deletionTimestamp")
            for p in api.list("operator.cluster.x-k8s.io/v1alpha2", "InfrastructureProvider")
        )

    def _stop_deleted_aks(self):
        """An AKS cluster whose ManagedCluster is gone from Azure loses its API server (and what ran in it)."""
        for rid, api in list(self.aks.items()):
            if not self.arm.exists(rid):
                del self.aks[rid]
                self.world.clusters.pop(api.url, None)
                api.stop()

    # ---- ASO ------------------------------------------------------------------------------
    def _owner_id(self, api, obj, owner_kind):
        owner = (obj.get("spec") or {}).get("owner") or {}
        ns = obj["metadata"]["namespace"]
        if owner_kind is None:
            return f"/subscriptions/{self.arm.subscription}", None
        if owner.get("armId"):
            if not self.arm.exists(owner["armId"]):
                return None, f"owner {owner['armId']} does not exist in Azure"
            return owner["armId"], None
        group = "resources.azure.com" if owner_kind == "ResourceGroup" else obj["apiVersion"].split("/")[0]
        served = api.resources.get((group, plural_of(group, owner_kind)))
        found = None
        if served is not None and owner.get("name"):
            try:
                found = api.get(served.api_version, owner_kind, owner["name"], ns)
            except ApiError:
                found = None
        if found is None or not aso_ready(found) or not (found.get("status") or {}).get("id"):
            return None, "Owner {}/{} {} is not ready".format(ns, owner.get("name"), owner_kind)
        return found["status"]["id"], None

    def _config_ref(self, api, obj):
        ref = (obj.get("spec") or {}).get("issuerFromConfig")
        if not ref:
            return None
        ns = obj["metadata"]["namespace"]
        try:
            found = api.get("v1", "ConfigMap", ref["name"], ns)
        except ApiError:
            return f"configmap {ns}/{ref['name']} does not exist"
        if ref["key"] not in (found.get("data") or {}):
            return f"configmap {ns}/{ref['name']} does not have key {ref['key']}"
        return None

    def aso_object(self, api, obj, segment, owner_kind):
        meta = obj["metadata"]
        ns, name = meta["namespace"], meta["name"]
        res = api.resource_for(obj["apiVersion"], obj["kind"])
        policy = (meta.get("annotations") or {}).get(POLICY, "manage")
        rid = (obj.get("status") or {}).get("id")
        if meta.get("deletionTimestamp"):
            if ASO_FINALIZER in (meta.get("finalizers") or []):
                if self._moving(api, obj):
                    policy = "skip"
                if rid and policy not in ("detach-on-delete", "skip") and self.arm.exists(rid):
                    self.arm._drop(rid.lower())
                left = [f for f in meta.get("finalizers") or [] if f != ASO_FINALIZER] or None
                api.patch(res, ns, name, "merge", {"metadata": {"finalizers": left}}, None, MANAGER)
            return
        if ASO_FINALIZER not in (meta.get("finalizers") or []):
            finalizers = (meta.get("finalizers") or []) + [ASO_FINALIZER]
            api.patch(res, ns, name, "merge", {"metadata": {"finalizers": finalizers}}, None, MANAGER)
        owner_id, waiting = self._owner_id(api, obj, owner_kind)
        if waiting is None:
            waiting = self._config_ref(api, obj)
        if waiting is not None:
            return self._status(
                api, obj, False, "WaitingForOwner" if "wner" in waiting else "ReferenceNotFound", waiting
            )
        spec = obj.get("spec") or {}
        azure_name = spec.get("azureName") or ("default" if obj["kind"] == "StorageAccountsBlobService" else name)
        if owner_kind is None:
            rid = self.arm.rg_id(azure_name)
        else:
            rid = f"{owner_id}/{segment}/{azure_name}"
        if policy != "skip" and not self.arm.exists(rid):
            fields = {"location": spec["location"]} if spec.get("location") else {}
            self.arm.add(rid, tags=spec.get("tags") or {}, **fields)
            if obj["kind"] == "UserAssignedIdentity":
                self.arm.get(rid)["properties"].update(
                    {"clientId": str(uuid.uuid4()), "principalId": str(uuid.uuid4()), "tenantId": str(uuid.uuid4())}
                )
        elif policy != "skip":
            live = self.arm.get(rid)
            if spec.get("tags") is not None and live.get("tags") != spec.get("tags"):
                live["tags"] = dict(spec["tags"])  # ASO adopts an existing resource: its spec wins
        self._exports(api, obj, rid)
        self._status(api, obj, True, "Succeeded", "", id=rid)

    def _exports(self, api, obj, rid):
        """operatorSpec.configMaps: the values ASO exports, each into its ConfigMap/key, owned by the object."""
        wanted = ((obj.get("spec") or {}).get("operatorSpec") or {}).get("configMaps") or {}
        props = (self.arm.get(rid) or {}).get("properties") or {}
        for field, ref in wanted.items():
            if field == "oidcIssuerProfile":
                value = self.issuer_for(obj)
            else:
                value = props.get(field)
            if value is None:
                continue
            ns = obj["metadata"]["namespace"]
            cm = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": ref["name"],
                    "namespace": ns,
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
                "data": {ref["key"]: value},
            }
            live = None
            try:
                live = api.get("v1", "ConfigMap", ref["name"], ns)
            except ApiError:
                live = None
            if live is None or (live.get("data") or {}).get(ref["key"]) != value:
                api.patch(
                    api.resource_for("v1", "ConfigMap"), ns, ref["name"], "apply", cm, None, MANAGER, "Strict", True
                )

    def issuer_for(self, managed_cluster):
        """The OIDC issuer URL AKS gives a cluster (a stable URL per cluster, as AKS's is)."""
        name = managed_cluster["metadata"]["name"]
        return f"https://swedencentral.oic.prod-aks.azure.com/{self.arm.subscription}/{name}/"

    def _status(self, api, obj, ready, reason, message, **fields):
        live = api.get(obj["apiVersion"], obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"])
        old = _condition(live) or {}
        value = "True" if ready else "False"
        generation = live["metadata"].get("generation", 1)
        cond = {
            "type": "Ready",
            "status": value,
            "reason": reason,
            "message": message,
            "severity": "" if ready else "Warning",
            "observedGeneration": generation,
        }
        status = copy.deepcopy(live.get("status") or {})
        if all(old.get(k) == v for k, v in cond.items()) and all(status.get(k) == v for k, v in fields.items()):
            return
        cond["lastTransitionTime"] = old.get("lastTransitionTime") if old.get("status") == value else _now()
        status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"] + [cond]
        status.update(fields)
        res = api.resource_for(obj["apiVersion"], obj["kind"])
        api.patch(
            res, obj["metadata"]["namespace"], obj["metadata"]["name"], "merge", {"status": status}, "status", MANAGER
        )

    # ---- the capi_world plug-in -------------------------------------------------------------
    def provision(self, api, cluster, infra, control_plane):
        return self.cluster_ready(api, cluster, infra, control_plane)

    @staticmethod
    def delete(api, cluster, infra, control_plane):
        return None  # the ASO objects go with their owners (garbage collection); ASO deletes them in Azure

    @staticmethod
    def status(role):
        return None  # the contract's default fields

    # ---- CAPZ: ASO-managed clusters --------------------------------------------------------
    @staticmethod
    def _paused_clusters(api, ns):
        if ("cluster.x-k8s.io", "clusters") not in api._served:
            return []
        return [c for c in api.list("cluster.x-k8s.io/v1beta2", "Cluster", ns) if (c.get("spec") or {}).get("paused")]

    def _moving(self, api, obj):
        """CAPZ pauses the ASO resources of a paused Cluster (reconcile-policy skip) so that clusterctl move
        deletes nothing in Azure; an ASO object of CAPZ's deleted while a Cluster of its namespace is paused
        is one that moved (the skip annotation may not have been written yet when the move is quick)."""
        owners = {o.get("kind") for o in obj["metadata"].get("ownerReferences") or []}
        return bool(owners & set(CAPZ_ASO_KINDS)) and bool(self._paused_clusters(api, obj["metadata"]["namespace"]))

    def capz_resources(self, api, obj):
        if obj["metadata"].get("deletionTimestamp"):
            return
        ns = obj["metadata"]["namespace"]
        paused = bool(self._paused_clusters(api, ns))
        for item in (obj.get("spec") or {}).get("resources") or []:
            item = copy.deepcopy(item)
            meta = item.setdefault("metadata", {})
            meta["namespace"] = ns
            if paused:  # CAPZ's pause: the ASO resource is left alone while its Cluster moves
                meta.setdefault("annotations", {})[POLICY] = "skip"
            meta["ownerReferences"] = [
                {
                    "apiVersion": obj["apiVersion"],
                    "kind": obj["kind"],
                    "name": obj["metadata"]["name"],
                    "uid": obj["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
            try:
                res = api.resource_for(item["apiVersion"], item["kind"])
                live = api.objects.get(api._key(res, ns, meta["name"]))
                policy = ((live or {}).get("metadata", {}).get("annotations") or {}).get(POLICY)
                if live is None or live.get("spec") != item.get("spec") or (policy == "skip") != paused:
                    api.patch(res, ns, meta["name"], "apply", item, None, "capz-manager", "Strict", True)
            except ApiError:
                continue  # e.g. its CRD is not served: the cluster stays not ready (cluster_ready says why)

    def cluster_ready(self, api, cluster, infra, control_plane):
        """None when every ASO resource of the cluster's infrastructure and control plane is Ready, else why not."""
        managed = None
        for owner in (infra, control_plane):
            if owner.get("kind") not in CAPZ_ASO_KINDS:
                continue
            for item in (owner.get("spec") or {}).get("resources") or []:
                try:
                    res = api.resource_for(item["apiVersion"], item["kind"])
                except ApiError as exc:
                    return exc.message
                live = api.objects.get(api._key(res, owner["metadata"]["namespace"], item["metadata"]["name"]))
                if live is None or not aso_ready(live):
                    return "{} {} is not Ready yet".format(item["kind"], item["metadata"]["name"])
                if item["kind"] == "ManagedCluster":
                    managed = live["status"]["id"]
        if managed is not None:
            ns, name = cluster["metadata"]["namespace"], cluster["metadata"]["name"]
            workload = self.capi.workloads.get((api.url, ns, name))
            if workload is not None:
                self.aks[managed] = workload
        return None
