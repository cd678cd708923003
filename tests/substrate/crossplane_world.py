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


# --- Crossplane core: the chart and the package manager ---------------------------------------------------
# The chart (cluster/charts/crossplane @ v2.3.4) installs Crossplane's own CRDs (cluster/crds/pkg.crossplane.io_*;
# the vendored ones: Provider, DeploymentRuntimeConfig) and runs the Deployment "crossplane" (templates/
# deployment.yaml: name = the chart's name; values.yaml image xpkg.crossplane.io/crossplane/crossplane).
CHART = "crossplane"
CHART_BUNDLE = [("pkg.crossplane.io", ["Provider", "DeploymentRuntimeConfig"])]
CHART_IMAGE = ("crossplane", "xpkg.crossplane.io/crossplane/crossplane")
PKG = "pkg.crossplane.io/v1"
RUNTIME_CONFIG = "pkg.crossplane.io/v1beta1"
LABEL_PARENT = "pkg.crossplane.io/package"  # apis/pkg/v1 LabelParentPackage
LABEL_REVISION = "pkg.crossplane.io/revision"  # apis/pkg/v1 LabelRevision
IRSA_ANNOTATION = "eks.amazonaws.com/role-arn"
FAMILY = "xpkg.upbound.io/upbound/provider-family-aws"
SERVICES = {"provider-aws-s3": "s3", "provider-aws-rds": "rds", "provider-aws-iam": "iam", "provider-aws-ec2": "ec2"}


def _packages(version="v2.6.0"):
    """The packages the emulated registry (xpkg.upbound.io) serves: reference -> (CRDs it brings, dependencies).

    Only the pinned release is served: another tag, or a package krops does not use, is unknown to the registry,
    as any tag that was never published is."""
    found = {
        f"{FAMILY}:{version}": (
            (("aws.m.upbound.io", "ClusterProviderConfig"), ("aws.m.upbound.io", "ProviderConfig")),
            (),
        )
    }
    for package, service in SERVICES.items():
        kinds = tuple((g, k) for g, k, p in XP_KINDS if p == package)
        found[f"xpkg.upbound.io/upbound/{package}:{version}"] = (kinds, (FAMILY,))
    return found


def register_crossplane_chart(monkeypatch):
    """Make the emulated helm-controller install the Crossplane chart's CRDs and run its Deployment (this test)."""
    from tests.substrate import flux_world, strict_api

    monkeypatch.setitem(strict_api.CRD_BUNDLES, CHART, CHART_BUNDLE)
    monkeypatch.setitem(flux_world.CHART_CRDS, CHART, (CHART,))
    monkeypatch.setitem(flux_world.CHART_WORKLOADS, CHART, CHART_IMAGE)


def to_dns_label(text):
    """crossplane-runtime v2.3.3 pkg/xpkg/name.go ToDNSLabel."""
    cut = []
    for i, ch in enumerate(text):
        if "a" <= ch <= "z" or "0" <= ch <= "9":
            cut.append(ch)
        if ch in "./:-" and i not in (0, 62, len(text) - 1):
            cut.append("-")
        if i == 62:
            break
    return "".join(cut).strip("-")


def friendly_id(name, digest):
    """pkg/xpkg/name.go FriendlyID: the revision (and its Deployment and ServiceAccount) name."""
    return to_dns_label("-".join([name[:50], digest[:12]]))


def _running(api, namespace, name):
    try:
        d = api.get("apps/v1", "Deployment", name, namespace)
    except Exception:  # noqa: BLE001 - not there
        return False
    return (d.get("spec") or {}).get("replicas", 1) > 0 and (d.get("status") or {}).get("readyReplicas", 0) > 0


class PackageManager:
    """Crossplane core's package manager for Providers (internal/controller/pkg/manager, revision, resolver and
    runtime @ v2.3.4), acting only while the chart's Deployment ``crossplane`` runs in ``namespace``:

    - the package is resolved in the emulated registry (``packages``); one it does not serve fails as the manager
      fails a package it cannot resolve: ``Installed`` False ``UnpackingPackage`` and ``Healthy`` False
      ``UnhealthyPackageRevision``, both with ``cannot unpack package: cannot resolve <ref> to digest: ...``
      (manager/reconciler.go errUnpack; crossplane-runtime pkg/xpkg/client.go, fetch.go), and nothing is installed;
    - a resolved package gets its revision name ``FriendlyID(<provider>, <digest>)``, its CRDs, its dependencies
      as Providers named ``ToDNSLabel(<repository>)`` (resolver/reconciler.go), and its runtime: a ServiceAccount
      and a Deployment named after the revision, labelled ``pkg.crossplane.io/revision`` and
      ``pkg.crossplane.io/provider`` (runtime.go), the ServiceAccount's annotations from the
      DeploymentRuntimeConfig named by ``runtimeConfigRef`` (``serviceAccountTemplate.metadata``);
    - then ``Installed`` True ``ActivePackageRevision`` and ``Healthy`` True ``HealthyPackageRevision``, with
      ``currentRevision`` and ``currentIdentifier`` (apis/pkg/v1 conditions.go).

    Not emulated: ProviderRevision objects (their CRD is not vendored: the revision's name is in the Provider's
    status only), ImageConfigs, signature verification, the dependency version constraints (the dependency is
    installed at the depending package's tag), package upgrades and revision history."""

    def __init__(self, world, namespace="crossplane-system", packages=None):
        self.namespace = namespace
        self.packages = _packages() if packages is None else packages
        self.installed = []  # (provider, revision)
        self.refused = []  # (provider, message)
        world.controllers.append(self)

    @staticmethod
    def digest(ref):
        import hashlib

        return hashlib.sha256(ref.encode()).hexdigest()

    def reconcile(self, api):
        if ("pkg.crossplane.io", "providers") not in api.resources or not _running(api, self.namespace, CHART):
            return
        for provider in api.list(PKG, "Provider"):
            self._provider(api, provider)

    def _provider(self, api, provider):
        from tests.substrate.aws_world import install_crds

        name, ref = provider["metadata"]["name"], provider["spec"]["package"]
        status = provider.get("status") or {}
        if ref not in self.packages:
            host, rest = ref.split("/", 1) if "/" in ref else (ref, "")
            repo, tag = rest.rsplit(":", 1) if ":" in rest else (rest, "latest")
            message = (
                f"cannot unpack package: cannot resolve {ref} to digest: failed to fetch package descriptor with a "
                f"GET request after a previous HEAD request failure: HEAD https://{host}/v2/{repo}/manifests/{tag}: "
                f"unexpected status code 404 Not Found (HEAD responses have no body, use GET for details): GET "
                f"https://{host}/v2/{repo}/manifests/{tag}: MANIFEST_UNKNOWN: manifest unknown; unknown tag={tag}"
            )
            if (name, message) not in self.refused:
                self.refused.append((name, message))
            self._status(
                api,
                provider,
                [
                    ("Installed", "False", "UnpackingPackage", message),
                    ("Healthy", "False", "UnhealthyPackageRevision", message),
                ],
                {},
            )
            return
        kinds, depends = self.packages[ref]
        revision = friendly_id(name, self.digest(ref))
        install_crds(api, kinds)
        tag = ref.rpartition(":")[2]
        for dependency in depends:
            dep_name = to_dns_label(dependency.partition("/")[2])
            if not api.exists(PKG, "Provider", dep_name):
                api.create(
                    {
                        "apiVersion": PKG,
                        "kind": "Provider",
                        "metadata": {"name": dep_name},
                        "spec": {"package": f"{dependency}:{tag}"},
                    }
                )
        self._runtime(api, provider, revision)
        if status.get("currentRevision") != revision:
            self.installed.append((name, revision))
        self._status(
            api,
            provider,
            [("Installed", "True", "ActivePackageRevision", ""), ("Healthy", "True", "HealthyPackageRevision", "")],
            {"currentRevision": revision, "currentIdentifier": ref, "resolvedPackage": ref},
        )

    def _runtime(self, api, provider, revision):
        name = provider["metadata"]["name"]
        ref = provider["spec"].get("runtimeConfigRef") or {"name": "default"}
        annotations = {}
        try:
            config = api.get(RUNTIME_CONFIG, "DeploymentRuntimeConfig", ref["name"])
            template = (config.get("spec") or {}).get("serviceAccountTemplate") or {}
            annotations = dict((template.get("metadata") or {}).get("annotations") or {})
        except Exception:  # noqa: BLE001 - no such runtime config: the defaults
            annotations = {}
        labels = {LABEL_REVISION: revision, "pkg.crossplane.io/provider": name}
        sa = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": revision, "namespace": self.namespace, "labels": labels, "annotations": annotations},
        }
        if not api.exists("v1", "ServiceAccount", revision, self.namespace):
            api.create(sa)
        if api.exists("apps/v1", "Deployment", revision, self.namespace):
            return  # the runtime exists; its replicas are the cluster's (the teardown's quiesce scales them)
        pod = {
            "metadata": {"labels": labels},
            "spec": {
                "serviceAccountName": revision,
                "containers": [{"name": "package-runtime", "image": provider["spec"]["package"]}],
            },
        }
        api.create(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": revision, "namespace": self.namespace, "labels": labels},
                "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": pod},
            }
        )
        res = api.resource_for("apps/v1", "Deployment")
        status = {
            "observedGeneration": 1,
            "replicas": 1,
            "readyReplicas": 1,
            "availableReplicas": 1,
            "updatedReplicas": 1,
        }
        status["conditions"] = [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}]
        api.patch(res, self.namespace, revision, "merge", {"status": status}, "status", "kube-controller-manager")

    @staticmethod
    def _status(api, provider, conditions, fields):
        old = {c["type"]: c for c in (provider.get("status") or {}).get("conditions") or []}
        wanted = []
        for ctype, value, reason, message in conditions:
            previous = old.get(ctype) or {}
            same = previous.get("status") == value
            wanted.append(
                {
                    "type": ctype,
                    "status": value,
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": previous["lastTransitionTime"] if same else _now(),
                }
            )
        status = dict(fields, conditions=wanted)
        if status != (provider.get("status") or {}):
            res = api.resource_for(PKG, "Provider")
            api.patch(res, None, provider["metadata"]["name"], "merge", {"status": status}, "status", "crossplane")


class Irsa:
    """IAM roles for service accounts, for the emulated providers: a provider's Deployment gets AWS credentials
    only where the pod identity webhook of EKS and STS would give them (AWS IAM user guide, IRSA;
    AssumeRoleWithWebIdentity): its ServiceAccount is annotated ``eks.amazonaws.com/role-arn``, the cluster's
    API server is an EKS cluster (``issuer_of(api)``: its OIDC issuer URL, None for kind) whose IAM OIDC provider exists,
    and the role exists and trusts that provider for ``system:serviceaccount:<namespace>:<ServiceAccount>``
    (``StringEquals`` or ``StringLike`` on ``<issuer host/path>:sub``). On kind (no issuer) nothing authenticates.

    ``why(api, provider)`` is None when the provider authenticates, else the reason (the managed resources'
    ``Synced`` message). This stand-in reads the role from moto, never from the product."""

    def __init__(self, endpoint, namespace="crossplane-system"):
        self.endpoint = endpoint
        self.namespace = namespace
        self.issuer_of = lambda api: None

    def why(self, api, provider):
        import fnmatch
        import json
        import urllib.parse

        deployments = [
            d
            for d in api.list("apps/v1", "Deployment", self.namespace)
            if ((d.get("spec") or {}).get("selector") or {}).get("matchLabels", {}).get(PROVIDER_LABEL) == provider
        ]
        if not deployments:
            return f"provider {provider} has no runtime"
        sa_name = deployments[0]["spec"]["template"]["spec"].get("serviceAccountName") or "default"
        try:
            sa = api.get("v1", "ServiceAccount", sa_name, self.namespace)
        except Exception:  # noqa: BLE001
            return f"ServiceAccount {self.namespace}/{sa_name} not found"
        role_arn = ((sa.get("metadata") or {}).get("annotations") or {}).get(IRSA_ANNOTATION)
        issuer = self.issuer_of(api)
        if not role_arn or not issuer:
            return (
                "failed to retrieve credentials: no web identity token: the cluster is not EKS or the "
                "ServiceAccount names no role"
            )
        iam = clients(self.endpoint, "eu-north-1")("iam")
        host = issuer.removeprefix("https://")
        providers = [p["Arn"] for p in iam.list_open_id_connect_providers()["OpenIDConnectProviderList"]]
        provider_arn = next((a for a in providers if a.endswith(":oidc-provider/" + host)), None)
        if provider_arn is None:
            return f"InvalidIdentityToken: No OpenIDConnect provider found in your account for {issuer}"
        try:
            role = iam.get_role(RoleName=role_arn.rpartition("/")[2])["Role"]
        except ClientError:
            return f"AccessDenied: Not authorized to perform sts:AssumeRoleWithWebIdentity ({role_arn} not found)"
        document = role["AssumeRolePolicyDocument"]
        document = document if isinstance(document, dict) else json.loads(urllib.parse.unquote(document))
        subject = f"system:serviceaccount:{self.namespace}:{sa_name}"
        for statement in document.get("Statement") or []:
            federated = (statement.get("Principal") or {}).get("Federated")
            if statement.get("Effect") != "Allow" or federated != provider_arn:
                continue
            conditions = statement.get("Condition") or {}
            wanted = [
                v
                for op in ("StringEquals", "StringLike")
                for v in _as_list((conditions.get(op) or {}).get(f"{host}:sub"))
            ]
            if any(fnmatch.fnmatchcase(subject, w) for w in wanted):
                return None
        return f"AccessDenied: Not authorized to perform sts:AssumeRoleWithWebIdentity ({role_arn} does not trust {subject})"


def _as_list(value):
    return [] if value is None else value if isinstance(value, list) else [value]


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

    def __init__(self, world, endpoint, needs_deployment=False, identity=None):
        self.endpoint = endpoint
        self.needs_deployment = needs_deployment
        self.identity = identity  # an Irsa: a provider acts only where it authenticates
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
            denied = self.identity.why(api, provider) if self.identity else None
            for obj in api.list(f"{group}/{VERSION}", kind):
                with self.lock:
                    if denied:
                        self._status(api, obj, False, "ReconcileError", f"cannot get AWS credentials: {denied}")
                    else:
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
            known = self.records[key].get("external")
            if known is None or (meta.get("annotations") or {}).get(EXTERNAL_NAME) in (known, None):
                return
            # the external name changed under the provider (something applied another one, an empty one
            # included): the resource is looked up by it again and, where nothing exists by that name, created
            # again (a duplicate, when the old one still exists). Upjet's handling of this was not read.
            self.records.pop(key)
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
        record["external"] = external
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
