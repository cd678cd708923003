# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The emulated Cluster API (tests/substrate/capi_world.py): providers, clusters, kubeconfigs, deletion."""

from __future__ import annotations

import base64

import pytest
import yaml

from tests.substrate.capi_world import FINALIZER, CapiController
from tests.substrate.fixtures import REPO
from tests.substrate.flux_world import World, condition, ssa_apply

OP = "operator.cluster.x-k8s.io/v1alpha2"


def provider(kind, name, namespace):
    return {
        "apiVersion": OP,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"version": "v1.11.3"},
    }


@pytest.fixture
def mgmt(strict_cluster):
    api = strict_cluster("mgmt", bundles=("capi-operator",))
    for ns in ("capi-system", "capi-kubeadm-bootstrap-system", "capi-kubeadm-control-plane-system", "capd-system"):
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    return api


def world_for(api, strict_cluster):
    world = World()
    world.add_cluster(api)
    capi = CapiController(world, spawn=strict_cluster)
    return world, capi


def test_providers_become_ready_once_their_objects_exist_and_install_their_crds(mgmt, strict_cluster):
    world, _workload = world_for(mgmt, strict_cluster)
    mgmt.create(provider("InfrastructureProvider", "docker", "capd-system"))
    world.settle()
    docker = condition(mgmt.get(OP, "InfrastructureProvider", "docker", "capd-system"))
    assert (docker["status"], docker["reason"]) == ("False", "WaitingForCoreProviderReady")
    assert ("infrastructure.cluster.x-k8s.io", "devclusters") not in mgmt.resources
    mgmt.create(provider("CoreProvider", "cluster-api", "capi-system"))
    mgmt.create(provider("BootstrapProvider", "kubeadm", "capi-kubeadm-bootstrap-system"))
    mgmt.create(provider("ControlPlaneProvider", "kubeadm", "capi-kubeadm-control-plane-system"))
    mgmt.create(provider("InfrastructureProvider", "nonesuch", "capd-system"))
    world.settle()
    for kind, name, ns in (
        ("CoreProvider", "cluster-api", "capi-system"),
        ("BootstrapProvider", "kubeadm", "capi-kubeadm-bootstrap-system"),
        ("InfrastructureProvider", "docker", "capd-system"),
    ):
        obj = mgmt.get(OP, kind, name, ns)
        assert condition(obj)["status"] == "True" and obj["status"]["installedVersion"] == "v1.11.3"
    assert condition(mgmt.get(OP, "InfrastructureProvider", "nonesuch", "capd-system"))["reason"] == "UnknownProvider"
    for crd in (
        "clusters.cluster.x-k8s.io",
        "kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io",
        "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
        "devclusters.infrastructure.cluster.x-k8s.io",
    ):
        assert mgmt.exists("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd)


def _load_cluster(api, name):
    folder = REPO / "mgmt" / "local-host" / "clusters" / name
    for rel in ("cluster.yaml", "control-plane.yaml", "workers.yaml"):
        for doc in yaml.safe_load_all((folder / rel).read_text()):
            ssa_apply(api, doc, "kustomize-controller")


def test_cluster_provisioned_with_a_kubeconfig_to_another_api_server_and_deleted(mgmt, strict_cluster):
    from kubernetes import config
    from kubernetes.dynamic import DynamicClient

    world, capi = world_for(mgmt, strict_cluster)
    for kind, name, ns in (
        ("CoreProvider", "cluster-api", "capi-system"),
        ("BootstrapProvider", "kubeadm", "capi-kubeadm-bootstrap-system"),
        ("ControlPlaneProvider", "kubeadm", "capi-kubeadm-control-plane-system"),
        ("InfrastructureProvider", "docker", "capd-system"),
    ):
        mgmt.create(provider(kind, name, ns))
    world.settle()
    _load_cluster(mgmt, "local-workload")  # the real tree's Cluster, DevCluster, KubeadmControlPlane, workers
    world.settle()
    cluster = mgmt.get("cluster.x-k8s.io/v1beta2", "Cluster", "local-workload", "default")
    assert cluster["status"]["phase"] == "Provisioned"
    assert cluster["status"]["initialization"] == {"infrastructureProvisioned": True, "controlPlaneInitialized": True}
    assert FINALIZER in cluster["metadata"]["finalizers"]
    secret = mgmt.get("v1", "Secret", "local-workload-kubeconfig", "default")
    assert secret["type"] == "cluster.x-k8s.io/secret"
    assert secret["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == "local-workload"
    kubeconfig = base64.b64decode(secret["data"]["value"]).decode()
    client = DynamicClient(config.new_client_from_config_dict(yaml.safe_load(kubeconfig)))
    namespaces = client.resources.get(api_version="v1", kind="Namespace").get()
    assert {"default", "kube-system"} <= {n.metadata.name for n in namespaces.items}
    workload = world.cluster_for_kubeconfig(kubeconfig)
    assert workload is not mgmt and workload.name == "local-workload"
    assert mgmt.get("infrastructure.cluster.x-k8s.io/v1beta2", "DevCluster", "local-workload", "default")["status"][
        "initialization"
    ] == {"provisioned": True}
    # a decoy cluster's objects survive the deletion of this one
    _load_cluster(mgmt, "local-management")
    world.settle()
    mgmt.remove("cluster.x-k8s.io/v1beta2", "Cluster", "local-workload", "default")
    world.settle()
    assert not mgmt.exists("cluster.x-k8s.io/v1beta2", "Cluster", "local-workload", "default")
    for api_version, kind, name in (
        ("infrastructure.cluster.x-k8s.io/v1beta2", "DevCluster", "local-workload"),
        ("controlplane.cluster.x-k8s.io/v1beta2", "KubeadmControlPlane", "local-workload-control-plane"),
        ("cluster.x-k8s.io/v1beta2", "MachineDeployment", "local-workload-md-0"),
        ("v1", "Secret", "local-workload-kubeconfig"),
    ):
        assert not mgmt.exists(api_version, kind, name, "default"), (kind, name)
    assert workload.url not in world.clusters
    for api_version, kind, name in (
        ("cluster.x-k8s.io/v1beta2", "Cluster", "local-management"),
        ("infrastructure.cluster.x-k8s.io/v1beta2", "DevCluster", "local-management"),
        ("v1", "Secret", "local-management-kubeconfig"),
    ):
        assert mgmt.exists(api_version, kind, name, "default"), (kind, name)
    assert capi.workloads


def test_cluster_waits_for_its_infrastructure(mgmt, strict_cluster):
    world, _workload = world_for(mgmt, strict_cluster)
    mgmt.install_bundle("cluster-api", "docker", "kubeadm-control-plane")
    docs = list(yaml.safe_load_all((REPO / "mgmt/local-host/clusters/local-workload/cluster.yaml").read_text()))
    ssa_apply(mgmt, docs[0], "kustomize-controller")  # the Cluster only, no DevCluster
    world.settle()
    cluster = mgmt.get("cluster.x-k8s.io/v1beta2", "Cluster", "local-workload", "default")
    assert cluster["status"]["phase"] == "Provisioning"
    assert (
        condition(cluster, "InfrastructureReady")["message"]
        == "infrastructureRef default/local-workload does not exist yet"
    )
    assert not mgmt.exists("v1", "Secret", "local-workload-kubeconfig", "default")
