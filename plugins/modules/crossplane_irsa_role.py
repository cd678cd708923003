#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: crossplane_irsa_role
author:
  - krops developers (@krops)
version_added: 0.1.0
short_description: Make the IAM role the Crossplane providers assume through IRSA
description:
  - Creates, or brings up to date, the IAM role O(role_name) that the Crossplane provider-aws family assumes
    through IAM roles for service accounts (IRSA) on the management EKS cluster (resource-plane crossplane). The
    pivot runs it after the move, before Flux starts the providers on the management cluster.
  - The role trusts the IAM OIDC provider of O(eks_cluster) (CAPA creates it when the control plane sets
    C(associateOIDCProvider)) for the audience C(sts.amazonaws.com) and the subjects
    C(system:serviceaccount:<namespace>:<pattern>) of O(service_accounts) (C(StringLike)), and gets the inline
    policy C(krops-crossplane-providers) allowing the four provider services (s3, rds, iam, ec2).
  - The role is tagged C(krops.io/environment=<environment>) (and O(tags)), the mark the teardown's sweep deletes
    it by. A role of the same name without that tag, or tagged for another environment, is refused and never
    changed.
  - Fails naming what is missing when the EKS cluster has no OIDC issuer or no IAM OIDC provider.
options:
  environment:
    description: The environment (an C([environments.<name>]) key of bootstrap.toml) whose tag marks the role.
    type: str
    required: true
  eks_cluster:
    description: Name of the management EKS cluster whose OIDC provider the role trusts.
    type: str
    required: true
  region:
    description: Region of O(eks_cluster).
    type: str
    required: true
  role_name:
    description: Name of the role (the tree's DeploymentRuntimeConfig annotates the providers with it).
    type: str
    default: krops-crossplane
  namespace:
    description: Namespace of the providers' ServiceAccounts.
    type: str
    default: crossplane-system
  service_accounts:
    description:
      - The providers' ServiceAccount names, as IAM C(StringLike) patterns. Crossplane names each after its package
        revision (C(<provider>-<digest>)).
    type: list
    elements: str
    default: ["provider-aws-*"]
  tags:
    description: More tags for the role (for example the run tags), key to value.
    type: dict
    default: {}
extends_documentation_fragment:
  - krops.platform.aws
  - krops.platform.attributes
attributes:
  check_mode:
    details: Reads the EKS cluster, the OIDC provider and the role, and returns RV(changes) without writing.
  platform:
    details: Talks to the AWS API from the host it runs on (the pivot role uses localhost).
"""

EXAMPLES = r"""
- name: Make the IRSA role of the Crossplane providers
  krops.platform.crossplane_irsa_role:
    environment: aws-crossplane
    eks_cluster: default_eu-north-1-management-control-plane
    region: eu-north-1
"""

RETURN = r"""
role_name:
  description: The role's name.
  returned: always
  type: str
  sample: krops-crossplane
role_arn:
  description: The role's ARN (empty in check mode when the role does not exist yet).
  returned: always
  type: str
  sample: arn:aws:iam::123456789012:role/krops-crossplane
oidc_provider_arn:
  description: The IAM OIDC provider the role trusts.
  returned: always
  type: str
  sample: arn:aws:iam::123456789012:oidc-provider/oidc.eks.eu-north-1.amazonaws.com/id/EXAMPLE
issuer:
  description: The EKS cluster's OIDC issuer URL.
  returned: always
  type: str
  sample: https://oidc.eks.eu-north-1.amazonaws.com/id/EXAMPLE
changes:
  description: What was done (in check mode, what would be done), in order; empty when the role is as wanted.
  returned: always
  type: list
  elements: str
  sample: ["create role", "put policy krops-crossplane-providers"]
"""

from ansible_collections.krops.platform.plugins.module_utils import aws, contract, crossplane_identity, shell

NAME = "krops.platform.crossplane_irsa_role"


def argument_spec():
    spec = dict(
        environment=dict(type="str", required=True),
        eks_cluster=dict(type="str", required=True),
        region=dict(type="str", required=True),
        role_name=dict(type="str", default="krops-crossplane"),
        namespace=dict(type="str", default="crossplane-system"),
        service_accounts=dict(type="list", elements="str", default=["provider-aws-*"]),
        tags=dict(type="dict", default={}),
    )
    spec.update(aws.AWS_ARGS)
    return spec


def body(module, step):
    contract.check("crossplane_irsa_role", module.params)
    params = module.params
    step("connecting to AWS")
    connection = aws.Connection.from_options(params)
    step("making the IRSA role")
    return crossplane_identity.ensure_role(
        connection,
        params["region"],
        params["eks_cluster"],
        params["environment"],
        params["role_name"],
        params["namespace"],
        params["service_accounts"],
        {str(k): str(v) for k, v in params["tags"].items()},
        module.check_mode,
    )


def main():
    shell.run(
        NAME,
        argument_spec(),
        body,
        wording={aws.AwsError: "crossplane_irsa_role: {error}"},
        mutually_exclusive=[["profile", "access_key"], ["profile", "secret_key"]],
    )


if __name__ == "__main__":
    main()
