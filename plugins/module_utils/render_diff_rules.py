# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""render_diff's danger rules: the kinds, fields and policies whose change destroys or orphans something.

Tables read by module_utils/render_diff.py, and the Crossplane rules (docs/render-diff.md, Crossplane):

- a Crossplane DB instance or bucket that deleting the object would destroy, as it appears or turns so:
  on the namespaced form (``*.aws.m.upbound.io``) ``spec.managementPolicies`` holding ``Delete`` or ``*``
  (the default when unset); on the cluster-scoped form (``*.aws.upbound.io``) ``spec.deletionPolicy: Delete``
  (the default) with such managementPolicies. provider-upjet-aws v2.6.0 package/crds: deletionPolicy only on
  the cluster-scoped form, managementPolicies on both, default ``["*"]``.
- any change of ``spec.managementPolicies`` (policy kind ``management-policies``): it decides whether Crossplane
  may create, update or delete the AWS resource.

Importable without Ansible.
"""

from __future__ import annotations

# Kinds whose removal or replacement destroys something that outlives the pull request.
# (group, kind) -> what it is. A group ending in "." matches every group with that suffix.
PRECIOUS = {
    ("cluster.x-k8s.io", "Cluster"): "CAPI cluster",
    ("cluster.x-k8s.io", "MachinePool"): "machine pool",
    ("controlplane.cluster.x-k8s.io", "AWSManagedControlPlane"): "managed control plane",
    ("infrastructure.cluster.x-k8s.io", "AzureManagedControlPlane"): "managed control plane",
    ("infrastructure.cluster.x-k8s.io", "GCPManagedControlPlane"): "managed control plane",
    ("infrastructure.cluster.x-k8s.io", "AWSManagedMachinePool"): "machine pool",
    ("infrastructure.cluster.x-k8s.io", "AzureManagedMachinePool"): "machine pool",
    ("infrastructure.cluster.x-k8s.io", "GCPManagedMachinePool"): "machine pool",
    ("s3.services.k8s.aws", "Bucket"): "S3 bucket",
    ("storage.cnrm.cloud.google.com", "StorageBucket"): "GCS bucket",
    ("rds.services.k8s.aws", "DBInstance"): "RDS instance",
    ("sql.cnrm.cloud.google.com", "SQLInstance"): "Cloud SQL instance",
    ("dbforpostgresql.azure.com", "FlexibleServer"): "Azure PostgreSQL server",
    ("tinkerbell.org", "Hardware"): "Tinkerbell hardware",
    ("", "Namespace"): "namespace",
}
# Fields whose change makes the operator create a new cloud resource (the old one is orphaned or deleted).
IDENTITY_FIELDS = {
    ("s3.services.k8s.aws", "Bucket"): ("spec.name",),
    ("rds.services.k8s.aws", "DBInstance"): ("spec.dbInstanceIdentifier",),
    ("controlplane.cluster.x-k8s.io", "AWSManagedControlPlane"): ("spec.eksClusterName",),
    ("storage.cnrm.cloud.google.com", "StorageBucket"): ("spec.resourceID",),
    ("sql.cnrm.cloud.google.com", "SQLInstance"): ("spec.resourceID",),
    ("dbforpostgresql.azure.com", "FlexibleServer"): ("spec.azureName",),
    ("tinkerbell.org", "Hardware"): ("spec.interfaces",),
}
# Annotations (and one field) that decide what deleting an object does to what it manages.
POLICIES = (
    ("deletion-policy", "metadata.annotations.services.k8s.aws/deletion-policy"),  # ACK: delete|retain
    ("deletion-policy", "metadata.annotations.cnrm.cloud.google.com/deletion-policy"),  # Config Connector: none|abandon
    ("deletion-policy", "metadata.annotations.kustomize.toolkit.fluxcd.io/prune"),  # Flux: disabled keeps it
    ("deletion-policy", "spec.deletionPolicy@kustomize.toolkit.fluxcd.io/Kustomization"),
    ("reconcile-policy", "metadata.annotations.serviceoperator.azure.com/reconcile-policy"),  # ASO
    ("reconcile-policy", "metadata.annotations.kustomize.toolkit.fluxcd.io/reconcile"),
    ("adoption-policy", "metadata.annotations.services.k8s.aws/adoption-policy"),  # ACK: adopt|adopt-or-create
)
# Cloud operators: group suffix -> cloud. Their objects are cloud resources.
CLOUD_GROUPS = (
    ("services.k8s.aws", "AWS (ACK)"),
    ("azure.com", "Azure (ASO)"),
    ("cnrm.cloud.google.com", "GCP (Config Connector)"),
    ("tinkerbell.org", "bare metal (Tinkerbell)"),
    ("infrastructure.cluster.x-k8s.io", "CAPI infrastructure"),
)
# Ownership marks (docs/ownership.md): where each cloud keeps tags/labels, and the key.
OWNERSHIP_KEYS = ("krops.io/environment", "krops-environment")
# Where the cloud tags are in the spec: ACK spec.tags [{key, value}] (S3: spec.tagging.tagSet),
# CAPA additionalTags {k: v}, ASO spec.tags {k: v}; Config Connector takes metadata.labels.
TAG_FIELDS = ("spec.tags", "spec.tagging.tagSet", "spec.additionalTags", "spec.resourceLabels", "spec.labels")

# Crossplane's provider-aws family (provider-upjet-aws v2.6.0): namespaced and cluster-scoped groups.
CROSSPLANE_SUFFIXES = (".aws.m.upbound.io", ".aws.upbound.io")
CROSSPLANE_STATEFUL = {"Bucket": ("s3", "S3 bucket"), "Instance": ("rds", "RDS instance")}
for _kind, (_service, _what) in CROSSPLANE_STATEFUL.items():
    for _suffix in CROSSPLANE_SUFFIXES:
        PRECIOUS[(_service + _suffix, _kind)] = _what
    # the bucket's name is its external name (ParameterAsIdentifier("bucket")); the instance's is its identifier
    IDENTITY_FIELDS[(_service + ".aws.m.upbound.io", _kind)] = (
        ("metadata.annotations.crossplane.io/external-name",) if _kind == "Bucket" else ("spec.forProvider.identifier",)
    )
POLICIES += (("management-policies", "spec.managementPolicies"),)
CLOUD_GROUPS += (("aws.m.upbound.io", "AWS (Crossplane)"), ("aws.upbound.io", "AWS (Crossplane)"))
TAG_FIELDS += ("spec.forProvider.tags",)


def crossplane_deletes_data(obj):
    """What deleting a stateful Crossplane managed resource destroys (its what), or None when it would orphan it."""
    group, kind = (obj.get("apiVersion") or "").rpartition("/")[0], obj.get("kind")
    if kind not in CROSSPLANE_STATEFUL or not group.endswith(CROSSPLANE_SUFFIXES):
        return None
    spec = obj.get("spec") or {}
    policies = spec.get("managementPolicies") or ["*"]
    if "*" not in policies and "Delete" not in policies:
        return None
    if group.endswith(".aws.upbound.io") and spec.get("deletionPolicy", "Delete") != "Delete":
        return None
    return CROSSPLANE_STATEFUL[kind][1]


def crossplane_dangers(name, before, after):
    """[(finding kind, message)] for a stateful Crossplane object ``name`` (its label) going from ``before`` (None:
    added) to ``after``: one when deleting it now destroys its data and did not before."""
    what = crossplane_deletes_data(after)
    if what is None or (before is not None and crossplane_deletes_data(before)):
        return []
    how = (
        "deletionPolicy Delete" if "deletionPolicy" in (after.get("spec") or {}) else "managementPolicies allow Delete"
    )
    return [
        (
            "deletes-data",
            f"{name}: deleting this object deletes the {what} and its data ({how}); leave Delete out of "
            "spec.managementPolicies (and set deletionPolicy: Orphan on the cluster-scoped form) so a change in Git "
            "cannot destroy it, as mgmt/aws-crossplane does",
        )
    ]
