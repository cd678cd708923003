"""roles/teardown in check mode (real ansible-playbook) for local-talos on the emulator, with a stand-in kind.

The real run of the role is in test_teardown_local_host.py; tinkerbell_release itself in test_tinkerbell_release.py.
"""

from __future__ import annotations

import pytest

from tests.integration.test_tinkerbell_release import CLUSTER, HW, KS, OWNER, FakeCapt, cluster, hardware, ns
from tests.substrate.fixtures import REPO, task_results
from tests.substrate.krops_marks import make_kind_marker

pytestmark = pytest.mark.slow
R = "krops.platform.teardown : "


def play(kind_api, tmp_path):
    return [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {
                "krops_environment": "local-talos",
                "teardown_config_file": str(REPO / "bootstrap.toml"),
                "teardown_kind_kubeconfig": kind_api.kubeconfig_path,
                "teardown_kind_context": "kind-mgmt",
                "teardown_mgmt_kubeconfig": str(tmp_path / "no-mgmt.yaml"),
                "teardown_hardware_namespace": "tinkerbell",
            },
            "roles": [{"role": "krops.platform.teardown"}],
        }
    ]


def test_local_talos_teardown_check_mode_prints_the_plan_and_deletes_nothing(
    kind_api, fake_bins, ansible_playbook, tmp_path
):
    ns(kind_api, "flux-system")
    kind_api.create(
        {
            "apiVersion": KS[0],
            "kind": KS[1],
            "metadata": {"name": "clusters", "namespace": "flux-system"},
            "spec": {
                "interval": "10m",
                "path": "./c",
                "prune": True,
                "sourceRef": {"kind": "GitRepository", "name": "flux-system"},
            },
        }
    )
    cluster(kind_api, "local-talos-management")
    cluster(kind_api, "other-env-workload")  # not named for local-talos: never deleted
    make_kind_marker(kind_api, "local-talos")
    hardware(
        kind_api,
        "node-1",
        owner="local-talos-management-cp-1",
        finalizers=["infrastructure.cluster.x-k8s.io/tinkerbellmachine"],
    )
    fake_bins.answer("kind", "get clusters", stdout="mgmt\n")
    fake_bins.answer("kind", "version", stdout="kind v0.27.0 go1.23 linux/amd64\n")
    capt = FakeCapt(kind_api)
    try:
        rc, out, err = ansible_playbook(play(kind_api, tmp_path), "--check")
        assert rc == 0, (out, err)
        results = task_results(out)
        plan = results[R + "Show the teardown plan"]["msg"]
        assert plan == [
            "Teardown of local-talos on the kind cluster (context kind-mgmt) [check mode: nothing is deleted]",
            "1. suspend every Flux Kustomization and Flux Operator object on the kind cluster",
            "2. delete the Clusters local-talos-management named by bootstrap.toml so CAPT returns their "
            "Hardware to the Tinkerbell pool; wait until no Hardware carries ownership marks",
            "3. delete the kind cluster mgmt (the controller host; marker kube-system/krops-bootstrap: "
            "environment local-talos, kind cluster mgmt)",
        ]
        assert "tinkerbell/node-1: would-release" in results[R + "Report per Hardware"]["msg"]
        assert kind_api.exists(*CLUSTER, "local-talos-management", "default")
        assert kind_api.exists(*CLUSTER, "other-env-workload", "default")
        assert not [c for c in fake_bins.calls("kind") if c["argv"][:1] == ["delete"]]
        assert not capt.order
        assert "suspend" not in kind_api.get(*KS, "clusters", "flux-system")["spec"]
        assert OWNER in kind_api.get(*HW, "node-1", "tinkerbell")["metadata"]["labels"]
        assert not [r for r in kind_api.requests if r[0] in ("PATCH", "DELETE", "PUT", "POST")]
    finally:
        capt.stop()
