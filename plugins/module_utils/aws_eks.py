# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""EKS rows of the AWS sweep: node groups, pod identity associations, clusters (one chain).

A cluster named by bootstrap.toml (``eks-cluster-name``) is owned by its name and not described; any
other cluster is described once for its tags. Node groups and pod identity associations carry no
ownership of their own here: they go with their owned cluster. A wait polls one ListNodegroups per
cluster and one ListClusters per region, not one describe per resource; the final pass takes the cluster wait's
last ListClusters instead of making it again (aws_delete Scan.listing).
"""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import aws
from ansible_collections.krops.platform.plugins.module_utils.aws import ClientError
from ansible_collections.krops.platform.plugins.module_utils.aws_delete import sweep_row
from ansible_collections.krops.platform.plugins.module_utils.aws_rows import REGION, resource, unique


def clusters(d, with_age=False):
    def listing():
        client = d.client("eks")
        named = {t.eks_name: t.cluster for t in d.targets if t.eks_name}
        found = []
        for name in d.listing("eks-clusters", lambda: aws.paginate(client, "list_clusters", "clusters")):
            owner, reason, info = named.get(name), "named by bootstrap.toml", {}
            if owner is None or with_age:
                try:
                    info = aws.call(client, "describe_cluster", name=name)["cluster"]
                except ClientError as exc:
                    if aws.is_not_found(exc):
                        continue
                    raise
            if owner is None:
                owner, reason = d.owner_of(info.get("tags") or {}), ""
            if owner is not None:
                found.append(
                    resource(
                        d.region, "eks-cluster", name, owner, info.get("createdAt"), reason, status=info.get("status")
                    )
                )
        return found

    return d.cached(("eks", with_age), listing, guard="eks-cluster")


def nodegroups(d, with_age):
    client = d.client("eks")
    found = []
    for cluster in clusters(d, with_age):
        for name in aws.paginate(client, "list_nodegroups", "nodegroups", clusterName=cluster["id"]):
            created = None
            if with_age:
                created = aws.call(client, "describe_nodegroup", clusterName=cluster["id"], nodegroupName=name)[
                    "nodegroup"
                ].get("createdAt")
            found.append(
                resource(
                    d.region,
                    "eks-nodegroup",
                    "{}/{}".format(cluster["id"], name),
                    cluster["cluster"],
                    created,
                    "node group of EKS cluster {}".format(cluster["id"]),
                    eks=cluster["id"],
                    name=name,
                )
            )
    return found


def pod_identities(d, with_age):
    client = d.client("eks")
    found = []
    for cluster in clusters(d, with_age):
        for assoc in aws.paginate(client, "list_pod_identity_associations", "associations", clusterName=cluster["id"]):
            found.append(
                resource(
                    d.region,
                    "eks-pod-identity-association",
                    "{}/{}".format(cluster["id"], assoc["associationId"]),
                    cluster["cluster"],
                    None,
                    "pod identity association of EKS cluster {} ({}/{})".format(
                        cluster["id"], assoc.get("namespace"), assoc.get("serviceAccount")
                    ),
                    eks=cluster["id"],
                    association=assoc["associationId"],
                )
            )
    return found


def delete_nodegroup(x, res):
    aws.call(x.client("eks"), "delete_nodegroup", clusterName=res["meta"]["eks"], nodegroupName=res["meta"]["name"])


def delete_pod_identity(x, res):
    aws.call(
        x.client("eks"),
        "delete_pod_identity_association",
        clusterName=res["meta"]["eks"],
        associationId=res["meta"]["association"],
    )


def delete_cluster(x, res):
    aws.call(x.client("eks"), "delete_cluster", name=res["id"])


def state_nodegroup(x, pending):
    states = {}
    for eks in unique(r["meta"]["eks"] for r in pending):
        try:
            present = set(aws.paginate(x.client("eks"), "list_nodegroups", "nodegroups", clusterName=eks))
        except ClientError as exc:
            if not aws.is_not_found(exc):
                raise
            present = set()
        states.update(
            (r["id"], "DELETING" if r["meta"]["name"] in present else "gone")
            for r in pending
            if r["meta"]["eks"] == eks
        )
    return states


def state_cluster(x, pending):
    listed = aws.paginate(x.client("eks"), "list_clusters", "clusters")
    x.watch("eks-clusters", listed)
    present = set(listed)
    return {r["id"]: "DELETING" if r["id"] in present else "gone" for r in pending}


NODEGROUP_ROW = sweep_row(
    "eks-nodegroup",
    REGION,
    nodegroups,
    delete_nodegroup,
    state_nodegroup,
    chain="eks",
    expected=600,
    arn="eks:nodegroup",
)
POD_IDENTITY_ROW = sweep_row(
    "eks-pod-identity-association",
    REGION,
    pod_identities,
    delete_pod_identity,
    chain="eks",
    arn="eks:podidentityassociation",
)
CLUSTER_ROW = sweep_row(
    "eks-cluster", REGION, clusters, delete_cluster, state_cluster, chain="eks", expected=720, arn="eks:cluster"
)
ROWS = (NODEGROUP_ROW, POD_IDENTITY_ROW, CLUSTER_ROW)  # in their deletion order (aws_sweep.SERVICES)
