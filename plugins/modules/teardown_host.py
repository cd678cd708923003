#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: teardown_host
author:
  - krops developers (@krops)
version_added: 0.1.0
short_description: Find the cluster a krops teardown acts on and plan the teardown
description:
  - Finds the controller host, the cluster that holds the Cluster API objects of an environment.
    It is the kind cluster when its context answers within O(timeout) seconds and still holds the
    management Cluster; else the self-managed management cluster reached through its exported
    kubeconfig; else V(unreachable).
  - Probes the Cluster and Kustomization objects on that host; when a probe cannot tell present from
    absent (any error other than NotFound, an empty listing or an unknown resource type) the module
    fails before anything is destroyed.
  - Returns the ordered teardown plan of the environment, which the role C(krops.platform.teardown)
    walks step by step. Every later call names the host explicitly, never the current context.
  - Reads bootstrap.toml through the krops typed loader.
options:
  kubeconfig:
    description:
      - Kubeconfig holding the kind cluster's context.
      - When not set, E(K8S_AUTH_KUBECONFIG), then the default kubeconfig.
    type: path
  context:
    description:
      - Context of the kind cluster. Defaults to E(K8S_AUTH_CONTEXT), then C(bootstrap.kind-context) of bootstrap.toml.
    type: str
  mgmt_kubeconfig:
    description:
      - Exported kubeconfig of the self-managed management cluster.
      - Defaults to C(bootstrap.mgmt-kubeconfig) of bootstrap.toml (E(MGMT_KUBECONFIG) overrides it).
    type: path
  mgmt_context:
    description: Context in O(mgmt_kubeconfig). Defaults to C(bootstrap.mgmt-context).
    type: str
  timeout:
    description: Seconds each cluster gets to answer (at least 1).
    type: int
    default: 10
  local_cluster_timeout:
    description: Seconds the local-host plan waits for its workload Clusters to be deleted (at least 1).
    type: int
    default: 300
  required_tools:
    description:
      - Executables that later steps need, besides those the plan implies (C(kind) to delete a kind cluster,
        C(helm) to uninstall Flux). Every missing one is reported at once, before anything changes.
    type: list
    elements: str
    default: []
  cleanup_kubeconfig:
    description:
      - Instead of planning, remove krops' entries from this kubeconfig file, that is the context O(mgmt_context)
        (default C(bootstrap.mgmt-context)) and the cluster and user only that context uses. The file is deleted
        only when nothing else is left in it; other contexts are never touched. Changes nothing in check mode.
    type: path
  force:
    description:
      - For the aws, azure and gcp environments, plan the cloud-side removal even when no controller host
        answers (the workload Clusters then cannot be confirmed gone).
    type: bool
    default: false
extends_documentation_fragment:
  - krops.platform.attributes
  - krops.platform.bootstrap_config
  - krops.platform.kube
attributes:
  check_mode:
    details: Planning only reads; with O(cleanup_kubeconfig) check mode reports what would be removed.
  platform:
    details: Reads bootstrap.toml and kubeconfig files of the host it runs on (the teardown role uses localhost).
notes:
  - Planning is read-only; only O(cleanup_kubeconfig) changes anything.
"""

EXAMPLES = r"""
- name: Find the controller host of the aws environment
  krops.platform.teardown_host:
    environment: aws
    required_tools: [helm]
  register: teardown_host

- name: Show the plan
  ansible.builtin.debug:
    msg: "{{ teardown_host.plan | map(attribute='description') | list }}"
"""

RETURN = r"""
host:
  description: Which cluster is the controller host.
  returned: always
  type: str
  choices: [kind, mgmt, unreachable]
  sample: kind
kubeconfig:
  description: Kubeconfig of the controller host (null when unreachable).
  returned: always
  type: str
  sample: ~/.kube/config
context:
  description: Context of the controller host (null when unreachable).
  returned: always
  type: str
  sample: kind-mgmt
pivoted:
  description: True when the management cluster manages itself (the host is the management cluster).
  returned: always
  type: bool
  sample: false
kind_reachable:
  description: Whether the kind context answered.
  returned: always
  type: bool
  sample: true
mgmt_reachable:
  description: Whether the exported management kubeconfig answered (not tried when kind holds the management Cluster).
  returned: always
  type: bool
  sample: false
errors:
  description: Why a cluster did not answer, by V(kind) or V(mgmt).
  returned: always
  type: dict
  sample: {mgmt: kubeconfig /home/user/.kube/krops-mgmt.yaml does not exist}
environment:
  description: The selected environment and its settings used by the teardown.
  returned: always
  type: dict
  contains:
    name:
      description: Environment name.
      type: str
      sample: local-host
    kind:
      description: Environment kind (local-host, aws, azure, gcp, local-talos).
      type: str
      sample: local-host
    resource_plane:
      description: The environment's C(resource-plane), C(native) or C(crossplane).
      type: str
      sample: native
    mgmt_cluster:
      description: Name of the management Cluster.
      type: str
      sample: local-management
    mgmt_namespace:
      description: Namespace of the Cluster objects.
      type: str
      sample: default
    bootstrap:
      description: The C([bootstrap]) table of bootstrap.toml (durations in seconds).
      type: dict
      sample: {kind-cluster: mgmt, kind-context: kind-mgmt, mgmt-namespace: default, mgmt-kubeconfig: ~/.kube/krops-mgmt.yaml}
    teardown:
      description: The environment's teardown table.
      type: dict
      sample: {capi-workloads: [local-workload]}
  sample:
    name: local-host
    kind: local-host
    resource_plane: native
    mgmt_cluster: local-management
    mgmt_namespace: default
    bootstrap: {kind-cluster: mgmt, kind-context: kind-mgmt, mgmt-namespace: default, mgmt-kubeconfig: ~/.kube/krops-mgmt.yaml}
    teardown: {capi-workloads: [local-workload]}
kind_marker:
  description: Whether the marker ConfigMap C(kube-system/krops-bootstrap) proves krops created the kind cluster.
  returned: when planning
  type: dict
  contains:
    owned:
      description: True when the marker matches the environment and the kind cluster name.
      type: bool
      sample: true
    reason:
      description: What the marker says, or why it does not prove ownership.
      type: str
      sample: "marker kube-system/krops-bootstrap: environment local-host, kind cluster mgmt"
  sample: {owned: true, reason: "marker kube-system/krops-bootstrap: environment local-host, kind cluster mgmt"}
kept:
  description: What the teardown leaves because krops cannot prove it owns it (what, reason).
  returned: when planning
  type: list
  elements: dict
  sample:
    - what: Docker network kind
      reason: kind creates it without a label for every kind cluster on the host and never deletes it; nothing proves krops owns it
removed:
  description: With O(cleanup_kubeconfig), the contexts, clusters and users removed.
  returned: with O(cleanup_kubeconfig)
  type: dict
  sample: {contexts: [krops-mgmt], clusters: [local-management], users: [local-management-admin]}
file_removed:
  description: With O(cleanup_kubeconfig), whether the file was deleted (nothing else was left in it).
  returned: with O(cleanup_kubeconfig)
  type: bool
  sample: false
plan:
  description: Ordered teardown steps; each has step, action, description and action-specific parameters.
  returned: always
  type: list
  elements: dict
  sample:
    - {step: 1, action: suspend-flux, description: suspend every Flux Kustomization ...}
    - {step: 2, action: delete-clusters, clusters: [local-workload], keep: [local-management], timeout: 300}
"""

from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils import kube
from ansible_collections.krops.platform.plugins.module_utils import profiles
from ansible_collections.krops.platform.plugins.module_utils import shell
from ansible_collections.krops.platform.plugins.module_utils import teardown
from ansible_collections.krops.platform.plugins.module_utils import teardown_plan
from ansible_collections.krops.platform.plugins.module_utils import tinkerbell

NAME = "krops.platform.teardown_host"


def argument_spec():
    return kube.argument_spec(
        mgmt_kubeconfig=dict(type="path"),
        mgmt_context=dict(type="str"),
        **krops_config.ARGS,
        timeout=dict(type="int", default=10),
        local_cluster_timeout=dict(type="int", default=300),
        required_tools=dict(type="list", elements="str", default=[]),
        force=dict(type="bool", default=False),
        cleanup_kubeconfig=dict(type="path"),
    )


def run(params, get_bin_path, check_mode=False):
    cfg = krops_config.load(params["config_file"], environment=params["environment"])
    env = cfg.environment()
    boot = cfg.bootstrap
    if params.get("cleanup_kubeconfig"):
        return teardown.remove_kubeconfig_entries(
            params["cleanup_kubeconfig"], params["mgmt_context"] or boot.mgmt_context, check_mode
        )
    missing = [tool for tool in params["required_tools"] if not get_bin_path(tool)]
    if missing:
        raise teardown.TeardownError(
            "missing tools needed by the teardown of {}: {}; install them and run again (nothing was changed)".format(
                cfg.selected, ", ".join(missing)
            )
        )
    kind_kubeconfig, kind_context = kube.resolve_auth(params["kubeconfig"], params["context"])
    kind_context = kind_context or boot.kind_context
    mgmt_kubeconfig = params["mgmt_kubeconfig"] or boot.mgmt_kubeconfig
    mgmt_context = params["mgmt_context"] or boot.mgmt_context
    host = teardown.find_host(
        kind_kubeconfig,
        kind_context,
        mgmt_kubeconfig,
        mgmt_context,
        env.mgmt_cluster,
        boot.mgmt_namespace,
        params["timeout"],
        environment=cfg.selected,
        kind_cluster=boot.kind_cluster,
    )
    if host["host"] != teardown.HOST_UNREACHABLE:
        # The host is kind or the management cluster, each with its own kubeconfig: only the timeout applies to both.
        client = kube.connect(host["kubeconfig"], host["context"], request_timeout=params.get("request_timeout"))
        where = "the {} cluster (context {})".format(host["host"], host["context"])
        res = teardown.served_cluster(client)
        if res is not None:
            teardown.probe_or_abort(client, res.group_version, "Cluster", boot.mgmt_namespace, "Clusters", where)
        teardown.probe_or_abort(client, *teardown.KUSTOMIZATION, what="Kustomizations", target=where)
        if profiles.of(env).hardware_release:
            teardown.probe_or_abort(client, *tinkerbell.HARDWARE, what="Hardware", target=where)
    # a cloud side or bare-metal Hardware needs a controller host (or force); local containers do not
    elif (profiles.of(env).cloud or profiles.of(env).hardware_release) and not params["force"]:
        raise teardown.TeardownError(
            "no controller host answers for {}: kind context {} ({}) and management kubeconfig {} ({}); the workload "
            "Clusters cannot be deleted through their provider nor confirmed gone. Restore access to one of them, or "
            "set force to remove the cloud side anyway".format(
                cfg.selected,
                kind_context,
                host["errors"].get("kind", "not tried"),
                mgmt_kubeconfig,
                host["errors"].get("mgmt", "not tried"),
            ),
            host,
        )
    # krops' exported management kubeconfig on disk: with kind still the host, a pivot died after exporting it
    host["mgmt_kubeconfig_present"] = teardown.on_disk(boot.mgmt_kubeconfig)
    host["kept"] = []
    host["plan"] = teardown_plan.build_plan(cfg, cfg.selected, host, params["local_cluster_timeout"], host["kept"])
    missing = [tool for tool in teardown_plan.plan_tools(host["plan"]) if not get_bin_path(tool)]
    if missing:
        raise teardown.TeardownError(
            "missing tools needed by the teardown of {}: {}; install them and run again (nothing was changed)".format(
                cfg.selected, ", ".join(missing)
            ),
            host,
        )
    host["environment"] = {
        "name": cfg.selected,
        "kind": env.platform,
        "resource_plane": env.resource_plane,
        "mgmt_cluster": env.mgmt_cluster,
        "mgmt_namespace": boot.mgmt_namespace,
        # the tables as the roles read them (TOML keys): the lookup's plain data
        "bootstrap": cfg.lookup("bootstrap"),
        "teardown": cfg.lookup("current.teardown"),
    }
    host["changed"] = False
    return host


def body(module, step):
    step("checking the options")
    shell.positive(module.params, "timeout local_cluster_timeout request_timeout", unit=" second")
    step("finding the controller host and planning the teardown")
    return run(module.params, module.get_bin_path, module.check_mode)


def main():
    shell.run(NAME, argument_spec(), body)


if __name__ == "__main__":
    main()
