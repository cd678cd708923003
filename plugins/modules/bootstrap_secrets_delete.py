#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: bootstrap_secrets_delete
author:
  - krops developers (@krops)
version_added: 0.1.0
short_description: Delete the bootstrap Secrets and run-tag ConfigMaps krops created, by exact name
description:
  - Deletes the Secrets and ConfigMaps named, in one namespace, and nothing else. The teardown role names the
    Git token and age key Secrets and the run-tag ConfigMap that the bootstrap created (bootstrap.toml
    C(github-pat-secret), C(sops-age-secret), C(run-configmap)).
  - Lists each kind in the namespace before any delete; a listing the API server cannot answer fails with
    nothing deleted. An object already gone is reported in RV(absent), so a second run changes nothing.
options:
  namespace:
    description: Namespace of the objects.
    type: str
    required: true
  secrets:
    description: Names of the Secrets to delete.
    type: list
    elements: str
    default: []
  configmaps:
    description: Names of the ConfigMaps to delete.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - krops.platform.attributes
  - krops.platform.kube
  - krops.platform.kube.teardown_step
attributes:
  check_mode:
    details: Lists, returns RV(plan) and sends each delete as a server-side dry run; changes nothing."""

EXAMPLES = r"""
- name: Delete the bootstrap secrets and the run tags
  krops.platform.bootstrap_secrets_delete:
    kubeconfig: ~/.kube/config
    context: kind-mgmt
    namespace: flux-system
    secrets: [flux-github-pat, sops-age]
    configmaps: [krops-run]
"""

RETURN = r"""
plan:
  description: The deletions (in check mode, the ones that would be made).
  returned: always
  type: list
  elements: str
  sample: ["delete Secret flux-system/sops-age"]
deleted:
  description: The objects this run deleted (in check mode, that it would delete).
  returned: always
  type: list
  elements: str
  sample: ["Secret flux-system/sops-age"]
absent:
  description: The objects named that were not there.
  returned: always
  type: list
  elements: str
  sample: ["ConfigMap flux-system/krops-run"]
target:
  description: The cluster the module acted on.
  returned: always
  type: str
  sample: context kind-mgmt in ~/.kube/config
"""

from ansible_collections.krops.platform.plugins.module_utils import kube_shell
from ansible_collections.krops.platform.plugins.module_utils import teardown_objects

NAME = "krops.platform.bootstrap_secrets_delete"


def argument_spec():
    return kube_shell.spec(
        namespace=dict(type="str", required=True),
        secrets=dict(type="list", elements="str", default=[], no_log=False),  # Secret names, not secret values
        configmaps=dict(type="list", elements="str", default=[]),
    )


def main():
    kube_shell.run(NAME, argument_spec(), teardown_objects.delete_named, "deleting the bootstrap secrets and run tags")


if __name__ == "__main__":
    main()
