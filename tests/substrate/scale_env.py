# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""An aws-like environment of n workload clusters over 10 regions and 3 accounts, in a copy of the repository.

``write(root, n)`` rewrites the aws environment of a repository copy (``copy_repository``) the way
the shipped one is laid out, scaled to n workload clusters:

- mgmt/aws/aws-managed-clusters/<region>/: one folder and one Flux Kustomization per region in
  use, each cluster a Cluster, AWSManagedCluster, AWSManagedControlPlane and two MachinePools
  (x86, arm) with their AWSManagedMachinePools; the management cluster stays in eu-north-1;
- mgmt/aws/workload-resources/<cluster>.yaml: the ACK resources of each cluster (Bucket, VPC, two
  Subnets, SecurityGroup, DBSubnetGroup, DBInstance, Role);
- mgmt/aws/flux-apps/resourceset.yaml: one ResourceSet input per cluster;
- workload/aws/<cluster>/: each cluster's overlay on workload/aws/base;
- bootstrap.toml [environments.aws.teardown]: capi-workloads and one aws-workloads entry per cluster.

Accounts: cluster i lives in ACCOUNTS[i % 3]. The first account is the management cluster's own
(aws-account's AWS_ACCOUNT_ID); CAPA reaches the others through one AWSClusterRoleIdentity per
account (chained from the controller identity), and the clusters' account is their
``krops.io/account`` label. bootstrap.toml lists the three accounts (``[[environments.aws.accounts]]``:
the role krops assumes, the clusters, and for the two further accounts the role ACK assumes,
``ack-role-arn``); ``scripts/ack-accounts`` (module_utils/ack_accounts.py) writes ACK's role-account
map and the further accounts' namespaces from them, and each cluster's ACK resources are in its
account's namespace (ack_accounts.namespace_for_cluster), their bucket named for that account.

The shipped files are the templates, so the generated tree follows the product's own layout and
passes its validate; ``clusters(n)`` gives the plan (names, regions, accounts, CIDRs) for the
benchmarks that seed emulators and moto with the same world.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from ansible_collections.krops.platform.plugins.module_utils import ack_accounts

REGIONS = (
    "eu-north-1",
    "eu-west-1",
    "eu-west-2",
    "eu-central-1",
    "us-east-1",
    "us-east-2",
    "us-west-2",
    "ap-southeast-1",
    "ap-northeast-1",
    "ca-central-1",
)
# (key, account id); the first is the management cluster's account (mgmt/aws/aws-account.yaml).
ACCOUNTS = (("home", "000000000000"), ("team-a", "111111111111"), ("team-b", "222222222222"))
MAX_CLUSTERS = 100  # the CIDR plan below: 10.(20+i).0.0/16 for the clusters, 10.(150+i) for their databases

_TEMPLATE_CLUSTER = "mgmt/aws/aws-managed-clusters/eu-west-1/eu-west-1-workload.yaml"
_TEMPLATE_RESOURCES = "mgmt/aws/workload-resources/eu-west-1-workload.yaml"
_TEMPLATE_REGION_KS = "mgmt/aws/aws-managed-clusters/eu-west-1/flux-ks.yaml"
_TEMPLATE_OVERLAY = "workload/aws/eu-west-01/kustomization.yaml"
_SHIPPED = ("eu-north-1-workload", "eu-west-1-workload")
_SHIPPED_OVERLAYS = ("eu-north-01", "eu-west-01")
_COPY_EXCLUDE = {".git", ".venv", ".collections", ".sanity-venvs", "build", "tests", "docs", "node_modules"}


class Cluster:
    """One generated workload cluster: its names, region, account and address ranges."""

    def __init__(self, index):
        self.index = index
        self.region = REGIONS[index % len(REGIONS)]
        self.account_key, self.account_id = ACCOUNTS[index % len(ACCOUNTS)]
        self.name = "%s-workload-%02d" % (self.region, index)
        self.eks_name = "default_%s-control-plane" % self.name
        self.rds_instance = "krops-%s-db" % self.name
        self.vpc_cidr = "10.%d.0.0/16" % (20 + index)
        self.db_octet = 150 + index

    @property
    def identity(self):
        """The CAPA identity the control plane names (the controller's own in the home account)."""
        if self.account_key == ACCOUNTS[0][0]:
            return ("AWSClusterControllerIdentity", "default")
        return ("AWSClusterRoleIdentity", "krops-%s" % self.account_key)


def clusters(n):
    if not 1 <= n <= MAX_CLUSTERS:
        raise ValueError("scale_env: n must be between 1 and %d, got %r" % (MAX_CLUSTERS, n))
    return [Cluster(i) for i in range(n)]


def copy_repository(source, destination):
    """The files of the checkout that validate and render read (no tests, docs, caches), as a git repository."""

    def ignore(directory, names):
        return (
            [name for name in names if name in _COPY_EXCLUDE or name == "__pycache__"]
            if directory == source
            else [name for name in names if name == "__pycache__"]
        )

    shutil.copytree(source, destination, ignore=ignore, symlinks=True)
    git(destination, "init", "-q", "-b", "main")
    commit(destination, "shipped tree")
    return destination


def git(root, *args):
    env = dict(os.environ, GIT_AUTHOR_NAME="scale", GIT_AUTHOR_EMAIL="scale@example.invalid")
    env.update(GIT_COMMITTER_NAME="scale", GIT_COMMITTER_EMAIL="scale@example.invalid")
    return subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True).stdout


def commit(root, message):
    git(root, "add", "-A")
    git(root, "commit", "-q", "--allow-empty", "-m", message)
    return git(root, "rev-parse", "HEAD").strip()


def _read(root, path):
    with open(os.path.join(root, path), encoding="utf-8") as handle:
        return handle.read()


def _write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as handle:
        handle.write(text)


def _rename(text, old_region, old_name, cluster):
    """The template's names, region and ranges turned into the cluster's."""
    upper_old, upper_new = old_name.upper().replace("-", "_"), cluster.name.upper().replace("-", "_")
    text = text.replace(old_name, cluster.name).replace(upper_old, upper_new)
    text = text.replace(old_region, cluster.region)
    text = text.replace("10.30.0.0/16", cluster.vpc_cidr)
    return re.sub(r"\b10\.130\.", "10.%d." % cluster.db_octet, text)


def _cluster_manifest(template, cluster):
    text = _rename(template, "eu-west-1", "eu-west-1-workload", cluster)
    text = text.replace(
        "    region: %s\n" % cluster.region,
        "    region: %s\n    krops.io/account: %s\n" % (cluster.region, cluster.account_key),
        1,
    )
    kind, name = cluster.identity
    return text.replace(
        "    kind: AWSClusterControllerIdentity\n    name: default\n", "    kind: %s\n    name: %s\n" % (kind, name)
    )


def _role_identities():
    docs = []
    for key, account_id in ACCOUNTS[1:]:
        docs.append(
            "apiVersion: infrastructure.cluster.x-k8s.io/v1beta2\n"
            "kind: AWSClusterRoleIdentity\n"
            "metadata:\n"
            "  name: krops-%s\n"
            "spec:\n"
            "  allowedNamespaces: {}\n"
            "  roleARN: arn:aws:iam::%s:role/krops-capa\n"
            "  sessionName: krops-capa-%s\n"
            "  sourceIdentityRef:\n"
            "    kind: AWSClusterControllerIdentity\n"
            "    name: default\n" % (key, account_id, key)
        )
    return "# Generated by tests/substrate/scale_env.py: CAPA's role in each further account.\n" + "---\n".join(docs)


def _resource_set(text, plan):
    inputs = "".join(
        "    - region: %s\n      cluster: %s\n      overlay: %s\n" % (c.region, c.name, c.name) for c in plan
    )
    text = re.sub(
        r"  inputs:\n(?:    - .*\n(?:      .*\n)*)+", "  inputs:\n" + inputs.replace("\\", "\\\\"), text, count=1
    )
    return text.replace("name: flux-apps-<< inputs.region >>", "name: flux-apps-<< inputs.cluster >>")


ACK_ROLE = "arn:aws:iam::%s:role/krops-ack"


def _accounts_section(plan):
    lines = []
    for key, account_id in ACCOUNTS:
        members = (["eu-north-1-management"] if key == ACCOUNTS[0][0] else []) + [
            c.name for c in plan if c.account_key == key
        ]
        if not members:
            continue
        lines += [
            "[[environments.aws.accounts]]",
            'account-id = "%s"' % account_id,
            'role-name = "krops-teardown"',
            "clusters = [%s]" % ", ".join('"%s"' % m for m in members),
        ]
        if key != ACCOUNTS[0][0]:
            lines.append('ack-role-arn = "%s"' % (ACK_ROLE % account_id))
        lines.append("")
    return lines


def _teardown_section(plan):
    lines = _accounts_section(plan) + [
        "[environments.aws.teardown]",
        "capi-workloads = [%s]" % ", ".join('"%s"' % c.name for c in plan),
        'mgmt-eks-cluster-name = "default_eu-north-1-management-control-plane"',
        'mgmt-iam-role-prefix = "eu-north-1-management"',
        "",
    ]
    for c in plan:
        lines += [
            "[[environments.aws.teardown.aws-workloads]]",
            'region = "%s"' % c.region,
            'cluster-name = "%s"' % c.name,
            'eks-cluster-name = "%s"' % c.eks_name,
            'rds-instance = "%s"' % c.rds_instance,
            "",
        ]
    return "\n".join(lines)


def _bootstrap(text, plan):
    start = text.index("[environments.aws.teardown]\n")
    end = text.index("\n[environments.", start + 1) + 1
    return text[:start] + _teardown_section(plan) + "\n" + text[end:]


def write(root, n):
    """Rewrite root's aws environment for n workload clusters; return the plan (a list of Cluster)."""
    plan = clusters(n)
    cluster_template = _read(root, _TEMPLATE_CLUSTER)
    resources_template = _read(root, _TEMPLATE_RESOURCES)
    region_ks_template = _read(root, _TEMPLATE_REGION_KS)
    overlay_template = _read(root, _TEMPLATE_OVERLAY)
    management = _read(root, "mgmt/aws/aws-managed-clusters/eu-north-1/eu-north-1-management.yaml")

    managed = os.path.join(root, "mgmt/aws/aws-managed-clusters")
    for entry in os.listdir(managed):
        if os.path.isdir(os.path.join(managed, entry)):
            shutil.rmtree(os.path.join(managed, entry))
    for name in _SHIPPED:
        os.remove(os.path.join(root, "mgmt/aws/workload-resources/%s.yaml" % name))
    for overlay in _SHIPPED_OVERLAYS:
        shutil.rmtree(os.path.join(root, "workload/aws", overlay))

    regions = [r for r in REGIONS if r == "eu-north-1" or any(c.region == r for c in plan)]
    for region in regions:
        members = [c for c in plan if c.region == region]
        files = (["eu-north-1-management.yaml"] if region == "eu-north-1" else []) + [
            "%s.yaml" % c.name for c in members
        ]
        folder = "mgmt/aws/aws-managed-clusters/%s" % region
        _write(
            root,
            folder + "/kustomization.yaml",
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
            + "".join("  - %s\n" % f for f in files),
        )
        _write(root, folder + "/flux-ks.yaml", region_ks_template.replace("eu-west-1", region))
        if region == "eu-north-1":
            _write(root, folder + "/eu-north-1-management.yaml", management)
        for c in members:
            _write(root, "%s/%s.yaml" % (folder, c.name), _cluster_manifest(cluster_template, c))
            _write(root, "mgmt/aws/workload-resources/%s.yaml" % c.name, _resources(resources_template, c))
            _write(
                root,
                "workload/aws/%s/kustomization.yaml" % c.name,
                overlay_template.replace("eu-west-01", c.name).replace("eu-west-1-workload", c.name),
            )
    _write(
        root,
        "mgmt/aws/aws-managed-clusters/kustomization.yaml",
        "# The regional cluster Kustomizations (generated by tests/substrate/scale_env.py).\n"
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
        + "".join("  - %s/flux-ks.yaml\n" % r for r in regions),
    )
    _write(
        root,
        "mgmt/aws/workload-resources/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
        + "".join("  - %s.yaml\n" % c.name for c in plan),
    )
    if any(c.identity[0] == "AWSClusterRoleIdentity" for c in plan):
        _write(root, "mgmt/aws/capa-identity/role-identities.yaml", _role_identities())
        _write(
            root,
            "mgmt/aws/capa-identity/kustomization.yaml",
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
            "  - awsclustercontrolleridentity.yaml\n  - role-identities.yaml\n",
        )
    _write(
        root,
        "mgmt/aws/flux-apps/resourceset.yaml",
        _resource_set(_read(root, "mgmt/aws/flux-apps/resourceset.yaml"), plan),
    )
    _write(root, "bootstrap.toml", _bootstrap(_read(root, "bootstrap.toml"), plan))
    ack_accounts.write(root, only=["aws"])  # the role-account map and the namespaces of the further accounts
    return plan


def _resources(template, cluster):
    """The cluster's ACK resources; those of a further account in its namespace (CARM), the bucket named for it."""
    text = _rename(template, "eu-west-1", "eu-west-1-workload", cluster)
    if cluster.account_key == ACCOUNTS[0][0]:
        return text
    namespace = ack_accounts.namespace_of(cluster.account_id)
    text = text.replace("  namespace: default\n", "  namespace: %s\n" % namespace)
    return text.replace('"krops-${AWS_ACCOUNT_ID}-', '"krops-%s-' % cluster.account_id)
