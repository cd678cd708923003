#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: capi_pivot
short_description: Move the Cluster API management plane from the kind cluster into the management cluster
version_added: 0.1.0
description:
  - Runs phases 0 to 4 of the krops pivot against two clusters, the disposable kind cluster (the source) and the
    self-managed management cluster (the target) that Flux on kind provisioned through Cluster API.
  - C(preconditions) the source is the kind context, (platforms with a local registry, local-host) the registry serves, the management Cluster exists
    within C(mgmt-ready-timeout).
  - C(export) Secret C(<mgmt-cluster>-kubeconfig) is merged into O(target_kubeconfig) (mode 0600; its context, cluster
    and user are named C(mgmt-context), and only entries of that name are replaced, so the other contexts of an existing
    file such as C(~/.kube/config) survive; on load-balancer platforms such as local-host the server is rewritten to the
    published load-balancer port); its nodes become Ready.
  - C(prepare) cert-manager and cluster-api-operator at the C([charts]) pins, the environment's provider manifests in
    order, the pivot manifests with C(${VAR}) and C(${VAR:=default}) substituted from the source's flux-system ConfigMaps
    overlaid by C(pivot-manifest-vars), credentials and SOPS secrets; every provider Ready and at least at the source's version.
  - C(preflight) every Cluster and Machine of C(mgmt-namespace) is movable, none paused, no block-move annotation; all
    reasons are reported together and nothing is paused or suspended.
  - C(move) the source's Flux Kustomizations are suspended (each annotated C(krops.io/suspended-by=krops.platform.capi_pivot)),
    C(clusterctl move) runs, the result is verified, moved Clusters are unpaused on the target and missing move fallbacks
    are applied. Kustomizations a killed earlier run left suspended with that annotation count as suspended by this run
    (a rollback resumes them); a Kustomization suspended without it is the user's and is never resumed.
  - A failure before C(move) changes nothing on the source. A failure during C(move) unpauses the source's Clusters, resumes
    the Kustomizations the module suspended (unless objects already left the source), deletes nothing on the target and
    returns the partial object list. Re-running completes the move; a re-run after success changes nothing.
  - The action plugin shows progress on the controller during the long waits (the management Cluster and its kubeconfig
    Secret, the nodes, each provider) at least every O(progress_interval) seconds, naming the phase, the time waited
    and what is pending. It runs the module in bounded steps; a step that runs out of its budget during a wait returns
    and the next step re-runs the pivot from the start (phases before C(move) are idempotent) with the time already
    spent counted against each timeout. Commands (helm, C(clusterctl move)) are never cut. The final result and the
    timeout errors are those of a single run.
  - Seeding Flux on the target and deleting the kind cluster are done by the role C(krops.platform.pivot).
author:
  - krops developers (@krops)
extends_documentation_fragment:
  - krops.platform.attributes
  - krops.platform.attributes.action
  - krops.platform.kube
  - krops.platform.bootstrap_config
attributes:
  check_mode:
    details: Plans every phase without writing (the kubeconfig is exported to a private temporary file), skips the
      waits and runs C(clusterctl move --dry-run).
  platform:
    details: Runs clusterctl and helm and talks to both Kubernetes APIs from the host it runs on (the pivot role delegates to localhost).
options:
  source_kubeconfig:
    description:
      - Kubeconfig holding the kind cluster's context. Defaults to O(kubeconfig), then the default kubeconfig.
    type: path
  source_context:
    description:
      - Context of the kind cluster. Defaults to O(context), then C(kind-context) of bootstrap.toml. It must be the kind context.
    type: str
  target_kubeconfig:
    description:
      - Where to write the exported management kubeconfig. Defaults to C(mgmt-kubeconfig) of bootstrap.toml.
    type: path
  repo_root:
    description:
      - Root of the GitOps repository; provider, pivot and fallback manifest paths are relative to it.
      - Defaults to the folder of the bootstrap.toml read.
    type: path
  stop_after:
    description:
      - Last phase to run.
    type: str
    choices: [preconditions, export, prepare, preflight, move]
    default: move
  lb_port:
    description:
      - local-host only. Published host port of the C(<mgmt-cluster>-lb) container. Found with C(docker inspect) when unset.
    type: int
  target_server:
    description:
      - API server URL to write into the exported kubeconfig instead of the one in the Secret (and instead of O(lb_port)).
    type: str
  registry_url:
    description:
      - local-host only. Base URL of the local registry checked in phase 0. Defaults to C(http://127.0.0.1:<registry-port>).
    type: str
  clusterctl_binary:
    description: Path of clusterctl. Found on E(PATH) when unset.
    type: path
  helm_binary:
    description: Path of helm. Found on E(PATH) when unset.
    type: path
  docker_binary:
    description: Path of docker (local-host, to find the load-balancer port). Found on E(PATH) when unset.
    type: path
  sops_binary:
    description: Path of sops (for C(pivot-sops-secrets)). Found on E(PATH) when unset.
    type: path
  age_key_file:
    description:
      - age key file decrypting C(pivot-sops-secrets), given to sops through E(SOPS_AGE_KEY_FILE).
      - Defaults to C(age-key-file) of bootstrap.toml, relative to O(repo_root).
    type: path
  aws_b64encoded_credentials:
    description:
      - aws only. Value of C(AWS_B64ENCODED_CREDENTIALS) for Secret C(capa-system/aws-credentials) on the target.
      - When unset, E(AWS_B64ENCODED_CREDENTIALS), then the same Secret on the kind cluster is used.
    type: str
  manifest_vars:
    description:
      - Extra variables for C(${VAR}) substitution, overriding the ConfigMaps and C(pivot-manifest-vars).
    type: dict
  wait_timeout:
    description: Seconds to wait for each chart and each provider to become Ready. When not set, 900.
    type: int
  node_timeout:
    description: Seconds to wait for the management cluster's nodes to become Ready. When not set, 900.
    type: int
  mgmt_ready_timeout:
    description: Seconds to wait for the management Cluster and its kubeconfig Secret. Defaults to C(mgmt-ready-timeout).
    type: int
  move_timeout:
    description: Seconds C(clusterctl move) may take. When not set, 3600.
    type: int
  progress_interval:
    description:
      - Seconds between progress lines on the controller while the module waits (shown on stderr by the action plugin).
    type: int
    default: 30
notes:
  - clusterctl gets both kubeconfig files by path; the credentials for AWS reach the cluster through the API, never argv.
  - Never deletes anything on the management cluster; deleting a moved Cluster, AWSManaged*, MachinePool or CAPD object
    there would deprovision real infrastructure.
seealso:
  - module: krops.platform.flux_handoff
  - module: krops.platform.kind_cluster
"""

EXAMPLES = r"""
- name: Pivot the local-host environment
  krops.platform.capi_pivot:
    environment: local-host
    config_file: "{{ playbook_dir }}/../bootstrap.toml"

- name: Only check that the move could start (phases 0 to 3)
  krops.platform.capi_pivot:
    environment: aws
    stop_after: preflight
  check_mode: true
"""

RETURN = r"""
phase_reached:
  description: Last phase that completed.
  returned: always
  type: str
  sample: move
failed_phase:
  description: Phase that failed.
  returned: failure
  type: str
  sample: move
moved:
  description: Objects that left the kind cluster and exist on the management cluster (check mode, the planned set).
  returned: always
  type: list
  elements: dict
  sample: [{kind: Cluster, namespace: default, name: local-management}]
partial:
  description: After a failed move, the objects of the move set that exist on the management cluster.
  returned: failure in the move phase
  type: list
  elements: dict
  sample: [{kind: Cluster, namespace: default, name: local-management}]
excluded:
  description: Cluster-scoped Cluster API objects on the kind cluster that a namespaced move does not carry (see fallbacks).
  returned: always
  type: list
  elements: dict
  sample: [{kind: ClusterClass, namespace: '', name: quick-start}]
fallbacks:
  description: Move fallbacks of bootstrap.toml with their state (present or applied).
  returned: always
  type: list
  elements: dict
  sample:
    - resource: awsclustercontrolleridentities.infrastructure.cluster.x-k8s.io
      name: default
      manifest: mgmt/aws/capa-identity/awsclustercontrolleridentity.yaml
      state: present
target_kubeconfig:
  description: Path of the exported management kubeconfig.
  returned: always
  type: str
  sample: ~/.kube/krops-mgmt.yaml
target_context:
  description: Context of the management cluster in O(target_kubeconfig).
  returned: always
  type: str
  sample: krops-mgmt
providers:
  description: Providers applied to the management cluster with their version and the source's version.
  returned: always
  type: list
  elements: dict
  sample:
    - kind: CoreProvider
      namespace: capi-system
      name: cluster-api
      version: v1.13.5
      source_version: v1.13.5
charts:
  description: Helm releases and their state (unchanged, installed, upgraded).
  returned: always
  type: list
  elements: dict
  sample:
    - release: cert-manager
      namespace: cert-manager
      chart: cert-manager
      version: v1.21.1
      state: installed
applied:
  description: Objects applied to the management cluster and their state (created, updated, unchanged).
  returned: always
  type: list
  elements: dict
  sample:
    - kind: CoreProvider
      namespace: capi-system
      name: cluster-api
      state: created
      file: mgmt/local-host/capi-system/core-provider.yaml
suspended:
  description: Kustomizations suspended on the kind cluster, by this run or (annotated) by an earlier run of the pivot.
  returned: always
  type: list
  elements: dict
  sample: [{namespace: flux-system, name: clusters}]
run_tags:
  description: Data of the run tags ConfigMap on the kind cluster, to copy to the target.
  returned: when the prepare phase ran
  type: dict
  sample:
    KROPS_RUN_ID: local-host-20261201-090000
    KROPS_REVISION: 44944ca
    KROPS_EXPIRES_AT: "2026-12-02T09:00:00Z"
    KROPS_RUN_KIND: manual
already_moved:
  description: True when the kind cluster held nothing left to move and the management cluster lists the Cluster.
  returned: always
  type: bool
  sample: false
progress:
  description: Progress lines of the run.
  returned: always
  type: list
  elements: str
  sample:
    - wrote ~/.kube/krops-mgmt.yaml (context krops-mgmt)
    - ">>> helm upgrade --install cert-manager cert-manager v1.21.1"
    - suspended 3 Kustomizations on the kind cluster
rollback:
  description: What the failed move undid on the kind cluster.
  returned: failure in the move phase
  type: list
  elements: str
  sample: [unpaused Cluster local-management on the kind cluster, resumed 3 Kustomizations on the kind cluster]
refusals:
  description: Every reason the preflight refused the move.
  returned: failure in the preflight phase
  type: list
  elements: str
  sample: ['Cluster local-management: control plane is not initialised']
unresolved:
  description: Unresolved variable names of the first pivot manifest that failed substitution.
  returned: substitution failure
  type: list
  elements: str
  sample: [AWS_REGION]
"""

from ansible.module_utils.basic import env_fallback

from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils import errors
from ansible_collections.krops.platform.plugins.module_utils import kube
from ansible_collections.krops.platform.plugins.module_utils import pivot
from ansible_collections.krops.platform.plugins.module_utils import shell
from ansible_collections.krops.platform.plugins.module_utils import steps

NAME = "krops.platform.capi_pivot"


# The resume state of the stepped waits (module_utils/stepping.py): the engine's one shape, set by the action plugin,
# never an option.
STEP_STATE = steps.STEP_STATE


def argument_spec():
    # The auth options reach the source (the kind cluster); the target is reached through the exported
    # kubeconfig, with the same request_timeout.
    return kube.argument_spec(
        source_kubeconfig=dict(type="path"),
        source_context=dict(type="str"),
        target_kubeconfig=dict(type="path"),
        **krops_config.ARGS,
        repo_root=dict(type="path"),
        stop_after=dict(type="str", choices=list(pivot.PHASES), default="move"),
        lb_port=dict(type="int"),
        target_server=dict(type="str"),
        registry_url=dict(type="str"),
        clusterctl_binary=dict(type="path"),
        helm_binary=dict(type="path"),
        docker_binary=dict(type="path"),
        sops_binary=dict(type="path"),
        age_key_file=dict(type="path"),
        aws_b64encoded_credentials=dict(
            type="str", no_log=True, fallback=(env_fallback, ["AWS_B64ENCODED_CREDENTIALS"])
        ),
        manifest_vars=dict(type="dict"),
        # The defaults are config.TIMEOUTS (one place); None here means "that default".
        wait_timeout=dict(type="int"),
        node_timeout=dict(type="int"),
        mgmt_ready_timeout=dict(type="int"),
        move_timeout=dict(type="int"),
        progress_interval=dict(type="int", default=krops_config.TIMEOUTS["progress_interval"]),
    )


# Options that must be positive when given (0 or less would end a wait at once or never).
_POSITIVE = (
    "wait_timeout",
    "node_timeout",
    "mgmt_ready_timeout",
    "move_timeout",
    "progress_interval",
    "lb_port",
    "request_timeout",
)


def check_params(params):
    """errors.ConfigError naming the first option out of range (reported as a preconditions failure)."""
    for name in _POSITIVE:
        value = params.get(name)
        if value is not None and value < 1:
            raise errors.ConfigError(
                f"{name} must be at least 1, got {value}",
                {"failed_phase": "preconditions", "phase_reached": None},
            )
    if params.get("lb_port") is not None and params["lb_port"] > 65535:
        raise errors.ConfigError(
            "lb_port must be a port number (1 to 65535), got {}".format(params["lb_port"]),
            {"failed_phase": "preconditions", "phase_reached": None},
        )


def body(module, step):
    params = dict(module.params)
    step("checking the options")
    check_params(params)
    params["source_kubeconfig"] = params["source_kubeconfig"] or params.pop("kubeconfig", None)
    params["source_context"] = params["source_context"] or params.pop("context", None)
    step("loading bootstrap.toml")
    cfg = krops_config.load(params["config_file"], environment=params["environment"])
    step("running the pivot phases")
    return pivot.run(cfg, params, check_mode=module.check_mode)


# A failed phase is named in the message and in failed_phase: a PivotError's, and a Kubernetes error's, which the
# engine names (errors.KropsError.step) and does not translate into a PivotError. A bootstrap.toml error fails the
# preconditions.
def _kube_wording(error, params):
    return f"pivot phase {error.step} failed: {error}" if error.step else str(error)


WORDING = {errors.PivotError: "pivot phase {error.step} failed: {error}", errors.KubeError: _kube_wording}
DETAILS = {
    errors.PivotError: lambda error, params: {"failed_phase": error.step},
    errors.KubeError: lambda error, params: {"failed_phase": error.step} if error.step else {},
    krops_config.ConfigKeyError: {"failed_phase": "preconditions", "phase_reached": None},
}


def main():
    shell.run(
        NAME,
        argument_spec(),
        body,
        resume=STEP_STATE,
        requires=[("kubernetes", kube.HAS_KUBERNETES, kube.KUBERNETES_IMPORT_ERROR)],
        wording=WORDING,
        details=DETAILS,
    )


if __name__ == "__main__":
    main()
