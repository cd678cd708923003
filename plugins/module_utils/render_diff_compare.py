# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""render_diff's comparison of two revisions' states: objects added, changed (field by field) and removed per
Kustomization, the clusters and cloud resources touched, image and chart version changes, and the danger
findings (their tables are render_diff_rules.py). module_utils/render_diff.py renders the revisions and runs it.
"""

from __future__ import annotations

from ansible_collections.krops.platform.plugins.module_utils import capi
from ansible_collections.krops.platform.plugins.module_utils import paths
from ansible_collections.krops.platform.plugins.module_utils import cel as krops_cel
from ansible_collections.krops.platform.plugins.module_utils import render_diff_rules as rules
from ansible_collections.krops.platform.plugins.module_utils import validate
from ansible_collections.krops.platform.plugins.module_utils import validate_schema

# Version pins reported as "image and chart versions": (group, kind) -> field paths.
VERSION_FIELDS = {
    ("helm.toolkit.fluxcd.io", "HelmRelease"): ("spec.chart.spec.version",),
    ("addons.cluster.x-k8s.io", "HelmChartProxy"): ("spec.version",),
    ("source.toolkit.fluxcd.io", "OCIRepository"): ("spec.ref.tag", "spec.ref.semver", "spec.ref.digest"),
    ("fluxcd.controlplane.io", "FluxInstance"): ("spec.distribution.version",),
    ("cluster.x-k8s.io", "Cluster"): ("spec.topology.version",),
    ("controlplane.cluster.x-k8s.io", "KubeadmControlPlane"): ("spec.version",),
    ("cluster.x-k8s.io", "MachineDeployment"): ("spec.template.spec.version",),
}
for _kind in capi.PROVIDER_KINDS:
    VERSION_FIELDS[("operator.cluster.x-k8s.io", _kind)] = ("spec.version",)


def object_key(obj):
    meta = obj.get("metadata") or {}
    return (
        validate_schema.split_api_version(obj.get("apiVersion", ""))[0],
        obj.get("kind", ""),
        meta.get("namespace") or "",
        meta.get("name", ""),
    )


def label(key):
    group, kind, namespace, name = key
    return "{}/{}{}".format(kind, f"{namespace}/" if namespace else "", name)


def _get(obj, dotted):
    """Value at a path of _ANNOTATION-aware dotted keys (annotation keys contain dots and slashes)."""
    if dotted.startswith("metadata.annotations."):
        return ((obj.get("metadata") or {}).get("annotations") or {}).get(dotted[len("metadata.annotations.") :])
    return paths.dig(obj, *dotted.split("."))


def field_diff(old, new, path=""):
    """[(path, old, new)] of the leaves that differ (lists of named items are matched by name)."""
    if isinstance(old, dict) and isinstance(new, dict):
        changes = []
        for key in sorted(set(old) | set(new), key=str):
            sub = f"{path}.{key}" if path else str(key)
            changes.extend(field_diff(old.get(key, _ABSENT), new.get(key, _ABSENT), sub))
        return changes
    if isinstance(old, list) and isinstance(new, list):
        if _named(old) and _named(new):  # containers, env, ...: matched by name, not position
            olds, news = {i["name"]: i for i in old}, {i["name"]: i for i in new}
            return [
                c
                for name in _names(old, new)
                for c in field_diff(olds.get(name, _ABSENT), news.get(name, _ABSENT), f"{path}[{name}]")
            ]
        changes = []
        for index in range(max(len(old), len(new))):
            changes.extend(
                field_diff(
                    old[index] if index < len(old) else _ABSENT,
                    new[index] if index < len(new) else _ABSENT,
                    "%s[%d]" % (path, index),
                )
            )
        return changes
    if old == new:
        return []
    return [(path, None if old is _ABSENT else old, None if new is _ABSENT else new)]


class _Absent:
    def __repr__(self):
        return "(absent)"


_ABSENT = _Absent()


def _named(items):
    names = [i.get("name") for i in items if isinstance(i, dict)]
    return len(names) == len(items) and all(isinstance(n, str) for n in names) and len(set(names)) == len(names)


def _names(old, new):
    seen = []
    for item in list(old) + list(new):
        if item["name"] not in seen:
            seen.append(item["name"])
    return seen


def _masked(key, changes):
    """Secret values never reach a pull-request comment."""
    if key[1] != "Secret":
        return changes
    return [
        (p, "(hidden)" if o is not None else None, "(hidden)" if n is not None else None)
        if p.startswith(("data", "stringData"))
        else (p, o, n)
        for p, o, n in changes
        if not p.startswith("sops")
    ]


def _versions(obj):
    """{path: value} of images and version pins in one object."""
    found = {}
    group, kind = object_key(obj)[:2]
    for path in VERSION_FIELDS.get((group, kind), ()):
        value = _get(obj, path)
        if value is not None:
            found[path] = str(value)

    def walk(node, path):
        if isinstance(node, dict):
            for key, value in node.items():
                sub = f"{path}.{key}" if path else key
                if key == "image" and isinstance(value, str):
                    found[sub] = value
                elif key == "image" and isinstance(value, dict) and value.get("repository"):
                    found[sub] = "{}:{}".format(value.get("repository"), value.get("tag", ""))
                else:
                    walk(value, sub)
        elif isinstance(node, list):
            named = _named(node)  # same item names as field_diff: containers[app], not containers[0]
            for index, value in enumerate(node):
                walk(value, "{}[{}]".format(path, value["name"] if named else index))

    walk(obj.get("spec"), "spec")
    return found


def _cloud(key):
    for suffix, cloud in rules.CLOUD_GROUPS:
        if key[0] == suffix or key[0].endswith("." + suffix):
            return cloud
    return None


def _ownership(obj):
    """{(where, key): value} of krops ownership marks on labels and on the cloud tags of the spec."""
    marks = {}
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for key in rules.OWNERSHIP_KEYS:
        if key in labels:
            marks[("metadata.labels", key)] = labels[key]
        for field in rules.TAG_FIELDS:
            tags = _get(obj, field)
            if isinstance(tags, dict) and key in tags:
                marks[(field, key)] = tags[key]
            elif isinstance(tags, list):
                for tag in tags:
                    if isinstance(tag, dict) and tag.get("key") == key:
                        marks[(field, key)] = tag.get("value")
    return marks


def _clusters(entry):
    """Clusters an object touches: the one it is applied to and the one it describes."""
    touched = {entry.cluster}
    obj = entry.obj
    if entry.key[:2] == ("cluster.x-k8s.io", "Cluster"):
        touched.add(entry.key[3])
    name = ((obj.get("metadata") or {}).get("labels") or {}).get("cluster.x-k8s.io/cluster-name")
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    for value in (name, spec.get("clusterName")):
        if isinstance(value, str) and value:
            touched.add(value)
    return touched


class DiffFinding:
    __slots__ = ("acknowledged", "environment", "id", "kind", "kustomization", "message", "object")

    def __init__(self, kind, environment, kustomization, obj, message, ident=None):
        self.kind, self.environment, self.kustomization, self.object = kind, environment, kustomization, obj
        self.message = message
        self.id = ident or f"{environment}/{kind}/{obj}"
        self.acknowledged = False

    def as_dict(self):
        return {
            "id": self.id,
            "kind": self.kind,
            "environment": self.environment,
            "kustomization": self.kustomization,
            "object": self.object,
            "message": self.message,
            "acknowledged": self.acknowledged,
        }


def compare(base, head, store=None, cel=True):
    """Report of per-environment states ``base`` -> ``head``: environments and findings."""
    report_envs, findings, unevaluable = {}, [], []
    for env in sorted(set(base) | set(head)):
        report_envs[env] = _compare_env(env, base, head, store, cel, findings, unevaluable)
    return report_envs, findings, unevaluable


def _compare_env(env, base, head, store, cel, findings, unevaluable):
    """The report section of one environment; its findings and unevaluated rules are appended."""
    empty = {"objects": {}, "plaintext": set(), "render_failures": [], "failed": set(), "unapplied": set()}
    old_state, new_state = base.get(env) or empty, head.get(env) or empty
    old, new = old_state["objects"], new_state["objects"]
    section = {
        "present": {"base": env in base, "head": env in head},
        "kustomizations": {},
        "clusters": set(),
        "cloud_resources": [],
        "versions": [],
        "render_failures": {"base": old_state["render_failures"], "head": new_state["render_failures"]},
    }
    for failure in new_state["render_failures"]:
        findings.append(DiffFinding("render-failure", env, "-", failure["file"], failure["message"]))
    # What a directory that fails to render at either revision holds is unknown, not removed.
    unknown = old_state["failed"] | new_state["failed"]
    section["not_compared"] = sorted(unknown)
    section["not_applied"] = sorted(new_state["unapplied"])  # directories no Kustomization applies at head
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if (before and before.directory in unknown) or (after and after.directory in unknown):
            continue
        change = _compare_object(env, key, before, after, section, store, cel, findings, unevaluable)
        if change is not None:
            _touched(section, key, before, after, change)
    for rel, obj_label in sorted(new_state["plaintext"] - old_state["plaintext"]):
        findings.append(
            DiffFinding(
                "plaintext-secret",
                env,
                "-",
                obj_label,
                f"{rel} commits Secret {obj_label} unencrypted: encrypt it "
                "with sops into a *.sops.yaml file (and rotate the value, it is in Git history)",
            )
        )
    section["clusters"] = sorted(section["clusters"])
    return section


def _bucket(section, entry):
    return section["kustomizations"].setdefault(entry.kustomization, {"added": [], "changed": [], "removed": []})


def _compare_object(env, key, before, after, section, store, cel, findings, unevaluable):
    """Record one object's change in ``section``; returns "added", "removed", "changed" or None."""
    if before is None:
        _added(env, key, after, _bucket(section, after), findings)
        return "added"
    if after is None:
        _bucket(section, before)["removed"].append({"object": label(key), "file": before.file})
        what = _precious(key)
        if what:
            message = f"removes {what} {label(key)}: its controller deletes what it manages"
            _flag(findings, "removed", env, before, key, message)
        return "removed"
    change = None
    changes = field_diff(before.obj, after.obj)
    if changes:
        change = "changed"
        _bucket(section, after)["changed"].append(
            {
                "object": label(key),
                "file": after.file,
                "fields": [{"path": p, "base": o, "head": n} for p, o, n in _masked(key, changes)],
            }
        )
        _check_change(env, key, before, after, findings)
        if cel and store is not None:
            _transition_rules(env, key, before, after, store, findings, unevaluable)
    if before.kustomization != after.kustomization and _precious(key):
        message = (
            f"moves {label(key)} from Kustomization {before.kustomization} to {after.kustomization}: the old one prunes it before the new one "
            "creates it"
        )
        _flag(findings, "replaced", env, after, key, message)
    return change


def _transition_rules(env, key, before, after, store, findings, unevaluable):
    """The transition (oldSelf) CEL rules of a changed object: a broken one is a finding."""
    if before.obj.get("apiVersion") != after.obj.get("apiVersion"):
        # The server converts the old object to the new version first; krops cannot.
        unevaluable.append(
            {
                "environment": env,
                "object": label(key),
                "message": (
                    "transition rules not evaluated: apiVersion changes from {} to {}".format(
                        before.obj.get("apiVersion"), after.obj.get("apiVersion")
                    )
                ),
            }
        )
        return
    for result in krops_cel.check(after.obj, store, old=before.obj, transition_only=True):
        if result.outcome == krops_cel.UNEVALUABLE:
            unevaluable.append({"environment": env, "object": label(key), "message": result.text()})
        else:
            message = f"the API server rejects this update: {result.text()}"
            ident = "{}/transition-rule/{}/{}".format(env, label(key), result.path or "(root)")
            _flag(findings, "transition-rule", env, after, key, message, ident)


def _touched(section, key, before, after, change):
    """The clusters, cloud resources and versions an object's change touches."""
    section["clusters"].update(_clusters(after or before))
    cloud = _cloud(key)
    if cloud:
        section["cloud_resources"].append({"cloud": cloud, "object": label(key), "change": change})
    old_versions = _versions(before.obj) if before else {}
    new_versions = _versions(after.obj) if after else {}
    for path in sorted(set(old_versions) | set(new_versions)):
        if old_versions.get(path) != new_versions.get(path):
            section["versions"].append(
                {
                    "object": label(key),
                    "path": path,
                    "base": old_versions.get(path),
                    "head": new_versions.get(path),
                }
            )


def _flag(findings, kind, env, entry, key, message, ident=None):
    """A finding on the object ``key``, in the Kustomization that applies ``entry`` (its state at one revision)."""
    findings.append(DiffFinding(kind, env, entry.kustomization, label(key), message, ident=ident))


def _precious(key):
    return rules.PRECIOUS.get(key[:2])


def _added(env, key, after, kustomization, findings):
    kustomization["added"].append({"object": label(key), "file": after.file})
    _crossplane(env, key, None, after, findings)


def _crossplane(env, key, before, after, findings):
    for kind, message in rules.crossplane_dangers(label(key), before and before.obj, after.obj):
        _flag(findings, kind, env, after, key, message)


def _check_change(env, key, before, after, findings):
    _crossplane(env, key, before, after, findings)
    group_kind = key[:2]
    for path in rules.IDENTITY_FIELDS.get(group_kind, ()):
        old_value, new_value = _get(before.obj, path), _get(after.obj, path)
        if old_value != new_value and old_value is not None:
            message = (
                f"changes {path} of {rules.PRECIOUS.get(group_kind, key[1])} {label(key)}: the operator "
                "creates a new resource and leaves or deletes the old one"
            )
            _flag(findings, "replaced", env, after, key, message)
    for kind, path in rules.POLICIES:
        path, _at, only = path.partition("@")
        if only and "{}/{}".format(*group_kind) != only:
            continue
        old_value, new_value = _get(before.obj, path), _get(after.obj, path)
        if old_value != new_value:
            message = "{} {}: {} -> {}".format(
                label(key),
                path.replace("metadata.annotations.", "annotation "),
                _shown(old_value),
                _shown(new_value),
            )
            ident = "{}/{}/{}/{}".format(
                env,
                kind,
                label(key),
                path.rsplit(".", 1)[-1] if "annotations" not in path else path[len("metadata.annotations.") :],
            )
            _flag(findings, kind, env, after, key, message, ident)
    if (
        group_kind == (validate.FLUX_KS, "Kustomization")
        and (after.obj.get("spec") or {}).get("prune") is True
        and (before.obj.get("spec") or {}).get("prune") is not True
    ):
        message = f"turns prune on for {label(key)}: objects that leave its path are deleted from the cluster"
        _flag(findings, "prune-enabled", env, after, key, message)
    if _cloud(key):
        old_marks, new_marks = _ownership(before.obj), _ownership(after.obj)
        lost = sorted(k for k in old_marks if new_marks.get(k) != old_marks[k])
        if lost:
            message = (
                "drops the krops ownership mark "
                "{} from cloud resource {}: teardown and the orphan sweep can no longer prove krops owns it".format(
                    ", ".join(f"{where} {mark}" for where, mark in lost), label(key)
                )
            )
            _flag(findings, "ownership-dropped", env, after, key, message)


def _shown(value):
    return "(unset)" if value is None else str(value)
