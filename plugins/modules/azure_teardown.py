#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: azure_teardown
author:
  - krops developers (@krops)
version_added: 0.1.0
short_description: Remove the Azure resources a krops environment created, and nothing else
description:
  - Removes, in this order, the kind-issuer federated identity credentials, the Arc-connected
    bootstrap cluster, then the environment's resource groups (workload groups first, the management
    cluster's group last) and waits until they are gone.
  - "Ownership filter: a resource group is deleted only when bootstrap.toml names it
    (C(environments.<env>.teardown.resource-groups)) or it carries the tag C(krops-environment=<env>),
    and in both cases it carries that tag or the CAPZ tag
    C(sigs.k8s.io_cluster-api-provider-azure_cluster_<cluster>=owned) for a cluster of the environment.
    A named group without either tag is left alone and reported in RV(not_owned)."
  - Arc connected clusters are deleted only when tagged C(krops-environment=<env>). Federated credentials
    are deleted only on user-assigned identities tagged C(krops-environment=<env>), and only those whose
    name is in O(federated_credential_names) or whose issuer is in O(federated_credential_issuers).
    The identities themselves stay (the next bootstrap re-adopts them).
  - Federated credentials have no tags, so only exact names (O(federated_credential_names)) or exact issuer
    URLs count; a name that merely shares a prefix with one is left alone.
  - Discovery is read-only and comes first; check mode returns the plan. Uses the ARM REST API directly
    (azure.azcollection has no module for Arc connected clusters or federated credentials).
  - Each accepted deletion (202) is followed through its C(Azure-AsyncOperation) status, else its C(Location),
    else the resource itself, until it ends; then discovery runs again and every owned resource still there is a
    leftover, so success means nothing owned is left. A management lock on a resource group or anything in it
    (found in discovery, shown in RV(plan)) or one ARM reports (409 C(ScopeLocked)) is never removed; the resource
    is a leftover and the module fails naming it and the lock.
  - Call it after the workload Clusters were deleted through CAPZ and the CAPI providers removed, so
    nothing recreates what it deletes.
  - "With O(mode=report) nothing is changed, in or out of check mode: the same discovery runs (as in check mode)
    and the owned resources at least O(min_age_hours) old are returned as Markdown and JSON in RV(report) (and
    written to O(report_path)), the orphan report of C(playbooks/orphan_report.yml). The age comes from ARM's
    C(systemData.createdAt); a resource without it (resource groups declare none) is always reported."
extends_documentation_fragment:
  - krops.platform.attributes
  - krops.platform.azure
  - krops.platform.bootstrap_config
  - krops.platform.cloud_teardown
options:
  resource_groups:
    description: Resource groups to delete; defaults to C(teardown.resource-groups) of the environment.
    type: list
    elements: str
  federated_credential_names:
    description: Exact names of the kind-issuer federated credentials the bootstrap hook creates.
    type: list
    elements: str
    default: [krops-kind-capz-manager, krops-kind-azureserviceoperator-default]
  federated_credential_issuers:
    description: Issuer URLs whose federated credentials are deleted (the kind cluster's OIDC issuer).
    type: list
    elements: str
    default: []
  wait:
    description: Wait until the resource groups and the Arc resource are gone.
    type: bool
    default: true
attributes:
  platform:
    details: Calls Azure Resource Manager from the host it runs on (the teardown role delegates to localhost).
notes:
  - Credentials never reach a command line. Secrets read from environment variables (E(AZURE_ACCESS_TOKEN),
    E(AZURE_SECRET), E(AZURE_CLIENT_SECRET), E(AZURE_CLIENT_CERTIFICATE_PASSWORD), E(AZURE_PASSWORD)) are masked
    in results, messages and warnings like no_log options.
"""

EXAMPLES = r"""
- name: Remove the azure environment's resources
  krops.platform.azure_teardown:
    environment: azure
    subscription_id: "{{ azure_subscription_id }}"
  register: azure_teardown
"""

RETURN = r"""
plan:
  description: Deletions in order, each with the ownership reason.
  returned: always
  type: list
  elements: str
  sample:
    - "delete resource-group /subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/swedencentral-workload
      (tag krops-environment=azure)"
results:
  description: One entry per resource, with type, id, name, reason and outcome (V(planned) in check mode, V(deleted),
    V(absent), V(failed) with C(error), the outcome vocabulary every krops teardown uses), and C(locks) (lock ids)
    for a resource group under a management lock.
  returned: always
  type: list
  elements: dict
  sample:
    - type: resource-group
      id: /subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/swedencentral-workload
      name: swedencentral-workload
      reason: tag krops-environment=azure
      outcome: deleted
not_owned:
  description: Resources named in bootstrap.toml that krops does not own, left alone.
  returned: always
  type: list
  elements: dict
  sample:
    - type: resource-group
      id: /subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/swedencentral-data
      name: swedencentral-data
      reason: named in bootstrap.toml but carries neither krops-environment=azure nor a CAPZ owned tag for swedencentral-workload
leftovers:
  description: Ids of resources still present or that failed; the module fails when not empty.
  returned: always
  type: list
  elements: str
  sample: []
report:
  description:
    - With O(mode=report), the orphan report as C(markdown) and C(json) (cloud, environment, subscription_id,
      generated_at, min_age_hours, count, resources, not_owned, held_networks); each resource has type, id, name,
      reason, outcome V(orphan), stage, created (UTC, or null) and age_hours (or null when ARM gives no creation
      time).
  returned: when O(mode=report)
  type: dict
  sample:
    markdown: "# krops Azure orphan report ..."
    json: {cloud: azure, environment: azure, subscription_id: 00000000-0000-0000-0000-000000000000, count: 0}
report_files:
  description: Paths written (markdown, json) when O(report_path) is set.
  returned: when O(mode=report), O(report_path) is set and not in check mode
  type: dict
  sample:
    markdown: reports/orphans-azure.md
    json: reports/orphans-azure.json
"""

import os

from ansible_collections.krops.platform.plugins.module_utils import (
    azure,
    azure_rows,
    cloud_report,
    cloud_teardown,
    errors,
    shell,
)
from ansible_collections.krops.platform.plugins.module_utils import config as krops_config

NAME = "azure_teardown"


def argument_spec():
    return dict(
        **krops_config.ARGS,
        resource_groups=dict(type="list", elements="str"),
        federated_credential_names=dict(
            type="list", elements="str", default=["krops-kind-capz-manager", "krops-kind-azureserviceoperator-default"]
        ),
        federated_credential_issuers=dict(type="list", elements="str", default=[]),
        wait=dict(type="bool", default=True),
        **cloud_teardown.REPORT_ARGS,
        **cloud_teardown.WAIT_ARGS,
        **azure.LOGIN_ARGS,
    )


def run(p, check_mode, environ=None, step=None):
    environ = os.environ if environ is None else environ
    step = step or shell.Step()
    step("reading bootstrap.toml")
    cfg, env = cloud_teardown.load_environment(p["config_file"], p["environment"], "azure")
    subscription = azure.subscription_of(p, environ)
    down = env.teardown
    step("logging in to Azure")
    http = azure.client_of(p, environ)
    groups = p["resource_groups"] if p["resource_groups"] is not None else list(down.resource_groups)
    clusters = list(down.capi_workloads) + [env.mgmt_cluster]
    names = (p["federated_credential_names"], p["federated_credential_issuers"], env.mgmt_cluster)
    if p["mode"] == "report":
        step("listing what the environment owns (report)")
        run = azure_rows.azure_run(
            http, p["endpoint"], subscription, cfg.selected, groups, clusters, *names, check_mode=True
        )
        return cloud_report.orphan_report(
            run, "azure", cfg.selected, subscription, p["min_age_hours"], p["report_path"], check_mode
        )
    step("deleting what the environment owns")
    result = azure_rows.azure_teardown(
        http,
        p["endpoint"],
        subscription,
        cfg.selected,
        groups,
        clusters,
        *names,
        check_mode=check_mode,
        wait=p["wait"],
        wait_timeout=p["wait_timeout"],
        poll_interval=p["poll_interval"],
    )
    result["subscription_id"] = subscription
    result["environment"] = cfg.selected
    if result["leftovers"]:
        raise errors.CloudError(
            "Azure resources of {} left behind: {}; see results for the reason of each, then run the "
            "teardown again".format(result["environment"], ", ".join(result["leftovers"])),
            result,
        )
    return result


def main():
    azure.run_module(NAME, argument_spec(), run)


if __name__ == "__main__":
    main()
