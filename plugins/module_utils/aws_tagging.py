# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Resource Groups Tagging API for the AWS sweep: one walk per region gives every tagged resource's tags.

The walk is unfiltered (TagFilters of several keys are ANDed, so a filtered walk would cost one per
ownership tag) and made once per discovery. Rows whose service it covers (load balancers, target
groups) take their tags from it instead of one DescribeTags per batch; what it reports of a type
without a row is owned and undeletable: the ``unsupported`` row fails the run with its ARN.
"""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import aws
from ansible_collections.krops.platform.plugins.module_utils.aws_delete import sweep_row
from ansible_collections.krops.platform.plugins.module_utils.aws_rows import REGION, arn_type, resource

# "<service>:<resource type>" of the ARNs the Tagging API reports, mapped to the sweep's row that lists and
# deletes them. An owned ARN of any other type is a leftover the sweep cannot delete.
ARN_TYPES = {
    "ec2:vpc": "vpc",
    "ec2:subnet": "subnet",
    "ec2:security-group": "security-group",
    "ec2:internet-gateway": "internet-gateway",
    "ec2:route-table": "route-table",
    "ec2:natgateway": "nat-gateway",
    "ec2:elastic-ip": "elastic-ip",
    "ec2:network-interface": "network-interface",
    "ec2:volume": "ebs-volume",
    "ec2:snapshot": "ebs-snapshot",
    "ec2:launch-template": "launch-template",
    "ec2:instance": "ec2-instance",
    "elasticloadbalancing:loadbalancer": "load-balancer",
    "elasticloadbalancing:targetgroup": "elbv2-target-group",
    "elasticloadbalancing:listener": "elbv2-load-balancer",
    "elasticloadbalancing:listener-rule": "elbv2-load-balancer",
    "rds:db": "rds-instance",
    "rds:subgrp": "rds-subnet-group",
    "s3:": "s3-bucket",
    "cloudformation:stack": "stack",
    "eks:cluster": "eks-cluster",
    "eks:nodegroup": "eks-nodegroup",
    "eks:podidentityassociation": "eks-pod-identity-association",
    "logs:log-group": "eks-log-group",
}


def tag_map(d):
    """{ARN: tags} of every tagged resource of the region, or None when the endpoint has no Tagging API."""

    def walk():
        client = d.client("resourcegroupstaggingapi")
        try:
            items = aws.paginate(client, "get_resources", "ResourceTagMappingList", ResourcesPerPage=100)
        except aws.UnsupportedOperation as exc:
            d.warnings.append(
                f"{d.region}: the Resource Groups Tagging API is not available ({exc}): listing per service"
            )
            return None
        return {item["ResourceARN"]: item.get("Tags") or [] for item in items}

    # a failed walk is one error (named like the row that needs it most); the ELB rows then fall back
    return d.cached("tagging", walk, guard="unsupported", empty=None)


def unsupported(d, with_age):
    found = []
    for arn, tags in (tag_map(d) or {}).items():
        if arn_type(arn) in ARN_TYPES:
            continue
        claim = d.sweep.ownership.owner(tags)
        if claim is not None:
            found.append(
                resource(
                    d.region,
                    "unsupported",
                    arn,
                    claim[0],
                    None,
                    f"owned ({claim[1]}) but of a type krops cannot delete ({arn_type(arn)}): delete it by hand, then "
                    "run the teardown again",
                )
            )
    return found


def delete_unsupported(x, res):
    raise aws.AwsError("krops cannot delete {}: {}".format(res["id"], res["reason"]))


UNSUPPORTED = sweep_row("unsupported", REGION, unsupported, delete_unsupported)
