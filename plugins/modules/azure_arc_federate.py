#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: azure_arc_federate
author:
  - krops developers (@krops)
version_added: 0.1.0
short_description: Federate an Arc-connected cluster's OIDC issuer with a user-assigned identity
description:
  - Reads the OIDC issuer that Azure Arc publishes for a connected cluster (waiting up to O(issuer_timeout)
    seconds for it) and creates or updates one federated identity credential per O(subjects) on the
    user-assigned identity O(identity_name), so that the service accounts named there authenticate as that
    identity through workload identity.
  - With O(lookup_only=true) it only reports whether the connected cluster exists and its issuer.
  - Idempotent; the credentials are compared with issuer, subject and the audience C(api://AzureADTokenExchange).
  - Uses the ARM REST API; the token comes from azure-identity's C(DefaultAzureCredential) chain unless O(access_token)
    or a service principal is given (as krops.platform.azure_teardown).
options:
  resource_group:
    description: Resource group of the connected cluster and of the identity.
    type: str
    required: true
  cluster_name:
    description: Name of the Arc connected cluster.
    type: str
    required: true
  identity_name:
    description: Name of the user-assigned identity. Required unless O(lookup_only=true).
    type: str
  subjects:
    description: Federated identity credentials to hold, each with C(name) and C(subject) (C(system:serviceaccount:<namespace>:<name>)).
    type: list
    elements: dict
    default: []
  lookup_only:
    description: Only report RV(exists) and RV(issuer); write nothing and do not wait.
    type: bool
    default: false
  arc_api_version:
    description: api-version for Microsoft.Kubernetes/connectedClusters.
    type: str
    default: 2024-07-15-preview
  issuer_timeout:
    description: Seconds to wait for Arc to publish the OIDC issuer.
    type: int
    default: 300
  poll_interval:
    description: Seconds between looks while waiting.
    type: int
    default: 10
extends_documentation_fragment:
  - krops.platform.attributes
  - krops.platform.azure
attributes:
  check_mode:
    details: Reads and waits for the issuer; reports C(planned-created) / C(planned-updated) without writing.
  platform:
    details: Calls Azure Resource Manager from the host it runs on.
notes:
  - Secrets read from environment variables are masked in results and messages like no_log options.
"""

EXAMPLES = r"""
- name: Federate the CAPZ service account with the krops identity
  krops.platform.azure_arc_federate:
    resource_group: swedencentral-management
    cluster_name: krops-mgmt
    identity_name: krops-capz
    subjects:
      - name: krops-kind-capz-manager
        subject: system:serviceaccount:capz-system:capz-manager
"""

RETURN = r"""
exists:
  description: Whether the connected cluster exists.
  returned: always
  type: bool
  sample: true
issuer:
  description: The OIDC issuer URL Arc publishes (null when not yet published, O(lookup_only=true) only).
  returned: always
  type: str
  sample: https://westeurope.oic.prod-arc.azure.com/00000000-0000-0000-0000-000000000000/11111111-1111-1111-1111-111111111111/
credentials:
  description: One entry per subject with C(name), C(subject) and C(state) (V(created), V(updated), V(unchanged),
    V(planned-created), V(planned-updated)).
  returned: always
  type: list
  elements: dict
  sample:
    - name: krops-kind-capz-manager
      subject: system:serviceaccount:capz-system:capz-manager
      state: created
"""

import os

from ansible_collections.krops.platform.plugins.module_utils import azure, azure_rows, errors, shell

NAME = "azure_arc_federate"


def argument_spec():
    return dict(
        resource_group=dict(type="str", required=True),
        cluster_name=dict(type="str", required=True),
        identity_name=dict(type="str"),
        subjects=dict(type="list", elements="dict", default=[]),
        lookup_only=dict(type="bool", default=False),
        arc_api_version=dict(type="str", default="2024-07-15-preview"),
        issuer_timeout=dict(type="int", default=300),
        poll_interval=dict(type="int", default=10),
        **azure.LOGIN_ARGS,
    )


def _subjects(p):
    if not p["lookup_only"] and not p["identity_name"]:
        raise errors.CloudError("identity_name is required unless lookup_only is true")
    wanted = []
    for index, item in enumerate(p["subjects"]):
        name, subject = item.get("name"), item.get("subject")
        if not isinstance(name, str) or not isinstance(subject, str) or not name or not subject:
            raise errors.CloudError(
                f"subjects[{index}] needs a name and a subject (system:serviceaccount:<namespace>:<name>), got {item!r}"
            )
        if not subject.startswith("system:serviceaccount:") or subject.count(":") != 3:
            raise errors.CloudError(
                f"subjects[{index}].subject must be system:serviceaccount:<namespace>:<name>, got {subject!r}"
            )
        wanted.append({"name": name, "subject": subject})
    return wanted


def run(p, check_mode, environ=None, step=None):
    environ = os.environ if environ is None else environ
    step = step or shell.Step()
    subjects = _subjects(p)
    subscription = azure.subscription_of(p, environ)
    step("logging in to Azure")
    http = azure.client_of(p, environ)
    step("reading the connected cluster")
    args = (http, p["endpoint"], subscription, p["resource_group"], p["cluster_name"], p["arc_api_version"])
    if p["lookup_only"]:
        exists, issuer = azure.azure_arc_issuer(*args)
        return {"changed": False, "exists": exists, "issuer": issuer, "credentials": []}
    exists, issuer = azure.azure_arc_issuer(*args, timeout=p["issuer_timeout"], poll_interval=p["poll_interval"])
    if not exists:
        raise errors.CloudError(
            "Arc connected cluster {}/{} not found: connect the kind cluster first (az connectedk8s connect)".format(
                p["resource_group"], p["cluster_name"]
            )
        )
    step("writing the federated identity credentials")
    # the teardown deletes these credentials: they are written at the api-version its row reads them at
    api = azure_rows.API_VERSION["federated-credential"]
    creds = azure.azure_federate(
        http, p["endpoint"], subscription, p["resource_group"], p["identity_name"], issuer, subjects, api, check_mode
    )
    return {
        "changed": any(c["state"] != "unchanged" for c in creds),
        "exists": True,
        "issuer": issuer,
        "credentials": creds,
    }


def main():
    azure.run_module(NAME, argument_spec(), run)


if __name__ == "__main__":
    main()
