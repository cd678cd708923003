# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Teardown of the Crossplane resource plane (docs/environments/crossplane.md, Teardown).

``delete_managed`` deletes the managed resources krops owns while the providers still run, in dependency order
(what uses a resource before the resource): each stage's objects are deleted and waited for before the next
stage starts, so the provider deletes the AWS resource behind each object and never finds a dependant still
there (a DB subnet group in use, a VPC with subnets). The stages are rows of the step engine (steps.py, with the
Kubernetes pieces of kube_rows.py): the ``opt-in`` row, then a ``steps.WatchedRow`` per kind, each after every row
of the stage before it; once the last stage is gone every kind is listed again, and what is still there fails.

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

from ansible_collections.krops.platform.plugins.module_utils import kube_rows, steps
from ansible_collections.krops.platform.plugins.module_utils.teardown import probe_or_abort

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


class CrossplaneScan:
    """One discovery: every kind of STAGES listed once, before anything changes ({kind: owned objects})."""

    def __init__(self, ctx):
        self.ctx, self.owned = ctx, {}
        namespace, environment = ctx.opts["namespace"], ctx.opts["environment"]
        for kinds in STAGES:
            for api_version, kind in kinds:
                objs = probe_or_abort(ctx.client, api_version, kind, namespace, f"the {kind} objects", ctx.target)
                self.owned[kind] = sorted((o for o in objs if owned(o, environment)), key=_label)


def _opt_ins(scan):
    return [
        kube_rows.row_item("opt-in", o, api_version, kind)
        for kinds in STAGES
        for api_version, kind in kinds
        for o in scan.owned[kind]
        if _needs_opt_in(o)
    ]


def _owned(kind, api_version):
    return lambda scan: [kube_rows.row_item(kind, o, api_version, kind) for o in scan.owned[kind]]


def _rows():
    """The opt-in row, then a WatchedRow per kind, each after every row of the stage before it (and the opt-in)."""
    rows = [
        steps.Row(
            "opt-in",
            _opt_ins,
            kube_rows.patch_act(lambda item: {"spec": {"managementPolicies": ["*"], **OPT_IN.get(item["type"], {})}}),
            plan="allow deletion of {shown} (managementPolicies [*])",
        )
    ]
    before = ("opt-in",)
    for stage, kinds in enumerate(STAGES, 1):
        for api_version, kind in kinds:
            rows.append(
                steps.WatchedRow(
                    kind,
                    _owned(kind, api_version),
                    kube_rows.delete_act,
                    kube_rows.watch_gone(False, "{kind} objects"),
                    plan=f"delete {{shown}} (stage {stage}) and wait until it is gone",
                    after=before,
                    group=f"stage {stage}",
                )
            )
        before = tuple(kind for _api, kind in kinds)
    return tuple(rows)


ROWS = _rows()


def _result(run, result):
    shown = kube_rows.module_keys(result)
    shown.update(
        opted_in=[i["shown"] for i in run.plan.get("opt-in", ())],
        deleted=[i["shown"] for name in run.plan if name != "opt-in" for i in run.plan[name]],
        remaining=[],
        progress=run.ctx.progress,
    )
    return shown


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
    """Delete the managed resources of ``environment`` in ``namespace`` stage by stage (STAGES, ROWS).

    Returns plan, opted_in, deleted, remaining, progress, target and changed; a stage that does not finish within
    what is left of ``wait_timeout`` raises TeardownError naming what is still there (the later stages did not
    run). Check mode sends every write as a server-side dry run and waits for nothing.
    """
    clock = clock or time.monotonic
    deadline = clock() + wait_timeout
    ctx = kube_rows.Kube(
        kubeconfig,
        context,
        connect_options,
        on_progress,
        deadline,
        check_mode,
        namespace=namespace,
        environment=environment,
    )
    run = steps.Run(
        ROWS,
        ctx,
        lambda: CrossplaneScan(ctx),
        facts=lambda scan: {"target": ctx.target},
        label=kube_rows.label,
        wait=not check_mode,  # a dry run leaves nothing to wait for
        timeout=wait_timeout,
        clock=clock,
    )
    return kube_rows.execute(
        run,
        _result,
        lambda left: (
            f"timed out waiting for the Crossplane managed resources of {run.result.get('stopped_at')} to be deleted "
            f"on {ctx.target}; still present: {left}. The later stages did not run and Crossplane still runs; "
            "check the provider's logs (a provider that cannot reach AWS keeps its finalizer) and run the "
            "teardown again"
        ),
    )
