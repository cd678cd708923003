"""module_utils.kube on the emulator: probes, readiness and the event-driven wait."""

import threading
import time

import pytest

from ansible_collections.krops.platform.plugins.module_utils import kube

CLUSTER = ("cluster.x-k8s.io/v1beta2", "Cluster")


def make_cluster(api, name):
    api.create({"apiVersion": CLUSTER[0], "kind": CLUSTER[1], "metadata": {"name": name, "namespace": "default"}})


def all_ready(objects):
    states = {name: kube.readiness(obj)[0] for (dummy, name), obj in objects.items()}
    return bool(states) and all(states.values()), states


def test_watch_until_returns_on_the_event_not_on_a_poll(kind_api):
    make_cluster(kind_api, "a")
    client = kube.connect(kind_api.kubeconfig_path)
    threading.Timer(0.3, lambda: kind_api.set_condition(*CLUSTER, "a", "default")).start()
    start = time.monotonic()
    state = kube.watch_until(client, *CLUSTER, "default", all_ready, timeout=10)
    assert state == {"a": True}
    assert time.monotonic() - start < 2


def test_watch_until_times_out_with_state_and_reports_progress(kind_api):
    make_cluster(kind_api, "slow")
    client = kube.connect(kind_api.kubeconfig_path)
    progress = []
    with pytest.raises(kube.WaitTimeout) as timeout:
        kube.watch_until(client, *CLUSTER, "default", all_ready, timeout=2.5, on_progress=progress.append,
                         progress_every=1)
    assert timeout.value.state == {"slow": False}
    assert len(progress) >= 2 and progress[0] == {"slow": False}


def test_probe_classifies_present_absent_unknown(kind_api):
    client = kube.connect(kind_api.kubeconfig_path)
    assert kube.probe(client, *CLUSTER, "default")[0] == kube.ABSENT
    assert kube.probe(client, "example.com/v1", "Nothing", "default")[0] == kube.ABSENT
    make_cluster(kind_api, "x")
    state, objects, error = kube.probe(client, *CLUSTER, "default")
    assert state == kube.PRESENT and objects[0]["metadata"]["name"] == "x" and error is None
    kind_api.inject_failure("GET", r"/clusters$", 500, "etcd is sad")
    assert kube.probe(client, *CLUSTER, "default") == (kube.UNKNOWN, [], "etcd is sad")


def test_connect_errors_name_the_target(tmp_path):
    with pytest.raises(kube.KubeError, match="kubeconfig .*missing.yaml does not exist"):
        kube.connect(str(tmp_path / "missing.yaml"))
    dead = tmp_path / "dead.yaml"
    dead.write_text("apiVersion: v1\nkind: Config\ncurrent-context: x\nclusters: [{name: x, cluster: {server: 'http://127.0.0.1:9'}}]\n"
                    "contexts: [{name: x, context: {cluster: x, user: x}}]\nusers: [{name: x, user: {token: t}}]\n")
    with pytest.raises(kube.KubeError, match=r"cluster at http://127.0.0.1:9 \(context x in .*dead.yaml\) does not answer"):
        kube.connect(str(dead), "x")
