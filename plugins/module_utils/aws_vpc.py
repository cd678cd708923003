# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The network's rows of the AWS sweep (EC2 API, the Amazon VPC service): NAT gateways, elastic IPs, network
interfaces, subnets, internet gateways, route tables, security groups, VPCs. They come after the RDS and load
balancer rows in the table (aws_sweep.SERVICES): those hold interfaces in the subnets. Ownership comes from the
region's one DescribeTags walk (aws_ec2.owned_index), and what aws_ec2's docstring says of describing by id holds
here too.
"""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import aws
from ansible_collections.krops.platform.plugins.module_utils.aws import ClientError
from ansible_collections.krops.platform.plugins.module_utils.aws_delete import sweep_row
from ansible_collections.krops.platform.plugins.module_utils.aws_ec2 import describe, id_only, owned, owned_items
from ansible_collections.krops.platform.plugins.module_utils.aws_rows import ABSENT, REGION, resource

# EC2 id prefixes of the network's types (aws_ec2: ids are stable across endpoints, DescribeTags' types are not)
NAT, EIP, ENI, SUBNET, IGW, RTB, SG, VPC = "nat", "eipalloc", "eni", "subnet", "igw", "rtb", "sg", "vpc"


# --- NAT gateways and elastic IPs ---------------------------------------------------------------


def nat_gateways(d, with_age):
    ids = owned(d, NAT)
    if not ids:
        return []
    return [
        resource(
            d.region,
            "nat-gateway",
            n["NatGatewayId"],
            ids[n["NatGatewayId"]],
            n.get("CreateTime"),
            state=n.get("State"),
        )
        for n in describe(d, "describe_nat_gateways", "NatGateways", "nat-gateway-id", ids, filter_arg="Filter")
        if n.get("State") not in ("deleted", "failed") and n["NatGatewayId"] in ids
    ]


def delete_nat_gateway(x, res):
    if res["meta"].get("state") != "deleting":
        aws.call(x.client("ec2"), "delete_nat_gateway", NatGatewayId=res["id"])


def state_nat_gateway(x, pending):
    found = {
        n["NatGatewayId"]: n.get("State", "?")
        for n in aws.paginate(
            x.client("ec2"),
            "describe_nat_gateways",
            "NatGateways",
            Filter=[{"Name": "nat-gateway-id", "Values": [r["id"] for r in pending]}],
        )
    }
    return {r["id"]: "gone" if found.get(r["id"], "deleted") == "deleted" else found[r["id"]] for r in pending}


def elastic_ips(d, with_age):
    """Delete mode lists only the ids: an address is released by id (absent when gone) and described only when
    AWS says it is still associated (release_address). Its NAT gateway went before it (the nat chain), which
    frees a NAT's address without a call."""
    ids = owned(d, EIP)
    if not ids:
        return []
    if not d.confirm:
        return [resource(d.region, "elastic-ip", rid, owner) for rid, owner in ids.items()]
    return [
        resource(d.region, "elastic-ip", a["AllocationId"], ids[a["AllocationId"]], association=a.get("AssociationId"))
        for a in describe(d, "describe_addresses", "Addresses", "allocation-id", ids)
        if a["AllocationId"] in ids
    ]


def release_address(x, res):
    client = x.client("ec2")
    try:
        aws.call(client, "release_address", AllocationId=res["id"])
    except ClientError as exc:
        if aws.error_code(exc) not in ("InvalidIPAddress.InUse", "AuthFailure"):
            raise
        association = res["meta"].get("association")
        if "association" not in res["meta"]:  # listed by id only (delete mode): its association now
            found = aws.paginate(
                client, "describe_addresses", "Addresses", Filters=[{"Name": "allocation-id", "Values": [res["id"]]}]
            )
            found = [a for a in found if a.get("AllocationId") == res["id"]]
            if not found:  # no longer ours: released meanwhile (AuthFailure: its address is another account's now)
                return ABSENT
            association = found[0].get("AssociationId")
        if not association:
            raise
        try:
            aws.call(client, "disassociate_address", AssociationId=association)
        except ClientError as again:
            if not aws.is_not_found(again):
                raise
        aws.call(client, "release_address", AllocationId=res["id"])
    return None


# --- network interfaces ----------------------------------------------------------------------------


def network_interfaces(d, with_age):
    """Detached owned interfaces: those inside owned VPCs come with one VPC-filtered listing; only owned ones it
    did not return are described by id. Delete mode lists them later (fresh_interfaces): here only their ids."""
    ids = owned(d, ENI)
    if not d.confirm:
        return [resource(d.region, "network-interface", rid, owner, unconfirmed=True) for rid, owner in ids.items()]
    found = detached_in_owned_vpcs(d, set())
    return found + _detached_by_id(d, {i: o for i, o in ids.items() if i not in {r["id"] for r in found}})


def _detached_by_id(d, ids):
    if not ids:
        return []
    return [
        resource(d.region, "network-interface", e["NetworkInterfaceId"], ids[e["NetworkInterfaceId"]])
        for e in describe(d, "describe_network_interfaces", "NetworkInterfaces", "network-interface-id", ids)
        if e.get("Status") == "available" and e["NetworkInterfaceId"] in ids
    ]


def detached_in_owned_vpcs(d, known):
    """Detached interfaces inside an owned VPC (the VPC CNI and load balancers leave them), with or without tags."""
    vpc_owner = owned(d, VPC)
    if not vpc_owner:
        return []
    found = []
    filters = [{"Name": "vpc-id", "Values": list(vpc_owner)}, {"Name": "status", "Values": ["available"]}]
    for eni in aws.paginate(d.client("ec2"), "describe_network_interfaces", "NetworkInterfaces", Filters=filters):
        if eni["NetworkInterfaceId"] in known or eni.get("Status") != "available":
            continue
        owner = d.owner_of(eni.get("TagSet") or [])
        found.append(
            resource(
                d.region,
                "network-interface",
                eni["NetworkInterfaceId"],
                vpc_owner[eni["VpcId"]] if owner is None else owner,
                None,
                "" if owner is not None else "detached network interface in owned VPC {}".format(eni["VpcId"]),
            )
        )
    return found


def fresh_interfaces(x, planned, resources):
    """Interfaces detach while load balancers and NAT gateways go: list the owned VPCs' detached ones again, and
    describe the owned ones delete mode has only by id (unconfirmed) that this listing did not return."""
    d = x.scan()
    d.seed("ec2-tags", {VPC: {r["id"]: r["cluster"] for r in resources if r["type"] == "vpc"}})
    confirmed = [r for r in planned if not r["meta"].get("unconfirmed")]
    found = d.guard("network-interface", lambda: detached_in_owned_vpcs(d, {r["id"] for r in confirmed}))
    seen = {r["id"] for r in confirmed + found}
    rest = {r["id"]: r["cluster"] for r in planned if r["meta"].get("unconfirmed") and r["id"] not in seen}
    if rest:
        found += d.guard("network-interface", lambda: _detached_by_id(d, rest))
    return confirmed + found


def delete_network_interface(x, res):
    aws.call(x.client("ec2"), "delete_network_interface", NetworkInterfaceId=res["id"])


# --- the network ---------------------------------------------------------------------------------


def delete_subnet(x, res):
    x.delete_dependent(res, "ec2", "delete_subnet", "SubnetId")


def internet_gateways(d, with_age):
    ids, gateways = owned_items(
        d, IGW, "describe_internet_gateways", "InternetGateways", "internet-gateway-id", "InternetGatewayId"
    )
    return [
        resource(
            d.region,
            "internet-gateway",
            g["InternetGatewayId"],
            ids[g["InternetGatewayId"]],
            attachments=[a["VpcId"] for a in g.get("Attachments") or [] if a.get("VpcId")],
        )
        for g in gateways
    ]


def delete_internet_gateway(x, res):
    client = x.client("ec2")
    for vpc in res["meta"].get("attachments") or []:
        aws.call_unless_gone(
            client, "detach_internet_gateway", also=("Gateway.NotAttached",), InternetGatewayId=res["id"], VpcId=vpc
        )
    x.delete_dependent(res, "ec2", "delete_internet_gateway", "InternetGatewayId")


def route_tables(d, with_age):
    ids, tables = owned_items(d, RTB, "describe_route_tables", "RouteTables", "route-table-id", "RouteTableId")
    found = []
    for table in tables:
        associations = table.get("Associations") or []
        if not any(a.get("Main") for a in associations):
            found.append(
                resource(
                    d.region,
                    "route-table",
                    table["RouteTableId"],
                    ids[table["RouteTableId"]],
                    associations=[
                        a["RouteTableAssociationId"] for a in associations if a.get("RouteTableAssociationId")
                    ],
                )
            )
    return found


def delete_route_table(x, res):
    client = x.client("ec2")
    for association in res["meta"].get("associations") or []:
        aws.call_unless_gone(client, "disassociate_route_table", AssociationId=association)
    x.delete_dependent(res, "ec2", "delete_route_table", "RouteTableId")


def security_groups(d, with_age):
    ids, groups = owned_items(d, SG, "describe_security_groups", "SecurityGroups", "group-id", "GroupId")
    return [
        resource(
            d.region,
            "security-group",
            g["GroupId"],
            ids[g["GroupId"]],
            name=g.get("GroupName"),
            ingress=_references(g.get("IpPermissions")),
            egress=_references(g.get("IpPermissionsEgress")),
        )
        for g in groups
        if g.get("GroupName") != "default"
    ]


def deletion_order(groups):
    """(groups in an order each can be deleted in, the groups whose rules must be revoked first). AWS refuses to
    delete a group another group's rule references (DeleteSecurityGroup: DependencyViolation), not one whose own
    rules reference others: so a group that no remaining group references goes first, and only where groups
    reference each other in a cycle are the rules of one of them revoked, which frees a group it references."""
    ids = {g["id"] for g in groups}
    refs = {
        g["id"]: {
            pair.get("GroupId")
            for rule in (g["meta"].get("ingress") or []) + (g["meta"].get("egress") or [])
            for pair in rule.get("UserIdGroupPairs") or []
            if pair.get("GroupId") in ids and pair.get("GroupId") != g["id"]
        }
        for g in groups
    }
    order, revoke, remaining = [], [], list(groups)
    while remaining:
        referenced = {r for g in remaining for r in refs[g["id"]]}
        free = [g for g in remaining if g["id"] not in referenced]
        if not free:  # every group left is referenced: a cycle
            revoke.append(remaining[0])
            refs[remaining[0]["id"]] = set()
            continue
        order += free
        remaining = [g for g in remaining if g not in free]
    return order, revoke


def revoke_rules(x, groups):
    """The groups in their deletion order, once the rules of the groups in reference cycles are revoked (the rules
    came with the listing): groups that only reference others need no revoke."""
    order, revoke = deletion_order(groups)
    client = x.client("ec2")
    try:
        for group in revoke:
            for field, operation in (
                ("ingress", "revoke_security_group_ingress"),
                ("egress", "revoke_security_group_egress"),
            ):
                rules = group["meta"].get(field) or []
                if rules:
                    aws.call_unless_gone(client, operation, GroupId=group["id"], IpPermissions=rules)
    except (ClientError, aws.BotoCoreError, aws.AwsError) as exc:
        x.sweep.warnings.append(
            "{}: revoking the rules of security groups {} failed: {}; their deletion may fail on references".format(
                x.region, ", ".join(g["id"] for g in revoke), aws.error_message(exc)
            )
        )
    return order


def delete_security_group(x, res):
    x.delete_dependent(res, "ec2", "delete_security_group", "GroupId")


def delete_vpc(x, res):
    x.delete_dependent(res, "ec2", "delete_vpc", "VpcId")


def _references(permissions):
    """The rules that name another security group: only those keep a group from being deleted (address ranges do
    not), so only those are revoked first."""
    return [
        _clean_permission(dict(p, IpRanges=[], Ipv6Ranges=[], PrefixListIds=[]))
        for p in permissions or []
        if p.get("UserIdGroupPairs")
    ]


def _clean_permission(permission):
    """An IpPermission from describe_security_groups, reduced to what revoke_* accepts."""
    clean = {k: v for k, v in permission.items() if k in ("IpProtocol", "FromPort", "ToPort") and v is not None}
    for field, keys in (
        ("IpRanges", ("CidrIp",)),
        ("Ipv6Ranges", ("CidrIpv6",)),
        ("PrefixListIds", ("PrefixListId",)),
        ("UserIdGroupPairs", ("GroupId", "UserId")),
    ):
        items = [{k: item[k] for k in keys if item.get(k)} for item in permission.get(field) or []]
        items = [i for i in items if i]
        if items:
            clean[field] = items
    return clean


NAT_ROW = sweep_row(
    "nat-gateway",
    REGION,
    nat_gateways,
    delete_nat_gateway,
    state_nat_gateway,
    chain="nat",
    expected=240,
    arn="ec2:natgateway",
)
EIP_ROW = sweep_row("elastic-ip", REGION, elastic_ips, release_address, chain="nat", arn="ec2:elastic-ip")
ENI_ROW = sweep_row(
    "network-interface",
    REGION,
    network_interfaces,
    delete_network_interface,
    refresh=fresh_interfaces,
    arn="ec2:network-interface",
)
SUBNET_ROW = sweep_row(
    "subnet",
    REGION,
    id_only("subnet", SUBNET, "describe_subnets", "Subnets", "subnet-id", "SubnetId"),
    delete_subnet,
    arn="ec2:subnet",
)
IGW_ROW = sweep_row("internet-gateway", REGION, internet_gateways, delete_internet_gateway, arn="ec2:internet-gateway")
RTB_ROW = sweep_row("route-table", REGION, route_tables, delete_route_table, arn="ec2:route-table")
SG_ROW = sweep_row(
    "security-group", REGION, security_groups, delete_security_group, before=revoke_rules, arn="ec2:security-group"
)
VPC_ROW = sweep_row(
    "vpc", REGION, id_only("vpc", VPC, "describe_vpcs", "Vpcs", "vpc-id", "VpcId"), delete_vpc, arn="ec2:vpc"
)
# in their deletion order (aws_sweep.SERVICES)
ROWS = (NAT_ROW, EIP_ROW, ENI_ROW, SUBNET_ROW, IGW_ROW, RTB_ROW, SG_ROW, VPC_ROW)
