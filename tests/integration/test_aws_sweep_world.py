"""A moto account with three krops clusters in two regions, and decoys the sweep must never touch.

Imported by tests/integration/test_aws_sweep.py and tests/benchmarks/aws_sweep_bench.py (no tests here).
"""

from __future__ import annotations

import functools
import json
import textwrap

import boto3

ACCOUNT = "123456789012"
CAPA = "sigs.k8s.io/cluster-api-provider-aws/cluster/%s"
CCM = "kubernetes.io/cluster/%s"
REGIONS = ("eu-north-1", "eu-west-1")

# cluster, region, EKS name, RDS instance, IAM role prefix
CLUSTERS = (
    (
        "eu-north-1-workload",
        "eu-north-1",
        "default_eu-north-1-workload-control-plane",
        "krops-eu-north-1-workload-db",
        "eu-north-1-workload",
    ),
    (
        "eu-west-1-workload",
        "eu-west-1",
        "default_eu-west-1-workload-control-plane",
        "krops-eu-west-1-workload-db",
        "eu-west-1-workload",
    ),
    ("eu-north-1-management", "eu-north-1", "default_eu-north-1-management-control-plane", "", "eu-north-1-management"),
)

BOOTSTRAP_TOML = textwrap.dedent("""\
    [bootstrap]
    default-environment = "aws"
    git-url = "https://github.com/krops/krops"

    [charts]
    flux-operator = "0.58.0"
    cert-manager = "1.21.2"
    capi-operator = "0.29.0"

    [teardown]
    cfn-stack-name = "cluster-api-provider-aws-sigs-k8s-io"
    global-iam-roles = ["krops-{cluster_name}-reader"]
    global-iam-users = ["krops-reader"]
    s3-bucket-pattern = "krops-{account_id}-{cluster_name}-data"

    [environments.aws]
    kind = "aws"
    mgmt-region = "eu-north-1"
    sync = "git"
    sync-path = "mgmt/aws"
    mgmt-cluster = "eu-north-1-management"
    mgmt-ready-timeout = "40m"
    infra-provider-namespace = "capa-system"
    infra-provider-name = "aws"

    [environments.aws.teardown]
    capi-workloads = ["eu-north-1-workload", "eu-west-1-workload"]
    mgmt-eks-cluster-name = "default_eu-north-1-management-control-plane"

    [[environments.aws.teardown.aws-workloads]]
    region = "eu-north-1"
    cluster-name = "eu-north-1-workload"
    eks-cluster-name = "default_eu-north-1-workload-control-plane"
    rds-instance = "krops-eu-north-1-workload-db"

    [[environments.aws.teardown.aws-workloads]]
    region = "eu-west-1"
    cluster-name = "eu-west-1-workload"
    eks-cluster-name = "default_eu-west-1-workload-control-plane"
    rds-instance = "krops-eu-west-1-workload-db"

    [environments.local-host]
    kind = "local-host"
    sync = "oci"
    sync-path = "mgmt/local-host"
    mgmt-cluster = "local-management"
    mgmt-ready-timeout = "15m"
    infra-provider-namespace = "capd-system"
    infra-provider-name = "docker"
    """)

ASSUME = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "eks.amazonaws.com"}, "Action": "sts:AssumeRole"}],
    }
)
POLICY = json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}]}
)
STACK = json.dumps({"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}})


_SESSION = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing")


@functools.cache
def _client(endpoint, region, service):
    return _SESSION.client(service, endpoint_url=endpoint, region_name=region)


def clients(endpoint, region):
    def make(service):
        return _client(endpoint, region, service)

    return make


def _tags(key, value="owned"):
    return [{"Key": key, "Value": value}, {"Key": "Name", "Value": "x"}]


def _spec(rtype, key, value="owned"):
    return [{"ResourceType": rtype, "Tags": _tags(key, value)}]


def seed_network(ec2, tag, cidr="10.0.0.0/16", nat=True):
    """An owned VPC as CAPA builds it; returns {type: [ids]}."""
    made = {}
    vpc = ec2.create_vpc(CidrBlock=cidr, TagSpecifications=_spec("vpc", tag))["Vpc"]["VpcId"]
    made["vpc"] = [vpc]
    base = cidr.split(".")[0] + "." + cidr.split(".")[1]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock="%s.%d.0/24" % (base, i), TagSpecifications=_spec("subnet", tag))[
            "Subnet"
        ]["SubnetId"]
        for i in (1, 2)
    ]
    made["subnet"] = subnets
    igw = ec2.create_internet_gateway(TagSpecifications=_spec("internet-gateway", tag))["InternetGateway"]
    ec2.attach_internet_gateway(InternetGatewayId=igw["InternetGatewayId"], VpcId=vpc)
    made["internet-gateway"] = [igw["InternetGatewayId"]]
    table = ec2.create_route_table(VpcId=vpc, TagSpecifications=_spec("route-table", tag))["RouteTable"]["RouteTableId"]
    ec2.associate_route_table(RouteTableId=table, SubnetId=subnets[0])
    made["route-table"] = [table]
    groups = [
        ec2.create_security_group(
            GroupName=f"{vpc}-{n}", Description="krops", VpcId=vpc, TagSpecifications=_spec("security-group", tag)
        )["GroupId"]
        for n in ("lb", "node")
    ]
    # groups that reference each other: deletable only once the rules are revoked
    ec2.authorize_security_group_ingress(
        GroupId=groups[0],
        IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "UserIdGroupPairs": [{"GroupId": groups[1]}]}
        ],
    )
    ec2.authorize_security_group_ingress(
        GroupId=groups[1],
        IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": 0, "ToPort": 65535, "UserIdGroupPairs": [{"GroupId": groups[0]}]},
            {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "10.0.0.0/8"}]},
        ],
    )
    made["security-group"] = groups
    eni = ec2.create_network_interface(SubnetId=subnets[1], TagSpecifications=_spec("network-interface", tag))
    made["network-interface"] = [eni["NetworkInterface"]["NetworkInterfaceId"]]
    if nat:
        eip = ec2.allocate_address(Domain="vpc", TagSpecifications=_spec("elastic-ip", tag))["AllocationId"]
        gateway = ec2.create_nat_gateway(SubnetId=subnets[0], AllocationId=eip)["NatGateway"]["NatGatewayId"]
        ec2.create_tags(Resources=[gateway], Tags=_tags(tag))  # moto drops TagSpecifications on NAT gateways
        made["elastic-ip"] = [eip]
        made["nat-gateway"] = [gateway]
        # moto leaves the NAT gateway's interface detached in the VPC: swept as VPC content
        made["network-interface"] += [
            e["NetworkInterfaceId"]
            for e in ec2.describe_network_interfaces(Filters=[{"Name": "subnet-id", "Values": [subnets[0]]}])[
                "NetworkInterfaces"
            ]
        ]
    return made


def seed_cluster(endpoint, cluster, region, eks_name, rds_name, role_prefix, account=ACCOUNT):
    """Everything krops creates for one cluster. Returns the set of (region, type, id) seeded."""
    c = clients(endpoint, region)
    ec2, eks, rds, elbv2, elb, s3, iam = (c(s) for s in ("ec2", "eks", "rds", "elbv2", "elb", "s3", "iam"))
    seeded = set()
    cidr = "10.%d.0.0/16" % (sum(cluster.encode()) % 200 + 10)
    made = seed_network(ec2, CAPA % cluster, cidr)
    subnets = made["subnet"]
    for rtype, ids in made.items():
        seeded |= {(region, rtype, i) for i in ids}

    eks.create_cluster(
        name=eks_name,
        roleArn=f"arn:aws:iam::{account}:role/{role_prefix}-control-plane",
        resourcesVpcConfig={"subnetIds": subnets},
        tags={CAPA % cluster: "owned"},
    )
    seeded.add((region, "eks-cluster", eks_name))
    for pool in ("pool-0", "pool-1"):
        eks.create_nodegroup(
            clusterName=eks_name,
            nodegroupName=pool,
            subnets=subnets,
            nodeRole=f"arn:aws:iam::{account}:role/{role_prefix}-nodes",
        )
        seeded.add((region, "eks-nodegroup", f"{eks_name}/{pool}"))

    if rds_name:
        group = f"{cluster}-subnets"
        rds.create_db_subnet_group(DBSubnetGroupName=group, DBSubnetGroupDescription="krops", SubnetIds=subnets)
        rds.create_db_instance(
            DBInstanceIdentifier=rds_name,
            DBInstanceClass="db.t3.micro",
            Engine="postgres",
            MasterUsername="krops",
            MasterUserPassword="not-a-secret-1",
            AllocatedStorage=20,
            DBSubnetGroupName=group,
        )
        seeded |= {(region, "rds-instance", rds_name), (region, "rds-subnet-group", group)}

    lb = elbv2.create_load_balancer(
        Name=f"{cluster[:20]}-svc", Subnets=subnets, Tags=[{"Key": CCM % cluster, "Value": "owned"}]
    )["LoadBalancers"][0]
    group = elbv2.create_target_group(
        Name=f"{cluster[:20]}-tg",
        Protocol="HTTP",
        Port=443,
        VpcId=made["vpc"][0],
        Tags=[{"Key": CCM % cluster, "Value": "owned"}],
    )["TargetGroups"][0]
    elbv2.create_listener(
        LoadBalancerArn=lb["LoadBalancerArn"],
        Protocol="HTTP",
        Port=443,
        DefaultActions=[{"Type": "forward", "TargetGroupArn": group["TargetGroupArn"]}],
    )
    seeded |= {
        (region, "elbv2-load-balancer", lb["LoadBalancerArn"]),
        (region, "elbv2-target-group", group["TargetGroupArn"]),
    }
    classic = f"{cluster[:20]}-apiserver"
    elb.create_load_balancer(
        LoadBalancerName=classic,
        Subnets=subnets,
        Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 6443, "InstancePort": 6443}],
        Tags=[{"Key": CAPA % cluster, "Value": "owned"}],
    )
    seeded.add((region, "elb-load-balancer", classic))

    bucket = f"krops-{account}-{cluster}-data"
    # us-east-1 takes no LocationConstraint (S3 CreateBucket refuses it there)
    where = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
    s3.create_bucket(Bucket=bucket, **where)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    for body in (b"one", b"two"):
        s3.put_object(Bucket=bucket, Key="state/a.json", Body=body)
    s3.put_object(Bucket=bucket, Key="state/b.json", Body=b"b")
    s3.delete_object(Bucket=bucket, Key="state/b.json")  # a delete marker
    seeded.add((region, "s3-bucket", bucket))

    policy_arn = iam.create_policy(PolicyName=f"{role_prefix}-policy", PolicyDocument=POLICY)["Policy"]["Arn"]
    # CAPA tags the control-plane role with the CAPI cluster name and the node role with the EKS cluster
    # name (pkg/cloud/services/eks/roles.go, iam/iam.go RoleTags); global-iam-roles are exact names.
    for role, tags in (
        (f"{role_prefix}-control-plane", [{"Key": CCM % cluster, "Value": "owned"}]),
        (f"{role_prefix}-nodes", [{"Key": CCM % eks_name, "Value": "owned"}]),
        (f"krops-{cluster}-reader", []),
    ):
        iam.create_role(RoleName=role, AssumeRolePolicyDocument=ASSUME, Tags=tags)
        iam.attach_role_policy(RoleName=role, PolicyArn=policy_arn)
        iam.put_role_policy(RoleName=role, PolicyName="inline", PolicyDocument=POLICY)
        seeded.add(("global", "iam-role", role))
    profile = f"{role_prefix}-nodes-profile"
    iam.create_instance_profile(InstanceProfileName=profile)
    iam.add_role_to_instance_profile(InstanceProfileName=profile, RoleName=f"{role_prefix}-nodes")
    return seeded


def seed_global(endpoint, regions=REGIONS):
    """The global reader user and the clusterawsadm stack in each region."""
    iam = clients(endpoint, regions[0])("iam")
    iam.create_user(UserName="krops-reader")
    iam.create_login_profile(UserName="krops-reader", Password="Not-a-secret-1!")
    iam.create_access_key(UserName="krops-reader")
    iam.put_user_policy(UserName="krops-reader", PolicyName="read", PolicyDocument=POLICY)
    seeded = {("global", "iam-user", "krops-reader")}
    for region in regions:
        stacks = clients(endpoint, region)("cloudformation")
        stacks.create_stack(StackName="cluster-api-provider-aws-sigs-k8s-io", TemplateBody=STACK)
        seeded.add((region, "cloudformation-stack", "cluster-api-provider-aws-sigs-k8s-io"))
    return seeded


def seed_decoys(endpoint):
    """What the sweep must leave alone: untagged, another cluster's, name or tag sharing a prefix, 'shared'."""
    north, west = clients(endpoint, "eu-north-1"), clients(endpoint, "eu-west-1")
    ec2 = north("ec2")
    decoys = {}
    # untagged VPC and its contents
    vpc = ec2.create_vpc(CidrBlock="172.16.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="172.16.1.0/24")["Subnet"]["SubnetId"]
    decoys["untagged-vpc"] = vpc
    decoys["untagged-subnet"] = subnet
    decoys["untagged-eni"] = ec2.create_network_interface(SubnetId=subnet)["NetworkInterface"]["NetworkInterfaceId"]
    decoys["untagged-eip"] = ec2.allocate_address(Domain="vpc")["AllocationId"]
    # a subnet in that VPC tagged 'shared' (not owned) by a target cluster
    decoys["shared-subnet"] = ec2.create_subnet(
        VpcId=vpc, CidrBlock="172.16.2.0/24", TagSpecifications=_spec("subnet", CCM % "eu-north-1-workload", "shared")
    )["Subnet"]["SubnetId"]
    # a cluster whose name shares a prefix with a target, and a cluster that is not ours
    prefix_net = seed_network(ec2, CAPA % "eu-north-1-workload2", "172.17.0.0/16")
    decoys["prefix-vpc"] = prefix_net["vpc"][0]
    decoys["prefix-nat"] = prefix_net["nat-gateway"][0]
    other_net = seed_network(west("ec2"), CCM % "other", "172.18.0.0/16")
    decoys["other-vpc"] = other_net["vpc"][0]
    decoys["other-sg"] = other_net["security-group"][0]
    west("eks").create_cluster(
        name="default_other-control-plane",
        roleArn=f"arn:aws:iam::{ACCOUNT}:role/x",
        resourcesVpcConfig={"subnetIds": other_net["subnet"]},
        tags={CCM % "other": "owned"},
    )
    west("eks").create_nodegroup(
        clusterName="default_other-control-plane",
        nodegroupName="pool-0",
        subnets=other_net["subnet"],
        nodeRole=f"arn:aws:iam::{ACCOUNT}:role/x",
    )
    north("eks").create_cluster(
        name="default_eu-north-1-workload2-control-plane",
        roleArn=f"arn:aws:iam::{ACCOUNT}:role/x",
        resourcesVpcConfig={"subnetIds": prefix_net["subnet"]},
        tags={CAPA % "eu-north-1-workload2": "owned"},
    )
    decoys["other-lb"] = west("elbv2").create_load_balancer(
        Name="other-svc", Subnets=other_net["subnet"], Tags=[{"Key": CCM % "other", "Value": "owned"}]
    )["LoadBalancers"][0]["LoadBalancerArn"]
    west("elb").create_load_balancer(
        LoadBalancerName="eu-west-1-workload2-api",
        Subnets=other_net["subnet"],
        Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 6443, "InstancePort": 6443}],
        Tags=[{"Key": CAPA % "eu-west-1-workload2", "Value": "owned"}],
    )
    rds = west("rds")
    rds.create_db_subnet_group(
        DBSubnetGroupName="other-subnets", DBSubnetGroupDescription="x", SubnetIds=other_net["subnet"]
    )
    rds.create_db_instance(
        DBInstanceIdentifier="krops-eu-west-1-workload-db2",
        DBInstanceClass="db.t3.micro",
        Engine="postgres",
        MasterUsername="x",
        MasterUserPassword="not-a-secret-1",
        AllocatedStorage=20,
        DBSubnetGroupName="other-subnets",
    )
    s3 = north("s3")
    for bucket in (f"krops-{ACCOUNT}-eu-north-1-workload2-data", f"krops-{ACCOUNT}-eu-north-1-workload-data-old"):
        s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "eu-north-1"})
        s3.put_object(Bucket=bucket, Key="keep", Body=b"keep")
    iam = north("iam")
    for role in (
        "eu-north-1-workload2-control-plane",
        "eu-north-1-workloadx",
        "x-eu-north-1-workload-nodes",
        "krops-eu-north-1-workload2-reader",
        "krops-other-reader",
    ):
        iam.create_role(RoleName=role, AssumeRolePolicyDocument=ASSUME)
    iam.create_user(UserName="krops-reader2")
    west("cloudformation").create_stack(StackName="cluster-api-provider-aws-sigs-k8s-io-2", TemplateBody=STACK)
    return decoys


KINDS = {
    "vpc",
    "subnet",
    "internet-gateway",
    "route-table",
    "security-group",
    "network-interface",
    "elastic-ip",
    "nat-gateway",
    "eks-cluster",
    "eks-nodegroup",
    "rds-instance",
    "rds-subnet-group",
    "elbv2-load-balancer",
    "elbv2-target-group",
    "elb-load-balancer",
    "s3-bucket",
    "iam-role",
    "iam-user",
    "cloudformation-stack",
}


def seed_world(endpoint):
    """Three clusters, the global resources and the decoys. Returns (owned set, decoys)."""
    owned = set()
    for cluster in CLUSTERS:
        owned |= seed_cluster(endpoint, *cluster)
    owned |= seed_global(endpoint)
    return owned, seed_decoys(endpoint)


def inventory(endpoint):
    """Every resource of the kinds the sweep handles in both regions (tagged or not): a set of (region, type, id)."""
    found = set()
    for region in REGIONS:
        c = clients(endpoint, region)
        ec2, eks, rds, elbv2, elb = (c(s) for s in ("ec2", "eks", "rds", "elbv2", "elb"))
        for name in eks.list_clusters()["clusters"]:
            found.add((region, "eks-cluster", name))
            found |= {
                (region, "eks-nodegroup", f"{name}/{n}") for n in eks.list_nodegroups(clusterName=name)["nodegroups"]
            }
        found |= {
            (region, "rds-instance", i["DBInstanceIdentifier"]) for i in rds.describe_db_instances()["DBInstances"]
        }
        found |= {
            (region, "rds-subnet-group", g["DBSubnetGroupName"])
            for g in rds.describe_db_subnet_groups()["DBSubnetGroups"]
        }
        found |= {
            (region, "elbv2-load-balancer", lb["LoadBalancerArn"])
            for lb in elbv2.describe_load_balancers()["LoadBalancers"]
        }
        found |= {
            (region, "elbv2-target-group", g["TargetGroupArn"]) for g in elbv2.describe_target_groups()["TargetGroups"]
        }
        found |= {
            (region, "elb-load-balancer", lb["LoadBalancerName"])
            for lb in elb.describe_load_balancers()["LoadBalancerDescriptions"]
        }
        found |= {
            (region, "nat-gateway", n["NatGatewayId"])
            for n in ec2.describe_nat_gateways()["NatGateways"]
            if n["State"] != "deleted"
        }
        found |= {(region, "elastic-ip", a["AllocationId"]) for a in ec2.describe_addresses()["Addresses"]}
        found |= {
            (region, "network-interface", e["NetworkInterfaceId"])
            for e in ec2.describe_network_interfaces()["NetworkInterfaces"]
        }
        found |= {(region, "subnet", s["SubnetId"]) for s in ec2.describe_subnets()["Subnets"]}
        found |= {
            (region, "internet-gateway", g["InternetGatewayId"])
            for g in ec2.describe_internet_gateways()["InternetGateways"]
        }
        found |= {(region, "route-table", t["RouteTableId"]) for t in ec2.describe_route_tables()["RouteTables"]}
        found |= {(region, "security-group", g["GroupId"]) for g in ec2.describe_security_groups()["SecurityGroups"]}
        found |= {(region, "vpc", v["VpcId"]) for v in ec2.describe_vpcs()["Vpcs"]}
        found |= {
            (region, "cloudformation-stack", s["StackName"])
            for s in c("cloudformation").describe_stacks()["Stacks"]
            if s["StackStatus"] != "DELETE_COMPLETE"
        }
    c = clients(endpoint, REGIONS[0])
    found |= {("bucket", "s3-bucket", b["Name"]) for b in c("s3").list_buckets()["Buckets"]}
    found |= {("global", "iam-role", r["RoleName"]) for r in c("iam").list_roles()["Roles"]}
    found |= {("global", "iam-user", u["UserName"]) for u in c("iam").list_users()["Users"]}
    return found


def vpc_defaults(endpoint, owned):
    """The main route table and default security group of each owned VPC: AWS deletes them with the VPC."""
    found = set()
    for region in REGIONS:
        vpcs = [i for r, t, i in owned if r == region and t == "vpc"]
        if not vpcs:
            continue
        ec2 = clients(endpoint, region)("ec2")
        found |= {
            (region, "route-table", t["RouteTableId"])
            for t in ec2.describe_route_tables(
                Filters=[{"Name": "vpc-id", "Values": vpcs}, {"Name": "association.main", "Values": ["true"]}]
            )["RouteTables"]
        }
        found |= {
            (region, "security-group", g["GroupId"])
            for g in ec2.describe_security_groups(
                Filters=[{"Name": "vpc-id", "Values": vpcs}, {"Name": "group-name", "Values": ["default"]}]
            )["SecurityGroups"]
        }
    return found


def normalise(items):
    """(region, type, id) of results/plan entries; buckets are compared without region (inventory has none)."""
    return {
        ("bucket", i["type"], i["id"]) if i["type"] == "s3-bucket" else (i["region"], i["type"], i["id"]) for i in items
    }
