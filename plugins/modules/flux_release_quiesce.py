#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: flux_release_quiesce
author:
  - krops developers (@krops)
version_added: 0.1.0
short_description: Suspend named Flux HelmReleases and scale their controllers to zero
description:
  - Stops the controllers a set of Flux HelmReleases runs, in one namespace, so that none of them recreates a
    cloud resource while a sweep deletes it. The teardown role runs it on the ACK controllers before the AWS
    sweep.
  - Lists the HelmReleases (helm.toolkit.fluxcd.io/v2) and the Deployments of the namespace before any write; a
    listing the API server cannot answer fails with nothing changed.
  - Sets C(spec.suspend=true) on each named HelmRelease that is not suspended yet, so helm-controller does not
    scale the controllers back up, then sets C(spec.replicas=0) on each Deployment whose
    C(meta.helm.sh/release-name) annotation names one of the releases and that is not at zero already. Nothing
    else in the namespace is touched.
options:
  namespace:
    description: Namespace of the HelmReleases and their Deployments.
    type: str
    required: true
  releases:
    description: Names of the HelmReleases (and of the Helm releases their Deployments are annotated with).
    type: list
    elements: str
    required: true
  providers:
    description:
      - Names of Crossplane Providers (C(pkg.crossplane.io/v1)) whose Deployments in O(namespace) are scaled to zero
        too. Crossplane's package manager, not Helm, makes them; a Deployment is a Provider's when its
        C(spec.selector.matchLabels) carries C(pkg.crossplane.io/provider) with the Provider's name.
      - List the Crossplane core release in O(releases) as well, so that nothing scales the providers back up.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - krops.platform.attributes
  - krops.platform.kube
  - krops.platform.kube.teardown_step
attributes:
  check_mode:
    details: Lists, returns RV(plan) and sends each patch as a server-side dry run; changes nothing."""

EXAMPLES = r"""
- name: Stop the ACK controllers before the AWS sweep
  krops.platform.flux_release_quiesce:
    kubeconfig: ~/.kube/krops-mgmt.yaml
    context: mgmt-admin@mgmt
    namespace: ack-system
    releases: [ack-s3, ack-rds, ack-iam, ack-ec2]

- name: Stop Crossplane and its AWS providers before the AWS sweep
  krops.platform.flux_release_quiesce:
    kubeconfig: ~/.kube/krops-mgmt.yaml
    namespace: crossplane-system
    releases: [crossplane]
    providers: [provider-aws-s3, provider-aws-rds, provider-aws-iam, provider-aws-ec2]
"""

RETURN = r"""
plan:
  description: The writes, in order (in check mode, the ones that would be made).
  returned: always
  type: list
  elements: str
  sample: ["suspend HelmRelease ack-system/ack-s3", "scale Deployment ack-system/ack-s3-controller to 0 replicas"]
suspended:
  description: The HelmReleases this run suspended (in check mode, that it would suspend).
  returned: always
  type: list
  elements: str
  sample: [ack-s3]
scaled:
  description: The Deployments this run scaled to zero (in check mode, that it would scale).
  returned: always
  type: list
  elements: str
  sample: [ack-s3-controller]
target:
  description: The cluster the module acted on.
  returned: always
  type: str
  sample: context mgmt-admin@mgmt in ~/.kube/krops-mgmt.yaml
"""

from ansible_collections.krops.platform.plugins.module_utils import kube_shell
from ansible_collections.krops.platform.plugins.module_utils import teardown_objects

NAME = "krops.platform.flux_release_quiesce"


def argument_spec():
    return kube_shell.spec(
        namespace=dict(type="str", required=True),
        releases=dict(type="list", elements="str", required=True),
        providers=dict(type="list", elements="str", default=[]),
    )


def main():
    kube_shell.run(NAME, argument_spec(), teardown_objects.quiesce_releases, "stopping the releases' controllers")


if __name__ == "__main__":
    main()
