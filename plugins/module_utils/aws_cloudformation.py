# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""CloudFormation row of the AWS sweep: the account-global clusterawsadm stack (``cfn-stack-name``).

Looked up by its exact name in each target region; kept (with the reason) while another environment of
bootstrap.toml names it or still has clusters. Its deletion is awaited (one DescribeStacks per stack and
poll): a deletion that ends in DELETE_FAILED fails the run naming the stack, and one still in progress
when wait_timeout ends does too, so rc=0 means the stack is gone. The final pass takes the wait's last
DescribeStacks of a region instead of making it again (aws_delete Scan.listing).
"""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import aws
from ansible_collections.krops.platform.plugins.module_utils.aws import ClientError
from ansible_collections.krops.platform.plugins.module_utils.aws_delete import sweep_row
from ansible_collections.krops.platform.plugins.module_utils.aws_rows import GLOBAL, key, resource


def stacks(d, with_age):
    if not d.sweep.stack_name:
        return []
    found = []
    for region in d.sweep.regions:
        client = d.sweep.conn.client("cloudformation", region)
        listed = d.listing(("stack", d.sweep.stack_name), lambda c=client: _describe(c, d.sweep.stack_name), region)
        for stack in listed:
            # a stack still DELETE_IN_PROGRESS (an earlier run's deletion) is listed: the sweep awaits it
            if stack.get("StackStatus") == "DELETE_COMPLETE":
                continue
            res = resource(
                region,
                "cloudformation-stack",
                stack["StackName"],
                "",
                stack.get("CreationTime"),
                "account-global clusterawsadm stack named by bootstrap.toml",
                status=stack.get("StackStatus"),
            )
            why = d.sweep.global_kept_reason("cloudformation-stack", stack["StackName"])
            if why:
                d.sweep.keep(res, why)
            else:
                found.append(res)
    return found


def _describe(client, name):
    """The stacks DescribeStacks answers for ``name`` ([] when there is none)."""
    try:
        return aws.call(client, "describe_stacks", StackName=name).get("Stacks") or []
    except ClientError as exc:
        if aws.is_not_found(exc):
            return []
        raise


def delete_stack(x, res):
    if res["meta"].get("status") == "DELETE_IN_PROGRESS":
        return  # already deleting: awaited like a deletion this run started, not requested again
    aws.call(x.client("cloudformation", res["region"]), "delete_stack", StackName=res["id"])


def state_stack(x, pending):
    """{region|type|name: status} (the same stack name is looked up in several regions), 'gone' once deleted."""
    states = {}
    for res in pending:
        listed = _describe(x.client("cloudformation", res["region"]), res["id"])
        x.watch(("stack", res["id"]), listed, res["region"])
        status = listed[0].get("StackStatus", "?") if listed else "DELETE_COMPLETE"
        states[key(res)] = "gone" if status == "DELETE_COMPLETE" else status
    return states


STACK_ROW = sweep_row("cloudformation-stack", GLOBAL, stacks, delete_stack, state_stack, arn="cloudformation:stack")
ROWS = (STACK_ROW,)
