"""roles/teardown end to end for local-host: the Kubernetes side on the emulator, kind through a stand-in,
Docker through the Engine API double in tests/substrate/docker_double.py (no Docker engine here).

Every unsafe case of issue 9 is a decoy here, and must survive a real ansible-playbook run, --check first.
"""

from __future__ import annotations

import threading

import pytest
import yaml

from tests.integration.test_teardown_kube import CLUSTER, KS, FakeCapi, make_cluster, make_ks
from tests.substrate.docker_double import DockerDouble
from tests.substrate.fixtures import REPO, task_results
from tests.substrate.krops_marks import make_kind_marker

pytestmark = pytest.mark.slow
KIND = "io.x-k8s.kind.cluster"
R = "krops.platform.teardown : "


def world(kind_api, fake_bins, marker=("local-host", "mgmt")):
    make_ks(kind_api, "flux-system")
    make_ks(kind_api, "local-workload")
    make_cluster(kind_api, "local-management")
    make_cluster(kind_api, "local-workload")
    make_cluster(kind_api, "local-management-2")  # another Cluster on the same host: not named, never deleted
    if marker:
        make_kind_marker(kind_api, *marker)
    fake_bins.answer("kind", "get clusters", stdout="mgmt\n")
    fake_bins.answer("kind", "version", stdout="kind v0.27.0 go1.23 linux/amd64\n")
    docker = DockerDouble()
    docker.networks["kind"] = {"Id": "n" * 64, "labels": {}}
    # CAPD's management cluster: kind's cluster label with the exact name; the node has its anonymous /var volume
    docker.add_container(
        "local-management-control-plane-abc",
        {KIND: "local-management", "io.x-k8s.kind.role": "control-plane"},
        ["kind"],
        anonymous_volumes=1,
    )
    docker.add_container(
        "local-management-lb", {KIND: "local-management", "io.x-k8s.kind.role": "external-load-balancer"}, ["kind"]
    )
    docker.add_container("local-workload-lb", {KIND: "local-workload"}, ["kind"])  # CAPD removes it with the Cluster
    docker.add_container("krops-registry", {}, ["kind"])
    # decoys: names sharing the prefix, no label, another cluster's label, a named volume
    docker.add_container(
        "local-management-2-control-plane", {KIND: "local-management-2"}, ["kind"], anonymous_volumes=1
    )
    docker.add_container("local-managementdb", {}, ["kind"], volumes=["pgdata"])
    docker.add_container("local-management.backup", {})
    docker.add_container("my-postgres", {"com.example": "local-management"}, volumes=["pgdata"])
    docker.add_container("other-kind-control-plane", {KIND: "other-kind"}, ["kind"], anonymous_volumes=1)

    def capd_removes_workload():
        # Only once the Cluster is deleted (wait_for_event returns None at its timeout, and a --check run on a
        # loaded machine can outlast a short one: the load balancer must stay through it).
        if kind_api.wait_for_event(
            lambda t, o: t == "DELETED" and o["metadata"]["name"] == "local-workload", timeout=900
        ):
            docker.containers.pop("local-workload-lb", None)

    threading.Thread(target=capd_removes_workload, daemon=True).start()
    return docker


def play(kind_api, docker, tmp_path, **extra):
    variables = {
        "krops_environment": "local-host",
        "teardown_config_file": str(REPO / "bootstrap.toml"),
        "teardown_kind_kubeconfig": kind_api.kubeconfig_path,
        "teardown_mgmt_kubeconfig": str(tmp_path / "none.yaml"),
    }
    variables.update(extra)
    return [
        {
            "hosts": "localhost",
            "gather_facts": False,
            # The engine as a user points at it: DOCKER_HOST, which community.docker and krops.platform.engine_ping read.
            "environment": {"DOCKER_HOST": docker.url},
            "vars": variables,
            "roles": [{"role": "krops.platform.teardown"}],
        }
    ]


DECOYS = [
    "local-management-2-control-plane",
    "local-management.backup",
    "local-managementdb",
    "my-postgres",
    "other-kind-control-plane",
]


def test_local_host_teardown_removes_only_labelled_containers_with_their_volumes(
    kind_api, fake_bins, ansible_playbook, tmp_path
):
    docker = world(kind_api, fake_bins)
    anonymous = {v for v, info in docker.volumes.items() if info["anonymous"]}
    mine = set(docker.containers["local-management-control-plane-abc"]["volumes"])
    capi = FakeCapi(kind_api)
    try:
        rc, out, err = ansible_playbook(play(kind_api, docker, tmp_path), "--check")
        assert rc == 0, (_failed(out), err)
        assert sorted(docker.containers) == sorted(
            DECOYS
            + ["krops-registry", "local-management-control-plane-abc", "local-management-lb", "local-workload-lb"]
        )
        assert not [c for c in docker.calls if c[0] == "DELETE"]
        assert len(kind_api.list(*CLUSTER)) == 3
        rc, out, err = ansible_playbook(play(kind_api, docker, tmp_path))
    finally:
        capi.stop()
        docker.stop()
    assert rc == 0, (_failed(out), err)
    results = task_results(out)
    assert results[R + "Show the teardown plan"]["msg"][1:] == [
        "1. suspend every Flux Kustomization and Flux Operator object on the kind cluster",
        "2. delete the workload Clusters local-workload through the provider and wait (300s)",
        "3. delete the kind cluster mgmt (the controller host; marker kube-system/krops-bootstrap: environment "
        "local-host, kind cluster mgmt)",
        "4. remove the Docker containers labelled io.x-k8s.kind.cluster=local-management|local-workload and their "
        "anonymous volumes",
        "5. remove the registry container krops-registry (exact name from bootstrap.toml)",
        "6. remove the context krops-local-workload (and the cluster and user only it uses) from "
        "~/.kube/krops-local-workload.yaml; the file goes only when nothing else is left",
    ]
    assert results[R + "Show what the teardown leaves"]["msg"] == [
        "Docker network kind: kind creates it without a label for every kind cluster on the host and never deletes "
        "it; nothing proves krops owns it"
    ]
    # only the named workload Cluster went; the management Cluster and the lookalike stay
    assert sorted(c["metadata"]["name"] for c in kind_api.list(*CLUSTER)) == ["local-management", "local-management-2"]
    assert all(k["spec"]["suspend"] for k in kind_api.list(*KS))
    assert [c["argv"][:4] for c in fake_bins.calls("kind") if c["argv"][:1] == ["delete"]] == [
        ["delete", "cluster", "--name", "mgmt"]
    ]
    # every decoy survives; the labelled containers went with their anonymous volumes, other volumes stay
    assert sorted(docker.containers) == sorted(DECOYS)
    assert not mine & set(docker.volumes)
    assert anonymous - mine <= set(docker.volumes) and "pgdata" in docker.volumes
    assert "kind" in docker.networks
    # the containers were chosen through the API's exact label filter (JSON), never a name filter
    listings = [q for m, p, q in docker.calls if p == "/containers/json" and "filters" in q]
    assert listings and all('"name"' not in q["filters"][0] for q in listings)
    assert {q["filters"][0] for q in listings} == {
        '{"label": ["io.x-k8s.kind.cluster=local-management"]}',
        '{"label": ["io.x-k8s.kind.cluster=local-workload"]}',
    }
    deletes = [q for m, p, q in docker.calls if m == "DELETE" and p.startswith("/containers/")]
    assert deletes and all(q.get("v") in (["1"], ["true"], ["True"]) for q in deletes), deletes


@pytest.mark.parametrize(
    "marker, reason",
    [
        (
            None,
            "no ConfigMap kube-system/krops-bootstrap on the kind cluster: krops did not create it (or it predates "
            "the marker)",
        ),
        (
            ("local-talos", "mgmt"),
            "ConfigMap kube-system/krops-bootstrap names environment 'local-talos', not 'local-host'",
        ),
        (("local-host", "other"), "ConfigMap kube-system/krops-bootstrap names kind cluster 'other', not 'mgmt'"),
    ],
)
def test_a_kind_cluster_without_krops_marker_is_never_deleted(
    kind_api, fake_bins, ansible_playbook, tmp_path, marker, reason
):
    docker = world(kind_api, fake_bins, marker)
    capi = FakeCapi(kind_api)
    try:
        rc, out, err = ansible_playbook(play(kind_api, docker, tmp_path))
    finally:
        capi.stop()
        docker.stop()
    assert rc == 0, (_failed(out), err)
    assert f"kind cluster mgmt: {reason}" in task_results(out)[R + "Show what the teardown leaves"]["msg"]
    assert not [c for c in fake_bins.calls("kind") if c["argv"][:1] == ["delete"]]
    assert sorted(docker.containers) == sorted(DECOYS)


def test_no_host_answers_kind_is_not_deleted_and_labelled_containers_still_go(
    kind_api, fake_bins, ansible_playbook, tmp_path
):
    docker = world(kind_api, fake_bins)
    try:
        rc, out, err = ansible_playbook(
            play(kind_api, docker, tmp_path, teardown_kind_kubeconfig=str(tmp_path / "gone.yaml"))
        )
    finally:
        docker.stop()
    assert rc == 0, (_failed(out), err)
    assert not [c for c in fake_bins.calls("kind") if c["argv"][:1] == ["delete"]]
    assert (
        "kind cluster mgmt: the kind cluster did not answer, so nothing proves krops created it"
        in (task_results(out)[R + "Show what the teardown leaves"]["msg"])
    )
    assert sorted(docker.containers) == sorted(DECOYS)  # labelled for the named clusters: gone anyway


def test_the_docker_double_rejects_what_the_engine_rejects():
    from tests.substrate.docker_double import ApiError

    docker = DockerDouble()
    try:
        docker.add_container("c", {KIND: "x"}, volumes=["named"], anonymous_volumes=1)
        for query in ({"filters": ["label=x"]}, {"filters": ['{"labels": ["x"]}']}, {"filters": ['{"label": "x"}']}):
            with pytest.raises(ApiError) as caught:
                docker.handle("GET", "/containers/json", query, b"")
            assert caught.value.status == 400 and "invalid filter" in caught.value.message
        listed = docker.handle("GET", "/containers/json", {"filters": [f'{{"label": ["{KIND}=x"]}}']}, b"")[1]
        assert [c["Names"] for c in listed] == [["/c"]]
        assert docker.handle("GET", "/containers/json", {"filters": [f'{{"label": ["{KIND}=x-2"]}}']}, b"")[1] == []
        assert docker.handle("GET", "/containers/json", {"filters": [f'{{"label": {{"{KIND}": true}}}}']}, b"")[1]
        assert docker.handle("DELETE", "/volumes/named", {}, b"")[0] == 409
        assert docker.handle("DELETE", "/containers/c", {}, b"")[0] == 409  # running, no force
        assert docker.handle("DELETE", "/containers/c", {"force": ["1"], "v": ["1"]}, b"")[0] == 204
        assert list(docker.volumes) == ["named"]  # the anonymous volume went, the named one stays
        assert docker.handle("DELETE", "/volumes/named", {}, b"")[0] == 204
        assert docker.handle("DELETE", "/volumes/named", {}, b"")[0] == 404
    finally:
        docker.stop()


def test_kubeconfig_cleanup_keeps_other_contexts_and_deletes_only_an_empty_file(tmp_path, run_module):
    from ansible_collections.krops.platform.plugins.modules import teardown_host

    path = tmp_path / "config"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "krops-mgmt",
        "clusters": [
            {"name": "krops-mgmt", "cluster": {"server": "https://1"}},
            {"name": "work", "cluster": {"server": "https://2"}},
        ],
        "users": [{"name": "krops-mgmt-admin", "user": {"token": "a"}}, {"name": "me", "user": {"token": "b"}}],
        "contexts": [
            {"name": "krops-mgmt", "context": {"cluster": "krops-mgmt", "user": "krops-mgmt-admin"}},
            {"name": "work", "context": {"cluster": "work", "user": "me"}},
        ],
    }
    path.write_text(yaml.safe_dump(doc))
    args = {"config_file": str(REPO / "bootstrap.toml"), "environment": "aws", "cleanup_kubeconfig": str(path)}
    planned = run_module(teardown_host, args, check_mode=True)
    assert planned["changed"] is True and yaml.safe_load(path.read_text()) == doc
    result = run_module(teardown_host, args)
    assert result["removed"] == {"contexts": ["krops-mgmt"], "clusters": ["krops-mgmt"], "users": ["krops-mgmt-admin"]}
    assert result["file_removed"] is False
    left = yaml.safe_load(path.read_text())
    assert [c["name"] for c in left["contexts"]] == ["work"] and [c["name"] for c in left["clusters"]] == ["work"]
    assert [u["name"] for u in left["users"]] == ["me"]
    again = run_module(teardown_host, args)
    assert again["changed"] is False and path.exists()
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "contexts": [doc["contexts"][0]],
                "clusters": [doc["clusters"][0]],
                "users": [doc["users"][0]],
            }
        )
    )
    result = run_module(teardown_host, args)
    assert result["file_removed"] is True and not path.exists()


def _failed(out):
    return [
        (t["task"]["name"], h.get("msg"), h.get("stderr"))
        for p in out.get("plays", [])
        for t in p["tasks"]
        for h in t["hosts"].values()
        if h.get("failed")
    ]
