#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: crossplane_resources_delete
author:
  - krops developers (@krops)
version_added: 0.1.0
short_description: Delete the Crossplane managed resources krops owns, in dependency order
description:
  - Deletes the AWS managed resources (C(*.aws.m.upbound.io/v1beta1)) of one environment while Crossplane and its
    providers still run, so that each provider deletes the AWS resource behind its object. The teardown role runs
    it before it stops Crossplane and sweeps what is left.
  - An object is deleted only when its label C(krops.io/environment) is exactly O(environment); one of the same
    kind and name without it is never touched.
  - Every kind is listed before any write; a listing the API server cannot answer fails with nothing changed.
  - Objects whose C(spec.managementPolicies) leave C(Delete) out (the tree's DB instance and bucket) are first set
    to C(["*"]), with C(forceDestroy) on a bucket, so the provider deletes them too.
  - Deletes in stages (DB instance, attachments, bucket settings and the ingress rule; then the DB subnet group,
    bucket, role, policy and user; then the security group and subnets; then the VPC) and waits until each
    stage's objects are gone before the next. When the last stage is gone it lists every kind again, and an
    owned object still there fails the step and is named.
options:
  namespace:
    description: Namespace of the managed resources.
    type: str
    default: default
  environment:
    description: The environment whose label proves ownership (an C([environments.<name>]) key of bootstrap.toml).
    type: str
    required: true
  wait_timeout:
    description: Seconds the whole deletion may take; on timeout the module fails naming what is left.
    type: int
    default: 1800
extends_documentation_fragment:
  - krops.platform.attributes
  - krops.platform.kube
  - krops.platform.kube.teardown_step
attributes:
  check_mode:
    details: Lists, returns RV(plan) and sends each write as a server-side dry run; waits for nothing."""

EXAMPLES = r"""
- name: Delete the Crossplane managed resources of aws-crossplane with Crossplane running
  krops.platform.crossplane_resources_delete:
    kubeconfig: ~/.kube/krops-mgmt.yaml
    environment: aws-crossplane
    wait_timeout: 1800
"""

RETURN = r"""
plan:
  description: The writes, in order (in check mode, the ones that would be made).
  returned: always
  type: list
  elements: str
  sample: ["allow deletion of Instance default/krops-eu-north-1-workload-db (managementPolicies [*])"]
opted_in:
  description: The objects whose managementPolicies were set to C(["*"]).
  returned: always
  type: list
  elements: str
  sample: ["Bucket default/krops-eu-north-1-workload-data"]
deleted:
  description: The objects deleted (in check mode, that would be deleted).
  returned: always
  type: list
  elements: str
  sample: ["VPC default/krops-eu-north-1-workload-db"]
remaining:
  description: On a timeout, the objects still present.
  returned: always
  type: list
  elements: str
  sample: []
target:
  description: The cluster the module acted on.
  returned: always
  type: str
  sample: context krops-mgmt in ~/.kube/krops-mgmt.yaml
"""

from ansible_collections.krops.platform.plugins.module_utils import kube_shell
from ansible_collections.krops.platform.plugins.module_utils import teardown_crossplane

NAME = "krops.platform.crossplane_resources_delete"


def argument_spec():
    return kube_shell.spec(
        namespace=dict(type="str", default="default"),
        environment=dict(type="str", required=True),
        wait_timeout=dict(type="int", default=1800),
    )


def main():
    kube_shell.run(NAME, argument_spec(), teardown_crossplane.delete_managed, "deleting the managed resources")


if __name__ == "__main__":
    main()
