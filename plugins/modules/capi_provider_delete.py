#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: capi_provider_delete
author:
  - krops developers (@krops)
version_added: 0.1.0
short_description: Delete the cluster-api-operator provider objects, add-on first and core last, each kind waited for
description:
  - Lists the provider objects of every kind in O(kinds) (every namespace) before it deletes anything; a
    listing the API server cannot answer (any error but a kind it does not serve) fails with nothing deleted.
  - Deletes them kind by kind in the order add-on, runtime extension, IPAM, control plane, bootstrap,
    infrastructure, core, and waits with an event-driven watch until the objects of a kind are gone before the
    next kind, so that no provider outlives one it needs. When every kind is gone it lists them again, and a provider
    object still there fails the step and is named.
  - The teardown role runs it on the cluster krops created (the kind cluster that carries krops' marker, or
    the management cluster), where every provider object is krops'.
options:
  api_version:
    description: API version of the provider objects.
    type: str
    default: operator.cluster.x-k8s.io/v1alpha2
  kinds:
    description: Provider kinds to delete. Their order is always the deletion order above.
    type: list
    elements: str
    choices: [AddonProvider, RuntimeExtensionProvider, IPAMProvider, ControlPlaneProvider, BootstrapProvider,
              InfrastructureProvider, CoreProvider]
    default: [AddonProvider, RuntimeExtensionProvider, IPAMProvider, ControlPlaneProvider, BootstrapProvider,
              InfrastructureProvider, CoreProvider]
  wait:
    description: Wait until the objects of each kind are gone before deleting the next kind.
    type: bool
    default: true
  wait_timeout:
    description:
      - Seconds the whole step may wait. A timeout fails, names the providers still present with their state,
        and deletes no later kind. At least 1.
    type: int
    default: 600
extends_documentation_fragment:
  - krops.platform.attributes
  - krops.platform.kube
  - krops.platform.kube.teardown_step
attributes:
  check_mode:
    details: Lists, returns RV(plan) and sends each delete as a server-side dry run; changes nothing."""

EXAMPLES = r"""
- name: Delete the CAPI providers on the kind cluster
  krops.platform.capi_provider_delete:
    kubeconfig: ~/.kube/config
    context: kind-mgmt
    wait_timeout: 600
"""

RETURN = r"""
plan:
  description: The deletions, in order (in check mode, the ones that would be made).
  returned: always
  type: list
  elements: str
  sample: ["delete AddonProvider caaph-system/helm and wait until it is gone"]
deleted:
  description: The provider objects deleted (and gone, when waiting).
  returned: always
  type: list
  elements: dict
  sample: [{kind: AddonProvider, namespace: caaph-system, name: helm}]
remaining:
  description: Providers still present when the wait timed out.
  returned: on timeout
  type: list
  elements: str
  sample: ["CoreProvider capi-system/cluster-api"]
progress:
  description: Periodic snapshots of the providers still being deleted, with their state.
  returned: always
  type: list
  elements: dict
  sample:
    - "AddonProvider caaph-system/helm": "Unknown (finalizers provider.cluster.x-k8s.io)"
target:
  description: The cluster the module acted on.
  returned: always
  type: str
  sample: context kind-mgmt in ~/.kube/config
"""

from ansible_collections.krops.platform.plugins.module_utils import kube_shell
from ansible_collections.krops.platform.plugins.module_utils import kube_rows

NAME = "krops.platform.capi_provider_delete"


def argument_spec():
    kinds = list(kube_rows.PROVIDER_KINDS)
    return kube_shell.spec(
        api_version=dict(type="str", default=kube_rows.PROVIDER_API),
        kinds=dict(type="list", elements="str", choices=kinds, default=kinds),
        wait=dict(type="bool", default=True),
        wait_timeout=dict(type="int", default=600),
    )


def main():
    kube_shell.run(NAME, argument_spec(), kube_rows.delete_providers, "deleting the providers")


if __name__ == "__main__":
    main()
