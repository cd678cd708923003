#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: capi_cluster_delete
author:
  - krops developers (@krops)
version_added: 0.1.0
short_description: Suspend Flux, delete Cluster API Clusters and wait until their provider removed them
description:
  - Suspends the Flux Kustomizations whose name (or C(namespace/name)) matches O(kustomizations), and
    disables reconciliation of Flux Operator FluxInstance and ResourceSet objects, so nothing recreates
    what the teardown deletes.
  - Deletes exactly the named Cluster API Clusters, never every Cluster of a namespace (only the names
    bootstrap.toml gives an environment are krops', see docs/ownership.md), and waits with an event-driven
    watch until they are gone, that is until the infrastructure provider has removed the real infrastructure
    and dropped its finalizers.
  - Probes first; when the Clusters, Kustomizations or Flux Operator objects cannot be listed (any error
    other than NotFound, an empty listing or an unknown resource type) it fails before changing anything.
  - Never deletes a Cluster named in O(keep). A management cluster cannot delete its own Cluster object
    (its provider would die mid-delete).
  - When everything it asked for is done it lists again, and a named Cluster still there, or a Kustomization or
    Flux Operator object that is no longer suspended, fails the step and is named.
options:
  clusters:
    description: Names of the Clusters to delete. Absent ones are reported in RV(already_absent).
    type: list
    elements: str
    default: []
  keep:
    description: Clusters never deleted; naming one in O(clusters) fails.
    type: list
    elements: str
    default: []
  kustomizations:
    description: Shell patterns (C(name) or C(namespace/name)) of the Kustomizations to suspend.
    type: list
    elements: str
    default: ['*']
  wait:
    description: Wait until the deleted Clusters are gone.
    type: bool
    default: true
  wait_timeout:
    description:
      - Seconds to wait. A timeout fails, names the Clusters still present with their phase, condition
        message and finalizers, and returns the partial result. At least 1.
    type: int
    default: 1200
extends_documentation_fragment:
  - krops.platform.attributes
  - krops.platform.kube
  - krops.platform.kube.teardown_step
  - krops.platform.kube.cluster_delete
attributes:
  check_mode:
    details: Probes and returns RV(plan); changes nothing and does not wait."""

EXAMPLES = r"""
- name: Delete the local-host workload cluster on the kind cluster
  krops.platform.capi_cluster_delete:
    kubeconfig: ~/.kube/config
    context: kind-mgmt
    clusters: [local-workload]
    keep: [local-management]
    wait_timeout: 300

- name: Only suspend Flux
  krops.platform.capi_cluster_delete:
    context: krops-mgmt
    kubeconfig: ~/.kube/krops-mgmt.yaml
"""

RETURN = r"""
plan:
  description: What the module does (or would do in check mode), in order.
  returned: always
  type: list
  elements: str
  sample: ["suspend Kustomization flux-system/clusters", "delete Cluster default/local-workload and wait until it is gone"]
suspended:
  description: Kustomizations suspended (C(namespace/name)).
  returned: always
  type: list
  elements: str
  sample: [flux-system/clusters]
already_suspended:
  description: Matching Kustomizations that were suspended already.
  returned: always
  type: list
  elements: str
  sample: []
flux_operator_disabled:
  description: FluxInstance and ResourceSet objects whose reconciliation was disabled.
  returned: always
  type: list
  elements: str
  sample: [flux-system/flux]
deleted:
  description: Clusters deleted (and gone, when waiting).
  returned: always
  type: list
  elements: str
  sample: [local-workload]
already_absent:
  description: Named Clusters that did not exist.
  returned: always
  type: list
  elements: str
  sample: []
remaining:
  description: Clusters still present when the wait timed out.
  returned: on timeout
  type: list
  elements: str
  sample: [local-workload]
progress:
  description: Periodic snapshots of the Clusters still being deleted, with their state.
  returned: always
  type: list
  elements: dict
  sample:
    - local-workload: "Deleting (finalizers cluster.cluster.x-k8s.io)"
target:
  description: The cluster the module acted on.
  returned: always
  type: str
  sample: context kind-mgmt in ~/.kube/config
"""

from ansible_collections.krops.platform.plugins.module_utils import kube_shell
from ansible_collections.krops.platform.plugins.module_utils import kube_rows

NAME = "krops.platform.capi_cluster_delete"


def argument_spec():
    return kube_shell.spec(
        namespace=dict(type="str", default="default"),
        clusters=dict(type="list", elements="str", default=[]),
        keep=dict(type="list", elements="str", default=[]),
        suspend=dict(type="bool", default=True),
        kustomizations=dict(type="list", elements="str", default=["*"]),
        wait=dict(type="bool", default=True),
        wait_timeout=dict(type="int", default=1200),
    )


def main():
    kube_shell.run(NAME, argument_spec(), kube_rows.delete_clusters, "deleting the Clusters", names="clusters")


if __name__ == "__main__":
    main()
