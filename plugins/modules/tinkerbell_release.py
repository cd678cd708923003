#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: tinkerbell_release
author:
  - krops developers (@krops)
version_added: 0.1.0
short_description: Return Tinkerbell Hardware to the pool by deleting the Clusters that use it
description:
  - Suspends Flux (Kustomizations, FluxInstance and ResourceSet objects), deletes the Cluster API
    Clusters named in O(clusters) (never any other Cluster of O(namespace); O(keep) wins), and waits with an event-driven watch until the
    Clusters are gone and no Hardware carries the ownership marks CAPT sets (the labels
    C(v1alpha1.tinkerbell.org/ownerName), C(ownerNamespace), C(clusterName), C(clusterNamespace), the
    annotation C(v1alpha1.tinkerbell.org/provisioned) and CAPT's finalizers).
  - Marks whose owner (TinkerbellMachine, TinkerbellCluster or Cluster) no longer exists, as an older
    CAPT may leave them, are removed when O(remove_stale) is set.
  - Reports the outcome per Hardware. The machines are never wiped, re-provisioned or powered off; the
    Hardware spec (user data included) and the Tinkerbell stack are not modified beyond those marks.
  - Probes first; an error listing Hardware, Clusters or Kustomizations fails before anything changes.
options:
  hardware_namespace:
    description: Namespace of the Hardware objects; all namespaces when not set.
    type: str
  clusters:
    description:
      - The Clusters to delete, by exact name (the role passes those bootstrap.toml names for the environment).
      - Hardware whose C(v1alpha1.tinkerbell.org/clusterName) label names any other Cluster is reported as V(kept).
    type: list
    elements: str
    required: true
  keep:
    description:
      - Clusters that stay, for example the self-managed management cluster running on Tinkerbell
        Hardware. Their Hardware is reported as V(kept).
    type: list
    elements: str
    default: []
  remove_stale:
    description: Remove ownership marks whose owner no longer exists once the Clusters are gone.
    type: bool
    default: true
  wait_timeout:
    description: Seconds to wait for the Clusters to go and the Hardware to be released (each; at least 1).
    type: int
    default: 1200
extends_documentation_fragment:
  - krops.platform.attributes
  - krops.platform.kube
  - krops.platform.kube.teardown_step
  - krops.platform.kube.cluster_delete
attributes:
  check_mode:
    details: Probes and returns RV(plan) and the Hardware that would be released; changes nothing."""

EXAMPLES = r"""
- name: Release the Hardware of every workload cluster
  krops.platform.tinkerbell_release:
    kubeconfig: ~/.kube/config
    context: kind-mgmt
    hardware_namespace: tinkerbell
  register: released

- name: Report
  ansible.builtin.debug:
    msg: "{{ released.hardware | items2dict(key_name='name', value_name='outcome') }}"
"""

RETURN = r"""
plan:
  description: Steps taken (or planned in check mode).
  returned: always
  type: list
  elements: str
  sample: ["suspend Kustomization flux-system/clusters", "delete Cluster default/workload and wait until it is gone"]
clusters_deleted:
  description: Clusters deleted.
  returned: always
  type: list
  elements: str
  sample: [workload]
suspended:
  description: Kustomizations suspended.
  returned: always
  type: list
  elements: str
  sample: [flux-system/clusters]
hardware:
  description:
    - One entry per Hardware with its outcome, V(free) (carried no marks), V(released) (CAPT removed the
      marks), V(stale-marks-removed), V(gone), V(kept), V(would-release) (check mode) or V(not-released) (timeout).
  returned: always
  type: list
  elements: dict
  sample: [{name: tinkerbell/node-1, outcome: released}]
target:
  description: The cluster the module acted on.
  returned: always
  type: str
  sample: context kind-mgmt in ~/.kube/config
"""

from ansible_collections.krops.platform.plugins.module_utils import kube_shell
from ansible_collections.krops.platform.plugins.module_utils import tinkerbell

NAME = "krops.platform.tinkerbell_release"


def argument_spec():
    return kube_shell.spec(
        namespace=dict(type="str", default="default"),
        hardware_namespace=dict(type="str"),
        clusters=dict(type="list", elements="str", required=True),
        keep=dict(type="list", elements="str", default=[]),
        suspend=dict(type="bool", default=True),
        remove_stale=dict(type="bool", default=True),
        wait_timeout=dict(type="int", default=1200),
    )


def main():
    kube_shell.run(NAME, argument_spec(), tinkerbell.release_hardware, "releasing the Hardware")


if __name__ == "__main__":
    main()
