# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""What the AWS sweep's per-service rows share: the resource entry, its identity, the ARN type, the result entry.

Each per-service file (aws_ec2, aws_vpc, aws_eks, aws_elb, aws_rds, aws_iam, aws_s3, aws_cloudformation, aws_logs,
aws_tagging; the layout of amazon.aws's module_utils) defines its rows (aws_delete.sweep_row, one
steps.Row each); aws_sweep.py lists them in one table whose order is the deletion order.

Importable without Ansible.
"""

from __future__ import annotations

GLOBAL = "global"
REGION = "region"
ABSENT = "absent"  # what a delete handler answers when there was nothing to delete


def resource(region, rtype, rid, cluster, created=None, reason="", **meta):
    """A resource the sweep found. ``created`` is its creation time as AWS states it (boto's datetime), kept as RFC 3339
    text in ``_created``: the orphan report's age (cloud_report.orphans), and JSON, as the steps' resume state must be."""
    return {
        "region": region,
        "type": rtype,
        "id": rid,
        "cluster": cluster,
        "_created": created.isoformat() if hasattr(created, "isoformat") else None,
        "reason": reason,
        "meta": meta,
    }


def key(res):
    """A resource's identity across the steps of one sweep."""
    return "{}|{}|{}".format(res["region"], res["type"], res["id"])


def arn_type(arn):
    """'<service>:<resource type>' of an ARN, e.g. 'ec2:volume' for arn:aws:ec2:eu-north-1:1:volume/vol-1."""
    parts = arn.split(":", 5)
    if len(parts) < 6:
        return ""
    rest = parts[5]
    # the resource type ends at the first '/' or ':' (log-group:/aws/eks/x/cluster, vpc/vpc-1, db:name)
    cut = min((i for i in (rest.find("/"), rest.find(":")) if i >= 0), default=-1)
    kind = rest[:cut] if cut >= 0 else ""
    return f"{parts[2]}:{kind}"


def unique(items):
    seen = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def public(resource, outcome, reason=None):
    """The result entry users see for a resource."""
    return {
        "region": resource["region"],
        "type": resource["type"],
        "id": resource["id"],
        "cluster": resource["cluster"],
        "outcome": outcome,
        "reason": resource.get("reason", "") if reason is None else reason,
    }
