# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""The row type of the AWS sweep's table, and what the per-service rows share.

Each per-service file (aws_ec2, aws_eks, aws_elb, aws_rds, aws_iam, aws_s3, aws_cloudformation,
aws_tagging; the layout of amazon.aws's module_utils) defines its rows; aws_sweep.py lists them in one
table whose order is the deletion order.

A row's handlers take the sweep's discovery (``list(d, with_age)``) or deleter (``delete(x, res)``,
``wait_state(x, pending)``) of one region. Only a row with a ``wait_state`` is ever awaited: its
``delete`` starts a deletion that takes time; every other row's deletion is final when ``delete``
returns, and a row cannot declare an ``expected`` deletion time without a way to wait for it.

Importable without Ansible.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

GLOBAL = "global"
REGION = "region"
ABSENT = "absent"  # what a delete handler answers when there was nothing to delete


@dataclasses.dataclass(eq=False, repr=False)
class ResourceType:
    """One row of the sweep's type table: what it is, how it is listed, deleted and (optionally) awaited.

    ``chain`` groups regional types that depend on each other and on nothing else: chains run side by
    side, rows without a chain (volumes, the network) after all of them. ``expected`` (typical seconds a
    deletion takes; tests/benchmarks/aws_latency_proxy.py cites the sources) delays the first poll.
    ``before`` runs once per batch and may return the batch in the order to delete it (security groups: their
    rules), ``refresh`` re-lists a batch right before its deletion (interfaces detach meanwhile).
    """

    name: str
    scope: str
    list: object  # pylint: disable=redefined-builtin
    delete: object
    wait_state: str | None = None
    chain: str | None = None
    before: object = None
    refresh: object = None
    expected: int = 0

    def __post_init__(self):
        if self.expected and self.wait_state is None:
            raise ValueError(f"sweep row {self.name}: an expected deletion time needs a wait_state")
        if self.scope not in (REGION, GLOBAL):
            raise ValueError(f"sweep row {self.name}: scope must be {REGION!r} or {GLOBAL!r}")

    @property
    def waited(self):
        return self.wait_state is not None

    def __repr__(self):
        return f"ResourceType({self.name!r})"


def resource(region, rtype, rid, cluster, created=None, reason="", **meta):
    return {
        "region": region,
        "type": rtype,
        "id": rid,
        "cluster": cluster,
        "created": created,
        "reason": reason,
        "meta": meta,
    }


def key(res):
    """A resource's identity across the steps of one sweep."""
    return "{}|{}|{}".format(res["region"], res["type"], res["id"])


def arn_type(arn):
    """'<service>:<resource type>' of an ARN, e.g. 'ec2:volume' for arn:aws:ec2:eu-north-1:1:volume/vol-1."""
    parts = arn.split(":", 5)
    if len(parts) < 6:
        return ""
    rest = parts[5]
    # the resource type ends at the first '/' or ':' (log-group:/aws/eks/x/cluster, vpc/vpc-1, db:name)
    cut = min((i for i in (rest.find("/"), rest.find(":")) if i >= 0), default=-1)
    kind = rest[:cut] if cut >= 0 else ""
    return f"{parts[2]}:{kind}"


def unique(items):
    seen = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def public(resource, outcome, reason=None):
    """The result entry users see for a resource."""
    return {
        "region": resource["region"],
        "type": resource["type"],
        "id": resource["id"],
        "cluster": resource["cluster"],
        "outcome": outcome,
        "reason": resource.get("reason", "") if reason is None else reason,
    }


def in_table_order(results, types):
    """results sorted by the order of their types in the table (types); a type not in it last."""
    order = {t.name: i for i, t in enumerate(types)}
    return sorted(results, key=lambda r: order.get(r["type"], len(order)))


def in_order(func, items, workers):
    """[func(item) for item in items], up to ``workers`` at a time (in this thread when 1); results in the order of
    items, and the first item's error in that order raised."""
    items = list(items)
    if workers <= 1 or len(items) <= 1:
        return [func(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(func, items))
