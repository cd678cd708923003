# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""RDS rows of the AWS sweep: DB instances (no final snapshot, waited) and their subnet groups (one chain).

One DescribeDBInstances gives the instances with their tags (TagList) and subnet groups; a subnet group
goes with its swept instance unless another instance still uses it. A wait polls one
DescribeDBInstances per region; the final pass takes its last answer instead of listing again (aws_delete
Scan.listing).
"""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import aws
from ansible_collections.krops.platform.plugins.module_utils.aws import ClientError
from ansible_collections.krops.platform.plugins.module_utils.aws_delete import sweep_row
from ansible_collections.krops.platform.plugins.module_utils.aws_rows import REGION, resource


def _listing(d):
    def listing():
        named = {t.rds_instance: t.cluster for t in d.targets if t.rds_instance}
        found, kept_groups = [], set()
        listed = d.listing(
            "rds-instances", lambda: aws.paginate(d.client("rds"), "describe_db_instances", "DBInstances")
        )
        for inst in listed:
            ident = inst["DBInstanceIdentifier"]
            owner = named.get(ident)
            reason = "named by bootstrap.toml" if owner else ""
            if owner is None:
                owner = d.owner_of(inst.get("TagList") or [])
            group = (inst.get("DBSubnetGroup") or {}).get("DBSubnetGroupName")
            if owner is not None:
                found.append(
                    resource(
                        d.region,
                        "rds-instance",
                        ident,
                        owner,
                        inst.get("InstanceCreateTime"),
                        reason,
                        status=inst.get("DBInstanceStatus"),
                        group=group,
                    )
                )
            elif group:
                kept_groups.add(group)
        groups = []
        for inst in found:
            group = inst["meta"]["group"]
            if group and group != "default" and group not in kept_groups and group not in [g["id"] for g in groups]:
                groups.append(
                    resource(
                        d.region,
                        "rds-subnet-group",
                        group,
                        inst["cluster"],
                        None,
                        "subnet group of RDS instance {}".format(inst["id"]),
                    )
                )
        return found + groups

    return d.cached("rds", listing, guard="rds-instance")


def instances(d, with_age):
    return [r for r in _listing(d) if r["type"] == "rds-instance"]


def subnet_groups(d, with_age):
    return [r for r in _listing(d) if r["type"] == "rds-subnet-group"]


def delete_instance(x, res):
    if res["meta"].get("status") == "deleting":
        return
    try:
        aws.call(
            x.client("rds"),
            "delete_db_instance",
            DBInstanceIdentifier=res["id"],
            SkipFinalSnapshot=True,
            DeleteAutomatedBackups=True,
        )
    except ClientError as exc:
        if aws.error_code(exc) != "InvalidDBInstanceState":
            raise


def delete_subnet_group(x, res):
    x.delete_dependent(
        res, "rds", "delete_db_subnet_group", "DBSubnetGroupName", codes=("InvalidDBSubnetGroupStateFault",)
    )


def state_instance(x, pending):
    listed = aws.paginate(x.client("rds"), "describe_db_instances", "DBInstances")
    x.watch("rds-instances", listed)
    found = {i["DBInstanceIdentifier"]: i.get("DBInstanceStatus", "?") for i in listed}
    return {r["id"]: found.get(r["id"], "gone") for r in pending}


INSTANCE_ROW = sweep_row(
    "rds-instance", REGION, instances, delete_instance, state_instance, chain="rds", expected=600, arn="rds:db"
)
SUBNET_GROUP_ROW = sweep_row(
    "rds-subnet-group", REGION, subnet_groups, delete_subnet_group, chain="rds", arn="rds:subgrp"
)
ROWS = (INSTANCE_ROW, SUBNET_GROUP_ROW)  # in their deletion order (aws_sweep.SERVICES)
