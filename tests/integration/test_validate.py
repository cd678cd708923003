# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""validate: the local-host tree is clean, and every planted defect is reported exactly.

Each test copies the real tree (mgmt/local-host, workload/local-host, bootstrap.toml,
.yamllint) into a temporary folder, plants one defect and asserts the complete list of
findings, so a rule that stops firing, or fires too much, fails the test.
"""

from __future__ import annotations

import functools
import http.server
import io
import json
import os
import shutil
import subprocess
import threading
from contextlib import redirect_stdout

import pytest

from ansible_collections.krops.platform.plugins.module_utils import render
from ansible_collections.krops.platform.plugins.module_utils import validate
from ansible_collections.krops.platform.plugins.modules import validate as validate_module
from tests.substrate.fixtures import REPO, VENV_BIN, copy_playbook, free_port, task_results
from tests.substrate.trees import SCHEMAS, SECRET_GENERATOR_PLAINTEXT, copy_repo, edit, findings as found

LH = "mgmt/local-host"


@pytest.fixture
def tree(tmp_path):
    """A copy of the local-host tree; returns its root Path."""
    return copy_repo(tmp_path, ("mgmt/local-host", "workload/local-host"))


def check(root, **kwargs):
    kwargs.setdefault("environments", ["local-host"])
    kwargs.setdefault("schema_location", str(SCHEMAS))
    return validate.run(str(root), **kwargs)


# --- the real tree ------------------------------------------------------------------------


def test_local_host_tree_has_zero_findings():
    result = check(REPO)
    assert found(result) == []
    summary = result["summary"]["local-host"]
    assert summary["findings"] == 0
    assert summary["directories"] == 12
    assert summary["objects"] >= 45
    kinds = {}
    for directory, objects in render.render_directories([str(REPO / LH), str(REPO / LH / "flux-apps")]).items():
        for obj in objects:
            kinds.setdefault(obj["kind"], []).append(obj["metadata"]["name"])
    # The root applies only the components' Flux Kustomizations.
    assert sorted(kinds["Kustomization"]) == sorted(
        [
            "cert-manager",
            "capi-operator",
            "capi-system",
            "capd-system",
            "caaph-system",
            "cni",
            "cluster-local-management",
            "cluster-local-workload",
            "flux-apps",
        ]
    )
    assert kinds["HelmChartProxy"] == ["flux-operator"] and kinds["ResourceSet"] == ["flux-apps"]


def test_local_host_reconciliation_order():
    objects = render.build(str(REPO / LH))
    deps = {o["metadata"]["name"]: [d["name"] for d in o["spec"].get("dependsOn", [])] for o in objects}
    assert deps == {
        "cert-manager": [],
        "capi-operator": ["cert-manager"],
        "capi-system": ["capi-operator"],
        "capd-system": ["capi-system"],
        "caaph-system": ["capi-system"],
        "cni": ["caaph-system"],
        "flux-apps": ["cni"],
        "cluster-local-management": ["capd-system"],
        "cluster-local-workload": ["capd-system"],
    }
    for obj in objects:
        spec = obj["spec"]
        assert obj["apiVersion"] == "kustomize.toolkit.fluxcd.io/v1" and obj["metadata"]["namespace"] == "flux-system"
        assert spec["sourceRef"] == {"kind": "OCIRepository", "name": "flux-system"}
        folders = {
            "cluster-local-management": "clusters/local-management",
            "cluster-local-workload": "clusters/local-workload",
        }
        name = obj["metadata"]["name"]
        assert spec["path"] == "./mgmt/local-host/" + folders.get(name, name)
        assert spec["prune"] is True and {"interval", "retryInterval", "timeout"} <= set(spec)


# --- planted defects, one per rule ---------------------------------------------------------


# Planted defects: (id, file, text, replacement, the one finding validate reports).
PLANTED = [
    (
        "misspelled_field_is_a_schema_finding",
        LH + "/cert-manager/flux-ks.yaml",
        "  retryInterval: 2m",
        "  retryIntervall: 2m",
        (
            LH + "/cert-manager/flux-ks.yaml",
            "Kustomization/flux-system/cert-manager",
            "schema",
            "spec: unknown field 'retryIntervall'",
        ),
    ),
    (
        "unknown_field_in_builtin_kind",
        LH + "/cert-manager/namespace.yaml",
        "  name: cert-manager",
        "  name: cert-manager\n  lables: {a: b}",
        (LH + "/cert-manager/namespace.yaml", "Namespace/cert-manager", "schema", "metadata: unknown field 'lables'"),
    ),
    (
        "wrong_type_in_custom_resource",
        LH + "/clusters/local-workload/control-plane.yaml",
        "  replicas: 1",
        "  replicas: one",
        (
            LH + "/clusters/local-workload/control-plane.yaml",
            "KubeadmControlPlane/default/local-workload-control-plane",
            "schema",
            "spec.replicas: 'one' is not of type 'integer'",
        ),
    ),
    (
        "dependson_cycle_is_printed",
        LH + "/capi-operator/flux-ks.yaml",
        "    - name: cert-manager",
        "    - name: capi-system",
        (
            LH + "/capi-operator/flux-ks.yaml",
            "Kustomization/flux-system/capi-operator",
            "flux-graph",
            "dependsOn cycle: flux-system/capi-operator -> flux-system/capi-system -> flux-system/capi-operator",
        ),
    ),
    (
        "dangling_dependson",
        LH + "/capi-operator/flux-ks.yaml",
        "    - name: cert-manager",
        "    - name: cert-managr",
        (
            LH + "/capi-operator/flux-ks.yaml",
            "Kustomization/flux-system/capi-operator",
            "flux-graph",
            "dependsOn flux-system/cert-managr: no Kustomization of that name in environment local-host",
        ),
    ),
    (
        "resourceset_kubeconfig_secret_must_belong_to_a_cluster",
        LH + "/flux-apps/resourceset.yaml",
        "    - cluster: local-workload",
        "    - cluster: local-wrkload",
        (
            LH + "/flux-apps/resourceset.yaml",
            "Kustomization/default/flux-apps-local-wrkload",
            "flux-graph",
            "kubeConfig.secretRef Secret default/local-wrkload-kubeconfig: not defined in the tree nor created by the lifecycle",
        ),
    ),
    (
        "secret_generator_is_plaintext",
        *SECRET_GENERATOR_PLAINTEXT,
    ),
    (
        "yamllint_finding",
        "workload/local-host/namespace.yaml",
        "  name: podinfo",
        "  name: podinfo   ",
        ("workload/local-host/namespace.yaml", "line 4", "yamllint", "4:16 error trailing spaces (trailing-spaces)"),
    ),
    (
        "custom_resource_metadata_is_checked",
        LH + "/capd-system/infrastructure-provider.yaml",
        "  namespace: capd-system",
        "  namespace: capd-system\n  annotation:\n    a: b",
        (
            LH + "/capd-system/infrastructure-provider.yaml",
            "InfrastructureProvider/capd-system/docker",
            "schema",
            "metadata: unknown field 'annotation'",
        ),
    ),
]


@pytest.mark.parametrize("case", PLANTED, ids=[c[0] for c in PLANTED])
def test_a_planted_defect_is_the_one_finding(tree, case):
    _id, path, text, replacement, finding = case
    edit(tree, path, text, replacement)
    assert found(check(tree)) == [finding]


def test_dangling_sourceref(tree):
    edit(tree, LH + "/cni/flux-ks.yaml", "    kind: OCIRepository", "    kind: GitRepository")
    edit(tree, LH + "/cert-manager/helmrelease.yaml", "        name: jetstack", "        name: jetstak")
    assert found(check(tree)) == [
        (
            LH + "/cert-manager/helmrelease.yaml",
            "HelmRelease/cert-manager/cert-manager",
            "flux-graph",
            "chart.spec.sourceRef HelmRepository cert-manager/jetstak: not defined in the tree nor created by the lifecycle",
        ),
        (
            LH + "/cni/flux-ks.yaml",
            "Kustomization/flux-system/cni",
            "flux-graph",
            "sourceRef GitRepository flux-system/flux-system: not defined in the tree nor created by the lifecycle",
        ),
    ]


def test_dangling_healthcheck_and_path(tree):
    edit(tree, LH + "/capi-system/flux-ks.yaml", "      name: cluster-api\n", "      name: cluster-apj\n")
    edit(tree, LH + "/capd-system/flux-ks.yaml", "      name: devclusters.", "      name: devclustrs.")
    edit(tree, LH + "/cni/flux-ks.yaml", "  path: ./mgmt/local-host/cni", "  path: ./mgmt/local-host/cnii")
    assert found(check(tree)) == [
        (
            LH + "/capd-system/flux-ks.yaml",
            "Kustomization/flux-system/capd-system",
            "flux-graph",
            "healthCheck CustomResourceDefinition devclustrs.infrastructure.cluster.x-k8s.io: no object of that type in "
            "the tree (a health check on a CRD nothing uses is likely a typo)",
        ),
        (
            LH + "/capi-system/flux-ks.yaml",
            "Kustomization/flux-system/capi-system",
            "flux-graph",
            "healthCheck CoreProvider capi-system/cluster-apj: not defined in the tree nor created by the lifecycle",
        ),
        (
            LH + "/cni/flux-ks.yaml",
            "Kustomization/flux-system/cni",
            "flux-graph",
            "path ./mgmt/local-host/cnii does not exist in the repository",
        ),
    ]


def test_resourceset_rendered_objects_are_schema_checked(tree):
    edit(tree, LH + "/flux-apps/resourceset.yaml", "        prune: true", "        prun: true")
    result = found(check(tree))
    assert result == [
        (
            LH + "/flux-apps/resourceset.yaml",
            "Kustomization/default/flux-apps-local-workload (rendered by ResourceSet)",
            "schema",
            "spec: 'prune' is a required property",
        ),
        (
            LH + "/flux-apps/resourceset.yaml",
            "Kustomization/default/flux-apps-local-workload (rendered by ResourceSet)",
            "schema",
            "spec: unknown field 'prun'",
        ),
    ]


def test_chart_pin_drift(tree):
    edit(tree, LH + "/cert-manager/helmrelease.yaml", 'version: "v1.21.1"', 'version: "1.20.0"')
    edit(tree, LH + "/flux-apps/helmchartproxy.yaml", 'version: "0.58.1"', 'version: "0.57.1"')
    assert found(check(tree)) == [
        (
            LH + "/cert-manager/helmrelease.yaml",
            "HelmRelease/cert-manager/cert-manager",
            "bootstrap",
            "chart cert-manager version 1.20.0 differs from bootstrap.toml [charts] cert-manager = v1.21.1",
        ),
        (
            LH + "/flux-apps/helmchartproxy.yaml",
            "HelmChartProxy/default/flux-operator",
            "bootstrap",
            "chart flux-operator version 0.57.1 differs from bootstrap.toml [charts] flux-operator = 0.58.1",
        ),
    ]


def test_plaintext_secret(tree):
    (tree / LH / "cni" / "token.yaml").write_text(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: token\n  namespace: default\nstringData:\n  token: hunter2\n"
    )
    edit(
        tree,
        LH + "/cni/kustomization.yaml",
        "  - clusterresourceset.yaml",
        "  - clusterresourceset.yaml\n  - token.yaml",
    )
    assert found(check(tree)) == [
        (
            LH + "/cni/token.yaml",
            "Secret/default/token",
            "secrets",
            "Secret committed unencrypted: encrypt it with sops (age, --encrypted-regex "
            "'^(data|stringData)$') into a *.sops.yaml file",
        )
    ]


def _sops_encrypt(tmp_path, plain, target):
    key = tmp_path / "age.agekey"
    if not key.exists():
        subprocess.run(["age-keygen", "-o", str(key)], check=True, capture_output=True)
    recipient = [ln.split(": ")[1] for ln in key.read_text().splitlines() if ln.startswith("# public key")][0]
    proc = subprocess.run(
        [
            str(VENV_BIN / "sops"),
            "--encrypt",
            "--age",
            recipient,
            "--encrypted-regex",
            "^(data|stringData)$",
            "--input-type",
            "yaml",
            "--output-type",
            "yaml",
            "/dev/stdin",
        ],
        input=plain,
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    target.write_text(proc.stdout)


def test_sops_secret_is_accepted_and_tampering_is_found(tree, tmp_path):
    secret = tree / LH / "cni" / "token.sops.yaml"
    _sops_encrypt(
        tmp_path,
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: token\n  namespace: default\nstringData:\n  token: hunter2\n",
        secret,
    )
    edit(
        tree,
        LH + "/cni/kustomization.yaml",
        "  - clusterresourceset.yaml",
        "  - clusterresourceset.yaml\n  - token.sops.yaml",
    )
    assert found(check(tree)) == []
    text = secret.read_text()
    start = text.index("token: ENC[")
    secret.write_text(text[:start] + "token: hunter2" + text[text.index("\n", start) :])
    assert found(check(tree)) == [
        (
            LH + "/cni/token.sops.yaml",
            "Secret/default/token",
            "secrets",
            "stringData.token is not encrypted (expected ENC[...]): re-encrypt with "
            "--encrypted-regex '^(data|stringData)$'",
        )
    ]


def test_sops_leaves_an_empty_value_plain_and_validate_accepts_only_that(tree, tmp_path):
    secret = tree / LH / "cni" / "token.sops.yaml"
    _sops_encrypt(
        tmp_path,
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: token\n  namespace: default\n"
        "stringData:\n  token: hunter2\n  unused: ''\n",
        secret,
    )
    edit(
        tree,
        LH + "/cni/kustomization.yaml",
        "  - clusterresourceset.yaml",
        "  - clusterresourceset.yaml\n  - token.sops.yaml",
    )
    assert 'unused: ""' in secret.read_text() or "unused: ''" in secret.read_text()  # sops wrote it plain
    assert found(check(tree)) == []


def test_sops_file_without_metadata(tree):
    (tree / "workload/local-host/token.sops.yaml").write_text(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: token\n  namespace: podinfo\ndata:\n  token: aHVudGVyMg==\n"
    )
    assert found(check(tree)) == [
        (
            "workload/local-host/token.sops.yaml",
            "Secret/podinfo/token",
            "secrets",
            "SOPS file without sops metadata (mac and a key group): encrypt it with sops",
        )
    ]


def test_render_failure_names_directory_and_reason(tree):
    edit(tree, LH + "/capd-system/kustomization.yaml", "  - namespace.yaml", "  - namespaces.yaml")
    result = found(check(tree))
    assert result == [
        (
            LH + "/capd-system/kustomization.yaml",
            "-",
            "render",
            "kustomize build mgmt/local-host/capd-system failed: accumulating resources: accumulation "
            "err='accumulating resources from 'namespaces.yaml': evalsymlink failure on 'namespaces.yaml' : "
            "lstat namespaces.yaml: no such file or directory': must build at directory: not a valid "
            "directory: evalsymlink failure on 'namespaces.yaml' : lstat namespaces.yaml: no such file or "
            "directory",
        )
    ]


def test_kind_without_schema_and_allow_list(tree):
    (tree / LH / "cni" / "widget.yaml").write_text("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n")
    edit(
        tree,
        LH + "/cni/kustomization.yaml",
        "  - clusterresourceset.yaml",
        "  - clusterresourceset.yaml\n  - widget.yaml",
    )
    assert found(check(tree)) == [
        (
            LH + "/cni/widget.yaml",
            "Widget/w",
            "schema",
            f"no schema for Widget example.com/v1 (looked in {SCHEMAS}/example.com/widget_v1.json); "
            "add Widget to allow_kinds if it has none",
        )
    ]
    assert found(check(tree, allow_kinds=["example.com/Widget"])) == []


def test_postbuild_variables_are_substituted_before_schemas(tree):
    ks = LH + "/clusters/local-workload/flux-ks.yaml"
    cp = LH + "/clusters/local-workload/control-plane.yaml"
    edit(tree, cp, "  replicas: 1", "  replicas: ${CP_REPLICAS:=1}")
    edit(tree, cp, "  version: v1.35.5", "  version: ${K8S_VERSION}")
    edit(tree, ks, "  prune: true", "  prune: true\n  postBuild:\n    substitute:\n      K8S_VERSION: v1.35.5")
    assert found(check(tree)) == []
    edit(tree, ks, "      K8S_VERSION: v1.35.5", "      K8S_VERSION: v1.35.5\n      CP_REPLICAS: three")
    assert found(check(tree)) == [
        (
            cp,
            "KubeadmControlPlane/default/local-workload-control-plane",
            "schema",
            "spec.replicas: 'three' is not of type 'integer'",
        )
    ]


def test_bootstrap_cross_check(tree):
    os.remove(tree / LH / "capd-system" / "infrastructure-provider.yaml")
    edit(tree, LH + "/capd-system/kustomization.yaml", "  - infrastructure-provider.yaml\n", "")
    edit(
        tree,
        LH + "/capd-system/flux-ks.yaml",
        "    - apiVersion: operator.cluster.x-k8s.io/v1alpha2\n"
        "      kind: InfrastructureProvider\n      name: docker\n      namespace: capd-system\n",
        "",
    )
    edit(tree, "bootstrap.toml", 'mgmt-cluster = "local-management"', 'mgmt-cluster = "local-mgmt"')
    edit(tree, "bootstrap.toml", 'capi-workloads = ["local-workload"]', 'capi-workloads = ["local-workload", "other"]')
    key = "environments.local-host"
    assert found(check(tree)) == [
        (
            "bootstrap.toml",
            key + ".infra-provider-name",
            "bootstrap",
            "no provider manifest holds InfrastructureProvider capd-system/docker (infra-provider-namespace/infra-provider-name)",
        ),
        (
            "bootstrap.toml",
            key + ".mgmt-cluster",
            "bootstrap",
            "mgmt-cluster local-mgmt is not a Cluster in namespace "
            "default of the tree (Clusters there: local-management, local-workload)",
        ),
        (
            "bootstrap.toml",
            key + ".provider-manifests[3]",
            "bootstrap",
            "mgmt/local-host/capd-system/infrastructure-provider.yaml does not exist",
        ),
        (
            "bootstrap.toml",
            key + ".teardown.capi-workloads",
            "bootstrap",
            "capi-workload other is not a Cluster in "
            "namespace default of the tree (Clusters there: local-management, local-workload)",
        ),
        (
            "bootstrap.toml",
            key + ".teardown.mgmt-container-prefix",
            "bootstrap",
            "mgmt-container-prefix local-management "
            "does not match mgmt-cluster local-mgmt (CAPD names containers after the Cluster)",
        ),
    ]


def test_provider_manifest_must_hold_a_provider(tree):
    (tree / LH / "capi-system" / "core-provider.yaml").write_text(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: capi-core\n"
    )
    edit(
        tree,
        LH + "/capi-system/flux-ks.yaml",
        "    - apiVersion: operator.cluster.x-k8s.io/v1alpha2\n"
        "      kind: CoreProvider\n      name: cluster-api\n      namespace: capi-system\n",
        "",
    )
    assert found(check(tree)) == [
        (
            LH + "/capi-system/core-provider.yaml",
            "-",
            "bootstrap",
            "environments.local-host.provider-manifests[0]: holds no operator.cluster.x-k8s.io "
            "provider object (CoreProvider, BootstrapProvider, ControlPlaneProvider, "
            "InfrastructureProvider, AddonProvider)",
        )
    ]


def test_environment_missing_from_bootstrap_toml(tree):
    shutil.copytree(tree / LH / "cert-manager", tree / "mgmt" / "staging" / "cert-manager")
    result = check(tree, environments=None)
    assert result["environments"] == ["local-host", "staging"]
    staging = [f for f in found(result) if f[0] == "bootstrap.toml"]
    assert staging == [
        (
            "bootstrap.toml",
            "environments.staging",
            "bootstrap",
            "mgmt/staging has no [environments.staging] table in bootstrap.toml "
            "(defined: local-host, aws, aws-crossplane, azure, gcp, local-talos)",
        )
    ]
    assert result["summary"]["local-host"]["findings"] == 0


# --- schema locations -----------------------------------------------------------------------


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def schema_server():
    port = free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(_Quiet, directory=str(SCHEMAS)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % port
    server.shutdown()
    server.server_close()


def test_url_template_schema_location(tree, schema_server):
    template = schema_server + "/{{.Group}}/{{.ResourceKind}}_{{.ResourceAPIVersion}}.json"
    # Every other object validates against schemas fetched over HTTP: the defect is the only finding.
    edit(tree, LH + "/cert-manager/flux-ks.yaml", "  retryInterval: 2m", "  retryIntervall: 2m")
    assert found(check(tree, schema_location=template)) == [
        (
            LH + "/cert-manager/flux-ks.yaml",
            "Kustomization/flux-system/cert-manager",
            "schema",
            "spec: unknown field 'retryIntervall'",
        )
    ]


def test_unreachable_schema_location_is_explained(tree):
    port = free_port()
    result = check(tree, schema_location="https://127.0.0.1:%d/{group}/{kind}_{version}.json" % port)
    messages = {f[3] for f in found(result)}
    expected = (
        "schema location unreachable: GET https://127.0.0.1:%d/kustomize.toolkit.fluxcd.io/kustomization_v1.json "
        "failed within 10s: [Errno 111] Connection refused; pass a local schema folder as schema_location "
        "(or KROPS_SCHEMA_LOCATION) to validate offline" % port
    )
    assert expected in messages
    assert all(m.startswith("schema location unreachable: GET https://127.0.0.1:%d/" % port) for m in messages)


def test_bad_schema_location_and_path(tmp_path, tree):
    with pytest.raises(validate.ValidateError) as error:
        check(tree, schema_location=str(tmp_path / "nowhere"))
    assert str(error.value) == "schema location %s is neither a folder nor an https:// URL template" % (
        tmp_path / "nowhere"
    )
    with pytest.raises(validate.ValidateError) as error:
        validate.run(str(tmp_path))
    assert str(error.value) == f"{tmp_path} has no mgmt/ folder: point path at the root of the krops repository"
    with pytest.raises(validate.ValidateError) as error:
        check(tree, environments=["aws"])
    assert str(error.value) == "environment aws has no folder mgmt/aws (environments in the tree: local-host)"


# --- module and command line -------------------------------------------------------------------


def test_module_clean_tree_check_mode(run_module):
    for check_mode in (False, True):
        result = run_module(
            validate_module,
            {"path": str(REPO), "environments": ["local-host"], "schema_location": str(SCHEMAS)},
            check_mode=check_mode,
        )
        assert not result.failed, result.get("msg")
        assert result["changed"] is False and result["findings"] == []
        assert result["environments"] == ["local-host"]
        assert result["output"].startswith("local-host: 12 directories, ")


def test_module_fails_with_findings_and_json(run_module, tree):
    edit(tree, LH + "/cert-manager/helmrelease.yaml", 'version: "v1.21.1"', 'version: "1.20.0"')
    result = run_module(validate_module, {"path": str(tree), "schema_location": str(SCHEMAS), "format": "json"})
    assert result.failed and result["changed"] is False
    line = (
        "mgmt/local-host/cert-manager/helmrelease.yaml: HelmRelease/cert-manager/cert-manager: [bootstrap] chart "
        "cert-manager version 1.20.0 differs from bootstrap.toml [charts] cert-manager = v1.21.1"
    )
    assert result["msg"].splitlines()[:2] == ["validate found 1 finding(s):", line]
    report = json.loads(result["output"])
    assert report["findings"] == [
        {
            "file": "mgmt/local-host/cert-manager/helmrelease.yaml",
            "object": "HelmRelease/cert-manager/cert-manager",
            "rule": "bootstrap",
            "message": line.split("[bootstrap] ")[1],
            "environment": "local-host",
        }
    ]
    assert report["summary"]["local-host"]["by_rule"]["bootstrap"] == 1


def test_module_reports_unusable_input(run_module, tmp_path):
    result = run_module(validate_module, {"path": str(tmp_path)})
    assert result.failed
    assert result["msg"] == (
        f"validate could not run: {tmp_path} has no mgmt/ folder: point path at the root of the krops repository"
    )


def test_command_line_exit_codes(tree):
    out = io.StringIO()
    with redirect_stdout(out):
        assert validate.main(["--path", str(tree), "--schema-location", str(SCHEMAS)]) == 0
    assert out.getvalue().startswith("local-host: 12 directories, ")
    edit(tree, "workload/local-host/podinfo.yaml", "  interval: 30m", "  interval: 30m\n  suspended: true")
    out = io.StringIO()
    with redirect_stdout(out):
        assert validate.main(["--path", str(tree), "--schema-location", str(SCHEMAS), "--format", "json"]) == 1
    report = json.loads(out.getvalue())
    assert [(f["file"], f["message"]) for f in report["findings"]] == [
        ("workload/local-host/podinfo.yaml", "spec: unknown field 'suspended'")
    ]


@pytest.mark.slow
def test_validate_playbook(ansible_playbook, tree):
    """playbooks/validate.yml, run from a copy of the tree (it validates <playbook_dir>/..)."""
    copy_playbook("validate.yml", tree)
    env = {"KROPS_SCHEMA_LOCATION": str(SCHEMAS)}
    rc, output, stderr = ansible_playbook(tree / "playbooks" / "validate.yml", env=env)
    assert rc == 0, (output, stderr)
    results = task_results(output)
    assert results["krops.platform.validate : Render, schema-check and cross-check the tree"]["changed"] is False
    summary = results["krops.platform.validate : Show the validation summary"]["msg"]
    assert (
        len(summary) == 1
        and summary[0].startswith("local-host: 12 directories, ")
        and summary[0].endswith(" 0 findings")
    )

    edit(tree, LH + "/capi-operator/flux-ks.yaml", "    - name: cert-manager", "    - name: capi-system")
    rc, output, stderr = ansible_playbook(tree / "playbooks" / "validate.yml", env=env)
    assert rc == 2
    result = task_results(output)["krops.platform.validate : Render, schema-check and cross-check the tree"]
    assert result["failed"] is True
    assert [(f["rule"], f["message"]) for f in result["findings"]] == [
        (
            "flux-graph",
            "dependsOn cycle: flux-system/capi-operator -> flux-system/capi-system -> flux-system/capi-operator",
        )
    ]
    assert result["msg"].startswith(
        "validate found 1 finding(s):\nmgmt/local-host/capi-operator/flux-ks.yaml: "
        "Kustomization/flux-system/capi-operator: [flux-graph] dependsOn cycle: "
    )


def test_files_outside_environments_are_still_checked(tree):
    (tree / "workload" / "scratch").mkdir()
    (tree / "workload" / "scratch" / "secret.yaml").write_text(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  a: b   \n"
    )
    result = check(tree, environments=None)
    assert [(f["environment"],) + row for f, row in zip(result["findings"], found(result))] == [
        (
            "-",
            "workload/scratch/secret.yaml",
            "Secret/s",
            "secrets",
            "Secret committed unencrypted: encrypt it with sops "
            "(age, --encrypted-regex '^(data|stringData)$') into a *.sops.yaml file",
        ),
        ("-", "workload/scratch/secret.yaml", "line 6", "yamllint", "6:7 error trailing spaces (trailing-spaces)"),
    ]


@pytest.mark.parametrize(
    "text, variables, expected",
    [
        ("a: ${X}", {"X": "1"}, "a: 1"),
        ("a: ${X}", {}, "a: "),
        ("a: ${X:=5m}", {}, "a: 5m"),
        ("a: ${X:=5m}", {"X": "2m"}, "a: 2m"),
        ("a: ${X:=5m}", {"X": ""}, "a: 5m"),
        ("a: ${X:-d}", {}, "a: d"),
        ("a: $${X}", {"X": "1"}, "a: ${X}"),
        ("a: $X and ${1X}", {"X": "1"}, "a: $X and ${1X}"),
    ],
)
def test_flux_postbuild_syntax(text, variables, expected):
    assert render.substitute_text(text, variables) == expected


def test_substitution_can_be_disabled_per_object():
    obj = {
        "kind": "ConfigMap",
        "metadata": {"name": "c", "annotations": {"kustomize.toolkit.fluxcd.io/substitute": "disabled"}},
        "data": {"a": "${X:=1}"},
    }
    assert render.substitute(obj, {})["data"]["a"] == "${X:=1}"
    del obj["metadata"]["annotations"]
    assert render.substitute(obj, {})["data"]["a"] == 1  # re-parsed as YAML, as kustomize-controller does
