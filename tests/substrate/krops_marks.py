"""Ownership marks other parts of krops set, for teardown tests (the kind marker of docs/ownership.md)."""

from __future__ import annotations


def make_kind_marker(api, environment, kind_cluster="mgmt", managed_by="krops"):
    """The ConfigMap kube-system/krops-bootstrap that kind_cluster creates with a new kind cluster."""
    if not api.exists("v1", "Namespace", "kube-system"):
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}})
    api.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "krops-bootstrap",
                "namespace": "kube-system",
                "labels": {"app.kubernetes.io/managed-by": managed_by},
            },
            "data": {"environment": environment, "kind-cluster": kind_cluster, "created-at": "2026-12-01T08:00:00Z"},
        }
    )
