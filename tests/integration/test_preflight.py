"""krops.platform.preflight_check and roles/preflight: tools, age key, GitHub access, Elastic IP quota.

GitHub is a local HTTP double of the two REST endpoints the check uses (no emulator exists);
AWS is moto (which has no EC2 entry in Service Quotas, so the limit comes from the EC2 account
attribute there, 5); age keys are made by the real age-keygen.
"""

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import pytest

from ansible_collections.krops.platform.plugins.modules import preflight_check
from tests.substrate import kind_engine
from tests.substrate.fixtures import REPO

TOKEN = "ghp_test_token_0123456789"
SHA = "c0ffee" + "0" * 34
OWNED = "sigs.k8s.io/cluster-api-provider-aws/cluster/%s"


class _GitHub(BaseHTTPRequestHandler):
    """GET /repos/krops/krops and /repos/krops/krops/branches/main, only with the right token."""

    seen = []

    def log_message(self, *args):
        return

    def do_GET(self):
        self.seen.append((self.path, self.headers.get("Authorization")))
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            code, body = 401, {"message": "Bad credentials", "status": "401"}
        elif self.path == "/repos/krops/krops":
            code, body = 200, {"full_name": "krops/krops", "private": True}
        elif self.path == "/repos/krops/krops/branches/main":
            code, body = 200, {"name": "main", "commit": {"sha": SHA}}
        else:
            code, body = 404, {"message": "Not Found", "status": "404"}
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def github():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _GitHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _GitHub.seen = []
    yield "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def age_key(tmp_path):
    path = tmp_path / "age.agekey"
    subprocess.run(["age-keygen", "-o", str(path)], check=True, capture_output=True)
    public = [line.split(": ", 1)[1] for line in path.read_text().splitlines() if line.startswith("# public key:")][0]
    return path, public


def git_args(github, **extra):
    base = {
        "git_url": "https://github.com/krops/krops.git",
        "git_branch": "main",
        "github_token": TOKEN,
        "github_api_url": github,
    }
    base.update(extra)
    return base


# --- tools -----------------------------------------------------------------------------


def test_every_missing_tool_is_named_at_once(fake_bins, run_module):
    result = run_module(preflight_check, {"tools": ["kind", "helm", "no-such-tool-a", "kubectl", "no-such-tool-b"]})
    assert result.failed
    assert result["tools"]["missing"] == ["no-such-tool-a", "no-such-tool-b"]
    assert result["tools"]["found"]["kind"] == str(fake_bins.dir / "kind")
    assert result["msg"].startswith(
        "preflight found 1 problem:\n- missing tools: no-such-tool-a, no-such-tool-b "
        f"(install them or put them on PATH; PATH is {fake_bins.dir}"
    )


def test_all_good_passes_in_check_mode_too(fake_bins, run_module, github, age_key):
    path, public = age_key
    args = dict(git_args(github), tools=["kind", "helm"], age_key_file=str(path), age_public_key=public)
    for check_mode in (False, True):
        result = run_module(preflight_check, args, check_mode=check_mode)
        assert not result.failed, result
        assert result["problems"] == [] and result["changed"] is False
        assert result["git"] == {
            "url": "https://github.com/krops/krops.git",
            "repository": "krops/krops",
            "branch": "main",
            "commit": SHA,
        }
        assert result["age_key"]["public_key"] == public and result["age_key"]["derived"] is True
    assert TOKEN not in json.dumps(result)


# --- age key ----------------------------------------------------------------------------


def test_age_key_mismatch_with_age_public_key(run_module, age_key, tmp_path):
    path, public = age_key
    other = tmp_path / "other.agekey"
    subprocess.run(["age-keygen", "-o", str(other)], check=True, capture_output=True)
    other_public = [line.split(": ", 1)[1] for line in other.read_text().splitlines() if "public key" in line][0]
    result = run_module(preflight_check, {"age_key_file": str(path), "age_public_key": other_public})
    assert result.failed
    assert result["problems"] == [
        f"AGE_PUBLIC_KEY is {other_public} but the key in {path} is {public}: SOPS files encrypted for AGE_PUBLIC_KEY could not be "
        "decrypted; use the matching key file or fix AGE_PUBLIC_KEY"
    ]
    secret = [line for line in path.read_text().splitlines() if line.startswith("AGE-SECRET-KEY-")][0]
    assert secret not in json.dumps(result)


def test_age_key_comment_that_lies_about_the_secret_key(run_module, age_key, tmp_path):
    path, public = age_key
    other = tmp_path / "other.agekey"
    subprocess.run(["age-keygen", "-o", str(other)], check=True, capture_output=True)
    other_public = [line.split(": ", 1)[1] for line in other.read_text().splitlines() if "public key" in line][0]
    path.write_text(path.read_text().replace(public, other_public))
    result = run_module(preflight_check, {"age_key_file": str(path)})
    assert result["problems"] == [
        f"age key file {path}: the public key comment {other_public} does not belong to its secret key "
        f"(which gives {public})"
    ]


def test_malformed_and_missing_age_key_files(run_module, tmp_path):
    bad = tmp_path / "bad.agekey"
    bad.write_text("# public key: age1nope\nAGE-SECRET-KEY-1SHORT\n")
    result = run_module(preflight_check, {"age_key_file": str(bad)})
    assert result["problems"] == [
        f"age key file {bad} is not an age-keygen key file: it lacks a '# created:' line",
        f"age key file {bad}: the AGE-SECRET-KEY line is malformed (expected AGE-SECRET-KEY-1 and 58 bech32 characters)",
        f"age key file {bad}: the public key comment 'age1nope' is not an age recipient (age1...)",
    ]
    missing = tmp_path / "missing.agekey"
    result = run_module(preflight_check, {"age_key_file": str(missing)})
    assert result["problems"] == [
        f"age key file {missing} does not exist: create it with `age-keygen -o {missing}` (and keep it out of Git)"
    ]


# --- GitHub -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra, problem",
    [
        (
            {"github_token": "wrong"},
            "GitHub refused GITHUB_TOKEN (401 Bad credentials): it is invalid or expired; create a "
            "new token that can read krops/krops",
        ),
        (
            {"git_url": "https://github.com/krops/secret"},
            "repository krops/secret was not found with GITHUB_TOKEN: it does "
            "not exist or the token cannot read it (a fine-grained token needs "
            "Contents: read on it)",
        ),
        (
            {"git_branch": "release/1"},
            "branch release/1 does not exist in krops/krops: push it, or set git-branch in bootstrap.toml",
        ),
        (
            {"git_url": "git@github.com:krops/krops.git"},
            "git URL 'git@github.com:krops/krops.git' is not "
            "https://github.com/<owner>/<repo>: set GIT_REPO_URL or "
            "bootstrap.git-url",
        ),
    ],
)
def test_git_sync_problems(run_module, github, extra, problem):
    result = run_module(preflight_check, git_args(github, **extra))
    assert result.failed and result["problems"] == [problem]
    assert TOKEN not in json.dumps(result) and "wrong" not in result["msg"]


def test_branch_path_is_quoted(run_module, github):
    run_module(preflight_check, git_args(github, git_branch="release/1"))
    assert _GitHub.seen[-1][0] == "/repos/krops/krops/branches/release%2F1"


def test_token_from_environment_and_missing_token(run_module, github, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    args = git_args(github)
    del args["github_token"]
    assert run_module(preflight_check, args)["problems"] == []
    monkeypatch.delenv("GITHUB_TOKEN")
    result = run_module(preflight_check, args)
    assert result["problems"] == [
        "GITHUB_TOKEN is not set: Flux needs a personal access token that can read krops/krops"
    ]


def test_unreachable_github_api(run_module):
    result = run_module(
        preflight_check,
        {"git_url": "https://github.com/krops/krops", "github_token": TOKEN, "github_api_url": "http://127.0.0.1:9"},
    )
    assert result["problems"][0].startswith("cannot reach the GitHub API at http://127.0.0.1:9: ")


# --- AWS Elastic IPs ----------------------------------------------------------------------


def allocate(moto, region, count, owner=None):
    ec2 = boto3.client("ec2", region_name=region, endpoint_url=moto)
    for dummy in range(count):
        spec = {"Domain": "vpc"}
        if owner:
            spec["TagSpecifications"] = [
                {"ResourceType": "elastic-ip", "Tags": [{"Key": OWNED % owner, "Value": "owned"}]}
            ]
        ec2.allocate_address(**spec)


def test_eip_quota_lists_every_short_region_with_the_request(moto, run_module):
    allocate(moto, "eu-north-1", 3)  # someone else's
    allocate(moto, "eu-north-1", 1, owner="eu-north-1-management")  # ours: counts as available
    allocate(moto, "eu-central-1", 4)
    checks = [
        {"region": "eu-north-1", "clusters": ["eu-north-1-management", "eu-north-1-workload"]},
        {"region": "eu-west-1", "clusters": ["eu-west-1-workload"]},
        {"region": "eu-central-1", "clusters": ["eu-central-1-workload"]},
    ]
    result = run_module(preflight_check, {"aws_eip_checks": checks, "endpoint_url": moto})
    assert result.failed
    north, west, central = result["aws_eip"]
    assert north == {
        "region": "eu-north-1",
        "clusters": ["eu-north-1-management", "eu-north-1-workload"],
        "limit": 5,
        "limit_source": "ec2 account attribute vpc-max-elastic-ips",
        "allocated": 4,
        "owned": 1,
        "needed": 6,
        "available": 2,
        "short": True,
        "request": "aws service-quotas request-service-quota-increase --service-code ec2 --quota-code "
        "L-0263D0A3 --desired-value 9 --region eu-north-1",
    }
    assert west["short"] is False and west["available"] == 5 and west["request"] is None
    assert central["short"] is True and central["available"] == 1
    assert result["problems"] == [
        "aws eu-north-1: 6 Elastic IPs needed for eu-north-1-management, eu-north-1-workload (3 per cluster, one NAT "
        "gateway per AZ) but only 2 available (limit 5, 4 allocated, 1 of them owned by these clusters); raise the "
        "quota: aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-0263D0A3 "
        "--desired-value 9 --region eu-north-1",
        "aws eu-central-1: 3 Elastic IPs needed for eu-central-1-workload (3 per cluster, one NAT gateway per AZ) but "
        "only 1 available (limit 5, 4 allocated, 0 of them owned by these clusters); raise the quota: aws "
        "service-quotas request-service-quota-increase --service-code ec2 --quota-code L-0263D0A3 --desired-value 7 "
        "--region eu-central-1",
    ]


class _QuotasInFrontOfMoto(BaseHTTPRequestHandler):
    """Answers Service Quotas' GetServiceQuota for EC2 (moto lacks it) and relays every other call to moto."""

    moto = None
    quota = 10.0

    def log_message(self, *args):
        return

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("X-Amz-Target") == "ServiceQuotasV20190624.GetServiceQuota":
            asked = json.loads(body)
            assert asked == {"ServiceCode": "ec2", "QuotaCode": "L-0263D0A3"}
            code, data, ctype = (
                200,
                json.dumps({"Quota": {"ServiceCode": "ec2", "QuotaCode": "L-0263D0A3", "Value": self.quota}}).encode(),
                "application/x-amz-json-1.1",
            )
        else:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
            request = urllib.request.Request(self.moto + self.path, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    code, data, ctype = response.status, response.read(), response.headers.get("Content-Type")
            except urllib.error.HTTPError as exc:
                code, data, ctype = exc.code, exc.read(), exc.headers.get("Content-Type")
        self.send_response(code)
        self.send_header("Content-Type", ctype or "text/xml")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_eip_limit_comes_from_service_quotas_when_it_answers(moto, run_module):
    _QuotasInFrontOfMoto.moto = moto
    server = ThreadingHTTPServer(("127.0.0.1", 0), _QuotasInFrontOfMoto)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        allocate(moto, "eu-north-1", 4)
        result = run_module(
            preflight_check,
            {
                "aws_eip_checks": [
                    {"region": "eu-north-1", "clusters": ["eu-north-1-management", "eu-north-1-workload"]}
                ],
                "endpoint_url": "http://127.0.0.1:%d" % server.server_address[1],
            },
        )
    finally:
        server.shutdown()
        server.server_close()
    assert not result.failed, result
    assert result["aws_eip"][0]["limit"] == 10 and result["aws_eip"][0]["available"] == 6
    assert result["aws_eip"][0]["limit_source"] == "service-quotas get-service-quota"


def test_eip_quota_unreadable_is_a_problem_not_a_traceback(moto, run_module, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.delenv("AWS_SESSION_TOKEN")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    result = run_module(
        preflight_check, {"aws_eip_checks": [{"region": "eu-north-1", "clusters": ["a"]}], "endpoint_url": moto}
    )
    assert result.failed
    assert result["problems"] == [
        "aws eu-north-1: cannot read the Elastic IPs (Unable to locate credentials); check "
        "the AWS credentials and region"
    ]


def test_every_kind_of_problem_in_one_failure(fake_bins, moto, run_module, github, tmp_path):
    allocate(moto, "eu-west-1", 5)
    result = run_module(
        preflight_check,
        dict(
            git_args(github, git_branch="gone"),
            tools=["kind", "no-such-tool"],
            age_key_file=str(tmp_path / "none"),
            aws_eip_checks=[{"region": "eu-west-1", "clusters": ["eu-west-1-workload"]}],
            endpoint_url=moto,
        ),
    )
    assert result.failed and len(result["problems"]) == 4
    assert result["msg"].startswith("preflight found 4 problems:\n- missing tools: no-such-tool ")
    assert [line.split(" ")[0] for line in result["msg"].splitlines()[1:]] == ["-"] * 4
    report = run_module(preflight_check, dict(git_args(github, git_branch="gone"), fail_on_problems=False))
    assert not report.failed and len(report["problems"]) == 1


# --- the role, end to end -------------------------------------------------------------------


def test_role_passes_for_local_host_and_fails_once_for_aws(ansible_playbook, fake_bins, github, age_key, moto):
    path, public = age_key
    config = str(REPO / "bootstrap.toml")
    local = {
        "name": "local-host",
        "hosts": "localhost",
        "gather_facts": False,
        "roles": ["krops.platform.preflight"],
        "vars": {
            "krops_environment": "local-host",
            "preflight_config_file": config,
            "preflight_github_api_url": "http://127.0.0.1:9",
        },
    }  # oci sync: GitHub is never asked
    aws = {
        "name": "aws",
        "hosts": "localhost",
        "gather_facts": False,
        "roles": ["krops.platform.preflight"],
        "pre_tasks": [
            {
                "name": "Lose clusterctl",
                "ansible.builtin.file": {"path": str(fake_bins.dir / "clusterctl"), "state": "absent"},
            }
        ],
        "vars": {
            "krops_environment": "aws",
            "preflight_config_file": config,
            "preflight_github_api_url": github,
            "preflight_github_token": TOKEN,
            "preflight_git_url": "https://github.com/krops/krops",
            "preflight_git_branch": "nope",
            "preflight_age_key_file": str(path),
            "preflight_age_public_key": public,
            "preflight_aws_endpoint_url": moto,
        },
    }
    aws["vars"]["preflight_provider_manifests"] = []  # the aws tree is not in this checkout's test copy
    fake_bins.install("kind", kind_engine.SCRIPT.format(python=sys.executable, root=str(REPO)))
    rc, output, stderr = ansible_playbook([local, aws])
    assert rc == 2, (output, stderr)
    plays = output["plays"]
    passed = {t["task"]["name"].split(" : ", 1)[-1]: t["hosts"]["localhost"] for t in plays[0]["tasks"]}
    check = passed[
        "Check tools and their versions, the engine, Git access, the age key and AWS quotas (fails once, "
        "listing every problem)"
    ]
    assert not check.get("failed") and check["problems"] == [], json.dumps(check)[:2000]
    assert check["versions"]["clusterctl"] == {
        "capi_version": "v1.13.5",
        "clusterctl_version": "1.13.5",
        "contract": "v1beta2",
    }
    assert check["versions"]["kind"]["kind_version"] == "0.32.0"
    assert check["versions"]["helm"] == {"helm_version": "4.2.4"} and check["versions"]["docker"]["daemon"] is True
    assert sorted(check["tools"]["found"]) == ["clusterctl", "docker", "helm", "kind", "kubectl"]
    assert "git" not in check and "age_key" not in check and "aws_eip" not in check
    assert passed["Report what preflight found"]["msg"][0] == "environment local-host: every check passed"

    results = {t["task"]["name"]: t["hosts"]["localhost"] for t in plays[1]["tasks"]}
    failed = [r for r in results.values() if r.get("failed")]
    assert len(failed) == 1
    problems = failed[0]["problems"]
    assert len(problems) == 3
    assert problems[0].startswith("missing tools: clusterctl (install them or put them on PATH; PATH is ")
    assert problems[1] == "branch nope does not exist in krops/krops: push it, or set git-branch in bootstrap.toml"
    assert problems[2].startswith("aws eu-north-1: 6 Elastic IPs needed for eu-north-1-management, eu-north-1-workload")
    # the plan comes from bootstrap.toml: the management cluster plus each aws-workloads entry, merged per region
    assert [(e["region"], e["clusters"], e["needed"], e["short"]) for e in failed[0]["aws_eip"]] == [
        ("eu-north-1", ["eu-north-1-management", "eu-north-1-workload"], 6, True),
        ("eu-west-1", ["eu-west-1-workload"], 3, False),
    ]
    assert sorted(failed[0]["tools"]["found"]) == ["docker", "helm", "kind", "kubectl", "sops"]  # aws: SOPS at pivot
    assert failed[0]["age_key"]["public_key"] == public
    assert TOKEN not in json.dumps(output)


# --- versions, not only presence ---------------------------------------------------------------

IMAGE = "kindest/node:v1.35.5@sha256:ce977ae6d65918d0b58a5f8b5e940429c2ce42fa3a5619ec2bbc60b949c0ac95"
CORE = str(REPO / "mgmt/local-host/capi-system/core-provider.yaml")


def version_args(**extra):
    base = {
        "tools": ["kind", "helm", "clusterctl", "docker"],
        "provider_manifests": [CORE],
        "kind_node_image": IMAGE,
        "helm_oci": True,
        "container_engine": "docker",
    }
    base.update(extra)
    return base


def test_pinned_versions_pass_and_are_reported(fake_bins, run_module):
    fake_bins.install("kind", kind_engine.SCRIPT.format(python=sys.executable, root=str(REPO)))
    fake_bins.answer("docker", "info", stdout='"28.3.0"\n')
    result = run_module(preflight_check, version_args())
    assert not result.failed, result["msg"]
    assert result["versions"] == {
        "clusterctl": {"capi_version": "v1.13.5", "clusterctl_version": "1.13.5", "contract": "v1beta2"},
        "kind": {"kind_version": "0.32.0", "node_image": IMAGE},
        "helm": {"helm_version": "4.2.4"},
        "docker": {"engine": "docker", "daemon": True, "server_version": "28.3.0"},
    }
    info = [c["argv"] for c in fake_bins.calls("docker")]
    assert info == [["info", "--format", "{{json .ServerVersion}}"]]


def test_wrong_versions_and_a_dead_daemon_are_all_reported_together(fake_bins, run_module, monkeypatch):
    fake_bins.install("kind", kind_engine.SCRIPT.format(python=sys.executable, root=str(REPO)))
    monkeypatch.setenv("FAKE_KIND_VERSION", "0.31.0")
    fake_bins.answer("clusterctl", "version", stdout="v1.10.4\n")
    fake_bins.answer("helm", "version", stdout="v3.7.2+g663a896\n")
    fake_bins.answer(
        "docker",
        "info",
        stderr="Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n",
        rc=1,
    )
    result = run_module(preflight_check, version_args(tools=["kind", "helm", "clusterctl", "docker", "nope"]))
    assert result.failed
    problems = result["problems"]
    assert problems[0].startswith("missing tools: nope ")
    assert problems[1:] == [
        "clusterctl v1.10.4 implements contract v1beta1 but Cluster API v1.13.5 needs v1beta2: install clusterctl v1.13.5",
        "kind 0.31.0 was not published with node image {}; use one of its images ({}) in bootstrap.kind-node-image, "
        "with the digest".format(
            IMAGE,
            ", ".join(
                "{}@{}".format(*i)
                for i in sorted(
                    __import__("ansible_collections.krops.platform.plugins.module_utils.preflight", fromlist=["x"])
                    .KIND_NODE_IMAGES["0.31.0"]
                    .items()
                )
            ),
        ),
        "helm v3.7.2+g663a896 is too old for oci:// charts (needs v3.8.0 or later, where OCI support is generally "
        "available): upgrade helm",
        "docker is installed but its daemon does not answer (Cannot connect to the Docker daemon at "
        "unix:///var/run/docker.sock. Is the docker daemon running?): start it, or set ENGINE_SOCK/DOCKER_HOST to its "
        "socket",
    ]
    assert result["msg"].startswith("preflight found 5 problems:")


def test_image_without_digest_unknown_kind_and_a_manifest_without_core_provider(
    fake_bins, run_module, monkeypatch, tmp_path
):
    fake_bins.install("kind", kind_engine.SCRIPT.format(python=sys.executable, root=str(REPO)))
    result = run_module(
        preflight_check,
        version_args(
            kind_node_image="kindest/node:v1.35.5", helm_oci=False, container_engine=None, tools=["kind", "clusterctl"]
        ),
    )
    assert result["problems"] == [
        "node image kindest/node:v1.35.5 has no digest: kind's release notes require the exact image, " + IMAGE
    ]
    monkeypatch.setenv("FAKE_KIND_VERSION", "0.20.0")
    from ansible_collections.krops.platform.plugins.module_utils import cli

    cli._version_cache.clear()  # the version is probed once per process and binary
    other = tmp_path / "providers.yaml"
    other.write_text("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: capi-system\n")
    result = run_module(
        preflight_check,
        version_args(
            provider_manifests=[str(other)], helm_oci=False, container_engine=None, tools=["kind", "clusterctl"]
        ),
    )
    assert result["problems"] == [
        f"no CoreProvider in the provider manifests ({other}): bootstrap.toml provider-manifests must list it",
        "kind 0.20.0: krops does not know which node images it supports (known: kind 0.31.0, 0.32.0); install kind "
        "v0.32.0",
    ]


def test_missing_pinned_tools_are_named_with_their_versions_and_the_installer(fake_bins, run_module):
    result = run_module(preflight_check, {"tools": ["kind", "no-such-tool-a"]})
    assert result.failed
    from ansible_collections.krops.platform.plugins.module_utils import preflight

    facts, problems = preflight.check_tools(["sops", "clusterctl", "no-such-tool-a"], environ={"PATH": "/nowhere"})
    assert facts["missing"] == ["sops", "clusterctl", "no-such-tool-a"]
    assert problems == [
        "missing tools: sops, clusterctl, no-such-tool-a (install them or put them on PATH; PATH is /nowhere). "
        "krops pins sops v3.13.3, clusterctl v1.13.5 (meta/tools.yml); `python scripts/install_tools.py --only sops "
        "clusterctl --dest ~/.local/bin` in a checkout installs exactly those, each checked against its SHA-256"
    ]
    # The versions are meta/tools.yml's, and the installer takes the options the message gives.
    import yaml

    pins = yaml.safe_load((REPO / "meta" / "tools.yml").read_text())["tools"]
    assert preflight.PINNED_TOOLS == {name: pin["version"] for name, pin in pins.items()}
    helptext = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "install_tools.py"), "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--only" in helptext and "--dest" in helptext
