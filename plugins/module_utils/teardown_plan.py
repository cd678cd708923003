# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The ordered per-environment teardown plan that roles/teardown walks step by step (plain data; check mode
prints it), and the tools its steps need."""

from __future__ import annotations

import dataclasses

from ansible_collections.krops.platform.plugins.module_utils import capi
from ansible_collections.krops.platform.plugins.module_utils import ownership
from ansible_collections.krops.platform.plugins.module_utils import profiles
from ansible_collections.krops.platform.plugins.module_utils.teardown import (
    HOST_UNREACHABLE,
    PROVIDER_KINDS,
)


def _step(action, description, **params):
    return dict(action=action, description=description, **params)


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What every stage of the plan reads: the environment, its profile and find_host's result."""

    boot: object
    env: object
    profile: object
    host: dict
    kept: list
    local_cluster_timeout: int

    @property
    def pivoted(self):
        return self.host["pivoted"]

    @property
    def workloads(self):
        return list(self.env.teardown.capi_workloads)

    def kind_step(self, description):
        """delete-kind only when the kind cluster answered and its marker proves krops created it for this
        environment; else the kind cluster is kept, and why."""
        boot, host = self.boot, self.host
        if host["kind_reachable"] and host["kind_marker"]["owned"]:
            return [_step("delete-kind", description, name=boot.kind_cluster, proof=host["kind_marker"]["reason"])]
        self.kept.append(
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
    leaves because krops cannot prove it owns it is appended to ``kept`` ({what, reason}). The plan is
    STAGES in order; with no controller host, only what needs none.
    """
    env = cfg.environment(environment)
    plan = _Plan(cfg.bootstrap, env, profiles.of(env), host, [] if kept is None else kept, local_cluster_timeout)
    if host["host"] != HOST_UNREACHABLE:
        stages = STAGES
    elif plan.profile.cloud_teardown_step:
        stages = (_forced,)
    elif plan.profile.hardware_release:
        stages = ()  # bare-metal Hardware is released through the cluster only
    else:
        stages = (_host_side, _mgmt_kubeconfig)  # local containers go without a controller host
    return _number([step for stage in stages for step in stage(plan)])


def _forced(plan):
    """Nothing answers: only the cloud side can be removed, the management cluster included."""
    return [
        _step(
            plan.profile.cloud_teardown_step,
            f"remove the {plan.profile.cloud} resources this environment created, the management cluster "
            "included (ownership-filtered; forced: no controller host answers)",
        )
    ]


def _suspend_flux(plan):
    return [
        _step(
            "suspend-flux",
            "suspend every Flux Kustomization and Flux Operator object on the %s cluster"
            % ("management" if plan.pivoted else "kind"),
        )
    ]


def _clusters(plan):
    """The Clusters go first: released to the Tinkerbell pool, or deleted through their provider."""
    boot, profile, workloads = plan.boot, plan.profile, plan.workloads
    if profile.hardware_release:
        names = ownership.owned_cluster_names(plan.env, plan.pivoted)
        return [
            _step(
                "tinkerbell-release",
                "delete the Clusters %s named by bootstrap.toml so CAPT returns their "
                "Hardware to the Tinkerbell pool; wait until no Hardware carries ownership marks"
                % (", ".join(names) or "(none)"),
                namespace=boot.mgmt_namespace,
                clusters=names,
                keep=[plan.env.mgmt_cluster] if plan.pivoted else [],
                timeout=boot.cluster_delete_timeout,
            )
        ]
    if not workloads:
        return []
    steps = []
    # workload Clusters made of local containers get the local timeout
    timeout = plan.local_cluster_timeout if profile.local_containers else boot.cluster_delete_timeout
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
            "delete the workload Clusters {} through the provider and wait ({}s)".format(", ".join(workloads), timeout),
            namespace=boot.mgmt_namespace,
            clusters=workloads,
            keep=[plan.env.mgmt_cluster],
            timeout=timeout,
        )
    )
    return steps


def _host_side(plan):
    """What made the clusters: local containers, a cloud, or (before the pivot) kind beside bare metal."""
    if plan.profile.local_containers:
        return _local_containers(plan)
    if plan.profile.cloud_teardown_step:
        return _cloud(plan)
    if plan.profile.hardware_release and not plan.pivoted:
        reason = plan.host["kind_marker"]["reason"]
        return plan.kind_step(f"delete the kind cluster {plan.boot.kind_cluster} (the controller host; {reason})")
    return []


def _local_containers(plan):
    boot, profile, reason = plan.boot, plan.profile, plan.host["kind_marker"]["reason"]
    steps = []
    if not plan.pivoted:
        steps += plan.kind_step(f"delete the kind cluster {boot.kind_cluster} (the controller host; {reason})")
    clusters = [plan.env.mgmt_cluster] + plan.workloads
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
    if plan.pivoted:
        steps += plan.kind_step(f"delete the leftover kind cluster {boot.kind_cluster} ({reason})")
    plan.kept.append(
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
        for cluster in plan.workloads:
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
    return steps


def _cloud(plan):
    """The providers first (nothing recreates), then Flux and its secrets, the cloud side, and kind."""
    boot, profile = plan.boot, plan.profile
    return [
        _step(
            "capi-providers",
            "delete the CAPI providers ({}) so nothing recreates cloud resources".format(
                ", ".join(row[1] for row in capi.PROVIDER_DELETE_ORDER)
            ),
            kinds=list(PROVIDER_KINDS),
            timeout=boot.provider_delete_timeout,
        ),
        _step(
            "flux-uninstall",
            f"helm uninstall flux and flux-operator in {boot.flux_namespace}",
            namespace=boot.flux_namespace,
            releases=["flux", "flux-operator"],
        ),
        _step(
            "bootstrap-secrets",
            f"delete the bootstrap secrets and run tags in {boot.flux_namespace}",
            namespace=boot.flux_namespace,
            secrets=[boot.github_pat_secret, boot.sops_age_secret],
            configmaps=[boot.run_configmap],
        ),
        _step(
            profile.cloud_teardown_step,
            f"remove the {profile.cloud} resources this environment created, the management cluster "
            "included (ownership-filtered)",
            timeout=boot.cluster_delete_timeout,
        ),
        *plan.kind_step(f"delete the kind cluster {boot.kind_cluster} ({plan.host['kind_marker']['reason']})"),
    ]


def _mgmt_kubeconfig(plan):
    """krops' management context goes wherever the management cluster went.

    A management cluster on bare-metal Hardware stays after the teardown, and so does its context. Elsewhere the
    stages above remove the management cluster, pivoted or not: a pivot that died after its export phase left the
    kubeconfig with kind still the host, and a teardown that kept it would exit 0 with krops' file on disk."""
    boot = plan.boot
    if plan.profile.hardware_release or not (plan.pivoted or plan.host.get("mgmt_kubeconfig_present")):
        return []
    return [
        _step(
            "remove-kubeconfig",
            f"remove krops' context {boot.mgmt_context} (and the cluster and user only it uses) "
            f"from {boot.mgmt_kubeconfig}; the file goes only when nothing else is left",
            path=boot.mgmt_kubeconfig,
            context=boot.mgmt_context,
        )
    ]


# The plan, in order: each stage returns its steps for a reachable host.
STAGES = (_suspend_flux, _clusters, _host_side, _mgmt_kubeconfig)


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
