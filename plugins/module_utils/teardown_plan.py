# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The ordered per-environment teardown plan that roles/teardown walks step by step (plain data; check mode
prints it), and the tools its steps need."""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import capi
from ansible_collections.krops.platform.plugins.module_utils import ownership
from ansible_collections.krops.platform.plugins.module_utils import profiles
from ansible_collections.krops.platform.plugins.module_utils.teardown import (
    HOST_UNREACHABLE,
    PROVIDER_KINDS,
)


def _step(action, description, **params):
    return dict(action=action, description=description, **params)


def _kind_step(boot, host, kept, description):
    """delete-kind only when the kind cluster answered and its marker proves krops created it for this environment."""
    if host["kind_reachable"] and host["kind_marker"]["owned"]:
        return [_step("delete-kind", description, name=boot.kind_cluster, proof=host["kind_marker"]["reason"])]
    kept.append(
        {
            "what": f"kind cluster {boot.kind_cluster}",
            "reason": host["kind_marker"]["reason"]
            if host["kind_reachable"]
            else "the kind cluster did not answer, so nothing proves krops created it",
        }
    )
    return []


def build_plan(cfg, environment, host, local_cluster_timeout=300, kept=None):
    """The ordered teardown steps for an environment, given find_host's result.

    Plain data: roles/teardown walks it step by step and check mode prints it. What the teardown
    leaves because krops cannot prove it owns it is appended to ``kept`` ({what, reason}).
    """
    kept = [] if kept is None else kept
    boot = cfg.bootstrap
    env = cfg.environment(environment)
    profile = profiles.of(env)
    mgmt = env.mgmt_cluster
    namespace = boot.mgmt_namespace
    pivoted = host["pivoted"]
    workloads = list(env.teardown.capi_workloads)
    reachable = host["host"] != HOST_UNREACHABLE
    steps = []
    if reachable:
        steps.append(
            _step(
                "suspend-flux",
                "suspend every Flux Kustomization and Flux Operator object on the %s cluster"
                % ("management" if pivoted else "kind"),
            )
        )
    if not reachable and profile.cloud_teardown_step:
        # forced: nothing answers, so only the cloud side can be removed
        return _number(
            [
                _step(
                    profile.cloud_teardown_step,
                    f"remove the {profile.cloud} resources this environment created, the management cluster "
                    "included (ownership-filtered; forced: no controller host answers)",
                )
            ]
        )
    if not reachable and profile.hardware_release:
        return []
    if reachable and profile.hardware_release:
        names = ownership.owned_cluster_names(env, pivoted)
        steps.append(
            _step(
                "tinkerbell-release",
                "delete the Clusters %s named by bootstrap.toml so CAPT returns their "
                "Hardware to the Tinkerbell pool; wait until no Hardware carries ownership marks"
                % (", ".join(names) or "(none)"),
                namespace=namespace,
                clusters=names,
                keep=[mgmt] if pivoted else [],
                timeout=boot.cluster_delete_timeout,
            )
        )
    elif reachable and workloads:
        # workload Clusters made of local containers get the local timeout
        timeout = local_cluster_timeout if profile.local_containers else boot.cluster_delete_timeout
        if profile.cloud_teardown_before_clusters:
            steps.append(
                _step(
                    profile.cloud_teardown_step,
                    f"remove the {profile.cloud} resources the workload Clusters' deletion waits for "
                    f"({profile.cloud_teardown_before_clusters}; ownership-filtered)",
                    phase="before-clusters",
                    timeout=boot.cluster_delete_timeout,
                )
            )
        steps.append(
            _step(
                "delete-clusters",
                "delete the workload Clusters {} through the provider and wait ({}s)".format(
                    ", ".join(workloads), timeout
                ),
                namespace=namespace,
                clusters=workloads,
                keep=[mgmt],
                timeout=timeout,
            )
        )
    if profile.local_containers:
        if not pivoted:
            steps += _kind_step(
                boot,
                host,
                kept,
                "delete the kind cluster {} (the controller host; {})".format(
                    boot.kind_cluster, host["kind_marker"]["reason"]
                ),
            )
        clusters = [mgmt] + workloads
        steps.append(
            _step(
                "remove-containers",
                "remove the Docker containers labelled {}={} and their anonymous volumes".format(
                    ownership.KIND_CLUSTER_LABEL, "|".join(clusters)
                ),
                label_key=ownership.KIND_CLUSTER_LABEL,
                clusters=clusters,
                filters=[ownership.docker_label_filter(c) for c in clusters],
            )
        )
        if pivoted:
            steps += _kind_step(
                boot,
                host,
                kept,
                "delete the leftover kind cluster {} ({})".format(boot.kind_cluster, host["kind_marker"]["reason"]),
            )
        kept.append(
            {
                "what": f"Docker network {boot.kind_network}",
                "reason": "kind creates it without a label for every kind cluster on the host and never "
                "deletes it; nothing proves krops owns it",
            }
        )
        if profile.local_registry:
            steps.append(
                _step(
                    "remove-registry",
                    f"remove the registry container {boot.registry_name} (exact name from bootstrap.toml)",
                    name=boot.registry_name,
                )
            )
        if profile.local_workload:
            # the bootstrap wrote each workload's kubeconfig (roles/bootstrap/tasks/workload.yml) with its
            # context, cluster and user named krops-<cluster>; its cluster is gone now
            for cluster in workloads:
                path, context = WORKLOAD_KUBECONFIG.format(cluster=cluster), f"krops-{cluster}"
                steps.append(
                    _step(
                        "remove-kubeconfig",
                        f"remove the context {context} (and the cluster and user only it uses) from {path}; "
                        "the file goes only when nothing else is left",
                        path=path,
                        context=context,
                    )
                )
    elif profile.cloud_teardown_step:
        steps.append(
            _step(
                "capi-providers",
                "delete the CAPI providers ({}) so nothing recreates cloud resources".format(
                    ", ".join(row[1] for row in capi.PROVIDER_DELETE_ORDER)
                ),
                kinds=list(PROVIDER_KINDS),
                timeout=boot.provider_delete_timeout,
            )
        )
        steps.append(
            _step(
                "flux-uninstall",
                f"helm uninstall flux and flux-operator in {boot.flux_namespace}",
                namespace=boot.flux_namespace,
                releases=["flux", "flux-operator"],
            )
        )
        steps.append(
            _step(
                "bootstrap-secrets",
                f"delete the bootstrap secrets and run tags in {boot.flux_namespace}",
                namespace=boot.flux_namespace,
                secrets=[boot.github_pat_secret, boot.sops_age_secret],
                configmaps=[boot.run_configmap],
            )
        )
        steps.append(
            _step(
                profile.cloud_teardown_step,
                f"remove the {profile.cloud} resources this environment created, the management cluster "
                "included (ownership-filtered)",
                timeout=boot.cluster_delete_timeout,
            )
        )
        steps += _kind_step(
            boot,
            host,
            kept,
            "delete the kind cluster {} ({})".format(boot.kind_cluster, host["kind_marker"]["reason"]),
        )
    elif profile.hardware_release and not pivoted:
        steps += _kind_step(
            boot,
            host,
            kept,
            "delete the kind cluster {} (the controller host; {})".format(
                boot.kind_cluster, host["kind_marker"]["reason"]
            ),
        )
    # a management cluster on bare-metal Hardware stays after the teardown, and so does its context. Elsewhere the
    # steps above remove the management cluster, pivoted or not: a pivot that died after its export phase left the
    # kubeconfig with kind still the host, and a teardown that kept it would exit 0 with krops' file on disk (issue 30).
    if not profile.hardware_release and (pivoted or host.get("mgmt_kubeconfig_present")):
        steps.append(
            _step(
                "remove-kubeconfig",
                f"remove krops' context {boot.mgmt_context} (and the cluster and user only it uses) "
                f"from {boot.mgmt_kubeconfig}; the file goes only when nothing else is left",
                path=boot.mgmt_kubeconfig,
                context=boot.mgmt_context,
            )
        )
    return _number(steps)


# The workload kubeconfig the bootstrap writes for a local workload cluster (roles/bootstrap/defaults).
WORKLOAD_KUBECONFIG = "~/.kube/krops-{cluster}.yaml"

# Executables the steps of a plan need.
STEP_TOOLS = {"delete-kind": ("kind",), "flux-uninstall": ("helm",)}


def plan_tools(plan):
    tools = []
    for step in plan:
        for tool in STEP_TOOLS.get(step["action"], ()):
            if tool not in tools:
                tools.append(tool)
    return tools


def _number(steps):
    for number, step in enumerate(steps, 1):
        step["step"] = number
    return steps
