# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""validate's rule registry, one row per rule id: a planted input that triggers it and its exact findings.

Each row copies a real tree (as test_validate.py does), plants the defect and runs validate with the
registry reduced to that one rule, so the findings are the rule's own and nothing else's. A rule
registered without a row here fails test_every_registered_rule_has_a_row; a row for an id that is not
registered fails too. test_validate.py and the test_tree_*.py files run the whole registry.
"""

from __future__ import annotations

import shutil

import pytest

from ansible_collections.krops.platform.plugins.module_utils import validate
from tests.substrate.trees import REPO_FILES, SCHEMAS, SECRET_GENERATOR_PLAINTEXT, copy_repo, edit, findings

TREES = {
    "local-host": ("mgmt/local-host", "workload/local-host"),
    "aws": ("mgmt/aws", "workload/aws"),
    "gcp": ("mgmt/gcp", "workload/gcp-base", "workload/europe-north1-01"),
    "azure": ("mgmt/azure", "workload/azure-base", "workload/swedencentral-01"),
    "local-talos": ("mgmt/local-talos",),
}
LH = "mgmt/local-host"
LHK = "environments.local-host"
AWS = "mgmt/aws"
AWSK = "environments.aws"
GCPK = "environments.gcp"
TOML = "bootstrap.toml"
CLUSTERS = "Clusters there: local-management, local-workload"
AWS_CLUSTERS = "Clusters there: eu-north-1-management, eu-north-1-workload, eu-west-1-workload"
PLAIN_SECRET = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: token\n  namespace: default\nstringData:\n  token: x\n"
FLUXINSTANCE = LH + "/flux-apps/workload-flux/fluxinstance.yaml"
GCP_LABEL_FIX = (
    "(at most 63 lower-case letters, digits, _ and -); take the run tags' label forms (${KROPS_EXPIRES_AT_LABEL} "
    "and the other KROPS_*_LABEL variables of the krops-run ConfigMap)"
)


# ACK's cross-account mapping (validate_ack.py): a namespace owned by an account, and an account reached by a role
ACK_NAMESPACE = (
    "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ack-111111111111\n  annotations:\n"
    "    services.k8s.aws/owner-account-id: '111111111111'\n"
)
ACK_ACCOUNT = (
    '[[environments.aws.accounts]]\naccount-id = "111111111111"\nrole-name = "krops-teardown"\n'
    'clusters = ["eu-west-1-workload"]\nack-role-arn = "arn:aws:iam::111111111111:role/krops-ack"\n\n'
)


def _edit(rel, old, new):
    return ("edit", rel, old, new)


def _write(rel, text):
    return ("write", rel, text)


# (rule id, environment, planted changes, the findings of that rule alone)
ROWS = [
    (
        "secrets.sops-file",
        "local-host",
        [_write("workload/local-host/token.sops.yaml", PLAIN_SECRET)],
        [
            (
                "workload/local-host/token.sops.yaml",
                "Secret/default/token",
                "secrets",
                "SOPS file without sops metadata (mac and a key group): encrypt it with sops",
            )
        ],
    ),
    (
        "secrets.committed-plaintext",
        "local-host",
        [_write("workload/local-host/token.yaml", PLAIN_SECRET)],
        [
            (
                "workload/local-host/token.yaml",
                "Secret/default/token",
                "secrets",
                "Secret committed unencrypted: encrypt it with sops (age, --encrypted-regex "
                "'^(data|stringData)$') into a *.sops.yaml file",
            )
        ],
    ),
    (
        "yamllint.file",
        "local-host",
        [_edit("workload/local-host/namespace.yaml", "  name: podinfo", "  name: podinfo   ")],
        [("workload/local-host/namespace.yaml", "line 4", "yamllint", "4:16 error trailing spaces (trailing-spaces)")],
    ),
    (
        "schema.object",
        "local-host",
        [_edit(LH + "/cert-manager/flux-ks.yaml", "  retryInterval: 2m", "  retryIntervall: 2m")],
        [
            (
                LH + "/cert-manager/flux-ks.yaml",
                "Kustomization/flux-system/cert-manager",
                "schema",
                "spec: unknown field 'retryIntervall'",
            )
        ],
    ),
    (
        "substitution.field-type",
        "aws",
        [
            _edit(
                AWS + "/flux-apps/workload-flux/cluster-vars.yaml",
                "AWS_ACCOUNT_ID: ${quote}${AWS_ACCOUNT_ID}${quote}",
                'AWS_ACCOUNT_ID: "${AWS_ACCOUNT_ID}"',
            )
        ],
        [
            (
                AWS + "/flux-apps/workload-flux/cluster-vars.yaml",
                "ConfigMap/flux-system/cluster-vars",
                "substitution",
                "data.AWS_ACCOUNT_ID: 123456789012 is not of type 'string', 'null' when AWS_ACCOUNT_ID=123456789012 "
                '(Flux re-types the substituted YAML and kustomize drops the quotes of "${AWS_ACCOUNT_ID}"; '
                "write ${quote}${AWS_ACCOUNT_ID}${quote} with quote: '\"' among the Kustomization's variables)",
            )
        ],
    ),
    (
        "cel.rule",
        "local-host",
        [_edit(FLUXINSTANCE, "  name: flux\n", "  name: flux-workload\n")],
        [
            (
                FLUXINSTANCE,
                "FluxInstance/flux-system/flux-workload",
                "cel",
                "(root): the only accepted name for a FluxInstance is 'flux' (rule: self.metadata.name == 'flux')",
            )
        ],
    ),
    (
        "admission.webhook",
        "aws",
        [
            _edit(
                AWS + "/aws-managed-clusters/eu-north-1/eu-north-1-management.yaml",
                "      version: v1.35.0",
                "      version: v1.35",
            )
        ],
        [
            (
                AWS + "/aws-managed-clusters/eu-north-1/eu-north-1-management.yaml",
                "MachinePool/default/eu-north-1-management-system",
                "admission",
                'admission webhook "validation.machinepool.cluster.x-k8s.io" denied the request: '
                'MachinePool.cluster.x-k8s.io "eu-north-1-management-system" is invalid: '
                'spec.template.spec.version: Invalid value: "v1.35": must be a valid semantic version',
            )
        ],
    ),
    (
        "contracts.provider",
        "aws",
        [_edit(TOML, 'accepted-end-of-life = ["InfrastructureProvider/aws"]', "accepted-end-of-life = []")],
        [
            (
                AWS + "/capa-system/infrastructure-provider.yaml",
                "InfrastructureProvider/capa-system/aws",
                "contracts",
                "InfrastructureProvider aws v2.11.1 (kubernetes-sigs/cluster-api-provider-aws) is built on Cluster API "
                "v1.11 (EOL since 2026-08-18 in Cluster API's versions.md): pin a release built on a supported line, "
                "or list InfrastructureProvider/aws in the environment's accepted-end-of-life in bootstrap.toml",
            )
        ],
    ),
    (
        "contracts.ack-carm",
        "aws",
        [_edit(AWS + "/ack-controllers/role-account-map.yaml", "data: {}\n", "data: {}\n---\n" + ACK_NAMESPACE)],
        [
            (
                AWS + "/ack-controllers/role-account-map.yaml",
                "Namespace/ack-111111111111",
                "contracts",
                'its resources would never sync: retrieving role ARN for account/team ID "111111111111" from '
                '"ack-role-account-map" configmap: key not found in CARM configmap (the ConfigMap ack-role-account-map '
                "in ack-system, where the controllers run)",
            )
        ],
    ),
    (
        "flux-graph.depends-on",
        "local-host",
        [_edit(LH + "/capi-operator/flux-ks.yaml", "    - name: cert-manager", "    - name: cert-managr")],
        [
            (
                LH + "/capi-operator/flux-ks.yaml",
                "Kustomization/flux-system/capi-operator",
                "flux-graph",
                "dependsOn flux-system/cert-managr: no Kustomization of that name in environment local-host",
            )
        ],
    ),
    (
        "flux-graph.cycle",
        "local-host",
        [_edit(LH + "/capi-operator/flux-ks.yaml", "    - name: cert-manager", "    - name: capi-system")],
        [
            (
                LH + "/capi-operator/flux-ks.yaml",
                "Kustomization/flux-system/capi-operator",
                "flux-graph",
                "dependsOn cycle: flux-system/capi-operator -> flux-system/capi-system -> flux-system/capi-operator",
            )
        ],
    ),
    (
        "flux-graph.source-ref",
        "local-host",
        [
            _edit(LH + "/cni/flux-ks.yaml", "    kind: OCIRepository", "    kind: GitRepository"),
            _edit(LH + "/cert-manager/helmrelease.yaml", "        name: jetstack", "        name: jetstak"),
        ],
        [
            (
                LH + "/cert-manager/helmrelease.yaml",
                "HelmRelease/cert-manager/cert-manager",
                "flux-graph",
                "chart.spec.sourceRef HelmRepository cert-manager/jetstak: not defined in the tree nor created by "
                "the lifecycle",
            ),
            (
                LH + "/cni/flux-ks.yaml",
                "Kustomization/flux-system/cni",
                "flux-graph",
                "sourceRef GitRepository flux-system/flux-system: not defined in the tree nor created by the lifecycle",
            ),
        ],
    ),
    (
        "flux-graph.path",
        "local-host",
        [_edit(LH + "/cni/flux-ks.yaml", "  path: ./mgmt/local-host/cni", "  path: ./mgmt/local-host/cnii")],
        [
            (
                LH + "/cni/flux-ks.yaml",
                "Kustomization/flux-system/cni",
                "flux-graph",
                "path ./mgmt/local-host/cnii does not exist in the repository",
            )
        ],
    ),
    (
        "flux-graph.health-check",
        "local-host",
        [
            _edit(LH + "/capi-system/flux-ks.yaml", "      name: cluster-api\n", "      name: cluster-apj\n"),
            _edit(LH + "/capd-system/flux-ks.yaml", "      name: devclusters.", "      name: devclustrs."),
        ],
        [
            (
                LH + "/capd-system/flux-ks.yaml",
                "Kustomization/flux-system/capd-system",
                "flux-graph",
                "healthCheck CustomResourceDefinition devclustrs.infrastructure.cluster.x-k8s.io: no object of that "
                "type in the tree (a health check on a CRD nothing uses is likely a typo)",
            ),
            (
                LH + "/capi-system/flux-ks.yaml",
                "Kustomization/flux-system/capi-system",
                "flux-graph",
                "healthCheck CoreProvider capi-system/cluster-apj: not defined in the tree nor created by the lifecycle",
            ),
        ],
    ),
    (
        "flux-graph.secret-ref",
        "local-host",
        [_edit(LH + "/flux-apps/resourceset.yaml", "    - cluster: local-workload", "    - cluster: local-wrkload")],
        [
            (
                LH + "/flux-apps/resourceset.yaml",
                "Kustomization/default/flux-apps-local-wrkload",
                "flux-graph",
                "kubeConfig.secretRef Secret default/local-wrkload-kubeconfig: not defined in the tree nor created "
                "by the lifecycle",
            )
        ],
    ),
    (
        "flux-graph.substitute-from",
        "aws",
        [_edit(AWS + "/workload-resources/flux-ks.yaml", "        name: aws-account", "        name: aws-acount")],
        [
            (
                AWS + "/workload-resources/flux-ks.yaml",
                "Kustomization/flux-system/workload-resources",
                "flux-graph",
                "postBuild.substituteFrom ConfigMap flux-system/aws-acount: not defined in the tree nor created by "
                "the lifecycle",
            )
        ],
    ),
    (
        "bootstrap.environment",
        "staging",
        [("copy", LH + "/cert-manager", "mgmt/staging/cert-manager")],
        [
            (
                TOML,
                "environments.staging",
                "bootstrap",
                "mgmt/staging has no [environments.staging] table in bootstrap.toml "
                "(defined: local-host, aws, aws-crossplane, azure, gcp, local-talos)",
            )
        ],
    ),
    (
        "bootstrap.paths",
        "local-host",
        [_edit(TOML, 'sync-path = "mgmt/local-host"', 'sync-path = "mgmt/local-hst"')],
        [(TOML, LHK + ".sync-path", "bootstrap", "mgmt/local-hst does not exist in the repository")],
    ),
    (
        "bootstrap.chart-pin",
        "local-host",
        [
            _edit(LH + "/cert-manager/helmrelease.yaml", 'version: "v1.21.1"', 'version: "1.20.0"'),
            _edit(LH + "/flux-apps/helmchartproxy.yaml", 'version: "0.58.1"', 'version: "0.57.1"'),
        ],
        [
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
        ],
    ),
    (
        "bootstrap.flux-version",
        "local-host",
        [_edit(FLUXINSTANCE, 'version: "2.9.x"', 'version: "2.8.x"')],
        [
            (
                FLUXINSTANCE,
                "FluxInstance/flux-system/flux",
                "bootstrap",
                "FluxInstance distribution.version 2.8.x differs from bootstrap.toml bootstrap.flux-version = 2.9.x "
                "(management and workload run the same Flux)",
            )
        ],
    ),
    (
        "bootstrap.flux-sync-url",
        "local-host",
        [_edit(FLUXINSTANCE, "url: oci://krops-registry:5000/krops", "url: oci://krops-registry:5001/krops")],
        [
            (
                FLUXINSTANCE,
                "FluxInstance/flux-system/flux",
                "bootstrap",
                "FluxInstance sync.url oci://krops-registry:5001/krops differs from oci://krops-registry:5000/krops "
                "(bootstrap.toml registry-name, registry-container-port, oci-repository)",
            )
        ],
    ),
    (
        "bootstrap.kind-node-version",
        "local-host",
        [_edit(LH + "/clusters/local-workload/control-plane.yaml", "  version: v1.35.5", "  version: v1.35.4")],
        [
            (
                LH + "/clusters/local-workload/control-plane.yaml",
                "KubeadmControlPlane/default/local-workload-control-plane",
                "bootstrap",
                "Kubernetes version v1.35.4 differs from the kind node image v1.35.5 (bootstrap.toml "
                "bootstrap.kind-node-image)",
            )
        ],
    ),
    (
        "bootstrap.manifest-files",
        "local-host",
        [
            _edit(TOML, '"mgmt/local-host/capi-system/core-provider.yaml"', '"mgmt/local-host/capi-system/core.yaml"'),
            _edit(
                TOML, 'mgmt-ready-timeout = "15m"\n', 'mgmt-ready-timeout = "15m"\npivot-manifests = ["pivot.yaml"]\n'
            ),
            _write("pivot.yaml", "kind: [\n"),
        ],
        [
            (TOML, LHK + ".provider-manifests[0]", "bootstrap", "mgmt/local-host/capi-system/core.yaml does not exist"),
            (
                "pivot.yaml",
                "-",
                "bootstrap",
                "environments.local-host.pivot-manifests[0]: cannot be read as YAML: while parsing a flow node did "
                'not find expected node content in "<unicode string>", line 2, column 1',
            ),
        ],
    ),
    (
        "bootstrap.provider-manifest-kind",
        "local-host",
        [
            _write(
                LH + "/capi-system/core-provider.yaml",
                "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: capi-core\n",
            )
        ],
        [
            (
                LH + "/capi-system/core-provider.yaml",
                "-",
                "bootstrap",
                "environments.local-host.provider-manifests[0]: holds no operator.cluster.x-k8s.io "
                "provider object (CoreProvider, BootstrapProvider, ControlPlaneProvider, "
                "InfrastructureProvider, AddonProvider)",
            )
        ],
    ),
    (
        "bootstrap.provider-manifest-in-tree",
        "local-host",
        [_edit(LH + "/capd-system/kustomization.yaml", "  - infrastructure-provider.yaml\n", "")],
        [
            (
                LH + "/capd-system/infrastructure-provider.yaml",
                "InfrastructureProvider/capd-system/docker",
                "bootstrap",
                "provider manifest is not part of the tree rendered for local-host (no kustomization lists it)",
            )
        ],
    ),
    (
        "bootstrap.infra-provider",
        "local-host",
        [_edit(TOML, 'infra-provider-name = "docker"', 'infra-provider-name = "dockr"')],
        [
            (
                TOML,
                LHK + ".infra-provider-name",
                "bootstrap",
                "no provider manifest holds InfrastructureProvider capd-system/dockr "
                "(infra-provider-namespace/infra-provider-name)",
            )
        ],
    ),
    (
        "bootstrap.pivot-manifest",
        "local-host",
        [
            _edit(
                TOML, 'mgmt-ready-timeout = "15m"\n', 'mgmt-ready-timeout = "15m"\npivot-manifests = ["pivot.yaml"]\n'
            ),
            _write("pivot.yaml", "---\n"),
        ],
        [("pivot.yaml", "-", "bootstrap", "environments.local-host.pivot-manifests[0]: holds no Kubernetes object")],
    ),
    (
        "bootstrap.pivot-manifest-vars",
        "local-host",
        [
            _edit(
                TOML,
                'mgmt-ready-timeout = "15m"\n',
                'mgmt-ready-timeout = "15m"\npivot-manifests = ["mgmt/local-host/cert-manager/namespace.yaml"]\n'
                'pivot-manifest-vars = {UNUSED = "x"}\n',
            )
        ],
        [
            (
                TOML,
                LHK + ".pivot-manifest-vars.UNUSED",
                "bootstrap",
                "UNUSED is used by no pivot manifest (${UNUSED}); remove it or use it",
            )
        ],
    ),
    (
        "bootstrap.pivot-sops-secret",
        "aws",
        [_edit(TOML, '"mgmt/aws/capa-system/aws-credentials.sops.yaml"', '"mgmt/aws/capa-system/kustomization.yaml"')],
        [
            (
                AWS + "/capa-system/kustomization.yaml",
                "-",
                "bootstrap",
                "environments.aws.pivot-sops-secrets[0]: holds no SOPS-encrypted Secret",
            )
        ],
    ),
    (
        "bootstrap.move-fallback",
        "aws",
        [
            _edit(
                TOML,
                'resource = "awsclustercontrolleridentities.infrastructure.cluster.x-k8s.io"\nname = "default"',
                'resource = "awsclustercontrolleridentities.infrastructure.cluster.x-k8s.io"\nname = "defualt"',
            )
        ],
        [
            (
                AWS + "/capa-identity/awsclustercontrolleridentity.yaml",
                "-",
                "bootstrap",
                "environments.aws.move-fallbacks[0]: holds no "
                "awsclustercontrolleridentities.infrastructure.cluster.x-k8s.io named defualt",
            )
        ],
    ),
    (
        "bootstrap.mgmt-cluster",
        "local-host",
        [_edit(TOML, 'mgmt-cluster = "local-management"', 'mgmt-cluster = "local-mgmt"')],
        [
            (
                TOML,
                LHK + ".mgmt-cluster",
                "bootstrap",
                f"mgmt-cluster local-mgmt is not a Cluster in namespace default of the tree ({CLUSTERS})",
            )
        ],
    ),
    (
        "bootstrap.capi-workloads",
        "local-host",
        [_edit(TOML, 'capi-workloads = ["local-workload"]', 'capi-workloads = ["local-management", "other"]')],
        [
            (
                TOML,
                LHK + ".teardown.capi-workloads",
                "bootstrap",
                "capi-workload local-management is the management cluster; teardown must never delete it through "
                "its Cluster object",
            ),
            (
                TOML,
                LHK + ".teardown.capi-workloads",
                "bootstrap",
                f"capi-workload other is not a Cluster in namespace default of the tree ({CLUSTERS})",
            ),
        ],
    ),
    (
        "bootstrap.mgmt-container-prefix",
        "local-host",
        [_edit(TOML, 'mgmt-container-prefix = "local-management"', 'mgmt-container-prefix = "local-mgmt"')],
        [
            (
                TOML,
                LHK + ".teardown.mgmt-container-prefix",
                "bootstrap",
                "mgmt-container-prefix local-mgmt does not match mgmt-cluster local-management (CAPD names "
                "containers after the Cluster)",
            )
        ],
    ),
    (
        "bootstrap.aws-workload-cluster",
        "aws",
        [_edit(TOML, 'cluster-name = "eu-north-1-workload"', 'cluster-name = "eu-north-1-wrkload"')],
        [
            (
                TOML,
                AWSK + ".teardown.aws-workloads[0]",
                "bootstrap",
                f"cluster-name eu-north-1-wrkload is not a Cluster in namespace default of the tree ({AWS_CLUSTERS})",
            )
        ],
    ),
    (
        "bootstrap.aws-workload-eks",
        "aws",
        [
            _edit(
                TOML,
                'eks-cluster-name = "default_eu-west-1-workload-control-plane"',
                'eks-cluster-name = "default_eu-west-1-workload"',
            )
        ],
        [
            (
                TOML,
                AWSK + ".teardown.aws-workloads[1]",
                "bootstrap",
                "eks-cluster-name default_eu-west-1-workload matches no AWSManagedControlPlane eksClusterName "
                "(default_eu-north-1-management-control-plane, default_eu-north-1-workload-control-plane, "
                "default_eu-west-1-workload-control-plane)",
            )
        ],
    ),
    (
        "bootstrap.aws-workload-rds",
        "aws",
        [_edit(TOML, 'rds-instance = "krops-eu-west-1-workload-db"', 'rds-instance = "krops-eu-west-1-db"')],
        [
            (
                TOML,
                AWSK + ".teardown.aws-workloads[1]",
                "bootstrap",
                "rds-instance krops-eu-west-1-db matches no DBInstance dbInstanceIdentifier "
                "(krops-eu-north-1-workload-db, krops-eu-west-1-workload-db)",
            )
        ],
    ),
    (
        "bootstrap.mgmt-region",
        "aws",
        [_edit(TOML, 'mgmt-region = "eu-north-1"', 'mgmt-region = "eu-west-1"')],
        [
            (
                TOML,
                AWSK + ".mgmt-region",
                "bootstrap",
                "mgmt-region eu-west-1 differs from the region of mgmt-cluster eu-north-1-management in the tree "
                "(eu-north-1)",
            )
        ],
    ),
    (
        "bootstrap.aws-workload-region",
        "aws",
        [
            _edit(
                TOML,
                '[[environments.aws.teardown.aws-workloads]]\nregion = "eu-west-1"',
                '[[environments.aws.teardown.aws-workloads]]\nregion = "eu-west-2"',
            )
        ],
        [
            (
                TOML,
                AWSK + ".teardown.aws-workloads[1]",
                "bootstrap",
                "region eu-west-2 differs from the region of cluster eu-west-1-workload in the tree (eu-west-1)",
            )
        ],
    ),
    (
        "bootstrap.networks",
        "gcp",
        [_edit(TOML, 'networks = ["europe-north1-management", ', 'networks = ["europe-north1-mgmt", ')],
        [
            (
                TOML,
                GCPK + ".teardown.networks",
                "bootstrap",
                "VPC europe-north1-management of the tree is not in teardown networks: teardown would leave it and "
                "everything in it behind",
            ),
            (
                TOML,
                GCPK + ".teardown.networks",
                "bootstrap",
                "network europe-north1-mgmt is not a VPC of the tree (GCPManagedCluster spec.network.name or "
                "ComputeNetwork: europe-north1-management, europe-north1-workload)",
            ),
        ],
    ),
    (
        "bootstrap.gcp-iam",
        "gcp",
        [
            _edit(
                TOML,
                'service-accounts = ["krops-europe-north1-workload"]',
                'service-accounts = ["krops-europe-north1-workload", "krops-capg"]',
            )
        ],
        [
            (
                TOML,
                GCPK + ".teardown.service-accounts",
                "bootstrap",
                "service account krops-capg is abandoned by Config Connector in the tree (a prerequisite, "
                "docs/environments/gcp.md): teardown must not delete it; remove it from teardown service-accounts",
            )
        ],
    ),
    (
        "bootstrap.resource-groups",
        "azure",
        [_edit(TOML, '"swedencentral-data"]', '"swedencentral-dat"]')],
        [
            (
                TOML,
                "environments.azure.teardown.resource-groups",
                "bootstrap",
                "resource group swedencentral-dat is not a ResourceGroup of the tree (swedencentral-data, "
                "swedencentral-management, swedencentral-workload)",
            )
        ],
    ),
    (
        "bootstrap.ack-accounts",
        "aws",
        [_edit(TOML, "[environments.aws.teardown]\n", ACK_ACCOUNT + "[environments.aws.teardown]\n")],
        [
            (
                AWS + "/ack-controllers/role-account-map.yaml",
                "ConfigMap/ack-system/ack-role-account-map",
                "bootstrap",
                "ack-role-account-map is {}, bootstrap.toml's accounts (ack-role-arn) give {'111111111111': "
                "'arn:aws:iam::111111111111:role/krops-ack'}: run scripts/ack-accounts --write",
            ),
            (
                AWS + "/ack-controllers/role-account-map.yaml",
                "Namespace/ack-111111111111",
                "bootstrap",
                "namespace ack-111111111111 annotated services.k8s.aws/owner-account-id: 111111111111 is missing "
                "(bootstrap.toml maps account 111111111111): run scripts/ack-accounts --write",
            ),
            (
                AWS + "/workload-resources/eu-west-1-workload.yaml",
                "DBInstance/default/krops-eu-west-1-workload-db",
                "bootstrap",
                "the DBInstance of cluster eu-west-1-workload is in namespace default, which ACK manages in the "
                "controllers' own account (no account lists mgmt-cluster), but bootstrap.toml lists the cluster in "
                "account 111111111111: put the cluster's ACK resources in namespace ack-111111111111",
            ),
        ],
    ),
    (
        "secrets.rendered-plaintext",
        "local-host",
        [_edit(*SECRET_GENERATOR_PLAINTEXT[:3])],
        [SECRET_GENERATOR_PLAINTEXT[3]],
    ),
    (
        "tags.ownership",
        "aws",
        [_edit(AWS + "/aws-global-iam/krops-reader.yaml", "      value: aws\n", "      value: azure\n")],
        [
            (
                AWS + "/aws-global-iam/krops-reader.yaml",
                "Policy/default/krops-reader-assume",
                "tags",
                "spec.tags: krops.io/environment is 'azure', expected 'aws'",
            )
        ],
    ),
    (
        "tags.run-tags",
        "aws",
        [
            _edit(
                AWS + "/aws-managed-clusters/eu-west-1/eu-west-1-workload.yaml",
                "    krops.io/run-id: ${quote}${KROPS_RUN_ID:=unset}${quote}\n",
                "",
            )
        ],
        [
            (
                AWS + "/aws-managed-clusters/eu-west-1/eu-west-1-workload.yaml",
                "AWSManagedControlPlane/default/eu-west-1-workload-control-plane",
                "tags",
                "spec.additionalTags lacks the run tags krops.io/run-id: add them from the krops-run ConfigMap "
                '(postBuild substituteFrom, e.g. "${KROPS_RUN_ID:=unset}")',
            )
        ],
    ),
    (
        "tags.gcp-label-key",
        "gcp",
        [
            _edit(
                "mgmt/gcp/workload-resources/storage/kustomization.yaml",
                "krops-environment: gcp",
                "krops-environment: gcp\n      Krops-Owner: team-a",
            )
        ],
        [
            (
                "mgmt/gcp/workload-resources/storage/bucket.yaml",
                "StorageBucket/krops-gcp/krops-europe-north1-workload-data",
                "tags",
                "metadata.labels: 'Krops-Owner' is not a valid GCP label key (a lower-case letter, then at most 62 "
                "of lower-case letters, digits, _ and -)",
            )
        ],
    ),
    (
        "tags.gcp-label-value",
        "gcp",
        [
            _edit(
                "mgmt/gcp/workload-resources/storage/kustomization.yaml",
                "${KROPS_EXPIRES_AT_LABEL:=none}",
                "${KROPS_EXPIRES_AT:=none}",
            ),
            _edit(
                "mgmt/gcp/workload-resources/storage/kustomization.yaml",
                "krops-environment: gcp",
                "krops-environment: gcp\n      krops-owner: Team_A",
            ),
        ],
        [
            (
                "mgmt/gcp/workload-resources/storage/bucket.yaml",
                "StorageBucket/krops-gcp/krops-europe-north1-workload-data",
                "tags",
                "metadata.labels.krops-expires-at: '2026-12-02T12:00:00Z' during a run (krops-run ConfigMap) is not "
                "a valid GCP label value " + GCP_LABEL_FIX,
            ),
            (
                "mgmt/gcp/workload-resources/storage/bucket.yaml",
                "StorageBucket/krops-gcp/krops-europe-north1-workload-data",
                "tags",
                "metadata.labels.krops-owner: 'Team_A' is not a valid GCP label value " + GCP_LABEL_FIX,
            ),
        ],
    ),
    (
        "airgap.images",
        "local-host",
        [
            _edit(
                "airgap/images.txt",
                "docker.io/library/registry:3  # UNCONFIRMED host: roles/bootstrap/defaults/main.yml "
                "bootstrap_registry_image\n",
                "",
            )
        ],
        [
            (
                "airgap/images.txt",
                "docker.io/library/registry:3",
                "airgap",
                "docker.io/library/registry:3 (roles/bootstrap/defaults/main.yml bootstrap_registry_image) is not in "
                "airgap/images.txt: regenerate it with scripts/airgap-inventory --write",
            ),
            (
                "airgap/zarf.yaml",
                "component host",
                "airgap",
                "image docker.io/library/registry:3 is not in airgap/images.txt",
            ),
        ],
    ),
]


def _plant(tmp_path, environment, changes, rule_id):
    parts = TREES.get(environment, TREES["local-host"])
    files = REPO_FILES
    if rule_id.startswith("airgap."):
        parts, files = (*parts, "airgap"), (*REPO_FILES, "roles/bootstrap/defaults/main.yml")
    root = copy_repo(tmp_path, parts, files=files, ignore=shutil.ignore_patterns("build"))
    for change in changes:
        if change[0] == "edit":
            edit(root, *change[1:])
        elif change[0] == "write":
            (root / change[1]).parent.mkdir(parents=True, exist_ok=True)
            (root / change[1]).write_text(change[2])
        else:  # copy
            shutil.copytree(root / change[1], root / change[2])
    return root


def _run_rule(root, environment, rule, monkeypatch):
    monkeypatch.setattr(validate, "REGISTRY", (rule,))
    return validate.run(str(root), environments=[environment], schema_location=str(SCHEMAS), cel=rule.category == "cel")


@pytest.mark.parametrize("row", ROWS, ids=[row[0] for row in ROWS])
def test_the_rule_alone_reports_its_planted_defect(tmp_path, monkeypatch, row):
    rule_id, environment, changes, expected = row
    rule = {r.id: r for r in validate.REGISTRY}[rule_id]
    clean = environment if environment in TREES else "local-host"
    assert findings(_run_rule(_plant(tmp_path / "clean", clean, [], rule_id), clean, rule, monkeypatch)) == []
    result = _run_rule(_plant(tmp_path / "planted", environment, changes, rule_id), environment, rule, monkeypatch)
    assert findings(result) == expected


def test_every_registered_rule_has_a_row():
    registered = [rule.id for rule in validate.REGISTRY]
    rows = [row[0] for row in ROWS]
    assert len(set(registered)) == len(registered), "a rule id is registered twice"
    assert sorted(set(registered) - set(rows)) == [], "registered rules without a row in ROWS"
    assert sorted(set(rows) - set(registered)) == [], "rows for rule ids that are not registered"


def test_every_rule_says_what_it_enforces_and_reports_a_known_category():
    for rule in validate.REGISTRY:
        area, _dot, name = rule.id.partition(".")
        assert area == rule.category and name, rule.id
        assert rule.category in validate.RULES, rule.id
        assert rule.phase in ("files", "objects"), rule.id
        assert len(rule.doc.split()) >= 8, f"{rule.id}: its function's docstring must say what it enforces"
