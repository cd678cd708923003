# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""validate's ACK rules: cross-account resource management (CARM) as the ACK runtime reads it, and as
bootstrap.toml's accounts give it (ack_accounts.py). Registered in validate.REGISTRY.

The runtime's facts (aws-controllers-k8s/runtime v0.61.0; docs/upstream-facts.md "ACK cross-account resource
management"): a namespace annotated ``services.k8s.aws/owner-account-id: <id>`` has its resources reconciled with
the role ``<id>`` maps to in the ConfigMap ``ack-role-account-map`` of the controller's namespace, in that role's
account (``Reconcile``: the account comes from the role ARN); the lookup fails, and the resource waits with
ACK.ResourceSynced False "IAM Role is not available", when the ConfigMap, the key or the value is missing
(``cache/account.go``: ErrCARMConfigMapNotFound, ErrKeyNotFound, ErrEmptyValue). The controller reads namespace
annotations only with ``--enable-carm`` (the charts' ``enableCARM``, default true) and more than one watched
namespace (``service_controller.go``: one ``--watch-namespace`` turns CARM off; the charts watch one with
``installScope: namespace``), never in kube-system, kube-public or kube-node-lease (ignored by its namespace
cache), and refuses to start with the IAMRoleSelector feature gate beside ``--enable-carm`` (``config.go``).
Without the annotation a resource is the controller's own account's.
"""

from __future__ import annotations

import re

from ansible_collections.krops.platform.plugins.module_utils import ack_accounts
from ansible_collections.krops.platform.plugins.module_utils import validate_common as common

OWNER = ack_accounts.OWNER_ANNOTATION
MAP = ack_accounts.ROLE_ACCOUNT_MAP
_ACK_CHART = re.compile(r"^oci://public\.ecr\.aws/aws-controllers-k8s/[a-z0-9-]+-chart$")
_ROLE_ARN = re.compile(r"^arn:aws(?:-[a-z]+)*:iam::(\d{12}):role/\S+$")
_IGNORED = ("kube-system", "kube-public", "kube-node-lease")  # service_controller.go: the namespace cache skips them


def _controllers(env):
    """(HelmRelease item, release namespace, values) of the ACK controllers (charts of aws-controllers-k8s)."""
    repos = {
        (i.namespace, i.name): i
        for i in env.items
        if i.kind == "OCIRepository" and i.group == "source.toolkit.fluxcd.io"
    }
    for item in env.items:
        if item.kind != "HelmRelease" or item.group != "helm.toolkit.fluxcd.io" or item.fallback:
            continue
        ref = item.spec.get("chartRef") if isinstance(item.spec.get("chartRef"), dict) else {}
        repo = repos.get((ref.get("namespace") or item.namespace, ref.get("name")))
        if ref.get("kind") == "OCIRepository" and repo is not None and _ACK_CHART.match(str(repo.spec.get("url"))):
            values = item.spec.get("values") if isinstance(item.spec.get("values"), dict) else {}
            yield item, item.spec.get("targetNamespace") or item.namespace, values


def _owned_namespaces(env):
    """{namespace name: (item, owner account)} of the Namespaces with the owner annotation."""
    found = {}
    for item in env.items:
        if item.kind == "Namespace" and item.group == "" and not item.fallback:
            annotations = (item.obj.get("metadata") or {}).get("annotations") or {}
            if isinstance(annotations, dict) and OWNER in annotations:
                found[item.name] = (item, str(annotations[OWNER]))
    return found


def _role_maps(env):
    """{namespace: (item, data)} of the ack-role-account-map ConfigMaps."""
    return {
        i.namespace: (i, i.obj.get("data") if isinstance(i.obj.get("data"), dict) else {})
        for i in env.items
        if i.kind == "ConfigMap" and i.group == "" and i.name == MAP and not i.fallback
    }


def _carm_off(values):
    """Why the chart's values turn CARM off for the controller ("" when they do not)."""
    if values.get("enableCARM", True) is False:
        return "its values set enableCARM: false"
    if values.get("installScope") == "namespace" and "," not in str(values.get("watchNamespace") or ""):
        return "installScope: namespace makes it watch one namespace, and the runtime runs CARM only beyond one"
    return ""


def check_carm(env):
    """ACK's controllers can manage each owner-annotated namespace in its account, with the role-account map.

    Upstream fact: aws-controllers-k8s/runtime v0.61.0 (module docstring): without a usable ack-role-account-map
    entry an annotated namespace's resources never sync; with CARM off they land in the controller's own account;
    the IAMRoleSelector gate beside enable-carm stops the controller; an entry's role ARN decides the account.
    """
    controllers = list(_controllers(env))
    for item, _namespace, values in controllers:
        gates = values.get("featureGates") if isinstance(values.get("featureGates"), dict) else {}
        if str(gates.get("IAMRoleSelector")).lower() == "true" and values.get("enableCARM", True) is not False:
            common.flag(
                env,
                item,
                "contracts",
                "the controller would not start: cannot enable feature gate 'IAMRoleSelector' when flag 'enable-carm' "
                "is set to true (aws-controllers-k8s/runtime pkg/config/config.go); set enableCARM: false beside it",
            )
    maps = _role_maps(env)
    for namespace, (item, data) in maps.items():
        for account, role in sorted(data.items()):
            role = "" if role is None else str(role)
            problem = ""
            if not role:
                problem = "maps to no role: the runtime answers 'role value is empty in CARM configmap'"
            elif not _ROLE_ARN.match(role):
                problem = f"maps to {role!r}, not an IAM role ARN (arn:aws:iam::<account>:role/<name>)"
            elif _ROLE_ARN.match(role).group(1) != str(account):
                problem = f"maps to {role}, a role of account {_ROLE_ARN.match(role).group(1)}: the runtime manages the namespace in the role's account"
            if problem:
                common.flag(env, item, "contracts", f"account {account} {problem}")
    owned = _owned_namespaces(env)
    if not owned or not controllers:
        return
    for name, (item, account) in sorted(owned.items()):
        where = (item.file, common.object_id(item.obj))
        if name in _IGNORED:
            env.add(
                *where, "contracts", f"ACK ignores namespace {name}: its resources stay in the controllers' account"
            )
            continue
        for release_ns in sorted({ns for _i, ns, _v in controllers}):
            data = maps.get(release_ns, (None, None))[1]
            error = (
                "CARM configmap not found"
                if data is None
                else "key not found in CARM configmap"
                if account not in data
                else "role value is empty in CARM configmap"
                if not data[account]
                else ""
            )
            if error:
                env.add(
                    *where,
                    "contracts",
                    f'its resources would never sync: retrieving role ARN for account/team ID "{account}" from "{MAP}" '
                    f"configmap: {error} (the ConfigMap {MAP} in {release_ns}, where the controllers run)",
                )
    for helm, _namespace, values in controllers:
        why = _carm_off(values)
        if why:
            env.add(
                helm.file,
                common.object_id(helm.obj),
                "contracts",
                "CARM is off ({}), so the resources of {} land in the controller's own account".format(
                    why, ", ".join(f"{n} (account {a})" for n, (_i, a) in sorted(owned.items()))
                ),
            )


def check_accounts(env):
    """The role-account map and the owner-annotated namespaces are what bootstrap.toml's accounts give, and each
    aws-workloads cluster's DBInstance is in a namespace of the account that lists the cluster.

    Upstream fact: ACK manages a resource in the account of its namespace's owner annotation, else in the
    controllers' own (the account listing mgmt-cluster); ack_accounts.py generates both from ack-role-arn.
    """
    controllers = list(_controllers(env))
    settings = env.settings
    if not controllers or not (settings and settings.accounts):
        return
    release_ns = controllers[0][1]
    expected = ack_accounts.objects(settings, env.name, release_ns)
    fix = "run scripts/ack-accounts --write"
    map_item, data = _role_maps(env).get(release_ns, (None, None))
    if data is None or {str(k): str(v) for k, v in data.items()} != expected[0]["data"]:
        env.add(
            map_item.file if map_item else ack_accounts.FILE.format(env=env.name),
            common.object_id(map_item.obj if map_item else expected[0]),
            "bootstrap",
            "{} is {}, bootstrap.toml's accounts (ack-role-arn) give {}: {}".format(
                MAP, "missing" if data is None else dict(sorted(data.items())), expected[0]["data"], fix
            ),
        )
    owned = _owned_namespaces(env)
    for namespace in expected[1:]:
        name, account = namespace["metadata"]["name"], namespace["metadata"]["annotations"][OWNER]
        if owned.get(name, (None, None))[1] != account:
            env.add(
                ack_accounts.FILE.format(env=env.name),
                common.object_id(namespace),
                "bootstrap",
                f"namespace {name} annotated {OWNER}: {account} is missing (bootstrap.toml maps account {account}): {fix}",
            )
    home, placed = ack_accounts.home_account(settings), ack_accounts.cluster_accounts(settings)
    instances = {
        str(i.spec.get("dbInstanceIdentifier")): i
        for i in env.items
        if i.kind == "DBInstance" and i.group == "rds.services.k8s.aws" and not i.fallback
    }
    for workload in settings.teardown.aws_workloads:
        cluster, item = workload.cluster_name, instances.get(str(workload.rds_instance))
        if cluster not in placed or item is None:
            continue
        owner = owned.get(item.namespace, (None, home))[1]
        managed = f"account {owner}" if owner else "the controllers' own account (no account lists mgmt-cluster)"
        if owner == placed[cluster]:
            continue
        target = ack_accounts.namespace_of(placed[cluster])
        if placed[cluster] not in dict(ack_accounts.mapped_accounts(settings)):
            message = (
                f"bootstrap.toml lists cluster {cluster} in account {placed[cluster]}, which has no ack-role-arn: ACK "
                f"manages its resources in {managed} (give the account an ack-role-arn, {fix} and put them in "
                f"namespace {target})"
            )
        else:
            message = (
                f"the DBInstance of cluster {cluster} is in namespace {item.namespace}, which ACK manages in {managed}, "
                f"but bootstrap.toml lists the cluster in account {placed[cluster]}: put the cluster's ACK resources "
                f"in namespace {target}"
            )
        common.flag(env, item, "bootstrap", message)
