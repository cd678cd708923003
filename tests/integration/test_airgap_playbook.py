"""playbooks/airgap.yml through ansible-playbook: syntax, the refusals, and both tags in check mode with the zarf stand-in.

Zarf, Docker and a cluster are not available here: check mode runs every zarf command line with --help
against the strict stand-in (tests/substrate/zarf_standin.py), which refuses what zarf v0.84.0 lacks.
"""

from __future__ import annotations

import json
import sys

import pytest
import yaml

from tests.substrate import airgap_fixtures
from tests.substrate.fixtures import REPO

# the shared fixtures of the air-gapped bundle's tests (tests/substrate/airgap_fixtures.py)
ready = airgap_fixtures.ready
zarf = airgap_fixtures.zarf

pytestmark = pytest.mark.slow


def failures(output):
    return [
        (t["task"]["name"], h.get("msg"))
        for p in output.get("plays", [])
        for t in p["tasks"]
        for h in t["hosts"].values()
        if h.get("failed")
    ]


def results(output):
    return {
        t["task"]["name"]: t["hosts"]["localhost"]
        for p in output.get("plays", [])
        for t in p["tasks"]
        if "localhost" in t["hosts"]
    }


def run(ansible_playbook, zarf, playbook, *args):
    env = {"ZARF_STANDIN_LOG": str(zarf / "zarf.jsonl"), "KROPS_PYTHON": sys.executable}
    return ansible_playbook(
        str(playbook),
        "-e",
        "airgap_zarf=%s" % (zarf / "zarf"),
        *args,
        env=env,
        inventory=REPO / "inventories" / "local-host" / "hosts.yml",
    )


def calls(zarf):
    log = zarf / "zarf.jsonl"
    return [json.loads(line)["argv"] for line in log.read_text().splitlines()] if log.exists() else []


def test_syntax_check(ansible_playbook):
    rc, _output, stderr = ansible_playbook(str(REPO / "playbooks" / "airgap.yml"), "--syntax-check")
    assert rc == 0, stderr


def test_a_plain_run_only_explains(ansible_playbook, zarf):
    rc, output, _err = run(ansible_playbook, zarf, REPO / "playbooks" / "airgap.yml")
    assert rc == 0
    # The repository check is read-only and tagged always; then the tags are explained and nothing runs.
    assert list(results(output)) == ["Check that the GitOps repository is there", "Explain the tags"]
    assert calls(zarf) == []


def test_an_unsigned_build_is_refused(ansible_playbook, zarf):
    rc, output, _err = run(ansible_playbook, zarf, REPO / "playbooks" / "airgap.yml", "--tags", "build", "--check")
    assert rc == 2
    assert failures(output) == [
        (
            "Refuse an unsigned build",
            "an unsigned build is refused: set airgap_signing_key and airgap_public_key to the files of "
            "a cosign key pair (zarf tools gen-key); got signing key '', public key ''",
        )
    ]
    assert calls(zarf) == [["version"]]


def test_an_unsupported_architecture_is_refused(ansible_playbook, zarf):
    rc, output, _err = run(
        ansible_playbook,
        zarf,
        REPO / "playbooks" / "airgap.yml",
        "--tags",
        "build",
        "--check",
        "-e",
        "airgap_architecture=s390x",
    )
    assert rc == 2
    assert failures(output) == [
        ("Check the architecture", "airgap_architecture s390x is not supported: use one of amd64, arm64")
    ]


def test_build_of_the_real_tree_stops_at_the_pin_check(ansible_playbook, zarf):
    rc, output, _err = run(
        ansible_playbook,
        zarf,
        REPO / "playbooks" / "airgap.yml",
        "--tags",
        "build",
        "--check",
        "-e",
        "airgap_signing_key=%s" % (zarf / "zarf.key"),
        "-e",
        "airgap_public_key=%s" % (zarf / "zarf.pub"),
    )
    assert rc == 2
    [(task, msg)] = failures(output)
    assert task == "Stop when the pin check fails"
    assert any("UNCONFIRMED digest" in line and "docker.io/library/registry:3" in line for line in msg)
    # the tree itself is servable offline: only the digests and checksums nobody has read stop it
    assert msg[-1] == "20 images, 0 findings, 22 unconfirmed digests"
    assert all("UNCONFIRMED" in line for line in msg[:-1]) and len(msg) == 23


@pytest.mark.parametrize("architecture", ["amd64", "arm64"])
def test_build_in_check_mode_checks_every_zarf_command_line(ansible_playbook, zarf, ready, architecture):
    rc, output, stderr = run(
        ansible_playbook,
        zarf,
        ready / "playbooks" / "airgap.yml",
        "--tags",
        "build",
        "--check",
        "-e",
        f"airgap_architecture={architecture}",
        "-e",
        "airgap_signing_key=%s" % (zarf / "zarf.key"),
        "-e",
        "airgap_public_key=%s" % (zarf / "zarf.pub"),
    )
    assert rc == 0, (failures(output), stderr[-2000:])
    done = results(output)
    assert done["PASS/FAIL summary"]["msg"] == [
        "zarf v0.84.0: PASS",
        "validate and pin check: PASS",
        "package signed and verified: SKIPPED (check mode)",
        "SBOMs written: SKIPPED (check mode)",
    ]
    assert done["Build the configuration artifact (OCI layout for the package)"]["changed"] is True
    assert not (ready / "airgap" / "build").exists()
    argv = calls(zarf)
    assert argv[0] == ["version"] and all(a[-1] == "--help" for a in argv[1:])
    create = next(a for a in argv if a[:2] == ["package", "create"])
    assert create[create.index("--architecture") + 1] == architecture
    assert create[create.index("--signing-key") + 1] == str(zarf / "zarf.key")
    assert "--sbom-out" in create and "--skip-sbom" not in create
    not_run = [
        name
        for name, r in done.items()
        if r.get("skipped") or r.get("msg") == "Command would have run if not in check mode"
    ]
    assert {
        "Create the signed package with SBOMs (zarf pulls the charts and images)",
        "Save them into the host archive",
        "Download the zarf init package",
        "Verify the signature of the new package",
    } <= set(not_run)


def test_deploy_in_check_mode_verifies_before_anything(ansible_playbook, zarf, ready):
    build = ready / "airgap" / "build"
    build.mkdir()
    package = build / "zarf-package-krops-local-host-arm64-0.1.0.tar.zst"
    package.write_text("{}")
    (build / "zarf-init-arm64-v0.84.0.tar.zst").write_text("{}")
    args = [
        "--tags",
        "deploy",
        "--check",
        "-e",
        "airgap_architecture=arm64",
        "-e",
        "airgap_public_key=%s" % (zarf / "zarf.pub"),
        "-e",
        f"airgap_package={package}",
    ]
    rc, output, stderr = run(ansible_playbook, zarf, ready / "playbooks" / "airgap.yml", *args)
    assert rc == 0, (failures(output), stderr[-2000:])
    summary = results(output)["PASS/FAIL summary"]["msg"]
    assert summary[0] == "signature and SBOMs verified: PASS"
    assert all(line.endswith("SKIPPED (check mode)") for line in summary[1:]) and len(summary) == 5
    checked = [a for a in calls(zarf) if a[-1] == "--help"]
    assert [a[:2] for a in checked] == [
        ["package", "verify"],
        ["package", "inspect"],
        ["package", "deploy"],
        ["init", str(build / "zarf-init-arm64-v0.84.0.tar.zst")],
        ["package", "deploy"],
    ]
    assert checked[2][checked[2].index("--components") + 1] == "host,kind-arm64"
    assert (
        checked[4][checked[4].index("--components") + 1]
        == "cert-manager,capi-operator,krops-config,flux,capi,capd,caaph,workload"
    )


def test_deploy_without_a_public_key_is_refused(ansible_playbook, zarf):
    rc, output, _err = run(ansible_playbook, zarf, REPO / "playbooks" / "airgap.yml", "--tags", "deploy", "--check")
    assert rc == 2
    [(task, msg)] = failures(output)
    assert task == "Refuse a deploy that cannot verify the package"
    assert msg.startswith("the deploy verifies the package signature first: set airgap_public_key (got '')")


def test_a_flag_the_pinned_zarf_lacks_fails_the_check_run(ansible_playbook, zarf, ready):
    build = ready / "airgap" / "build"
    build.mkdir()
    (build / "p.tar.zst").write_text("{}")
    (build / "zarf-init-amd64-v0.84.0.tar.zst").write_text("{}")
    bad = {
        "airgap_deploy_commands": {
            "verify": ["package", "verify", str(build / "p.tar.zst"), "--key", "k"],
            "deploy": ["package", "deploy", str(build / "p.tar.zst"), "--skip-signature-check"],
        }
    }
    rc, output, _err = run(
        ansible_playbook,
        zarf,
        ready / "playbooks" / "airgap.yml",
        "--tags",
        "deploy",
        "--check",
        "-e",
        "airgap_public_key=%s" % (zarf / "zarf.pub"),
        "-e",
        "airgap_package=%s" % (build / "p.tar.zst"),
        "-e",
        json.dumps(bad),
    )
    assert rc == 2
    [(task, _msg)] = failures(output)
    assert task == "Check every deploy command line against zarf v0.84.0"
    task_output = json.dumps(results(output)["Check every deploy command line against zarf v0.84.0"])
    assert task_output.count("Error: unknown flag: --skip-signature-check") >= 1
    assert task_output.count("Error: ") == task_output.count("Error: unknown flag: --skip-signature-check")


def test_a_zarf_of_another_version_is_refused(ansible_playbook, zarf, tmp_path):
    other = tmp_path / "old-zarf"
    other.write_text("#!/bin/sh\necho v0.60.0\n")
    other.chmod(0o755)
    rc, output, _err = ansible_playbook(
        str(REPO / "playbooks" / "airgap.yml"), "--tags", "deploy", "--check", "-e", f"airgap_zarf={other}"
    )
    assert rc == 2
    assert [t for t, _m in failures(output)] == ["Check that zarf is the pinned version"]


# --- the deploy's checks, rendered from the playbook's own templates -----------------------------


def _trust(value):
    from ansible.template import trust_as_template

    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [_trust(v) for v in value]
    if isinstance(value, dict):
        return {k: _trust(v) for k, v in value.items()}
    return value


def summarise(registered):
    """airgap_summary and the final assert as the playbook computes them after a real (not check mode) deploy."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    play = yaml.safe_load((REPO / "playbooks" / "airgap.yml").read_text())[0]
    tasks = {t["name"]: t for t in play["tasks"]}
    summary_task = tasks["Summarise the deploy"]
    variables = {
        k: _trust(v) for k, v in play["vars"].items() if k in ("airgap_internal_registry", "airgap_workload_cluster")
    }
    variables.update(_trust(summary_task["vars"]))
    variables.update(ansible_check_mode=False, **registered)
    templar = Templar(loader=DataLoader(), variables=variables)
    summary = templar.template(_trust(summary_task["ansible.builtin.set_fact"]["airgap_summary"]))
    verdict = Templar(loader=DataLoader(), variables={"airgap_summary": summary}).template(
        _trust("{{{{ {} }}}}".format(tasks["Fail when a check failed"]["ansible.builtin.assert"]["that"]))
    )
    return summary, verdict


GOOD = {
    "airgap_pods": {
        "rc": 0,
        "stdout_lines": [
            "kube-system registry.k8s.io/etcd:3.6.0-0 registry.k8s.io/kube-apiserver:v1.35.5",
            "zarf 127.0.0.1:31999/zarf-dev/zarf/agent:v0.84.0",
            "flux-system 127.0.0.1:31999/fluxcd/source-controller:v1.9.4-zarf-1234 127.0.0.1:31999/fluxcd/kustomize-controller:v1.9.4-zarf-1",
            "",
        ],
    },
    "airgap_flux": {"failed": False},
    "airgap_workload": {"rc": 0},
    "airgap_podinfo": {"rc": 0, "stdout": '{"status":"OK"}'},
}


def test_deploy_summary_passes_when_every_check_passes():
    summary, verdict = summarise(GOOD)
    assert summary == [
        ["signature and SBOMs verified", "PASS"],
        ["pod images from 127.0.0.1:31999", "PASS (3 pods)"],
        ["Flux Ready", "PASS"],
        ["cluster local-workload Available", "PASS"],
        ["Podinfo answers", "PASS"],
    ]
    assert verdict is True


def test_deploy_summary_names_each_failure():
    bad = dict(GOOD)
    bad["airgap_pods"] = {
        "rc": 0,
        "stdout_lines": GOOD["airgap_pods"]["stdout_lines"]
        + [
            "capi-system ghcr.io/decoy/127.0.0.1:31999/x:1 127.0.0.1:31999/cluster-api/cluster-api-controller:v1.13.5-zarf-9",
            "kube-system-decoy quay.io/jetstack/cert-manager-controller:v1.21.1",
        ],
    }
    bad["airgap_flux"] = {"failed": True, "msg": "Kustomization flux-system/capi-system: HealthCheckFailed"}
    bad["airgap_workload"] = {
        "rc": 1,
        "stderr": "error: timed out waiting for the condition on clusters/local-workload",
    }
    summary, verdict = summarise(bad)
    assert summary[1] == [
        "pod images from 127.0.0.1:31999",
        "FAIL: ghcr.io/decoy/127.0.0.1:31999/x:1, quay.io/jetstack/cert-manager-controller:v1.21.1",
    ]
    assert summary[2] == ["Flux Ready", "FAIL: Kustomization flux-system/capi-system: HealthCheckFailed"]
    assert summary[3] == [
        "cluster local-workload Available",
        "FAIL: error: timed out waiting for the condition on clusters/local-workload",
    ]
    assert verdict is False
