# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""krops' one ownership model: what a teardown may delete, for every cloud, Docker, Kubernetes and files.

A resource is krops' only when krops can prove it (docs/ownership.md):

- AWS: an ownership tag for the exact name of one of the environment's clusters (CAPA's
  ``sigs.k8s.io/cluster-api-provider-aws/cluster/<name>=owned``, the cloud provider's
  ``kubernetes.io/cluster/<name>=owned``; <name> is the CAPI cluster name or its EKS cluster
  name, CAPA tags with both), the krops tag ``krops.io/environment=<env>``, or an exact name
  from bootstrap.toml. A resource tagged ``krops.io/environment`` for another environment is
  never ours, whatever else it carries. A shared name prefix only makes a *candidate* to report.
- Docker: the label kind and CAPD put on every node and load-balancer container
  (``io.x-k8s.kind.cluster=<exact cluster name>``); never a name pattern.
- kind: the marker ConfigMap ``kube-system/krops-bootstrap`` with the matching environment
  and kind-cluster name.
- Kubernetes: the Cluster names bootstrap.toml gives the environment.
- Azure tags / GCP labels: ``krops-environment=<env>``, or exact bootstrap.toml names.
- Kubeconfig files: only the context, cluster and user entries krops wrote.

Every teardown path and the orphan report decide through this module. Plain Python, no Ansible.
"""

from __future__ import annotations

import copy
import re

from ansible_collections.krops.platform.plugins.module_utils import profiles

# --- one outcome vocabulary for every teardown's items ({type, id, name/cluster, reason, outcome}) ---------
PLANNED = "planned"  # check mode: would be deleted
UNDELETABLE = "undeletable"  # owned, but krops cannot delete its type (fails the real run)
DELETED = "deleted"
ABSENT = "absent"  # already gone
FAILED = "failed"  # the delete failed or did not finish in time; the reason says which
KEPT = "kept"  # owned, left on purpose (the reason says why)
LEFT = "left"  # owned and still present after the run: a leftover
CANDIDATE = "candidate"  # resembles krops' by name only; never deleted
OUTCOMES = (PLANNED, UNDELETABLE, DELETED, ABSENT, FAILED, KEPT, LEFT, CANDIDATE)

# --- marks --------------------------------------------------------------------------------

OWNED = "owned"
CAPA_TAG_PREFIX = "sigs.k8s.io/cluster-api-provider-aws/cluster/"  # CAPA api/v1beta1/tags.go ClusterTagKey
CLOUD_PROVIDER_TAG_PREFIX = "kubernetes.io/cluster/"  # CAPA api/v1beta1/tags.go ClusterAWSCloudProviderTagKey
KROPS_ENV_TAG = "krops.io/environment"  # docs/ownership.md: on every resource a tree declares
# Tags whose *value* is the exact cluster name (docs/ownership.md): the AWS Load Balancer Controller on every
# resource it creates (v2.17.1 pkg/shared_constants/tag_keys.go TagKeyK8sCluster), the VPC CNI on the network
# interfaces it creates when it knows the cluster name (v1.23.0 pkg/awsutils/awsutils.go eniClusterTagKey).
CLUSTER_NAME_TAGS = ("elbv2.k8s.aws/cluster", "cluster.k8s.amazonaws.com/name")
CLOUD_ENV_LABEL = "krops-environment"  # Azure tags and GCP labels allow no "/"

# kind (pkg/cluster/internal/providers/docker/constants.go) and CAPD
# (test/infrastructure/docker/internal/docker/util.go) label every container with the cluster name.
KIND_CLUSTER_LABEL = "io.x-k8s.kind.cluster"
KIND_ROLE_LABEL = "io.x-k8s.kind.role"

MARKER_NAMESPACE = "kube-system"
MARKER_NAME = "krops-bootstrap"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "krops"


def tags_to_dict(tags):
    """AWS tag lists ([{Key, Value}] or [{key, value}]) or dicts -> dict."""
    if isinstance(tags, dict):
        return dict(tags)
    result = {}
    for tag in tags or []:
        key = tag.get("Key", tag.get("key"))
        if key is not None:
            result[key] = tag.get("Value", tag.get("value", ""))
    return result


def aws_owner_keys(name):
    """The two tag keys that, valued ``owned``, mark a resource as owned by cluster ``name``."""
    return [CAPA_TAG_PREFIX + name, CLOUD_PROVIDER_TAG_PREFIX + name]


class AwsOwnership:
    """Decides AWS ownership for one environment.

    ``clusters`` maps each cluster of the environment to the exact names it is tagged with
    (its CAPI cluster name and its EKS cluster name).
    """

    def __init__(self, environment, clusters, environment_tag_owns=True):
        self.environment = environment
        # False when a sweep covers only part of the environment: the krops tag then proves nothing about
        # which part a resource belongs to, so only the cluster tags decide (the tag still rules out others).
        self.environment_tag_owns = environment_tag_owns
        self.clusters = {
            cluster: [n for n in dict.fromkeys([cluster] + list(names or [])) if n]
            for cluster, names in clusters.items()
        }

    def keys(self):
        """Every (tag key, value, cluster) that proves ownership, the krops environment tag last."""
        found = []
        for cluster, names in self.clusters.items():
            for name in names:
                found += [(key, OWNED, cluster) for key in aws_owner_keys(name)]
                found += [(key, name, cluster) for key in CLUSTER_NAME_TAGS]
        if self.environment and self.environment_tag_owns:
            found.append((KROPS_ENV_TAG, self.environment, ""))
        return found

    def owner(self, tags):
        """(cluster, reason) when the tags prove ownership ("" cluster: owned by the environment tag), else None."""
        tags = tags_to_dict(tags)
        other = tags.get(KROPS_ENV_TAG)
        if self.environment and other is not None and other != self.environment:
            return None  # declared by another environment: never ours
        for key, value, cluster in self.keys():
            if tags.get(key) == value:
                return cluster, f"tag {key}={value}"
        return None

    def vetoed(self, tags):
        """True when the tags declare another environment (krops.io/environment): never ours, whatever the name."""
        other = tags_to_dict(tags).get(KROPS_ENV_TAG)
        return bool(self.environment) and other is not None and other != self.environment

    def candidate(self, name):
        """The cluster a resource *name* merely resembles (prefix or substring), for reports only; else None."""
        for cluster, names in self.clusters.items():
            if any(n and n in (name or "") for n in names):
                return cluster
        return None


def aws_account_global(cfg, environment, kind, name):
    """Other environments of bootstrap.toml that name account-global resource ``name`` (kind: 'iam-user' or
    'cloudformation-stack'). An environment names a global resource through its own teardown table or,
    when it sets none, through the top-level [teardown] defaults."""
    others = []
    for env_name in cfg.environment_names:
        if env_name == environment:
            continue
        env = cfg.environment(env_name)
        if profiles.of(env).cloud != "aws":
            continue
        if name in effective_globals(cfg, env_name)[kind]:
            others.append(env_name)
    return others


def effective_globals(cfg, environment):
    """{'iam-user': [...], 'cloudformation-stack': [...]} an environment names (own table, else [teardown])."""
    own = cfg.environment(environment).teardown
    users = cfg.teardown.global_iam_users if own.global_iam_users is None else own.global_iam_users
    stack = cfg.teardown.cfn_stack_name if own.cfn_stack_name is None else own.cfn_stack_name
    return {"iam-user": list(users), "cloudformation-stack": [stack] if stack else []}


# --- Docker and kind ----------------------------------------------------------------------


def docker_label_filter(cluster):
    """The Docker Engine API label filter (exact key=value) selecting the containers of kind/CAPD cluster ``cluster``."""
    return f"{KIND_CLUSTER_LABEL}={cluster}"


def docker_owned(labels, clusters):
    """The cluster of ``clusters`` a container/volume/network belongs to by its kind/CAPD label, else None."""
    value = (labels or {}).get(KIND_CLUSTER_LABEL)
    return value if value in clusters else None


def _marker_names(what, named, wanted):
    return f"ConfigMap {MARKER_NAMESPACE}/{MARKER_NAME} names {what} {named!r}, not {wanted!r}"


def kind_marker_verdict(configmap, environment, kind_cluster):
    """(True, why) when the marker ConfigMap proves krops created kind cluster ``kind_cluster`` for ``environment``."""
    if not configmap:
        return False, (
            f"no ConfigMap {MARKER_NAMESPACE}/{MARKER_NAME} on the kind cluster: krops did not create it (or it predates the marker)"
        )
    meta = configmap.get("metadata") or {}
    data = configmap.get("data") or {}
    if (meta.get("labels") or {}).get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE:
        return (
            False,
            f"ConfigMap {MARKER_NAMESPACE}/{MARKER_NAME} lacks the label {MANAGED_BY_LABEL}={MANAGED_BY_VALUE}",
        )
    if data.get("environment") != environment:
        return False, _marker_names("environment", data.get("environment"), environment)
    if data.get("kind-cluster") != kind_cluster:
        return False, _marker_names("kind cluster", data.get("kind-cluster"), kind_cluster)
    return True, f"marker {MARKER_NAMESPACE}/{MARKER_NAME}: environment {environment}, kind cluster {kind_cluster}"


# --- Kubernetes ---------------------------------------------------------------------------


def owned_cluster_names(env, pivoted):
    """The Cluster objects bootstrap.toml names for an environment that a teardown may delete.

    The workloads (teardown.capi-workloads); the management Cluster only while it still lives on
    the kind cluster (before the pivot), where it is a workload of the bootstrap cluster.
    """
    names = list(env.teardown.capi_workloads)
    if not pivoted and env.mgmt_cluster not in names:
        names.append(env.mgmt_cluster)
    return names


# --- Azure and GCP ------------------------------------------------------------------------


def cloud_label_verdict(labels, environment):
    """'owned', 'other' (labelled for another environment) or 'unlabelled'."""
    value = (labels or {}).get(CLOUD_ENV_LABEL)
    if value is None:
        return "unlabelled"
    return "owned" if value == environment else "other"


# GCP label keys and values (Resource Manager "Requirements for labels"; the API references give the
# patterns [a-z][a-z0-9_-]{0,62} and [a-z0-9_-]{0,63}; international characters, which krops never
# writes, are allowed too). An RFC 3339 time or a Git revision is no valid value.
GCP_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
GCP_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
# The run tags: the keys of the krops-run ConfigMap that the trees substitute into every resource they declare
# (flux.run_tags writes them).
RUN_TAG_KEYS = ("KROPS_RUN_ID", "KROPS_REVISION", "KROPS_EXPIRES_AT", "KROPS_RUN_KIND")
# The krops-run ConfigMap carries each run tag a second time in a GCP-safe form, under these keys.
GCP_RUN_LABEL_VARS = {key: f"{key}_LABEL" for key in RUN_TAG_KEYS}


def gcp_label_value(value):
    """A GCP-safe form of a run tag: lower-case, every character outside [a-z0-9_-] as "-", at most 63.

    2026-12-02T08:24:41Z -> 2026-12-02t08-24-41z; main@sha1:0a1b... -> main-sha1-0a1b...
    """
    return re.sub(r"[^a-z0-9_-]", "-", str(value).lower())[:63]


def gcp_run_labels(tags):
    """{KROPS_*_LABEL: GCP-safe value} for the run tags present in tags (added to the krops-run ConfigMap)."""
    return {GCP_RUN_LABEL_VARS[k]: gcp_label_value(v) for k, v in (tags or {}).items() if k in GCP_RUN_LABEL_VARS}


# --- kubeconfig files ---------------------------------------------------------------------


def kubeconfig_without(doc, context):
    """(remaining kubeconfig or None when nothing else is left, removed entries) after removing krops' entries.

    krops' entries are ``context`` and the cluster and user it references, each only when no other
    context references it.
    """
    doc = copy.deepcopy(doc or {})
    contexts = doc.get("contexts") or []
    mine = [c for c in contexts if c.get("name") == context]
    removed = {"contexts": [], "clusters": [], "users": []}
    if mine:
        ref = mine[0].get("context") or {}
        rest = [c for c in contexts if c.get("name") != context]
        doc["contexts"] = rest
        removed["contexts"].append(context)
        for field, key in (("clusters", "cluster"), ("users", "user")):
            name = ref.get(key)
            if name and not any((c.get("context") or {}).get(key) == name for c in rest):
                before = doc.get(field) or []
                doc[field] = [e for e in before if e.get("name") != name]
                if len(doc[field]) != len(before):
                    removed[field].append(name)
        if doc.get("current-context") == context:
            doc["current-context"] = ""
    left = any(doc.get(field) for field in ("contexts", "clusters", "users"))
    return (doc if left else None), removed


# --- GCP IAM: the one rule set of the loader's lists, validate and gcp_teardown -------------

KCC_IAM_GROUP = "iam.cnrm.cloud.google.com"
KCC_ABANDON = ("cnrm.cloud.google.com/deletion-policy", "abandon")
WIF_HOOK_PROVIDER = "krops/kind"  # the provider the wif-federate post-kind hook registers (roles/bootstrap)


def _kcc_id(obj):
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    return str(spec.get("resourceID") or (obj.get("metadata") or {}).get("name") or "")


def gcp_iam_declared(objects, hook=None):
    """(accounts {id: abandoned}, providers {<pool>/<provider>}) that the tree's Config Connector objects
    (and the wif-federate hook) create. GCP IAM objects carry no labels: these exact names are the only proof."""
    accounts, pools, providers = {}, {}, set()
    objects = [
        o
        for o in objects
        if isinstance(o, dict) and str(o.get("apiVersion", "")).split("/", maxsplit=1)[0] == KCC_IAM_GROUP
    ]
    for obj in objects:
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if obj.get("kind") == "IAMServiceAccount":
            accounts[_kcc_id(obj)] = annotations.get(KCC_ABANDON[0]) == KCC_ABANDON[1]
        elif obj.get("kind") == "IAMWorkloadIdentityPool":
            pools[(obj.get("metadata") or {}).get("name")] = _kcc_id(obj)
    for obj in objects:
        if obj.get("kind") == "IAMWorkloadIdentityPoolProvider":
            spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
            ref = spec.get("workloadIdentityPoolRef") or {}
            pool = str(ref.get("external") or "").rstrip("/").rsplit("/", 1)[-1] or pools.get(ref.get("name"))
            providers.add("{}/{}".format(pool or ref.get("name"), _kcc_id(obj)))
    if hook == "wif-federate":
        providers.add(WIF_HOOK_PROVIDER)
    return accounts, providers


def gcp_iam_problems(listed_accounts, listed_providers, declared):
    """[(list, refuse, message)] for teardown.service-accounts / .workload-identity-providers against what the
    tree declares. refuse=True: deleting it would delete what krops does not own (a prerequisite, another
    pool's provider); False: the list misses something of the tree, which would be left behind."""
    accounts, providers = declared
    problems = []
    for name in listed_accounts:
        if name not in accounts:
            problems.append(
                (
                    "service-accounts",
                    True,
                    "service account {} is not an IAMServiceAccount of the tree (resourceID: {})".format(
                        name, ", ".join(sorted(accounts)) or "none"
                    ),
                )
            )
        elif accounts[name]:
            problems.append(
                (
                    "service-accounts",
                    True,
                    f"service account {name} is abandoned by Config Connector in the tree (a prerequisite, "
                    "docs/environments/gcp.md): teardown must not delete it; remove it from teardown service-accounts",
                )
            )
    for name in sorted(n for n, abandoned in accounts.items() if not abandoned and n not in listed_accounts):
        problems.append(
            (
                "service-accounts",
                False,
                f"service account {name} of the tree is not in teardown service-accounts: teardown would leave it behind",
            )
        )
    for name in listed_providers:
        if name not in providers:
            problems.append(
                (
                    "workload-identity-providers",
                    True,
                    "workload identity provider {} is neither an IAMWorkloadIdentityPoolProvider of the tree nor the "
                    "wif-federate hook's ({})".format(name, ", ".join(sorted(providers)) or "none"),
                )
            )
    for name in sorted(providers - set(listed_providers)):
        problems.append(
            (
                "workload-identity-providers",
                False,
                f"workload identity provider {name} is not in teardown workload-identity-providers: "
                "teardown would leave it behind",
            )
        )
    return problems
