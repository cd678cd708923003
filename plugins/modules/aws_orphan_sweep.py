#!/usr/bin/python
# Copyright: krops developers
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: aws_orphan_sweep
short_description: Delete, or report, every AWS resource a krops environment owns
version_added: 0.1.0
description:
  - Sweeps the AWS resources of the clusters of an environment of kind C(aws) in bootstrap.toml
    (its C([[environments.<env>.teardown.aws-workloads]]) entries and, with O(include_management), the
    self-managed management cluster), per region, regions concurrently.
  - "Ownership (docs/ownership.md): a resource is owned only when it is tagged
    C(sigs.k8s.io/cluster-api-provider-aws/cluster/<name>=owned) or C(kubernetes.io/cluster/<name>=owned), where
    <name> is exactly the CAPI or the EKS cluster name of one of those clusters, or C(krops.io/environment=<env>)
    (only when the whole environment is swept), or when bootstrap.toml names it exactly (C(eks-cluster-name),
    C(rds-instance), C(s3-bucket-pattern), C(global-iam-roles), C(global-iam-users), C(cfn-stack-name)).
    A resource tagged C(krops.io/environment) for another environment is never touched. A name that only resembles
    a cluster is never deleted; in report mode it is listed in RV(candidates)."
  - Node groups and pod identity associations of an owned EKS cluster, the DB subnet group of a swept RDS instance
    and detached network interfaces inside an owned VPC go with their owner.
  - "Account-global resources (C(global-iam-users), C(cfn-stack-name)) are deleted only when no other environment of
    bootstrap.toml names them and no cluster of another aws environment still exists (EKS by name, VPCs by their
    ownership tags); otherwise they are listed in RV(kept) with the reason."
  - Each C(aws-workloads) entry is swept in its own region, the management cluster in the environment's C(mgmt-region).
  - "Per region, five chains run side by side: EKS node groups (waited), pod identity associations, EKS clusters
    (waited); self-managed EC2 instances (terminated, waited); RDS instances (no final snapshot, waited) and their
    subnet groups; ELBv2 and classic load balancers and target groups; NAT gateways (waited) and elastic IPs. Then
    launch templates, EBS volumes (those owned instances keep included) and snapshots, and the network: detached
    network interfaces, subnets, internet gateways, non-main route tables, security groups (rules
    that name other groups revoked first), VPCs. Then S3 buckets (every version and delete marker), IAM roles (policies and instance
    profiles first), IAM OIDC providers, IAM users (login profile, access keys first), customer managed policies
    tagged for the environment and the clusterawsadm CloudFormation stack in each target region (waited)."
  - Owned resources of any other type are found through the Resource Groups Tagging API; they cannot be deleted
    and fail the run, named by ARN.
  - Throttling and transient errors are retried by botocore's standard retry mode (jittered backoff, one budget of
    8 attempts per call, the only retry layer); "not found" counts as already gone, so a re-run is a no-op. Each
    resource's outcome is returned.
    A final pass lists everything again and the task fails when anything owned is left, naming it.
  - "Several accounts: when the environment lists C([[environments.<env>.accounts]]) in bootstrap.toml, each account is
    swept through its own role (STS AssumeRole with the caller's credentials; its own session and clients). Every
    role is assumed and its identity checked (STS GetCallerIdentity equals the configured C(account-id)) before
    anything is listed: a role that lands in another account refuses the whole run. An account whose role cannot
    be assumed is an error of that account (nothing is listed or deleted there); the others are swept. Each
    account sweeps its C(clusters) in its C(regions) (every cluster and region of the environment when it names
    none), with the ownership proof of those clusters only. Results, the report and RV(accounts) are grouped by account; the task fails when anything
    owned is left, or anything failed, in any account. A sweep of several accounts runs in one step."
  - With O(mode=report) nothing is changed; owned resources older than O(min_age_hours) are returned as Markdown
    and JSON (and written to O(report_path)). The task fails only when listing failed.
author:
  - krops developers (@krops)
options:
  environment:
    description:
      - Environment of bootstrap.toml to sweep; it must be of kind C(aws).
      - Default is the selected environment (E(KROPS_PROFILE), else C(bootstrap.default-environment)).
    type: str
  config_file:
    description: Path of bootstrap.toml. Default E(BOOTSTRAP_CONFIG), else C(bootstrap.toml) in the current directory.
    type: path
  mode:
    description:
      - V(delete) deletes every owned resource (in check mode it returns the complete plan and changes nothing).
      - V(report) only lists owned resources older than O(min_age_hours).
    type: str
    choices: [delete, report]
    default: delete
  include_management:
    description:
      - Sweep the management cluster too. Its cluster name is the environment's C(mgmt-cluster), its EKS name
        C(teardown.mgmt-eks-cluster-name), its IAM role prefix C(teardown.mgmt-iam-role-prefix).
      - Do this only once its workloads are gone; it is removed from the AWS side, never through its own Cluster object.
    type: bool
    default: true
  regions:
    description:
      - Sweep only these regions (each must be a region of the environment). Leave it out for every region; an
        empty list is refused.
      - Global IAM users are kept unless every region of the environment is swept.
    type: list
    elements: str
  min_age_hours:
    description:
      - With O(mode=report), report resources at least this old (V(0) or more). Resources without a creation time
        of their own take the age of their cluster's oldest resource; with none known they are always reported.
    type: float
    default: 6
  concurrency:
    description:
      - Regions swept at the same time, and global resources of one type (S3 buckets, IAM roles) deleted side by side.
      - Default is the number of regions. V(1) does everything one after another.
      - With C([[environments.<env>.accounts]]) in bootstrap.toml, also the accounts swept at the same time (default
        8), each account with its own regions at the same time up to this number.
    type: int
  wait_timeout:
    description:
      - Seconds to wait for each group of node group, EKS cluster, RDS instance and NAT gateway deletions.
        The teardown role passes C(bootstrap.cluster-delete-timeout).
        A resource still present then gets outcome C(failed) and the sweep goes on.
      - Also bounds (with a cap of 180 s) the retries of a delete refused with C(DependencyViolation).
    type: int
    default: 1200
  account_id:
    description:
      - Without C(accounts) in bootstrap.toml, the AWS account of the credentials (checked with STS
        C(GetCallerIdentity) before anything is listed; also used for C(s3-bucket-pattern)). Default is the
        caller's account.
      - With C(accounts), sweep only this one of the configured accounts (another ID is refused).
    type: str
  progress_interval:
    description:
      - Seconds between progress lines on the controller while deletions are awaited (delete mode, not check mode).
      - The action plugin runs the module in steps of about this length; each later step resumes from the plan and
        the deletions already started, without listing the account again. V(0) runs the module once.
    type: int
    default: 30
extends_documentation_fragment:
  - krops.platform.attributes
  - krops.platform.attributes.action
  - krops.platform.aws
  - krops.platform.cloud_teardown.report
attributes:
  check_mode:
    details: >-
      In delete mode returns RV(plan), every resource that would be deleted (C(changed) when it is not empty);
      makes no call that changes anything and skips waits and the final pass.
  platform:
    details: Calls the AWS APIs with boto3 from the host it runs on (the orphan-report and teardown plays use localhost).
  action:
    details: The action plugin runs the module in bounded steps and shows what is still being deleted between them.
seealso:
  - module: krops.platform.capi_cluster_delete
"""

EXAMPLES = r"""
- name: Sweep everything environment aws owns in AWS (after its workload Clusters are gone)
  krops.platform.aws_orphan_sweep:
    environment: aws
  register: sweep

- name: Show the plan only
  krops.platform.aws_orphan_sweep:
    environment: aws
  check_mode: true

- name: Daily orphan report, older than 12 hours
  krops.platform.aws_orphan_sweep:
    environment: aws
    mode: report
    min_age_hours: 12
    report_path: reports/orphans.md

- name: Against moto
  krops.platform.aws_orphan_sweep:
    environment: aws
    endpoint_url: http://127.0.0.1:5000
    include_management: false
    regions: [eu-west-1]
"""

RETURN = r"""
results:
  description: Outcome of every resource the sweep tried to delete, in deletion order (empty in check mode and report mode).
  returned: always
  type: list
  elements: dict
  contains:
    region:
      description: Region, or C(global) for IAM.
      type: str
      sample: eu-north-1
    type:
      description: >-
        Resource type, for example C(eks-cluster), C(nat-gateway), C(vpc), C(ebs-volume), C(s3-bucket), C(iam-role),
        or C(unsupported) for an owned resource of a type the sweep cannot delete (its ID is the ARN).
      type: str
      sample: nat-gateway
    id:
      description: Resource ID (name, ARN or ID; node groups and pod identity associations as C(<eks>/<name>)).
      type: str
      sample: nat-0a1b2c3d4e5f60789
    cluster:
      description: The cluster that owns it (empty for global IAM users and the CloudFormation stack).
      type: str
      sample: eu-north-1-workload
    outcome:
      description: >-
        V(deleted), V(absent) (already gone), V(failed), V(planned) or V(undeletable) in RV(plan), V(kept) in RV(kept),
        V(left) in RV(leftovers), V(candidate) in RV(candidates), V(orphan) in the report.
      type: str
      sample: deleted
    reason:
      description: Why it failed, or why it counts as owned when that is not its own tag.
      type: str
      sample: ""
  sample:
    - region: eu-north-1
      type: nat-gateway
      id: nat-0a1b2c3d4e5f60789
      cluster: eu-north-1-workload
      outcome: deleted
      reason: ""
plan:
  description: In check mode with O(mode=delete), every resource that would be deleted (outcome V(planned)), in order.
  returned: always
  type: list
  elements: dict
  sample:
    - region: eu-north-1
      type: eks-cluster
      id: default_eu-north-1-workload-control-plane
      cluster: eu-north-1-workload
      outcome: planned
      reason: ""
leftovers:
  description: Owned resources still present after the sweep (the task fails when this is not empty).
  returned: always
  type: list
  elements: dict
  sample:
    - region: eu-west-1
      type: vpc
      id: vpc-0123456789abcdef0
      cluster: eu-west-1-workload
      outcome: left
      reason: ""
report:
  description: With O(mode=report), the report.
  returned: when O(mode=report)
  type: dict
  contains:
    markdown:
      description: The report as Markdown.
      type: str
      sample: "# krops AWS orphan report ..."
    json:
      description: >-
        The report data: environment, account_id, regions, generated_at, min_age_hours, count, errors and
        resources (region, type, id, cluster, created, age_hours, age_from_cluster, reason).
      type: dict
      sample:
        environment: aws
        account_id: "123456789012"
        regions: [eu-north-1, eu-west-1]
        generated_at: "2026-12-01T09:00:00+00:00"
        min_age_hours: 6
        count: 0
        resources: []
        errors: []
        candidates: []
        kept: []
  sample:
    markdown: "# krops AWS orphan report ..."
    json: {environment: aws, account_id: "123456789012", regions: [eu-north-1], count: 0, resources: []}
report_files:
  description: Paths written (markdown, json) when O(report_path) is set.
  returned: when O(report_path) is set and not in check mode
  type: dict
  sample:
    markdown: reports/aws-orphans.md
    json: reports/aws-orphans.json
targets:
  description: The clusters swept (cluster, region, eks_cluster_name, rds_instance, role).
  returned: always
  type: list
  elements: dict
  sample:
    - cluster: eu-north-1-workload
      region: eu-north-1
      eks_cluster_name: default_eu-north-1-workload-control-plane
      rds_instance: krops-eu-north-1-workload-db
      role: workload
regions:
  description: Regions swept.
  returned: always
  type: list
  elements: str
  sample: [eu-north-1, eu-west-1]
account_id:
  description: Account swept (empty when the environment lists several C(accounts); see RV(account_ids)).
  returned: always
  type: str
  sample: "123456789012"
account_ids:
  description: The accounts swept, in the order of C([[environments.<env>.accounts]]).
  returned: when the environment lists accounts
  type: list
  elements: str
  sample: ["111111111111", "222222222222"]
accounts:
  description:
    - Per account (when the environment lists accounts), its own results, plan, leftovers, errors, warnings, kept
      and candidates, whether it failed and its summary. The flat lists (RV(results) and the others) hold the same
      entries, each with its C(account_id).
  returned: when the environment lists accounts
  type: list
  elements: dict
  sample:
    - account_id: "111111111111"
      role_arn: arn:aws:iam::111111111111:role/krops-teardown
      regions: [eu-north-1, eu-west-1]
      failed: false
      changed: true
      msg: "account 111111111111: sweep of eu-north-1, eu-west-1: 23 deleted"
      results: []
      plan: []
      leftovers: []
      errors: []
      warnings: []
      kept: []
      candidates: []
kept:
  description: Owned account-global resources left on purpose, with the reason (outcome V(kept)).
  returned: always
  type: list
  elements: dict
  sample:
    - region: global
      type: iam-user
      id: krops-reader
      cluster: ""
      outcome: kept
      reason: the regions filter leaves out regions of environment aws
candidates:
  description: Resources whose name resembles a cluster of the environment but that nothing proves owned (never deleted).
  returned: always
  type: list
  elements: dict
  sample:
    - region: global
      type: iam-role
      id: eu-north-1-workload-copy
      cluster: eu-north-1-workload
      outcome: candidate
      reason: "name resembles a cluster of the environment but no ownership tag proves it: not deleted"
progress:
  description: Progress lines of the waits (seconds since the start, region, what is still being deleted).
  returned: always
  type: list
  elements: str
  sample:
    - "12.4s eu-north-1: waiting for 1 nat-gateway deletion(s): nat-0a1b2c3d4e5f60789"
waiting:
  description:
    - Deletions still awaited when a step of the action plugin ran out of time (region, type, id, state); the plugin
      prints them and runs the next step, so a task result never has it.
  returned: only from an intermediate step
  type: list
  elements: str
  sample:
    - "eu-north-1 nat-gateway nat-0a1b2c3d4e5f60789 (deleting)"
errors:
  description: Listings that failed (region, type, error); the task fails when this is not empty.
  returned: always
  type: list
  elements: dict
  sample:
    - region: eu-west-1
      type: ebs-volume
      error: "listing ebs-volume in eu-west-1 failed: UnauthorizedOperation"
api_calls:
  description: Number of AWS API calls made.
  returned: always
  type: int
  sample: 372
api_calls_by_operation:
  description: API calls per C(service.Operation).
  returned: always
  type: dict
  sample:
    ec2.DescribeVpcs: 4
    eks.ListClusters: 2
wait_timeout:
  description: Seconds each wait for a deletion may take (O(wait_timeout); the teardown role passes C(cluster-delete-timeout)).
  returned: always
  type: int
  sample: 1200
duration:
  description: Seconds the sweep took.
  returned: always
  type: float
  sample: 24.74
"""

from ansible_collections.krops.platform.plugins.module_utils import (
    aws,
    aws_sweep,
    aws_targets,
    config,
    errors,
    shell,
    steps,
)


# The resume state of the stepped sweep, the steps engine's one (module_utils/stepping.py): set by the action plugin,
# never an option.
STEP_STATE = steps.STEP_STATE


def argument_spec():
    spec = dict(
        environment=dict(type="str"),
        config_file=dict(type="path"),
        mode=dict(type="str", default="delete", choices=["delete", "report"]),
        include_management=dict(type="bool", default=True),
        regions=dict(type="list", elements="str"),
        min_age_hours=dict(type="float", default=6),
        report_path=dict(type="path"),
        concurrency=dict(type="int"),
        wait_timeout=dict(type="int", default=1200),
        account_id=dict(type="str"),
        progress_interval=dict(type="int", default=30),
    )
    spec.update(aws.AWS_ARGS)
    return spec


def body(module, step):
    step("sweeping")
    result = aws_sweep.run(module.params, check_mode=module.check_mode)
    if result.pop("failed"):
        raise errors.CloudError(result.pop("msg"), result=result)
    return result


# The errors of a sweep that cannot start (bad configuration or options, an AWS call) name the module.
WORDING = dict.fromkeys((config.ConfigKeyError, aws_targets.SweepError, aws.AwsError), "aws_orphan_sweep: {error}")


def main():
    shell.run(
        "aws_orphan_sweep",
        argument_spec(),
        body,
        resume=STEP_STATE,
        wording=WORDING,
        requires=[("boto3", aws.HAS_BOTO3, aws.BOTO3_IMPORT_ERROR)],
        mutually_exclusive=[("profile", "access_key"), ("profile", "secret_key")],
        required_together=[("access_key", "secret_key")],
    )


if __name__ == "__main__":
    main()
