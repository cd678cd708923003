#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: flux_handoff
short_description: Hand a cluster to Flux (operator, run tags, sync secrets, FluxInstance) and wait until it is Ready
version_added: 0.1.0
description:
  - Installs the Flux Operator chart at the version pinned in bootstrap.toml (C([charts] flux-operator)) with
    C(helm upgrade --install), unless that version is already deployed.
  - Creates or updates the run tags ConfigMap (C(krops-run) in the Flux namespace) with C(KROPS_RUN_ID),
    C(KROPS_REVISION), C(KROPS_EXPIRES_AT) and C(KROPS_RUN_KIND); tags already in the ConfigMap are reused,
    so a second run changes nothing.
  - For Git sync, creates the Secret C(flux-github-pat) (C(username), C(password)) from O(github_token).
    With O(age_key_file), creates the Secret C(sops-age) (key C(age.agekey)) in every namespace of O(sops_namespaces).
  - Creates or updates the FluxInstance C(flux) (C(fluxcd.controlplane.io/v1)) through the Kubernetes API
    (not the flux-instance chart). Git sync uses a GitRepository with C(refs/heads/<branch>) and the pull
    secret; OCI sync uses C(oci://<registry-name>:<registry-container-port>/<oci-repository>) from bootstrap.toml
    (C(oci://krops-registry:5000/krops) by default) with a kustomize patch that makes the OCIRepository insecure
    (plain HTTP in-cluster registry). The Flux distribution version is C(bootstrap.flux-version).
  - Then waits, event-driven (Kubernetes watches, no polling), for the FluxInstance to be Ready and then for every
    Kustomization of the Flux namespace (the root C(flux-system) and those the tree creates) to be Ready.
    A Kustomization the pivot suspended (a pivot run that died during the move) is not waited for; see RV(held_by_pivot).
    A Kustomization reporting C(Stalled=True) fails the wait at once with its message.
  - The action plugin shows progress on the controller (FluxInstance state, which Kustomizations are Ready and
    which are pending, with their Ready reason and message) at least every O(progress_interval) seconds.
  - On timeout the task fails with that table and the failing Kustomizations' messages, and returns the partial
    result (RV(kustomizations), RV(fluxinstance), RV(run_tags)).
  - Secrets are never returned, logged or passed on a command line.
author:
  - krops developers (@krops)
extends_documentation_fragment:
  - krops.platform.attributes
  - krops.platform.attributes.action
  - krops.platform.bootstrap_config
  - krops.platform.kube
options:
  scope:
    description:
      - V(all) runs the whole handoff.
      - V(secrets) only (re)writes the run tags ConfigMap and the sync secrets (for example after rotating the token or
        the age key); no chart, no FluxInstance, no wait.
      - V(wait) writes nothing and only waits for the FluxInstance and the Kustomizations (for example on a workload
        cluster whose Flux was installed by the management cluster).
    type: str
    choices: [all, secrets, wait]
    default: all
  sync_url:
    description:
      - Overrides the sync URL. Git sync defaults to C(bootstrap.git-url); OCI sync to
        C(oci://krops-registry:5000/<bootstrap.oci-repository>).
    type: str
  sync_ref:
    description:
      - Overrides the sync reference. Git sync defaults to C(refs/heads/<bootstrap.git-branch>) (a bare branch name
        is prefixed with C(refs/heads/)); OCI sync to C(bootstrap.oci-tag).
    type: str
  age_key_file:
    description:
      - Path of the age identity file whose content becomes the C(sops-age) Secret (key C(age.agekey)).
      - When not set, no C(sops-age) Secret is written.
    type: path
  sops_namespaces:
    description:
      - Namespaces that decrypt SOPS secrets and get the C(sops-age) Secret.
      - Defaults to the Flux namespace and C(bootstrap.mgmt-namespace) (where remote-apply Kustomizations live).
    type: list
    elements: str
  github_token:
    description:
      - GitHub token for the C(flux-github-pat) Secret; required when the environment syncs from Git.
      - Defaults to the E(GITHUB_TOKEN) environment variable.
    type: str
  run_tags:
    description:
      - Run tags to write instead of generated ones (the pivot copies the source cluster's tags).
      - Keys are C(KROPS_RUN_ID), C(KROPS_REVISION), C(KROPS_EXPIRES_AT), C(KROPS_RUN_KIND); missing keys come from
        the existing ConfigMap or are generated (C(<environment>-<UTC time>), V(unknown), now + C(bootstrap.run-ttl),
        V(manual)).
    type: dict
  install_operator:
    description: Install or upgrade the Flux Operator chart with helm.
    type: bool
    default: true
  helm_binary:
    description: Path or name of the helm binary. Default is C(helm) from E(PATH).
    type: str
  wait:
    description: Wait for the FluxInstance and the Kustomizations to be Ready.
    type: bool
    default: true
  wait_timeout:
    description:
      - Seconds to wait in total.
      - Defaults to C(bootstrap.local-reconcile-timeout) for a V(local-host) environment, else the environment's
        C(mgmt-ready-timeout).
    type: int
  progress_interval:
    description: Seconds between progress reports on the controller while waiting.
    type: int
    default: 30
attributes:
  check_mode:
    details: Reports in RV(actions) what would be installed, created or updated; never writes and never waits.
  diff_mode:
    support: partial
    details: Shows the run tags ConfigMap and the FluxInstance spec; for Secrets only the key names.
  action:
    details: The action plugin runs the module in bounded steps and shows progress between them.
  platform:
    details: Talks to the Kubernetes API (and runs helm) from the host it runs on (the roles delegate to localhost).
notes:
  - Kustomizations are reported in C(spec.dependsOn) order; a dependency that does not exist yet is listed as V(NotFound).
  - C(helm upgrade --install ... --wait --timeout 10m) is used for the operator, so the first step may take
    up to ten minutes before progress is shown.
requirements:
  - helm (when O(install_operator=true) and O(scope=all))
"""

EXAMPLES = r"""
- name: Hand the kind cluster to Flux (local-host, OCI sync)
  krops.platform.flux_handoff:
    kubeconfig: ~/.kube/krops-kind.yaml
    context: kind-mgmt
    environment: local-host
    config_file: "{{ playbook_dir }}/../bootstrap.toml"

- name: Hand the management cluster to Flux with the source cluster's run tags (pivot)
  krops.platform.flux_handoff:
    kubeconfig: ~/.kube/krops-mgmt.yaml
    context: krops-mgmt
    environment: aws
    age_key_file: age.agekey
    github_token: "{{ lookup('ansible.builtin.env', 'GITHUB_TOKEN') }}"
    run_tags: "{{ source_run_tags }}"
    wait_timeout: 2400

- name: Rotate the sync secrets only
  krops.platform.flux_handoff:
    kubeconfig: ~/.kube/krops-mgmt.yaml
    environment: aws
    scope: secrets
    age_key_file: age.agekey
"""

RETURN = r"""
changed:
  description: Whether anything was installed, created or updated.
  returned: always
  type: bool
  sample: true
environment:
  description: The bootstrap.toml environment used.
  returned: always
  type: str
  sample: local-host
actions:
  description: What was done (or, in check mode, would be done), one line each.
  returned: always
  type: list
  elements: str
  sample: ["install Flux Operator chart 0.58.1 (release flux-operator in flux-system)", "create FluxInstance flux-system/flux"]
operator:
  description: The Flux Operator release (name, version, whether it changed).
  returned: when O(install_operator=true) and O(scope=all)
  type: dict
  sample: {"release": "flux-operator", "version": "0.58.1", "changed": false}
sync:
  description: The sync source of the FluxInstance (kind, url, ref, path, pull_secret).
  returned: when O(scope) is not V(wait)
  type: dict
  sample: {"kind": "OCIRepository", "url": "oci://krops-registry:5000/krops", "ref": "latest",
           "path": "mgmt/local-host", "pull_secret": null}
sops_namespaces:
  description: Namespaces that hold the C(sops-age) Secret.
  returned: when O(scope) is not V(wait)
  type: list
  elements: str
  sample: [flux-system, capi-system]
run_tags:
  description: The run tags in the ConfigMap.
  returned: always (empty with O(scope=wait))
  type: dict
  sample: {"KROPS_RUN_ID": "local-host-20261130-054000", "KROPS_REVISION": "unknown",
           "KROPS_EXPIRES_AT": "2026-12-01T05:40:00Z", "KROPS_RUN_KIND": "manual"}
fluxinstance:
  description: Name and readiness of the FluxInstance.
  returned: always
  type: dict
  sample: {"name": "flux", "ready": true, "reason": "ReconciliationSucceeded", "message": "Reconciliation finished"}
kustomizations:
  description: The Kustomizations of the Flux namespace in dependsOn order, with their Ready condition.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "flux-system", "ready": true, "reason": "ReconciliationSucceeded", "message": "Applied revision",
            "depends_on": []}]
ready:
  description: Whether the FluxInstance and every Kustomization are Ready (false when some are RV(held_by_pivot)).
  returned: always
  type: bool
  sample: true
held_by_pivot:
  description:
    - Kustomizations suspended by an interrupted pivot (annotation C(krops.io/suspended-by=krops.platform.capi_pivot)),
      which the wait does not wait for and the handoff never resumes; a warning names them. Running the pivot again
      completes the move, or resumes them when it rolls back.
  returned: after the wait
  type: list
  elements: str
  sample: []
wait_timeout:
  description: The wait budget in seconds that applied.
  returned: always
  type: int
  sample: 900
"""

from ansible.module_utils.basic import env_fallback

from ansible_collections.krops.platform.plugins.module_utils import cli
from ansible_collections.krops.platform.plugins.module_utils import config as krops_config
from ansible_collections.krops.platform.plugins.module_utils import errors
from ansible_collections.krops.platform.plugins.module_utils import flux
from ansible_collections.krops.platform.plugins.module_utils import kube
from ansible_collections.krops.platform.plugins.module_utils import shell
from ansible_collections.krops.platform.plugins.module_utils import steps

NAME = "krops.platform.flux_handoff"

# Every failure names the module; a missing helm and a failed helm run say which step it was.
WORDING = {
    errors.KropsError: "flux_handoff: {error}",
    cli.CliError: "flux_handoff: installing the Flux Operator failed: {error}",
    cli.ToolMissing: "flux_handoff: {error} (set helm_binary, or install_operator=false when the operator is installed)",
}


# The resume state of the stepped wait (module_utils/stepping.py): the engine's one shape, set by the action plugin,
# never an option.
STEP_STATE = steps.STEP_STATE


def argument_spec():
    return kube.argument_spec(
        **krops_config.ARGS,
        scope=dict(type="str", default="all", choices=list(flux.SCOPES)),
        sync_url=dict(type="str"),
        sync_ref=dict(type="str"),
        age_key_file=dict(type="path"),
        sops_namespaces=dict(type="list", elements="str"),
        github_token=dict(type="str", no_log=True, fallback=(env_fallback, ["GITHUB_TOKEN"])),
        run_tags=dict(type="dict"),
        install_operator=dict(type="bool", default=True),
        helm_binary=dict(type="str"),
        wait=dict(type="bool", default=True),
        wait_timeout=dict(type="int"),
        progress_interval=dict(type="int", default=30),
    )


def body(module, step):
    params = module.params
    step("checking the options")
    shell.positive(params, "wait_timeout progress_interval request_timeout", unit=" second")
    step("handing the cluster to Flux")
    return flux.handoff(params, check_mode=module.check_mode)


def _api_error(exc, params):
    """An API answer no step expected: name the cluster that gave it."""
    return errors.KubeError(
        "the Kubernetes API of {} answered an error: {}".format(
            kube.describe_target(params["kubeconfig"], params["context"]), kube.error_text(exc)
        )
    )


def main():
    shell.run(
        NAME, argument_spec(), body, resume=STEP_STATE, wording=WORDING, translate={kube.ApiException: _api_error}
    )


if __name__ == "__main__":
    main()
