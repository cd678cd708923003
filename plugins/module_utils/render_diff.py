# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""render_diff: what a pull request would change on the clusters, rendered at two Git revisions.

Both revisions are extracted from Git (never the work tree) and rendered by validate's own tree
walk (``validate.run`` with a ``collect`` hook): every environment folder present, every
kustomization directory, Flux postBuild substitution and ResourceSet expansion. The objects of
the two revisions are compared per environment and per Flux Kustomization (the one whose
``spec.path`` applies the directory); the report names added, changed (field by field) and
removed objects, the clusters and cloud resources touched, image and chart version changes,
render failures, the transition (``oldSelf``) CEL rules the change breaks, and danger findings.

A finding blocks (exit 1) unless acknowledged: its id listed in an accept file, or the accept
label given among the pull request's labels. Output: Markdown for one pull-request comment
(found again by :data:`MARKER`), JSON, or text.

Importable without Ansible; ``python -m ...render_diff --help`` runs it from CI.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import time

from ansible_collections.krops.platform.plugins.module_utils import cel as krops_cel
from ansible_collections.krops.platform.plugins.module_utils import cli
from ansible_collections.krops.platform.plugins.module_utils import errors
from ansible_collections.krops.platform.plugins.module_utils import render
from ansible_collections.krops.platform.plugins.module_utils import render_diff_rules as rules
from ansible_collections.krops.platform.plugins.module_utils import validate
from ansible_collections.krops.platform.plugins.module_utils import validate_schema

MARKER = "<!-- krops-render-diff -->"
DEFAULT_ACCEPT_LABEL = "render-diff/accept"
COMMENT_LIMIT = 60000  # GitHub rejects comments over 65536 characters

# The danger rules' tables (module_utils/render_diff_rules.py).
PRECIOUS, IDENTITY_FIELDS, POLICIES = rules.PRECIOUS, rules.IDENTITY_FIELDS, rules.POLICIES
CLOUD_GROUPS, OWNERSHIP_KEYS, TAG_FIELDS = rules.CLOUD_GROUPS, rules.OWNERSHIP_KEYS, rules.TAG_FIELDS
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
for _kind in validate.PROVIDER_KINDS:
    VERSION_FIELDS[("operator.cluster.x-k8s.io", _kind)] = ("spec.version",)


class RenderDiffError(errors.ValidationError):
    """render_diff cannot run (not a Git repository, unknown revision, bad accept file)."""


# --- revisions ---------------------------------------------------------------------------


def _git(environ=None):
    return cli.Cli("git", environ=environ)


def _run_git(args, environ=None):
    try:
        return _git(environ).run(args, check=False)
    except cli.CliError as exc:  # git missing or not runnable
        raise RenderDiffError(exc.message)


def resolve(repo, revision):
    """Full commit id of ``revision``; RenderDiffError naming it when Git does not know it."""
    if not revision or revision.startswith("-"):
        raise RenderDiffError(f"revision {revision!r} is not a branch, tag or commit name")
    if _run_git(["-C", repo, "rev-parse", "--git-dir"]).rc != 0:
        raise RenderDiffError(
            f"{repo} is not a Git repository (render_diff compares commits: give the repository's folder)"
        )
    out = _run_git(["-C", repo, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"])
    if out.rc != 0 or not out.stdout.strip():
        raise RenderDiffError(
            f"revision {revision} is not a commit of the Git repository {repo} (fetch it, e.g. "
            "actions/checkout with fetch-depth: 0)"
        )
    return out.stdout.strip()


def merge_base(repo, base, head):
    out = _run_git(["-C", repo, "merge-base", base, head])
    if out.rc != 0 or not out.stdout.strip():
        raise RenderDiffError(f"revisions {base} and {head} have no merge base")
    return out.stdout.strip()


def extract(repo, sha, dest):
    """The tree of commit ``sha`` into folder ``dest`` (a private index: the work tree is untouched)."""
    os.makedirs(dest, exist_ok=True)
    env = dict(os.environ, GIT_INDEX_FILE=dest + ".index")
    git = _git(environ=env)
    try:
        git.run(["-C", repo, "read-tree", sha])
        git.run(["-C", repo, "checkout-index", "--all", "--force", f"--prefix={os.path.abspath(dest)}{os.sep}"])
    except cli.CliError as exc:
        raise RenderDiffError(f"cannot extract {sha}: {exc.message}")
    finally:
        try:
            os.unlink(dest + ".index")
        except OSError:
            pass


# --- one revision ------------------------------------------------------------------------


class _Obj:
    __slots__ = ("cluster", "directory", "file", "key", "kustomization", "obj", "virtual")

    def __init__(self, key, obj, kustomization, file, virtual, cluster, directory):
        self.key, self.obj, self.kustomization, self.file = key, obj, kustomization, file
        self.virtual, self.cluster, self.directory = virtual, cluster, directory


def _key(obj):
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


def _collect_env(env, out):
    """validate's per-environment state -> objects keyed by identity, attributed to what applies them.

    A directory is applied by the Flux Kustomization whose spec.path it is (the sync path by the
    bootstrap's flux-system one), or by a FluxInstance whose spec.sync.path it is (on the cluster
    that FluxInstance runs in). Objects of a directory nothing applies are not deployed: they are
    left out (and listed), so a Kustomization removed from the tree shows its objects as removed.
    """
    settings = env.settings
    mgmt_cluster = settings.mgmt_cluster if settings else "(management cluster)"
    owners = {
        validate._norm_path(settings.sync_path if settings else f"mgmt/{env.name}"): (
            "flux-system/flux-system",
            mgmt_cluster,
        )
    }
    for ks in env.items:
        if ks.kind == "Kustomization" and ks.group == validate.FLUX_KS and ks.spec.get("path"):
            secret = ((ks.spec.get("kubeConfig") or {}).get("secretRef") or {}).get("name") or ""
            target = secret[: -len("-kubeconfig")] if secret.endswith("-kubeconfig") else (secret or mgmt_cluster)
            owners.setdefault(validate._norm_path(ks.spec.get("path")), (f"{ks.namespace}/{ks.name}", target))
    for fi in env.items:
        path = (
            (fi.spec.get("sync") or {}).get("path")
            if fi.kind == "FluxInstance" and fi.group == "fluxcd.controlplane.io"
            else None
        )
        if path and fi.directory in owners:
            owners.setdefault(
                validate._norm_path(path), (f"FluxInstance {fi.namespace}/{fi.name}", owners[fi.directory][1])
            )
    objects, unapplied = {}, set()
    for item in env.items:
        if item.fallback:
            continue
        owner = owners.get(item.directory)
        if owner is None:
            unapplied.add(item.directory)
            continue
        key = _key(item.obj)
        objects.setdefault(key, _Obj(key, item.obj, owner[0], item.file, item.virtual, owner[1], item.directory))
    plaintext = set()
    for rel, doc in env.raw_docs:
        if (
            doc.get("kind") == "Secret"
            and not rel.endswith((".sops.yaml", ".sops.yml"))
            and not isinstance(doc.get("sops"), dict)
        ):
            plaintext.add((rel, label(_key(doc))))
    for item in env.items:
        if (
            item.kind == "Secret"
            and not item.virtual
            and not isinstance(item.obj.get("sops"), dict)
            and (item.obj.get("data") or item.obj.get("stringData"))
        ):
            plaintext.add((item.file, label(_key(item.obj))))
    renders = [f for f in env.findings if f.rule == "render"]
    out[env.name] = {
        "objects": objects,
        "plaintext": plaintext,
        "failed": {os.path.dirname(f.file) for f in renders},
        "unapplied": unapplied,
        "render_failures": [{"file": f.file, "message": f.message} for f in renders],
    }


def render_revision(root, environments=None, schema_location=None, renderer=None):
    """{environment: state} of the tree at folder ``root``; a revision that cannot run at all raises."""
    states = {}
    present = validate.environments_present(root)
    wanted = [e for e in (environments or present) if e in present]
    if not wanted:
        return states
    try:
        validate.run(
            root,
            environments=wanted,
            schema_location=schema_location,
            renderer=renderer,
            cel=False,
            collect=lambda env: _collect_env(env, states),
        )
    except validate.ValidateError as exc:
        raise RenderDiffError(str(exc))
    return states


# --- comparing ---------------------------------------------------------------------------


def _get(obj, dotted):
    """Value at a path of _ANNOTATION-aware dotted keys (annotation keys contain dots and slashes)."""
    if dotted.startswith("metadata.annotations."):
        return ((obj.get("metadata") or {}).get("annotations") or {}).get(dotted[len("metadata.annotations.") :])
    value = obj
    for part in dotted.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


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
    group, kind = _key(obj)[:2]
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
    for suffix, cloud in CLOUD_GROUPS:
        if key[0] == suffix or key[0].endswith("." + suffix):
            return cloud
    return None


def _ownership(obj):
    """{(where, key): value} of krops ownership marks on labels and on the cloud tags of the spec."""
    marks = {}
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for key in OWNERSHIP_KEYS:
        if key in labels:
            marks[("metadata.labels", key)] = labels[key]
        for field in TAG_FIELDS:
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

        def bucket(entry):  # called within this iteration only
            return section["kustomizations"].setdefault(  # noqa: B023
                entry.kustomization, {"added": [], "changed": [], "removed": []}
            )

        # What a directory that fails to render at either revision holds is unknown, not removed.
        unknown = old_state["failed"] | new_state["failed"]
        section["not_compared"] = sorted(unknown)
        section["not_applied"] = sorted(new_state["unapplied"])  # directories no Kustomization applies at head
        for key in sorted(set(old) | set(new)):
            before, after = old.get(key), new.get(key)
            entry = after or before
            if (before and before.directory in unknown) or (after and after.directory in unknown):
                continue
            change = None
            if before is None:
                _added(env, key, after, bucket(after), findings)
                change = "added"
            elif after is None:
                bucket(before)["removed"].append({"object": label(key), "file": before.file})
                change = "removed"
                what = _precious(key)
                if what:
                    findings.append(
                        DiffFinding(
                            "removed",
                            env,
                            before.kustomization,
                            label(key),
                            f"removes {what} {label(key)}: its controller deletes what it manages",
                        )
                    )
            else:
                changes = field_diff(before.obj, after.obj)
                if changes:
                    change = "changed"
                    bucket(after)["changed"].append(
                        {
                            "object": label(key),
                            "file": after.file,
                            "fields": [{"path": p, "base": o, "head": n} for p, o, n in _masked(key, changes)],
                        }
                    )
                    _check_change(env, key, before, after, findings)
                    if cel and store is not None and before.obj.get("apiVersion") != after.obj.get("apiVersion"):
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
                    elif cel and store is not None:
                        for result in krops_cel.check(after.obj, store, old=before.obj, transition_only=True):
                            if result.outcome == krops_cel.UNEVALUABLE:
                                unevaluable.append({"environment": env, "object": label(key), "message": result.text()})
                            else:
                                findings.append(
                                    DiffFinding(
                                        "transition-rule",
                                        env,
                                        after.kustomization,
                                        label(key),
                                        f"the API server rejects this update: {result.text()}",
                                        ident="{}/transition-rule/{}/{}".format(
                                            env, label(key), result.path or "(root)"
                                        ),
                                    )
                                )
                if before.kustomization != after.kustomization and _precious(key):
                    findings.append(
                        DiffFinding(
                            "replaced",
                            env,
                            after.kustomization,
                            label(key),
                            f"moves {label(key)} from Kustomization {before.kustomization} to {after.kustomization}: the old one prunes it before the new one "
                            "creates it",
                        )
                    )
            if change is None:
                continue
            section["clusters"].update(_clusters(entry))
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
        report_envs[env] = section
    return report_envs, findings, unevaluable


def _precious(key):
    return PRECIOUS.get(key[:2])


def _added(env, key, after, kustomization, findings):
    kustomization["added"].append({"object": label(key), "file": after.file})
    _crossplane(env, key, None, after, findings)


def _crossplane(env, key, before, after, findings):
    for kind, message in rules.crossplane_dangers(label(key), before and before.obj, after.obj):
        findings.append(DiffFinding(kind, env, after.kustomization, label(key), message))


def _check_change(env, key, before, after, findings):
    _crossplane(env, key, before, after, findings)
    group_kind = key[:2]
    for path in IDENTITY_FIELDS.get(group_kind, ()):
        old_value, new_value = _get(before.obj, path), _get(after.obj, path)
        if old_value != new_value and old_value is not None:
            findings.append(
                DiffFinding(
                    "replaced",
                    env,
                    after.kustomization,
                    label(key),
                    f"changes {path} of {PRECIOUS.get(group_kind, key[1])} {label(key)}: the operator "
                    "creates a new resource and leaves or deletes the old one",
                )
            )
    for kind, path in POLICIES:
        path, _at, only = path.partition("@")
        if only and "{}/{}".format(*group_kind) != only:
            continue
        old_value, new_value = _get(before.obj, path), _get(after.obj, path)
        if old_value != new_value:
            findings.append(
                DiffFinding(
                    kind,
                    env,
                    after.kustomization,
                    label(key),
                    "{} {}: {} -> {}".format(
                        label(key),
                        path.replace("metadata.annotations.", "annotation "),
                        _shown(old_value),
                        _shown(new_value),
                    ),
                    ident="{}/{}/{}/{}".format(
                        env,
                        kind,
                        label(key),
                        path.rsplit(".", 1)[-1] if "annotations" not in path else path[len("metadata.annotations.") :],
                    ),
                )
            )
    if (
        group_kind == (validate.FLUX_KS, "Kustomization")
        and (after.obj.get("spec") or {}).get("prune") is True
        and (before.obj.get("spec") or {}).get("prune") is not True
    ):
        findings.append(
            DiffFinding(
                "prune-enabled",
                env,
                after.kustomization,
                label(key),
                f"turns prune on for {label(key)}: objects that leave its path are deleted from the cluster",
            )
        )
    if _cloud(key):
        old_marks, new_marks = _ownership(before.obj), _ownership(after.obj)
        lost = sorted(k for k in old_marks if new_marks.get(k) != old_marks[k])
        if lost:
            findings.append(
                DiffFinding(
                    "ownership-dropped",
                    env,
                    after.kustomization,
                    label(key),
                    "drops the krops ownership mark "
                    "{} from cloud resource {}: teardown and the orphan sweep can no longer prove krops owns it".format(
                        ", ".join(f"{where} {mark}" for where, mark in lost), label(key)
                    ),
                )
            )


def _shown(value):
    return "(unset)" if value is None else str(value)


# --- acknowledgement ---------------------------------------------------------------------


# What a finding id looks like (DiffFinding.id): <environment>/<kind>/<object>, or <base|head>/render-failure.
# An accept-file line is taken only when it has this shape; any other line is reported by its number,
# never by its content (the file may be anything: /proc/self/environ, a key).
FINDING_KINDS = (
    "removed",
    "replaced",
    "transition-rule",
    "plaintext-secret",
    "prune-enabled",
    "ownership-dropped",
    "render-failure",
    "deletion-policy",
    "reconcile-policy",
    "adoption-policy",
    "deletes-data",
    "management-policies",
)
FINDING_ID = re.compile(
    r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?/(?:%s)(?:/[A-Za-z0-9._:@-]*){0,8}$" % "|".join(FINDING_KINDS)
)
MAX_ACCEPT_BYTES = 64 * 1024


def _accept_lines(text, where):
    ids = []
    for number, line in enumerate(text.splitlines(), 1):
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        if len(entry) > 512 or not FINDING_ID.match(entry):
            raise RenderDiffError(
                "%s line %d is not a finding id (exact ids <environment>/<kind>/<object> such as "
                "local-host/removed/Bucket/default/data; no patterns); the line is not shown" % (where, number)
            )
        ids.append((entry, number))
    return ids


def read_accept_file(path, repo=None):
    """[(finding id, line number)], one per line ('#' starts a comment). Exact ids only: no patterns.

    The file must be a regular file inside ``repo`` (by realpath), never a symbolic link.
    """
    if not path:
        return []
    where = f"accept file {path}"
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise RenderDiffError(f"{where} cannot be read: {exc.strerror}")
    if stat.S_ISLNK(st.st_mode):
        raise RenderDiffError(f"{where} is a symbolic link: give the file itself, inside the repository")
    if not stat.S_ISREG(st.st_mode):
        raise RenderDiffError(f"{where} is not a regular file")
    if repo:
        top = os.path.realpath(repo)
        real = os.path.realpath(path)
        if real != top and not real.startswith(top + os.sep):
            raise RenderDiffError(f"{where} is outside the repository {top}: keep it in the repository")
    if st.st_size > MAX_ACCEPT_BYTES:
        raise RenderDiffError(f"{where} has {st.st_size} bytes, more than {MAX_ACCEPT_BYTES}")
    try:
        with open(path, "rb") as handle:
            text = handle.read(MAX_ACCEPT_BYTES + 1).decode("utf-8")
    except OSError as exc:
        raise RenderDiffError(f"{where} cannot be read: {exc.strerror}")
    except UnicodeDecodeError:
        raise RenderDiffError(f"{where} is not UTF-8 text")
    return _accept_lines(text, where)


def read_accept_blob(repo, revision, path):
    """read_accept_file for ``path`` as committed at ``revision`` (the base branch: a pull request cannot change
    what acknowledges it). Absent is no acknowledgement; a symbolic link or anything but a file is refused."""
    sha = resolve(repo, revision)
    proc = _run_git(["-C", repo, "ls-tree", "-z", sha, "--", path])
    entry = (proc.stdout or "").split("\0", 1)[0]
    if not entry:
        return []
    mode, kind, oid = entry.split("\t", 1)[0].split(" ")
    where = f"accept file {path} at {sha[:12]}"
    if kind != "blob" or mode not in ("100644", "100755"):
        raise RenderDiffError(f"{where} is not a regular file (mode {mode}): a symbolic link is never followed")
    blob = _run_git(["-C", repo, "cat-file", "blob", oid])
    if blob.rc != 0:
        raise RenderDiffError(f"{where} cannot be read")
    if len(blob.stdout.encode("utf-8")) > MAX_ACCEPT_BYTES:
        raise RenderDiffError(f"{where} is larger than {MAX_ACCEPT_BYTES} bytes")
    return _accept_lines(blob.stdout, where)


def acknowledge(findings, accepted, labels, accept_label):
    """accepted: [(id, line number)]. Returns (stale entries as "line N", by_label): a stale id is named by
    its line, never echoed."""
    by_label = bool(accept_label) and accept_label in (labels or [])
    known = {f.id for f in findings}
    ids = {entry for entry, dummy in accepted}
    for finding in findings:
        finding.acknowledged = by_label or finding.id in ids
    return [f"line {number}" for entry, number in accepted if entry not in known], by_label


# --- entry point -------------------------------------------------------------------------


def run(
    repo,
    base,
    head="HEAD",
    use_merge_base=True,
    environments=None,
    schema_location=None,
    accept_file=None,
    labels=None,
    accept_label=DEFAULT_ACCEPT_LABEL,
    cel=True,
    renderer=None,
    accept_from_base=None,
    deadline=None,
    memory=None,
):
    """The report (dict) of what changes from ``base`` to ``head`` in the Git repository ``repo``.

    ``accept_from_base``: the accept file's path as committed at ``base`` (the workflow's way).
    ``deadline`` (s, default 300) and ``memory`` (bytes per kustomize run) bound the run (render.bounded).
    """
    try:
        with render.bounded("render_diff", deadline, memory):
            return _run(
                repo,
                base,
                head,
                use_merge_base,
                environments,
                schema_location,
                accept_file,
                labels,
                accept_label,
                cel,
                renderer,
                accept_from_base,
            )
    except render.DeadlineExceeded as exc:
        raise RenderDiffError(str(exc)) from None


def _run(
    repo,
    base,
    head,
    use_merge_base,
    environments,
    schema_location,
    accept_file,
    labels,
    accept_label,
    cel,
    renderer,
    accept_from_base,
):
    started = time.monotonic()
    repo = os.path.abspath(os.path.expanduser(repo or os.getcwd()))
    if not os.path.isdir(repo):
        raise RenderDiffError(f"repository {repo} does not exist")
    accepted = read_accept_file(accept_file, repo)
    head_sha = resolve(repo, head)
    base_sha = resolve(repo, base)
    if accept_from_base:
        accepted += read_accept_blob(repo, base_sha, accept_from_base)
    if use_merge_base:
        base_sha = merge_base(repo, base_sha, head_sha)
    work = tempfile.mkdtemp(prefix="krops-render-diff-")
    timings = {}
    try:
        states, errors = {}, {}
        # render_diff uses validate's rendering, not its schema findings: an empty schema folder
        # keeps a revision without schemas renderable and skips the JSON-schema work.
        no_schemas = os.path.join(work, "no-schemas")
        os.makedirs(no_schemas)
        for name, sha in (("base", base_sha), ("head", head_sha)):
            t0 = time.monotonic()
            root = os.path.join(work, name)
            extract(repo, sha, root)
            try:
                states[name] = render_revision(root, environments, no_schemas, renderer)
            except RenderDiffError as exc:
                states[name], errors[name] = {}, str(exc)
            timings[f"render_{name}"] = round(time.monotonic() - t0, 3)
        t0 = time.monotonic()
        store, no_store = None, None
        if cel:
            location = (
                schema_location or os.environ.get("KROPS_SCHEMA_LOCATION") or validate_schema.DEFAULT_SCHEMA_LOCATION
            )
            try:
                store = validate_schema.SchemaStore(location, base_dir=os.path.join(work, "head"))
            except validate_schema.SchemaError as exc:  # listed: the transition rules were not checked
                no_store = {"environment": "-", "object": "-", "message": f"transition rules not evaluated: {exc}"}
        envs, findings, unevaluable = compare(states["base"], states["head"], store, cel)
        if no_store:
            unevaluable.insert(0, no_store)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    unique = {}
    for finding in findings:  # one object can be "replaced" for two reasons: one finding per id
        unique.setdefault(finding.id, finding)
    findings = sorted(unique.values(), key=lambda f: f.id)
    for name, message in sorted(errors.items(), reverse=True):
        findings.insert(
            0,
            DiffFinding(
                "render-failure",
                "-",
                "-",
                name,
                f"the tree at the {name} revision cannot be rendered: {message}",
                ident=f"{name}/render-failure",
            ),
        )
    stale, by_label = acknowledge(findings, accepted, labels, accept_label)
    timings["diff"] = round(time.monotonic() - t0, 3)
    timings["total"] = round(time.monotonic() - started, 3)
    blocking = [f for f in findings if not f.acknowledged]
    return {
        "base": base_sha,
        "head": head_sha,
        "environments": envs,
        "findings": [f.as_dict() for f in findings],
        "blocking": len(blocking),
        "acknowledged_by_label": by_label,
        "stale_acknowledgements": stale,
        "cel_unevaluable": unevaluable,
        "seconds": timings,
    }


# --- output ------------------------------------------------------------------------------


def _value(value):
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= 120 else text[:117] + "..."


def markdown(report):
    lines = [MARKER, "## krops render diff `{}` → `{}`".format(report["base"][:12], report["head"][:12]), ""]
    findings = report["findings"]
    if report["blocking"]:
        lines.append(
            "**%d blocking finding(s).** Fix them, or acknowledge each id in the accept file, or add the "
            "accept label." % report["blocking"]
        )
    elif findings:
        lines.append(
            "All %d finding(s) acknowledged%s."
            % (len(findings), " by label" if report["acknowledged_by_label"] else "")
        )
    else:
        lines.append("No danger findings.")
    if findings:
        lines += ["", "| | finding id | what |", "|---|---|---|"]
        for f in findings:
            mark = "✅ acknowledged" if f["acknowledged"] else "❌"
            lines.append("| {} | `{}` | {} |".format(mark, f["id"], f["message"].replace("|", "\\|")))
    for stale in report["stale_acknowledgements"]:
        lines.append(f"- accept file {stale} matches no finding")
    if report["cel_unevaluable"]:
        lines += ["", "CEL rules not evaluated (check them by hand):"]
        lines += ["- {} {}: {}".format(u["environment"], u["object"], u["message"]) for u in report["cel_unevaluable"]]
    for env, section in report["environments"].items():
        lines += ["", f"### {env}"]
        if not section["present"]["head"]:
            lines.append("Environment removed by this change.")
        elif not section["present"]["base"]:
            lines.append("Environment added by this change.")
        changed = any(b[k] for b in section["kustomizations"].values() for k in ("added", "changed", "removed"))
        if not changed:
            lines.append("No object changes.")
        lines.append("Clusters touched: %s" % (", ".join(section["clusters"]) or "none"))
        if section["cloud_resources"]:
            lines.append(
                "Cloud resources touched: {}".format(
                    ", ".join(
                        "{} {} ({})".format(c["cloud"], c["object"], c["change"]) for c in section["cloud_resources"]
                    )
                )
            )
        for when in ("base", "head"):
            for failure in section["render_failures"][when]:
                lines.append("- render failure at {}: `{}`: {}".format(when, failure["file"], failure["message"]))
        if section["not_applied"]:
            lines.append(
                "Not applied by any Flux Kustomization or FluxInstance: {}".format(
                    ", ".join(f"`{d}`" for d in section["not_applied"])
                )
            )
        if section["not_compared"]:
            lines.append(
                "Not compared (a render failed): {}".format(", ".join(f"`{d}`" for d in section["not_compared"]))
            )
        if section["versions"]:
            lines += ["", "| object | field | base | head |", "|---|---|---|---|"]
            lines += [
                "| {} | `{}` | {} | {} |".format(v["object"], v["path"], v["base"] or "—", v["head"] or "—")
                for v in section["versions"]
            ]
        for ks, bucket in sorted(section["kustomizations"].items()):
            lines += ["", f"#### Kustomization {ks}"]
            for what in ("added", "removed"):
                lines += ["- {} `{}`".format(what, o["object"]) for o in bucket[what]]
            for obj in bucket["changed"]:
                lines.append("- changed `{}`".format(obj["object"]))
                lines.append("  <details><summary>%d field(s)</summary>\n" % len(obj["fields"]))
                lines.append("  ```diff")
                for field in obj["fields"]:
                    if field["base"] is not None:
                        lines.append("  - {}: {}".format(field["path"], _value(field["base"])))
                    if field["head"] is not None:
                        lines.append("  + {}: {}".format(field["path"], _value(field["head"])))
                lines += ["  ```", "  </details>"]
    text = "\n".join(lines) + "\n"
    if len(text) > COMMENT_LIMIT:
        text = text[:COMMENT_LIMIT] + "\n\n… truncated: the full report is in the job's JSON artifact.\n"
    return text


def text_lines(report):
    lines = [
        "{} {}: {}".format("ACK " if f["acknowledged"] else "FAIL", f["id"], f["message"]) for f in report["findings"]
    ]
    for env, section in report["environments"].items():
        counts = {
            k: sum(len(b[k]) for b in section["kustomizations"].values()) for k in ("added", "changed", "removed")
        }
        lines.append(
            "%s: %d added, %d changed, %d removed; clusters: %s"
            % (env, counts["added"], counts["changed"], counts["removed"], ", ".join(section["clusters"]) or "none")
        )
    lines.append("%d blocking finding(s)" % report["blocking"])
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(prog="krops-render-diff", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repo", default=os.getcwd(), help="Git repository (default: current directory)")
    parser.add_argument("--base", required=True, help="base revision (the pull request's target)")
    parser.add_argument("--head", default="HEAD", help="head revision (default: HEAD)")
    parser.add_argument(
        "--no-merge-base",
        dest="merge_base",
        action="store_false",
        help="compare with --base itself, not with the merge base of --base and --head",
    )
    parser.add_argument(
        "--environment", "-e", action="append", dest="environments", help="environment (repeatable; default: all)"
    )
    parser.add_argument(
        "--schema-location",
        help="schemas for the transition rules, folder or https template "
        "(default: $KROPS_SCHEMA_LOCATION, else schemas/crds of the head revision)",
    )
    parser.add_argument("--accept-file", help="file of acknowledged finding ids, one per line")
    parser.add_argument(
        "--accept-from-base",
        help="path of the accept file as committed at --base (read from Git, never from the checkout)",
    )
    parser.add_argument(
        "--deadline", type=float, default=render.DEFAULT_DEADLINE, help="seconds the whole run may take (default 300)"
    )
    parser.add_argument(
        "--memory-limit",
        default="",
        help="address space of one kustomize run, e.g. 2Gi (default: $KROPS_RENDER_MEMORY_LIMIT, else 2Gi)",
    )
    parser.add_argument(
        "--label", action="append", dest="labels", default=[], help="a label of the pull request (repeatable)"
    )
    parser.add_argument("--labels", dest="label_list", default="", help="labels of the pull request, comma separated")
    parser.add_argument("--accept-label", default=DEFAULT_ACCEPT_LABEL, help="label acknowledging every finding")
    parser.add_argument("--no-cel", dest="cel", action="store_false", help="skip the transition (oldSelf) CEL rules")
    parser.add_argument("--format", choices=("text", "markdown", "json"), default="text", help="what stdout shows")
    parser.add_argument("--markdown-out", help="also write the Markdown comment to this file")
    parser.add_argument("--json-out", help="also write the JSON report to this file")
    args = parser.parse_args(argv)
    labels = list(args.labels) + [x.strip() for x in args.label_list.split(",") if x.strip()]
    try:
        report = run(
            args.repo,
            args.base,
            args.head,
            args.merge_base,
            args.environments,
            args.schema_location,
            args.accept_file,
            labels,
            args.accept_label,
            args.cel,
            accept_from_base=args.accept_from_base,
            deadline=args.deadline,
            memory=render.memory_limit({"KROPS_RENDER_MEMORY_LIMIT": args.memory_limit} if args.memory_limit else None),
        )
    except (RenderDiffError, render.RenderError) as exc:
        sys.stderr.write(f"ERROR: {exc}\n")
        return 2
    rendered = {
        "json": json.dumps(report, indent=2, default=list) + "\n",
        "markdown": markdown(report),
        "text": "\n".join(text_lines(report)) + "\n",
    }
    for path, fmt in ((args.markdown_out, "markdown"), (args.json_out, "json")):
        if path:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(rendered[fmt])
    sys.stdout.write(rendered[args.format])
    return 1 if report["blocking"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
