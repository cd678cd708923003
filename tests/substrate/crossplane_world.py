# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The Crossplane provider-aws family (s3, rds, iam, ec2) for the emulated world, acting on moto.

``CrossplaneProviders(world, endpoint)`` joins a flux_world.World beside the other controllers and reconciles
the namespaced managed resources (``*.aws.m.upbound.io/v1beta1``) of mgmt/aws-crossplane as the providers at
the tree's pin (crossplane-contrib/provider-upjet-aws v2.6.0, Crossplane v2.3.4) do:

- every managed resource gets Crossplane's finalizer ``finalizer.managedresource.crossplane.io`` and the
  conditions ``Synced`` and ``Ready`` (reason ``Available`` once the AWS resource exists; ``Synced`` False with
  the reason while a reference cannot be resolved or AWS refuses the call);
- the external name (annotation ``crossplane.io/external-name``, config/externalname.go @ v2.6.0):
  ``IdentifierFromProvider`` kinds (VPC, Subnet, SecurityGroup, Instance, the attachments, the bucket's
  settings, the ingress rule) are observed by it when it is set and created when it is empty, then the id AWS
  assigned is written into it; ``NameAsIdentifier`` kinds (Role, User, SubnetGroup) default it to
  metadata.name, and the Bucket's is its name (``ParameterAsIdentifier("bucket")``); a resource found under its
  external name is taken over, not created again;
- references (``vpcIdRef``, ``subnetIdRefs``, ``bucketRef``, ``roleRef``, ...) resolve to the referenced
  object's external name (a Policy's to its ARN, ``status.atProvider.arn``) once that object is Ready;
- ``spec.managementPolicies`` decides what the provider may do: without ``Create`` nothing is created, and on
  deletion without ``Delete`` (and without ``*``) the AWS resource is left (orphaned) and only the finalizer
  goes. With ``Delete`` the AWS resource is deleted first; AWS refusing (a VPC with subnets, a subnet group an
  instance uses: moto's errors) keeps the finalizer, as the real provider retries;
- a provider acts only while its Deployment runs (``needs_deployment``): the Deployment whose
  ``spec.selector.matchLabels`` carries ``pkg.crossplane.io/provider`` with the Provider's name has ready
  replicas (crossplane v2.3.4 apis/pkg/v1/interfaces.go LabelProvider).

What moto lacks is said, never pretended: AWS managed policies (``arn:aws:iam::aws:policy/...``) are not
served by the shared moto fixture, so such a RolePolicyAttachment is recorded in ``skipped`` and becomes Ready
without an attachment. Not emulated: the ``crossplane-kind``/``crossplane-name``/``crossplane-providerconfig``
tags upjet adds, drift correction (Update), LateInitialize and the ProviderConfig's credentials.
This module decides validity from moto and the vendored CRD schemas (strict_api), never from plugins/.
"""

from __future__ import annotations

import copy
import threading

from botocore.exceptions import ClientError

from tests.substrate.aws_world import clients
from tests.substrate.kube_emulator import _now
from tests.substrate.strict_api import plural_of

FINALIZER = "finalizer.managedresource.crossplane.io"
EXTERNAL_NAME = "crossplane.io/external-name"
PROVIDER_LABEL = "pkg.crossplane.io/provider"
VERSION = "v1beta1"

# (group, kind, provider package): creation order, what a reference points at first.
XP_KINDS = (
    ("iam.aws.m.upbound.io", "Policy", "provider-aws-iam"),
    ("iam.aws.m.upbound.io", "Role", "provider-aws-iam"),
    ("iam.aws.m.upbound.io", "User", "provider-aws-iam"),
    ("iam.aws.m.upbound.io", "RolePolicyAttachment", "provider-aws-iam"),
    ("iam.aws.m.upbound.io", "UserPolicyAttachment", "provider-aws-iam"),
    ("s3.aws.m.upbound.io", "Bucket", "provider-aws-s3"),
    ("s3.aws.m.upbound.io", "BucketOwnershipControls", "provider-aws-s3"),
    ("s3.aws.m.upbound.io", "BucketPublicAccessBlock", "provider-aws-s3"),
    ("s3.aws.m.upbound.io", "BucketServerSideEncryptionConfiguration", "provider-aws-s3"),
    ("s3.aws.m.upbound.io", "BucketVersioning", "provider-aws-s3"),
    ("ec2.aws.m.upbound.io", "VPC", "provider-aws-ec2"),
    ("ec2.aws.m.upbound.io", "Subnet", "provider-aws-ec2"),
    ("ec2.aws.m.upbound.io", "SecurityGroup", "provider-aws-ec2"),
    ("ec2.aws.m.upbound.io", "SecurityGroupIngressRule", "provider-aws-ec2"),
    ("rds.aws.m.upbound.io", "SubnetGroup", "provider-aws-rds"),
    ("rds.aws.m.upbound.io", "Instance", "provider-aws-rds"),
)
# The CRDs the provider packages install (aws_world.install_crds reads them from schemas/crds).
CRD_KINDS = tuple((g, k) for g, k, _p in XP_KINDS) + (
    ("aws.m.upbound.io", "ClusterProviderConfig"),
    ("aws.m.upbound.io", "ProviderConfig"),
)
NAMED = {"Role", "User", "SubnetGroup"}  # NameAsIdentifier: the external name defaults to metadata.name


class NotReady(LookupError):
    """A reference that cannot be resolved yet."""


def _tags(fp):
    return [{"Key": k, "Value": str(v)} for k, v in sorted((fp.get("tags") or {}).items())]


def _spec(rtype, fp):
    return [{"ResourceType": rtype, "Tags": _tags(fp)}] if fp.get("tags") else []


def _allows(obj, action):
    policies = (obj.get("spec") or {}).get("managementPolicies") or ["*"]
    return "*" in policies or action in policies


class CrossplaneProviders:
    """The four provider packages of mgmt/aws-crossplane/crossplane-providers, against moto."""

    def __init__(self, world, endpoint, needs_deployment=False):
        self.endpoint = endpoint
        self.needs_deployment = needs_deployment
        self.creations = []  # (kind, name, external name) of every create call
        self.deletions = []  # (kind, name) of every AWS delete, in order
        self.orphaned = []  # (kind, name) whose AWS resource was left on deletion (no Delete policy)
        self.skipped = []  # what moto cannot do
        self.refused = []  # (kind, name, AWS error code) of every delete AWS refused (a dependant still there)
        self.records = {}  # (cluster URL, kind, namespace, name) -> dict of what the delete needs
        self.lock = threading.Lock()
        world.controllers.append(self)

    def client(self, region, service):
        return clients(self.endpoint, region or "eu-north-1")(service)

    # --- the reconcile loop ---------------------------------------------------------------
    @staticmethod
    def _running(api, provider):
        try:
            deployments = api.list("apps/v1", "Deployment")
        except Exception:  # noqa: BLE001 - no apps/v1 served: nothing runs
            return False
        return any(
            ((d.get("spec") or {}).get("selector") or {}).get("matchLabels", {}).get(PROVIDER_LABEL) == provider
            and (d.get("spec") or {}).get("replicas", 1) > 0
            and (d.get("status") or {}).get("readyReplicas", 0) > 0
            for d in deployments
        )

    def reconcile(self, api):
        for group, kind, provider in XP_KINDS:
            if (group, plural_of(group, kind)) not in api.resources:
                continue
            if self.needs_deployment and not self._running(api, provider):
                continue
            for obj in api.list(f"{group}/{VERSION}", kind):
                with self.lock:
                    self._one(api, obj)

    def _one(self, api, obj):
        meta = obj["metadata"]
        finalizers = meta.get("finalizers") or []
        key = (api.url, obj["kind"], meta["namespace"], meta["name"])
        if meta.get("deletionTimestamp"):
            if FINALIZER in finalizers:
                if self._delete(api, obj, key):
                    self._finalizers(api, obj, [f for f in finalizers if f != FINALIZER])
            return
        if FINALIZER not in finalizers:
            obj = self._finalizers(api, obj, finalizers + [FINALIZER])
        if key in self.records:
            return
        try:
            external, record = self._observe_or_create(api, obj)
        except NotReady as exc:
            self._status(api, obj, False, "ReconcileError", str(exc))
            return
        except ClientError as exc:
            self._status(api, obj, False, "ReconcileError", f"create failed: {exc}")
            return
        if external is None:
            self._status(api, obj, False, "ReconcileError", "the resource does not exist and Create is not allowed")
            return
        self.records[key] = record
        if (meta.get("annotations") or {}).get(EXTERNAL_NAME) != external:
            obj = self._patch(api, obj, {"metadata": {"annotations": {EXTERNAL_NAME: external}}})
        self._status(api, obj, True, "Available", "", record.get("at_provider"))

    def _observe_or_create(self, api, obj):
        kind, meta = obj["kind"], obj["metadata"]
        fp = (obj.get("spec") or {}).get("forProvider") or {}
        external = (meta.get("annotations") or {}).get(EXTERNAL_NAME) or ""
        if not external and kind in NAMED:
            external = meta["name"]
        handler = getattr(self, "_" + kind)
        record = {"region": fp.get("region"), "kind": kind}
        if external and handler(api, obj, fp, record, external, observe=True):
            return external, record
        if not _allows(obj, "Create"):
            return None, record
        made = handler(api, obj, fp, record, external, observe=False)
        self.creations.append((kind, meta["name"], made))
        return made, record

    def _delete(self, api, obj, key):
        """True when the finalizer may go: the AWS resource is deleted, orphaned, or was never made."""
        record = self.records.get(key)
        name = (obj["kind"], obj["metadata"]["name"])
        if record is None:
            return True
        if not _allows(obj, "Delete"):
            self.orphaned.append(name)
            self.records.pop(key)
            return True
        try:
            record["delete"]()
        except ClientError as exc:
            self.refused.append(name + (exc.response.get("Error", {}).get("Code"),))
            self._status(api, obj, False, "ReconcileError", f"delete failed: {exc}")
            return False
        self.deletions.append(name)
        self.records.pop(key)
        return True

    # --- references -------------------------------------------------------------------------
    def ref(self, api, obj, group, kind, ref, arn=False):
        name = ref.get("name")
        namespace = ref.get("namespace") or obj["metadata"]["namespace"]
        try:
            target = api.get(f"{group}/{VERSION}", kind, name, namespace)
        except Exception:  # noqa: BLE001 - not there yet
            target = None
        ready = target and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (target.get("status") or {}).get("conditions") or []
        )
        if not ready:
            raise NotReady(f"cannot resolve references: referenced {kind} {namespace}/{name} is not ready")
        if arn:
            return target["status"]["atProvider"]["arn"]
        return target["metadata"]["annotations"][EXTERNAL_NAME]

    # --- ec2 ------------------------------------------------------------------------------------
    def _VPC(self, api, obj, fp, record, external, observe):  # noqa: N802 - named after the kind
        ec2 = self.client(fp["region"], "ec2")
        record["delete"] = lambda: ec2.delete_vpc(VpcId=record["id"])
        if observe:
            found = ec2.describe_vpcs(Filters=[{"Name": "vpc-id", "Values": [external]}])["Vpcs"]
            record["id"] = external
            return bool(found)
        vpc = ec2.create_vpc(CidrBlock=fp["cidrBlock"], TagSpecifications=_spec("vpc", fp))["Vpc"]["VpcId"]
        for attr, arg in (("enableDnsSupport", "EnableDnsSupport"), ("enableDnsHostnames", "EnableDnsHostnames")):
            if attr in fp:
                ec2.modify_vpc_attribute(VpcId=vpc, **{arg: {"Value": bool(fp[attr])}})
        record["id"] = vpc
        return vpc

    def _Subnet(self, api, obj, fp, record, external, observe):  # noqa: N802
        ec2 = self.client(fp["region"], "ec2")
        record["delete"] = lambda: ec2.delete_subnet(SubnetId=record["id"])
        if observe:
            record["id"] = external
            return bool(ec2.describe_subnets(Filters=[{"Name": "subnet-id", "Values": [external]}])["Subnets"])
        vpc = self.ref(api, obj, "ec2.aws.m.upbound.io", "VPC", fp["vpcIdRef"])
        record["id"] = ec2.create_subnet(
            VpcId=vpc,
            CidrBlock=fp["cidrBlock"],
            AvailabilityZone=fp["availabilityZone"],
            TagSpecifications=_spec("subnet", fp),
        )["Subnet"]["SubnetId"]
        return record["id"]

    def _SecurityGroup(self, api, obj, fp, record, external, observe):  # noqa: N802
        ec2 = self.client(fp["region"], "ec2")
        record["delete"] = lambda: ec2.delete_security_group(GroupId=record["id"])
        if observe:
            record["id"] = external
            found = ec2.describe_security_groups(Filters=[{"Name": "group-id", "Values": [external]}])
            return bool(found["SecurityGroups"])
        vpc = self.ref(api, obj, "ec2.aws.m.upbound.io", "VPC", fp["vpcIdRef"])
        record["id"] = ec2.create_security_group(
            GroupName=fp["name"],
            Description=fp["description"],
            VpcId=vpc,
            TagSpecifications=_spec("security-group", fp),
        )["GroupId"]
        return record["id"]

    def _SecurityGroupIngressRule(self, api, obj, fp, record, external, observe):  # noqa: N802
        ec2 = self.client(fp["region"], "ec2")

        def delete():
            ec2.revoke_security_group_ingress(GroupId=record["group"], SecurityGroupRuleIds=[record["id"]])

        record["delete"] = delete
        if observe:  # the rule id (IdentifierFromProvider)
            try:
                rules = ec2.describe_security_group_rules(SecurityGroupRuleIds=[external])["SecurityGroupRules"]
            except ClientError:
                return False
            record["id"], record["group"] = external, rules[0]["GroupId"]
            return True
        group = self.ref(api, obj, "ec2.aws.m.upbound.io", "SecurityGroup", fp["securityGroupIdRef"])
        permission = {
            "IpProtocol": fp["ipProtocol"],
            "FromPort": int(fp["fromPort"]),
            "ToPort": int(fp["toPort"]),
            "IpRanges": [{"CidrIp": fp["cidrIpv4"], "Description": fp.get("description", "")}],
        }
        answer = ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=[permission])
        record["id"], record["group"] = answer["SecurityGroupRules"][0]["SecurityGroupRuleId"], group
        return record["id"]

    # --- rds ------------------------------------------------------------------------------------
    def _SubnetGroup(self, api, obj, fp, record, external, observe):  # noqa: N802
        rds = self.client(fp["region"], "rds")
        record["delete"] = lambda: rds.delete_db_subnet_group(DBSubnetGroupName=external)
        if observe:
            groups = rds.describe_db_subnet_groups()["DBSubnetGroups"]
            return any(g["DBSubnetGroupName"] == external for g in groups)
        subnets = [self.ref(api, obj, "ec2.aws.m.upbound.io", "Subnet", r) for r in fp["subnetIdRefs"]]
        rds.create_db_subnet_group(
            DBSubnetGroupName=external,
            DBSubnetGroupDescription=fp["description"],
            SubnetIds=subnets,
            Tags=_tags(fp),
        )
        return external

    def _Instance(self, api, obj, fp, record, external, observe):  # noqa: N802
        rds = self.client(fp["region"], "rds")
        identifier = fp["identifier"]

        def delete():
            rds.delete_db_instance(DBInstanceIdentifier=identifier, SkipFinalSnapshot=bool(fp.get("skipFinalSnapshot")))

        record["delete"] = delete
        if observe:
            return any(i.get("DbiResourceId") == external for i in rds.describe_db_instances()["DBInstances"])
        kwargs = {
            "DBInstanceIdentifier": identifier,
            "DBInstanceClass": fp["instanceClass"],
            "Engine": fp["engine"],
            "EngineVersion": fp.get("engineVersion"),
            "AllocatedStorage": fp.get("allocatedStorage"),
            "StorageType": fp.get("storageType"),
            "StorageEncrypted": fp.get("storageEncrypted"),
            "PubliclyAccessible": fp.get("publiclyAccessible"),
            "MultiAZ": fp.get("multiAz"),
            "DBName": fp.get("dbName"),
            "MasterUsername": fp.get("username"),
            "ManageMasterUserPassword": fp.get("manageMasterUserPassword"),
            "BackupRetentionPeriod": fp.get("backupRetentionPeriod"),
            "CopyTagsToSnapshot": fp.get("copyTagsToSnapshot"),
            "DeletionProtection": fp.get("deletionProtection"),
            "DBSubnetGroupName": self.ref(api, obj, "rds.aws.m.upbound.io", "SubnetGroup", fp["dbSubnetGroupNameRef"]),
            "VpcSecurityGroupIds": [
                self.ref(api, obj, "ec2.aws.m.upbound.io", "SecurityGroup", r)
                for r in fp.get("vpcSecurityGroupIdRefs") or []
            ],
            "Tags": _tags(fp),
        }
        made = rds.create_db_instance(**{k: v for k, v in kwargs.items() if v is not None})["DBInstance"]
        # terraform-provider-aws aws_db_instance: id is the DBI resource id (upjet IdentifierFromProvider)
        return made.get("DbiResourceId") or identifier

    # --- s3 -------------------------------------------------------------------------------------
    def _Bucket(self, api, obj, fp, record, external, observe):  # noqa: N802
        s3 = self.client(fp["region"], "s3")

        def delete():
            if fp.get("forceDestroy") or (obj.get("spec") or {}).get("forProvider", {}).get("forceDestroy"):
                versions = s3.list_object_versions(Bucket=external)
                for item in (versions.get("Versions") or []) + (versions.get("DeleteMarkers") or []):
                    s3.delete_object(Bucket=external, Key=item["Key"], VersionId=item["VersionId"])
            s3.delete_bucket(Bucket=external)

        record["delete"] = delete
        if not external:
            raise NotReady("the Bucket has no external name (its bucket name)")
        if observe:
            return any(b["Name"] == external for b in s3.list_buckets().get("Buckets") or [])
        region = fp["region"]
        kwargs = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
        s3.create_bucket(Bucket=external, **kwargs)
        if fp.get("tags"):
            s3.put_bucket_tagging(Bucket=external, Tagging={"TagSet": _tags(fp)})
        return external

    def _bucket_setting(self, api, obj, fp, record, observe, put, delete):
        if observe:
            return False
        bucket = self.ref(api, obj, "s3.aws.m.upbound.io", "Bucket", fp["bucketRef"])
        s3 = self.client(fp["region"], "s3")
        put(s3, bucket)
        record["delete"] = lambda: delete(s3, bucket)
        return bucket  # upjet: these settings' id is the bucket name

    def _BucketOwnershipControls(self, api, obj, fp, record, external, observe):  # noqa: N802
        rule = {"Rules": [{"ObjectOwnership": fp["rule"]["objectOwnership"]}]}
        return self._bucket_setting(
            api,
            obj,
            fp,
            record,
            observe,
            lambda s3, b: s3.put_bucket_ownership_controls(Bucket=b, OwnershipControls=rule),
            lambda s3, b: s3.delete_bucket_ownership_controls(Bucket=b),
        )

    def _BucketPublicAccessBlock(self, api, obj, fp, record, external, observe):  # noqa: N802
        block = {
            "BlockPublicAcls": bool(fp.get("blockPublicAcls")),
            "IgnorePublicAcls": bool(fp.get("ignorePublicAcls")),
            "BlockPublicPolicy": bool(fp.get("blockPublicPolicy")),
            "RestrictPublicBuckets": bool(fp.get("restrictPublicBuckets")),
        }
        return self._bucket_setting(
            api,
            obj,
            fp,
            record,
            observe,
            lambda s3, b: s3.put_public_access_block(Bucket=b, PublicAccessBlockConfiguration=block),
            lambda s3, b: s3.delete_public_access_block(Bucket=b),
        )

    def _BucketServerSideEncryptionConfiguration(self, api, obj, fp, record, external, observe):  # noqa: N802
        rules = [
            {
                "ApplyServerSideEncryptionByDefault": {
                    "SSEAlgorithm": (r.get("applyServerSideEncryptionByDefault") or {}).get("sseAlgorithm")
                },
                "BucketKeyEnabled": bool(r.get("bucketKeyEnabled")),
            }
            for r in fp.get("rule") or []
        ]
        return self._bucket_setting(
            api,
            obj,
            fp,
            record,
            observe,
            lambda s3, b: s3.put_bucket_encryption(Bucket=b, ServerSideEncryptionConfiguration={"Rules": rules}),
            lambda s3, b: s3.delete_bucket_encryption(Bucket=b),
        )

    def _BucketVersioning(self, api, obj, fp, record, external, observe):  # noqa: N802
        status = (fp.get("versioningConfiguration") or {}).get("status", "Enabled")
        return self._bucket_setting(
            api,
            obj,
            fp,
            record,
            observe,
            lambda s3, b: s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": status}),
            # terraform-provider-aws aws_s3_bucket_versioning: deleting it suspends versioning
            lambda s3, b: s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Suspended"}),
        )

    # --- iam (global) ---------------------------------------------------------------------------
    def _Role(self, api, obj, fp, record, external, observe):  # noqa: N802
        iam = self.client(None, "iam")
        record["delete"] = lambda: iam.delete_role(RoleName=external)
        if observe:
            return any(r["RoleName"] == external for r in iam.list_roles()["Roles"])
        kwargs = {"RoleName": external, "AssumeRolePolicyDocument": fp["assumeRolePolicy"], "Tags": _tags(fp)}
        for field, arg in (("description", "Description"), ("maxSessionDuration", "MaxSessionDuration")):
            if field in fp:
                kwargs[arg] = fp[field]
        iam.create_role(**kwargs)
        return external

    def _User(self, api, obj, fp, record, external, observe):  # noqa: N802
        iam = self.client(None, "iam")
        record["delete"] = lambda: iam.delete_user(UserName=external)
        if observe:
            return any(u["UserName"] == external for u in iam.list_users()["Users"])
        iam.create_user(UserName=external, Tags=_tags(fp))
        return external

    def _Policy(self, api, obj, fp, record, external, observe):  # noqa: N802
        iam = self.client(None, "iam")
        name = external or obj["metadata"]["name"]
        found = next((p for p in iam.list_policies(Scope="Local")["Policies"] if p["PolicyName"] == name), None)
        if observe and found is None:
            return False
        arn = (
            found["Arn"]
            if found
            else iam.create_policy(
                PolicyName=name, PolicyDocument=fp["policy"], Description=fp.get("description", ""), Tags=_tags(fp)
            )["Policy"]["Arn"]
        )
        record["at_provider"] = {"arn": arn}
        record["delete"] = lambda: iam.delete_policy(PolicyArn=arn)
        return name

    def _RolePolicyAttachment(self, api, obj, fp, record, external, observe):  # noqa: N802
        if observe:
            return False
        iam = self.client(None, "iam")
        role = self.ref(api, obj, "iam.aws.m.upbound.io", "Role", fp["roleRef"])
        arn = fp.get("policyArn") or self.ref(api, obj, "iam.aws.m.upbound.io", "Policy", fp["policyArnRef"], arn=True)
        try:
            iam.attach_role_policy(RoleName=role, PolicyArn=arn)
            record["delete"] = lambda: iam.detach_role_policy(RoleName=role, PolicyArn=arn)
        except iam.exceptions.NoSuchEntityException:
            self.skipped.append(f"attach {arn} to role {role}: moto serves no AWS managed policies")
            record["delete"] = lambda: None
        return f"{role}-{arn}"

    def _UserPolicyAttachment(self, api, obj, fp, record, external, observe):  # noqa: N802
        if observe:
            return False
        iam = self.client(None, "iam")
        user = self.ref(api, obj, "iam.aws.m.upbound.io", "User", fp["userRef"])
        arn = fp.get("policyArn") or self.ref(api, obj, "iam.aws.m.upbound.io", "Policy", fp["policyArnRef"], arn=True)
        iam.attach_user_policy(UserName=user, PolicyArn=arn)
        record["delete"] = lambda: iam.detach_user_policy(UserName=user, PolicyArn=arn)
        return f"{user}-{arn}"

    # --- writes -----------------------------------------------------------------------------------
    @staticmethod
    def _patch(api, obj, body, subresource=None):
        res = api.resource_for(obj["apiVersion"], obj["kind"])
        return api.patch(
            res, obj["metadata"]["namespace"], obj["metadata"]["name"], "merge", body, subresource, "crossplane"
        )

    def _finalizers(self, api, obj, finalizers):
        return self._patch(api, obj, {"metadata": {"finalizers": finalizers or None}})

    def _status(self, api, obj, ready, reason, message, at_provider=None):
        status = copy.deepcopy(obj.get("status") or {})
        synced = "True" if ready else "False"
        old = {c["type"]: c for c in status.get("conditions") or []}
        wanted = [
            {"type": "Synced", "status": synced, "reason": "ReconcileSuccess" if ready else reason, "message": message},
            {"type": "Ready", "status": "True" if ready else "False", "reason": reason if ready else "Creating"},
        ]
        for condition in wanted:  # the CRD requires lastTransitionTime; it moves only when the status does
            previous = old.get(condition["type"]) or {}
            same = previous.get("status") == condition["status"]
            condition["lastTransitionTime"] = previous["lastTransitionTime"] if same else _now()
        status["conditions"] = wanted
        if at_provider:
            status["atProvider"] = dict(status.get("atProvider") or {}, **at_provider)
        if status != (obj.get("status") or {}):
            self._patch(api, obj, {"status": status}, "status")
