"""roles/bootstrap through ansible-playbook: kind (fake binary) + Flux handoff on the emulator, re-run, after a pivot.

The aws environment is used (Git sync, no post-kind hook, no registry, no workload chain), because
the registry and the workload chain need a Docker engine these machines do not have.
"""

from __future__ import annotations

import base64
import json
import sys

import pytest
import yaml

from tests.integration.test_flux_handoff import AGE_KEY, CONFIG, FI, NS, FakeFlux, deployed, fi_ready, ks
from tests.substrate.fixtures import REPO

TOKEN = "ghp_roleT0ken0123456789"
pytestmark = pytest.mark.slow


def plays(count, variables, tags=None):
    include = {"name": "krops.platform.bootstrap", "apply": {"tags": ["bootstrap"]}}
    play = {
        "hosts": "localhost",
        "gather_facts": False,
        "vars": variables,
        "tasks": [{"name": "Bootstrap", "ansible.builtin.include_role": include, "tags": tags or ["bootstrap"]}],
    }
    return [dict(play, name="run %d" % (i + 1)) for i in range(count)]


def failures(output):
    return [
        (t["task"]["name"], h.get("msg"))
        for p in output.get("plays", [])
        for t in p["tasks"]
        for h in t["hosts"].values()
        if h.get("failed")
    ]


def results_of(output, index):
    play = output["plays"][index]
    return {t["task"]["name"].split(" : ", 1)[-1]: t["hosts"].get("localhost", {}) for t in play["tasks"]}


def fake_kind(fake_bins, api, name="mgmt"):
    fake_bins.answer("kind", "get clusters", stdout=name + "\n")
    fake_bins.answer("kind", "get kubeconfig", stdout=yaml.safe_dump(api.kubeconfig(context="kind-" + name)))
    api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name + "-control-plane"}})
    api.set_condition("v1", "Node", name + "-control-plane", reason="KubeletReady")


def role_vars(tmp_path, kind_kubeconfig, mgmt_kubeconfig):
    key = tmp_path / "age.agekey"
    key.write_text(AGE_KEY)
    return {
        "krops_environment": "aws",
        "bootstrap_config_file": CONFIG,
        "bootstrap_repo_root": str(REPO),
        "bootstrap_kind_kubeconfig": str(kind_kubeconfig),
        "bootstrap_mgmt_kubeconfig": str(mgmt_kubeconfig),
        "bootstrap_age_key_file": str(key),
        "bootstrap_progress_interval": 5,
        "bootstrap_flux_wait_timeout": 30,
    }


def test_bootstrap_reuses_kind_hands_over_to_flux_and_a_rerun_changes_nothing(
    kind_api, fake_bins, ansible_playbook, tmp_path
):
    fake_kind(fake_bins, kind_api)
    FakeFlux(
        kind_api,
        [
            (0.2, fi_ready),
            (0.3, ks("capa-system", status="True", reason="ReconciliationSucceeded")),
            (0.3, ks("flux-system", status="True", reason="ReconciliationSucceeded")),
        ],
    ).start()
    variables = role_vars(tmp_path, tmp_path / "kind.yaml", tmp_path / "missing-mgmt.yaml")
    # helm list answers "no release" the first time; the deployed answer is installed between the plays
    # by a stand-in that flips after the first upgrade.
    fake_bins.install("helm", _HELM_SCRIPT.format(python=sys.executable, deployed=deployed()))
    rc, output, stderr = ansible_playbook(plays(2, variables), env={"PATH": fake_bins.path_env, "GITHUB_TOKEN": TOKEN})
    assert rc == 0, (failures(output), stderr[-2000:])
    first, second = results_of(output, 0), results_of(output, 1)
    assert first["Decide where bootstrap acts"]["ansible_facts"]["bootstrap_pivoted"] is False
    handoff = first["Hand the cluster to Flux and wait until every Kustomization is Ready"]
    assert handoff["changed"] is True and handoff["ready"] is True
    assert [k["name"] for k in handoff["kustomizations"]] == ["flux-system", "capa-system"]
    sync = kind_api.get(*FI, "flux", NS)["spec"]["sync"]
    assert sync["kind"] == "GitRepository" and sync["pullSecret"] == "flux-github-pat"
    password = kind_api.get("v1", "Secret", "flux-github-pat", NS)["data"]["password"]
    assert base64.b64decode(password).decode() == TOKEN
    assert TOKEN not in json.dumps(output)
    changed = [name for name, res in second.items() if res.get("changed")]
    assert changed == [], changed
    assert second["Create or reuse the kind cluster"]["created"] is False


def test_after_the_pivot_bootstrap_is_skipped_and_secrets_go_to_the_management_cluster(
    kube_cluster, fake_bins, ansible_playbook, tmp_path
):
    kind_api = kube_cluster("kind-mgmt")
    mgmt_api = kube_cluster("krops-mgmt")
    mgmt_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    mgmt_api.create({"apiVersion": FI[0], "kind": FI[1], "metadata": {"name": "flux", "namespace": NS}, "spec": {}})
    variables = role_vars(tmp_path, kind_api.kubeconfig_path, mgmt_api.kubeconfig_path)
    rc, output, stderr = ansible_playbook(
        plays(1, variables, tags=["bootstrap", "secrets"]),
        "--tags",
        "secrets",
        env={"PATH": fake_bins.path_env, "GITHUB_TOKEN": TOKEN},
    )
    results = results_of(output, 0)
    assert rc == 0, (failures(output), stderr[-2000:])
    assert results["Decide where bootstrap acts"]["ansible_facts"]["bootstrap_pivoted"] is True
    handoff = results["Hand the cluster to Flux and wait until every Kustomization is Ready"]
    assert handoff["changed"] is True
    assert handoff["actions"] == [
        "create ConfigMap flux-system/krops-run",
        "create Secret flux-system/flux-github-pat",
        "create Secret flux-system/sops-age",
        "create Secret default/sops-age",
    ]
    assert mgmt_api.exists("v1", "Secret", "flux-github-pat", NS)
    assert not kind_api.exists("v1", "Namespace", NS)
    assert fake_bins.calls("kind") == [] and fake_bins.calls("helm") == []
    assert "Create or reuse the kind cluster" not in results


_HELM_SCRIPT = """#!{python}
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "calls.jsonl"), "a") as log:
    log.write(json.dumps({{"tool": "helm", "argv": sys.argv[1:], "env": {{}}, "cwd": os.getcwd(), "stdin": ""}}) + "\\n")
marker = os.path.join(here, "helm-installed")
if sys.argv[1] == "upgrade":
    open(marker, "w").close()
elif sys.argv[1] == "list" and os.path.exists(marker):
    sys.stdout.write({deployed!r})
"""


def test_local_registry_is_advertised_as_kep_1755_says_with_addresses_that_resolve(
    kind_api, ansible_playbook, tmp_path
):
    """kube-public/local-registry-hosting (not kube-system/local-registry-config): host for pushes from the
    host, hostFromContainerRuntime the name containerd maps through the hosts.toml kind_cluster writes, and
    hostFromClusterNetwork what pods reach; name and ports come from bootstrap.toml."""
    config = tmp_path / "bootstrap.toml"
    config.write_text(
        (REPO / "bootstrap.toml")
        .read_text()
        .replace('registry-name = "krops-registry"', 'registry-name = "reg"')
        .replace("registry-port = 5001", "registry-port = 5055")
    )
    play = {
        "hosts": "localhost",
        "gather_facts": False,
        "vars": {
            "krops_environment": "local-host",
            "bootstrap_config_file": str(config),
            "bootstrap_kind_kubeconfig": kind_api.kubeconfig_path,
            "bootstrap_pivoted": False,
        },
        "tasks": [{"ansible.builtin.import_role": {"name": "krops.platform.bootstrap", "tasks_from": "registry"}}],
    }
    rc, output, stderr = ansible_playbook(
        [play], "--start-at-task", "Advertise the local registry to the cluster (KEP-1755)"
    )
    assert rc == 0, (failures(output), stderr[-2000:])
    hosting = kind_api.get("v1", "ConfigMap", "local-registry-hosting", "kube-public")
    assert yaml.safe_load(hosting["data"]["localRegistryHosting.v1"]) == {
        "host": "localhost:5055",
        "hostFromContainerRuntime": "localhost:5055",
        "hostFromClusterNetwork": "reg:5000",
        "help": "https://kind.sigs.k8s.io/docs/user/local-registry/",
    }
    assert not kind_api.exists("v1", "ConfigMap", "local-registry-config", "kube-system")
    # containerd resolves hostFromContainerRuntime: kind.yml asks kind_cluster for the hosts.toml of that host
    kind_task = yaml.safe_load((REPO / "roles/bootstrap/tasks/kind.yml").read_text())[0]
    assert "'localhost:' ~ bootstrap_registry_port" in kind_task["krops.platform.kind_cluster"]["registry_mirror"]


# A kubectl that, for `port-forward`, checks its argv like kubectl and then serves Podinfo's /healthz on
# the local port it was asked for (as the real forward would), until it is killed.
_KUBECTL_FORWARD = r"""#!{python}
import http.server, json, os, sys
sys.path.insert(0, {root!r})
from tests.substrate import tool_contracts
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "calls.jsonl"), "a") as log:
    log.write(json.dumps({{"tool": "kubectl", "argv": sys.argv[1:], "env": {{}}, "cwd": os.getcwd(), "stdin": ""}}) + "\n")
try:
    command, positional, flags = tool_contracts.check_kubectl(sys.argv[1:])
except tool_contracts.Refused as exc:
    sys.stderr.write(str(exc) + "\n")
    sys.exit(exc.rc)
if command != ("port-forward",) or not os.path.exists(flags["--kubeconfig"]):
    sys.exit("unexpected kubectl call")
local = int(positional[1].split(":")[0])

class Podinfo(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{{"status": "OK"}}' if self.path == "/healthz" else b'{{"hostname": "podinfo-7d9f"}}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

print("Forwarding from %s:%d -> 9898" % (flags["--address"], local), flush=True)
http.server.HTTPServer((flags["--address"], local), Podinfo).serve_forever()
"""


def test_podinfo_playbook_forwards_localhost_in_the_background_and_a_rerun_changes_nothing(
    fake_bins, ansible_playbook, tmp_path
):
    import os
    import signal
    import urllib.request

    from tests.substrate.fixtures import free_port

    port = free_port()
    kubeconfig = tmp_path / "krops-local-workload.yaml"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    pid_file = tmp_path / "cache" / "podinfo.pid"
    fake_bins.install("kubectl", _KUBECTL_FORWARD.format(python=sys.executable, root=str(REPO)))
    extra = [
        "-e",
        "krops_environment=local-host",
        "-e",
        f"bootstrap_config_file={CONFIG}",
        "-e",
        f"bootstrap_workload_kubeconfig={kubeconfig}",
        "-e",
        "bootstrap_podinfo_local_port=%d" % port,
        "-e",
        f"bootstrap_podinfo_pid_file={pid_file}",
        "-e",
        "bootstrap_podinfo_log_file=%s" % (tmp_path / "pf.log"),
        "-e",
        "bootstrap_podinfo_retries=20",
    ]
    try:
        rc, output, stderr = ansible_playbook(
            str(REPO / "playbooks/podinfo.yml"), *extra, env={"PATH": fake_bins.path_env}
        )
        assert rc == 0, (failures(output), stderr[-2000:])
        first = results_of(output, 0)
        assert first["Start kubectl port-forward to Podinfo in the background"]["changed"] is True
        with urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=5) as answer:
            assert json.loads(answer.read())["hostname"] == "podinfo-7d9f"  # it outlived the play
        forward = [c["argv"] for c in fake_bins.calls("kubectl")]
        assert forward == [
            [
                "--kubeconfig",
                str(kubeconfig),
                "--namespace",
                "podinfo",
                "port-forward",
                "svc/podinfo",
                "%d:9898" % port,
                "--address",
                "127.0.0.1",
            ]
        ]
        rc, output, stderr = ansible_playbook(
            str(REPO / "playbooks/podinfo.yml"), *extra, env={"PATH": fake_bins.path_env}
        )
        assert rc == 0, (failures(output), stderr[-2000:])
        changed = [name for name, res in results_of(output, 0).items() if res.get("changed")]
        assert changed == [] and len(fake_bins.calls("kubectl")) == 1
    finally:
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGTERM)


def test_podinfo_playbook_without_a_workload_kubeconfig_says_what_to_run(fake_bins, ansible_playbook, tmp_path):
    from tests.substrate.fixtures import free_port

    rc, output, stderr = ansible_playbook(
        str(REPO / "playbooks/podinfo.yml"),
        "-e",
        "krops_environment=local-host",
        "-e",
        f"bootstrap_config_file={CONFIG}",
        "-e",
        "bootstrap_workload_kubeconfig=%s" % (tmp_path / "none.yaml"),
        "-e",
        "bootstrap_podinfo_local_port=%d" % free_port(),
        env={"PATH": fake_bins.path_env},
    )
    assert rc == 2
    assert failures(output) == [
        (
            "krops.platform.bootstrap : Require the workload kubeconfig",
            "%s does not exist: run the bootstrap first (ansible-playbook -i inventories/local-host "
            "playbooks/local-host.yml), or `--tags kubeconfigs` to write it again." % (tmp_path / "none.yaml"),
        )
    ]
    assert fake_bins.calls("kubectl") == []


def test_molecule_scenario_inventory_gives_localhost_its_connection_and_the_repo_root(tmp_path):
    """molecule (collection layout, extensions/molecule) links host_vars: with links set it writes none itself."""
    import glob
    import os
    import subprocess

    env = dict(
        os.environ,
        HOME=str(tmp_path),
        PATH="{}:{}".format(REPO / ".venv" / "bin", os.environ["PATH"]),
        ANSIBLE_HOME=str(tmp_path / ".ansible"),
    )
    proc = subprocess.run(
        [str(REPO / ".venv" / "bin" / "molecule"), "syntax"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "should migrate" not in proc.stdout + proc.stderr
    inventories = glob.glob(str(tmp_path / ".ansible" / "tmp" / "molecule.*.default" / "inventory"))
    assert len(inventories) == 1, proc.stdout[-2000:]
    shown = subprocess.run(
        [str(REPO / ".venv" / "bin" / "ansible-inventory"), "-i", inventories[0], "--host", "localhost"],
        env=dict(env, MOLECULE_PROJECT_DIRECTORY=str(REPO)),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    host = json.loads(shown.stdout)
    assert host["ansible_connection"] == "local"
    assert host["krops_repo_root"] == "{{ lookup('ansible.builtin.env', 'MOLECULE_PROJECT_DIRECTORY') }}"
    assert host["krops_environment"] == "local-host"
    scenario = REPO / "extensions" / "molecule" / "default"
    molecule = yaml.safe_load((scenario / "molecule.yml").read_text())
    assert molecule["provisioner"]["env"]["BOOTSTRAP_CONFIG"] == "${MOLECULE_PROJECT_DIRECTORY}/bootstrap.toml"
    # cleanup tears down through the role: an import_playbook of local-host.yml (even with tags:) bootstraps again
    cleanup = yaml.safe_load((scenario / "cleanup.yml").read_text())
    assert not any("ansible.builtin.import_playbook" in play for play in cleanup)
    assert any(
        task.get("ansible.builtin.include_role", {}).get("name") == "krops.platform.teardown"
        for play in cleanup
        for task in play["tasks"]
    )


# The Secret CAPI writes for a workload Cluster: its server is the load balancer's container address.
_CAPI_KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [
        {
            "name": "local-workload",
            "cluster": {"server": "https://172.18.0.4:6443", "certificate-authority-data": "Q0E="},
        }
    ],
    "users": [
        {"name": "local-workload-admin", "user": {"client-certificate-data": "Q0VSVA==", "client-key-data": "S0VZ"}}
    ],
    "contexts": [
        {
            "name": "local-workload-admin@local-workload",
            "context": {"cluster": "local-workload", "user": "local-workload-admin"},
        }
    ],
    "current-context": "local-workload-admin@local-workload",
}


def write_workload_kubeconfig(ansible_playbook, tmp_path, value):
    """Only the task that writes the workload kubeconfig, given the Secret and the load balancer's inspect."""
    kubeconfig = tmp_path / "krops-local-workload.yaml"
    play = {
        "hosts": "localhost",
        "gather_facts": False,
        "vars": {
            "krops_environment": "local-host",
            "bootstrap_config_file": CONFIG,
            "bootstrap_pivoted": False,
            "bootstrap_workload_kubeconfig": str(kubeconfig),
            "bootstrap_workload_secret": {
                "resources": [{"data": {"value": base64.b64encode(value.encode()).decode()}}]
            },
            "bootstrap_workload_lb": {
                "exists": True,
                "container": {"NetworkSettings": {"Ports": {"6443/tcp": [{"HostIp": "0.0.0.0", "HostPort": "43121"}]}}},
            },
        },
        "tasks": [{"ansible.builtin.import_role": {"name": "krops.platform.bootstrap", "tasks_from": "workload"}}],
    }
    rc, output, stderr = ansible_playbook(
        [play], "--tags", "kubeconfigs", "--start-at-task", "Check that the kubeconfig Secret holds a kubeconfig"
    )
    return rc, output, stderr, kubeconfig


def test_workload_kubeconfig_is_rendered_by_the_one_kubeconfig_verb(ansible_playbook, tmp_path):
    """The server points at the published load-balancer port, and context, cluster and user are named
    krops-<cluster>, as capi_pivot names the management entries (kubeconfigs.render_kubeconfig, one verb)."""
    rc, output, stderr, kubeconfig = write_workload_kubeconfig(
        ansible_playbook, tmp_path, yaml.safe_dump(_CAPI_KUBECONFIG)
    )
    assert rc == 0, (failures(output), stderr[-2000:])
    written = yaml.safe_load(kubeconfig.read_text())
    assert written["current-context"] == "krops-local-workload"
    assert written["clusters"] == [
        {
            "name": "krops-local-workload",
            "cluster": {"server": "https://127.0.0.1:43121", "certificate-authority-data": "Q0E="},
        }
    ]
    assert written["users"][0] == dict(_CAPI_KUBECONFIG["users"][0], name="krops-local-workload")
    assert written["contexts"] == [
        {"name": "krops-local-workload", "context": {"cluster": "krops-local-workload", "user": "krops-local-workload"}}
    ]
    assert kubeconfig.stat().st_mode & 0o777 == 0o600


def test_a_secret_that_is_not_a_kubeconfig_fails_clearly_and_writes_nothing(ansible_playbook, tmp_path):
    rc, output, stderr, kubeconfig = write_workload_kubeconfig(ansible_playbook, tmp_path, "server: https://x:6443\n")
    assert rc != 0
    [(task, msg)] = failures(output)
    assert task == "krops.platform.bootstrap : Check that the kubeconfig Secret holds a kubeconfig"
    assert "render_kubeconfig: the kubeconfig does not hold clusters and contexts" in msg, msg
    assert not kubeconfig.exists()
