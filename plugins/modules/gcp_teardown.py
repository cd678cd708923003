#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: gcp_teardown
author:
  - krops developers (@krops)
version_added: 0.1.0
short_description: Remove the GCP resources a krops environment created, and nothing else
description:
  - Removes, stage by stage and waiting for each stage, the GKE clusters and Cloud SQL instances,
    the Cloud Storage buckets (every object version first), the VPC peerings, the private services
    ranges, the firewall rules and Cloud Routers, the subnetworks and finally the VPCs.
  - "Ownership filter: the VPCs are those bootstrap.toml names (C(environments.<env>.teardown.networks));
    the default VPC is never deleted. GKE clusters, Cloud SQL instances and buckets are deleted only when
    they carry the label C(krops-environment=<env>); living in an owned VPC proves nothing, and one labelled
    for another environment is never touched (both are listed in RV(not_owned)).
    Peerings, private services ranges (global addresses with purpose VPC_PEERING), firewall rules,
    routers and subnetworks (which carry no labels) are deleted only when they belong to an owned VPC."
  - A Cloud SQL instance with deletion protection is deleted only when bootstrap.toml names it in
    C(environments.<env>.teardown.disable-deletion-protection); otherwise it fails and stays."
  - A stage that leaves something behind stops the module (later stages depend on it); run it again.
  - Discovery is read-only and comes first; check mode returns the plan. Uses the Google REST APIs
    directly so one call covers every service.
  - Service accounts and Workload Identity pools stay (the next bootstrap re-adopts them).
options:
  environment:
    description: The krops environment. Defaults to E(KROPS_PROFILE), then C(bootstrap.default-environment).
    type: str
  config_file:
    description: Path to bootstrap.toml. Defaults to E(BOOTSTRAP_CONFIG), then C(bootstrap.toml) in the current folder.
    type: path
  project:
    description: GCP project id. Defaults to E(GCP_PROJECT), then E(GOOGLE_CLOUD_PROJECT).
    type: str
  access_token:
    description:
      - OAuth2 access token. Defaults to E(GCP_ACCESS_TOKEN).
      - Without it, Application Default Credentials (C(google.auth.default)) give the token, from
        E(GOOGLE_APPLICATION_CREDENTIALS) (a service account key or a workload identity federation file),
        C(gcloud auth application-default login), or the metadata server (see docs/teardown.md).
    type: str
  networks:
    description: VPC names the environment owns; defaults to C(teardown.networks) of the environment.
    type: list
    elements: str
  base_url:
    description:
      - Serve every Google API from this base URL (C(<base_url>/container), C(/sqladmin), C(/storage),
        C(/compute)), for tests and private endpoints. The public endpoints when not set.
    type: str
  wait:
    description: Wait for each stage's deletions before the next stage.
    type: bool
    default: true
  wait_timeout:
    description: Seconds to wait per stage.
    type: int
    default: 1800
  poll_interval:
    description: Seconds between checks while waiting.
    type: int
    default: 10
attributes:
  check_mode:
    support: full
    description: Discovers and returns RV(plan); deletes nothing.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
  platform:
    description: Target OS/families that can be operated against.
    support: full
    platforms: posix
    details: Calls the Google Cloud APIs from the host it runs on (the teardown role delegates to localhost).
requirements:
  - google-auth (Python), unless O(access_token) is given
notes:
  - A token read from E(GCP_ACCESS_TOKEN) is masked in results, messages and warnings like no_log options.
"""

EXAMPLES = r"""
- name: Remove the gcp environment's resources
  krops.platform.gcp_teardown:
    environment: gcp
    project: my-project
  register: gcp_teardown
"""

RETURN = r"""
plan:
  description: Deletions in order, each with the ownership reason.
  returned: always
  type: list
  elements: str
  sample:
    - delete gke-cluster europe-north1-workload (label krops-environment=gcp)
results:
  description: One entry per resource with type, name, reason and outcome (V(planned) in check mode, V(deleted),
    V(absent), V(failed) with C(error)); each entry also has C(id), the resource's API path.
  returned: always
  type: list
  elements: dict
  sample:
    - type: gke-cluster
      name: europe-north1-workload
      id: /v1/projects/krops-example/locations/europe-north1/clusters/europe-north1-workload
      reason: label krops-environment=gcp
      outcome: deleted
not_owned:
  description: Named resources left alone (the default VPC).
  returned: always
  type: list
  elements: dict
  sample:
    - type: network
      name: default
      reason: the default VPC is never deleted
leftovers:
  description: Resources still present or that failed (C(type/name)); the module fails when not empty.
  returned: always
  type: list
  elements: str
  sample: [subnetwork/europe-north1-workload]
stopped_at:
  description: The stage that left something behind; later stages did not run.
  returned: when leftovers is not empty
  type: str
  sample: subnetworks
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.krops.platform.plugins.module_utils import cloud_teardown
from ansible_collections.krops.platform.plugins.module_utils import config as krops_config


def argument_spec():
    return dict(
        environment=dict(type="str"),
        config_file=dict(type="path"),
        project=dict(type="str"),
        access_token=dict(type="str", no_log=True),
        networks=dict(type="list", elements="str"),
        base_url=dict(type="str"),
        wait=dict(type="bool", default=True),
        wait_timeout=dict(type="int", default=1800),
        poll_interval=dict(type="int", default=10),
    )


def run(p, check_mode, environ=None):
    environ = os.environ if environ is None else environ
    cfg, env = cloud_teardown.load_environment(p["config_file"], p["environment"], "gcp")
    project = p["project"] or environ.get("GCP_PROJECT") or environ.get("GOOGLE_CLOUD_PROJECT")
    if not project:
        raise cloud_teardown.CloudError("no GCP project: set project, GCP_PROJECT or GOOGLE_CLOUD_PROJECT")
    down = env.get("teardown") or {}
    networks = p["networks"] if p["networks"] is not None else down.get("networks") or []
    token = cloud_teardown.gcp_token(p["access_token"] or environ.get("GCP_ACCESS_TOKEN"))
    http = cloud_teardown.Http(token, what="Google API")
    result = cloud_teardown.gcp_teardown(
        http,
        cloud_teardown.gcp_roots(p["base_url"]),
        project,
        cfg.selected,
        networks,
        check_mode=check_mode,
        wait=p["wait"],
        wait_timeout=p["wait_timeout"],
        poll_interval=p["poll_interval"],
        unprotect=down.get("disable-deletion-protection") or [],
    )
    result["project"] = project
    result["environment"] = cfg.selected
    return result


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    cloud_teardown.mask(module, os.environ, cloud_teardown.GCP_SECRET_VARS)
    try:
        result = run(module.params, module.check_mode)
    except krops_config.ConfigError as exc:
        module.fail_json(msg=str(exc))
    except cloud_teardown.CloudError as exc:
        module.fail_json(msg=str(exc), **exc.result)
    if result["leftovers"]:
        msg = (
            "GCP resources of project {} left behind at stage {}: {}; see results for the reason of each, then run "
            "the teardown again".format(result["project"], result.get("stopped_at"), ", ".join(result["leftovers"]))
        )
        module.fail_json(msg=msg, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
