# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""render_diff over a real Git repository built here: the local-host tree plus a data component
(an ACK Bucket tagged for local-host, a Flux source Bucket as decoy, a Deployment), and commits
that change an image, delete the Bucket, break a render, drop the ownership tag, rename the
bucket, turn prune on and commit a plaintext Secret. Each test asserts the complete finding list.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from contextlib import redirect_stderr, redirect_stdout

import pytest

from ansible_collections.krops.platform.plugins.module_utils import render_diff
from ansible_collections.krops.platform.plugins.module_utils import render_diff_report
from tests.substrate.fixtures import REPO, copy_playbook
from tests.substrate.trees import SCHEMAS, edit

DATA = "mgmt/local-host/data"

FLUX_KS = """apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: data
  namespace: flux-system
spec:
  interval: 5m
  prune: false
  path: ./mgmt/local-host/data
  sourceRef:
    kind: OCIRepository
    name: flux-system
"""
BUCKET = """apiVersion: s3.services.k8s.aws/v1alpha1
kind: Bucket
metadata:
  name: krops-data
  namespace: default
spec:
  name: krops-local-data
  tagging:
    tagSet:
      - key: krops.io/environment
        value: local-host
"""
# Flux's source Bucket: same kind name, nothing in the cloud is deleted with it.
DECOY = """apiVersion: source.toolkit.fluxcd.io/v1
kind: Bucket
metadata:
  name: krops-data
  namespace: flux-system
spec:
  interval: 10m
  bucketName: krops-local-data
  endpoint: s3.amazonaws.com
"""
APP = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: uploader
  namespace: default
spec:
  selector:
    matchLabels: {app: uploader}
  template:
    metadata:
      labels: {app: uploader}
    spec:
      containers:
        - name: uploader
          image: ghcr.io/example/uploader:1.0.0
"""
SECRET = """apiVersion: v1
kind: Secret
metadata:
  name: uploader-token
  namespace: default
stringData:
  token: hunter2
"""


def git(root, *args):
    return subprocess.run(
        [
            "git",
            "-C",
            str(root),
            "-c",
            "user.name=krops test",
            "-c",
            "user.email=test@krops.invalid",
            "-c",
            "commit.gpgsign=false",
        ]
        + list(args),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def commit(root, message):
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)
    return git(root, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path):
    """Git repository: the local-host tree with the data component; returns (root, base sha)."""
    root = tmp_path / "repo"
    for part in ("mgmt/local-host", "workload/local-host"):
        shutil.copytree(REPO / part, root / part)
    for name in ("bootstrap.toml", ".yamllint"):
        shutil.copy(REPO / name, root / name)
    data = root / DATA
    data.mkdir()
    (data / "flux-ks.yaml").write_text(FLUX_KS)
    (data / "bucket.yaml").write_text(BUCKET)
    (data / "decoy.yaml").write_text(DECOY)
    (data / "app.yaml").write_text(APP)
    (data / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources:\n  - bucket.yaml\n  - decoy.yaml\n  - app.yaml\n"
    )
    top = root / "mgmt/local-host/kustomization.yaml"
    top.write_text(
        top.read_text().replace("  - flux-apps/flux-ks.yaml\n", "  - flux-apps/flux-ks.yaml\n  - data/flux-ks.yaml\n")
    )
    git(root, "init", "-q", "-b", "main")
    return root, commit(root, "base")


def diff(root, base, **kwargs):
    kwargs.setdefault("schema_location", str(SCHEMAS))
    return render_diff.run(str(root), base, "HEAD", **kwargs)


def ids(report):
    return [(f["id"], f["acknowledged"]) for f in report["findings"]]


def data_changes(report):
    return report["environments"]["local-host"]["kustomizations"].get("flux-system/data")


def test_same_revision_reports_nothing(repo):
    root, base = repo
    report = diff(root, base)
    assert report["findings"] == [] and report["blocking"] == 0
    assert report["environments"]["local-host"]["kustomizations"] == {}
    assert report["environments"]["local-host"]["clusters"] == []


def test_image_change_is_a_field_diff_and_a_version_change_without_findings(repo):
    root, base = repo
    edit(root, DATA + "/app.yaml", "uploader:1.0.0", "uploader:1.1.0")
    head = commit(root, "uploader 1.1.0")
    report = diff(root, base)
    assert report["head"] == head and report["base"] == base
    assert ids(report) == []
    assert data_changes(report) == {
        "added": [],
        "removed": [],
        "changed": [
            {
                "object": "Deployment/default/uploader",
                "file": DATA + "/app.yaml",
                "fields": [
                    {
                        "path": "spec.template.spec.containers[uploader].image",
                        "base": "ghcr.io/example/uploader:1.0.0",
                        "head": "ghcr.io/example/uploader:1.1.0",
                    }
                ],
            }
        ],
    }
    section = report["environments"]["local-host"]
    assert section["versions"] == [
        {
            "object": "Deployment/default/uploader",
            "path": "spec.template.spec.containers[uploader].image",
            "base": "ghcr.io/example/uploader:1.0.0",
            "head": "ghcr.io/example/uploader:1.1.0",
        }
    ]
    assert section["clusters"] == ["local-management"]
    assert section["cloud_resources"] == []


def test_deleting_the_bucket_is_a_danger_finding_the_decoy_is_not(repo):
    root, base = repo
    (root / DATA / "bucket.yaml").unlink()
    (root / DATA / "decoy.yaml").unlink()
    edit(root, DATA + "/kustomization.yaml", "  - bucket.yaml\n  - decoy.yaml\n", "")
    commit(root, "drop the bucket")
    report = diff(root, base)
    assert ids(report) == [("local-host/removed/Bucket/default/krops-data", False)]
    assert report["findings"][0]["message"] == (
        "removes S3 bucket Bucket/default/krops-data: its controller deletes what it manages"
    )
    assert report["blocking"] == 1
    assert data_changes(report)["removed"] == [
        {"object": "Bucket/default/krops-data", "file": DATA + "/bucket.yaml"},
        {"object": "Bucket/flux-system/krops-data", "file": DATA + "/decoy.yaml"},
    ]
    assert report["environments"]["local-host"]["cloud_resources"] == [
        {"cloud": "AWS (ACK)", "object": "Bucket/default/krops-data", "change": "removed"}
    ]


def test_removing_the_kustomization_removes_what_it_applies(repo):
    """The data directory still renders, but no Flux Kustomization applies it any more."""
    root, base = repo
    edit(root, "mgmt/local-host/kustomization.yaml", "  - data/flux-ks.yaml\n", "")
    commit(root, "stop applying data")
    report = diff(root, base)
    assert ids(report) == [("local-host/removed/Bucket/default/krops-data", False)]
    section = report["environments"]["local-host"]
    assert section["not_applied"] == [DATA]
    assert section["kustomizations"]["flux-system/flux-system"] == {
        "added": [],
        "changed": [],
        "removed": [{"object": "Kustomization/flux-system/data", "file": DATA + "/flux-ks.yaml"}],
    }
    assert [o["object"] for o in data_changes(report)["removed"]] == [
        "Deployment/default/uploader",
        "Bucket/default/krops-data",
        "Bucket/flux-system/krops-data",
    ]


def test_workload_overlay_is_applied_by_the_workload_flux_instance(repo):
    root, base = repo
    edit(root, "workload/local-host/podinfo.yaml", "    replicaCount: 1", "    replicaCount: 2")
    commit(root, "two podinfo replicas")
    report = diff(root, base)
    section = report["environments"]["local-host"]
    assert section["kustomizations"] == {
        "FluxInstance flux-system/flux": {
            "added": [],
            "removed": [],
            "changed": [
                {
                    "object": "HelmRelease/podinfo/podinfo",
                    "file": "workload/local-host/podinfo.yaml",
                    "fields": [{"path": "spec.values.replicaCount", "base": 1, "head": 2}],
                }
            ],
        }
    }
    assert section["clusters"] == ["local-workload"] and section["not_applied"] == []


def test_broken_render_is_a_finding_and_the_objects_are_not_reported_removed(repo):
    root, base = repo
    edit(root, DATA + "/kustomization.yaml", "  - app.yaml\n", "  - app.yaml\n  - missing.yaml\n")
    commit(root, "break the data render")
    report = diff(root, base)
    assert [(f["id"], f["kind"], f["object"]) for f in report["findings"]] == [
        (
            "local-host/render-failure/mgmt/local-host/data/kustomization.yaml",
            "render-failure",
            "mgmt/local-host/data/kustomization.yaml",
        )
    ]
    failure = report["environments"]["local-host"]["render_failures"]["head"]
    assert len(failure) == 1 and "missing.yaml" in failure[0]["message"]
    assert report["environments"]["local-host"]["render_failures"]["base"] == []
    assert report["blocking"] == 1


def test_dropping_the_ownership_tag_is_a_danger_finding(repo):
    root, base = repo
    edit(
        root,
        DATA + "/bucket.yaml",
        "      - key: krops.io/environment\n        value: local-host\n",
        "      - key: team\n        value: data\n",
    )
    commit(root, "retag")
    report = diff(root, base)
    assert ids(report) == [("local-host/ownership-dropped/Bucket/default/krops-data", False)]
    assert "spec.tagging.tagSet krops.io/environment" in report["findings"][0]["message"]
    assert report["environments"]["local-host"]["cloud_resources"] == [
        {"cloud": "AWS (ACK)", "object": "Bucket/default/krops-data", "change": "changed"}
    ]


def test_renaming_the_bucket_breaks_its_immutable_name_rule_and_replaces_it(repo):
    """The ACK schema's transition rule `self == oldSelf` on spec.name runs on the base -> head update."""
    root, base = repo
    edit(root, DATA + "/bucket.yaml", "name: krops-local-data", "name: krops-local-data-2")
    commit(root, "rename bucket")
    report = diff(root, base)
    assert ids(report) == [
        ("local-host/replaced/Bucket/default/krops-data", False),
        ("local-host/transition-rule/Bucket/default/krops-data/spec.name", False),
    ]
    assert report["findings"][1]["message"] == (
        "the API server rejects this update: spec.name: Value is immutable once set (rule: self == oldSelf)"
    )
    without_cel = diff(root, base, cel=False)
    assert ids(without_cel) == [("local-host/replaced/Bucket/default/krops-data", False)]


def test_prune_on_deletion_policy_and_plaintext_secret(repo):
    root, base = repo
    edit(root, DATA + "/flux-ks.yaml", "prune: false", "prune: true")
    edit(
        root,
        DATA + "/bucket.yaml",
        "  namespace: default\n",
        "  namespace: default\n  annotations:\n    services.k8s.aws/deletion-policy: delete\n",
    )
    (root / DATA / "secret.yaml").write_text(SECRET)
    edit(root, DATA + "/kustomization.yaml", "  - app.yaml\n", "  - app.yaml\n  - secret.yaml\n")
    commit(root, "prune, policy, secret")
    report = diff(root, base)
    assert ids(report) == [
        ("local-host/deletion-policy/Bucket/default/krops-data/services.k8s.aws/deletion-policy", False),
        ("local-host/plaintext-secret/Secret/default/uploader-token", False),
        ("local-host/prune-enabled/Kustomization/flux-system/data", False),
    ]
    assert report["findings"][0]["message"] == (
        "Bucket/default/krops-data annotation services.k8s.aws/deletion-policy: (unset) -> delete"
    )
    added = data_changes(report)["added"]
    assert added == [{"object": "Secret/default/uploader-token", "file": DATA + "/secret.yaml"}]
    text = render_diff.markdown(report) + json.dumps(report, default=list)
    assert "hunter2" not in text  # secret values never reach the comment


def test_accept_file_and_label_acknowledge_and_main_exits_accordingly(repo, tmp_path):
    root, base = repo
    (root / DATA / "bucket.yaml").unlink()
    edit(root, DATA + "/kustomization.yaml", "  - bucket.yaml\n", "")
    commit(root, "drop the bucket")
    finding = "local-host/removed/Bucket/default/krops-data"
    accept = root / "accepted.txt"  # inside the repository (an accept file outside it is refused)
    accept.write_text(f"# reviewed by the data team\n{finding}  # retired\nlocal-host/removed/Bucket/default/other\n")
    report = diff(root, base, accept_file=str(accept))
    assert ids(report) == [(finding, True)] and report["blocking"] == 0
    assert report["stale_acknowledgements"] == ["line 3"]  # by line number, never by content

    base_args = ["--repo", str(root), "--base", base, "--schema-location", str(SCHEMAS)]
    md, js = tmp_path / "comment.md", tmp_path / "report.json"
    out = io.StringIO()
    with redirect_stdout(out):
        assert (
            render_diff.main(base_args + ["--format", "markdown", "--markdown-out", str(md), "--json-out", str(js)])
            == 1
        )
    assert out.getvalue() == md.read_text()
    assert md.read_text().startswith(render_diff_report.MARKER + "\n")
    assert f"| ❌ | `{finding}` |" in md.read_text()
    assert json.loads(js.read_text())["blocking"] == 1
    with redirect_stdout(io.StringIO()):
        assert render_diff.main(base_args + ["--accept-file", str(accept)]) == 0
        assert render_diff.main(base_args + ["--labels", "documentation,render-diff/accept"]) == 0
        assert render_diff.main(base_args + ["--label", "render-diff/accepted"]) == 1  # exact label only


def test_accept_file_rejects_patterns(repo, tmp_path):
    root, base = repo
    accept = root / "accepted.txt"
    accept.write_text("local-host/removed/*\n")
    with pytest.raises(render_diff.RenderDiffError) as caught:
        diff(root, base, accept_file=str(accept))
    assert str(caught.value) == (
        f"accept file {accept} line 1 is not a finding id (exact ids <environment>/<kind>/<object> such as "
        "local-host/removed/Bucket/default/data; no patterns); the line is not shown"
    )


def test_unknown_revision_is_a_clear_error_and_exit_2(repo):
    root, _base = repo
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        assert render_diff.main(["--repo", str(root), "--base", "no-such-branch"]) == 2
    assert err.getvalue() == (
        f"ERROR: revision no-such-branch is not a commit of the Git repository {root} (fetch it, e.g. "
        "actions/checkout with fetch-depth: 0)\n"
    )


def test_an_environment_at_neither_revision_is_refused_naming_those_there(repo):
    """An environment asked for that neither revision has (a typo) is an error, not an empty comparison."""
    root, base = repo
    with pytest.raises(render_diff.RenderDiffError) as caught:
        diff(root, base, environments=["local-host", "local-hots"])
    assert str(caught.value) == (
        "environment 'local-hots' is at neither revision (no mgmt/local-hots); the revisions have: local-host; "
        "name one of them, or none to compare all"
    )


def test_environment_added_at_head_lists_every_object_added(repo):
    root, base = repo
    shutil.copytree(root / "mgmt/local-host", root / "mgmt/local-copy")
    for path in (root / "mgmt/local-copy").rglob("*.yaml"):
        path.write_text(path.read_text().replace("./mgmt/local-host/", "./mgmt/local-copy/"))
    commit(root, "a second environment folder")
    report = diff(root, base)
    section = report["environments"]["local-copy"]
    assert section["present"] == {"base": False, "head": True}
    added = sorted(o["object"] for b in section["kustomizations"].values() for o in b["added"])
    local_host = render_diff.render_revision(str(root), ["local-host"])["local-host"]["objects"]
    assert len(added) == len([o for o in local_host.values() if not o.directory.startswith("workload/")])
    assert "Namespace/cert-manager" in added and "Cluster/default/local-management" in added
    assert report["environments"]["local-host"]["kustomizations"] == {}
    assert ids(report) == []


def test_environment_removed_at_head_removes_its_clusters_and_namespaces(repo):
    root, base = repo
    shutil.rmtree(root / "mgmt/local-host")
    commit(root, "drop the environment")
    report = diff(root, base)
    assert report["environments"]["local-host"]["present"] == {"base": True, "head": False}
    assert [f["id"] for f in report["findings"]] == [
        "local-host/removed/Bucket/default/krops-data",
        "local-host/removed/Cluster/default/local-management",
        "local-host/removed/Cluster/default/local-workload",
        "local-host/removed/Namespace/caaph-system",
        "local-host/removed/Namespace/capd-system",
        "local-host/removed/Namespace/capi-kubeadm-bootstrap-system",
        "local-host/removed/Namespace/capi-kubeadm-control-plane-system",
        "local-host/removed/Namespace/capi-operator-system",
        "local-host/removed/Namespace/capi-system",
        "local-host/removed/Namespace/cert-manager",
        "local-host/removed/Namespace/podinfo",
    ]


def test_missing_schemas_are_listed_not_silently_skipped(repo, tmp_path, monkeypatch):
    root, base = repo
    monkeypatch.delenv("KROPS_SCHEMA_LOCATION", raising=False)
    monkeypatch.chdir(tmp_path)
    edit(root, DATA + "/app.yaml", "uploader:1.0.0", "uploader:1.1.0")
    commit(root, "uploader 1.1.0")
    report = render_diff.run(str(root), base, "HEAD")  # the test repository has no schemas/crds
    assert ids(report) == []  # rendering does not need schemas
    assert [o["object"] for o in data_changes(report)["changed"]] == ["Deployment/default/uploader"]
    assert report["cel_unevaluable"] == [
        {
            "environment": "-",
            "object": "-",
            "message": (
                "transition rules not evaluated: schema location schemas/crds is neither a folder nor an https:// URL template"
            ),
        }
    ]


# --- module and playbook -------------------------------------------------------------------------


def test_module_fails_on_blocking_findings_passes_when_acknowledged(repo, run_module, tmp_path):
    from ansible_collections.krops.platform.plugins.modules import render_diff as module

    root, base = repo
    (root / DATA / "bucket.yaml").unlink()
    edit(root, DATA + "/kustomization.yaml", "  - bucket.yaml\n", "")
    commit(root, "drop the bucket")
    args = {"repo": str(root), "base": base, "schema_location": str(SCHEMAS)}
    for check_mode in (False, True):
        result = run_module(module, args, check_mode=check_mode)
        assert result.failed and result["changed"] is False
        assert result["msg"] == (
            "render_diff found 1 finding(s) not acknowledged:\nlocal-host/removed/Bucket/default/"
            "krops-data: removes S3 bucket Bucket/default/krops-data: its controller deletes what it manages"
        )
        assert result["blocking"] == 1 and result["markdown"].startswith(render_diff_report.MARKER)
    result = run_module(module, dict(args, labels=["render-diff/accept"]))
    assert not result.failed and result["blocking"] == 0
    assert [f["acknowledged"] for f in result["findings"]] == [True]
    result = run_module(module, dict(args, base="nope"))
    assert result.failed and result["msg"] == (
        "render_diff could not run: revision nope is not a commit of the Git "
        f"repository {root} (fetch it, e.g. actions/checkout with fetch-depth: 0)"
    )


@pytest.mark.slow
def test_render_diff_playbook(repo, ansible_playbook, tmp_path):
    root, base = repo
    copy_playbook("render_diff.yml", root)
    edit(
        root,
        DATA + "/bucket.yaml",
        "      - key: krops.io/environment\n        value: local-host\n",
        "      - key: team\n        value: data\n",
    )
    commit(root, "retag")
    comment = tmp_path / "comment.md"
    env = {"KROPS_SCHEMA_LOCATION": str(SCHEMAS)}
    rc, output, stderr = ansible_playbook(
        root / "playbooks" / "render_diff.yml",
        "-e",
        f"render_diff_base={base}",
        "-e",
        f"render_diff_markdown_file={comment}",
        env=env,
    )
    assert rc == 2, (output, stderr)
    from tests.substrate.fixtures import task_results

    results = task_results(output)
    assert results["Render and compare both revisions"]["blocking"] == 1
    assert results["Fail on findings not acknowledged"]["failed"] is True
    assert comment.read_text().startswith(render_diff_report.MARKER + "\n")
    assert "`local-host/ownership-dropped/Bucket/default/krops-data`" in comment.read_text()
    rc, output, stderr = ansible_playbook(
        root / "playbooks" / "render_diff.yml",
        "-e",
        f"render_diff_base={base}",
        "-e",
        '{"render_diff_labels": ["render-diff/accept"]}',
        env=env,
    )
    assert rc == 0, (output, stderr)


def test_api_version_change_lists_transition_rules_as_not_evaluated(repo):
    root, base = repo
    edit(root, DATA + "/decoy.yaml", "source.toolkit.fluxcd.io/v1", "source.toolkit.fluxcd.io/v1beta2")
    commit(root, "older Bucket version")
    report = diff(root, base)
    assert ids(report) == []
    assert report["cel_unevaluable"] == [
        {
            "environment": "local-host",
            "object": "Bucket/flux-system/krops-data",
            "message": "transition rules not evaluated: apiVersion changes from source.toolkit.fluxcd.io/v1 "
            "to source.toolkit.fluxcd.io/v1beta2",
        }
    ]


def test_not_a_repository_and_option_like_revisions_are_refused(tmp_path, repo):
    with pytest.raises(render_diff.RenderDiffError) as caught:
        render_diff.run(str(tmp_path), "main")
    assert str(caught.value) == (
        f"{tmp_path} is not a Git repository (render_diff compares commits: give the repository's folder)"
    )
    with pytest.raises(render_diff.RenderDiffError) as caught:
        render_diff.run(str(repo[0]), "--output=/tmp/x")
    assert str(caught.value) == "revision '--output=/tmp/x' is not a branch, tag or commit name"


XP_DB = """apiVersion: rds.aws.m.upbound.io/v1beta1
kind: Instance
metadata:
  name: krops-db
  namespace: default
spec:
  managementPolicies: [Observe, Create, Update, LateInitialize]
  forProvider:
    region: eu-north-1
    identifier: krops-db
    engine: postgres
    instanceClass: db.t4g.micro
    tags:
      krops.io/environment: local-host
"""
XP_VPC = """apiVersion: ec2.aws.m.upbound.io/v1beta1
kind: VPC
metadata:
  name: krops-net
  namespace: default
spec:
  forProvider:
    region: eu-north-1
    cidrBlock: 10.1.0.0/16
"""


def _with_crossplane(root):
    (root / DATA / "db.yaml").write_text(XP_DB)
    (root / DATA / "vpc.yaml").write_text(XP_VPC)
    edit(root, DATA + "/kustomization.yaml", "  - app.yaml\n", "  - app.yaml\n  - db.yaml\n  - vpc.yaml\n")


def test_crossplane_db_instance_that_deletion_would_destroy_is_a_danger(repo):
    root, base = repo
    _with_crossplane(root)
    base = commit(root, "a crossplane db without Delete, and a vpc")
    assert ids(diff(root, base)) == []
    edit(root, DATA + "/db.yaml", "  managementPolicies: [Observe, Create, Update, LateInitialize]\n", "")
    edit(root, DATA + "/vpc.yaml", "spec:\n", "spec:\n  managementPolicies: [Observe]\n")
    commit(root, "default policies on the db, observe-only vpc")
    report = diff(root, base)
    assert ids(report) == [
        ("local-host/deletes-data/Instance/default/krops-db", False),
        ("local-host/management-policies/Instance/default/krops-db/managementPolicies", False),
        ("local-host/management-policies/VPC/default/krops-net/managementPolicies", False),
    ]
    messages = [f["message"] for f in report["findings"]]
    assert messages[0] == (
        "Instance/default/krops-db: deleting this object deletes the RDS instance and its data (managementPolicies "
        "allow Delete); leave Delete out of spec.managementPolicies (and set deletionPolicy: Orphan on the "
        "cluster-scoped form) so a change in Git cannot destroy it, as mgmt/aws-crossplane does"
    )
    assert messages[1] == (
        "Instance/default/krops-db spec.managementPolicies: ['Observe', 'Create', 'Update', 'LateInitialize'] -> (unset)"
    )


def test_an_added_crossplane_db_instance_with_delete_is_a_danger_and_the_vpc_is_not(repo):
    root, base = repo
    _with_crossplane(root)
    edit(root, DATA + "/db.yaml", "LateInitialize]", "Delete]")
    commit(root, "add them")
    assert ids(diff(root, base)) == [("local-host/deletes-data/Instance/default/krops-db", False)]
