#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: preflight_check
short_description: Check everything a krops bootstrap needs, and report every problem at once
version_added: 0.1.0
description:
  - Runs every requested check before anything changes, collects every problem and fails once listing all of
    them (or only reports them with O(fail_on_problems=false)). It never changes anything.
  - Tools, every missing binary in O(tools) is named.
  - Age key, when O(age_key_file) is set, the file must have the C(# created:), C(# public key:) and
    C(AGE-SECRET-KEY-) lines age-keygen writes; the public key is derived from the secret key with
    C(age-keygen -y) (the key goes through stdin) when age-keygen is installed, and must equal
    O(age_public_key) when that is set.
  - Git sync, when O(git_url) is set, O(github_token) must be able to read the repository and
    O(git_branch) must exist (GitHub REST API at O(github_api_url)); the branch's commit is returned.
  - AWS, for each entry of O(aws_eip_checks), the region must have room for O(eips_per_cluster) Elastic IPs per
    cluster (one NAT gateway per availability zone). The limit comes from Service Quotas (EC2 quota
    C(L-0263D0A3), applied value then default), else from the EC2 account attribute C(vpc-max-elastic-ips);
    addresses already owned by the listed clusters count as available. Each short region is reported with the
    C(aws service-quotas request-service-quota-increase) command that would raise it.
  - Versions, not only presence (each only when its tool is found). With O(provider_manifests), C(clusterctl version -o short)
    must implement the contract of the CoreProvider's C(spec.version) (C(metadata.yaml) of each Cluster API release;
    v1.11 to v1.14 implement v1beta2). With O(kind_node_image), the installed kind must have been published with that
    exact image (tag and digest, from kind's release notes). With O(helm_oci), C(helm version --short) must be
    v3.8.0 or later (OCI charts generally available). With O(container_engine), C(<engine> info) must succeed, so the
    daemon answers and not only its CLI is installed.
author:
  - krops developers (@krops)
extends_documentation_fragment:
  - krops.platform.attributes
  - krops.platform.aws
options:
  tools:
    description: Binaries that must be found on E(PATH), as bare command names (no path).
    type: list
    elements: str
    default: []
  age_key_file:
    description: The age key file to check. The age check runs only when this is set.
    type: path
  age_public_key:
    description: The recipient (C(age1...)) the key file must match, for example from E(AGE_PUBLIC_KEY). Empty means no comparison.
    type: str
  git_url:
    description: The repository Flux syncs, C(https://github.com/<owner>/<repo>). The Git check runs only when this is set.
    type: str
  git_branch:
    description: The branch that must exist.
    type: str
    default: main
  github_token:
    description: Token Flux will use to read the repository. Defaults to E(GITHUB_TOKEN).
    type: str
  github_api_url:
    description: Base URL of the GitHub REST API (GitHub Enterprise, or a test double).
    type: str
    default: https://api.github.com
  aws_eip_checks:
    description: Regions to check for Elastic IP room, each with the clusters that will be created there.
    type: list
    elements: dict
    default: []
    suboptions:
      region:
        description: AWS region.
        type: str
        required: true
      clusters:
        description: Names of the clusters (CAPA cluster names, used for the ownership tags) planned in the region.
        type: list
        elements: str
        required: true
  eips_per_cluster:
    description: Elastic IPs each cluster needs (one NAT gateway per availability zone); at least 1.
    type: int
    default: 3
  provider_manifests:
    description: Provider manifests (the environment's C(provider-manifests)); the CoreProvider's C(spec.version) is
      the Cluster API release clusterctl must match.
    type: list
    elements: path
    default: []
  kind_node_image:
    description: Node image the bootstrap cluster uses (C(bootstrap.kind-node-image)); the installed kind must support it.
    type: str
  helm_oci:
    description: Require a helm recent enough for C(oci://) charts.
    type: bool
    default: false
  container_engine:
    description: Container engine CLI whose daemon must answer (for example V(docker) or V(podman)).
    type: str
  fail_on_problems:
    description: Fail (once, listing every problem) when any check finds a problem.
    type: bool
    default: true
attributes:
  check_mode:
    details: Every check is read-only and runs in check mode too.
  platform:
    details: Checks the tools, files and credentials of the host it runs on (the preflight role uses localhost).
requirements:
  - boto3 >= 1.44.8 (Python library), only for O(aws_eip_checks)
notes:
  - The token and the age secret key never appear in the result or in any message.
"""

EXAMPLES = r"""
- name: Preflight for the aws environment
  krops.platform.preflight_check:
    tools: [kind, helm, kubectl, clusterctl, sops, docker]
    provider_manifests: [mgmt/aws/capi-system/core-provider.yaml]
    kind_node_image: kindest/node:v1.35.5@sha256:ce977ae6d65918d0b58a5f8b5e940429c2ce42fa3a5619ec2bbc60b949c0ac95
    helm_oci: true
    container_engine: docker
    age_key_file: age.agekey
    age_public_key: "{{ lookup('ansible.builtin.env', 'AGE_PUBLIC_KEY') }}"
    git_url: https://github.com/krops/krops
    git_branch: main
    aws_eip_checks:
      - region: eu-north-1
        clusters: [eu-north-1-management, eu-north-1-workload]
      - region: eu-west-1
        clusters: [eu-west-1-workload]
"""

RETURN = r"""
problems:
  description: Every problem found (empty when all checks passed).
  returned: always
  type: list
  elements: str
  sample: ["missing tools: clusterctl (install them or put them on PATH; PATH is /usr/local/bin:/usr/bin)"]
tools:
  description: Binaries found (name to path) and missing.
  returned: always
  type: dict
  contains:
    found:
      description: Name to absolute path.
      type: dict
      sample: {kind: /usr/local/bin/kind, helm: /usr/local/bin/helm}
    missing:
      description: Names not found.
      type: list
      elements: str
      sample: [clusterctl]
  sample: {found: {kind: /usr/local/bin/kind, helm: /usr/local/bin/helm}, missing: [clusterctl]}
age_key:
  description: The age key file checked, its public key (derived when age-keygen is available) and its mode.
  returned: when O(age_key_file) is set
  type: dict
  sample: {path: /home/user/.config/krops/age.agekey, public_key: age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p, derived: true, mode: "0600"}
git:
  description: The repository (owner/repo), branch and the branch's commit SHA.
  returned: when O(git_url) is set
  type: dict
  sample: {"url": "https://github.com/krops/krops", "repository": "krops/krops", "branch": "main", "commit": "0123abc..."}
versions:
  description: Per tool, what the version checks read (clusterctl, kind, helm, the container engine).
  returned: when a version check ran
  type: dict
  sample: {"clusterctl": {"capi_version": "v1.13.5", "clusterctl_version": "1.13.5", "contract": "v1beta2"},
           "kind": {"kind_version": "0.32.0", "node_image": "kindest/node:v1.35.5@sha256:..."},
           "helm": {"helm_version": "3.19.0"}, "docker": {"engine": "docker", "daemon": true, "server_version": "28.3.0"}}
aws_eip:
  description: Per region, the Elastic IP limit and its source, allocated, owned, needed, available, short and the increase request.
  returned: when O(aws_eip_checks) is set
  type: list
  elements: dict
  sample:
    - region: eu-north-1
      clusters: [eu-north-1-management, eu-north-1-workload]
      limit: 5
      limit_source: service-quotas get-service-quota
      allocated: 1
      owned: 0
      needed: 6
      available: 4
      short: true
      request: aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-0263D0A3 --desired-value 7 --region eu-north-1
"""

import re

from ansible.module_utils.basic import env_fallback

from ansible_collections.krops.platform.plugins.module_utils import aws, errors, preflight, shell

NAME = "krops.platform.preflight_check"
_TOOL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def argument_spec():
    spec = dict(
        tools=dict(type="list", elements="str", default=[]),
        age_key_file=dict(type="path"),
        age_public_key=dict(type="str"),
        git_url=dict(type="str"),
        git_branch=dict(type="str", default="main"),
        github_token=dict(type="str", no_log=True, fallback=(env_fallback, ["GITHUB_TOKEN"])),
        github_api_url=dict(type="str", default="https://api.github.com"),
        aws_eip_checks=dict(
            type="list",
            elements="dict",
            default=[],
            options=dict(
                region=dict(type="str", required=True),
                clusters=dict(type="list", elements="str", required=True),
            ),
        ),
        eips_per_cluster=dict(type="int", default=3),
        provider_manifests=dict(type="list", elements="path", default=[]),
        kind_node_image=dict(type="str"),
        helm_oci=dict(type="bool", default=False),
        container_engine=dict(type="str"),
        fail_on_problems=dict(type="bool", default=True),
    )
    spec.update(aws.AWS_ARGS)
    return spec


def body(module, step):
    params = module.params
    step("checking the options")
    shell.positive(params, "eips_per_cluster")
    bad_tools = [tool for tool in params["tools"] if not _TOOL.match(tool)]
    if bad_tools:
        raise errors.ConfigError(
            "tools must be bare command names (looked up on PATH), got {}".format(", ".join(map(repr, bad_tools)))
        )
    connection = None
    if params["aws_eip_checks"]:
        step("connecting to AWS")
        connection = aws.Connection.from_options(params)
    capi_version, version_problems = None, []
    if params["provider_manifests"]:
        step("reading the provider manifests")
        capi_version, version_problems = preflight.core_provider_version(params["provider_manifests"])
    step("running the checks")
    result = preflight.run(
        tools=params["tools"],
        age_key_file=params["age_key_file"],
        age_public_key=params["age_public_key"],
        check_age_key_file=bool(params["age_key_file"]),
        git_url=params["git_url"],
        git_branch=params["git_branch"],
        github_token=params["github_token"],
        github_api_url=params["github_api_url"],
        check_git_sync=bool(params["git_url"]),
        eip_checks=params["aws_eip_checks"],
        eips_per_cluster=params["eips_per_cluster"],
        aws_connection=connection,
        capi_version=capi_version,
        kind_node_image=params["kind_node_image"],
        helm_oci=params["helm_oci"],
        container_engine=params["container_engine"],
    )
    result["problems"] = version_problems + result["problems"]
    problems = result["problems"]
    if problems and params["fail_on_problems"]:
        raise errors.ConfigError(
            "preflight found %d problem%s:\n- %s"
            % (len(problems), "" if len(problems) == 1 else "s", "\n- ".join(problems)),
            result,
        )
    return dict(result, changed=False)


# An AWS connection that cannot be made (the checks themselves report AWS failures as problems).
WORDING = {aws.AwsError: "preflight: {error}"}


def main():
    shell.run(
        NAME,
        argument_spec(),
        body,
        wording=WORDING,
        mutually_exclusive=[["profile", "access_key"], ["profile", "secret_key"]],
    )


if __name__ == "__main__":
    main()
