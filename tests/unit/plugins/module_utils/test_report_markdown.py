# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The Markdown of the AWS orphan report, byte for byte: its table is cloud_report.orphan_table, which the Azure and
GCP reports share, so a change there must not reach the AWS report's readers (the expected text is written out
here, not produced by the code under test)."""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import aws_report

DATA = {
    "environment": "aws",
    "account_id": "123456789012",
    "regions": ["eu-west-1"],
    "generated_at": "2026-12-07T00:00:00+00:00",
    "min_age_hours": 6.0,
    "errors": [],
    "candidates": [],
    "resources": [
        {
            "region": "eu-west-1",
            "cluster": "krops-mgmt",
            "type": "ec2:vpc",
            "id": "vpc-1",
            "age_hours": 7.5,
            "age_from_cluster": False,
            "reason": "tag a|b",
        },
        {
            "region": "global",
            "cluster": None,
            "type": "iam:role",
            "id": "r",
            "age_hours": None,
            "age_from_cluster": True,
            "reason": None,
        },
    ],
}

EXPECTED = """# krops AWS orphan report

- Environment: `aws`
- Account: `123456789012`
- Regions: `eu-west-1`
- Generated: 2026-12-07T00:00:00+00:00
- Threshold: owned resources older than 6 hours (no creation time: the cluster's oldest resource)

Found 2 orphaned resources.

| Region | Cluster | Type | ID | Age (hours) | Note |
|---|---|---|---|---|---|
| eu-west-1 | krops-mgmt | ec2:vpc | `vpc-1` | 7.5 | tag a/b |
| global | - | iam:role | `r` | unknown (cluster) |  |
"""


def test_the_aws_report_table_is_unchanged_by_the_shared_table():
    assert aws_report.render_markdown(DATA) == EXPECTED


def test_an_empty_aws_report_says_so():
    assert aws_report.render_markdown(dict(DATA, resources=[])).endswith("\nNo orphaned resources found.\n")
