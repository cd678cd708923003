# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The AWS orphan sweep: delete (or report) exactly what a krops environment owns in AWS.

Targets come from bootstrap.toml: every ``[[environments.<env>.teardown.aws-workloads]]``
entry plus, optionally, the self-managed management cluster. A resource is a candidate
only when it is tagged ``sigs.k8s.io/cluster-api-provider-aws/cluster/<cluster>=owned`` or
``kubernetes.io/cluster/<cluster>=owned`` for a target cluster, or when bootstrap.toml names
it exactly (EKS cluster, RDS instance, S3 bucket pattern, global IAM roles and users,
CloudFormation stack); IAM roles also match ``<prefix>-`` on a prefix boundary. A few
dependants that carry no tags of their own are swept with their owner and say so in
``reason``: node groups and pod identity associations of an owned EKS cluster, the DB
subnet group of a swept RDS instance (when no other instance uses it) and detached network
interfaces inside an owned VPC.

Per region, in this order (regions run concurrently):
  EKS node groups (wait), EKS pod identity associations, EKS clusters (wait), RDS instances
  (no final snapshot, wait) and their subnet groups, ELBv2 and classic load balancers,
  target groups, NAT gateways (wait), elastic IPs, detached network interfaces, subnets,
  internet gateways (detached first), non-main route tables, security groups (every rule
  revoked first), VPCs.
Then the global phase: S3 buckets (every version and delete marker first), IAM roles
(managed policies detached, inline policies and instance profiles deleted first), IAM
users (login profile, access keys, MFA devices, groups, policies first) and the
clusterawsadm CloudFormation stack in each target region (deletion started, not waited).
Finally every region is listed again: anything owned that is left is a leftover.

Report mode lists the same candidates read-only and keeps those older than N hours.
"""

from __future__ import annotations

import datetime
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.krops.platform.plugins.module_utils import aws
from ansible_collections.krops.platform.plugins.module_utils import config as config_mod
from ansible_collections.krops.platform.plugins.module_utils import ownership
from ansible_collections.krops.platform.plugins.module_utils import profiles
from ansible_collections.krops.platform.plugins.module_utils.aws import BotoCoreError, ClientError

# What the Resource Groups Tagging API reports, as "<service>:<resource type>" of the ARN, mapped to the sweep's
# type that lists and deletes it. An owned ARN of any other type is a leftover the sweep cannot delete.
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
}
GLOBAL = "global"
ABSENT = "absent"  # what a delete handler answers when there was nothing to delete

# Poll delays while waiting for a deletion or retrying a DependencyViolation (seconds).
POLL_FIRST = 0.5
POLL_MAX = 30.0
# The first poll of a wait comes after this part of the type's expected deletion time (times EXPECTED_SCALE,
# which the benchmark lowers with its scaled-down deletions): fewer calls, little lateness.
FIRST_POLL_SHARE = 0.6
EXPECTED_SCALE = 1.0
DEPENDENCY_BUDGET = 180


class SweepError(Exception):
    """The sweep cannot start: bad options or configuration. The message says what to fix."""


class Target:
    """One cluster whose AWS resources the sweep owns."""

    def __init__(self, cluster, region, eks_name="", rds_instance="", role="workload"):
        self.cluster = cluster
        self.region = region
        self.eks_name = eks_name
        self.rds_instance = rds_instance
        self.role = role

    @property
    def names(self):
        """The exact names CAPA tags this cluster's resources with: the CAPI cluster and its EKS cluster."""
        return [n for n in (self.cluster, self.eks_name) if n]

    def as_dict(self):
        return {
            "cluster": self.cluster,
            "region": self.region,
            "eks_cluster_name": self.eks_name,
            "rds_instance": self.rds_instance,
            "role": self.role,
        }


def environment_targets(cfg, name, include_management=True):
    """Every cluster of environment ``name`` with its region: each aws-workloads entry in its own region,
    the management cluster in the environment's mgmt-region (checked by the loader)."""
    env = cfg.environment(name)
    teardown = env.get("teardown") or {}
    workloads = teardown.get("aws-workloads") or []
    targets = [
        Target(w["cluster-name"], w["region"], w["eks-cluster-name"], w.get("rds-instance", "")) for w in workloads
    ]
    if include_management:
        targets.append(
            Target(
                env["mgmt-cluster"],
                env.get("mgmt-region") or "",
                teardown.get("mgmt-eks-cluster-name", ""),
                "",
                role="management",
            )
        )
    return targets


def targets_from_config(cfg, environment=None, include_management=True, regions=None):
    """(targets, all_regions_of_the_environment) from a loaded Config; SweepError on bad input."""
    name = environment or cfg.selected
    env = cfg.environment(name)
    if profiles.of(env).cloud != "aws":
        raise SweepError(
            "environment {!r} in {} is of kind {}; aws_orphan_sweep sweeps only environments of kind aws "
            "(valid: {})".format(
                name,
                cfg.path,
                env["kind"],
                ", ".join(n for n in cfg.environment_names if profiles.of(cfg.environment(n)).cloud == "aws") or "none",
            )
        )
    every = environment_targets(cfg, name, True)
    all_regions = _unique(t.region for t in every)
    targets = every if include_management else [t for t in every if t.role != "management"]
    if regions:
        unknown = [r for r in regions if r not in all_regions]
        if unknown:
            raise SweepError(
                "regions {} are not regions of environment {!r} (its regions: {}); fix the regions option".format(
                    ", ".join(unknown), name, ", ".join(all_regions) or "none"
                )
            )
        targets = [t for t in targets if t.region in regions]
    if not targets:
        raise SweepError(
            f"environment {name!r} in {cfg.path} names no AWS cluster to sweep (no aws-workloads and "
            "include_management is false)"
        )
    return targets, all_regions


def arn_type(arn):
    """'<service>:<resource type>' of an ARN, e.g. 'ec2:volume' for arn:aws:ec2:eu-north-1:1:volume/vol-1."""
    parts = arn.split(":", 5)
    if len(parts) < 6:
        return ""
    resource = parts[5]
    kind = resource.split("/", 1)[0] if "/" in resource else (resource.split(":", 1)[0] if ":" in resource else "")
    return f"{parts[2]}:{kind}"


def _unique(items):
    seen = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def _now():
    return datetime.datetime.now(datetime.UTC)


def _resource(region, rtype, rid, cluster, created=None, reason="", **meta):
    return {
        "region": region,
        "type": rtype,
        "id": rid,
        "cluster": cluster,
        "created": created,
        "reason": reason,
        "meta": meta,
    }


def public(resource, outcome, reason=None):
    """The result entry users see for a resource."""
    return {
        "region": resource["region"],
        "type": resource["type"],
        "id": resource["id"],
        "cluster": resource["cluster"],
        "outcome": outcome,
        "reason": resource.get("reason", "") if reason is None else reason,
    }


class _Discovery:
    """Read-only listing of everything the targets own in one region (or globally)."""

    def __init__(self, sweep, region):
        self.sweep = sweep
        self.region = region
        self.targets = [t for t in sweep.targets if t.region == region]
        self.clusters = [t.cluster for t in self.targets]
        self.errors = []
        self.warnings = []
        self.candidates = []
        self._cache = {}

    def owner_of(self, tags):
        """The owning cluster ("" when only the krops environment tag proves it), or None (ownership.py)."""
        claim = self.sweep.ownership.owner(tags)
        return None if claim is None else claim[0]

    def client(self, service):
        return self.sweep.conn.client(service, self.region)

    def _guard(self, rtype, func):
        try:
            return func() or []
        except aws.UnsupportedOperation as exc:
            self.warnings.append(f"{self.region}: {rtype} skipped: {exc}")
        except (ClientError, BotoCoreError, aws.AwsError) as exc:
            self.errors.append(
                {
                    "region": self.region,
                    "type": rtype,
                    "error": f"listing {rtype} in {self.region} failed: {aws.error_message(exc)}",
                }
            )
        return []

    def region_resources(self, with_age=False):
        """Every owned resource of the region, one listing per row of the type table, in deletion order."""
        found = []
        for rtype in REGION_TYPES:
            found += self._guard(rtype.name, lambda t=rtype: t.list(self, with_age))
        return found

    # listings other listings depend on are made once per discovery
    def _eks(self):
        if self._cache.get("eks") is None:
            self._cache["eks"] = self._guard("eks-cluster", self.eks_clusters)
        return self._cache["eks"]

    def _vpcs(self):
        if self._cache.get("vpc") is None:
            self._cache["vpc"] = self._guard("vpc", lambda: self.ec2_owned("describe_vpcs", "Vpcs", "VpcId", "vpc"))
        return self._cache["vpc"]

    # --- EKS
    def eks_clusters(self):
        client = self.client("eks")
        named = {t.eks_name: t.cluster for t in self.targets if t.eks_name}
        found = []
        for name in aws.paginate(client, "list_clusters", "clusters"):
            try:
                info = aws.call(client, "describe_cluster", name=name)["cluster"]
            except ClientError as exc:
                if aws.is_not_found(exc):
                    continue
                raise
            owner = named.get(name)
            reason = "named by bootstrap.toml" if owner else ""
            if owner is None:
                owner = self.owner_of(info.get("tags") or {})
            if owner is not None:
                found.append(
                    _resource(
                        self.region,
                        "eks-cluster",
                        name,
                        owner,
                        info.get("createdAt"),
                        reason,
                        status=info.get("status"),
                    )
                )
        return found

    def nodegroups(self, eks, with_age):
        client = self.client("eks")
        found = []
        for cluster in eks:
            for name in aws.paginate(client, "list_nodegroups", "nodegroups", clusterName=cluster["id"]):
                created = None
                if with_age:
                    created = aws.call(client, "describe_nodegroup", clusterName=cluster["id"], nodegroupName=name)[
                        "nodegroup"
                    ].get("createdAt")
                found.append(
                    _resource(
                        self.region,
                        "eks-nodegroup",
                        "{}/{}".format(cluster["id"], name),
                        cluster["cluster"],
                        created,
                        "node group of EKS cluster {}".format(cluster["id"]),
                        eks=cluster["id"],
                        name=name,
                    )
                )
        return found

    def pod_identities(self, eks):
        client = self.client("eks")
        found = []
        for cluster in eks:
            for assoc in aws.paginate(
                client, "list_pod_identity_associations", "associations", clusterName=cluster["id"]
            ):
                found.append(
                    _resource(
                        self.region,
                        "eks-pod-identity-association",
                        "{}/{}".format(cluster["id"], assoc["associationId"]),
                        cluster["cluster"],
                        None,
                        "pod identity association of EKS cluster {} ({}/{})".format(
                            cluster["id"], assoc.get("namespace"), assoc.get("serviceAccount")
                        ),
                        eks=cluster["id"],
                        association=assoc["associationId"],
                    )
                )
        return found

    # --- RDS
    def rds(self):
        client = self.client("rds")
        named = {t.rds_instance: t.cluster for t in self.targets if t.rds_instance}
        instances = aws.paginate(client, "describe_db_instances", "DBInstances")
        found, kept_groups = [], set()
        for inst in instances:
            ident = inst["DBInstanceIdentifier"]
            owner = named.get(ident)
            reason = "named by bootstrap.toml" if owner else ""
            if owner is None:
                owner = self.owner_of(inst.get("TagList") or [])
            group = (inst.get("DBSubnetGroup") or {}).get("DBSubnetGroupName")
            if owner is not None:
                found.append(
                    _resource(
                        self.region,
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
                    _resource(
                        self.region,
                        "rds-subnet-group",
                        group,
                        inst["cluster"],
                        None,
                        "subnet group of RDS instance {}".format(inst["id"]),
                    )
                )
        return found + groups

    # --- load balancers
    def elbv2(self):
        client = self.client("elbv2")
        lbs = aws.paginate(client, "describe_load_balancers", "LoadBalancers")
        created = {lb["LoadBalancerArn"]: lb for lb in lbs}
        return [
            _resource(
                self.region,
                "elbv2-load-balancer",
                arn,
                owner,
                created[arn].get("CreatedTime"),
                name=created[arn].get("LoadBalancerName"),
            )
            for arn, owner in self._elbv2_owned(client, list(created))
        ]

    def target_groups(self):
        client = self.client("elbv2")
        groups = aws.paginate(client, "describe_target_groups", "TargetGroups")
        return [
            _resource(self.region, "elbv2-target-group", arn, owner)
            for arn, owner in self._elbv2_owned(client, [g["TargetGroupArn"] for g in groups])
        ]

    def _elbv2_owned(self, client, arns):
        owned = []
        for start in range(0, len(arns), 20):
            described = aws.call(client, "describe_tags", ResourceArns=arns[start : start + 20])
            for desc in described.get("TagDescriptions") or []:
                owner = self.owner_of(desc.get("Tags") or [])
                if owner is not None:
                    owned.append((desc["ResourceArn"], owner))
        return owned

    def classic_elb(self):
        client = self.client("elb")
        lbs = aws.paginate(client, "describe_load_balancers", "LoadBalancerDescriptions")
        created = {lb["LoadBalancerName"]: lb.get("CreatedTime") for lb in lbs}
        names = list(created)
        found = []
        for start in range(0, len(names), 20):
            described = aws.call(client, "describe_tags", LoadBalancerNames=names[start : start + 20])
            for desc in described.get("TagDescriptions") or []:
                owner = self.owner_of(desc.get("Tags") or [])
                if owner is not None:
                    found.append(
                        _resource(
                            self.region,
                            "elb-load-balancer",
                            desc["LoadBalancerName"],
                            owner,
                            created.get(desc["LoadBalancerName"]),
                        )
                    )
        return found

    # --- EC2
    def _ec2_list(self, operation, key, filters, filter_arg="Filters"):
        return aws.paginate(self.client("ec2"), operation, key, **{filter_arg: filters})

    def ec2_owned(self, operation, key, id_key, rtype, filter_arg="Filters", extra=None):
        found = []
        for item in self._ec2_list(operation, key, [], filter_arg):
            owner = self.owner_of(item.get("Tags") or item.get("TagSet") or [])
            if owner is not None:
                meta = extra(item) if extra else {}
                found.append(_resource(self.region, rtype, item[id_key], owner, item.get("CreateTime"), **meta))
        return found

    def snapshots(self):
        found = []
        for snap in aws.paginate(self.client("ec2"), "describe_snapshots", "Snapshots", OwnerIds=["self"]):
            owner = self.owner_of(snap.get("Tags") or [])
            if owner is not None:
                found.append(_resource(self.region, "ebs-snapshot", snap["SnapshotId"], owner, snap.get("StartTime")))
        return found

    def tagged_unsupported(self):
        """Owned resources of types the sweep has no row for, found through the Resource Groups Tagging API:
        they are reported, and fail the run, by ARN. One unfiltered listing (TagFilters of several keys are
        ANDed, so a filtered listing would cost one walk per ownership tag); ownership is decided here."""
        client = self.client("resourcegroupstaggingapi")
        found = []
        for item in aws.paginate(client, "get_resources", "ResourceTagMappingList", ResourcesPerPage=100):
            arn = item["ResourceARN"]
            if arn_type(arn) in ARN_TYPES:
                continue
            claim = self.sweep.ownership.owner(item.get("Tags") or [])
            if claim is not None:
                found.append(
                    _resource(
                        self.region,
                        "unsupported",
                        arn,
                        claim[0],
                        None,
                        f"owned ({claim[1]}) but of a type krops cannot delete ({arn_type(arn)}): delete it by hand, then "
                        "run the teardown again",
                    )
                )
        return found

    def nat_gateways(self):
        found = self.ec2_owned(
            "describe_nat_gateways",
            "NatGateways",
            "NatGatewayId",
            "nat-gateway",
            filter_arg="Filter",
            extra=lambda n: {"state": n.get("State")},
        )
        return [n for n in found if n["meta"]["state"] not in ("deleted", "failed")]

    def elastic_ips(self):
        return self.ec2_owned(
            "describe_addresses",
            "Addresses",
            "AllocationId",
            "elastic-ip",
            extra=lambda a: {"association": a.get("AssociationId")},
        )

    def network_interfaces(self, vpcs):
        found = [
            e
            for e in self.ec2_owned(
                "describe_network_interfaces",
                "NetworkInterfaces",
                "NetworkInterfaceId",
                "network-interface",
                extra=lambda e: {"status": e.get("Status")},
            )
            if e["meta"]["status"] == "available"
        ]
        vpc_owner = {v["id"]: v["cluster"] for v in vpcs}
        if vpc_owner:
            ids = {e["id"] for e in found}
            filters = [{"Name": "vpc-id", "Values": list(vpc_owner)}, {"Name": "status", "Values": ["available"]}]
            for eni in self._ec2_list("describe_network_interfaces", "NetworkInterfaces", filters):
                if eni["NetworkInterfaceId"] not in ids and eni.get("Status") == "available":
                    found.append(
                        _resource(
                            self.region,
                            "network-interface",
                            eni["NetworkInterfaceId"],
                            vpc_owner[eni["VpcId"]],
                            None,
                            "detached network interface in owned VPC {}".format(eni["VpcId"]),
                        )
                    )
        return found

    def route_tables(self):
        found = []
        for table in self._ec2_list("describe_route_tables", "RouteTables", []):
            owner = self.owner_of(table.get("Tags") or [])
            associations = table.get("Associations") or []
            if owner is not None and not any(a.get("Main") for a in associations):
                found.append(
                    _resource(
                        self.region,
                        "route-table",
                        table["RouteTableId"],
                        owner,
                        associations=[
                            a["RouteTableAssociationId"] for a in associations if a.get("RouteTableAssociationId")
                        ],
                    )
                )
        return found

    def security_groups(self):
        found = self.ec2_owned(
            "describe_security_groups",
            "SecurityGroups",
            "GroupId",
            "security-group",
            extra=lambda g: {"name": g.get("GroupName")},
        )
        return [g for g in found if g["meta"]["name"] != "default"]

    # --- global
    def global_resources(self):
        found = []
        for rtype in GLOBAL_TYPES:
            found += self._guard(rtype.name, lambda t=rtype: t.list(self, False))
        return found

    def _rds(self):
        if self._cache.get("rds") is None:
            self._cache["rds"] = self._guard("rds-instance", self.rds)
        return self._cache["rds"]

    def buckets(self):
        wanted = {}
        for target in self.sweep.targets:
            name = self.sweep.bucket_pattern.format(account_id=self.sweep.account_id, cluster_name=target.cluster)
            wanted[name] = target
        if not wanted:
            return []
        listed = aws.call(self.sweep.conn.client("s3", self.sweep.home_region), "list_buckets").get("Buckets") or []
        return [
            _resource(
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

    def iam_roles(self):
        """Roles owned by their tags (CAPA tags every role it creates, see docs/ownership.md) or named exactly
        by global-iam-roles. ListRoles returns no tags, so each role costs one ListRoleTags."""
        client = self.sweep.conn.client("iam", self.sweep.home_region)
        exact = {}
        for target in self.sweep.targets:
            for pattern in self.sweep.global_roles:
                exact[pattern.format(cluster_name=target.cluster)] = target.cluster
        found = []
        for role in aws.paginate(client, "list_roles", "Roles"):
            name = role["RoleName"]
            owner, reason = exact.get(name), "global IAM role named by bootstrap.toml"
            if owner is None:
                tags = aws.paginate(client, "list_role_tags", "Tags", RoleName=name)
                owner, reason = self.owner_of(tags), ""
            if owner is not None:
                found.append(_resource(GLOBAL, "iam-role", name, owner, role.get("CreateDate"), reason))
            elif self.sweep.ownership.candidate(name) is not None:
                self.candidates.append(
                    _resource(
                        GLOBAL,
                        "iam-role",
                        name,
                        self.sweep.ownership.candidate(name),
                        role.get("CreateDate"),
                        "name resembles a cluster of the environment but no ownership tag proves it: not deleted",
                    )
                )
        return found

    def oidc_providers(self):
        """IAM OIDC providers: CAPA tags the one it creates for an EKS cluster with that cluster's tags."""
        client = self.sweep.conn.client("iam", self.sweep.home_region)
        found = []
        for item in aws.call(client, "list_open_id_connect_providers").get("OpenIDConnectProviderList") or []:
            arn = item["Arn"]
            try:
                info = aws.call(client, "get_open_id_connect_provider", OpenIDConnectProviderArn=arn)
            except ClientError as exc:
                if aws.is_not_found(exc):
                    continue
                raise
            owner = self.owner_of(info.get("Tags") or [])
            if owner is not None:
                found.append(_resource(GLOBAL, "iam-oidc-provider", arn, owner, info.get("CreateDate")))
        return found

    def iam_users(self):
        client = self.sweep.conn.client("iam", self.sweep.home_region)
        found = []
        for name in self.sweep.global_users:
            try:
                user = aws.call(client, "get_user", UserName=name)["User"]
            except ClientError as exc:
                if aws.is_not_found(exc):
                    continue
                raise
            res = _resource(
                GLOBAL, "iam-user", name, "", user.get("CreateDate"), "account-global IAM user named by bootstrap.toml"
            )
            why = self.sweep.global_kept_reason("iam-user", name)
            if why:
                self.sweep.keep(res, why)
            else:
                found.append(res)
        return found

    def stacks(self, region):
        client = self.sweep.conn.client("cloudformation", region)
        try:
            stacks = aws.call(client, "describe_stacks", StackName=self.sweep.stack_name).get("Stacks") or []
        except ClientError as exc:
            if aws.is_not_found(exc):
                return []
            raise
        found = []
        for stack in stacks:
            if stack.get("StackStatus") in ("DELETE_COMPLETE", "DELETE_IN_PROGRESS"):
                continue
            res = _resource(
                region,
                "cloudformation-stack",
                stack["StackName"],
                "",
                stack.get("CreationTime"),
                "account-global clusterawsadm stack named by bootstrap.toml",
                status=stack.get("StackStatus"),
            )
            why = self.sweep.global_kept_reason("cloudformation-stack", stack["StackName"])
            if why:
                self.sweep.keep(res, why)
            else:
                found.append(res)
        return found


class Sweep:
    """One sweep (delete, plan or report) over a set of targets."""

    def __init__(
        self,
        conn,
        targets,
        cfg,
        environment,
        account_id,
        wait_timeout=1200,
        concurrency=None,
        sweep_global_users=True,
        sleep=time.sleep,
        clock=time.monotonic,
        progress=None,
    ):
        teardown = cfg.data.get("teardown") or {}
        self.conn = conn
        self.cfg = cfg
        self.environment = environment
        self.targets = targets
        self.regions = _unique(t.region for t in targets)
        self.home_region = self.regions[0]
        self.account_id = account_id
        every = environment_targets(cfg, environment, True)
        whole = {(t.cluster, t.region) for t in targets} == {(t.cluster, t.region) for t in every}
        self.ownership = ownership.AwsOwnership(
            environment, {t.cluster: t.names for t in targets}, environment_tag_owns=whole
        )
        globals_ = ownership.effective_globals(cfg.data, environment)
        self.bucket_pattern = teardown.get("s3-bucket-pattern") or "krops-{account_id}-{cluster_name}-data"
        self.global_roles = teardown.get("global-iam-roles") or []
        self.global_users = globals_["iam-user"]
        self.stack_name = (globals_["cloudformation-stack"] or [""])[0]
        self.sweep_global_users = sweep_global_users
        self.wait_timeout = wait_timeout
        self.concurrency = max(1, concurrency or len(self.regions))
        self.sleep = sleep
        self.clock = clock
        self.progress_lines = []
        self._progress_hook = progress
        self.errors = []
        self.warnings = []
        self.kept = []
        self.candidates = []
        self.started = clock()
        self._lock = threading.Lock()
        self._others_alive = None

    def progress(self, text):
        """A progress line: kept in the result, and passed to the caller's hook (the benchmark prints them)."""
        with self._lock:
            self.progress_lines.append(f"{self.clock() - self.started:.1f}s {text}")
        if self._progress_hook is not None:
            self._progress_hook(text)

    # --- account-global resources ---------------------------------------------------
    def keep(self, res, why):
        with self._lock:
            if not any(
                k["type"] == res["type"] and k["id"] == res["id"] and k["region"] == res["region"] for k in self.kept
            ):
                self.kept.append(public(res, "kept", why))

    def global_kept_reason(self, kind, name):
        """Why an account-global resource must stay, or "" when this environment alone may delete it."""
        if kind == "iam-user" and not self.sweep_global_users:
            return f"the regions filter leaves out regions of environment {self.environment}"
        others = ownership.aws_account_global(self.cfg, self.environment, kind, name)
        if others:
            return "environment {} in {} also names it".format(", ".join(others), self.cfg.path)
        alive = self.other_clusters_alive()
        if alive:
            return "clusters of other environments still exist: {}".format("; ".join(alive[:5]))
        return ""

    def other_clusters_alive(self):
        """Clusters of the other aws environments of bootstrap.toml that still exist (EKS by exact name, VPCs by
        their ownership tags), computed once."""
        with self._lock:
            if self._others_alive is not None:
                return self._others_alive
            alive = []
            for other in self.cfg.environment_names:
                if other == self.environment or profiles.of(self.cfg.environment(other)).cloud != "aws":
                    continue
                targets = environment_targets(self.cfg, other, True)
                owner = ownership.AwsOwnership(other, {t.cluster: t.names for t in targets})
                for region in _unique(t.region for t in targets):
                    eks_names = {t.eks_name: t.cluster for t in targets if t.eks_name and t.region == region}
                    try:
                        listed = aws.paginate(self.conn.client("eks", region), "list_clusters", "clusters")
                        vpcs = aws.paginate(self.conn.client("ec2", region), "describe_vpcs", "Vpcs")
                    except (ClientError, BotoCoreError, aws.AwsError) as exc:
                        alive.append(
                            f"unknown in {region} ({aws.error_message(exc)}): listing failed, so kept to be safe"
                        )
                        continue
                    alive += [f"EKS cluster {n} of environment {other} in {region}" for n in listed if n in eks_names]
                    alive += [
                        "VPC {} of environment {} in {}".format(v["VpcId"], other, region)
                        for v in vpcs
                        if owner.owner(v.get("Tags") or []) is not None
                    ]
            self._others_alive = alive
            return alive

    # --- discovery -----------------------------------------------------------------
    def _per_region(self, func):
        """func(region) for every region, concurrently; results in region order."""
        if self.concurrency == 1 or len(self.regions) == 1:
            return [func(region) for region in self.regions]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(self.regions))) as pool:
            return list(pool.map(func, self.regions))

    def _discover_region(self, region, with_age=False):
        found = _Discovery(self, region)
        resources = found.region_resources(with_age)
        return resources, found

    def _region_failed(self, region, exc):
        self.errors.append(
            {"region": region, "type": "region", "error": f"sweep of {region} stopped: {aws.error_message(exc)}"}
        )

    def _discover_global(self):
        found = _Discovery(self, self.home_region)
        return found.global_resources(), found

    def _collect(self, found):
        self.errors.extend(found.errors)
        for item in found.candidates:
            if not any(c["id"] == item["id"] and c["type"] == item["type"] for c in self.candidates):
                self.candidates.append(item)
        for warning in found.warnings:
            if warning not in self.warnings:
                self.warnings.append(warning)

    def discover(self, with_age=False):
        """Everything owned: (resources per region in order, global resources). The global
        listing runs beside the regions when concurrency allows."""
        jobs = [lambda r=region: self._discover_region(r, with_age) for region in self.regions]
        jobs.append(self._discover_global)
        if self.concurrency == 1:
            done = [job() for job in jobs]
        else:
            with ThreadPoolExecutor(max_workers=min(self.concurrency + 1, len(jobs))) as pool:
                done = [future.result() for future in [pool.submit(job) for job in jobs]]
        regional = []
        for resources, found in done[:-1]:
            self._collect(found)
            regional.extend(resources)
        global_resources, found = done[-1]
        self._collect(found)
        return regional, global_resources

    # --- modes ---------------------------------------------------------------------
    def plan(self):
        regional, global_resources = self.discover()
        return [
            public(r, "undeletable" if r["type"] == "unsupported" else "planned") for r in regional + global_resources
        ]

    def delete(self):
        per_region = self._per_region(self._delete_region)
        results = []
        for region_results in per_region:
            results.extend(region_results)
        global_resources, found = self._discover_global()
        self._collect(found)
        # IAM roles stay while their cluster's EKS resources are still being deleted: EKS needs them
        blocked = {}
        for item in results:
            if item["outcome"] == "failed" and item["type"] in ("eks-cluster", "eks-nodegroup"):
                blocked.setdefault(item["cluster"], "{} {} in {}".format(item["type"], item["id"], item["region"]))
        kept = [r for r in global_resources if r["type"] == "iam-role" and r["cluster"] in blocked]
        # global resources of one type are independent of each other: deleted side by side
        results.extend(
            _Deleter(self, self.home_region, parallel=True).run(
                [r for r in global_resources if r not in kept], GLOBAL_TYPES
            )
        )
        results.extend(
            public(
                r,
                "failed",
                "kept: {} is not deleted yet and may need this role; run the sweep again".format(blocked[r["cluster"]]),
            )
            for r in kept
        )
        return results

    def _delete_region(self, region):
        try:
            resources, found = self._discover_region(region)
            self._collect(found)
            return _Deleter(self, region).run(resources, REGION_TYPES)
        except (ClientError, BotoCoreError, aws.AwsError) as exc:
            self._region_failed(region, exc)
            return []

    def leftovers(self):
        regional, global_resources = self.discover()
        return [
            public(r, "left", r.get("reason") or "still present after the sweep") for r in regional + global_resources
        ]

    def report(self, min_age_hours, now=None):
        now = now or _now()
        regional, global_resources = self.discover(with_age=True)
        resources = regional + global_resources
        oldest = {}
        for res in resources:
            if res["created"]:
                key = res["cluster"]
                oldest[key] = min(oldest.get(key, res["created"]), res["created"])
        entries = []
        for res in resources:
            created, inherited = res["created"], False
            if not created and res["cluster"] in oldest:
                created, inherited = oldest[res["cluster"]], True
            age = round((now - created).total_seconds() / 3600.0, 1) if created else None
            if age is not None and age < min_age_hours:
                continue
            entry = public(res, "orphan")
            entry.update(created=created.isoformat() if created else None, age_hours=age, age_from_cluster=inherited)
            entries.append(entry)
        return entries


class _Deleter:
    """Deletes discovered resources of one region (or the global phase) in order."""

    def __init__(self, sweep, region, parallel=False):
        self.sweep = sweep
        self.region = region
        self.parallel = parallel

    def client(self, service, region=None):
        return self.sweep.conn.client(service, region or self.region)

    def run(self, resources, types):
        """Delete resources type by type in table order; regional chains run side by side, then the network."""
        if self.region == GLOBAL:
            return self._run_types(resources, types)
        chains = {}
        for rtype in types:
            if rtype.chain:
                chains.setdefault(rtype.chain, []).append(rtype)
        network = [t for t in types if not t.chain]
        busy = [c for c in chains.values() if any(r["type"] in {t.name for t in c} for r in resources)]
        if len(busy) > 1:
            with ThreadPoolExecutor(max_workers=len(busy)) as pool:
                done = list(pool.map(lambda c: self._run_types(resources, c), busy))
        else:
            done = [self._run_types(resources, c) for c in busy]
        results = [item for chunk in done for item in chunk]
        results += self._run_types(resources, network)
        order = {t.name: i for i, t in enumerate(types)}
        results.sort(key=lambda r: order.get(r["type"], len(order)))
        return results

    def _run_types(self, resources, types):
        results = []
        for rtype in types:
            batch = [r for r in resources if r["type"] == rtype.name]
            if rtype.refresh:
                batch = rtype.refresh(self, batch, resources)
            if not batch:
                continue
            if rtype.before:
                rtype.before(self, batch)
            if self.parallel and self.sweep.concurrency > 1 and len(batch) > 1:
                with ThreadPoolExecutor(max_workers=min(self.sweep.concurrency, len(batch))) as pool:
                    outcomes = list(pool.map(lambda r, t=rtype: self._delete_one(t, r), batch))
            else:
                outcomes = [self._delete_one(rtype, res) for res in batch]
            pending = [res for res, outcome in zip(batch, outcomes) if outcome == "wait"]
            results.extend(o for o in outcomes if o != "wait")
            if pending:
                self.sweep.progress(
                    "%s: waiting for %d %s deletion(s): %s"
                    % (self.region, len(pending), rtype.name, ", ".join(r["id"] for r in pending[:5]))
                )
                results.extend(self._wait(rtype, pending))
        return results

    def _fresh_interfaces(self, planned, resources):
        """Interfaces detach while load balancers and NAT gateways go: list them again at this step."""
        discovery = _Discovery(self.sweep, self.region)
        vpcs = [r for r in resources if r["type"] == "vpc"]
        fresh = discovery._guard(  # pylint: disable=protected-access
            "network-interface",
            lambda: discovery.network_interfaces(vpcs),
        )
        known = {r["id"] for r in planned}
        return planned + [r for r in fresh if r["id"] not in known]

    def _delete_one(self, rtype, res):
        """'wait' when the deletion must be awaited (only types with a wait_state), else the public outcome."""
        try:
            answer = rtype.delete(self, res)
        except (ClientError, BotoCoreError, aws.AwsError) as exc:
            if aws.is_not_found(exc):
                return public(res, "absent", "already gone")
            return public(res, "failed", f"delete failed: {aws.error_message(exc)}")
        if answer == ABSENT:
            return public(res, "absent", "already gone")
        return "wait" if rtype.wait_state else public(res, "deleted")

    # each _delete_<type> starts the deletion; ABSENT when there was nothing to delete
    def _delete_eks_nodegroup(self, res):
        aws.call(
            self.client("eks"), "delete_nodegroup", clusterName=res["meta"]["eks"], nodegroupName=res["meta"]["name"]
        )

    def _delete_eks_pod_identity_association(self, res):
        aws.call(
            self.client("eks"),
            "delete_pod_identity_association",
            clusterName=res["meta"]["eks"],
            associationId=res["meta"]["association"],
        )

    def _delete_eks_cluster(self, res):
        aws.call(self.client("eks"), "delete_cluster", name=res["id"])

    def _delete_rds_instance(self, res):
        if res["meta"].get("status") == "deleting":
            return None
        try:
            aws.call(
                self.client("rds"),
                "delete_db_instance",
                DBInstanceIdentifier=res["id"],
                SkipFinalSnapshot=True,
                DeleteAutomatedBackups=True,
            )
        except ClientError as exc:
            if aws.error_code(exc) != "InvalidDBInstanceState":
                raise
        return None

    def _delete_rds_subnet_group(self, res):
        self._retry_dependency(
            res,
            lambda: aws.call(self.client("rds"), "delete_db_subnet_group", DBSubnetGroupName=res["id"]),
            codes=("InvalidDBSubnetGroupStateFault",),
        )

    def _delete_elbv2_load_balancer(self, res):
        aws.call(self.client("elbv2"), "delete_load_balancer", LoadBalancerArn=res["id"])

    def _delete_elb_load_balancer(self, res):
        aws.call(self.client("elb"), "delete_load_balancer", LoadBalancerName=res["id"])

    def _delete_elbv2_target_group(self, res):
        self._retry_dependency(
            res,
            lambda: aws.call(self.client("elbv2"), "delete_target_group", TargetGroupArn=res["id"]),
            codes=("ResourceInUse",),
        )

    def _delete_nat_gateway(self, res):
        if res["meta"].get("state") != "deleting":
            aws.call(self.client("ec2"), "delete_nat_gateway", NatGatewayId=res["id"])

    def _delete_elastic_ip(self, res):
        client = self.client("ec2")
        try:
            aws.call(client, "release_address", AllocationId=res["id"])
        except ClientError as exc:
            if aws.error_code(exc) not in ("InvalidIPAddress.InUse", "AuthFailure") or not res["meta"].get(
                "association"
            ):
                raise
            try:
                aws.call(client, "disassociate_address", AssociationId=res["meta"]["association"])
            except ClientError as again:
                if not aws.is_not_found(again):
                    raise
            aws.call(client, "release_address", AllocationId=res["id"])

    def _delete_launch_template(self, res):
        aws.call(self.client("ec2"), "delete_launch_template", LaunchTemplateId=res["id"])

    def _delete_ebs_volume(self, res):
        # a volume detaches once its node is gone (node groups and clusters are deleted before)
        self._retry_dependency(
            res,
            lambda: aws.call(self.client("ec2"), "delete_volume", VolumeId=res["id"]),
            codes=("VolumeInUse", "IncorrectState"),
        )

    def _delete_ebs_snapshot(self, res):
        self._retry_dependency(
            res,
            lambda: aws.call(self.client("ec2"), "delete_snapshot", SnapshotId=res["id"]),
            codes=("InvalidSnapshot.InUse",),
        )

    def _delete_unsupported(self, res):
        raise aws.AwsError("krops cannot delete {}: {}".format(res["id"], res["reason"]))

    def _delete_network_interface(self, res):
        aws.call(self.client("ec2"), "delete_network_interface", NetworkInterfaceId=res["id"])

    def _delete_subnet(self, res):
        self._retry_dependency(res, lambda: aws.call(self.client("ec2"), "delete_subnet", SubnetId=res["id"]))

    def _delete_internet_gateway(self, res):
        client = self.client("ec2")
        found = aws.call(client, "describe_internet_gateways", InternetGatewayIds=[res["id"]])["InternetGateways"]
        for attachment in (found[0].get("Attachments") or []) if found else []:
            try:
                aws.call(client, "detach_internet_gateway", InternetGatewayId=res["id"], VpcId=attachment["VpcId"])
            except ClientError as exc:
                if not aws.is_not_found(exc) and aws.error_code(exc) != "Gateway.NotAttached":
                    raise
        self._retry_dependency(res, lambda: aws.call(client, "delete_internet_gateway", InternetGatewayId=res["id"]))

    def _delete_route_table(self, res):
        client = self.client("ec2")
        for association in res["meta"].get("associations") or []:
            try:
                aws.call(client, "disassociate_route_table", AssociationId=association)
            except ClientError as exc:
                if not aws.is_not_found(exc):
                    raise
        self._retry_dependency(res, lambda: aws.call(client, "delete_route_table", RouteTableId=res["id"]))

    def _revoke_rules(self, groups):
        """Revoke every rule of every owned group first, so groups that reference each other can go."""
        try:
            self._revoke_all(groups)
        except (ClientError, BotoCoreError, aws.AwsError) as exc:
            self.sweep.warnings.append(
                "{}: revoking the rules of security groups {} failed: {}; their deletion may fail on references".format(
                    self.region, ", ".join(g["id"] for g in groups), aws.error_message(exc)
                )
            )

    def _revoke_all(self, groups):
        client = self.client("ec2")
        ids = [g["id"] for g in groups]
        try:
            described = aws.paginate(client, "describe_security_groups", "SecurityGroups", GroupIds=ids)
        except ClientError:
            described = []
            for group_id in ids:
                try:
                    described += aws.call(client, "describe_security_groups", GroupIds=[group_id])["SecurityGroups"]
                except ClientError as exc:
                    if not aws.is_not_found(exc):
                        raise
        for group in described:
            for field, operation in (
                ("IpPermissions", "revoke_security_group_ingress"),
                ("IpPermissionsEgress", "revoke_security_group_egress"),
            ):
                rules = [_clean_permission(p) for p in group.get(field) or []]
                if rules:
                    try:
                        aws.call(client, operation, GroupId=group["GroupId"], IpPermissions=rules)
                    except ClientError as exc:
                        if not aws.is_not_found(exc):
                            raise

    def _delete_security_group(self, res):
        self._retry_dependency(res, lambda: aws.call(self.client("ec2"), "delete_security_group", GroupId=res["id"]))

    def _delete_vpc(self, res):
        self._retry_dependency(res, lambda: aws.call(self.client("ec2"), "delete_vpc", VpcId=res["id"]))

    def _delete_s3_bucket(self, res):
        client = self.client("s3", res["region"])
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

    def _delete_iam_role(self, res):
        client = self.client("iam", self.sweep.home_region)
        name = res["id"]
        for policy in aws.paginate(client, "list_attached_role_policies", "AttachedPolicies", RoleName=name):
            aws.call(client, "detach_role_policy", RoleName=name, PolicyArn=policy["PolicyArn"])
        for policy in aws.paginate(client, "list_role_policies", "PolicyNames", RoleName=name):
            aws.call(client, "delete_role_policy", RoleName=name, PolicyName=policy)
        for profile in aws.paginate(client, "list_instance_profiles_for_role", "InstanceProfiles", RoleName=name):
            aws.call(
                client,
                "remove_role_from_instance_profile",
                RoleName=name,
                InstanceProfileName=profile["InstanceProfileName"],
            )
            aws.call(client, "delete_instance_profile", InstanceProfileName=profile["InstanceProfileName"])
        aws.call(client, "delete_role", RoleName=name)

    def _delete_iam_oidc_provider(self, res):
        aws.call(
            self.client("iam", self.sweep.home_region),
            "delete_open_id_connect_provider",
            OpenIDConnectProviderArn=res["id"],
        )

    def _delete_iam_user(self, res):
        client = self.client("iam", self.sweep.home_region)
        name = res["id"]
        try:
            aws.call(client, "delete_login_profile", UserName=name)
        except ClientError as exc:
            if not aws.is_not_found(exc):
                raise
        for key in aws.paginate(client, "list_access_keys", "AccessKeyMetadata", UserName=name):
            aws.call(client, "delete_access_key", UserName=name, AccessKeyId=key["AccessKeyId"])
        for device in aws.paginate(client, "list_mfa_devices", "MFADevices", UserName=name):
            aws.call(client, "deactivate_mfa_device", UserName=name, SerialNumber=device["SerialNumber"])
        for group in aws.paginate(client, "list_groups_for_user", "Groups", UserName=name):
            aws.call(client, "remove_user_from_group", UserName=name, GroupName=group["GroupName"])
        for policy in aws.paginate(client, "list_attached_user_policies", "AttachedPolicies", UserName=name):
            aws.call(client, "detach_user_policy", UserName=name, PolicyArn=policy["PolicyArn"])
        for policy in aws.paginate(client, "list_user_policies", "PolicyNames", UserName=name):
            aws.call(client, "delete_user_policy", UserName=name, PolicyName=policy)
        aws.call(client, "delete_user", UserName=name)

    def _delete_cloudformation_stack(self, res):
        aws.call(self.client("cloudformation", res["region"]), "delete_stack", StackName=res["id"])

    # --- retries and waits -------------------------------------------------------------
    def _delays(self, budget):
        """Sleep between polls until budget seconds have passed; yields before each new attempt."""
        deadline = self.sweep.clock() + budget
        delay = POLL_FIRST
        while True:
            remaining = deadline - self.sweep.clock()
            if remaining <= 0:
                return
            self.sweep.sleep(min(delay, remaining))
            delay = min(delay * 2, POLL_MAX)
            yield

    def _retry_dependency(self, res, func, codes=("DependencyViolation",)):
        """Run func, retrying while AWS says something still depends on the resource."""
        try:
            return func()
        except ClientError as exc:
            if aws.error_code(exc) not in codes:
                raise
            last = exc
        budget = min(self.sweep.wait_timeout, DEPENDENCY_BUDGET)
        for dummy in self._delays(budget):
            try:
                return func()
            except ClientError as exc:
                if aws.error_code(exc) not in codes:
                    raise
                last = exc
        raise aws.AwsError(
            "%s (still after %ds: something outside the sweep may depend on %s %s)"
            % (aws.error_message(last), budget, res["type"], res["id"])
        )

    # wait states: {id: 'gone' or the current status} for every pending deletion of a type, in as few calls
    # as the API allows (one listing per poll, not one describe per resource)
    def _state_eks_nodegroup(self, pending):
        states = {}
        for eks in _unique(r["meta"]["eks"] for r in pending):
            try:
                present = set(aws.paginate(self.client("eks"), "list_nodegroups", "nodegroups", clusterName=eks))
            except ClientError as exc:
                if not aws.is_not_found(exc):
                    raise
                present = set()
            states.update(
                (r["id"], "DELETING" if r["meta"]["name"] in present else "gone")
                for r in pending
                if r["meta"]["eks"] == eks
            )
        return states

    def _state_eks_cluster(self, pending):
        present = set(aws.paginate(self.client("eks"), "list_clusters", "clusters"))
        return {r["id"]: "DELETING" if r["id"] in present else "gone" for r in pending}

    def _state_rds_instance(self, pending):
        found = {
            i["DBInstanceIdentifier"]: i.get("DBInstanceStatus", "?")
            for i in aws.paginate(self.client("rds"), "describe_db_instances", "DBInstances")
        }
        return {r["id"]: found.get(r["id"], "gone") for r in pending}

    def _state_nat_gateway(self, pending):
        found = {
            n["NatGatewayId"]: n.get("State", "?")
            for n in aws.paginate(
                self.client("ec2"),
                "describe_nat_gateways",
                "NatGateways",
                Filter=[{"Name": "nat-gateway-id", "Values": [r["id"] for r in pending]}],
            )
        }
        return {r["id"]: "gone" if found.get(r["id"], "deleted") == "deleted" else found[r["id"]] for r in pending}

    def _wait(self, rtype, pending):
        """Poll every pending deletion until it is gone, has failed or wait_timeout passes."""
        results = []
        states = {}
        remaining = list(pending)

        def poll():
            try:
                found = rtype.wait_state(self, list(remaining))
            except (ClientError, BotoCoreError, aws.AwsError) as exc:
                states.update((r["id"], f"unknown ({aws.error_message(exc)})") for r in remaining)
                return
            for res in list(remaining):
                state = found.get(res["id"], "?")
                states[res["id"]] = state
                if state == "gone":
                    remaining.remove(res)
                    results.append(public(res, "deleted"))
                elif state in ("DELETE_FAILED", "FAILED", "failed"):
                    remaining.remove(res)
                    results.append(public(res, "failed", f"deletion failed: status {state}"))

        poll()
        # still deleting right after the request: it takes its usual time, so the next poll waits for part of it
        quiet = min(rtype.expected * EXPECTED_SCALE * FIRST_POLL_SHARE, self.sweep.wait_timeout) if remaining else 0
        if quiet > 0:
            self.sweep.sleep(quiet)
            poll()
        if remaining:
            for dummy in self._delays(self.sweep.wait_timeout - quiet):
                poll()
                if not remaining:
                    break
                self.sweep.progress(
                    "{}: still deleting {}".format(
                        self.region,
                        ", ".join(
                            "{} {} ({})".format(rtype.name, r["id"], states.get(r["id"], "?")) for r in remaining[:5]
                        ),
                    )
                )
        for res in remaining:
            results.append(
                public(
                    res,
                    "failed",
                    "still %s after %ds (wait_timeout)" % (states.get(res["id"], "present"), self.sweep.wait_timeout),
                )
            )
        order = {r["id"]: i for i, r in enumerate(pending)}
        results.sort(key=lambda r: order[r["id"]])
        return results


class ResourceType:
    """One row of the sweep's type table: what it is, how it is listed, deleted and (optionally) awaited.

    ``list(discovery, with_age)`` returns the owned resources; ``delete(deleter, res)`` starts the deletion;
    ``wait_state(deleter, res)`` ('gone' or a status) exists only for types whose deletion takes time, and only
    those are awaited. ``chain`` groups regional types that depend on each other and on nothing else: chains run
    side by side, rows without a chain (the network) after all of them. ``expected`` (typical seconds a
    deletion takes, tests/benchmarks/aws_latency_proxy.py cites the sources) delays the first poll. ``before`` runs once per batch (security
    group rules), ``refresh`` re-lists a batch right before its deletion (interfaces detach meanwhile).
    """

    def __init__(self, name, scope, list, delete, wait_state=None, chain=None, before=None, refresh=None, expected=0):
        # pylint: disable=redefined-builtin
        self.name = name
        self.expected = expected  # typical deletion time in seconds: the first poll comes after a part of it
        self.scope = scope
        self.list = list
        self.delete = delete
        self.wait_state = wait_state
        self.chain = chain
        self.before = before
        self.refresh = refresh


def _only(rtype, listing):
    return lambda d, with_age: [r for r in listing(d) if r["type"] == rtype]


D, X = _Discovery, _Deleter
REGION = "region"

# Table order is deletion order (within a chain, and for the network rows after the chains).
REGION_TYPES = (
    ResourceType(
        "eks-nodegroup",
        REGION,
        lambda d, a: d.nodegroups(d._eks(), a),
        X._delete_eks_nodegroup,
        X._state_eks_nodegroup,
        chain="eks",
        expected=600,
    ),
    ResourceType(
        "eks-pod-identity-association",
        REGION,
        lambda d, a: d.pod_identities(d._eks()),
        X._delete_eks_pod_identity_association,
        chain="eks",
    ),
    ResourceType(
        "eks-cluster",
        REGION,
        lambda d, a: d._eks(),
        X._delete_eks_cluster,
        X._state_eks_cluster,
        chain="eks",
        expected=720,
    ),
    ResourceType(
        "launch-template",
        REGION,
        lambda d, a: d.ec2_owned("describe_launch_templates", "LaunchTemplates", "LaunchTemplateId", "launch-template"),
        X._delete_launch_template,
        chain="eks",
    ),
    ResourceType(
        "ebs-volume",
        REGION,
        lambda d, a: d.ec2_owned(
            "describe_volumes", "Volumes", "VolumeId", "ebs-volume", extra=lambda v: {"state": v.get("State")}
        ),
        X._delete_ebs_volume,
        chain="eks",
    ),
    ResourceType("ebs-snapshot", REGION, lambda d, a: d.snapshots(), X._delete_ebs_snapshot, chain="eks"),
    ResourceType(
        "rds-instance",
        REGION,
        _only("rds-instance", D._rds),
        X._delete_rds_instance,
        X._state_rds_instance,
        chain="rds",
        expected=600,
    ),
    ResourceType(
        "rds-subnet-group", REGION, _only("rds-subnet-group", D._rds), X._delete_rds_subnet_group, chain="rds"
    ),
    ResourceType("elbv2-load-balancer", REGION, lambda d, a: d.elbv2(), X._delete_elbv2_load_balancer, chain="lb"),
    ResourceType("elb-load-balancer", REGION, lambda d, a: d.classic_elb(), X._delete_elb_load_balancer, chain="lb"),
    ResourceType(
        "elbv2-target-group", REGION, lambda d, a: d.target_groups(), X._delete_elbv2_target_group, chain="lb"
    ),
    ResourceType(
        "nat-gateway",
        REGION,
        lambda d, a: d.nat_gateways(),
        X._delete_nat_gateway,
        X._state_nat_gateway,
        chain="nat",
        expected=240,
    ),
    ResourceType("elastic-ip", REGION, lambda d, a: d.elastic_ips(), X._delete_elastic_ip, chain="nat"),
    ResourceType(
        "network-interface",
        REGION,
        lambda d, a: d.network_interfaces(d._vpcs()),
        X._delete_network_interface,
        refresh=X._fresh_interfaces,
    ),
    ResourceType(
        "subnet",
        REGION,
        lambda d, a: d.ec2_owned("describe_subnets", "Subnets", "SubnetId", "subnet"),
        X._delete_subnet,
    ),
    ResourceType(
        "internet-gateway",
        REGION,
        lambda d, a: d.ec2_owned(
            "describe_internet_gateways", "InternetGateways", "InternetGatewayId", "internet-gateway"
        ),
        X._delete_internet_gateway,
    ),
    ResourceType("route-table", REGION, lambda d, a: d.route_tables(), X._delete_route_table),
    ResourceType(
        "security-group", REGION, lambda d, a: d.security_groups(), X._delete_security_group, before=X._revoke_rules
    ),
    ResourceType("vpc", REGION, lambda d, a: d._vpcs(), X._delete_vpc),
    ResourceType("unsupported", REGION, lambda d, a: d.tagged_unsupported(), X._delete_unsupported),
)

GLOBAL_TYPES = (
    ResourceType("s3-bucket", GLOBAL, lambda d, a: d.buckets(), X._delete_s3_bucket),
    ResourceType("iam-role", GLOBAL, lambda d, a: d.iam_roles(), X._delete_iam_role),
    ResourceType("iam-oidc-provider", GLOBAL, lambda d, a: d.oidc_providers(), X._delete_iam_oidc_provider),
    ResourceType("iam-user", GLOBAL, lambda d, a: d.iam_users(), X._delete_iam_user),
    ResourceType(
        "cloudformation-stack",
        GLOBAL,
        lambda d, a: [x for r in d.sweep.regions for x in d.stacks(r)] if d.sweep.stack_name else [],
        X._delete_cloudformation_stack,
    ),
)

REGION_ORDER = tuple(t.name for t in REGION_TYPES)
GLOBAL_ORDER = tuple(t.name for t in GLOBAL_TYPES)


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


# --- report rendering ------------------------------------------------------------------


def render_markdown(data):
    lines = [
        "# krops AWS orphan report",
        "",
        "- Environment: `{}`".format(data["environment"]),
        "- Account: `{}`".format(data["account_id"]),
        "- Regions: {}".format(", ".join(f"`{r}`" for r in data["regions"])),
        "- Generated: {}".format(data["generated_at"]),
        "- Threshold: owned resources older than {} hours (no creation time: the cluster's oldest resource)".format(
            _number(data["min_age_hours"])
        ),
        "",
    ]
    if data["errors"]:
        lines += ["## Discovery errors", ""]
        lines += ["- {}".format(e["error"]) for e in data["errors"]]
        lines.append("")
    if data.get("candidates"):
        lines += ["## Candidates (names that resemble a cluster; nothing proves them owned, never deleted)", ""]
        lines += ["- {} `{}` (like {})".format(c["type"], c["id"], c["cluster"]) for c in data["candidates"]]
        lines.append("")
    if not data["resources"]:
        lines.append("No orphaned resources found.")
        return "\n".join(lines) + "\n"
    lines += [
        "Found %d orphaned resources." % len(data["resources"]),
        "",
        "| Region | Cluster | Type | ID | Age (hours) | Note |",
        "|---|---|---|---|---|---|",
    ]
    for item in data["resources"]:
        age = "unknown" if item["age_hours"] is None else _number(item["age_hours"])
        if item["age_from_cluster"]:
            age += " (cluster)"
        note = (item["reason"] or "").replace("|", "/")
        lines.append(
            "| {} | {} | {} | `{}` | {} | {} |".format(
                item["region"], item["cluster"] or "-", item["type"], item["id"], age, note
            )
        )
    return "\n".join(lines) + "\n"


def _number(value):
    return (f"{value:g}") if isinstance(value, float) else str(value)


def report_json(data):
    return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"


# --- entry point -----------------------------------------------------------------------


def run(params, check_mode=False, config_loader=None, sleep=time.sleep, progress=None):
    """Run the sweep described by the module parameters; the module's result dict.

    Raises SweepError, config.ConfigError or aws.AwsError when it cannot start.
    """
    started = time.monotonic()
    loader = config_loader or config_mod.load
    cfg = loader(path=params.get("config_file"), environment=params.get("environment"))
    environment = params.get("environment") or cfg.selected
    mode = params.get("mode") or "delete"
    targets, all_regions = targets_from_config(
        cfg, environment, params.get("include_management", True), params.get("regions")
    )
    wait_timeout = 1200 if params.get("wait_timeout") is None else params["wait_timeout"]
    if wait_timeout < 0 or (params.get("concurrency") is not None and params["concurrency"] < 1):
        raise SweepError(
            "wait_timeout must be >= 0 and concurrency >= 1 (got {} and {})".format(
                wait_timeout, params.get("concurrency")
            )
        )
    conn = aws.Connection(
        profile=params.get("profile"),
        endpoint_url=params.get("endpoint_url"),
        access_key=params.get("access_key"),
        secret_key=params.get("secret_key"),
        session_token=params.get("session_token"),
    )
    regions = _unique(t.region for t in targets)
    account_id = params.get("account_id") or conn.account_id(regions[0])
    covers_all = set(regions) >= set(all_regions)
    sweep = Sweep(
        conn,
        targets,
        cfg,
        environment,
        account_id,
        wait_timeout=wait_timeout,
        concurrency=params.get("concurrency"),
        sweep_global_users=covers_all,
        sleep=sleep,
        progress=progress,
    )
    result = {
        "changed": False,
        "environment": environment,
        "account_id": account_id,
        "regions": regions,
        "targets": [t.as_dict() for t in targets],
        "results": [],
        "plan": [],
        "leftovers": [],
        "errors": [],
        "warnings": [],
    }

    if mode == "report":
        min_age = params.get("min_age_hours")
        min_age = 6 if min_age is None else min_age
        entries = sweep.report(min_age)
        data = {
            "environment": environment,
            "account_id": account_id,
            "regions": regions,
            "generated_at": _now().replace(microsecond=0).isoformat(),
            "min_age_hours": min_age,
            "count": len(entries),
            "resources": entries,
            "errors": list(sweep.errors),
            "candidates": [public(c, "candidate") for c in sweep.candidates],
            "kept": list(sweep.kept),
        }
        markdown = render_markdown(data)
        result["report"] = {"markdown": markdown, "json": data}
        path = params.get("report_path")
        if path and not check_mode:
            result["report_files"] = write_report(path, markdown, data)
    elif check_mode:
        result["plan"] = sweep.plan()
        result["changed"] = bool(result["plan"])
    else:
        result["results"] = sweep.delete()
        result["changed"] = any(r["outcome"] == "deleted" for r in result["results"])
        result["leftovers"] = sweep.leftovers()

    result["errors"] = sweep.errors
    result["warnings"] = sweep.warnings
    result["kept"] = sweep.kept
    result["progress"] = sweep.progress_lines
    result["candidates"] = [public(c, "candidate") for c in sweep.candidates]
    result["api_calls"] = conn.counter.total
    result["api_calls_by_operation"] = dict(sorted(conn.counter.by_operation.items()))
    result["duration"] = round(time.monotonic() - started, 3)
    result["msg"] = summary(result, mode, check_mode)
    result["failed"] = bool(result["leftovers"] or result["errors"])
    return result


def summary(result, mode, check_mode):
    if mode == "report":
        text = "orphan report: %d owned resources older than the threshold in %s" % (
            result["report"]["json"]["count"],
            ", ".join(result["regions"]),
        )
        if result.get("candidates"):
            text += "; %d resources whose names resemble a cluster, not proven owned (candidates)" % len(
                result["candidates"]
            )
    elif check_mode:
        text = "plan: %d resources would be deleted in %s" % (len(result["plan"]), ", ".join(result["regions"]))
    else:
        counts = {}
        for item in result["results"]:
            counts[item["outcome"]] = counts.get(item["outcome"], 0) + 1
        text = "sweep of {}: {}".format(
            ", ".join(result["regions"]),
            ", ".join("%d %s" % (n, o) for o, n in sorted(counts.items())) or "nothing owned found",
        )
        failed = [r for r in result["results"] if r["outcome"] == "failed"]
        if failed:
            text += "; failed: {}".format(
                "; ".join("{} {} in {} ({})".format(r["type"], r["id"], r["region"], r["reason"]) for r in failed[:10])
            )
        if result["leftovers"]:
            text += "; still owned after the sweep: {}; fix the causes above and run the sweep again".format(
                ", ".join("{} {} in {}".format(r["type"], r["id"], r["region"]) for r in result["leftovers"][:20])
            )
    if result.get("kept"):
        text += "; kept: {}".format(
            "; ".join("{} {} ({})".format(k["type"], k["id"], k["reason"]) for k in result["kept"])
        )
    if result["errors"]:
        text += "; discovery errors: {}".format("; ".join(e["error"] for e in result["errors"][:10]))
    return text


def write_report(path, markdown, data):
    """Write the Markdown to path and the JSON beside it (.json); both 0644. Returns the two paths."""
    path = os.path.expanduser(path)
    base = path[:-3] if path.endswith(".md") else path
    json_path = base + ".json"
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    for target, text in ((path, markdown), (json_path, report_json(data))):
        with open(target, "w", encoding="utf-8") as handle:
            handle.write(text)
    return {"markdown": path, "json": json_path}
