"""module_utils.kube on the emulator: probes, readiness and the event-driven wait."""

import os
import stat
import threading
import time

import pytest
import yaml

from ansible_collections.krops.platform.plugins.module_utils import capi

from ansible_collections.krops.platform.plugins.module_utils import kubeconfigs
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
        kube.watch_until(
            client, *CLUSTER, "default", all_ready, timeout=2.5, on_progress=progress.append, progress_every=1
        )
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
    dead.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\nclusters: [{name: x, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "contexts: [{name: x, context: {cluster: x, user: x}}]\nusers: [{name: x, user: {token: t}}]\n"
    )
    with pytest.raises(
        kube.KubeError, match=r"cluster at http://127.0.0.1:9 \(context x in .*dead.yaml\) does not answer"
    ):
        kube.connect(str(dead), "x")


# --- request timeouts: no wait outlives its budget by more than one request timeout ------------


def test_a_stalled_server_cannot_hold_a_wait_past_its_budget(kind_api, tmp_path):
    make_cluster(kind_api, "stuck")
    client = kube.connect(kind_api.kubeconfig_path, request_timeout=2)
    kind_api.inject_stall("GET", r"/clusters$", seconds=60)  # lists and watches alike get no answer
    start = time.monotonic()
    with pytest.raises(kube.WaitTimeout) as err:
        kube.watch_until(client, *CLUSTER, "default", all_ready, timeout=5)
    elapsed = time.monotonic() - start
    kind_api.clear_stalls()
    assert elapsed < 5 + 2 + 0.5, elapsed
    assert str(err.value).startswith(
        "timed out after 5s waiting for cluster.x-k8s.io/v1beta2 Cluster (the API server stopped answering: "
    )


def test_a_server_that_dies_mid_wait_ends_in_a_wait_timeout_not_a_traceback(kube_cluster):
    api = kube_cluster("dying")
    make_cluster(api, "a")
    client = kube.connect(api.kubeconfig_path, request_timeout=2)
    threading.Timer(0.5, api.stop).start()
    start = time.monotonic()
    with pytest.raises(kube.WaitTimeout, match=r"the API server stopped answering"):
        kube.watch_until(client, *CLUSTER, "default", all_ready, timeout=3)
    assert time.monotonic() - start < 3 + 2 + 0.5


def test_a_final_error_answer_ends_the_wait_at_once(kind_api):
    client = kube.connect(kind_api.kubeconfig_path)
    kind_api.inject_failure("GET", r"/clusters$", 403, "forbidden here", times=100)
    start = time.monotonic()
    with pytest.raises(kube.KubeError, match="cluster.x-k8s.io/v1beta2 Cluster: forbidden here"):
        kube.watch_until(client, *CLUSTER, "default", all_ready, timeout=30)
    assert time.monotonic() - start < 2


# --- auth options in kubernetes.core's order of precedence ------------------------------------


def test_auth_parameters_win_over_k8s_auth_environment():
    environ = {
        "K8S_AUTH_KUBECONFIG": "/env/config",
        "K8S_AUTH_CONTEXT": "env-ctx",
        "K8S_AUTH_HOST": "https://env",
        "K8S_AUTH_VERIFY_SSL": "no",
        "K8S_AUTH_IMPERSONATE_GROUPS": "a,b",
        "K8S_AUTH_SSL_CA_CERT": "/env/ca",
    }
    auth = kube.auth_options({"context": "param-ctx", "host": None}, environ)
    assert auth == {
        "kubeconfig": "/env/config",
        "context": "param-ctx",
        "host": "https://env",
        "validate_certs": False,
        "impersonate_groups": ["a", "b"],
        "ca_cert": "/env/ca",
    }
    assert kube.auth_options({"validate_certs": True}, {"K8S_AUTH_VALIDATE_CERTS": "false"})["validate_certs"] is True
    with pytest.raises(kube.KubeError, match="request_timeout must be at least 1 second, got 0"):
        kube.auth_options({"request_timeout": 0}, {})


def test_host_and_token_connect_without_a_kubeconfig(kind_api, monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.setenv("K8S_AUTH_HOST", kind_api.url)
    monkeypatch.setenv("K8S_AUTH_API_KEY", "token")
    monkeypatch.setenv("K8S_AUTH_IMPERSONATE_USER", "krops")
    client = kube.connect()
    assert client.configuration.host == kind_api.url
    assert client.configuration.api_key == {"authorization": "Bearer token"}
    assert kube.get(client, "v1", "Namespace", "default")["metadata"]["name"] == "default"


# --- kubeconfig export and merge -----------------------------------------------------------------

EXPORTED = """apiVersion: v1
kind: Config
clusters: [{name: local-management, cluster: {server: 'https://172.18.0.3:6443', certificate-authority-data: Q0E=}}]
users: [{name: local-management-admin, user: {client-certificate-data: Q0VSVA==, client-key-data: S0VZ}}]
contexts: [{name: local-management-admin@local-management, context: {cluster: local-management, user: local-management-admin}}]
current-context: local-management-admin@local-management
"""


def test_export_renames_every_entry_to_the_context_and_rewrites_the_server():
    text = kubeconfigs.render_kubeconfig(EXPORTED, "krops-mgmt", "https://127.0.0.1:5555")
    data = yaml.safe_load(text)
    assert [c["name"] for c in data["clusters"]] == ["krops-mgmt"]
    assert data["clusters"][0]["cluster"] == {"server": "https://127.0.0.1:5555", "certificate-authority-data": "Q0E="}
    assert data["users"] == [
        {"name": "krops-mgmt", "user": {"client-certificate-data": "Q0VSVA==", "client-key-data": "S0VZ"}}
    ]
    assert data["contexts"] == [{"name": "krops-mgmt", "context": {"cluster": "krops-mgmt", "user": "krops-mgmt"}}]
    with pytest.raises(kube.KubeError, match="does not hold clusters and contexts"):
        kubeconfigs.render_kubeconfig("users: []", "krops-mgmt")


def test_merge_keeps_the_other_contexts_of_an_existing_kube_config(tmp_path):
    home = tmp_path / ".kube"
    home.mkdir()
    config = home / "config"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "work",
                "preferences": {"colors": True},
                "clusters": [
                    {"name": "work", "cluster": {"server": "https://work"}},
                    {"name": "krops-mgmt", "cluster": {"server": "https://stale"}},
                ],
                "users": [{"name": "work", "user": {"token": "w"}}],
                "contexts": [{"name": "work", "context": {"cluster": "work", "user": "work"}}],
            }
        )
    )
    config.chmod(0o644)
    exported = kubeconfigs.render_kubeconfig(EXPORTED, "krops-mgmt", "https://127.0.0.1:5555")
    assert kubeconfigs.write_kubeconfig(str(config), exported, check_mode=True) is True
    assert "stale" in config.read_text()  # check mode wrote nothing
    assert kubeconfigs.write_kubeconfig(str(config), exported) is True
    data = yaml.safe_load(config.read_text())
    assert data["current-context"] == "work" and data["preferences"] == {"colors": True}
    assert [c["name"] for c in data["contexts"]] == ["work", "krops-mgmt"]
    assert {c["name"]: c["cluster"]["server"] for c in data["clusters"]} == {
        "work": "https://work",
        "krops-mgmt": "https://127.0.0.1:5555",
    }
    assert [u["name"] for u in data["users"]] == ["work", "krops-mgmt"]
    assert stat.S_IMODE(os.stat(config).st_mode) == 0o600
    assert kubeconfigs.write_kubeconfig(str(config), exported) is False  # idempotent
    fresh = tmp_path / "new" / "mgmt.yaml"
    assert kubeconfigs.write_kubeconfig(str(fresh), exported) is True
    assert yaml.safe_load(fresh.read_text())["current-context"] == "krops-mgmt"
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o600


def test_merge_refuses_an_existing_file_that_is_not_a_kubeconfig(tmp_path):
    path = tmp_path / "config"
    path.write_text("- a\n- b\n")
    with pytest.raises(kube.KubeError, match="the existing kubeconfig is not a kubeconfig"):
        kubeconfigs.write_kubeconfig(str(path), kubeconfigs.render_kubeconfig(EXPORTED, "x"))
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a file where the kubeconfig's folder should be: unwritable even for root
    with pytest.raises(kube.KubeError, match="cannot read the kubeconfig .*a-file/config: Not a directory"):
        kubeconfigs.write_kubeconfig(str(blocker / "config"), kubeconfigs.render_kubeconfig(EXPORTED, "x"))


def _user_config(current):
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": current,
            "clusters": [
                {"name": "kind-mgmt", "cluster": {"server": "https://stale"}},
                {"name": "work", "cluster": {"server": "https://work"}},
            ],
            "users": [{"name": "work", "user": {"token": "w"}}],
            "contexts": [{"name": "work", "context": {"cluster": "work", "user": "work"}}],
        }
    )


KIND_EXPORTED = yaml.safe_dump(
    {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "kind-mgmt",
        "clusters": [{"name": "kind-mgmt", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "kind-mgmt", "user": {"token": "k"}}],
        "contexts": [{"name": "kind-mgmt", "context": {"cluster": "kind-mgmt", "user": "kind-mgmt"}}],
    }
)


@pytest.mark.parametrize("switch_context, current", [(True, "kind-mgmt"), (False, "work")])
def test_one_merge_of_kubeconfigs_switches_the_context_only_when_asked(switch_context, current):
    # kind export kubeconfig (kind v0.32.0 merge.go) replaces an entry of the same name where it stands, appends a
    # new one and sets current-context: kind_cluster asks for that; capi_pivot keeps the user's current context.
    data = yaml.safe_load(
        kubeconfigs.merge_kubeconfig(_user_config("work"), KIND_EXPORTED, switch_context=switch_context)
    )
    assert data["current-context"] == current
    assert [(c["name"], c["cluster"]["server"]) for c in data["clusters"]] == [
        ("kind-mgmt", "https://127.0.0.1:6443"),
        ("work", "https://work"),
    ]
    assert [u["name"] for u in data["users"]] == ["work", "kind-mgmt"]
    assert [c["name"] for c in data["contexts"]] == ["work", "kind-mgmt"]


def test_one_merge_of_kubeconfigs_sets_a_missing_current_context_and_names_the_option():
    assert (
        yaml.safe_load(kubeconfigs.merge_kubeconfig(_user_config(""), KIND_EXPORTED))["current-context"] == "kind-mgmt"
    )
    assert kubeconfigs.merge_kubeconfig(None, KIND_EXPORTED) == kubeconfigs.merge_kubeconfig("\n", KIND_EXPORTED)
    assert yaml.safe_load(kubeconfigs.merge_kubeconfig(None, KIND_EXPORTED)) == yaml.safe_load(KIND_EXPORTED)
    with pytest.raises(kube.KubeError, match="not a mapping[)]; move it away or choose another kubeconfig_path$"):
        kubeconfigs.merge_kubeconfig("- a\n", KIND_EXPORTED, option="kubeconfig_path")
    with pytest.raises(kube.KubeError, match="is not YAML .*; move it away or choose another path$"):
        kubeconfigs.merge_kubeconfig("a: [", KIND_EXPORTED)


class _Discovery:
    def __init__(self, *served):
        self.served = served

    def search(self, group=None, kind=None):
        assert (group, kind) == ("cluster.x-k8s.io", "Cluster")
        return [
            type("Resource", (), {"name": name, "api_version": version, "preferred": preferred, "subresource": None})
            for name, version, preferred in self.served
        ]


@pytest.mark.parametrize(
    "served, chosen",
    [
        ((), None),
        ((("clusters", "v1beta1", False), ("clusters", "v1beta2", True)), "v1beta2"),
        ((("clusters", "v1beta2", False), ("clusters", "v1beta1", True)), "v1beta1"),  # the group's preferred version
        ((("clusters", "v1beta1", False), ("clusters", "v1beta2", False)), "v1beta2"),  # none preferred: the newest
        ((("clusters/status", "v1beta2", True), ("clusters", "v1beta1", False)), "v1beta1"),  # never a subresource
    ],
)
def test_one_cluster_resource_lookup_takes_the_preferred_version(served, chosen):
    client = type("Client", (), {"resources": _Discovery(*served)})()
    res = capi.cluster_resource(client)
    assert (res.api_version if res is not None else None) == chosen


# --- verbs -------------------------------------------------------------------------------------


def test_apply_reports_created_updated_unchanged_and_plans_in_check_mode(kind_api):
    client = kube.connect(kind_api.kubeconfig_path)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "fresh"}, "data": {"a": "1"}}
    assert kube.apply(client, cm, check_mode=True) == "created"
    assert not kind_api.exists("v1", "ConfigMap", "c", "fresh")
    assert kube.apply(client, cm) == "created"
    assert kube.apply(client, cm) == "unchanged"
    assert kube.apply(client, dict(cm, data={"a": "2"}), check_mode=True) == "updated"
    assert kind_api.get("v1", "ConfigMap", "c", "fresh")["data"] == {"a": "1"}
    assert kube.apply(client, dict(cm, data={"a": "2"})) == "updated"
    assert kind_api.get("v1", "ConfigMap", "c", "fresh")["data"] == {"a": "2"}
    assert kube.label(cm) == "ConfigMap fresh/c"
    assert kube.identity(cm) == {"kind": "ConfigMap", "namespace": "fresh", "name": "c"}
    with pytest.raises(
        kube.KubeError, match="Nothing.example.com default/x on the cluster: the cluster does not serve"
    ):
        kube.apply(
            client,
            {"apiVersion": "example.com/v1", "kind": "Nothing", "metadata": {"name": "x", "namespace": "default"}},
        )


def test_a_reset_write_is_not_applied_and_the_client_sees_a_connection_error(kind_api):
    """The emulator's reset fault (the crash matrix's reset points): the request is read, the connection closed with
    no answer, nothing applied; the next request is answered."""
    import http.client
    import json as json_module
    from urllib.parse import urlparse

    kind_api.inject_reset("POST", r"/configmaps$", times=1)
    body = json_module.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "reset-me"}})
    where = urlparse(kind_api.url)

    def post():
        conn = http.client.HTTPConnection(where.hostname, where.port, timeout=5)
        try:
            conn.request("POST", "/api/v1/namespaces/default/configmaps", body, {"Content-Type": "application/json"})
            return conn.getresponse().status
        finally:
            conn.close()

    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError, http.client.BadStatusLine)):
        post()
    assert not kind_api.exists("v1", "ConfigMap", "reset-me", "default")
    assert post() == 201
    assert kind_api.exists("v1", "ConfigMap", "reset-me", "default")


@pytest.mark.parametrize("method", ["POST", "DELETE", "PATCH"])
def test_the_strict_emulator_applies_a_reset_armed_for_a_write_it_answers(strict_cluster, method):
    """The crash matrix's reset points run on strict API servers (tests/substrate/crash_world.py): a reset armed for a
    create, a delete or a patch closes the connection unanswered and applies nothing there too (its handler answered
    writes without looking at the armed resets, so every reset point of the fast crash matrix was a run with no fault)."""
    import http.client
    import json as json_module
    from urllib.parse import urlparse

    api = strict_cluster("kind-mgmt")
    if method != "POST":
        api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "reset-me", "namespace": "default"}})
    path = "/api/v1/namespaces/default/configmaps" + ("" if method == "POST" else "/reset-me")
    body = {"POST": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "reset-me"}}, "DELETE": {}}
    body = json_module.dumps(body.get(method, {"data": {"k": "v"}}))
    ctype = "application/merge-patch+json" if method == "PATCH" else "application/json"
    api.inject_reset(method, "^%s$" % path, times=1)
    where = urlparse(api.url)

    def send():
        conn = http.client.HTTPConnection(where.hostname, where.port, timeout=5)
        try:
            conn.request(method, path, body, {"Content-Type": ctype})
            return conn.getresponse().status
        finally:
            conn.close()

    before = api.list("v1", "ConfigMap", "default")
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError, http.client.BadStatusLine)):
        send()
    assert api.list("v1", "ConfigMap", "default") == before  # nothing applied
    assert send() == {"POST": 201, "DELETE": 200, "PATCH": 200}[method]  # the next one is answered


def test_teardown_takes_an_unanswered_discovery_as_an_unknown_state():
    from ansible_collections.krops.platform.plugins.module_utils import teardown

    class Broken:
        def search(self, **_kwargs):
            raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(teardown.UnknownState, match="^cannot discover Cluster API resources: "):
        teardown.served_cluster(type("Client", (), {"resources": Broken()})())
