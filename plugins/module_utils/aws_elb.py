# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Elastic Load Balancing rows of the AWS sweep: ELBv2 and classic load balancers, target groups (one chain).

Their tags come from the region's Resource Groups Tagging API walk (aws_tagging.tag_map), not from one
DescribeTags per 20 resources; the service's own listing is read only when something is owned, to
confirm it still exists (the Tagging API may still report a resource deleted moments ago) and for its
name and creation time. Delete mode skips that listing: it needs only the ARN, and deleting a load
balancer that is already gone succeeds (or answers NotFound: "absent"). Without a Tagging API the rows
fall back to DescribeTags.
"""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import aws, aws_tagging
from ansible_collections.krops.platform.plugins.module_utils.aws_delete import sweep_row
from ansible_collections.krops.platform.plugins.module_utils.aws_rows import REGION, arn_type, resource


def _classic_arn(arn):
    """arn:...:loadbalancer/<name> is a classic load balancer; ELBv2 ARNs are loadbalancer/<app|net|gwy>/<name>/<id>."""
    return arn.split(":", 5)[5].count("/") == 1


def _owned(d, kind, classic=None):
    """{ARN: owner} of the owned ELB resources of ``kind`` ('loadbalancer' or 'targetgroup'), or None without Tagging API."""
    tags = aws_tagging.tag_map(d)
    if tags is None:
        return None
    found = {}
    for arn, item_tags in tags.items():
        if arn_type(arn) != f"elasticloadbalancing:{kind}" or (classic is not None and _classic_arn(arn) != classic):
            continue
        owner = d.owner_of(item_tags)
        if owner is not None:
            found[arn] = owner
    return found


def _described_owned(d, client, arns, batch_key):
    owned = {}
    for start in range(0, len(arns), 20):
        described = aws.call(client, "describe_tags", **{batch_key: arns[start : start + 20]})
        for desc in described.get("TagDescriptions") or []:
            owner = d.owner_of(desc.get("Tags") or [])
            if owner is not None:
                owned[desc.get("ResourceArn") or desc.get("LoadBalancerName")] = owner
    return owned


def _from_tags(d, rtype, kind, classic=None, name=lambda arn: arn):
    """(listing, owned) from the Tagging API walk: the listing when the walk settles it (nothing owned: none;
    delete mode: the owned ARNs as they are), else None and the owned ARNs to confirm against the service's own
    listing (None without a Tagging API)."""
    owned = _owned(d, kind, classic)
    if owned == {}:
        return [], owned
    if owned is None or d.confirm:
        return None, owned
    return [resource(d.region, rtype, name(arn), owner) for arn, owner in owned.items()], owned


def load_balancers(d, with_age):
    found, owned = _from_tags(d, "elbv2-load-balancer", "loadbalancer", classic=False)
    if found is not None:
        return found
    client = d.client("elbv2")
    lbs = {lb["LoadBalancerArn"]: lb for lb in aws.paginate(client, "describe_load_balancers", "LoadBalancers")}
    if owned is None:
        owned = _described_owned(d, client, list(lbs), "ResourceArns")
    return [
        resource(
            d.region,
            "elbv2-load-balancer",
            arn,
            owner,
            lbs[arn].get("CreatedTime"),
            name=lbs[arn].get("LoadBalancerName"),
        )
        for arn, owner in owned.items()
        if arn in lbs
    ]


def classic_load_balancers(d, with_age):
    found, owned = _from_tags(d, "elb-load-balancer", "loadbalancer", True, lambda arn: arn.rsplit("/", 1)[1])
    if found is not None:
        return found
    client = d.client("elb")
    lbs = {
        lb["LoadBalancerName"]: lb for lb in aws.paginate(client, "describe_load_balancers", "LoadBalancerDescriptions")
    }
    if owned is None:
        by_name = _described_owned(d, client, list(lbs), "LoadBalancerNames")
    else:
        by_name = {arn.rsplit("/", 1)[1]: owner for arn, owner in owned.items()}
    return [
        resource(d.region, "elb-load-balancer", name, owner, lbs[name].get("CreatedTime"))
        for name, owner in by_name.items()
        if name in lbs
    ]


def target_groups(d, with_age):
    found, owned = _from_tags(d, "elbv2-target-group", "targetgroup")
    if found is not None:
        return found
    client = d.client("elbv2")
    groups = [g["TargetGroupArn"] for g in aws.paginate(client, "describe_target_groups", "TargetGroups")]
    if owned is None:
        owned = _described_owned(d, client, groups, "ResourceArns")
    return [resource(d.region, "elbv2-target-group", arn, owner) for arn, owner in owned.items() if arn in groups]


def delete_load_balancer(x, res):
    aws.call(x.client("elbv2"), "delete_load_balancer", LoadBalancerArn=res["id"])


def delete_classic(x, res):
    aws.call(x.client("elb"), "delete_load_balancer", LoadBalancerName=res["id"])


def delete_target_group(x, res):
    x.delete_dependent(res, "elbv2", "delete_target_group", "TargetGroupArn", codes=("ResourceInUse",))


ELBV2_ROW = sweep_row(
    "elbv2-load-balancer",
    REGION,
    load_balancers,
    delete_load_balancer,
    chain="lb",
    arn=("elasticloadbalancing:loadbalancer", "elasticloadbalancing:listener", "elasticloadbalancing:listener-rule"),
)
CLASSIC_ROW = sweep_row(
    "elb-load-balancer",
    REGION,
    classic_load_balancers,
    delete_classic,
    chain="lb",
    arn="elasticloadbalancing:loadbalancer",
)
TARGET_GROUP_ROW = sweep_row(
    "elbv2-target-group", REGION, target_groups, delete_target_group, chain="lb", arn="elasticloadbalancing:targetgroup"
)
ROWS = (ELBV2_ROW, CLASSIC_ROW, TARGET_GROUP_ROW)  # in their deletion order (aws_sweep.SERVICES)
