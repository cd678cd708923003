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
  - Removes, stage by stage and waiting for each stage's long-running operations, the Cloud SQL
    instances, the private services access connections (Service Networking) and their reserved ranges,
    then the GKE clusters, the Cloud Storage buckets (every object version first), other VPC peerings,
    the firewall rules and Cloud Routers, the subnetworks and finally the VPCs. The APIs require this
    order; O(phase=before-clusters) runs only the first three stages, which the teardown role does
    before deleting the workload Clusters (CAPG cannot delete a VPC that a peering still holds).
  - "Ownership filter: the VPCs are those bootstrap.toml names (C(environments.<env>.teardown.networks));
    the default VPC is never deleted. Cloud SQL instances and buckets are deleted only when they carry the
    label C(krops-environment=<env>); living in an owned VPC proves nothing. A GKE cluster is deleted when it
    carries that label, or when bootstrap.toml names it exactly (O(clusters)) and it sits in an owned VPC
    (CAPG puts no labels on GKE clusters). Anything labelled for another environment is never touched; what
    is left alone inside an owned VPC is listed in RV(not_owned).
    Peerings, private services access connections and ranges (global addresses with purpose VPC_PEERING),
    firewall rules, routers and subnetworks are deleted only when they belong to an owned VPC."
  - A Cloud SQL instance with deletion protection is deleted only when bootstrap.toml names it in
    C(environments.<env>.teardown.disable-deletion-protection); otherwise it fails and stays."
  - A stage that leaves something behind stops the module (later stages depend on it); run it again.
    After the last stage discovery runs once more, and whatever it still finds fails the module.
  - Discovery is read-only and comes first; check mode returns the plan. Uses the Google REST APIs
    directly so one call covers every service.
  - "IAM, last (CAPG and Config Connector authenticate through the pool's provider until their cluster is
    gone): the project IAM policy members that are exactly the service accounts of O(service_accounts)
    (read-modify-write with the policy's etag; a 409 ABORTED re-reads and retries), then those service
    accounts, then the workload identity providers of O(workload_identity_providers) (soft-deleted; a provider
    already in state DELETED counts as gone). Other members of the same role, other accounts and other
    providers are never touched. The pool itself stays (a one-time prerequisite, docs/environments/gcp.md)."
  - "With O(mode=report) nothing is changed, in or out of check mode: the same discovery runs (as in check mode)
    and the owned resources at least O(min_age_hours) old are returned as Markdown and JSON in RV(report) (and
    written to O(report_path)), the orphan report of C(playbooks/orphan_report.yml). The age comes from
    C(creationTimestamp) (Compute Engine), C(createTime) (GKE, Cloud SQL) or C(timeCreated) (Cloud Storage); a
    resource without one (peerings, connections, IAM grants, service accounts, providers) is always reported."
extends_documentation_fragment:
  - krops.platform.attributes
  - krops.platform.bootstrap_config
  - krops.platform.cloud_teardown
options:
  project:
    description: GCP project id. Defaults to E(GCP_PROJECT), then E(GOOGLE_CLOUD_PROJECT).
    type: str
  access_token:
    description:
      - OAuth2 access token. Defaults to E(GCP_ACCESS_TOKEN).
      - Without it, Application Default Credentials (C(google.auth.default)) give the token, from
        E(GOOGLE_APPLICATION_CREDENTIALS) (a service account key or a workload identity federation file),
        C(gcloud auth application-default login), or the metadata server (see docs/teardown.md).
      - Without E(GOOGLE_APPLICATION_CREDENTIALS), the key file of AWX's Google Compute Engine credential,
        E(GCP_SERVICE_ACCOUNT_FILE) or E(GCE_CREDENTIALS_FILE_PATH), comes before the rest of that chain.
    type: str
  networks:
    description: VPC names the environment owns; defaults to C(teardown.networks) of the environment.
    type: list
    elements: str
  clusters:
    description:
      - GKE cluster names the environment owns by name (inside an owned VPC).
      - Defaults to C(mgmt-cluster) and C(teardown.capi-workloads) of the environment.
    type: list
    elements: str
  service_accounts:
    description:
      - Ids (the part before C(@)) of the service accounts in O(project) the environment owns; each is deleted
        with its project IAM grants.
      - Defaults to C(teardown.service-accounts) of the environment.
    type: list
    elements: str
  workload_identity_providers:
    description:
      - Workload identity providers the environment owns, each as C(<pool>/<provider>) in O(project).
      - Defaults to C(teardown.workload-identity-providers) of the environment.
    type: list
    elements: str
  phase:
    description:
      - V(all) runs every stage (IAM last); V(before-clusters) only Cloud SQL, the private services access
        connections and their ranges.
    type: str
    choices: [all, before-clusters]
    default: all
  base_url:
    description:
      - Serve every Google API from this base URL (C(<base_url>/container), C(/sqladmin), C(/storage),
        C(/compute), C(/servicenetworking), C(/cloudresourcemanager), C(/iam)), for tests and private endpoints. The
        public endpoints when not set.
    type: str
  wait:
    description: Wait for each stage's deletions before the next stage.
    type: bool
    default: true
attributes:
  platform:
    details: Calls the Google Cloud APIs from the host it runs on (the teardown role delegates to localhost).
requirements:
  - google-auth >= 2.63.0 (Python library), unless O(access_token) is given
notes:
  - A token read from E(GCP_ACCESS_TOKEN) is masked in results, messages and warnings like no_log options.
  - The project number (for Service Networking) comes from Cloud Resource Manager.
"""

EXAMPLES = r"""
- name: Remove the gcp environment's resources
  krops.platform.gcp_teardown:
    environment: gcp
    project: my-project
  register: gcp_teardown
"""

RETURN = r"""
phase:
  description: The phase that ran.
  returned: always
  type: str
  sample: all
plan:
  description: Deletions in order, each with the ownership reason.
  returned: always
  type: list
  elements: str
  sample:
    - delete gke-cluster europe-north1-workload (label krops-environment=gcp)
    - >-
      remove iam-grant roles/cloudsql.client serviceAccount:krops-europe-north1-workload@krops-example.iam.gserviceaccount.com
      (project grant to service account krops-europe-north1-workload (teardown.service-accounts))
    - delete workload-identity-provider krops/kind (named in bootstrap.toml (teardown.workload-identity-providers))
results:
  description: One entry per resource with type, name, reason and outcome (V(planned) in check mode, V(deleted),
    V(absent), V(failed) with C(error), V(left) when the final discovery still found it); each entry also has
    C(id), the resource's API path.
  returned: always
  type: list
  elements: dict
  sample:
    - type: gke-cluster
      name: europe-north1-workload
      id: /v1/projects/krops-example/locations/europe-north1/clusters/europe-north1-workload
      reason: label krops-environment=gcp
      outcome: deleted
    - type: service-account
      name: krops-europe-north1-workload@krops-example.iam.gserviceaccount.com
      id: /v1/projects/krops-example/serviceAccounts/krops-europe-north1-workload@krops-example.iam.gserviceaccount.com
      reason: named in bootstrap.toml (teardown.service-accounts)
      outcome: deleted
not_owned:
  description: Resources left alone with the reason (the default VPC, unlabelled or other environments' resources
    inside an owned VPC, anything labelled for another environment).
  returned: always
  type: list
  elements: dict
  sample:
    - type: network
      name: default
      reason: the default VPC is never deleted
held_networks:
  description: Owned VPCs left whole because they hold something krops does not own (see not_owned); each is
    also a leftover, so the run fails.
  returned: always
  type: list
  elements: str
  sample: [europe-north1-management]
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
  sample: firewalls-routers-peerings
report:
  description:
    - With O(mode=report), the orphan report as C(markdown) and C(json) (cloud, environment, project, generated_at,
      min_age_hours, count, resources, not_owned, held_networks); each resource has type, name, id, reason, outcome
      V(orphan), stage, created (UTC, or null) and age_hours (or null when the API gives no creation time).
  returned: when O(mode=report)
  type: dict
  sample:
    markdown: "# krops GCP orphan report ..."
    json: {cloud: gcp, environment: gcp, project: krops-example, count: 0}
report_files:
  description: Paths written (markdown, json) when O(report_path) is set.
  returned: when O(mode=report), O(report_path) is set and not in check mode
  type: dict
  sample:
    markdown: reports/orphans-gcp.md
    json: reports/orphans-gcp.json
"""

import os

from ansible_collections.krops.platform.plugins.module_utils import (
    cloud_report,
    cloud_teardown,
    errors,
    gcp,
    gcp_iam,
    gcp_rows,
    shell,
)
from ansible_collections.krops.platform.plugins.module_utils import config as krops_config

NAME = "gcp_teardown"


def argument_spec():
    return dict(
        **krops_config.ARGS,
        project=dict(type="str"),
        access_token=dict(type="str", no_log=True),
        networks=dict(type="list", elements="str"),
        clusters=dict(type="list", elements="str"),
        service_accounts=dict(type="list", elements="str"),
        workload_identity_providers=dict(type="list", elements="str"),
        phase=dict(type="str", choices=list(gcp.GCP_PHASES), default="all"),
        base_url=dict(type="str"),
        wait=dict(type="bool", default=True),
        **cloud_teardown.REPORT_ARGS,
        **cloud_teardown.WAIT_ARGS,
    )


def run(p, check_mode, environ=None):
    environ = os.environ if environ is None else environ
    cfg, env = cloud_teardown.load_environment(p["config_file"], p["environment"], "gcp")
    project = p["project"] or environ.get("GCP_PROJECT") or environ.get("GOOGLE_CLOUD_PROJECT")
    if not project:
        raise errors.CloudError("no GCP project: set project, GCP_PROJECT or GOOGLE_CLOUD_PROJECT")
    down = env.teardown
    networks = p["networks"] if p["networks"] is not None else list(down.networks)
    clusters = p["clusters"] if p["clusters"] is not None else [env.mgmt_cluster] + list(down.capi_workloads)
    accounts = p["service_accounts"] if p["service_accounts"] is not None else list(down.service_accounts)
    for name in accounts:
        if not gcp_iam.GCP_ACCOUNT_ID.match(name):
            raise errors.CloudError(
                f"service_accounts entry {name!r} is not a service account id (6 to 30 of a-z, 0-9 and -, "
                "starting with a letter; the part before @)"
            )
    providers = p["workload_identity_providers"]
    if providers is None:
        providers = list(down.workload_identity_providers)
    for name in providers:
        if not gcp_iam.GCP_PROVIDER_NAME.match(name):
            raise errors.CloudError(
                f"workload_identity_providers entry {name!r} is not <pool>/<provider> (IDs of 4 to 32 of a-z, 0-9 and -)"
            )
    gcp_iam.gcp_iam_refusals(cfg, env, accounts, providers)
    token = gcp.gcp_token(p["access_token"] or environ.get("GCP_ACCESS_TOKEN"))
    http = cloud_teardown.Http(token, what="Google API")
    report = p["mode"] == "report"
    run = gcp_rows.gcp_run(
        http,
        gcp.gcp_roots(p["base_url"]),
        project,
        cfg.selected,
        networks,
        check_mode=check_mode or report,  # a report is the discovery of check mode: it writes nothing
        wait=p["wait"],
        wait_timeout=p["wait_timeout"],
        poll_interval=p["poll_interval"],
        unprotect=list(down.disable_deletion_protection),
        clusters=clusters,
        phase=p["phase"],
        service_accounts=accounts,
        providers=providers,
    )
    if report:
        return cloud_report.orphan_report(
            run, "gcp", cfg.selected, project, p["min_age_hours"], p["report_path"], check_mode
        )
    result = run.execute()
    result["project"] = project
    result["environment"] = cfg.selected
    return result


def body(module, step):
    step("listing the GCP resources (report)" if module.params["mode"] == "report" else "removing the GCP resources")
    result = run(module.params, module.check_mode)
    if result["leftovers"]:
        msg = (
            "GCP resources of project {} left behind at stage {}: {}; see results for the reason of each, then run "
            "the teardown again".format(result["project"], result.get("stopped_at"), ", ".join(result["leftovers"]))
        )
        raise errors.CloudError(msg, result)
    return result


def main():
    shell.run(NAME, argument_spec(), body, secret_env=cloud_teardown.GCP_SECRET_VARS)


if __name__ == "__main__":
    main()
