# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The AWS sweep's type table (aws_sweep.REGION_TYPES, GLOBAL_TYPES), pinned to what it was when it was written out
by hand: the deletion order, the chains, the scopes, the waited rows, the ARN types handled, ``unsupported`` last;
and how the table is made of the services' rows (aws_sweep.table)."""

from __future__ import annotations

import types

import pytest

from ansible_collections.krops.platform.plugins.module_utils import aws_delete, aws_rows, aws_sweep

REGION_ORDER = (
    "eks-nodegroup",
    "eks-pod-identity-association",
    "eks-cluster",
    "eks-log-group",
    "ec2-instance",
    "launch-template",
    "ebs-volume",
    "ebs-snapshot",
    "rds-instance",
    "rds-subnet-group",
    "elbv2-load-balancer",
    "elb-load-balancer",
    "elbv2-target-group",
    "nat-gateway",
    "elastic-ip",
    "network-interface",
    "subnet",
    "internet-gateway",
    "route-table",
    "security-group",
    "vpc",
    "unsupported",
)
GLOBAL_ORDER = ("s3-bucket", "iam-role", "iam-oidc-provider", "iam-user", "iam-policy", "cloudformation-stack")
CHAINS = {
    "eks": ["eks-nodegroup", "eks-pod-identity-association", "eks-cluster", "eks-log-group"],
    "instances": ["ec2-instance"],
    "rds": ["rds-instance", "rds-subnet-group"],
    "lb": ["elbv2-load-balancer", "elb-load-balancer", "elbv2-target-group"],
    "nat": ["nat-gateway", "elastic-ip"],
}
WAITED = ["eks-nodegroup", "eks-cluster", "ec2-instance", "rds-instance", "nat-gateway", "cloudformation-stack"]
HANDLED_ARNS = {
    "eks:nodegroup",
    "eks:podidentityassociation",
    "eks:cluster",
    "logs:log-group",
    "ec2:instance",
    "ec2:launch-template",
    "ec2:volume",
    "ec2:snapshot",
    "ec2:natgateway",
    "ec2:elastic-ip",
    "ec2:network-interface",
    "ec2:subnet",
    "ec2:internet-gateway",
    "ec2:route-table",
    "ec2:security-group",
    "ec2:vpc",
    "rds:db",
    "rds:subgrp",
    "elasticloadbalancing:loadbalancer",
    "elasticloadbalancing:listener",
    "elasticloadbalancing:listener-rule",
    "elasticloadbalancing:targetgroup",
    "s3:",
    "cloudformation:stack",
}


def test_the_table_is_the_deletion_order():
    assert aws_sweep.REGION_ORDER == REGION_ORDER
    assert aws_sweep.GLOBAL_ORDER == GLOBAL_ORDER
    assert tuple(row.name for row in aws_sweep.REGION_TYPES) == REGION_ORDER
    assert tuple(row.name for row in aws_sweep.GLOBAL_TYPES) == GLOBAL_ORDER
    assert {row.scope for row in aws_sweep.REGION_TYPES} == {aws_rows.REGION}
    assert {row.scope for row in aws_sweep.GLOBAL_TYPES} == {aws_rows.GLOBAL}


def test_the_chains_and_the_rows_after_them():
    chains = {}
    for row in aws_sweep.REGION_TYPES + aws_sweep.GLOBAL_TYPES:
        if row.chain:
            chains.setdefault(row.chain, []).append(row.name)
    assert chains == CHAINS
    # the rows without a chain (they run after every chain), in table order, `unsupported` last
    assert [row.name for row in aws_sweep.REGION_TYPES if not row.chain] == [
        "launch-template",
        "ebs-volume",
        "ebs-snapshot",
        "network-interface",
        "subnet",
        "internet-gateway",
        "route-table",
        "security-group",
        "vpc",
        "unsupported",
    ]
    assert not [row.name for row in aws_sweep.GLOBAL_TYPES if row.chain]


def test_the_waited_rows_and_the_arn_types_handled():
    assert [row.name for row in aws_sweep.REGION_TYPES + aws_sweep.GLOBAL_TYPES if row.followed] == WAITED
    assert aws_sweep.HANDLED_ARNS == HANDLED_ARNS


def test_the_table_is_the_services_rows_in_the_registrys_order():
    for scope, table in ((aws_rows.REGION, aws_sweep.REGION_TYPES), (aws_rows.GLOBAL, aws_sweep.GLOBAL_TYPES)):
        assert sorted(row.name for row in table) == sorted(
            row.name for service in aws_sweep.SERVICES for row in service.ROWS if row.scope == scope
        )
        for service in aws_sweep.SERVICES:  # each service's rows keep their order
            mine = [row.name for row in service.ROWS if row.scope == scope]
            assert [row.name for row in table if row.name in mine] == mine


def _service(*rows):
    return types.SimpleNamespace(ROWS=rows)


def _row(name, **options):
    return aws_delete.sweep_row(name, aws_rows.REGION, lambda d, a: [], lambda x, r: None, **options)


def test_a_row_named_in_after_moves_up_the_rest_keep_the_registrys_order():
    first = _service(_row("a"), _row("b", after=("d", "c")), _row("e"))
    second = _service(_row("c"), _row("d"), _row("f"))
    assert [row.name for row in aws_sweep.table(aws_rows.REGION, (first, second))] == ["a", "d", "c", "b", "e", "f"]
    assert aws_sweep.table(aws_rows.GLOBAL, (first, second)) == ()


def test_a_cycle_or_an_unknown_name_fails_naming_the_rows():
    cycle = _service(_row("a", after="b"), _row("b", after="a"))
    with pytest.raises(ValueError, match="the AWS sweep's region rows: rows a -> b -> a depend on each other"):
        aws_sweep.table(aws_rows.REGION, (cycle,))
    unknown = _service(_row("a", after="iam-role"))
    with pytest.raises(ValueError, match="the AWS sweep's region rows: row a runs after 'iam-role', which is no row"):
        aws_sweep.table(aws_rows.REGION, (unknown,))
