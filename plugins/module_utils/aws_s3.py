# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""S3 row of the AWS sweep: the buckets that bootstrap.toml's ``s3-bucket-pattern`` names exactly.

A bucket is emptied (every version and delete marker, 1000 keys a call) before it is deleted.
"""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import aws
from ansible_collections.krops.platform.plugins.module_utils.aws import ClientError
from ansible_collections.krops.platform.plugins.module_utils.aws_delete import sweep_row
from ansible_collections.krops.platform.plugins.module_utils.aws_rows import ABSENT, GLOBAL, resource


def buckets(d, with_age):
    wanted = {}
    for target in d.sweep.targets:
        name = d.sweep.bucket_pattern.format(account_id=d.sweep.account_id, cluster_name=target.cluster)
        wanted[name] = target
    if not wanted:
        return []
    listed = aws.call(d.sweep.conn.client("s3", d.sweep.home_region), "list_buckets").get("Buckets") or []
    return [
        resource(
            wanted[b["Name"]].region,
            "s3-bucket",
            b["Name"],
            wanted[b["Name"]].cluster,
            b.get("CreationDate"),
            "named by the s3-bucket-pattern in bootstrap.toml",
        )
        for b in listed
        if b["Name"] in wanted
    ]


def delete_bucket(x, res):
    client = x.client("s3", res["region"])
    try:
        pages = list(aws.pages(client, "list_object_versions", Bucket=res["id"]))
    except ClientError as exc:
        if aws.is_not_found(exc):
            return ABSENT
        raise
    for page in pages:
        objects = [
            {"Key": v["Key"], "VersionId": v["VersionId"]}
            for v in (page.get("Versions") or []) + (page.get("DeleteMarkers") or [])
        ]
        for start in range(0, len(objects), 1000):
            answer = aws.call(
                client,
                "delete_objects",
                Bucket=res["id"],
                Delete={"Objects": objects[start : start + 1000], "Quiet": True},
            )
            if answer.get("Errors"):
                first = answer["Errors"][0]
                raise aws.AwsError(
                    "%d objects could not be deleted, e.g. %s: %s"
                    % (len(answer["Errors"]), first.get("Key"), first.get("Message"))
                )
    aws.call(client, "delete_bucket", Bucket=res["id"])
    return None


BUCKET_ROW = sweep_row("s3-bucket", GLOBAL, buckets, delete_bucket, arn="s3:")
ROWS = (BUCKET_ROW,)
