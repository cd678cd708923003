# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""kubeconfig export and merge, written once: the exported context renamed (``render_kubeconfig``), merged
into an existing file as ``kind export kubeconfig`` merges (``merge_kubeconfig``), and written 0600
(``write_kubeconfig``). capi_pivot, kind_cluster and the render_kubeconfig filter use it.
"""

from __future__ import annotations

import copy
import os

try:
    import yaml
except ImportError:  # pragma: no cover - PyYAML ships with ansible-core
    yaml = None

from ansible_collections.krops.platform.plugins.module_utils.kube import KubeError, write_private


def render_kubeconfig(raw, context, server=None):
    """A kubeconfig (text) of ``raw``'s current context, its context, cluster and user all renamed to
    ``context`` (so that merging it touches only entries of that name), the server rewritten when given.
    KubeError when raw is not a kubeconfig with clusters, contexts and users.
    """
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError:
        data = None
    if not isinstance(data, dict) or not data.get("contexts") or not data.get("clusters"):
        raise KubeError("the kubeconfig does not hold clusters and contexts")
    current = data.get("current-context")
    entry = next((c for c in data["contexts"] if c.get("name") == current), data["contexts"][0])
    ctx = dict(entry.get("context") or {})
    cluster = next((c for c in data["clusters"] if c.get("name") == ctx.get("cluster")), None)
    if cluster is None and len(data["clusters"]) == 1:
        cluster = data["clusters"][0]
    user = next((u for u in data.get("users") or [] if u.get("name") == ctx.get("user")), None)
    if cluster is None or user is None:
        raise KubeError(
            "the kubeconfig's context {} does not name one of its clusters and users".format(entry.get("name"))
        )
    cluster = copy.deepcopy(cluster)
    cluster["name"] = context
    if server:
        cluster.setdefault("cluster", {})["server"] = server
    user = dict(copy.deepcopy(user), name=context)
    ctx.update(cluster=context, user=context)
    out = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [user],
        "contexts": [{"name": context, "context": ctx}],
        "current-context": context,
    }
    return yaml.safe_dump(out, sort_keys=False)


def merge_kubeconfig(existing, exported, switch_context=False, option="path"):
    """Text of kubeconfig ``existing`` (text or None) with the clusters, users and contexts of ``exported``
    merged in as ``kind export kubeconfig`` merges them (kind v0.32.0
    pkg/cluster/internal/kubeconfig/internal/kubeconfig/merge.go): an entry of the same name is replaced
    where it stands, a new one is appended; every other entry and the preferences survive.

    The current context becomes ``exported``'s when ``switch_context`` (kind's behaviour, which kind_cluster
    keeps); otherwise it is set only when there was none, so that krops writing its management context
    into a user's ~/.kube/config never redirects their kubectl (capi_pivot). KubeError naming ``option``
    (the option that chose the file) when ``existing`` is not a kubeconfig.
    """
    new = yaml.safe_load(exported) or {}
    try:
        base = yaml.safe_load(existing) if existing else None
    except yaml.YAMLError as exc:
        raise KubeError(
            f"the existing kubeconfig is not YAML ({str(exc).splitlines()[0]}); move it away or choose another {option}"
        )
    if base is None:
        return yaml.safe_dump(new, sort_keys=False)
    if not isinstance(base, dict):
        raise KubeError(
            f"the existing kubeconfig is not a kubeconfig (not a mapping); move it away or choose another {option}"
        )
    merged = copy.deepcopy(base)
    merged.setdefault("apiVersion", "v1")
    merged.setdefault("kind", "Config")
    for section in ("clusters", "users", "contexts"):
        entries = [e for e in (merged.get(section) or []) if isinstance(e, dict)]
        for entry in new.get(section) or []:
            places = [i for i, old in enumerate(entries) if old.get("name") == entry.get("name")]
            for index in places:
                entries[index] = entry
            if not places:
                entries.append(entry)
        merged[section] = entries
    if new.get("current-context") and (switch_context or not merged.get("current-context")):
        merged["current-context"] = new["current-context"]
    return yaml.safe_dump(merged, sort_keys=False)


def write_kubeconfig(path, exported, check_mode=False, switch_context=False, option="path"):
    """Merge an exported kubeconfig into ``path`` (merge_kubeconfig; created 0600 when missing, an existing
    file keeps its other contexts and becomes 0600). True when the file changed (or would change, in check
    mode)."""
    path = os.path.expanduser(path)
    try:
        with open(path, encoding="utf-8") as handle:
            existing = handle.read()
    except FileNotFoundError:
        existing = None
    except OSError as exc:
        raise KubeError(f"cannot read the kubeconfig {path}: {exc.strerror}")
    text = merge_kubeconfig(existing, exported, switch_context, option)
    if check_mode:
        return existing is None or text != existing or (os.stat(path).st_mode & 0o777) != 0o600
    try:
        return write_private(path, text)
    except OSError as exc:
        raise KubeError(f"cannot write the kubeconfig {path}: {exc.strerror}")
