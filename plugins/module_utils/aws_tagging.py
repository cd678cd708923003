# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Resource Groups Tagging API for the AWS sweep: one walk per region gives every tagged resource's tags.

The walk is unfiltered (TagFilters of several keys are ANDed, so a filtered walk would cost one per
ownership tag) and made once per discovery. Rows whose service it covers (load balancers, target
groups) take their tags from it instead of one DescribeTags per batch; what it reports of a type no
row handles (a row's ``arn``, aws_delete.sweep_row) is owned and undeletable: the ``unsupported`` row fails
the run with its ARN.
"""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import aws
from ansible_collections.krops.platform.plugins.module_utils.aws_delete import sweep_row
from ansible_collections.krops.platform.plugins.module_utils.aws_rows import REGION, arn_type, resource


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
        if arn_type(arn) in d.sweep.handled_arns:  # a row handles it (sweep_row's arn)
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
ROWS = (UNSUPPORTED,)
