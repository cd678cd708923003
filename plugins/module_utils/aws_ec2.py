# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""EC2 rows of the AWS sweep: instances, launch templates, EBS volumes and snapshots (the network's EC2 types are
aws_vpc's rows), and the ownership index both files read.

Ownership of every EC2 type comes from one DescribeTags walk per region, filtered on the ownership tag
keys (values of one filter are ORed): its answer names every owned resource by id. Only the types
whose deletion needs more than the id (a state, attachments, associations, rules) are described, by id
filter, and only when something of that type is owned, so a region with nothing owned costs one call.
The types that need only the id are described only to confirm they exist (a tag can outlive its
resource): plan, report and the final pass do; delete mode does not, since a delete of a gone id answers
NotFound ("absent") itself (aws_vpc lists detached interfaces once in delete mode, right before their
deletion). EC2 ids are never reused, so the final pass leaves out the ids this run saw go (Scan.gone):
only what is still owned, or new, is described again.
"""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import aws, ownership
from ansible_collections.krops.platform.plugins.module_utils.aws_delete import sweep_row
from ansible_collections.krops.platform.plugins.module_utils.aws_rows import REGION, resource

# EC2 id prefixes (before the first '-') of the types with a row: ids are stable across endpoints, the
# ResourceType strings of DescribeTags are not (moto answers 'vpc-elastic-ip' where AWS says 'elastic-ip').
INSTANCE, LAUNCH_TEMPLATE, VOLUME, SNAPSHOT = "i", "lt", "vol", "snap"
FILTER_LIMIT = 200  # values per EC2 filter


def owned_index(d):
    """{id prefix: {id: owning cluster}} of the region's owned EC2 resources (one DescribeTags walk)."""

    def walk():
        keys = sorted({k for k, _v, _c in d.sweep.ownership.keys()} | {ownership.KROPS_ENV_TAG})
        tags = {}
        for tag in describe(d, "describe_tags", "Tags", "key", keys):
            tags.setdefault(tag["ResourceId"], []).append({"Key": tag["Key"], "Value": tag.get("Value", "")})
        index = {}
        for rid, found in tags.items():
            if (d.region, rid) in d.gone:
                continue  # deleted by this run (or found gone): its tags may outlive it for a moment
            owner = d.owner_of(found)
            if owner is not None:
                index.setdefault(rid.split("-", 1)[0], {})[rid] = owner
        return index

    return d.cached("ec2-tags", walk, guard="ec2 (DescribeTags)", empty={})


def owned(d, prefix):
    return owned_index(d).get(prefix) or {}


def owned_items(d, prefix, operation, key, name, id_key):
    """(the owned {id: owning cluster} of ``prefix``, the items ``operation`` describes of them); nothing is
    described when nothing is owned."""
    ids = owned(d, prefix)
    if not ids:
        return ids, []
    return ids, [item for item in describe(d, operation, key, name, ids) if item[id_key] in ids]


def describe(d, operation, key, name, ids, filter_arg="Filters"):
    """Items of ``operation`` for ``ids`` (``d``: a scan or a ctx, aws_delete), by id filter (a filter, unlike an id list, never fails on one gone id);
    without a filter name (DescribeLaunchTemplates has no id filter) the whole listing."""
    ids = list(ids)
    if name is None:
        return aws.paginate(d.client("ec2"), operation, key)
    items = []
    for start in range(0, len(ids), FILTER_LIMIT):
        items += aws.paginate(
            d.client("ec2"),
            operation,
            key,
            **{filter_arg: [{"Name": name, "Values": ids[start : start + FILTER_LIMIT]}]},
        )
    return items


def id_only(rtype, prefix, operation, key, name, id_key, time_key="CreateTime"):
    """Rows that need only the id. Their owned ids are described once (by id filter) all the same: a tag can
    outlive its resource for a moment (and does in moto), and a deleted resource must not look left over."""

    def listing(d, with_age):
        ids = owned(d, prefix)
        if not ids:
            return []
        if not d.confirm:
            return [resource(d.region, rtype, rid, owner) for rid, owner in ids.items()]
        present = {i[id_key]: i.get(time_key) for i in describe(d, operation, key, name, ids)}
        return [resource(d.region, rtype, rid, owner, present[rid]) for rid, owner in ids.items() if rid in present]

    return listing


# --- instances (CAPA AWSMachine) ---------------------------------------------------------


def _instances(d):
    def listing():
        ids = owned(d, INSTANCE)
        if not ids:
            return []
        found = []
        for reservation in describe(d, "describe_instances", "Reservations", "instance-id", ids):
            for inst in reservation.get("Instances") or []:
                state = (inst.get("State") or {}).get("Name")
                if state == "terminated":
                    continue
                kept = [
                    m["Ebs"]["VolumeId"]
                    for m in inst.get("BlockDeviceMappings") or []
                    if m.get("Ebs") and not m["Ebs"].get("DeleteOnTermination")
                ]
                found.append(
                    resource(
                        d.region,
                        "ec2-instance",
                        inst["InstanceId"],
                        ids[inst["InstanceId"]],
                        inst.get("LaunchTime"),
                        state=state,
                        volumes=kept,
                    )
                )
        return found

    return d.cached("ec2-instances", listing, guard="ec2-instance")


def delete_instance(x, res):
    if res["meta"].get("state") not in ("shutting-down",):
        aws.call(x.client("ec2"), "terminate_instances", InstanceIds=[res["id"]])


def state_instance(x, pending):
    found = {}
    for reservation in describe(x, "describe_instances", "Reservations", "instance-id", [r["id"] for r in pending]):
        for inst in reservation.get("Instances") or []:
            found[inst["InstanceId"]] = (inst.get("State") or {}).get("Name", "?")
    return {r["id"]: "gone" if found.get(r["id"], "terminated") == "terminated" else found[r["id"]] for r in pending}


# --- volumes ---------------------------------------------------------------------------------


def volumes(d, with_age):
    ids = dict(owned(d, VOLUME))
    reasons = {}
    for inst in _instances(d):
        for vol in inst["meta"]["volumes"]:
            if vol not in ids:
                ids[vol] = inst["cluster"]
                reasons[vol] = "volume of owned instance {} (kept by DeleteOnTermination=false)".format(inst["id"])
    if not ids:
        return []
    present = {v["VolumeId"]: v.get("CreateTime") for v in describe(d, "describe_volumes", "Volumes", "volume-id", ids)}
    return [
        resource(d.region, "ebs-volume", rid, owner, present[rid], reasons.get(rid, ""))
        for rid, owner in ids.items()
        if rid in present
    ]


def delete_volume(x, res):
    # a volume detaches once its node is gone (instances, node groups and clusters are deleted before)
    x.delete_dependent(res, "ec2", "delete_volume", "VolumeId", codes=("VolumeInUse", "IncorrectState"))


def delete_snapshot(x, res):
    x.delete_dependent(res, "ec2", "delete_snapshot", "SnapshotId", codes=("InvalidSnapshot.InUse",))


def delete_launch_template(x, res):
    aws.call(x.client("ec2"), "delete_launch_template", LaunchTemplateId=res["id"])


# Seconds an instance takes from terminate to terminated is not documented by AWS as a figure; instances are
# polled from the start (no expected time).
INSTANCE_ROW = sweep_row(
    "ec2-instance",
    REGION,
    lambda d, a: _instances(d),
    delete_instance,
    state_instance,
    chain="instances",
    arn="ec2:instance",
)
LAUNCH_TEMPLATE_ROW = sweep_row(
    "launch-template",
    REGION,
    id_only(
        "launch-template", LAUNCH_TEMPLATE, "describe_launch_templates", "LaunchTemplates", None, "LaunchTemplateId"
    ),
    delete_launch_template,
    arn="ec2:launch-template",
)
VOLUME_ROW = sweep_row("ebs-volume", REGION, volumes, delete_volume, arn="ec2:volume")
SNAPSHOT_ROW = sweep_row(
    "ebs-snapshot",
    REGION,
    id_only("ebs-snapshot", SNAPSHOT, "describe_snapshots", "Snapshots", "snapshot-id", "SnapshotId", "StartTime"),
    delete_snapshot,
    arn="ec2:snapshot",
)
# in their deletion order (aws_sweep.SERVICES)
ROWS = (
    INSTANCE_ROW,
    LAUNCH_TEMPLATE_ROW,
    VOLUME_ROW,
    SNAPSHOT_ROW,
)
