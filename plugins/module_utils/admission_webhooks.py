# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The providers' defaulting webhooks (each mutates a copy; ported from the Default functions) and the
table of every kind's webhooks (``WEBHOOKS``), read by module_utils/admission.py.
"""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import capi
from ansible_collections.krops.platform.plugins.module_utils.admission_checks import (
    ADDONS,
    BOOTSTRAP,
    CAAPH,
    CACPPT,
    CAPA,
    CAPG,
    CAPI,
    CAPT,
    CAPZ,
    CONTROLPLANE,
    CORE,
    INFRA,
    get_path,
    object_name,
    set_default,
)


def _default_labels_cluster_name(obj):
    obj.setdefault("metadata", {}).setdefault("labels", {})["cluster.x-k8s.io/cluster-name"] = (
        get_path(obj, "spec", "clusterName") or ""
    )


def _default_replicas(obj):
    spec = obj.setdefault("spec", {})
    if spec.get("replicas") is None:
        ann = get_path(obj, "metadata", "annotations") or {}
        low = ann.get("cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size")
        high = ann.get("cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size")
        spec["replicas"] = int(low) if low is not None and high is not None and str(low).isdigit() else 1


def _default_template_version(obj):
    version = get_path(obj, "spec", "template", "spec", "version")
    if version and not version.startswith("v"):
        obj["spec"]["template"]["spec"]["version"] = "v" + version


def _default_machine_pool(obj):
    _default_labels_cluster_name(obj)
    _default_replicas(obj)
    set_default(obj, ["spec", "template", "spec", "deletion", "nodeDeletionTimeoutSeconds"], 10)
    _default_template_version(obj)


def _default_machine_deployment(obj):
    _default_labels_cluster_name(obj)
    _default_replicas(obj)
    spec = obj["spec"]
    spec.setdefault("selector", {})  # before spec.rollout, as upstream's defaulting orders the fields
    set_default(obj, ["spec", "rollout", "strategy", "type"], "RollingUpdate")
    if spec["rollout"]["strategy"]["type"] == "RollingUpdate":
        rolling = spec["rollout"]["strategy"].setdefault("rollingUpdate", {})
        rolling.setdefault("maxSurge", 1)
        rolling.setdefault("maxUnavailable", 0)
    _default_selector(obj, "cluster.x-k8s.io/deployment-name", object_name(obj))
    _default_template_version(obj)


def _default_machine_set(obj):
    _default_labels_cluster_name(obj)
    _default_replicas(obj)
    _default_selector(obj, "cluster.x-k8s.io/set-name", object_name(obj)[:63])
    _default_template_version(obj)


def _default_selector(obj, name_label, name):
    """spec.selector.matchLabels and spec.template.metadata.labels of a MachineDeployment or MachineSet: its own
    name label when the selector is empty, and always the cluster's name."""
    spec = obj["spec"]
    selector = spec.setdefault("selector", {})
    match = selector.setdefault("matchLabels", {})
    labels = spec.setdefault("template", {}).setdefault("metadata", {}).setdefault("labels", {})
    if not match and not selector.get("matchExpressions"):
        match[name_label] = name
        labels[name_label] = name
    match["cluster.x-k8s.io/cluster-name"] = spec.get("clusterName") or ""
    labels["cluster.x-k8s.io/cluster-name"] = spec.get("clusterName") or ""


def _default_mhc(obj):
    _default_labels_cluster_name(obj)
    set_default(obj, ["spec", "checks", "nodeStartupTimeoutSeconds"], 600)


def _default_kcp(obj):
    spec = obj.setdefault("spec", {})
    if spec.get("replicas") is None:
        spec["replicas"] = 1
    if not str(spec.get("version", "")).startswith("v"):
        spec["version"] = "v" + str(spec.get("version", ""))
    strategy = spec.setdefault("rollout", {}).setdefault("strategy", {})
    strategy["type"] = "RollingUpdate"
    strategy.setdefault("rollingUpdate", {}).setdefault("maxSurge", 1)


def _default_dev_cluster(obj):
    backend = obj.setdefault("spec", {}).setdefault("backend", {})
    if backend.get("inMemory") is None and backend.get("docker") is None:
        backend["docker"] = {}
    if backend.get("docker") is not None:
        set_default(obj, ["spec", "controlPlaneEndpoint", "port"], 6443)
        for domain in backend["docker"].get("failureDomains") or []:
            domain.setdefault("controlPlane", False)


def _default_amcp(obj):
    # EKS names: eks.GenerateEKSName; only its presence matters to the rules below.
    set_default(
        obj, ["spec", "eksClusterName"], "{}_{}".format(get_path(obj, "metadata", "namespace") or "", object_name(obj))
    )
    spec = obj["spec"]
    spec.setdefault("identityRef", {"kind": "AWSClusterControllerIdentity", "name": "default"})
    spec["bootstrapSelfManagedAddons"] = True


def _default_ammp(obj):
    set_default(
        obj,
        ["spec", "eksNodegroupName"],
        "{}_{}".format(get_path(obj, "metadata", "namespace") or "", object_name(obj)),
    )
    if get_path(obj, "spec", "updateConfig") is None:
        obj["spec"]["updateConfig"] = {"maxUnavailable": 1}


def _default_gcp_cp(obj):
    # generateGKEName: <namespace>-<name with . as ->, or "capg-" and a 27-character hash when that is 40 or longer
    name = "{}-{}".format(get_path(obj, "metadata", "namespace") or "", object_name(obj).replace(".", "-"))
    set_default(obj, ["spec", "clusterName"], name if len(name) < 40 else "capg-" + "0" * 27)


def _default_hcp(obj):
    spec = obj.setdefault("spec", {})
    if not spec.get("releaseNamespace"):
        spec["releaseNamespace"] = "default"
    options = spec.setdefault("options", {})
    if options.get("atomic"):
        options["wait"] = True
    options.setdefault("timeout", "10m0s")


def _default_tcp(obj):
    spec = obj.setdefault("spec", {})
    if spec.get("replicas") is None:
        spec["replicas"] = 1
    set_default(obj, ["spec", "infrastructureTemplate", "namespace"], get_path(obj, "metadata", "namespace") or "")
    if not str(spec.get("version", "")).startswith("v"):
        spec["version"] = "v" + str(spec.get("version", ""))
    strategy = spec.get("rolloutStrategy") or {}
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        strategy.setdefault("rollingUpdate", {}).setdefault("maxSurge", 1)
    spec["rolloutStrategy"] = strategy


def _default_provider(obj):
    namespace = get_path(obj, "metadata", "namespace") or ""
    for key in ("configSecret", "additionalManifests"):
        ref = get_path(obj, "spec", key)
        if isinstance(ref, dict) and not ref.get("namespace"):
            ref["namespace"] = namespace


# (group, kind) -> (defaulting webhook or None, validating webhook name or None, source of both).
WEBHOOKS = {
    (CORE, "Cluster"): (None, "validation.cluster.cluster.x-k8s.io", CAPI + ("internal/webhooks/cluster.go",)),
    (CORE, "MachinePool"): (
        _default_machine_pool,
        "validation.machinepool.cluster.x-k8s.io",
        CAPI + ("internal/webhooks/machinepool.go",),
    ),
    (CORE, "MachineDeployment"): (
        _default_machine_deployment,
        "validation.machinedeployment.cluster.x-k8s.io",
        CAPI + ("internal/webhooks/machinedeployment.go",),
    ),
    (CORE, "MachineSet"): (
        _default_machine_set,
        "validation.machineset.cluster.x-k8s.io",
        CAPI + ("internal/webhooks/machineset.go",),
    ),
    (CORE, "MachineHealthCheck"): (
        _default_mhc,
        "validation.machinehealthcheck.cluster.x-k8s.io",
        CAPI + ("internal/webhooks/machinehealthcheck.go",),
    ),
    (CONTROLPLANE, "KubeadmControlPlane"): (
        _default_kcp,
        "validation.kubeadmcontrolplane.controlplane.cluster.x-k8s.io",
        CAPI + ("controlplane/kubeadm/internal/webhooks/kubeadmcontrolplane.go",),
    ),
    (BOOTSTRAP, "KubeadmConfigTemplate"): (
        None,
        "validation.kubeadmconfigtemplate.bootstrap.cluster.x-k8s.io",
        CAPI + ("bootstrap/kubeadm/internal/webhooks/kubeadmconfigtemplate.go",),
    ),
    (INFRA, "DevCluster"): (
        _default_dev_cluster,
        "validation.devcluster.infrastructure.cluster.x-k8s.io",
        CAPI + ("test/infrastructure/docker/internal/webhooks/devcluster.go",),
    ),
    (INFRA, "DevMachineTemplate"): (
        None,
        "validation.devmachinetemplate.infrastructure.cluster.x-k8s.io",
        CAPI + ("test/infrastructure/docker/internal/webhooks/devmachinetemplate.go",),
    ),
    (CONTROLPLANE, "AWSManagedControlPlane"): (
        _default_amcp,
        "validation.awsmanagedcontrolplanes.controlplane.cluster.x-k8s.io",
        CAPA + ("controlplane/eks/webhooks/awsmanagedcontrolplane_webhook.go",),
    ),
    (INFRA, "AWSManagedMachinePool"): (
        _default_ammp,
        "validation.awsmanagedmachinepool.infrastructure.cluster.x-k8s.io",
        CAPA + ("exp/webhooks/awsmanagedmachinepool_webhook.go",),
    ),
    (INFRA, "AzureASOManagedCluster"): (
        None,
        "validation.azureasomanagedcluster.infrastructure.cluster.x-k8s.io",
        CAPZ + ("internal/webhooks/azureasomanagedcluster_webhook.go",),
    ),
    (INFRA, "AzureASOManagedControlPlane"): (
        None,
        "validation.azureasomanagedcontrolplane.infrastructure.cluster.x-k8s.io",
        CAPZ + ("internal/webhooks/azureasomanagedcontrolplane_webhook.go",),
    ),
    (INFRA, "AzureASOManagedMachinePool"): (
        None,
        "validation.azureasomanagedmachinepool.infrastructure.cluster.x-k8s.io",
        CAPZ + ("internal/webhooks/azureasomanagedmachinepool_webhook.go",),
    ),
    (INFRA, "GCPManagedCluster"): (
        None,
        "vgcpmanagedcluster.kb.io",
        CAPG + ("exp/webhooks/gcpmanagedcluster_webhook.go",),
    ),
    (INFRA, "GCPManagedControlPlane"): (
        _default_gcp_cp,
        "vgcpmanagedcontrolplane.kb.io",
        CAPG + ("exp/webhooks/gcpmanagedcontrolplane_webhook.go",),
    ),
    (INFRA, "GCPManagedMachinePool"): (
        None,
        "vgcpmanagedmachinepool.kb.io",
        CAPG + ("exp/webhooks/gcpmanagedmachinepool_webhook.go",),
    ),
    (INFRA, "TinkerbellMachineTemplate"): (
        None,
        "validation.tinkerbellmachinetemplate.infrastructure.x-k8s.io",
        CAPT + ("api/v1beta1/tinkerbellmachinetemplate_webhook.go",),
    ),
    (CONTROLPLANE, "TalosControlPlane"): (
        _default_tcp,
        "validate.taloscontrolplane.controlplane.cluster.x-k8s.io",
        CACPPT + ("api/v1alpha3/taloscontrolplane_webhook.go",),
    ),
    (ADDONS, "HelmChartProxy"): (
        _default_hcp,
        "vhelmchartproxy.kb.io",
        CAAPH + ("api/v1alpha1/helmchartproxy_webhook.go",),
    ),
}
# The operator's providers: defaulting only (their ValidateCreate returns nil), cluster-api-operator
# internal/webhook/*provider_webhook.go and provider_webhook.go setDefaultProviderSpec @ v0.28.0.
for _kind in capi.PROVIDER_KINDS:
    WEBHOOKS[("operator.cluster.x-k8s.io", _kind)] = (
        _default_provider,
        None,
        ("kubernetes-sigs/cluster-api-operator", "v0.28.0", "internal/webhook/provider_webhook.go"),
    )
