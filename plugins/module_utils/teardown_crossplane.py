# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Teardown of the Crossplane resource plane (docs/environments/crossplane.md, Teardown).

``delete_managed`` deletes the managed resources krops owns while the providers still run, in dependency order
(what uses a resource before the resource): each stage's objects are deleted and waited for before the next
stage starts, so the provider deletes the AWS resource behind each object and never finds a dependant still
there (a DB subnet group in use, a VPC with subnets).

Ownership (docs/ownership.md): an object is krops' only when its label ``krops.io/environment`` is exactly the
environment's name; the trees set it on every managed resource (kustomize ``labels``). An object of the same
kind and name without that label is never touched.

The tree leaves ``Delete`` out of the ``managementPolicies`` of the stateful resources (DB instance, bucket), so
that a change in Git never destroys data. The teardown has proven ownership, so it opts those objects into
deletion first: ``managementPolicies: ["*"]`` (and ``forceDestroy`` on a bucket, which the provider needs to
delete one that holds objects), then deletes them like the rest.
"""

from __future__ import annotations

import time

from ansible_collections.krops.platform.plugins.module_utils import kube
from ansible_collections.krops.platform.plugins.module_utils.teardown import _watch_gone, probe_or_abort, write

OWNER_LABEL = "krops.io/environment"

_S3, _RDS, _IAM, _EC2 = (f"{s}.aws.m.upbound.io/v1beta1" for s in ("s3", "rds", "iam", "ec2"))
# The kinds the aws-crossplane tree declares, in the order they are deleted: every stage waits until its objects
# are gone. A DB instance holds its subnet group and security group; attachments and the bucket's settings hold
# their role, user, policy and bucket; subnets and the security group hold the VPC.
STAGES = (
    (
        (_RDS, "Instance"),
        (_IAM, "RolePolicyAttachment"),
        (_IAM, "UserPolicyAttachment"),
        (_S3, "BucketOwnershipControls"),
        (_S3, "BucketPublicAccessBlock"),
        (_S3, "BucketServerSideEncryptionConfiguration"),
        (_S3, "BucketVersioning"),
        (_EC2, "SecurityGroupIngressRule"),
    ),
    ((_RDS, "SubnetGroup"), (_S3, "Bucket"), (_IAM, "Role"), (_IAM, "Policy"), (_IAM, "User")),
    ((_EC2, "SecurityGroup"), (_EC2, "Subnet")),
    ((_EC2, "VPC"),),
)
# Kinds whose deletion the teardown enables first, with what it sets.
OPT_IN = {"Bucket": {"forProvider": {"forceDestroy": True}}, "Instance": {"forProvider": {"skipFinalSnapshot": True}}}


def _label(obj):
    meta = obj["metadata"]
    return "{} {}/{}".format(obj["kind"], meta.get("namespace") or "", meta["name"])


def owned(obj, environment):
    return ((obj.get("metadata") or {}).get("labels") or {}).get(OWNER_LABEL) == environment


def _needs_opt_in(obj):
    policies = (obj.get("spec") or {}).get("managementPolicies") or ["*"]
    return "*" not in policies and "Delete" not in policies


def _list(client, namespace, environment, target):
    """[(stage, api_version, kind, [owned objects])]; every kind is listed before anything changes."""
    listed = []
    for stage, kinds in enumerate(STAGES, 1):
        for api_version, kind in kinds:
            objs = probe_or_abort(client, api_version, kind, namespace, f"the {kind} objects", target)
            mine = sorted((o for o in objs if owned(o, environment)), key=_label)
            listed.append((stage, api_version, kind, mine))
    return listed


def delete_managed(
    kubeconfig,
    context,
    namespace,
    environment,
    wait_timeout=1800,
    check_mode=False,
    connect_options=None,
    on_progress=None,
    clock=None,
):
    """Delete the managed resources of ``environment`` in ``namespace`` stage by stage (STAGES).

    Returns plan, opted_in, deleted, remaining, progress, target and changed; a stage that does not finish within
    what is left of ``wait_timeout`` raises TeardownError naming what is still there (the later stages did not
    run). Check mode sends every write as a server-side dry run and waits for nothing.
    """
    clock = clock or time.monotonic
    deadline = clock() + wait_timeout
    target = kube.describe_target(kubeconfig, context)
    client = kube.connect(kubeconfig, context, **(connect_options or {}))
    listed = _list(client, namespace, environment, target)
    opt_in = [(api, kind, o) for _s, api, kind, objs in listed for o in objs if _needs_opt_in(o)]
    result = {
        "plan": [f"allow deletion of {_label(o)} (managementPolicies [*])" for _a, _k, o in opt_in]
        + [f"delete {_label(o)} (stage {s}) and wait until it is gone" for s, _a, _k, objs in listed for o in objs],
        "opted_in": [_label(o) for _a, _k, o in opt_in],
        "deleted": [_label(o) for _s, _a, _k, objs in listed for o in objs],
        "remaining": [],
        "progress": [],
        "target": target,
        "changed": any(objs for _s, _a, _k, objs in listed),
    }
    for api_version, kind, obj in opt_in:
        body = {"spec": {"managementPolicies": ["*"], **OPT_IN.get(kind, {})}}
        name = obj["metadata"]["name"]
        write(
            lambda dry_run, api=(api_version, kind), name=name, body=body: kube.merge_patch(
                client, *api, name, namespace, body, dry_run=dry_run
            ),
            f"patch {_label(obj)}",
            target,
            result,
            check_mode,
        )
    for stage in range(1, len(STAGES) + 1):
        _delete_stage(client, namespace, [row for row in listed if row[0] == stage], target, result, check_mode)
        if check_mode:
            continue
        for _s, api_version, kind, objs in listed:
            if _s != stage or not objs:
                continue
            _watch_gone(
                client,
                (api_version, kind, namespace),
                {(namespace, o["metadata"]["name"]): _label(o) for o in objs},
                deadline - clock(),
                result,
                on_progress,
                lambda left, stage=stage: (
                    f"timed out waiting for the Crossplane managed resources of stage {stage} to be deleted on "
                    f"{target}; still present: {left}. The later stages did not run and Crossplane still runs; "
                    "check the provider's logs (a provider that cannot reach AWS keeps its finalizer) and run the "
                    "teardown again"
                ),
                f"lost the watch on {kind} objects on {target}",
            )
    return result


def _delete_stage(client, namespace, rows, target, result, check_mode):
    for _stage, api_version, kind, objs in rows:
        res = kube.resource(client, api_version, kind) if objs else None
        for obj in objs:
            write(
                lambda dry_run, res=res, name=obj["metadata"]["name"]: res.delete(
                    name=name, namespace=namespace, dry_run=dry_run
                ),
                f"delete {_label(obj)}",
                target,
                result,
                check_mode,
            )
