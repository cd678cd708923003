# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""validate's ``bootstrap`` rules: bootstrap.toml agrees with the tree.

bootstrap.toml holds what the lifecycle needs before Flux runs (chart pins, provider and pivot manifests,
the management cluster, the teardown names); the tree is what Flux applies afterwards. Each rule is
registered in validate.REGISTRY; a rule is ``check(env)``, reads ``env.settings`` (the environment's
table, a config_types.Environment, never None here: bootstrap.environment reports a missing table) and
reports through ``env.add``.
"""

from __future__ import annotations

import os
import re

from ansible_collections.krops.platform.plugins.module_utils import capi
from ansible_collections.krops.platform.plugins.module_utils import config_types
from ansible_collections.krops.platform.plugins.module_utils import ownership
from ansible_collections.krops.platform.plugins.module_utils import profiles
from ansible_collections.krops.platform.plugins.module_utils import render
from ansible_collections.krops.platform.plugins.module_utils import validate_common as common

RULE = "bootstrap"
TOML = "bootstrap.toml"
# Chart name in Git -> key of bootstrap.toml [charts] (config_types.CHART_NAMES the other way round); the
# flux-instance chart ships with the flux-operator and follows its pin.
CHART_PINS = {chart: pin_key for pin_key, chart in config_types.CHART_NAMES.items()} | {
    "flux-instance": "flux-operator"
}
CAPI = "cluster.x-k8s.io"
OPERATOR = "operator.cluster.x-k8s.io"


def _key(env):
    return f"environments.{env.name}"


def _toml(env, key, message):
    """A finding about the environment's key ``key`` of bootstrap.toml (its table itself when empty)."""
    env.add(TOML, f"{_key(env)}.{key}" if key else _key(env), RULE, message)


def _boot(env):
    return env.cfg.bootstrap


def _teardown(env):
    return env.settings.teardown


def _load(env, manifest):
    """The documents of a manifest bootstrap.toml names, or None when it is missing or unreadable."""
    memo = env.memo.setdefault("manifests", {})
    if manifest not in memo:
        path = os.path.join(env.root, manifest)
        try:
            memo[manifest] = render.load_yaml_documents(path) if os.path.isfile(path) else None
        except common.YAML_ERRORS + (OSError, UnicodeDecodeError):
            memo[manifest] = None
    return memo[manifest]


def _manifest_fields(env):
    """(bootstrap.toml field, manifest path) of every manifest the environment's table names."""
    key, settings = _key(env), env.settings
    for name, manifests in (
        ("provider-manifests", settings.provider_manifests),
        ("pivot-manifests", settings.pivot_manifests),
        ("pivot-sops-secrets", settings.pivot_sops_secrets),
    ):
        for index, manifest in enumerate(manifests):
            yield "%s.%s[%d]" % (key, name, index), manifest
    for index, fallback in enumerate(settings.move_fallbacks):
        yield "%s.move-fallbacks[%d]" % (key, index), fallback.manifest


def _clusters(env):
    """Names of the CAPI Clusters in the management namespace, and that namespace."""
    mgmt_ns = _boot(env).mgmt_namespace
    return {i.name for i in env.items if i.kind == "Cluster" and i.group == CAPI and i.namespace == mgmt_ns}, mgmt_ns


# --- the environment's table and its paths -------------------------------------------------


def check_environment(env):
    """Every environment folder mgmt/<env> has an [environments.<env>] table in bootstrap.toml.

    Enforces krops' contract (docs/configuration.md): bootstrap, pivot and teardown read the
    environment's names from that table; without it the lifecycle cannot run the environment.
    """
    _toml(
        env,
        "",
        "mgmt/{} has no [environments.{}] table in bootstrap.toml (defined: {})".format(
            env.name, env.name, ", ".join(env.cfg.environment_names)
        ),
    )


def check_paths(env):
    """sync-path and workload-path name folders of the repository.

    Enforces krops' contract: the Flux sync (FluxInstance spec.sync.path) and the workload overlay are
    these folders.
    """
    for field, value in (("sync-path", env.settings.sync_path), ("workload-path", env.settings.workload_path)):
        if value and not os.path.isdir(os.path.join(env.root, value)):
            _toml(env, field, f"{value} does not exist in the repository")


# --- pins: charts, Flux, Kubernetes --------------------------------------------------------


def _chart_of(item, sources):
    """(chart name, version) a HelmRelease or HelmChartProxy installs, or (None, None)."""
    if item.kind == "HelmRelease" and item.group == "helm.toolkit.fluxcd.io":
        spec = (item.spec.get("chart") or {}).get("spec") or {}
        chart, version = spec.get("chart"), spec.get("version")
        ref = item.spec.get("chartRef") or {}
        if ref.get("kind") == "OCIRepository":
            source = sources.get(("OCIRepository", ref.get("namespace") or item.namespace, ref.get("name")))
            if source is not None:
                chart = str(source.spec.get("url", "")).rstrip("/").rsplit("/", 1)[-1]
                version = (source.spec.get("ref") or {}).get("tag")
        return chart, version
    if item.kind == "HelmChartProxy" and item.group == "addons.cluster.x-k8s.io":
        return item.spec.get("chartName"), item.spec.get("version")
    return None, None


def check_chart_pins(env):
    """Each chart bootstrap installs before Flux is pinned in the tree at the bootstrap.toml [charts] version.

    Enforces krops' contract: bootstrap installs cert-manager, the cluster-api-operator and the
    flux-operator charts imperatively at the [charts] pins, then Flux takes them over from the tree; the
    versions must agree or Flux up- or downgrades them at the hand-off.
    """
    charts = env.cfg.charts
    sources = {(i.kind, i.namespace, i.name): i for i in env.items if i.group == "source.toolkit.fluxcd.io"}
    for item in env.items:
        chart, version = _chart_of(item, sources)
        pin_key = CHART_PINS.get(chart)
        if pin_key is None:
            continue
        pin = charts.pin(pin_key)
        if str(version or "").lstrip("v") != str(pin).lstrip("v"):
            common.flag(
                env,
                item,
                RULE,
                "chart {} version {} differs from bootstrap.toml [charts] {} = {}".format(
                    chart, version or "(unset)", pin_key, pin
                ),
            )


def _flux_instances(env):
    return [i for i in env.items if i.kind == "FluxInstance" and i.group == "fluxcd.controlplane.io"]


def check_flux_version(env):
    """Every FluxInstance runs the Flux distribution of bootstrap.toml bootstrap.flux-version.

    Enforces krops' contract: flux_handoff installs that version (management and workload run the same
    Flux; docs/upstream-facts.md "Version pins" for the flux-operator release that ships it).
    """
    wanted = _boot(env).flux_version
    for item in _flux_instances(env):
        version = (item.spec.get("distribution") or {}).get("version")
        if version != wanted:
            common.flag(
                env,
                item,
                RULE,
                "FluxInstance distribution.version {} differs from "
                "bootstrap.toml bootstrap.flux-version = {} (management and workload run the same Flux)".format(
                    version or "(unset)", wanted
                ),
            )


def check_flux_sync_url(env):
    """An OCI-synced FluxInstance pulls from the in-cluster address of the local registry.

    Enforces krops' contract and KEP-1755 local registry hosting (docs/upstream-facts.md): inside the
    cluster the registry is <registry-name>:<registry-container-port>, where bootstrap pushes the
    oci-repository artifact.
    """
    if env.settings.sync != "oci":
        return
    boot = _boot(env)
    wanted = f"oci://{boot.registry_name}:{boot.registry_container_port}/{boot.oci_repository}"
    for item in _flux_instances(env):
        sync = item.spec.get("sync") or {}
        if sync.get("kind") == "OCIRepository" and sync.get("url") != wanted:
            common.flag(
                env,
                item,
                RULE,
                "FluxInstance sync.url {} differs from {} "
                "(bootstrap.toml registry-name, registry-container-port, oci-repository)".format(
                    sync.get("url") or "(unset)", wanted
                ),
            )


def check_kind_node_version(env):
    """CAPD clusters (the local workload) run the Kubernetes version of the pinned kind node image.

    Enforces krops' contract (bootstrap.toml's comment on kind-node-image): the local-host clusters run
    the Kubernetes version of the bootstrap cluster's node image kindest/node:<version>, whose digest is
    recorded in docs/upstream-facts.md "kind".
    """
    image = _boot(env).kind_node_image
    tag = image.split("@", 1)[0].rpartition(":")[2] if ":" in image.split("@", 1)[0] else ""
    if not profiles.of(env.settings).local_workload or not tag:
        return
    for item in env.items:
        if item.kind == "KubeadmControlPlane":
            version = item.spec.get("version")
        elif item.kind == "MachineDeployment" and item.group == CAPI:
            version = ((item.spec.get("template") or {}).get("spec") or {}).get("version")
        else:
            continue
        if version != tag:
            common.flag(
                env,
                item,
                RULE,
                "Kubernetes version {} differs from the kind "
                "node image {} (bootstrap.toml bootstrap.kind-node-image)".format(version or "(unset)", tag),
            )


# --- manifests bootstrap.toml names --------------------------------------------------------


def check_manifest_files(env):
    """Every manifest bootstrap.toml names (provider, pivot, pivot SOPS, move fallback) exists and is YAML.

    Enforces krops' contract: bootstrap and pivot apply these files as they are (before Flux runs).
    """
    for field, manifest in _manifest_fields(env):
        path = os.path.join(env.root, manifest)
        if not os.path.isfile(path):
            env.add(TOML, field, RULE, f"{manifest} does not exist")
            continue
        try:
            render.load_yaml_documents(path)
        except common.YAML_ERRORS + (OSError, UnicodeDecodeError) as exc:
            env.add(manifest, "-", RULE, "{}: cannot be read as YAML: {}".format(field, " ".join(str(exc).split())))


def _providers(docs):
    return [
        d for d in docs if d.get("kind") in capi.PROVIDER_KINDS and common.group_of(d.get("apiVersion", "")) == OPERATOR
    ]


def check_provider_manifest_kinds(env):
    """Every provider manifest holds a cluster-api-operator provider object.

    Upstream fact: the cluster-api-operator installs providers from its operator.cluster.x-k8s.io
    provider kinds (CoreProvider, BootstrapProvider, ControlPlaneProvider, InfrastructureProvider,
    AddonProvider, ...), which bootstrap applies from these files.
    """
    for index, manifest in enumerate(env.settings.provider_manifests):
        docs = _load(env, manifest)
        if docs is not None and not _providers(docs):
            env.add(
                manifest,
                "-",
                RULE,
                "%s.provider-manifests[%d]: holds no operator.cluster.x-k8s.io provider "
                "object (%s)" % (_key(env), index, ", ".join(capi.PROVIDER_KINDS[:5])),
            )


def check_provider_manifests_in_tree(env):
    """Every provider object of a provider manifest is part of the tree rendered for the environment.

    Enforces krops' contract: bootstrap installs the providers before Flux, then Flux owns them; a
    provider the tree does not render would be left unmanaged (or pruned) after the hand-off.
    """
    for manifest in env.settings.provider_manifests:
        for doc in _providers(_load(env, manifest) or []):
            meta = doc.get("metadata") or {}
            if not env.defined(doc.get("kind"), meta.get("namespace") or "", meta.get("name")):
                env.add(
                    manifest,
                    common.object_id(doc),
                    RULE,
                    f"provider manifest is not part of the tree rendered for {env.name} (no kustomization lists it)",
                )


def check_infra_provider(env):
    """A provider manifest holds the InfrastructureProvider infra-provider-namespace/infra-provider-name.

    Enforces krops' contract: bootstrap waits for that provider before it creates the management cluster.
    """
    settings = env.settings
    if not settings.provider_manifests:
        return
    infra = (settings.infra_provider_namespace, settings.infra_provider_name)
    for manifest in settings.provider_manifests:
        for doc in _providers(_load(env, manifest) or []):
            meta = doc.get("metadata") or {}
            if doc.get("kind") == "InfrastructureProvider" and (meta.get("namespace"), meta.get("name")) == infra:
                return
    _toml(
        env,
        "infra-provider-name",
        "no provider manifest holds InfrastructureProvider {}/{} (infra-provider-namespace/infra-provider-name)".format(
            *infra
        ),
    )


def check_pivot_manifests(env):
    """Every pivot manifest holds at least one Kubernetes object.

    Enforces krops' contract: the pivot applies these to the target cluster before clusterctl move.
    """
    for index, manifest in enumerate(env.settings.pivot_manifests):
        docs = _load(env, manifest)
        if docs is not None and not docs:
            env.add(manifest, "-", RULE, "%s.pivot-manifests[%d]: holds no Kubernetes object" % (_key(env), index))


def check_pivot_manifest_vars(env):
    """Every pivot-manifest-vars entry is used (${NAME}) by a pivot manifest.

    Enforces krops' contract: the pivot substitutes these variables into the pivot manifests; one no
    manifest uses is a leftover or a typo. pivot-sops-secrets are substituted too but encrypted, so with
    any of them the rule cannot tell and stays silent.
    """
    settings = env.settings
    if settings.pivot_sops_secrets:
        return
    texts = []
    for manifest in settings.pivot_manifests:
        try:
            with open(os.path.join(env.root, manifest), encoding="utf-8") as handle:
                texts.append(handle.read())
        except (OSError, UnicodeDecodeError):
            pass  # bootstrap.manifest-files reports it
    for name in sorted(settings.pivot_manifest_vars):
        if not any(re.search(rf"\$\{{{re.escape(name)}(:?[=-][^}}]*)?\}}", text) for text in texts):
            env.add(
                TOML,
                f"{_key(env)}.pivot-manifest-vars.{name}",
                RULE,
                f"{name} is used by no pivot manifest (${{{name}}}); remove it or use it",
            )


def check_pivot_sops_secrets(env):
    """Every pivot-sops-secrets file holds a SOPS-encrypted Secret.

    Enforces krops' contract: the pivot decrypts these with the age key (sops) and applies the Secrets
    to the target cluster before clusterctl move.
    """
    for index, manifest in enumerate(env.settings.pivot_sops_secrets):
        docs = _load(env, manifest)
        if docs is not None and not any(d.get("kind") == "Secret" and isinstance(d.get("sops"), dict) for d in docs):
            env.add(
                manifest, "-", RULE, "%s.pivot-sops-secrets[%d]: holds no SOPS-encrypted Secret" % (_key(env), index)
            )


def check_move_fallbacks(env):
    """Every move fallback's manifest holds the object it names (<plural>.<group> and name).

    Enforces krops' contract: when clusterctl move leaves that object behind, the pivot applies it from
    this manifest; a CRD resource is named <plural>.<group> (the CRD's spec.names.plural).
    """
    for index, fallback in enumerate(env.settings.move_fallbacks):
        docs = _load(env, fallback.manifest)
        if docs is None:
            continue
        plural, _dot, group = fallback.resource.partition(".")
        if not any(
            common.group_of(d.get("apiVersion", "")) == group
            and common.plural(str(d.get("kind", ""))) == plural
            and (d.get("metadata") or {}).get("name") == fallback.name
            for d in docs
        ):
            env.add(
                fallback.manifest,
                "-",
                RULE,
                f"{_key(env)}.move-fallbacks[{index}]: holds no {fallback.resource} named {fallback.name}",
            )


# --- cluster names and teardown ------------------------------------------------------------


def check_mgmt_cluster(env):
    """mgmt-cluster is a CAPI Cluster of the tree in the management namespace.

    Enforces krops' contract: the pivot moves to, and teardown spares, the Cluster of that name.
    """
    clusters, mgmt_ns = _clusters(env)
    if env.settings.mgmt_cluster not in clusters:
        _toml(
            env,
            "mgmt-cluster",
            "mgmt-cluster {} is not a Cluster in namespace {} of the tree (Clusters there: {})".format(
                env.settings.mgmt_cluster, mgmt_ns, ", ".join(sorted(clusters)) or "none"
            ),
        )


def check_capi_workloads(env):
    """teardown.capi-workloads are Clusters of the tree, and never the management cluster.

    Enforces krops' contract: teardown deletes each through its Cluster object (CAPI then deletes what
    it created); deleting the management cluster that way would pull the ground from under it.
    """
    clusters, mgmt_ns = _clusters(env)
    where = ", ".join(sorted(clusters)) or "none"
    for name in _teardown(env).capi_workloads:
        if name not in clusters:
            _toml(
                env,
                "teardown.capi-workloads",
                f"capi-workload {name} is not a Cluster in namespace {mgmt_ns} of the tree (Clusters there: {where})",
            )
        elif name == env.settings.mgmt_cluster:
            _toml(
                env,
                "teardown.capi-workloads",
                f"capi-workload {name} is the "
                "management cluster; teardown must never delete it through its Cluster object",
            )


def check_mgmt_container_prefix(env):
    """teardown.mgmt-container-prefix is a prefix of mgmt-cluster.

    Upstream fact: CAPD names the containers of a Cluster's machines after the Cluster, so teardown finds
    the management cluster's containers by this prefix.
    """
    prefix = _teardown(env).mgmt_container_prefix
    if prefix and not env.settings.mgmt_cluster.startswith(prefix):
        _toml(
            env,
            "teardown.mgmt-container-prefix",
            f"mgmt-container-prefix {prefix} does not match mgmt-cluster {env.settings.mgmt_cluster} (CAPD names containers after the Cluster)",
        )


def _aws_workloads(env):
    for index, workload in enumerate(_teardown(env).aws_workloads):
        yield "%s.teardown.aws-workloads[%d]" % (_key(env), index), workload


def check_aws_workload_clusters(env):
    """teardown.aws-workloads cluster-name is a Cluster of the tree in the management namespace.

    Enforces krops' contract: aws teardown deletes that Cluster first, then sweeps what it leaves.
    """
    clusters, mgmt_ns = _clusters(env)
    for field, workload in _aws_workloads(env):
        if workload.cluster_name not in clusters:
            env.add(
                TOML,
                field,
                RULE,
                "cluster-name {} is not a Cluster in namespace {} of the tree (Clusters there: {})".format(
                    workload.cluster_name, mgmt_ns, ", ".join(sorted(clusters)) or "none"
                ),
            )


def _spec_values(env, kind, field):
    return {str(i.spec.get(field)) for i in env.items if i.kind == kind and i.spec.get(field)}


def check_aws_workload_eks(env):
    """teardown.aws-workloads eks-cluster-name is the eksClusterName of an AWSManagedControlPlane.

    Upstream fact: CAPA names the EKS cluster spec.eksClusterName; the AWS sweep looks it up by this name.
    """
    eks_names = _spec_values(env, "AWSManagedControlPlane", "eksClusterName")
    for field, workload in _aws_workloads(env):
        if eks_names and workload.eks_cluster_name not in eks_names:
            env.add(
                TOML,
                field,
                RULE,
                "eks-cluster-name {} matches no AWSManagedControlPlane eksClusterName ({})".format(
                    workload.eks_cluster_name, ", ".join(sorted(eks_names))
                ),
            )


def check_aws_workload_rds(env):
    """teardown.aws-workloads rds-instance is the dbInstanceIdentifier of a DBInstance of the tree.

    Upstream fact: the ACK RDS controller creates the instance as spec.dbInstanceIdentifier; the AWS
    sweep looks it up by this name.
    """
    rds_names = _spec_values(env, "DBInstance", "dbInstanceIdentifier")
    for field, workload in _aws_workloads(env):
        if rds_names and workload.rds_instance and workload.rds_instance not in rds_names:
            env.add(
                TOML,
                field,
                RULE,
                "rds-instance {} matches no DBInstance dbInstanceIdentifier ({})".format(
                    workload.rds_instance, ", ".join(sorted(rds_names))
                ),
            )


def _refs_regions(env, refs, namespace):
    found = set()
    for ref in refs:
        for obj in env.items:
            if (
                isinstance(ref, dict)
                and obj.kind == ref.get("kind")
                and obj.name == ref.get("name")
                and obj.namespace == namespace
            ):
                found.update(str(obj.spec[f]) for f in ("region", "location") if obj.spec.get(f))
    return found


def _cluster_regions(env, name, namespace):
    """The regions (spec.region or spec.location) of the objects Cluster <name> refers to."""
    found = set()
    for item in env.items:
        if item.kind == "Cluster" and item.group == CAPI and item.name == name and item.namespace == namespace:
            found |= _refs_regions(
                env, (item.spec.get("controlPlaneRef"), item.spec.get("infrastructureRef")), namespace
            )
    return found


def check_mgmt_region(env):
    """mgmt-region is the region (spec.region or spec.location) of mgmt-cluster's control plane.

    Enforces krops' contract: the lifecycle talks to the management cluster's cloud in mgmt-region.
    """
    region = env.settings.mgmt_region
    _clusters_found, mgmt_ns = _clusters(env)
    found = _cluster_regions(env, env.settings.mgmt_cluster, mgmt_ns)
    if region and found and region not in found:
        _toml(
            env,
            "mgmt-region",
            "mgmt-region {} differs from the region of mgmt-cluster {} in the tree ({})".format(
                region, env.settings.mgmt_cluster, ", ".join(sorted(found))
            ),
        )


def check_aws_workload_regions(env):
    """teardown.aws-workloads region is the region of that workload cluster's control plane.

    Enforces krops' contract: the AWS sweep of a workload runs in its region.
    """
    mgmt_ns = _boot(env).mgmt_namespace
    for field, workload in _aws_workloads(env):
        found = _cluster_regions(env, workload.cluster_name, mgmt_ns)
        if found and workload.region not in found:
            env.add(
                TOML,
                field,
                RULE,
                "region {} differs from the region of cluster {} in the tree ({})".format(
                    workload.region, workload.cluster_name, ", ".join(sorted(found))
                ),
            )


def check_networks(env):
    """teardown.networks (gcp) lists exactly the VPCs of the tree.

    Upstream fact: CAPG creates a VPC per cluster named spec.network.name (docs/upstream-facts.md
    "Hardening round 2": CAPG marks it in its description); Config Connector's ComputeNetwork is named
    spec.resourceID or metadata.name. gcp teardown deletes the listed VPCs with everything inside.
    """
    vpcs = {
        str(i.spec["network"]["name"])
        for i in env.items
        if i.kind == "GCPManagedCluster" and isinstance(i.spec.get("network"), dict) and i.spec["network"].get("name")
    } | {str(i.spec.get("resourceID") or i.name) for i in env.items if i.kind == "ComputeNetwork"}
    listed = list(_teardown(env).networks)
    field = f"{_key(env)}.teardown.networks"
    for name in listed:
        if name not in vpcs:
            env.add(
                TOML,
                field,
                RULE,
                "network {} is not a VPC of the tree "
                "(GCPManagedCluster spec.network.name or ComputeNetwork: {})".format(
                    name, ", ".join(sorted(vpcs)) or "none"
                ),
            )
    for name in sorted(vpcs - set(listed)):
        env.add(
            TOML,
            field,
            RULE,
            f"VPC {name} of the tree is not in teardown networks: teardown would leave it and everything in it behind",
        )


def check_gcp_iam(env):
    """teardown.service-accounts and .workload-identity-providers (gcp) name exactly what krops creates.

    Upstream fact: GCP IAM objects carry no labels, so teardown deletes exactly these names; the rules are
    ownership.gcp_iam_problems, the ones gcp_teardown enforces too (one rule set).
    """
    teardown = _teardown(env)
    declared = ownership.gcp_iam_declared([i.obj for i in env.items], env.settings.post_kind_create_hook)
    listed = (list(teardown.service_accounts), list(teardown.workload_identity_providers))
    for field, _dummy, message in ownership.gcp_iam_problems(*listed, declared):
        _toml(env, f"teardown.{field}", message)


def check_resource_groups(env):
    """teardown.resource-groups (azure) are ResourceGroups of the tree (metadata.name or spec.azureName).

    Upstream fact: Azure Service Operator names the Azure resource group spec.azureName, else
    metadata.name; azure teardown deletes the listed groups with everything in them.
    """
    groups = {i.name for i in env.items if i.kind == "ResourceGroup"} | {
        str(i.spec.get("azureName")) for i in env.items if i.kind == "ResourceGroup" and i.spec.get("azureName")
    }
    for name in _teardown(env).resource_groups:
        if name not in groups:
            _toml(
                env,
                "teardown.resource-groups",
                "resource group {} is not a ResourceGroup of the tree ({})".format(
                    name, ", ".join(sorted(groups)) or "none"
                ),
            )
