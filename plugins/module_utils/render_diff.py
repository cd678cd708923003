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

from ansible_collections.krops.platform.plugins.module_utils import cli
from ansible_collections.krops.platform.plugins.module_utils import errors
from ansible_collections.krops.platform.plugins.module_utils import render
from ansible_collections.krops.platform.plugins.module_utils.render_diff_compare import (
    DiffFinding,
    compare,
    label,
    object_key,
)
from ansible_collections.krops.platform.plugins.module_utils.render_diff_report import markdown, text_lines
from ansible_collections.krops.platform.plugins.module_utils import validate
from ansible_collections.krops.platform.plugins.module_utils import validate_schema

DEFAULT_ACCEPT_LABEL = "render-diff/accept"


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


def _collect_env(env, out):
    """validate's per-environment state -> objects keyed by identity, attributed to what applies them.

    A directory is applied by the Flux Kustomization whose spec.path it is (the sync path by the
    bootstrap's flux-system one), or by a FluxInstance whose spec.sync.path it is (on the cluster
    that FluxInstance runs in). Objects of a directory nothing applies are not deployed: they are
    left out (and listed), so a Kustomization removed from the tree shows its objects as removed.
    """
    owners = _owners(env)
    objects, unapplied = {}, set()
    for item in env.items:
        if item.fallback:
            continue
        owner = owners.get(item.directory)
        if owner is None:
            unapplied.add(item.directory)
            continue
        key = object_key(item.obj)
        objects.setdefault(key, _Obj(key, item.obj, owner[0], item.file, item.virtual, owner[1], item.directory))
    renders = [f for f in env.findings if f.rule == "render"]
    out[env.name] = {
        "objects": objects,
        "plaintext": _plaintext(env),
        "failed": {os.path.dirname(f.file) for f in renders},
        "unapplied": unapplied,
        "render_failures": [{"file": f.file, "message": f.message} for f in renders],
    }


def _owners(env):
    """{directory: (what applies it, the cluster it lands on)}: the sync path, each Flux Kustomization's
    spec.path, and each FluxInstance's spec.sync.path (on the cluster of the directory that holds it)."""
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
    return owners


def _plaintext(env):
    """{(file, object label)} of the Secrets committed unencrypted: raw documents outside *.sops.yaml without
    sops metadata, and rendered Secrets (not generated) with data and no sops metadata."""
    plaintext = set()
    for rel, doc in env.raw_docs:
        if (
            doc.get("kind") == "Secret"
            and not rel.endswith((".sops.yaml", ".sops.yml"))
            and not isinstance(doc.get("sops"), dict)
        ):
            plaintext.add((rel, label(object_key(doc))))
    for item in env.items:
        if (
            item.kind == "Secret"
            and not item.virtual
            and not isinstance(item.obj.get("sops"), dict)
            and (item.obj.get("data") or item.obj.get("stringData"))
        ):
            plaintext.add((item.file, label(object_key(item.obj))))
    return plaintext


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


def run(repo, base, head="HEAD", deadline=None, memory=None, **options):
    """The report (dict) of what changes from ``base`` to ``head`` in the Git repository ``repo``.

    ``options``: ``use_merge_base``, ``environments``, ``schema_location``,
    ``accept_file``, ``labels``, ``accept_label``, ``cel``, ``renderer`` and ``accept_from_base``, the accept
    file's path as committed at ``base`` (the workflow's way); see _run.
    ``deadline`` (s, default 300) and ``memory`` (bytes per kustomize run) bound the run (render.bounded).
    """
    try:
        with render.bounded("render_diff", deadline, memory):
            return _run(repo, base, head, **options)
    except render.DeadlineExceeded as exc:
        raise RenderDiffError(str(exc)) from None


def _refuse_unknown(environments, present):
    """An environment asked for that neither revision has is a typo, not an empty comparison."""
    for name in environments or ():
        if name not in present:
            raise RenderDiffError(
                f"environment {name!r} is at neither revision (no mgmt/{name}); the revisions have: "
                f"{', '.join(sorted(present)) or 'none'}; name one of them, or none to compare all"
            )


def _run(
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
        revisions = (("base", base_sha), ("head", head_sha))
        for name, sha in revisions:  # render_<name> counts the extraction too
            t0 = time.monotonic()
            extract(repo, sha, os.path.join(work, name))
            timings[f"render_{name}"] = time.monotonic() - t0
        # before any render: a name neither revision has is refused at once
        present = {e for name, _sha in revisions for e in validate.environments_present(os.path.join(work, name))}
        _refuse_unknown(environments, present)
        for name, _sha in revisions:
            t0 = time.monotonic()
            try:
                states[name] = render_revision(os.path.join(work, name), environments, no_schemas, renderer)
            except RenderDiffError as exc:
                states[name], errors[name] = {}, str(exc)
            timings[f"render_{name}"] = round(timings[f"render_{name}"] + time.monotonic() - t0, 3)
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
            use_merge_base=args.merge_base,
            environments=args.environments,
            schema_location=args.schema_location,
            accept_file=args.accept_file,
            labels=labels,
            accept_label=args.accept_label,
            cel=args.cel,
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
