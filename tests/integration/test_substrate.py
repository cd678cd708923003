"""The test substrate itself: the Kubernetes emulator over real HTTP, moto, the registry, stand-ins."""

import copy
import json
import subprocess
import threading
import urllib.request

import pytest
from kubernetes import client, config, dynamic, watch
from kubernetes.client.rest import ApiException

from tests.substrate.fixtures import REPO, VENV_BIN, playbook_env, task_results

KS = ("kustomize.toolkit.fluxcd.io/v1", "Kustomization")
CLUSTER = ("cluster.x-k8s.io/v1beta2", "Cluster")


def dyn(emulator):
    return dynamic.DynamicClient(config.new_client_from_config(config_file=emulator.kubeconfig_path))


def kustomization(name, labels=None, depends=None):
    spec = {
        "interval": "5m",
        "path": "./mgmt/x",
        "prune": True,
        "sourceRef": {"kind": "OCIRepository", "name": "flux-system"},
    }
    if depends:
        spec["dependsOn"] = [{"name": d} for d in depends]
    return {
        "apiVersion": KS[0],
        "kind": KS[1],
        "metadata": {"name": name, "namespace": "flux-system", "labels": labels or {}},
        "spec": spec,
    }


def test_dynamic_client_crud_selectors_status_and_delete(kind_api):
    kind_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "flux-system"}})
    api = dyn(kind_api).resources.get(api_version=KS[0], kind=KS[1])
    created = api.create(body=kustomization("cert-manager", {"tier": "infra"}), namespace="flux-system")
    assert created.metadata.uid and created.metadata.resourceVersion and created.metadata.generation == 1
    api.create(body=kustomization("podinfo", {"tier": "apps"}), namespace="flux-system")

    listed = api.get(namespace="flux-system", label_selector="tier=infra")
    assert listed.kind == "KustomizationList"
    assert [i.metadata.name for i in listed.items] == ["cert-manager"]
    assert [i.metadata.name for i in api.get(label_selector="tier in (apps,x)").items] == ["podinfo"]
    assert [i.metadata.name for i in api.get(field_selector="metadata.name!=podinfo").items] == ["cert-manager"]

    # status subresource: a PUT to the main resource does not change status, /status does
    obj = api.get(name="cert-manager", namespace="flux-system").to_dict()
    obj["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    api.replace(body=obj, namespace="flux-system")
    assert (
        "status" not in kind_api.get(*KS, "cert-manager", "flux-system")
        or not kind_api.get(*KS, "cert-manager", "flux-system")["status"]
    )
    obj = api.get(name="cert-manager", namespace="flux-system").to_dict()
    obj["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    api.status.replace(body=obj, namespace="flux-system")
    assert kind_api.get(*KS, "cert-manager", "flux-system")["status"]["conditions"][0]["status"] == "True"

    # stale resourceVersion conflicts like a real API server
    obj["metadata"]["resourceVersion"] = "1"
    with pytest.raises(Exception) as conflict:
        api.replace(body=obj, namespace="flux-system")
    assert conflict.value.status == 409

    # merge patch bumps generation on spec changes
    patched = api.patch(
        name="podinfo",
        namespace="flux-system",
        body={"spec": {"suspend": True}},
        content_type="application/merge-patch+json",
    )
    assert patched.spec.suspend is True and patched.metadata.generation == 2

    # finalizers hold deletion until removed
    api.patch(
        name="podinfo",
        namespace="flux-system",
        body={"metadata": {"finalizers": ["x/y"]}},
        content_type="application/merge-patch+json",
    )
    api.delete(name="podinfo", namespace="flux-system")
    assert kind_api.get(*KS, "podinfo", "flux-system")["metadata"]["deletionTimestamp"]
    kind_api.clear_finalizers(*KS, "podinfo", "flux-system")
    assert not kind_api.exists(*KS, "podinfo", "flux-system")


def test_server_side_apply_creates_then_updates(kind_api):
    api = dyn(kind_api).resources.get(api_version=CLUSTER[0], kind=CLUSTER[1])
    body = {
        "apiVersion": CLUSTER[0],
        "kind": CLUSTER[1],
        "metadata": {"name": "local-workload", "namespace": "default"},
        "spec": {"paused": False},
    }
    api.server_side_apply(body=body, name="local-workload", namespace="default", field_manager="krops")
    body["spec"]["paused"] = True
    applied = api.server_side_apply(body=body, name="local-workload", namespace="default", field_manager="krops")
    assert applied.spec.paused is True


def test_namespace_must_exist_and_json_patch(kind_api):
    core = client.CoreV1Api(config.new_client_from_config(config_file=kind_api.kubeconfig_path))
    with pytest.raises(ApiException) as missing:
        core.create_namespaced_config_map("nowhere", {"metadata": {"name": "x"}})
    assert missing.value.status == 404 and 'namespaces \\"nowhere\\" not found' in missing.value.body
    core.create_namespaced_config_map("default", {"metadata": {"generateName": "run-"}, "data": {"a": "1"}})
    [cm] = core.list_namespaced_config_map("default").items
    assert cm.metadata.name.startswith("run-")
    core.patch_namespaced_config_map(cm.metadata.name, "default", [{"op": "add", "path": "/data/b", "value": "2"}])
    assert kind_api.get("v1", "ConfigMap", cm.metadata.name, "default")["data"] == {"a": "1", "b": "2"}
    core.delete_collection_namespaced_config_map("default")
    assert core.list_namespaced_config_map("default").items == []


def test_watch_streams_events_and_honours_timeout(kind_api):
    core = client.CoreV1Api(config.new_client_from_config(config_file=kind_api.kubeconfig_path))
    rv = core.list_namespaced_config_map("default").metadata.resource_version

    def later():
        kind_api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default"}})
        kind_api.remove("v1", "ConfigMap", "a", "default")

    threading.Timer(0.2, later).start()
    seen = [
        (e["type"], e["object"].metadata.name)
        for e in watch.Watch().stream(
            core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=1
        )
    ]
    assert seen == [("ADDED", "a"), ("DELETED", "a")]


def test_a_restored_snapshot_has_its_own_event_history_so_a_watch_replays_no_other_run(kind_api):
    """crash_world.CrashWorld.restore goes back to checkpoints in any order (the bootstrap points to the start, the
    teardown points to the bootstrapped state). As an API server, a watch from the resourceVersion of a list gets the
    changes after it in that history only: never an event of a run the restore undid. The history used to be cut to the
    snapshot's length, which kept a later run's events once an older snapshot had made it shorter: the fast crash
    matrix's teardown watch then saw a stale DELETED of the Cluster it had just deleted (and CAPI was still removing)."""

    def cm(name):
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}}

    def restore(saved):  # as CrashWorld.restore: a copy, so that the snapshot can be restored again
        kind_api._restore(copy.deepcopy(saved))

    start = kind_api._snapshot()
    for name in ("a", "b", "c"):
        kind_api.create(cm(name))
    later = kind_api._snapshot()  # three events after start
    restore(start)
    kind_api.create(cm("other-run"))  # a run from start: one event, the history is now shorter than later's
    restore(later)
    kind_api.remove("v1", "ConfigMap", "a", "default")  # a run from later, undone by the next restore
    restore(later)

    core = client.CoreV1Api(config.new_client_from_config(config_file=kind_api.kubeconfig_path))
    listed = core.list_namespaced_config_map("default")
    assert sorted(c.metadata.name for c in listed.items) == ["a", "b", "c"]

    def watched():
        """(type, name) of the events a watch from the list's resourceVersion gets within a second."""
        stream = watch.Watch().stream(
            core.list_namespaced_config_map,
            "default",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=1,
        )
        return [(e["type"], e["object"].metadata.name) for e in stream]

    assert watched() == []  # nothing happened since the list: no DELETED a, no ADDED other-run
    kind_api.remove("v1", "ConfigMap", "b", "default")  # what happens next is seen, once
    assert watched() == [("DELETED", "b")]


def test_two_emulators_are_independent(kube_cluster):
    kind, mgmt = kube_cluster("kind-mgmt"), kube_cluster("krops-mgmt")
    kind.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "only-kind", "namespace": "default"}})
    assert kind.port != mgmt.port
    assert not mgmt.exists("v1", "ConfigMap", "only-kind", "default")


def test_crd_creation_registers_the_kind(kube_cluster):
    api_server = kube_cluster("bare", crds=False)
    api_server.create(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"kind": "Widget", "plural": "widgets"},
                "versions": [{"name": "v1", "served": True, "storage": True}],
            },
        }
    )
    dyn(api_server).resources.get(api_version="example.com/v1", kind="Widget").create(
        body={"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}, namespace="default"
    )
    assert api_server.exists("example.com/v1", "Widget", "w", "default")


@pytest.mark.slow
def test_kubernetes_core_modules_drive_the_emulator(kind_api, ansible_playbook):
    """kubernetes.core.k8s / k8s_info: create, list by label, patch, wait on a status patched over HTTP, delete."""
    kind_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "flux-system"}})
    kc = kind_api.kubeconfig_path

    def controller():
        # Plays CAPI: once the Cluster exists, patches its status over HTTP (kubernetes.core has
        # no status-subresource patch; controllers use the /status endpoint like this).
        if kind_api.wait_for_event(lambda kind, obj: obj["kind"] == "Cluster", timeout=60):
            dyn(kind_api).resources.get(api_version=CLUSTER[0], kind=CLUSTER[1]).status.patch(
                name="local-workload",
                namespace="default",
                content_type="application/merge-patch+json",
                body={"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Provisioned"}]}},
            )

    threading.Thread(target=controller, daemon=True).start()
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "module_defaults": {"group/kubernetes.core.k8s": {"kubeconfig": kc}},
            "tasks": [
                {
                    "name": "create ks",
                    "kubernetes.core.k8s": {"definition": kustomization("cni", {"krops.io/env": "local-host"})},
                },
                {
                    "name": "create cluster",
                    "kubernetes.core.k8s": {
                        "definition": {
                            "apiVersion": CLUSTER[0],
                            "kind": CLUSTER[1],
                            "metadata": {
                                "name": "local-workload",
                                "namespace": "default",
                                "labels": {"fluxcd": "enabled"},
                            },
                            "spec": {"paused": False},
                        }
                    },
                },
                {
                    "name": "list by label",
                    "kubernetes.core.k8s_info": {
                        "api_version": KS[0],
                        "kind": KS[1],
                        "namespace": "flux-system",
                        "label_selectors": ["krops.io/env=local-host"],
                    },
                },
                {
                    "name": "merge patch",
                    "kubernetes.core.k8s": {
                        "state": "patched",
                        "merge_type": "merge",
                        "definition": {
                            "apiVersion": CLUSTER[0],
                            "kind": CLUSTER[1],
                            "metadata": {"name": "local-workload", "namespace": "default"},
                            "spec": {"paused": True},
                        },
                    },
                },
                {
                    "name": "json patch",
                    "kubernetes.core.k8s_json_patch": {
                        "api_version": KS[0],
                        "kind": KS[1],
                        "namespace": "flux-system",
                        "name": "cni",
                        "patch": [{"op": "add", "path": "/spec/suspend", "value": True}],
                    },
                },
                {
                    "name": "wait ready",
                    "kubernetes.core.k8s_info": {
                        "api_version": CLUSTER[0],
                        "kind": CLUSTER[1],
                        "namespace": "default",
                        "name": "local-workload",
                        "wait": True,
                        "wait_timeout": 20,
                        "wait_sleep": 1,
                        "wait_condition": {"type": "Ready", "status": "True"},
                    },
                },
                {
                    "name": "delete ks",
                    "kubernetes.core.k8s": {
                        "state": "absent",
                        "api_version": KS[0],
                        "kind": KS[1],
                        "namespace": "flux-system",
                        "name": "cni",
                    },
                },
                {
                    "name": "delete cluster",
                    "kubernetes.core.k8s": {
                        "state": "absent",
                        "api_version": CLUSTER[0],
                        "kind": CLUSTER[1],
                        "namespace": "default",
                        "name": "local-workload",
                        "wait": True,
                        "wait_timeout": 20,
                        "wait_sleep": 1,
                    },
                },
            ],
        }
    ]
    rc, output, stderr = ansible_playbook(play)
    results = task_results(output)
    assert rc == 0, (stderr, json.dumps(output)[-4000:])
    assert [r["metadata"]["name"] for r in results["list by label"]["resources"]] == ["cni"]
    assert results["json patch"]["result"]["spec"]["suspend"] is True
    assert results["merge patch"]["result"]["spec"]["paused"] is True
    assert results["wait ready"]["resources"][0]["status"]["conditions"][0]["type"] == "Ready"
    assert not kind_api.exists(*KS, "cni", "flux-system")
    assert not kind_api.exists(*CLUSTER, "local-workload", "default")


def test_moto_server_answers_boto3(moto):
    import boto3

    ec2 = boto3.client("ec2", endpoint_url=moto, region_name="eu-north-1")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    assert [v["VpcId"] for v in ec2.describe_vpcs(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Vpcs"]] == [vpc]


def test_registry_serves_v2(oci_registry):
    with urllib.request.urlopen(f"http://{oci_registry}/v2/_catalog") as answer:
        assert json.load(answer) == {"repositories": []}


def test_fake_bins_record_argv_env_and_stdin(fake_bins):
    fake_bins.answer("kind", match="get clusters", stdout="mgmt\n")
    out = subprocess.run(
        ["kind", "get", "clusters"],
        capture_output=True,
        text=True,
        input="secret",
        check=True,
        env={"PATH": fake_bins.path_env, "KROPS_X": "1"},
    )
    assert out.stdout == "mgmt\n"
    [call] = fake_bins.calls("kind")
    assert call["argv"] == ["get", "clusters"] and call["env"]["KROPS_X"] == "1" and call["stdin"] == "secret"


def test_server_side_dry_run_answers_without_changing_anything(kind_api):
    api = dyn(kind_api).resources.get(api_version=CLUSTER[0], kind=CLUSTER[1])
    body = {"apiVersion": CLUSTER[0], "kind": CLUSTER[1], "metadata": {"name": "c", "namespace": "default"}}
    answer = api.create(body=body, namespace="default", query_params=[("dryRun", "All")])
    assert answer.metadata.name == "c" and not kind_api.exists(*CLUSTER, "c", "default")
    api.create(body=body, namespace="default")
    version = kind_api.get(*CLUSTER, "c", "default")["metadata"]["resourceVersion"]
    api.delete(name="c", namespace="default", query_params=[("dryRun", "All")])
    assert kind_api.get(*CLUSTER, "c", "default")["metadata"]["resourceVersion"] == version
    assert kind_api.dry_runs == [
        ("POST", "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/clusters"),
        ("DELETE", "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/clusters/c"),
    ]


def test_a_playbook_run_from_a_deep_test_folder_starts_ansibles_rpc_server(tmp_path):
    """ansible-core's controller listens on a unix socket under TMPDIR (multiprocessing's
    pymp-XXXXXXXX/listener-XXXXXXXX) and gives up after 5 s with "Local RPC server did not start"
    when the bind fails. An xdist worker's tmp_path with a test's subfolder is longer than the 107
    bytes a socket path may have: playbook_env must hand ansible a TMPDIR short enough to bind in."""
    deep = tmp_path / ("d" * 60) / "cold"
    deep.mkdir(parents=True)
    play = deep / "play.yml"
    play.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n    - ansible.builtin.debug: {msg: up}\n")
    env = playbook_env(deep)
    assert len(env["TMPDIR"]) + len("/pymp-xxxxxxxx/listener-xxxxxxxx") < 108, env["TMPDIR"]
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), str(play), "-i", "localhost,", "-c", "local"],
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, (proc.stdout[-1500:], proc.stderr[-1500:])
    assert "Local RPC server" not in proc.stderr


def test_the_suites_moto_checks_eks_role_arns_as_moto_does_and_loads_no_public_amis(moto):
    """tests/substrate/moto_server.py reads the partitions once for moto's role ARN check: an ARN of an unknown
    partition is still refused with moto's message, a good one still accepted; and no public AMI is loaded."""
    import boto3
    from botocore.exceptions import ClientError

    eks = boto3.client("eks", endpoint_url=moto, region_name="eu-north-1")
    ec2 = boto3.client("ec2", endpoint_url=moto, region_name="eu-north-1")
    vpc = {
        "subnetIds": [
            ec2.create_subnet(VpcId=ec2.describe_vpcs()["Vpcs"][0]["VpcId"], CidrBlock="172.31.96.0/20")["Subnet"][
                "SubnetId"
            ]
        ]
    }
    bad = "arn:nowhere:iam::123456789012:role/eks"
    with pytest.raises(ClientError) as refused:
        eks.create_cluster(name="a", roleArn=bad, resourcesVpcConfig=vpc)
    assert refused.value.response["Error"]["Code"] == "InvalidParameterException"
    assert refused.value.response["Error"]["Message"] == f"Invalid Role Arn: '{bad}'"
    made = eks.create_cluster(name="b", roleArn="arn:aws:iam::123456789012:role/eks", resourcesVpcConfig=vpc)
    assert made["cluster"]["status"] in ("CREATING", "ACTIVE")
    assert ec2.describe_images(Owners=["amazon"])["Images"] == []
