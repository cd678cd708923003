# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""validate's ``tags`` rules: the cloud resources of the tree carry krops' ownership and run marks.

AWS resources (CAPA and ACK) carry the ownership tag and the run tags (docs/ownership.md); GCP labels
(Config Connector and CAPG) are valid GCP labels with the tree's defaults and with a run's values. Each
rule is registered in validate.REGISTRY; a rule is ``check(env)`` and reports through ``env.add``.
"""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import ownership
from ansible_collections.krops.platform.plugins.module_utils import paths
from ansible_collections.krops.platform.plugins.module_utils import render
from ansible_collections.krops.platform.plugins.module_utils import validate_common as common

RULE = "tags"
OWNERSHIP_TAG = "krops.io/environment"
RUN_TAGS = ("krops.io/run-id", "krops.io/revision", "krops.io/expires-at", "krops.io/run-kind")
# Cloud resources that take AWS tags: (group, kind) -> where the tags are and their shape. ACK kinds
# not listed use spec.tags as a [{key, value}] list (the ACK convention).
TAGGED_KINDS = {
    ("controlplane.cluster.x-k8s.io", "AWSManagedControlPlane"): (("additionalTags",), "map"),
    ("infrastructure.cluster.x-k8s.io", "AWSManagedMachinePool"): (("additionalTags",), "map"),
    ("infrastructure.cluster.x-k8s.io", "AWSMachinePool"): (("additionalTags",), "map"),
    ("infrastructure.cluster.x-k8s.io", "AWSCluster"): (("additionalTags",), "map"),
    ("s3.services.k8s.aws", "Bucket"): (("tagging", "tagSet"), "list"),
}
_ACK_UNTAGGED = {"AdoptedResource", "FieldExport", "IAMRoleSelector"}
# Objects whose labels become GCP labels: Config Connector copies metadata.labels without the "/"-prefixed
# keys (pkg/label/label.go at v1.155.1); CAPG's additionalLabels reach node pools and load balancers.
GCP_LABELLED = {
    ("infrastructure.cluster.x-k8s.io", "GCPManagedCluster"): ("spec", "additionalLabels"),
    ("infrastructure.cluster.x-k8s.io", "GCPManagedMachinePool"): ("spec", "additionalLabels"),
    ("infrastructure.cluster.x-k8s.io", "GCPCluster"): ("spec", "additionalLabels"),
    ("infrastructure.cluster.x-k8s.io", "GCPMachineTemplate"): ("spec", "template", "spec", "additionalLabels"),
}


# Crossplane's provider-aws family (mgmt/aws-crossplane): spec.forProvider.tags, a map; these kinds take no tags
# (their forProvider has no tags field in provider-upjet-aws v2.6.0 package/crds).
CROSSPLANE_GROUPS = (".aws.m.upbound.io", ".aws.upbound.io")
_CROSSPLANE_UNTAGGED = {
    "RolePolicyAttachment",
    "UserPolicyAttachment",
    "BucketOwnershipControls",
    "BucketPublicAccessBlock",
    "BucketServerSideEncryptionConfiguration",
    "BucketVersioning",
}


def _where(item):
    """(path under spec, shape) of a taggable cloud resource's tags, or None when the kind takes no tags."""
    where = TAGGED_KINDS.get((item.group, item.kind))
    if where is not None:
        return where
    if item.group.endswith(CROSSPLANE_GROUPS):
        return None if item.kind in _CROSSPLANE_UNTAGGED else (("forProvider", "tags"), "map")
    if not item.group.endswith(".services.k8s.aws") or item.kind in _ACK_UNTAGGED:
        return None
    return (("tags",), "list")


def tags_of(item):
    """{key: value} of a taggable cloud resource, or None when the kind takes no tags."""
    where = _where(item)
    if where is None:
        return None
    value = paths.dig(item.spec, *where[0])
    if where[1] == "map":
        return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}
    return (
        {str(t.get("key")): t.get("value") for t in value or [] if isinstance(t, dict)}
        if isinstance(value, list)
        else {}
    )


def _tagged(env):
    """(item, tags field, tags) of every taggable cloud resource the tree renders."""
    for item in env.items:
        tags = None if item.fallback else tags_of(item)
        if tags is not None:
            yield item, "spec." + ".".join(_where(item)[0]), tags


def check_ownership_tag(env):
    """Every AWS resource of the tree carries krops.io/environment=<environment>.

    Enforces docs/ownership.md: teardown finds, and deletes, only what carries this tag. CAPA copies
    additionalTags to what it creates; ACK sets spec.tags on its resource (spec.tagging.tagSet for S3).
    """
    for item, field, tags in _tagged(env):
        if tags.get(OWNERSHIP_TAG) != env.name:
            common.flag(
                env,
                item,
                RULE,
                f"{field} lacks the ownership tag {OWNERSHIP_TAG}={env.name} (teardown finds what it owns by this tag)"
                if OWNERSHIP_TAG not in tags
                else f"{field}: {OWNERSHIP_TAG} is {tags.get(OWNERSHIP_TAG)!r}, expected {env.name!r}",
            )


def check_run_tags(env):
    """Every AWS resource of the tree carries the four run tags (run-id, revision, expires-at, run-kind).

    Enforces docs/ownership.md: the sweep tells one run's resources, and expired ones, by these tags; the
    values come from the krops-run ConfigMap through postBuild substituteFrom.
    """
    for item, field, tags in _tagged(env):
        missing = [t for t in RUN_TAGS if not tags.get(t)]
        if missing:
            common.flag(
                env,
                item,
                RULE,
                "{} lacks the run tags {}: add them from the krops-run ConfigMap "
                '(postBuild substituteFrom, e.g. "${{KROPS_RUN_ID:=unset}}")'.format(field, ", ".join(missing)),
            )


def gcp_labels(group, kind, obj):
    """(field, {key: value}) of the labels an object gives its GCP resource, or None."""
    if group.endswith(".cnrm.cloud.google.com"):
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return "metadata.labels", {str(k): v for k, v in labels.items() if "/" not in str(k)}
    path = GCP_LABELLED.get((group, kind))
    if path is None:
        return None
    value = paths.dig(obj, *path)
    return ".".join(path), {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}


def _labelled(env):
    """(item, field, labels with the tree's defaults, labels during a run) of every GCP-labelled object."""
    for item in env.items:
        found = None if item.fallback else gcp_labels(item.group, item.kind, item.obj)
        if found is None:
            continue
        at_run = {}
        if item.unsubstituted:
            raw, variables = item.unsubstituted
            try:
                during = render.substitute(raw, dict(variables, **common.SAMPLE_RUN_TAGS))
                at_run = gcp_labels(item.group, item.kind, during)[1]
            except common.YAML_ERRORS:
                at_run = {}
        yield item, found[0], found[1], at_run


def check_gcp_label_keys(env):
    """Every GCP label key is valid: a lower-case letter, then at most 62 lower-case letters, digits, _ and -.

    Upstream fact: GCP's label key syntax (ownership.GCP_LABEL_KEY); Config Connector copies
    metadata.labels without the "/"-prefixed keys (pkg/label/label.go at v1.155.1).
    """
    for item, field, labels, at_run in _labelled(env):
        for key in sorted(set(labels) | set(at_run)):
            if not ownership.GCP_LABEL_KEY.match(key):
                common.flag(
                    env,
                    item,
                    RULE,
                    f"{field}: {key!r} is not a valid GCP label key (a lower-case letter, then at most 62 of "
                    "lower-case letters, digits, _ and -)",
                )


def check_gcp_label_values(env):
    """Every GCP label value is valid (at most 63 lower-case letters, digits, _ and -), also during a run.

    Upstream fact: GCP's label value syntax (ownership.GCP_LABEL_VALUE). The values are checked as the
    tree sets them and with the krops-run ConfigMap's values substituted (SAMPLE_RUN_TAGS), the first bad
    one of a key reported; keys that are not valid are left to check_gcp_label_keys.
    """
    for item, field, labels, at_run in _labelled(env):
        for key in sorted(set(labels) | set(at_run)):
            if not ownership.GCP_LABEL_KEY.match(key):
                continue
            for value, when in ((labels.get(key), ""), (at_run.get(key), " during a run (krops-run ConfigMap)")):
                if value is None or ownership.GCP_LABEL_VALUE.match(str(value)):
                    continue
                if hasattr(value, "strftime"):  # YAML read an unquoted RFC 3339 time as a timestamp
                    value = value.strftime("%Y-%m-%dT%H:%M:%SZ")
                common.flag(
                    env,
                    item,
                    RULE,
                    f"{field}.{key}: {str(value)!r}{when} is not a valid GCP label value (at most 63 lower-case "
                    "letters, digits, _ and -); take the run tags' label forms (${KROPS_EXPIRES_AT_LABEL} and the "
                    "other KROPS_*_LABEL variables of the krops-run ConfigMap)",
                )
                break
