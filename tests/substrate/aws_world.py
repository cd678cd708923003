# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""CAPA and ACK for the emulated world, acting on moto (tests/substrate/fixtures.py ``moto``).

``Capa`` plays Cluster API Provider AWS v2.11.1 (the pin of mgmt/aws/capa-system) for EKS clusters
(Cluster -> AWSManagedCluster, AWSManagedControlPlane, MachinePools -> AWSManagedMachinePool). It
creates in moto what CAPA's managed control plane and managed machine pool reconcilers create, named
and tagged as CAPA names and tags them (kubernetes-sigs/cluster-api-provider-aws @ v2.11.1):

- tags: ``Build`` of api/v1beta2/tags.go (``Name``, ``sigs.k8s.io/cluster-api-provider-aws/cluster/
  <name>=owned``, ``sigs.k8s.io/cluster-api-provider-aws/role=<role>``, the control plane's
  ``additionalTags``), the cloud-provider key ``kubernetes.io/cluster/<name>``;
- network (pkg/cloud/services/network): VPC ``<cluster>-vpc`` (vpc.go getVPCTagParams); per zone, up
  to 3 zones in name order (subnets.go, AvailabilityZoneUsageLimit default 3 in
  api/v1beta2/network_types.go), a public and a private subnet ``<cluster>-subnet-<role>-<zone>``
  split as pkg/internal/cidr SplitIntoSubnetsIPv4 splits (subnets.go getSubnetTagParams adds
  ``kubernetes.io/role/elb`` or ``kubernetes.io/role/internal-elb`` = 1 and
  ``kubernetes.io/cluster/<EKS cluster name>=owned``); the internet gateway ``<cluster>-igw``
  (gateways.go); one elastic IP ``<cluster>-eip-common`` and NAT gateway ``<cluster>-nat`` per public
  subnet (eips.go, natgateways.go); one route table ``<cluster>-rt-<public|private>-<zone>`` per
  subnet with the cloud-provider key for the EKS name (routetables.go);
- security group ``<cluster>-node-eks-additional`` (controlplane/eks/controllers/
  awsmanagedcontrolplane_controller.go defaultEKSSecurityGroupRoles; pkg/cloud/services/
  securitygroup/securitygroups.go getSecurityGroupName/getSecurityGroupTagParams);
- IAM (feature gate EKSEnableIAM, set by the tree): the control plane role ``<cluster>-iam-service-role``
  tagged ``kubernetes.io/cluster/<cluster>=owned`` plus additionalTags (pkg/cloud/services/eks/
  roles.go, eks/iam/iam.go RoleTags); each node group's role ``GenerateEKSName("nodegroup-iam-service-
  role", "<EKS name>-<node group>", 64)`` (pkg/eks/eks.go, blake2b base36 of pkg/hash/base36.go)
  tagged ``kubernetes.io/cluster/<EKS name>=owned`` plus the merged additionalTags;
- EKS (pkg/cloud/services/eks): the cluster ``spec.eksClusterName`` created with additionalTags and
  ``kubernetes.io/cluster/<EKS name>=owned`` (cluster.go createCluster), then tagged with ``Build``
  for the EKS name (tags.go getEKSTagParams); node groups ``spec.eksNodegroupName`` in the private
  subnets tagged ngTags (nodegroup.go: additionalTags + ``kubernetes.io/cluster/<EKS name>=owned``).

CAPA creates no load balancer for an EKS control plane (reconcileNormal has no ELB step); load
balancers and EBS volumes come from inside the cluster. ``Capa.workload_leftovers`` plays those: the
cloud provider's load balancer for a Service (tagged ``kubernetes.io/service-name=<ns>/<name>``, the
cloud-provider-aws TagNameKubernetesService, plus the owned cluster key) and the EBS CSI driver's volume
for a PersistentVolume, both tagged ``kubernetes.io/cluster/<EKS name>=owned`` (docs/ownership.md). CAPA
does not delete them with the cluster (its ExternalResourceGC feature is off by default), so only the
sweep can.

Deleting a Cluster deletes its infrastructure in CAPA's reverse order (reconcileDelete; pkg/cloud/
services/eks/eks.go DeleteControlPlane): node groups and their roles, the EKS cluster, the control
plane role, the security groups, then the network
(NAT gateways, elastic IPs, route tables, internet gateway, subnets, VPC). CAPA acts only while its
InfrastructureProvider object exists (teardown deletes the providers "so nothing recreates cloud
resources"), creates once and does not repair drift.

``Ack`` plays the ACK s3, ec2, rds and iam controllers (the charts of mgmt/aws/ack-controllers) for
Bucket, VPC, Subnet, SecurityGroup, DBSubnetGroup, DBInstance, Role, Policy and User: spec.tags (a
Bucket's spec.tagging.tagSet) plus the controller's ``resourceTags`` from its HelmRelease, expanded as
the ACK runtime expands them (``expand_resource_tags``). References (``vpcRef.from`` and the like)
resolve to what the referenced object of that kind created; finalizers as ``AckController`` says.

Several accounts (ACK's cross-account resource management, CARM), as aws-controllers-k8s/runtime v0.61.0's
``Reconcile`` does it (``pkg/runtime/reconciler.go`` getOwnerAccountID, getRoleARN, handleCacheError;
``pkg/runtime/cache/account.go``, ``namespace.go``; docs/upstream-facts.md): an object whose namespace is annotated
``services.k8s.aws/owner-account-id`` is reconciled with the role that account maps to in the ConfigMap
``ack-role-account-map`` of the controllers' namespace (``Ack.system_namespace``), in the role ARN's account
(moto: an assumed role's credentials are its account's); without the annotation (or in kube-system, kube-public,
kube-node-lease, which the namespace cache ignores) in the controllers' own account (``Ack.account``: the
ack-aws-credentials Secret's; moto's default when None), or the account its status records. A failed lookup leaves
the object unsynced, ACK.ResourceSynced False with the runtime's message ("IAM Role is not available") and reason;
an object whose status records another account than the role's is a terminal error, as the runtime's account
drift check makes it. ``enable_carm=False`` plays ``--enable-carm=false``: annotations are not read.

Where moto lacks an API the reconciler says so and does less, never pretends: moto serves no AWS
managed policies unless started with MOTO_IAM_LOAD_MANAGED_POLICIES (the shared fixture does not), so
CAPA's and the Role's ``arn:aws:iam::aws:policy/...`` attachments are recorded in ``skipped``; EKS's
own cluster security group and the ENIs EKS and the VPC CNI create are not made by moto.
"""

from __future__ import annotations

import copy
import hashlib
import ipaddress
import json
import math
import threading
import time
from pathlib import Path

import botocore.exceptions
import yaml

from tests.integration.test_aws_sweep_world import _SESSION, clients
from tests.integration.test_aws_sweep_world import inventory as _sweep_inventory
from tests.substrate.strict_api import catalog, plural_of

REPO = Path(__file__).resolve().parents[2]
ACCOUNT = "123456789012"  # moto's default account
OPERATOR = "operator.cluster.x-k8s.io/v1alpha2"

# api/v1beta2/tags.go @ v2.11.1
CAPA_OWNED = "sigs.k8s.io/cluster-api-provider-aws/cluster/%s"
CAPA_ROLE = "sigs.k8s.io/cluster-api-provider-aws/role"
CLOUD_OWNED = "kubernetes.io/cluster/%s"
# pkg/cloud/services/network/subnets.go @ v2.11.1
ELB_ROLE = "kubernetes.io/role/elb"
INTERNAL_ELB_ROLE = "kubernetes.io/role/internal-elb"
MAX_ZONES = 3
MAX_IAM_ROLE_NAME = 64  # pkg/cloud/services/eks/roles.go maxIAMRoleNameLength

# What CAPA's managed control plane and node groups attach (roles.go), and what moto cannot serve.
CONTROL_PLANE_POLICIES = ("arn:aws:iam::aws:policy/AmazonEKSClusterPolicy",)
NODEGROUP_POLICIES = (
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
)
EKS_TRUST = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "eks.amazonaws.com"}, "Action": "sts:AssumeRole"}],
    }
)
NODE_TRUST = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}],
    }
)

# The CRDs the aws lifecycle installs, from schemas/crds: CAPA's provider and the ACK charts.
CAPA_KINDS = (
    ("infrastructure.cluster.x-k8s.io", "AWSManagedCluster"),
    ("infrastructure.cluster.x-k8s.io", "AWSManagedMachinePool"),
    ("infrastructure.cluster.x-k8s.io", "AWSClusterControllerIdentity"),
    ("infrastructure.cluster.x-k8s.io", "AWSClusterStaticIdentity"),
    ("infrastructure.cluster.x-k8s.io", "AWSClusterRoleIdentity"),
    ("controlplane.cluster.x-k8s.io", "AWSManagedControlPlane"),
)
ACK_KINDS = (
    ("s3.services.k8s.aws", "Bucket"),
    ("ec2.services.k8s.aws", "VPC"),
    ("ec2.services.k8s.aws", "Subnet"),
    ("ec2.services.k8s.aws", "SecurityGroup"),
    ("rds.services.k8s.aws", "DBSubnetGroup"),
    ("rds.services.k8s.aws", "DBInstance"),
    ("iam.services.k8s.aws", "Role"),
    ("iam.services.k8s.aws", "Policy"),
    ("iam.services.k8s.aws", "User"),
)


# What each ACK chart of mgmt/aws/ack-controllers installs (install.crds CreateReplace): its service's CRDs and
# the runtime's shared ones (AdoptedResource, FieldExport, IAMRoleSelector), by chart as flux_world.CHART_CRDS
# names it.
ACK_CHART_BUNDLES = {
    f"ack-{service}": [(f"{service}.services.k8s.aws", None), ("services.k8s.aws", None)]
    for service in ("s3", "rds", "iam", "ec2")
}


def register_ack_charts(monkeypatch):
    """Make the emulated helm-controller install the ACK charts' CRDs (for this test only)."""
    from tests.substrate import flux_world, strict_api

    for chart, groups in ACK_CHART_BUNDLES.items():
        monkeypatch.setitem(strict_api.CRD_BUNDLES, chart, groups)
        monkeypatch.setitem(flux_world.CHART_CRDS, chart, (chart,))
        # the controller's Deployment (named after the release here; the chart's own name is not emulated)
        service = chart.removeprefix("ack-")
        monkeypatch.setitem(
            flux_world.CHART_WORKLOADS,
            chart,
            ("controller", f"public.ecr.aws/aws-controllers-k8s/{service}-controller"),
        )


def install_crds(api, kinds):
    """Create the CRDs of (group, kind) pairs from the vendored schemas, as a provider or chart would."""
    for group, kind in kinds:
        if not api.exists("apiextensions.k8s.io/v1", "CustomResourceDefinition", f"{plural_of(group, kind)}.{group}"):
            api.create(catalog().crd(group, kind))


# --- CAPA's names and tags -------------------------------------------------------------------


def build_tags(cluster, name=None, role=None, additional=None, lifecycle="owned"):
    """api/v1beta2/tags.go Build: Name first (additional tags may override it), then the owned key and role."""
    tags = {}
    if name is not None:
        tags["Name"] = name
    tags.update(additional or {})
    if cluster:
        tags[CAPA_OWNED % cluster] = lifecycle
    if role is not None:
        tags[CAPA_ROLE] = role
    return tags


def eks_name(resource, namespace, max_length):
    """pkg/eks/eks.go GenerateEKSName with pkg/hash/base36.go Base36TruncatedHash (blake2b, bytes mod 36)."""
    name = "{}_{}".format(namespace, resource.replace(".", "_"))
    if len(name) < max_length:
        return name
    digest = hashlib.blake2b(name.encode(), digest_size=32 - len("capa_")).digest()
    return "capa_" + "".join("0123456789abcdefghijklmnopqrstuvwxyz"[b % 36] for b in digest)


def nodegroup_role_name(eks_cluster, nodegroup):
    return eks_name("nodegroup-iam-service-role", f"{eks_cluster}-{nodegroup}", MAX_IAM_ROLE_NAME)


def split_cidr(cidr, count):
    """pkg/internal/cidr SplitIntoSubnetsIPv4: the next power of two of equal subnets, the first `count`."""
    net = ipaddress.ip_network(cidr)
    bits = math.ceil(math.log2(count)) if count > 1 else 0
    return [str(s) for s in list(net.subnets(prefixlen_diff=bits))[:count]]


def _tag_list(tags, key="Key", value="Value"):
    return [{key: k, value: v} for k, v in tags.items()]


def _spec(rtype, tags):
    return [{"ResourceType": rtype, "Tags": _tag_list(tags)}]


class Record:
    """What was made in moto for one object: ids by type, in creation order, and what could not be made."""

    def __init__(self, region, account=None, role=None):
        self.region = region
        self.account = account  # the AWS account it was made in (status.ackResourceMetadata.ownerAccountID)
        self.role = role  # the role it was reconciled with (CARM), None for the controllers' own credentials
        self.ids = {}
        self.skipped = []

    def add(self, rtype, rid):
        self.ids.setdefault(rtype, []).append(rid)
        return rid

    def items(self):
        """(region, type, id) as tests/substrate/aws_world.inventory lists them."""
        found = set()
        for rtype, ids in self.ids.items():
            region = {
                "s3-bucket": "bucket",
                "iam-role": "global",
                "iam-user": "global",
                "iam-policy": "global",
                "iam-oidc-provider": "global",
            }.get(rtype, self.region)
            found |= {(region, rtype, i) for i in ids}
        return found


# --- CAPA ---------------------------------------------------------------------------------------


class Capa:
    """Cluster API Provider AWS for EKS clusters, against moto. One instance per AWS account."""

    contract = "v1beta1"  # metadata.yaml @ v2.11.1: 2.11 -> contract v1beta1 (status.ready / initialized)

    def __init__(self, endpoint, provider_name="aws", provider_namespace="capa-system"):
        self.endpoint = endpoint
        self.provider = (provider_name, provider_namespace)
        # (namespace, cluster) -> Record: one AWS account, so a moved Cluster finds its infrastructure
        # (CAPA adopts what its tags say it owns)
        self.records = {}
        self.lock = threading.Lock()
        # CapiController installs these CRDs when the InfrastructureProvider becomes Ready
        self.crds = {("InfrastructureProvider", provider_name): lambda api: install_crds(api, CAPA_KINDS)}

    def client(self, region, service):
        return clients(self.endpoint, region)(service)

    def created(self):
        """(region, type, id) of everything CAPA made and has not deleted."""
        found = set()
        for record in self.records.values():
            found |= record.items()
        return found

    def running(self, api):
        """CAPA runs on api while its InfrastructureProvider object exists there."""
        name, namespace = self.provider
        return ("operator.cluster.x-k8s.io", "infrastructureproviders") in api.resources and api.exists(
            OPERATOR, "InfrastructureProvider", name, namespace
        )

    # CapiController's infrastructure-provider interface
    def provision(self, api, cluster, infra, control_plane):
        """None once the cluster's AWS infrastructure exists, else why not yet."""
        key = (cluster["metadata"]["namespace"], cluster["metadata"]["name"])
        with self.lock:
            if key in self.records:
                return None
            if not self.running(api):
                return "InfrastructureProvider {1}/{0} is not installed: nothing runs CAPA".format(*self.provider)
            pools = _pools(api, cluster)
            self.records[key] = self.create(cluster, control_plane, pools)
        return None

    def delete(self, api, cluster, infra, control_plane):
        """None once the cluster's AWS infrastructure is gone, else why not yet."""
        key = (cluster["metadata"]["namespace"], cluster["metadata"]["name"])
        with self.lock:
            record = self.records.get(key)
            if record is None:
                return None
            if not self.running(api):
                return "InfrastructureProvider {1}/{0} is gone: nothing runs CAPA to delete the cluster".format(
                    *self.provider
                )
            self.destroy(record)
            del self.records[key]
            for pool, machine_pool in _pools(api, cluster):
                for obj in (machine_pool, pool):
                    if api.exists(
                        obj["apiVersion"], obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"]
                    ):
                        api.remove(
                            obj["apiVersion"], obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"]
                        )
        return None

    def status(self, role):
        """The v1beta1-contract status a provisioned infrastructure / control plane object reports."""
        return {"ready": True} if role == "infrastructure" else {"ready": True, "initialized": True}

    # the AWS side
    def create(self, cluster, control_plane, pools):
        """Everything CAPA creates for one EKS cluster; returns its Record."""
        name = cluster["metadata"]["name"]
        spec = control_plane.get("spec") or {}
        region = spec["region"]
        eks_cluster = spec.get("eksClusterName") or eks_name(
            control_plane["metadata"]["name"], control_plane["metadata"]["namespace"], 100
        )
        additional = dict(spec.get("additionalTags") or {})
        record = Record(region)
        record.eks = eks_cluster
        ec2, iam, eks = (self.client(region, s) for s in ("ec2", "iam", "eks"))

        cidr = ((spec.get("network") or {}).get("vpc") or {}).get("cidrBlock") or "10.0.0.0/16"
        vpc = ec2.create_vpc(
            CidrBlock=cidr, TagSpecifications=_spec("vpc", build_tags(name, f"{name}-vpc", "common", additional))
        )["Vpc"]["VpcId"]
        record.add("vpc", vpc)
        # AWS makes the main route table and default security group with the VPC and deletes them with it
        for table in ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["RouteTables"]:
            record.add("route-table", table["RouteTableId"])
        for group in ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["SecurityGroups"]:
            record.add("security-group", group["GroupId"])

        zones = sorted(z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"])[:MAX_ZONES]
        blocks = split_cidr(cidr, len(zones) + 1)
        public_cidrs, private_cidrs = split_cidr(blocks[0], len(zones)), blocks[1:]
        subnets = {}  # (role, zone) -> id
        for zone, public_cidr, private_cidr in zip(zones, public_cidrs, private_cidrs):
            for role, block, elb in (("public", public_cidr, ELB_ROLE), ("private", private_cidr, INTERNAL_ELB_ROLE)):
                extra = dict(additional, **{elb: "1", CLOUD_OWNED % eks_cluster: "owned"})
                subnet = ec2.create_subnet(
                    VpcId=vpc,
                    CidrBlock=block,
                    AvailabilityZone=zone,
                    TagSpecifications=_spec("subnet", build_tags(name, f"{name}-subnet-{role}-{zone}", role, extra)),
                )["Subnet"]["SubnetId"]
                subnets[(role, zone)] = record.add("subnet", subnet)

        igw = ec2.create_internet_gateway(
            TagSpecifications=_spec("internet-gateway", build_tags(name, f"{name}-igw", "common", additional))
        )["InternetGateway"]["InternetGatewayId"]
        ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
        record.add("internet-gateway", igw)

        nats = {}
        for zone in zones:
            eip = ec2.allocate_address(
                Domain="vpc",
                TagSpecifications=_spec("elastic-ip", build_tags(name, f"{name}-eip-common", "common", additional)),
            )["AllocationId"]
            record.add("elastic-ip", eip)
            nat = ec2.create_nat_gateway(
                SubnetId=subnets[("public", zone)],
                AllocationId=eip,
                TagSpecifications=_spec("natgateway", build_tags(name, f"{name}-nat", "common", additional)),
            )["NatGateway"]["NatGatewayId"]
            nats[zone] = record.add("nat-gateway", nat)
        # the NAT gateways' own interfaces (AWS creates and deletes them with the gateways)
        for eni in ec2.describe_network_interfaces(
            Filters=[{"Name": "subnet-id", "Values": [subnets[("public", z)] for z in zones]}]
        )["NetworkInterfaces"]:
            record.add("network-interface", eni["NetworkInterfaceId"])

        for (role, zone), subnet in subnets.items():
            extra = dict(additional, **{CLOUD_OWNED % eks_cluster: "owned"})
            table = ec2.create_route_table(
                VpcId=vpc,
                TagSpecifications=_spec("route-table", build_tags(name, f"{name}-rt-{role}-{zone}", "common", extra)),
            )["RouteTable"]["RouteTableId"]
            record.add("route-table", table)
            if role == "public":
                ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", GatewayId=igw)
            else:
                ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", NatGatewayId=nats[zone])
            ec2.associate_route_table(RouteTableId=table, SubnetId=subnet)

        group_name = f"{name}-node-eks-additional"
        # the cloud-provider key is kept only on the lb role's group (getSecurityGroupTagParams)
        sg_extra = {k: v for k, v in additional.items() if k != CLOUD_OWNED % name}
        record.add(
            "security-group",
            ec2.create_security_group(
                GroupName=group_name,
                Description="Kubernetes cluster {}: {}".format(name, "node-eks-additional"),
                VpcId=vpc,
                TagSpecifications=_spec(
                    "security-group", build_tags(name, group_name, "node-eks-additional", sg_extra)
                ),
            )["GroupId"],
        )

        role_name = spec.get("roleName") or f"{name}-iam-service-role"
        role_arn = iam.create_role(
            RoleName=role_name,
            AssumeRolePolicyDocument=EKS_TRUST,
            Tags=_tag_list(dict(additional, **{CLOUD_OWNED % name: "owned"})),
        )["Role"]["Arn"]
        record.add("iam-role", role_name)
        self._attach(iam, record, role_name, CONTROL_PLANE_POLICIES)

        arn = eks.create_cluster(
            name=eks_cluster,
            roleArn=role_arn,
            version=str(spec.get("version", "v1.35")).lstrip("v"),
            resourcesVpcConfig={"subnetIds": list(subnets.values())},
            tags=dict(additional, **{CLOUD_OWNED % eks_cluster: "owned"}),
        )["cluster"]["arn"]
        eks.tag_resource(resourceArn=arn, tags=build_tags(eks_cluster, eks_cluster, "common", additional))
        record.add("eks-cluster", eks_cluster)
        if spec.get("associateOIDCProvider"):
            # pkg/cloud/services/eks/oidc.go reconcileOIDCProvider: the IAM OIDC provider of the cluster's issuer,
            # tagged with the EKS cluster's tags (audience sts.amazonaws.com)
            issuer = eks.describe_cluster(name=eks_cluster)["cluster"]["identity"]["oidc"]["issuer"]
            tags = eks.describe_cluster(name=eks_cluster)["cluster"].get("tags") or {}
            record.add(
                "iam-oidc-provider",
                iam.create_open_id_connect_provider(
                    Url=issuer, ClientIDList=["sts.amazonaws.com"], ThumbprintList=["9" * 40], Tags=_tag_list(tags)
                )["OpenIDConnectProviderArn"],
            )

        private = [subnets[("private", z)] for z in zones]
        for pool, machine_pool in pools:
            pspec = machine_pool.get("spec") or {}
            nodegroup = pspec.get("eksNodegroupName") or machine_pool["metadata"]["name"]
            merged = dict(additional, **(pspec.get("additionalTags") or {}))
            node_role = pspec.get("roleName") or nodegroup_role_name(eks_cluster, nodegroup)
            node_arn = iam.create_role(
                RoleName=node_role,
                AssumeRolePolicyDocument=NODE_TRUST,
                Tags=_tag_list(dict(merged, **{CLOUD_OWNED % eks_cluster: "owned"})),
            )["Role"]["Arn"]
            record.add("iam-role", node_role)
            self._attach(iam, record, node_role, NODEGROUP_POLICIES)
            scaling = pspec.get("scaling") or {}
            eks.create_nodegroup(
                clusterName=eks_cluster,
                nodegroupName=nodegroup,
                subnets=private,
                nodeRole=node_arn,
                scalingConfig={
                    "minSize": scaling.get("minSize", 1),
                    "maxSize": scaling.get("maxSize", 3),
                    "desiredSize": (pool.get("spec") or {}).get("replicas", scaling.get("minSize", 1)),
                },
                labels=pspec.get("labels") or {},
                tags=dict(merged, **{CLOUD_OWNED % eks_cluster: "owned"}),
            )
            record.add("eks-nodegroup", f"{eks_cluster}/{nodegroup}")
        record.private_subnets, record.public_subnets = private, [subnets[("public", z)] for z in zones]
        record.zones = zones
        return record

    @staticmethod
    def _attach(iam, record, role, policies):
        for policy in policies:
            try:
                iam.attach_role_policy(RoleName=role, PolicyArn=policy)
            except iam.exceptions.NoSuchEntityException:
                record.skipped.append(f"attach {policy} to role {role}: moto serves no AWS managed policies")

    def destroy(self, record):
        """CAPA's reconcileDelete for one cluster, in its order."""
        ec2, iam, eks = (self.client(record.region, s) for s in ("ec2", "iam", "eks"))
        for item in record.ids.get("eks-nodegroup", []):
            cluster, nodegroup = item.split("/", 1)
            eks.delete_nodegroup(clusterName=cluster, nodegroupName=nodegroup)
        # the node groups' roles go with their pools (roles.go deleteNodegroupIAMRole), the control plane's role
        # after the EKS cluster (DeleteControlPlane); the control plane role was created first
        control_plane_role, *node_roles = record.ids.get("iam-role", [])
        for role in node_roles:
            self._delete_role(iam, role)
        for arn in record.ids.get("iam-oidc-provider", []):  # oidc.go deleteOIDCProvider
            iam.delete_open_id_connect_provider(OpenIDConnectProviderArn=arn)
        for cluster in record.ids.get("eks-cluster", []):
            eks.delete_cluster(name=cluster)
        self._delete_role(iam, control_plane_role)
        vpc = record.ids["vpc"][0]
        for group in ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["SecurityGroups"]:
            if group["GroupName"] != "default":
                ec2.delete_security_group(GroupId=group["GroupId"])
        for nat in record.ids.get("nat-gateway", []):
            ec2.delete_nat_gateway(NatGatewayId=nat)
        # AWS removes a NAT gateway's interface with it; moto leaves it behind, detached
        for eni in record.ids.get("network-interface", []):
            try:
                ec2.delete_network_interface(NetworkInterfaceId=eni)
            except ec2.exceptions.ClientError as exc:
                if "NotFound" not in str(exc):
                    raise
        for eip in record.ids.get("elastic-ip", []):
            ec2.release_address(AllocationId=eip)
        for table in ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["RouteTables"]:
            if any(a.get("Main") for a in table.get("Associations") or []):
                continue
            for assoc in table.get("Associations") or []:
                ec2.disassociate_route_table(AssociationId=assoc["RouteTableAssociationId"])
            ec2.delete_route_table(RouteTableId=table["RouteTableId"])
        for igw in record.ids.get("internet-gateway", []):
            ec2.detach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
            ec2.delete_internet_gateway(InternetGatewayId=igw)
        for subnet in record.ids.get("subnet", []):
            ec2.delete_subnet(SubnetId=subnet)
        ec2.delete_vpc(VpcId=vpc)

    @staticmethod
    def _delete_role(iam, role):
        for policy in iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"]:
            iam.detach_role_policy(RoleName=role, PolicyArn=policy["PolicyArn"])
        iam.delete_role(RoleName=role)

    def workload_leftovers(self, record, service="podinfo/podinfo", claim="data-0"):
        """What runs inside the cluster leaves in AWS, tagged for the EKS cluster: a Service's load balancer
        (cloud provider) and a PersistentVolume's EBS volume (EBS CSI driver). CAPA deletes neither."""
        ec2, elbv2 = self.client(record.region, "ec2"), self.client(record.region, "elbv2")
        owned = {CLOUD_OWNED % record.eks: "owned"}
        lb = elbv2.create_load_balancer(
            Name=("k8s-" + record.eks.replace("_", "-"))[:28] + "-svc",
            Subnets=record.public_subnets[:2],
            Type="network",
            Scheme="internet-facing",
            Tags=_tag_list(dict(owned, **{"kubernetes.io/service-name": service})),
        )["LoadBalancers"][0]["LoadBalancerArn"]
        made = {(record.region, "elbv2-load-balancer", lb)}
        volume = ec2.create_volume(
            Size=1,
            AvailabilityZone=record.zones[0],
            TagSpecifications=_spec("volume", dict(owned, **{"kubernetes.io/created-for/pvc/name": claim})),
        )["VolumeId"]
        made.add((record.region, "ebs-volume", volume))
        return made


def _pools(api, cluster):
    """(MachinePool, AWSManagedMachinePool) of a Cluster."""
    found = []
    ns, name = cluster["metadata"]["namespace"], cluster["metadata"]["name"]
    if ("cluster.x-k8s.io", "machinepools") not in api.resources:
        return found
    for pool in api.list("cluster.x-k8s.io/v1beta2", "MachinePool", ns):
        if (pool.get("spec") or {}).get("clusterName") != name:
            continue
        ref = (((pool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("infrastructureRef") or {}
        if ref.get("kind") == "AWSManagedMachinePool" and api.exists(
            "infrastructure.cluster.x-k8s.io/v1beta2", "AWSManagedMachinePool", ref["name"], ns
        ):
            found.append(
                (pool, api.get("infrastructure.cluster.x-k8s.io/v1beta2", "AWSManagedMachinePool", ref["name"], ns))
            )
    return found


# --- ACK ----------------------------------------------------------------------------------------


def _ack_tags(spec_tags, resource_tags):
    tags = dict(resource_tags)
    tags.update({t["key"]: t["value"] for t in spec_tags or []})
    return tags


def resource_tags_from_tree(path=REPO / "mgmt" / "aws" / "ack-controllers" / "helmreleases.yaml"):
    """Each ACK HelmRelease's values.resourceTags, by service (the release name without ``ack-``), as key=value."""
    found = {}
    for doc in yaml.safe_load_all(Path(path).read_text()):
        if (doc or {}).get("kind") == "HelmRelease":
            entries = ((doc.get("spec") or {}).get("values") or {}).get("resourceTags") or []
            found[doc["metadata"]["name"].removeprefix("ack-")] = [e.partition("=")[::2] for e in entries]
    return found


def expand_resource_tags(entries, service, namespace):
    """The runtime's expansion (aws-controllers-k8s/runtime pkg/runtime/tags.go ACKResourceTagFormats):
    %CONTROLLER_SERVICE% is the service alias, %K8S_NAMESPACE% the object's namespace. A tag whose value keeps
    another placeholder (%CONTROLLER_VERSION% is the image's git version, not known here) is left out."""
    tags = {}
    for key, value in entries:
        value = value.replace("%CONTROLLER_SERVICE%", service).replace("%K8S_NAMESPACE%", namespace)
        if "%" not in value:
            tags[key] = value
    return tags


class Ack:
    """The ACK s3, ec2, rds and iam controllers, against moto."""

    def __init__(
        self,
        endpoint,
        default_region="eu-north-1",
        resource_tags=None,
        account=None,
        system_namespace="ack-system",
        enable_carm=True,
    ):
        self.endpoint = endpoint
        self.default_region = default_region
        self.account = account  # the controllers' own account (None: moto's default, ACCOUNT)
        self.system_namespace = system_namespace  # ACK_SYSTEM_NAMESPACE: the charts set the release's namespace
        self.enable_carm = enable_carm
        self._carm_role = None  # the role of the object being reconciled (CARM), read by client()
        self._role_credentials = {}  # role -> its credentials (_credentials)
        self._clients = {}  # (role, region, service) -> client: making one costs more than most calls
        self.resource_tags = resource_tags_from_tree() if resource_tags is None else dict(resource_tags)
        self._obj = None  # the object being created, for the tags of its controller
        self._cluster = None  # the cluster of that object (its references resolve there)
        self.records = {}  # (cluster URL, kind, namespace, name) -> Record
        self.creations = []  # (kind, name, id) of every create call, adoptions excluded
        self.recreated = []  # (kind, name) re-created by the resync after their AWS resource vanished
        self.lock = threading.Lock()
        self.handlers = {
            "Bucket": (self._bucket, self._delete_bucket),
            "VPC": (self._vpc, self._delete_vpc),
            "Subnet": (self._subnet, self._delete_subnet),
            "SecurityGroup": (self._security_group, self._delete_security_group),
            "DBSubnetGroup": (self._db_subnet_group, self._delete_db_subnet_group),
            "DBInstance": (self._db_instance, self._delete_db_instance),
            "Role": (self._role, self._delete_role),
            "Policy": (self._policy, self._delete_policy),
            "User": (self._user, self._delete_user),
        }

    def client(self, region, service):
        if self._carm_role is None and self.account is None:
            return clients(self.endpoint, region)(service)
        key = (self._carm_role, region, service)
        with _SESSION_LOCK:
            if key not in self._clients:
                self._clients[key] = _SESSION.client(
                    service, endpoint_url=self.endpoint, region_name=region, **self._credentials(self._carm_role)
                )
            return self._clients[key]

    def _credentials(self, role):
        """The controllers' own credentials (role None) or those of a role they assume (sts AssumeRole from their
        own credentials; moto gives an assumed role's credentials its account). Clients are made from the one
        shared session with these (a session of their own would load every service model again)."""
        if role not in self._role_credentials:
            if role is None:
                base = clients(self.endpoint, self.default_region)("sts")
                role_arn, name = f"arn:aws:iam::{self.account}:role/ack-controller", "ack-controller"
            else:
                base = _SESSION.client(
                    "sts", endpoint_url=self.endpoint, region_name=self.default_region, **self._credentials(None)
                )
                role_arn, name = role, "ack"
            found = base.assume_role(RoleArn=role_arn, RoleSessionName=name)["Credentials"]
            self._role_credentials[role] = {
                "aws_access_key_id": found["AccessKeyId"],
                "aws_secret_access_key": found["SecretAccessKey"],
                "aws_session_token": found["SessionToken"],
            }
        return self._role_credentials[role]

    def own_account(self):
        return self.account or ACCOUNT

    def resolve(self, api, obj):
        """(account, role) ACK reconciles ``obj`` with; raises CarmError with the runtime's reason when the role the
        namespace's account maps to is not available (runtime v0.61.0 Reconcile, getOwnerAccountID, getRoleARN)."""
        namespace = obj["metadata"].get("namespace")
        owner = None
        if self.enable_carm and namespace not in IGNORED_NAMESPACES:
            try:
                annotations = api.get("v1", "Namespace", namespace)["metadata"].get("annotations") or {}
            except Exception:  # noqa: BLE001 - no such namespace: not cached, no annotation
                annotations = {}
            owner = annotations.get(OWNER_ACCOUNT)
        recorded = ((obj.get("status") or {}).get("ackResourceMetadata") or {}).get("ownerAccountID")
        lookup = owner is not None or (recorded is not None and recorded != self.own_account())
        account = owner if owner is not None else recorded or self.own_account()
        role = None
        if lookup and self.enable_carm:
            role = self._role_of(api, account)
            account = role.split(":")[4]  # arn.Parse: the account of the role ARN
        if recorded is not None and recorded != account:
            raise CarmError(
                f"Resource already exists in account {recorded}, but the role used for reconciliation is in "
                f"account {account}. ",
                terminal=True,
            )
        return account, role

    def _role_of(self, api, account):
        """cache/account.go GetValue through reconciler.go getRoleARN: the error texts are the runtime's."""
        try:
            data = api.get("v1", "ConfigMap", ROLE_ACCOUNT_MAP, self.system_namespace).get("data") or {}
            error = "key not found in CARM configmap" if account not in data else ""
            error = error or ("role value is empty in CARM configmap" if not data[account] else "")
        except Exception:  # noqa: BLE001 - the ConfigMap does not exist
            error = "CARM configmap not found"
        if error:
            raise CarmError(
                f'retrieving role ARN for account/team ID "{account}" from "{ROLE_ACCOUNT_MAP}" configmap: {error}'
            )
        return data[account]

    def region_of(self, obj):
        return (obj["metadata"].get("annotations") or {}).get("services.k8s.aws/region") or self.default_region

    def ref(self, obj, kind, ref, cluster=None):
        """The id a `{from: {name}}` reference to a `kind` resolves to (synced objects of the same cluster only)."""
        name = (ref.get("from") or {}).get("name")
        record = self.records.get((cluster, kind, obj["metadata"]["namespace"], name))
        if record is None:
            raise LookupError(f"{kind} {name} referenced by {obj['kind']} {obj['metadata']['name']} is not synced yet")
        return record.primary

    def apply(self, obj, cluster=None, carm=None):
        """Sync an ACK object of one cluster: adopt (services.k8s.aws/adoption-policy) or create its AWS resource.

        Each cluster's controller knows only its own objects (``cluster``: the API server's URL): after the pivot
        the management cluster's ACK sees objects with no status. aws-controllers-k8s/runtime reconciler.go
        (``reconcile``, ``handlePopulation``): with adopt-or-create it reads the resource first; the ec2
        controller's ``sdkFind`` (v1.20.0 pkg/resource/{vpc,subnet,security_group}/sdk.go) returns NotFound when
        status.vpcID / subnetID / id is unset, and only the ``services.k8s.aws/adoption-fields`` annotation
        (``vpcID``, ``subnetID``, ``id``: each resource.go ``PopulateResourceFromAnnotation``) sets it. Kinds
        named in spec (Bucket, DBSubnetGroup, DBInstance, Role, Policy, User) are read by that name. Not found:
        created (adopt-or-create) or AdoptedResourceNotFound (adopt). ``carm``: the (account, role) of resolve()."""
        key = (cluster, obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
        with self.lock:
            if key not in self.records:
                account, role = carm if carm is not None else (self.own_account(), None)
                record = Record(self.region_of(obj), account, role)
                self._obj, self._cluster, self._carm_role = obj, cluster, role
                annotations = obj["metadata"].get("annotations") or {}
                policy = annotations.get("services.k8s.aws/adoption-policy")
                found = None
                if policy in ("adopt", "adopt-or-create"):
                    try:
                        fields = json.loads(annotations.get("services.k8s.aws/adoption-fields", ""))
                    except ValueError:
                        fields = None  # runtime util.go ExtractAdoptionFields fails: adopt-or-create goes on without
                    found = self._find(obj, record, fields if isinstance(fields, dict) else {})
                    if found is None and policy == "adopt":
                        raise LookupError("AdoptedResourceNotFound: the adopted resource was not found")
                if found is not None:
                    rtype, rid, primary = found
                    record.add(rtype, rid)
                    record.primary = primary
                else:
                    self.handlers[obj["kind"]][0](obj, record)
                    self.creations.append((obj["kind"], obj["metadata"]["name"], record.primary))
                self.records[key] = record
            return self.records[key]

    _BY_ID = {"VPC": ("vpcID", "vpc"), "Subnet": ("subnetID", "subnet"), "SecurityGroup": ("id", "security-group")}

    def _find(self, obj, record, fields):
        """(type, id, primary) of the existing AWS resource ACK's ReadOne finds for ``obj``, or None."""
        spec, kind = obj["spec"], obj["kind"]
        if kind in self._BY_ID:
            field, rtype = self._BY_ID[kind]
            wanted = fields.get(field)
            if not wanted:
                return None  # sdkFind: requiredFieldsMissingFromReadManyInput -> NotFound
            return (rtype, wanted, wanted) if self._exists(rtype, record.region, wanted) else None
        rtype, name = {
            "Bucket": ("s3-bucket", spec.get("name")),
            "DBSubnetGroup": ("rds-subnet-group", spec.get("name")),
            "DBInstance": ("rds-instance", spec.get("dbInstanceIdentifier")),
            "Role": ("iam-role", spec.get("name")),
            "Policy": ("iam-policy", spec.get("name")),
            "User": ("iam-user", spec.get("name")),
        }[kind]
        found = self._exists(rtype, record.region, name)
        if not found:
            return None
        return (rtype, name, found if kind == "Policy" else name)  # a Policy's primary is its ARN

    def _exists(self, rtype, region, rid):
        """Whether the AWS resource is there (what ACK's ReadOne would find); a Policy answers its ARN."""
        service = {"s3-bucket": "s3", "rds-subnet-group": "rds", "rds-instance": "rds"}.get(rtype, "ec2")
        client = self.client(region, "iam" if rtype.startswith("iam-") else service)
        if rtype == "vpc":
            return bool(client.describe_vpcs(Filters=[{"Name": "vpc-id", "Values": [rid]}])["Vpcs"])
        if rtype == "subnet":
            return bool(client.describe_subnets(Filters=[{"Name": "subnet-id", "Values": [rid]}])["Subnets"])
        if rtype == "security-group":
            groups = client.describe_security_groups(Filters=[{"Name": "group-id", "Values": [rid]}])
            return bool(groups["SecurityGroups"])
        if rtype == "s3-bucket":
            return any(b["Name"] == rid for b in client.list_buckets().get("Buckets") or [])
        if rtype == "rds-subnet-group":
            return any(g["DBSubnetGroupName"] == rid for g in client.describe_db_subnet_groups()["DBSubnetGroups"])
        if rtype == "rds-instance":
            return any(i["DBInstanceIdentifier"] == rid for i in client.describe_db_instances()["DBInstances"])
        if rtype == "iam-role":  # iam-controller's sdkFind: GetRole, NoSuchEntity -> NotFound
            try:
                return bool(client.get_role(RoleName=rid)["Role"])
            except client.exceptions.NoSuchEntityException:
                return False
        if rtype == "iam-user":
            return any(u["UserName"] == rid for u in client.list_users()["Users"])
        if rtype == "iam-policy":
            return next(
                (
                    p["Arn"]
                    for p in client.list_policies(Scope="Local")["Policies"]
                    if rid in (p["PolicyName"], p["Arn"])
                ),
                False,
            )
        return False

    def repair(self, obj, cluster=None):
        """ACK's resync: a synced object whose AWS resource is gone is created again (ReadOne NotFound -> create)."""
        key = (cluster, obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
        with self.lock:
            record = self.records.get(key)
            if record is None or record.primary is None:
                return False
            rtype = next(iter(record.ids))
            self._carm_role = record.role
            if self._exists(rtype, record.region, record.primary):
                return False
            del self.records[key]
        self.apply(obj, cluster, (record.account, record.role))
        self.recreated.append((obj["kind"], obj["metadata"]["name"]))
        return True

    def delete(self, obj, cluster=None):
        key = (cluster, obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
        with self.lock:
            record = self.records.pop(key, None)
            if record is not None:
                self._carm_role = record.role  # deleted in the account it was made in
                try:
                    self.handlers[obj["kind"]][1](record)
                except botocore.exceptions.ClientError:
                    self.records[key] = record  # still there: the next reconcile tries again
                    raise

    def created(self, account=None):
        """(region, type, id) of what the controllers made and have not deleted (in ``account`` only, if given)."""
        found = set()
        for record in self.records.values():
            if account is None or record.account == account:
                found |= record.items()
        return found

    def _controller_tags(self):
        service = self._obj["apiVersion"].split(".", 1)[0]
        return expand_resource_tags(self.resource_tags.get(service, []), service, self._obj["metadata"]["namespace"])

    def _tags(self, spec, key="tags"):
        return _ack_tags(spec.get(key), self._controller_tags())

    # s3
    def _bucket(self, obj, record):
        spec, s3 = obj["spec"], self.client(record.region, "s3")
        name = spec["name"]
        config = spec.get("createBucketConfiguration") or {}
        kwargs = {"CreateBucketConfiguration": {"LocationConstraint": config["locationConstraint"]}} if config else {}
        s3.create_bucket(Bucket=name, **kwargs)
        if spec.get("objectOwnership"):
            s3.put_bucket_ownership_controls(
                Bucket=name, OwnershipControls={"Rules": [{"ObjectOwnership": spec["objectOwnership"]}]}
            )
        block = spec.get("publicAccessBlock")
        if block:
            s3.put_public_access_block(
                Bucket=name,
                PublicAccessBlockConfiguration={
                    "BlockPublicAcls": block.get("blockPublicACLs", False),
                    "IgnorePublicAcls": block.get("ignorePublicACLs", False),
                    "BlockPublicPolicy": block.get("blockPublicPolicy", False),
                    "RestrictPublicBuckets": block.get("restrictPublicBuckets", False),
                },
            )
        for rule in (spec.get("encryption") or {}).get("rules") or []:
            default = rule.get("applyServerSideEncryptionByDefault") or {}
            s3.put_bucket_encryption(
                Bucket=name,
                ServerSideEncryptionConfiguration={
                    "Rules": [
                        {
                            "ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": default.get("sseAlgorithm")},
                            "BucketKeyEnabled": bool(rule.get("bucketKeyEnabled")),
                        }
                    ]
                },
            )
        if (spec.get("versioning") or {}).get("status"):
            s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": spec["versioning"]["status"]})
        tags = _ack_tags((spec.get("tagging") or {}).get("tagSet"), self._controller_tags())
        s3.put_bucket_tagging(Bucket=name, Tagging={"TagSet": _tag_list(tags)})
        record.primary = record.add("s3-bucket", name)

    def _delete_bucket(self, record):
        s3 = self.client(record.region, "s3")
        for name in record.ids["s3-bucket"]:
            versions = s3.list_object_versions(Bucket=name)
            for item in (versions.get("Versions") or []) + (versions.get("DeleteMarkers") or []):
                s3.delete_object(Bucket=name, Key=item["Key"], VersionId=item["VersionId"])
            s3.delete_bucket(Bucket=name)

    # ec2
    def _vpc(self, obj, record):
        spec, ec2 = obj["spec"], self.client(record.region, "ec2")
        blocks = spec["cidrBlocks"]
        vpc = ec2.create_vpc(CidrBlock=blocks[0], TagSpecifications=_spec("vpc", self._tags(spec)))["Vpc"]["VpcId"]
        for block in blocks[1:]:
            ec2.associate_vpc_cidr_block(VpcId=vpc, CidrBlock=block)
        for attr, arg in (("enableDNSSupport", "EnableDnsSupport"), ("enableDNSHostnames", "EnableDnsHostnames")):
            if attr in spec:
                ec2.modify_vpc_attribute(VpcId=vpc, **{arg: {"Value": bool(spec[attr])}})
        record.primary = record.add("vpc", vpc)
        for table in ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["RouteTables"]:
            record.add("route-table", table["RouteTableId"])
        for group in ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["SecurityGroups"]:
            record.add("security-group", group["GroupId"])

    def _delete_vpc(self, record):
        self.client(record.region, "ec2").delete_vpc(VpcId=record.primary)

    def _subnet(self, obj, record):
        spec, ec2 = obj["spec"], self.client(record.region, "ec2")
        subnet = ec2.create_subnet(
            VpcId=self.ref(obj, "VPC", spec["vpcRef"], self._cluster),
            CidrBlock=spec["cidrBlock"],
            AvailabilityZone=spec["availabilityZone"],
            TagSpecifications=_spec("subnet", self._tags(spec)),
        )["Subnet"]["SubnetId"]
        record.primary = record.add("subnet", subnet)

    def _delete_subnet(self, record):
        self.client(record.region, "ec2").delete_subnet(SubnetId=record.primary)

    def _security_group(self, obj, record):
        spec, ec2 = obj["spec"], self.client(record.region, "ec2")
        group = ec2.create_security_group(
            GroupName=spec["name"],
            Description=spec["description"],
            VpcId=self.ref(obj, "VPC", spec["vpcRef"], self._cluster),
            TagSpecifications=_spec("security-group", self._tags(spec)),
        )["GroupId"]
        permissions = [
            {
                "IpProtocol": r["ipProtocol"],
                "FromPort": r["fromPort"],
                "ToPort": r["toPort"],
                "IpRanges": [{"CidrIp": i["cidrIP"], "Description": i.get("description", "")} for i in r["ipRanges"]],
            }
            for r in spec.get("ingressRules") or []
        ]
        if permissions:
            ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=permissions)
        record.primary = record.add("security-group", group)

    def _delete_security_group(self, record):
        self.client(record.region, "ec2").delete_security_group(GroupId=record.primary)

    # rds
    def _db_subnet_group(self, obj, record):
        spec, rds = obj["spec"], self.client(record.region, "rds")
        rds.create_db_subnet_group(
            DBSubnetGroupName=spec["name"],
            DBSubnetGroupDescription=spec["description"],
            SubnetIds=[self.ref(obj, "Subnet", r, self._cluster) for r in spec["subnetRefs"]],
            Tags=_tag_list(self._tags(spec)),
        )
        record.primary = record.add("rds-subnet-group", spec["name"])

    def _delete_db_subnet_group(self, record):
        self.client(record.region, "rds").delete_db_subnet_group(DBSubnetGroupName=record.primary)

    def _db_instance(self, obj, record):
        spec, rds = obj["spec"], self.client(record.region, "rds")
        kwargs = {
            "DBInstanceIdentifier": spec["dbInstanceIdentifier"],
            "DBInstanceClass": spec["dbInstanceClass"],
            "Engine": spec["engine"],
            "EngineVersion": spec.get("engineVersion"),
            "AllocatedStorage": spec.get("allocatedStorage"),
            "StorageType": spec.get("storageType"),
            "StorageEncrypted": spec.get("storageEncrypted"),
            "PubliclyAccessible": spec.get("publiclyAccessible"),
            "MultiAZ": spec.get("multiAZ"),
            "DBName": spec.get("dbName"),
            "MasterUsername": spec.get("masterUsername"),
            "ManageMasterUserPassword": spec.get("manageMasterUserPassword"),
            "BackupRetentionPeriod": spec.get("backupRetentionPeriod"),
            "CopyTagsToSnapshot": spec.get("copyTagsToSnapshot"),
            "DeletionProtection": spec.get("deletionProtection"),
            "DBSubnetGroupName": self.ref(obj, "DBSubnetGroup", spec["dbSubnetGroupRef"], self._cluster),
            "VpcSecurityGroupIds": [
                self.ref(obj, "SecurityGroup", r, self._cluster) for r in spec.get("vpcSecurityGroupRefs") or []
            ],
            "Tags": _tag_list(self._tags(spec)),
        }
        rds.create_db_instance(**{k: v for k, v in kwargs.items() if v is not None})
        record.primary = record.add("rds-instance", spec["dbInstanceIdentifier"])

    def _delete_db_instance(self, record):
        self.client(record.region, "rds").delete_db_instance(
            DBInstanceIdentifier=record.primary, SkipFinalSnapshot=True
        )

    # iam (global; the client's region does not matter)
    def _role(self, obj, record):
        spec, iam = obj["spec"], self.client(record.region, "iam")
        kwargs = {
            "RoleName": spec["name"],
            "AssumeRolePolicyDocument": spec["assumeRolePolicyDocument"],
            "Tags": _tag_list(self._tags(spec)),
        }
        for field, arg in (("description", "Description"), ("maxSessionDuration", "MaxSessionDuration")):
            if field in spec:
                kwargs[arg] = spec[field]
        iam.create_role(**kwargs)
        record.primary = record.add("iam-role", spec["name"])
        for policy in spec.get("policies") or []:
            try:
                iam.attach_role_policy(RoleName=spec["name"], PolicyArn=policy)
            except iam.exceptions.NoSuchEntityException:
                record.skipped.append(f"attach {policy} to role {spec['name']}: moto serves no AWS managed policies")

    def _delete_role(self, record):
        iam = self.client(record.region, "iam")
        for policy in iam.list_attached_role_policies(RoleName=record.primary)["AttachedPolicies"]:
            iam.detach_role_policy(RoleName=record.primary, PolicyArn=policy["PolicyArn"])
        iam.delete_role(RoleName=record.primary)

    def _policy(self, obj, record):
        spec, iam = obj["spec"], self.client(record.region, "iam")
        arn = iam.create_policy(
            PolicyName=spec["name"],
            PolicyDocument=spec["policyDocument"],
            Description=spec.get("description", ""),
            Tags=_tag_list(self._tags(spec)),
        )["Policy"]["Arn"]
        record.add("iam-policy", spec["name"])
        record.primary = arn

    def _delete_policy(self, record):
        self.client(record.region, "iam").delete_policy(PolicyArn=record.primary)

    def _user(self, obj, record):
        spec, iam = obj["spec"], self.client(record.region, "iam")
        iam.create_user(UserName=spec["name"], Tags=_tag_list(self._tags(spec)))
        for ref in spec.get("policyRefs") or []:
            iam.attach_user_policy(UserName=spec["name"], PolicyArn=self.ref(obj, "Policy", ref, self._cluster))
        record.primary = record.add("iam-user", spec["name"])

    def _delete_user(self, record):
        iam = self.client(record.region, "iam")
        for policy in iam.list_attached_user_policies(UserName=record.primary)["AttachedPolicies"]:
            iam.detach_user_policy(UserName=record.primary, PolicyArn=policy["PolicyArn"])
        iam.delete_user(UserName=record.primary)


OWNER_ACCOUNT = "services.k8s.aws/owner-account-id"  # apis/core/v1alpha1/annotations.go AnnotationOwnerAccountID
ROLE_ACCOUNT_MAP = "ack-role-account-map"  # pkg/runtime/cache/account.go ACKRoleAccountMap
IGNORED_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")  # service_controller.go: cache Ignored
UNAVAILABLE_ROLE = "IAM Role is not available"  # pkg/condition/condition.go UnavailableIAMRoleMessage


class CarmError(LookupError):
    """The role of an object's account is not available (or the object's account drifted: ``terminal``)."""

    def __init__(self, reason, terminal=False):
        super().__init__(reason)
        self.reason, self.terminal = reason, terminal


# Creation order: what a reference points at first (ACK retries until the reference is synced).
ACK_ORDER = ("Policy", "Role", "User", "Bucket", "VPC", "Subnet", "SecurityGroup", "DBSubnetGroup", "DBInstance")


class AckController:
    """Reconciles the ACK objects of every emulated cluster against ``Ack`` (a flux_world.World controller).

    An object gets the finalizer ``finalizers.<service>.services.k8s.aws/<Kind>`` (s3-controller v1.10.0
    pkg/resource/bucket/descriptor.go FinalizerString; the other controllers come from the same generator),
    status.ackResourceMetadata and the ACK.ResourceSynced condition once its AWS resource exists; one whose
    reference is not synced yet gets ACK.ResourceSynced False with the reason. Deleting an object deletes its
    AWS resource (the tree's deletionPolicy: delete), then the finalizer goes."""

    def __init__(self, world, ack, needs_deployment=False, resync=None):
        """``needs_deployment``: a service's controller acts on a cluster only while its Deployment (the ACK chart's
        release, ``ack-<service>``) has ready replicas there, as a scaled-down controller does nothing.
        ``resync``: seconds between drift checks that create again what vanished behind the controller's back
        (ACK's periodic resync; None: never)."""
        self.ack = ack
        self.world = world
        self.needs_deployment = needs_deployment
        self.resync = resync
        self._last_resync = 0.0
        world.controllers.append(self)

    @staticmethod
    def _running(api, service):
        try:
            deployments = api.list("apps/v1", "Deployment")
        except Exception:  # noqa: BLE001 - no apps/v1 served: nothing runs
            return False
        return any(
            d["metadata"]["name"] == f"ack-{service}"
            and (d.get("spec") or {}).get("replicas", 1) > 0
            and (d.get("status") or {}).get("readyReplicas", 0) > 0
            for d in deployments
        )

    def reconcile(self, api):
        now = time.monotonic()
        resync = self.resync is not None and now - self._last_resync >= self.resync
        if resync:
            self._last_resync = now
        for kind in ACK_ORDER:
            group = next(g for g, k in ACK_KINDS if k == kind)
            if (group, plural_of(group, kind)) not in api.resources:
                continue
            if self.needs_deployment and not self._running(api, group.split(".", 1)[0]):
                continue
            for obj in api.list(f"{group}/v1alpha1", kind):
                finalizer = f"finalizers.{group}/{kind}"
                finalizers = obj["metadata"].get("finalizers") or []
                if obj["metadata"].get("deletionTimestamp"):
                    if finalizer in finalizers:
                        try:
                            self.ack.delete(obj, api.url)
                        except botocore.exceptions.ClientError:
                            continue  # AWS refused (a dependency not deleted yet): the finalizer stays, ACK requeues
                        self._finalizers(api, obj, [f for f in finalizers if f != finalizer])
                    continue
                if finalizer not in finalizers:
                    obj = self._finalizers(api, obj, finalizers + [finalizer])
                synced = (obj.get("status") or {}).get("ackResourceMetadata")
                if (
                    synced
                    and (api.url, kind, obj["metadata"]["namespace"], obj["metadata"]["name"]) in self.ack.records
                ):
                    if resync:
                        self.ack.repair(obj, api.url)
                    continue
                try:
                    record = self.ack.apply(obj, api.url, self.ack.resolve(api, obj))
                except CarmError as exc:
                    if not exc.terminal:  # handleCacheError: message and reason as the runtime sets them
                        self._status(api, obj, "False", UNAVAILABLE_ROLE, reason=exc.reason)
                    continue  # account drift: Reconcile returns the terminal error before any status patch
                except LookupError as exc:
                    self._status(api, obj, "False", str(exc))
                    continue
                self._status(api, obj, "True", "Resource synced successfully", record)

    @staticmethod
    def _finalizers(api, obj, finalizers):
        res = api.resource_for(obj["apiVersion"], obj["kind"])
        return api.patch(
            res,
            obj["metadata"]["namespace"],
            obj["metadata"]["name"],
            "merge",
            {"metadata": {"finalizers": finalizers or None}},
            None,
            "ack",
        )

    @staticmethod
    def _status(api, obj, value, message, record=None, reason=None):
        status = copy.deepcopy(obj.get("status") or {})
        condition = {"type": "ACK.ResourceSynced", "status": value, "message": message}
        if reason is not None:
            condition["reason"] = reason
        status["conditions"] = [condition]
        if record is not None:
            status["ackResourceMetadata"] = {"ownerAccountID": record.account or ACCOUNT, "region": record.region}
            # the AWS-generated id in its status field (ec2-controller v1.20.0 apis/v1alpha1: VPCStatus.VPCID
            # json vpcID, SubnetStatus.SubnetID json subnetID, SecurityGroupStatus.ID json id)
            field = {"VPC": "vpcID", "Subnet": "subnetID", "SecurityGroup": "id"}.get(obj["kind"])
            if field:
                status[field] = record.primary
        if status != (obj.get("status") or {}):
            res = api.resource_for(obj["apiVersion"], obj["kind"])
            api.patch(
                res, obj["metadata"]["namespace"], obj["metadata"]["name"], "merge", {"status": status}, "status", "ack"
            )


# --- the trees ----------------------------------------------------------------------------------


def flux_substitute(obj, variables):
    """Flux postBuild substitution of one object, as kustomize-controller does it (tests/substrate/flux_varsub.py:
    envsubst on its go-yaml v2 serialisation, read back as YAML 1.1; a timestamp stays a string)."""
    from tests.substrate import flux_varsub

    return flux_varsub.substitute(obj, flux_varsub.merge_variables([], variables))


def tree_objects(paths, variables):
    """The objects of the tree files at paths (relative to the repository), Flux postBuild-substituted."""
    found = []
    for rel in paths:
        for path in sorted((REPO / rel).glob("*.yaml")) if (REPO / rel).is_dir() else [REPO / rel]:
            if path.name in ("kustomization.yaml", "flux-ks.yaml"):
                continue
            for doc in yaml.safe_load_all(path.read_text()):
                if isinstance(doc, dict) and doc.get("kind"):
                    found.append(flux_substitute(doc, variables))
    return found


_SESSION_LOCK = threading.Lock()


# (endpoint, account, role) -> (the role's assumed credentials, {(region, service): client}): account_clients
# takes them again while moto still knows those credentials (a reset forgets them)
_ACCOUNT_CLIENTS = {}


def account_clients(endpoint, account, role="inventory", assume=True):
    """test_aws_sweep_world.clients for ``account``: the credentials of ``role`` assumed there (moto; with
    ``assume`` false, the default caller's). The clients come from one shared session with the credentials given
    per client: a new boto3 session would load every service model again (a quarter of a several-account test).
    The role's credentials and clients are kept while moto answers for them as that role in that account (a reset
    forgets assumed roles, and moto then takes the keys for its default account's): making the clients again is
    most of an inventory."""
    creds, made = {}, {}
    if assume:
        with _SESSION_LOCK:
            creds, made = _ACCOUNT_CLIENTS.get((endpoint, account, role), ({}, {}))
        if not creds or not _still_assumed(_client_of(endpoint, creds, made, "eu-north-1", "sts"), account, role):
            sts = _SESSION.client("sts", endpoint_url=endpoint, region_name="eu-north-1")
            found = sts.assume_role(RoleArn=f"arn:aws:iam::{account}:role/{role}", RoleSessionName=role)["Credentials"]
            creds = {
                "aws_access_key_id": found["AccessKeyId"],
                "aws_secret_access_key": found["SecretAccessKey"],
                "aws_session_token": found["SessionToken"],
            }
            made = {}
            with _SESSION_LOCK:
                _ACCOUNT_CLIENTS[(endpoint, account, role)] = (creds, made)

    def for_region(_endpoint, region):
        return lambda service: _client_of(endpoint, creds, made, region, service)

    return for_region


def _client_of(endpoint, creds, made, region, service):
    with _SESSION_LOCK:  # a boto3 session is not thread-safe, and the emulated controllers use it too
        if (region, service) not in made:
            made[(region, service)] = _SESSION.client(service, endpoint_url=endpoint, region_name=region, **creds)
        return made[(region, service)]


def _still_assumed(sts, account, role):
    """moto still takes the client's credentials as role's session in account (GetCallerIdentity's ARN)."""
    try:
        arn = sts.get_caller_identity()["Arn"]
    except botocore.exceptions.ClientError:  # a server that checks keys refuses ones it forgot
        return False
    return arn == f"arn:aws:sts::{account}:assumed-role/{role}/{role}"


def inventory_of(endpoint, account, regions=("eu-north-1", "eu-west-1", "eu-west-2")):
    """inventory() of another account (through a role assumed there), in ``regions``."""
    import tests.integration.test_aws_sweep_world as sweep_world  # pylint: disable=import-outside-toplevel

    saved = (sweep_world.clients, globals()["clients"], sweep_world.REGIONS)
    sweep_world.clients = globals()["clients"] = account_clients(endpoint, account)
    sweep_world.REGIONS = tuple(regions)
    try:
        return inventory(endpoint)
    finally:
        sweep_world.clients, globals()["clients"], sweep_world.REGIONS = saved


def inventory(endpoint):
    """Every resource of the kinds the sweep and this world know, tagged or not: (region, type, id)."""
    found = _sweep_inventory(endpoint)
    for region in ("eu-north-1", "eu-west-1"):
        ec2 = clients(endpoint, region)("ec2")
        found |= {(region, "ebs-volume", v["VolumeId"]) for v in ec2.describe_volumes()["Volumes"]}
    iam = clients(endpoint, "eu-north-1")("iam")
    found |= {("global", "iam-policy", p["PolicyName"]) for p in iam.list_policies(Scope="Local")["Policies"]}
    found |= {
        ("global", "iam-oidc-provider", p["Arn"])
        for p in iam.list_open_id_connect_providers()["OpenIDConnectProviderList"]
    }
    return found
