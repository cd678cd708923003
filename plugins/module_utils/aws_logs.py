# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""CloudWatch Logs row of the AWS sweep: the log groups of EKS control planes.

EKS sends control-plane logs to the log group ``/aws/eks/<cluster>/cluster`` (docs/upstream-facts.md,
EKS control-plane logs) and leaves it behind when the cluster is deleted. The group is krops' when its
name is exactly that of an EKS cluster bootstrap.toml names for the region, or when its tags prove
ownership (ownership.py); a group tagged for another environment is never ours. It goes after its
cluster (same chain, ``after`` it), so EKS writes no more streams to it.
"""

from __future__ import annotations

import datetime

from ansible_collections.krops.platform.plugins.module_utils import aws
from ansible_collections.krops.platform.plugins.module_utils.aws import ClientError
from ansible_collections.krops.platform.plugins.module_utils.aws_delete import sweep_row
from ansible_collections.krops.platform.plugins.module_utils.aws_rows import ABSENT, REGION, resource
from ansible_collections.krops.platform.plugins.module_utils.aws_tagging import tag_map

LOG_GROUP_TYPE = "eks-log-group"


def eks_log_group(eks_name):
    """The log group EKS writes the control-plane logs of cluster ``eks_name`` to."""
    return f"/aws/eks/{eks_name}/cluster"


def _arn_name(arn):
    """The log group name of a log-group ARN (arn:aws:logs:<region>:<account>:log-group:<name>[:*])."""
    rest = arn.split(":", 6)[6] if arn.count(":") >= 6 else ""
    return rest[:-2] if rest.endswith(":*") else rest


def _created(group):
    """The creation time of a log group: CloudWatch Logs states ``creationTime`` as "the number of milliseconds after
    Jan 1, 1970 00:00:00 UTC" (the LogGroup shape of DescribeLogGroups, AWS SDK reference), not as a timestamp."""
    millis = group.get("creationTime")
    return None if millis is None else datetime.datetime.fromtimestamp(millis / 1000.0, datetime.UTC)


def log_groups(d, with_age=False):
    def listing():
        client = d.client("logs")
        named = {eks_log_group(t.eks_name): t.cluster for t in d.targets if t.eks_name}
        tagged = {_arn_name(arn): tags for arn, tags in (tag_map(d) or {}).items() if ":log-group:" in arn}
        found = []
        for prefix in sorted(set(named) | set(tagged)):  # exact names: one short listing each
            for group in aws.paginate(client, "describe_log_groups", "logGroups", logGroupNamePrefix=prefix):
                name = group["logGroupName"]
                if name not in named and name not in tagged:
                    continue
                tags = tagged.get(name)
                if tags is None:
                    try:
                        tags = aws.call(client, "list_tags_log_group", logGroupName=name).get("tags") or {}
                    except ClientError as exc:
                        if aws.is_not_found(exc):
                            continue
                        raise
                claim = d.sweep.ownership.owner(tags)
                vetoed = d.sweep.ownership.vetoed(tags)
                if vetoed:
                    continue
                if claim is not None:
                    owner, reason = claim
                elif name in named:
                    owner, reason = named[name], "control-plane log group of an EKS cluster bootstrap.toml names"
                else:
                    continue
                found.append(resource(d.region, LOG_GROUP_TYPE, name, owner, _created(group), reason))
        return found

    return d.cached(("logs", with_age), listing, guard=LOG_GROUP_TYPE)


def delete_log_group(x, res):
    return None if aws.call_unless_gone(x.client("logs"), "delete_log_group", logGroupName=res["id"]) else ABSENT


LOG_GROUP_ROW = sweep_row(
    LOG_GROUP_TYPE, REGION, log_groups, delete_log_group, chain="eks", after="eks-cluster", arn="logs:log-group"
)
ROWS = (LOG_GROUP_ROW,)
